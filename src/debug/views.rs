//! What the debug endpoints show, as data (for JSON and YAML) and as text, without the
//! engine: queue dumps in the reference's shape and words, and bosun's actor mailboxes.

use std::collections::BTreeMap;
use std::time::Duration;

use bosun_addon::engine::QueueDump;
use bosun_addon::mailbox::MailboxStats;
use bosun_runtime::queue::go_duration;
use serde_json::{Map, Value, json};

use bosun_runtime::clock::now_ms;

/// Output formats, chosen by the path's extension (none means text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Readable text; data without a text form is written as JSON, as the reference does.
    Text,
    /// Compact JSON.
    Json,
    /// YAML.
    Yaml,
}

impl Format {
    /// `name.json` → (`name`, JSON); `name` → (`name`, text). Other extensions are part of
    /// the name.
    pub fn split(path: &str) -> (&str, Format) {
        let last = path.rsplit('/').next().unwrap_or_default();
        if let Some((stem, ext)) = last.rsplit_once('.') {
            let format = match ext {
                "json" => Some(Format::Json),
                "yaml" | "yml" => Some(Format::Yaml),
                "text" | "txt" => Some(Format::Text),
                _ => None,
            };
            if let Some(f) = format {
                let cut = path.len() - last.len() + stem.len();
                return (&path[..cut], f);
            }
        }
        (path, Format::Text)
    }

    /// The extension the endpoints expect.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Yaml => "yaml",
        }
    }
}

/// An answer: data, and its text form when it has one.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    /// What JSON and YAML show.
    pub data: Value,
    /// What text shows (`None`: the data as JSON).
    pub text: Option<String>,
}

impl View {
    /// Data without a text form.
    pub fn data(data: Value) -> View {
        View { data, text: None }
    }

    /// Renders in `format`; returns the body and its content type.
    pub fn render(&self, format: Format) -> Result<(String, &'static str), String> {
        match (format, &self.text) {
            (Format::Text, Some(text)) => Ok((text.clone(), "text/plain; charset=utf-8")),
            (Format::Text | Format::Json, _) => serde_json::to_string(&self.data)
                .map(|s| (s, "application/json"))
                .map_err(|e| format!("cannot write JSON: {e}")),
            (Format::Yaml, _) => serde_saphyr::to_string(&self.data)
                .map(|s| (s, "application/yaml"))
                .map_err(|e| format!("cannot write YAML: {e}")),
        }
    }
}

fn pluralize(n: usize, zero: &str, one: &str, many: &str) -> String {
    if n == 0 && !zero.is_empty() {
        return zero.to_string();
    }
    format!("{n} {}", if n == 1 { one } else { many })
}

fn queue_entry(q: &QueueDump) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(q.name));
    m.insert("tasksCount".into(), json!(q.tasks.len()));
    if !q.status.is_empty() {
        m.insert("status".into(), json!(q.status));
    }
    if !q.lines.is_empty() {
        let tasks: Vec<Value> = q
            .lines
            .iter()
            .enumerate()
            .map(|(i, d)| json!({"index": i + 1, "description": d}))
            .collect();
        m.insert("tasks".into(), Value::Array(tasks));
    }
    Value::Object(m)
}

fn queue_text(q: &QueueDump) -> String {
    let mut s = format!(
        "Queue '{}': length {}, status: '{}'\n\n",
        q.name,
        q.tasks.len(),
        q.status
    );
    for (i, d) in q.lines.iter().enumerate() {
        s.push_str(&format!("{:2}. {d}\n", i + 1));
    }
    s
}

fn parked(dumps: &[QueueDump]) -> Vec<(String, String)> {
    dumps
        .iter()
        .flat_map(|q| {
            q.parked
                .iter()
                .map(|t| (q.name.clone(), bosun_addon::queue::describe(t)))
        })
        .collect()
}

