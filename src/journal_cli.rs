//! `bosun journal …`: inspect a journal offline (works while a bosun holds it, by reading a
//! private copy) or, with `--live`, through a running bosun's debug socket: the timeline,
//! the state at any point, differences, one task's history, figures, verification and
//! repair.
//!
//! The views (`log`, `state`, `why`, `stats`) are computed here for both readers: the
//! command on a directory, and the debug server's `/journal/…` endpoints on the journal a
//! running bosun writes.
//!
//! ```text
//!   bosun journal log            ──► Journal::open_read_only(dir) ──► log_view ──► stdout
//!   bosun journal log --live     ──► GET /journal/log.text ──► debug server ──► log_view
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bosun_addon::{Event, State, TaskEvent, TaskId};
use bosun_journal::{Journal, JournalError, Record};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Map, Value, json};

use crate::debug::views::View;

/// Arguments of `bosun journal`.
#[derive(Debug, Args)]
pub struct JournalArgs {
    /// The journal directory.
    #[arg(
        long,
        global = true,
        env = "BOSUN_JOURNAL_DIR",
        default_value = "/var/lib/bosun/journal"
    )]
    pub journal_dir: PathBuf,
    #[command(subcommand)]
    pub command: JournalCommand,
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One readable line per item.
    Text,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Where a view is read: the journal directory (the default) or a running bosun.
#[derive(Debug, Default, Args)]
pub struct LiveArgs {
    /// Read the journal of the running bosun through its debug socket instead of the
    /// directory.
    #[arg(long)]
    pub live: bool,
    /// The debug socket to read through (implies `--live`) [default:
    /// $ADDON_OPERATOR_DEBUG_UNIX_SOCKET, $DEBUG_UNIX_SOCKET, else
    /// /var/run/addon-operator/debug.socket].
    #[arg(long = "debug-unix-socket", value_name = "PATH")]
    pub debug_unix_socket: Option<PathBuf>,
}

impl LiveArgs {
    /// The socket to read through, when live.
    fn socket(&self) -> Option<PathBuf> {
        if let Some(path) = &self.debug_unix_socket {
            return Some(path.clone());
        }
        self.live.then(|| {
            crate::debug::socket_from_env(std::path::Path::new(crate::debug::DEFAULT_SOCKET))
        })
    }
}