fn parked_text(parked: &[(String, String)]) -> String {
    if parked.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\nParked tasks ({}), not retried until bosun restarts:\n",
        parked.len()
    );
    for (queue, d) in parked {
        s.push_str(&format!("- {queue}: {d}\n"));
    }
    s
}

fn parked_data(parked: &[(String, String)]) -> Value {
    Value::Array(
        parked
            .iter()
            .map(|(q, d)| json!({"queue": q, "description": d}))
            .collect(),
    )
}

/// `/queue/list`: active queues (`main` first, then by name), empty ones when asked, and
/// the summary, in the reference's shape and words. Parked tasks (bosun's
/// `BOSUN_TASK_MAX_ATTEMPTS`) are listed after the queues when there are any.
pub fn queue_list(dumps: &[QueueDump], show_empty: bool) -> View {
    let mut sorted: Vec<&QueueDump> = dumps.iter().collect();
    sorted.sort_by(|a, b| (a.name != "main", &a.name).cmp(&(b.name != "main", &b.name)));
    let (active, empty): (Vec<&QueueDump>, Vec<&QueueDump>) =
        sorted.into_iter().partition(|q| !q.tasks.is_empty());
    let main = dumps.iter().find(|q| q.name == "main");
    let main_tasks = main.map_or(0, |q| q.tasks.len());
    let others = dumps.iter().filter(|q| q.name != "main");
    let other_active = others.clone().filter(|q| !q.tasks.is_empty()).count();
    let other_empty = others.clone().filter(|q| q.tasks.is_empty()).count();
    let other_tasks: usize = others.map(|q| q.tasks.len()).sum();
    let total = main_tasks + other_tasks;
    // As the reference: a lone empty main queue is not reported as an empty queue.
    let only_main = dumps.iter().all(|q| q.name == "main");
    let show_empty = show_empty && (empty.is_empty() || !only_main);
    let parked = parked(dumps);

    let mut data = Map::new();
    data.insert(
        "active".into(),
        Value::Array(active.iter().map(|q| queue_entry(q)).collect()),
    );
    if show_empty && !empty.is_empty() {
        data.insert(
            "empty".into(),
            Value::Array(
                empty
                    .iter()
                    .map(|q| json!({"name": q.name, "tasksCount": 0}))
                    .collect(),
            ),
        );
    }
    data.insert(
        "summary".into(),
        json!({
            "mainQueueTasks": main_tasks,
            "otherQueues": {"active": other_active, "empty": other_empty, "tasks": other_tasks},
            "totalTasks": total,
        }),
    );
    if !parked.is_empty() {
        data.insert("parked".into(), parked_data(&parked));
    }

    let mut text = String::new();
    for (i, q) in active.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        text.push_str(&queue_text(q));
    }
    if show_empty {
        text.push_str(&format!("\nEmpty queues ({}):\n", empty.len()));
        for q in &empty {
            text.push_str(&format!("- {}\n", q.name));
        }
    }
    text.push_str(&parked_text(&parked));
    if dumps.is_empty() {
        text.push_str("Summary:\n  No queues.\n");
    } else {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str("Summary:\n");
        let mut other_count = dumps.len();
        if main.is_some() {
            other_count -= 1;
            text.push_str(&format!(
                "- 'main' queue: {}.\n",
                pluralize(main_tasks, "empty", "task", "tasks")
            ));
        }
        if other_count > 0 {
            text.push_str(&format!(
                "- {} ({other_active} active, {other_empty} empty): {}.\n",
                pluralize(other_count, "", "other queue", "other queues"),
                pluralize(other_tasks, "", "task", "tasks")
            ));
        }
        if total == 0 {
            text.push_str("- no tasks to handle.\n");
        } else {
            text.push_str(&format!(
                "- total {} to handle.\n",
                pluralize(total, "", "task", "tasks")
            ));
        }
    }
    View {
        data: Value::Object(data),
        text: Some(text),
    }
}

/// `/queue/main`: the main queue alone, in the same shape as a `/queue/list` entry.
pub fn queue_main(main: Option<&QueueDump>) -> View {
    let Some(q) = main else {
        let data = json!({"name": "main", "tasksCount": 0, "status": "Queue is not created"});
        return View {
            data,
            text: Some("Queue 'main': length 0, status: 'Queue is not created'\n\n".into()),
        };
    };
    let parked = parked(std::slice::from_ref(q));
    let mut data = queue_entry(q);
    if !parked.is_empty() {
        data["parked"] = parked_data(&parked);
    }
    View {
        data,
        text: Some(queue_text(q) + &parked_text(&parked)),
    }
}

pub(crate) fn age(since_ms: u64, now: u64) -> String {
    go_duration(Duration::from_millis(now.saturating_sub(since_ms)))
}

/// The kinds of actors by the first segment of their mailboxes' names, as the subsystems
/// declare them ([`crate::host::SubsystemView::actor_kinds`]).
pub type ActorKinds = [(&'static str, &'static str)];

/// What kind of actor a mailbox name belongs to (`actor` when no subsystem says).
pub fn actor_kind(name: &str, kinds: &ActorKinds) -> &'static str {
    let first = name.split('/').next().unwrap_or_default();
    kinds
        .iter()
        .find(|(prefix, _)| *prefix == first)
        .map_or("actor", |(_, kind)| kind)
}

fn actor_data(name: &str, s: &MailboxStats, now: u64, kinds: &ActorKinds) -> Value {
    let pending: Vec<Value> = s
        .pending
        .iter()
        .map(|p| json!({"seq": p.seq, "summary": p.summary, "sentAtMs": p.sent_at_ms, "waitingMs": now.saturating_sub(p.sent_at_ms)}))
        .collect();
    let in_progress = s.in_progress.as_ref().map(|p| {
        json!({"summary": p.summary, "sinceMs": p.since_ms, "forMs": now.saturating_sub(p.since_ms)})
    });
    let jobs: Vec<Value> = s
        .jobs
        .iter()
        .map(|j| json!({"summary": j.summary, "sinceMs": j.since_ms, "forMs": now.saturating_sub(j.since_ms)}))
        .collect();
    json!({
        "name": name,
        "kind": actor_kind(name, kinds),
        "depth": s.pending.len(),
        "pending": pending,
        "inProgress": in_progress,
        "jobs": jobs,
        "counters": {
            "received": s.received,
            "handled": s.handled,
            "jobsFinished": s.jobs_finished,
            "maxHandlingMs": s.max_handling_ms,
        },
        "recent": s.recent,
    })
}

fn actor_text(
    name: &str,
    s: &MailboxStats,
    now: u64,
    with_recent: bool,
    kinds: &ActorKinds,
) -> String {
    let doing = match &s.in_progress {
        Some(p) => format!("handling '{}' for {}", p.summary, age(p.since_ms, now)),
        None => "idle".to_string(),
    };
    let mut t = format!(
        "Actor '{name}' ({}): {} pending, {doing}, {}\n",
        actor_kind(name, kinds),
        s.pending.len(),
        pluralize(
            s.jobs.len(),
            "no jobs running",
            "job running",
            "jobs running"
        )
    );
    for j in &s.jobs {
        t.push_str(&format!(
            "  job: {} (for {})\n",
            j.summary,
            age(j.since_ms, now)
        ));
    }
    for p in &s.pending {
        t.push_str(&format!(
            "  pending: {} (waiting {})\n",
            p.summary,
            age(p.sent_at_ms, now)
        ));
    }
    t.push_str(&format!(
        "  counters: received {}, handled {}, jobs finished {}, longest handling {}\n",
        s.received,
        s.handled,
        s.jobs_finished,
        go_duration(Duration::from_millis(s.max_handling_ms))
    ));
    if with_recent && !s.recent.is_empty() {
        t.push_str("  recent (newest last):\n");
        for r in &s.recent {
            t.push_str(&format!(
                "    - {} ago, took {}, {}: {}\n",
                age(r.finished_at_ms, now),
                go_duration(Duration::from_millis(r.duration_ms)),
                r.outcome,
                r.summary
            ));
        }
    }
    t
}