/// `bosun journal` subcommands.
#[derive(Debug, Subcommand)]
pub enum JournalCommand {
    /// The timeline, one line per event (oldest first).
    Log {
        /// From this sequence number, RFC 3339 time, or age (`10m` = ten minutes ago).
        #[arg(long)]
        since: Option<String>,
        /// Up to this sequence number, time or age.
        #[arg(long)]
        until: Option<String>,
        /// Only events of this module.
        #[arg(long)]
        module: Option<String>,
        /// Only events of tasks in this queue.
        #[arg(long)]
        queue: Option<String>,
        /// Only the last N matching events (all when absent or 0).
        #[arg(long)]
        limit: Option<usize>,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Format,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// The state rebuilt at a point: values per scope, modules, queues.
    State {
        /// Sequence number, time or age (default: the end).
        #[arg(long)]
        at: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Format,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// What changed in the state between two points.
    Diff {
        /// First point (sequence number, time or age).
        a: String,
        /// Second point.
        b: String,
    },
    /// The history of one task: attempts, errors, retry times.
    Why {
        /// Task id, e.g. `t42`.
        task: String,
        /// Output format (`json`: one object per line, as `log`).
        #[arg(short, long, value_enum, default_value = "text")]
        output: Format,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// Counts per event type, size, oldest/newest, snapshots.
    Stats {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Format,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// Checks every record's checksum and the numbering.
    Verify,
    /// Drops corrupt records so the journal opens again (stop bosun first).
    Repair,
}

/// Why a view could not be computed; the debug server answers 400, 404 and 500.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// A parameter is not understood (a point, a task id, a limit).
    #[error("{0}")]
    BadRequest(String),
    /// The thing asked about is not in the journal.
    #[error("{0}")]
    NotFound(String),
    /// The journal could not be read.
    #[error("{0}")]
    Failed(String),
}

impl From<JournalError> for ViewError {
    fn from(e: JournalError) -> ViewError {
        ViewError::Failed(e.to_string())
    }
}

impl From<serde_json::Error> for ViewError {
    fn from(e: serde_json::Error) -> ViewError {
        ViewError::Failed(format!("cannot write JSON: {e}"))
    }
}

/// What `log` selects: points as the command line takes them (sequence number, RFC 3339
/// time or age), a module, a queue, and how many of the newest matching events to keep.
#[derive(Clone, Debug, Default)]
pub struct LogQuery {
    /// From this point.
    pub since: Option<String>,
    /// Up to this point.
    pub until: Option<String>,
    /// Only events of this module (its own and its tasks').
    pub module: Option<String>,
    /// Only events of tasks in this queue.
    pub queue: Option<String>,
    /// Only the last N (`None` or 0: all).
    pub limit: Option<usize>,
}

/// Runs `bosun journal …`.
pub fn run(args: JournalArgs) -> anyhow::Result<()> {
    let dir = &args.journal_dir;
    let mut out = std::io::stdout().lock();
    match args.command {
        JournalCommand::Repair => {
            let dropped = bosun_journal::repair(dir)?;
            if dropped.is_empty() {
                println!("{}: no corrupt records", dir.display());
            } else {
                println!("{}: dropped corrupt records {:?}", dir.display(), dropped);
            }
            Ok(())
        }
        JournalCommand::Log {
            since,
            until,
            module,
            queue,
            limit,
            output,
            live,
        } => {
            let query = LogQuery {
                since,
                until,
                module,
                queue,
                limit: Some(limit.unwrap_or(0)),
            };
            let view = read(dir, &live, &log_endpoint(&query), output, |j| {
                log_view(j, &query)
            })?;
            print_lines(&view, output, &mut out)
        }
        JournalCommand::State { at, output, live } => {
            let endpoint = match &at {
                Some(at) => format!("/journal/state.?at={}", encode(at)),
                None => "/journal/state.".into(),
            };
            let view = read(dir, &live, &endpoint, Format::Json, |j| {
                state_view(j, at.as_deref())
            })?;
            let output = if output == Format::Text {
                Format::Yaml
            } else {
                output
            };
            print_value(&view.data, output, &mut out)
        }
        JournalCommand::Why { task, output, live } => {
            let id = parse_task(&task)?;
            let view = read(dir, &live, &format!("/journal/why/{id}."), output, |j| {
                why_view(j, id)
            })?;
            print_lines(&view, output, &mut out)
        }
        JournalCommand::Stats { output, live } => {
            let view = read(dir, &live, "/journal/stats.", output, stats_view)?;
            match (output, &view.text) {
                (Format::Text, Some(text)) => Ok(write!(out, "{text}")?),
                _ => print_value(&view.data, output, &mut out),
            }
        }
        JournalCommand::Diff { a, b } => {
            let journal = open(dir)?;
            let (pa, pb) = (point(&journal, Some(&a))?, point(&journal, Some(&b))?);
            let (sa, sb) = (
                serde_json::to_value(state_at(&journal, pa)?)?,
                serde_json::to_value(state_at(&journal, pb)?)?,
            );
            let patch = json_patch::diff(&sa, &sb);
            if patch.0.is_empty() {
                writeln!(out, "no differences")?;
            }
            for op in patch.0 {
                writeln!(out, "{}", describe_op(&op))?;
            }
            Ok(())
        }
        JournalCommand::Verify => {
            let report = open(dir)?.verify()?;
            if report.ok() {
                writeln!(
                    out,
                    "{}: {} records, all checksums valid, no gaps",
                    dir.display(),
                    report.checked
                )?;
                Ok(())
            } else {
                for (seq, reason) in &report.corrupt {
                    writeln!(out, "record {seq}: {reason}")?;
                }
                for (a, b) in &report.gaps {
                    writeln!(
                        out,
                        "gap: records {}..{} missing",
                        a + 1,
                        b.saturating_sub(1)
                    )?;
                }
                bail!(
                    "{}: {} corrupt record(s), {} gap(s); `bosun journal repair` drops corrupt records",
                    dir.display(),
                    report.corrupt.len(),
                    report.gaps.len()
                )
            }
        }
    }
}

/// A view, computed on the directory's journal, or (live) asked of the running bosun:
/// `endpoint` is its path with the extension left out after the dot (`/journal/stats.`,
/// `/journal/log.?limit=0`); text comes as the server renders it, the rest as JSON.
fn read(
    dir: &std::path::Path,
    live: &LiveArgs,
    endpoint: &str,
    output: Format,
    offline: impl FnOnce(&Journal<Event>) -> Result<View, ViewError>,
) -> anyhow::Result<View> {
    let Some(socket) = live.socket() else {
        return Ok(offline(&open(dir)?)?);
    };
    let ext = if output == Format::Text {
        "text"
    } else {
        "json"
    };
    let path = match endpoint.split_once('?') {
        Some((route, query)) => format!("{route}{ext}?{query}"),
        None => format!("{endpoint}{ext}"),
    };
    let body = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(crate::debug::client::get(&socket, &path))?;
    if output == Format::Text {
        return Ok(View {
            data: Value::Null,
            text: Some(body),
        });
    }
    let data: Value = serde_json::from_str(&body)
        .with_context(|| format!("{path}: the debug socket did not answer JSON"))?;
    Ok(View::data(data))
}

fn open(dir: &std::path::Path) -> anyhow::Result<Journal<Event>> {
    Journal::open_read_only(dir).with_context(|| format!("cannot open journal {}", dir.display()))
}

fn parse_task(s: &str) -> Result<TaskId, ViewError> {
    s.parse()
        .map_err(|e: bosun_runtime::task::InvalidTaskId| ViewError::BadRequest(e.to_string()))
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    let mut s = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// The endpoint of a `log` query (extension left out, as [`read`] takes it).
fn log_endpoint(query: &LogQuery) -> String {
    let mut params = vec![format!("limit={}", query.limit.unwrap_or(0))];
    for (name, value) in [
        ("since", &query.since),
        ("until", &query.until),
        ("module", &query.module),
        ("queue", &query.queue),
    ] {
        if let Some(v) = value {
            params.push(format!("{name}={}", encode(v)));
        }
    }
    format!("/journal/log.?{}", params.join("&"))
}

use std::io::Write;

/// A point in the journal: a sequence number, an RFC 3339 time, or an age.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Point {
    Seq(u64),
    Time(u64),
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn parse_point(s: &str) -> Result<Point, ViewError> {
    if let Ok(seq) = s.parse::<u64>() {
        return Ok(Point::Seq(seq));
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(Point::Time(
            t.duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        ));
    }
    if let Ok(age) = humantime::parse_duration(s) {
        return Ok(Point::Time(now_ms().saturating_sub(age.as_millis() as u64)));
    }
    Err(ViewError::BadRequest(format!(
        "{s:?} is not a point in the journal: expected a sequence number (42), a time (2026-11-22T10:00:00Z) or an age (10m)"
    )))
}

/// Resolves a point to a sequence number (times: the last record at or before it).
fn point(journal: &Journal<Event>, s: Option<&str>) -> Result<Option<u64>, ViewError> {
    let Some(s) = s else { return Ok(None) };
    Ok(Some(match parse_point(s)? {
        Point::Seq(seq) => seq,
        Point::Time(t) => {
            let mut last = 0;
            for r in journal.raw_from(0) {
                let r = r?;
                if r.time_ms > t {
                    break;
                }
                last = r.seq;
            }
            last
        }
    }))
}

fn state_at(journal: &Journal<Event>, at: Option<u64>) -> Result<State, ViewError> {
    let (state, _) = journal.replay::<State, _>(at, true, |s, r| s.apply(&r.event))?;
    Ok(state)
}

fn time(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// One readable line describing an event.
pub fn summary(e: &Event) -> String {
    match e {
        Event::ValuesPatched {
            scope,
            layer,
            patch,
            source,
        } => {
            let ops: Vec<String> = patch.0.iter().map(describe_op).collect();
            format!(
                "{scope} {layer:?} values patched by {source}: {}",
                ops.join("; ")
            )
        }
        Event::ValuesSet {
            scope,
            layer,
            values,
            source,
        } => format!("{scope} {layer:?} values set by {source}: {values}"),
        Event::Task(TaskEvent::TaskEnqueued { task, position }) => {
            let at = match position {
                bosun_addon::Position::Head => "at the head".to_string(),
                bosun_addon::Position::Tail => "at the tail".to_string(),
                bosun_addon::Position::After(t) => format!("after {t}"),
                bosun_addon::Position::Before(t) => format!("before {t}"),
            };
            format!(
                "{} {}:{}:{} queued {at}",
                task.id,
                task.kind.task_type().as_str(),
                task.queue,
                task.description
            )
        }
        Event::Task(TaskEvent::TaskStarted { id, attempt }) => {
            format!("{id} started (attempt {attempt})")
        }
        Event::Task(TaskEvent::TaskSucceeded { id }) => format!("{id} succeeded"),
        Event::Task(TaskEvent::TaskFailed {
            id,
            error,
            failures,
            next_retry_at_ms,
        }) => {
            format!(
                "{id} failed (failures {failures}), retry at {}: {error}",
                time(*next_retry_at_ms)
            )
        }
        Event::Task(TaskEvent::TaskMerged { id, into }) => format!("{id} merged into {into}"),
        Event::Task(TaskEvent::TaskDropped { id, reason }) => format!("{id} dropped: {reason}"),
        Event::Task(TaskEvent::TaskParked { id, reason }) => {
            format!("{id} parked after too many attempts: {reason}")
        }
        Event::ModuleEnabled { module, reason } => format!("module {module} enabled ({reason})"),
        Event::ModuleDisabled { module, reason } => format!("module {module} disabled ({reason})"),
        Event::ModulePhase { module, phase, .. } => format!("module {module} phase {phase}"),
        Event::ReleaseApplied {
            module,
            revision,
            checksum,
        } => format!("release {module} revision {revision} applied (checksum {checksum})"),
        Event::ReleaseDeleted { module } => format!("release {module} deleted"),
        Event::ModuleFlagsSet { flags } => format!(
            "module flags from the ConfigMap: {}",
            flags
                .iter()
                .map(|(m, on)| format!("{m}={on}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Event::ConvergeStarted { reason } => format!("converge started ({reason})"),
        Event::ConvergeFinished => "converge finished".into(),
    }
}

fn describe_op(op: &json_patch::PatchOperation) -> String {
    let v = serde_json::to_value(op).unwrap_or(Value::Null);
    match v["value"] {
        Value::Null if v.get("value").is_none() => format!(
            "{} {}",
            v["op"].as_str().unwrap_or_default(),
            v["path"].as_str().unwrap_or_default()
        ),
        ref value => format!(
            "{} {} = {value}",
            v["op"].as_str().unwrap_or_default(),
            v["path"].as_str().unwrap_or_default()
        ),
    }
}

/// One timeline entry as data: the record, its event, a readable summary, and the task's
/// queue and module when the event is about a task (or a module).
fn entry(record: &Record<Event>, tasks: &HashMap<TaskId, (String, Option<String>)>) -> Value {
    let mut m = Map::new();
    m.insert("seq".into(), json!(record.seq));
    m.insert("time".into(), json!(time(record.time_ms)));
    m.insert("timeMs".into(), json!(record.time_ms));
    m.insert("type".into(), json!(record.event.type_name()));
    m.insert("summary".into(), json!(summary(&record.event)));
    let id = record.event.task();
    let info = id.and_then(|id| tasks.get(&id));
    if let Some(id) = id {
        m.insert("task".into(), json!(id.to_string()));
    }
    if let Some((queue, _)) = info {
        m.insert("queue".into(), json!(queue));
    }
    if let Some(module) = record
        .event
        .module()
        .or_else(|| info.and_then(|(_, m)| m.as_deref()))
    {
        m.insert("module".into(), json!(module));
    }
    m.insert(
        "event".into(),
        serde_json::to_value(&record.event).unwrap_or(Value::Null),
    );
    Value::Object(m)
}

fn log_line(e: &Value) -> String {
    format!(
        "{:>6} {} {:<16} {}\n",
        e["seq"].as_u64().unwrap_or_default(),
        e["time"].as_str().unwrap_or_default(),
        e["type"].as_str().unwrap_or_default(),
        e["summary"].as_str().unwrap_or_default()
    )
}

fn why_line(e: &Value) -> String {
    format!(
        "{:>6} {} {}\n",
        e["seq"].as_u64().unwrap_or_default(),
        e["time"].as_str().unwrap_or_default(),
        e["summary"].as_str().unwrap_or_default()
    )
}

/// `log` (`/journal/log`): the matching events, oldest first, as entries (data) and one
/// line each (text).
pub fn log_view(journal: &Journal<Event>, query: &LogQuery) -> Result<View, ViewError> {
    let from = point(journal, query.since.as_deref())?;
    let to = point(journal, query.until.as_deref())?;
    let limit = query.limit.filter(|n| *n > 0);
    let mut tasks: HashMap<TaskId, (String, Option<String>)> = HashMap::new();
    let mut entries: VecDeque<Value> = VecDeque::new();
    for r in journal.read_from(0) {
        let record = r?;
        if let Event::Task(TaskEvent::TaskEnqueued { task, .. }) = &record.event {
            tasks.insert(
                task.id,
                (task.queue.clone(), task.kind.module().map(String::from)),
            );
        }
        if from.is_some_and(|f| record.seq < f) {
            continue;
        }
        if to.is_some_and(|t| record.seq > t) {
            break;
        }
        let info = record.event.task().and_then(|id| tasks.get(&id));
        if let Some(m) = query.module.as_deref()
            && record.event.module() != Some(m)
            && info.and_then(|(_, tm)| tm.as_deref()) != Some(m)
        {
            continue;
        }
        if let Some(q) = query.queue.as_deref()
            && info.map(|(tq, _)| tq.as_str()) != Some(q)
        {
            continue;
        }
        entries.push_back(entry(&record, &tasks));
        if limit.is_some_and(|n| entries.len() > n) {
            entries.pop_front();
        }
    }
    Ok(View {
        text: Some(entries.iter().map(log_line).collect()),
        data: Value::Array(entries.into()),
    })
}

/// `state` (`/journal/state`): the state rebuilt at `at` (default: the end).
pub fn state_view(journal: &Journal<Event>, at: Option<&str>) -> Result<View, ViewError> {
    let at = point(journal, at)?;
    Ok(View::data(serde_json::to_value(state_at(journal, at)?)?))
}

/// `global patches` / `module patches` (`/global/patches`, `/module/<m>/patches`): the
/// memory values patches of a scope (`global` or a module name) as the reference lists
/// them, `[{"Operations": [...]}]`, compacted as they are replayed.
pub fn patches_view(journal: &Journal<Event>, scope: &str) -> Result<View, ViewError> {
    let state = state_at(journal, None)?;
    let ops = state
        .values
        .get(scope)
        .map(|v| v.memory.clone())
        .unwrap_or_default();
    let data = if ops.is_empty() {
        serde_json::json!([])
    } else {
        serde_json::json!([{ "Operations": ops }])
    };
    Ok(View::data(data))
}

/// `why` (`/journal/why/<tN>`): the events about one task (and the tasks merged into it).
pub fn why_view(journal: &Journal<Event>, id: TaskId) -> Result<View, ViewError> {
    let mut tasks: HashMap<TaskId, (String, Option<String>)> = HashMap::new();
    let mut entries = Vec::new();
    for r in journal.read_from(0) {
        let record = r?;
        if let Event::Task(TaskEvent::TaskEnqueued { task, .. }) = &record.event {
            tasks.insert(
                task.id,
                (task.queue.clone(), task.kind.module().map(String::from)),
            );
        }
        let about = record.event.task() == Some(id)
            || matches!(&record.event, Event::Task(TaskEvent::TaskMerged { into, .. }) if *into == id);
        if about {
            entries.push(entry(&record, &tasks));
        }
    }
    if entries.is_empty() {
        return Err(ViewError::NotFound(format!(
            "task {id} does not appear in the journal (its events may have been compacted into a snapshot)"
        )));
    }
    Ok(View {
        text: Some(entries.iter().map(why_line).collect()),
        data: Value::Array(entries),
    })
}

/// `stats` (`/journal/stats`): counts per event type, size, oldest/newest, snapshots.
pub fn stats_view(journal: &Journal<Event>) -> Result<View, ViewError> {
    let s = journal.stats()?;
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for r in journal.raw_from(0) {
        let r = r?;
        *counts
            .entry(r.event["type"].as_str().unwrap_or("unknown").to_string())
            .or_default() += 1;
    }
    let mut text = format!(
        "events:    {} (seq {} … {})\n",
        s.events,
        s.first_seq.unwrap_or(0),
        s.last_seq.unwrap_or(0)
    );
    text.push_str(&format!(
        "oldest:    {}\nnewest:    {}\n",
        s.first_time_ms.map(time).unwrap_or_else(|| "-".into()),
        s.last_time_ms.map(time).unwrap_or_else(|| "-".into())
    ));
    text.push_str(&format!(
        "size:      {} bytes of records, {} bytes on disk\n",
        s.record_bytes, s.disk_bytes
    ));
    text.push_str(&format!("snapshots: {:?}\n", s.snapshots));
    for (t, n) in &counts {
        text.push_str(&format!("  {t:<18} {n}\n"));
    }
    let data = json!({
        "events": s.events,
        "firstSeq": s.first_seq,
        "lastSeq": s.last_seq,
        "oldest": s.first_time_ms.map(time),
        "newest": s.last_time_ms.map(time),
        "recordBytes": s.record_bytes,
        "diskBytes": s.disk_bytes,
        "snapshots": s.snapshots,
        "byType": counts,
    });
    Ok(View {
        data,
        text: Some(text),
    })
}

/// Prints a list view: its text, or one JSON object per line.
fn print_lines(view: &View, output: Format, out: &mut impl Write) -> anyhow::Result<()> {
    if output == Format::Text {
        write!(out, "{}", view.text.as_deref().unwrap_or_default())?;
        return Ok(());
    }
    for e in view.data.as_array().into_iter().flatten() {
        writeln!(out, "{e}")?;
    }
    Ok(())
}

fn print_value(v: &Value, output: Format, out: &mut impl Write) -> anyhow::Result<()> {
    match output {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(v)?)?,
        Format::Yaml | Format::Text => write!(
            out,
            "{}",
            serde_saphyr::to_string(v).context("cannot render YAML")?
        )?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse() {
        assert_eq!(parse_point("42").ok(), Some(Point::Seq(42)));
        assert!(matches!(
            parse_point("2026-11-22T10:00:00Z"),
            Ok(Point::Time(_))
        ));
        assert!(matches!(parse_point("10m"), Ok(Point::Time(_))));
        let err = parse_point("yesterday-ish")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("sequence number"), "{err}");
    }

    #[test]
    fn live_queries_are_encoded() {
        let q = LogQuery {
            since: Some("2026-11-22T10:00:00+01:00".into()),
            module: Some("a b".into()),
            limit: Some(0),
            ..LogQuery::default()
        };
        assert_eq!(
            log_endpoint(&q),
            "/journal/log.?limit=0&since=2026-11-22T10%3A00%3A00%2B01%3A00&module=a%20b"
        );
    }
}