/// `/actors`: every actor's mailbox.
pub fn actors(snapshot: &BTreeMap<String, MailboxStats>, kinds: &ActorKinds) -> View {
    let now = now_ms();
    let list: Vec<Value> = snapshot
        .iter()
        .map(|(n, s)| actor_data(n, s, now, kinds))
        .collect();
    let pending: usize = snapshot.values().map(|s| s.pending.len()).sum();
    let busy = snapshot
        .values()
        .filter(|s| s.in_progress.is_some() || !s.jobs.is_empty())
        .count();
    let jobs: usize = snapshot.values().map(|s| s.jobs.len()).sum();
    let mut text = String::new();
    for (n, s) in snapshot {
        text.push_str(&actor_text(n, s, now, false, kinds));
    }
    text.push_str(&format!(
        "\nSummary: {}, {busy} busy, {pending} pending messages, {jobs} jobs running.\n",
        pluralize(snapshot.len(), "no actors", "actor", "actors")
    ));
    View {
        data: json!({
            "actors": list,
            "summary": {"actors": snapshot.len(), "busy": busy, "pending": pending, "jobs": jobs},
        }),
        text: Some(text),
    }
}

/// `/actors/<name>`: one actor's mailbox with its recent history.
pub fn actor(name: &str, stats: &MailboxStats, kinds: &ActorKinds) -> View {
    let now = now_ms();
    View {
        data: actor_data(name, stats, now, kinds),
        text: Some(actor_text(name, stats, now, true, kinds)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bosun_addon::events::{TaskId, TaskSpec};
    use bosun_addon::mailbox::MailboxHandle;
    use bosun_addon::state::QueuedTask;
    use bosun_addon::task::{AddonTask, HookRunParams};

    fn task(id: u64, queue: &str, description: &str, failures: u32) -> QueuedTask {
        QueuedTask {
            spec: TaskSpec {
                id: TaskId(id),
                queue: queue.into(),
                description: description.into(),
                kind: AddonTask::GlobalHookRun {
                    hook: "a.sh".into(),
                    run: HookRunParams::default(),
                },
            },
            attempts: failures,
            failures,
            last_error: if failures > 0 {
                "exit status 1".into()
            } else {
                String::new()
            },
            next_retry_at_ms: None,
        }
    }

    fn dump(name: &str, tasks: Vec<QueuedTask>, status: &str) -> QueueDump {
        QueueDump {
            name: name.into(),
            lines: tasks.iter().map(bosun_addon::queue::describe).collect(),
            tasks,
            parked: Vec::new(),
            running: None,
            status: status.into(),
        }
    }

    #[test]
    fn formats_come_from_the_extension() {
        assert_eq!(
            Format::split("/queue/list.json"),
            ("/queue/list", Format::Json)
        );
        assert_eq!(
            Format::split("/module/foo/values.yaml"),
            ("/module/foo/values", Format::Yaml)
        );
        assert_eq!(
            Format::split("/global/values"),
            ("/global/values", Format::Text)
        );
        assert_eq!(
            Format::split("/actors/queue/a.b"),
            ("/actors/queue/a.b", Format::Text)
        );
    }

    #[test]
    fn queue_list_has_the_reference_shape_and_text() {
        let dumps = vec![
            dump("zeta", vec![], ""),
            dump(
                "main",
                vec![
                    task(1, "main", "onStartup:a.sh", 2),
                    task(2, "main", "OperatorStartup", 0),
                ],
                "sleep after fail for 6s (3s left of 6s delay)",
            ),
            dump(
                "alpha",
                vec![task(3, "alpha", "schedule:b.sh", 0)],
                "run first task",
            ),
        ];
        let v = queue_list(&dumps, false);
        assert_eq!(
            v.data,
            json!({
                "active": [
                    {"name": "main", "tasksCount": 2, "status": "sleep after fail for 6s (3s left of 6s delay)", "tasks": [
                        {"index": 1, "description": "GlobalHookRun:main:onStartup:a.sh:failures 2:exit status 1"},
                        {"index": 2, "description": "GlobalHookRun:main:OperatorStartup"}
                    ]},
                    {"name": "alpha", "tasksCount": 1, "status": "run first task", "tasks": [
                        {"index": 1, "description": "GlobalHookRun:alpha:schedule:b.sh"}
                    ]}
                ],
                "summary": {"mainQueueTasks": 2, "otherQueues": {"active": 1, "empty": 1, "tasks": 1}, "totalTasks": 3}
            })
        );
        assert_eq!(
            v.text.as_deref(),
            Some(
                "Queue 'main': length 2, status: 'sleep after fail for 6s (3s left of 6s delay)'\n\n \
                 1. GlobalHookRun:main:onStartup:a.sh:failures 2:exit status 1\n \
                 2. GlobalHookRun:main:OperatorStartup\n\
                 \n\
                 Queue 'alpha': length 1, status: 'run first task'\n\n \
                 1. GlobalHookRun:alpha:schedule:b.sh\n\
                 \n\
                 Summary:\n\
                 - 'main' queue: 2 tasks.\n\
                 - 2 other queues (1 active, 1 empty): 1 task.\n\
                 - total 3 tasks to handle.\n"
            )
        );
        let with_empty = queue_list(&dumps, true);
        assert_eq!(
            with_empty.data["empty"],
            json!([{"name": "zeta", "tasksCount": 0}])
        );
        assert!(
            with_empty
                .text
                .unwrap_or_default()
                .contains("\nEmpty queues (1):\n- zeta\n")
        );
    }

    #[test]
    fn an_idle_operator_has_nothing_to_handle() {
        let v = queue_list(&[dump("main", vec![], "")], true);
        assert_eq!(
            v.text.as_deref(),
            Some("Summary:\n- 'main' queue: empty.\n- no tasks to handle.\n")
        );
        assert_eq!(v.data["active"], json!([]));
        assert!(v.data.get("empty").is_none());
        let main = queue_main(None);
        assert_eq!(main.data["status"], "Queue is not created");
    }

    #[test]
    fn actors_show_messages_jobs_and_history() {
        let h = MailboxHandle::default();
        let a = h.sent("Kick".into());
        h.begin(a);
        h.end();
        let _job = h.job_started("task GlobalHookRun:main:onStartup:a.sh".into());
        h.sent("Enqueue GlobalHookRun".into());
        let snapshot: BTreeMap<String, MailboxStats> =
            [("queue/main".to_string(), h.stats())].into();
        let kinds = [("queue", "queue")];
        let v = actors(&snapshot, &kinds);
        let q = &v.data["actors"][0];
        assert_eq!(q["kind"], "queue");
        assert_eq!(q["depth"], 1);
        assert_eq!(
            q["jobs"][0]["summary"],
            "task GlobalHookRun:main:onStartup:a.sh"
        );
        assert_eq!(q["recent"][0]["summary"], "Kick");
        assert_eq!(v.data["summary"]["jobs"], 1);
        let text = v.text.unwrap_or_default();
        assert!(
            text.starts_with("Actor 'queue/main' (queue): 1 pending, idle, 1 job running\n"),
            "{text}"
        );
        assert!(text.contains("  job: task GlobalHookRun:main:onStartup:a.sh (for "));
        let one = actor("queue/main", &h.stats(), &kinds);
        assert!(one.text.unwrap_or_default().contains("handled: Kick"));
    }
}
