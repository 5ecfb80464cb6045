//! The no-op hook engine the engine and metrics benchmarks drive: two names for one no-op
//! executable, alternated so adjacent tasks never merge, through one queue of a fresh engine.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun::hooks::HookProcess;
use bosun_addon::State;
use bosun_addon::context_stub::ContextStub;
use bosun_addon::engine::{Engine, EngineArgs};
use bosun_addon::global_hooks::GlobalHook;
use bosun_addon::hook_config::{HookKind, parse};
use bosun_addon::mailbox::Mailboxes;
use bosun_addon::ports::{BoxFut, ConfigStore, PortError};
use serde_json::json;

/// No ConfigMap: the benchmark has no cluster.
pub struct NoConfigMap;

impl ConfigStore for NoConfigMap {
    fn load(&self) -> BoxFut<'_, Result<Option<BTreeMap<String, String>>, PortError>> {
        Box::pin(async { Ok(None) })
    }
    fn save(&self, _key: String, _yaml: String) -> BoxFut<'_, Result<(), PortError>> {
        Box::pin(async { Ok(()) })
    }
    fn remove(&self, _key: String) -> BoxFut<'_, Result<(), PortError>> {
        Box::pin(async { Ok(()) })
    }
}

/// No-op hook tasks per second through a fresh engine journaling in `dir`, the hooks' temp
/// files in `tmp`.
pub async fn round(
    dir: &std::path::Path,
    tmp: &std::path::Path,
    hook: &std::path::Path,
    tasks: usize,
) -> f64 {
    let (sink, restored): (_, State) =
        bosun::addon::journal::open(&dir.join("journal")).expect("journal");
    let runner = HookProcess {
        tmp_dir: tmp.to_path_buf(),
        keep_tmp_files: false,
        timeout: Duration::from_secs(60),
        working_dir: None,
        logging: Default::default(),
    };
    let config = parse(
        "configVersion: v1\nschedule: [{crontab: '@daily'}]",
        HookKind::Global,
        "noop.sh",
    )
    .expect("config");
    let hooks = ["noop-a.sh", "noop-b.sh"]
        .into_iter()
        .map(|name| GlobalHook {
            name: name.into(),
            path: hook.to_path_buf(),
            config: config.clone(),
        })
        .collect();
    let mailboxes = Mailboxes::default();
    let engine = Engine::start(EngineArgs {
        global_hooks: hooks,
        static_global: json!({}),
        global_schemas: Default::default(),
        initial_config: None,
        restored,
        ports: bosun_addon::ports::Ports {
            journal: sink,
            executor: Arc::new(runner),
            config_store: Arc::new(NoConfigMap),
            releases: Arc::new(bosun::addon::releases::NoHelm("no charts".into())),
            bindings: Arc::new(bosun_addon::ports::NoKubernetes("no Kubernetes API".into())),
            patcher: Arc::new(bosun_addon::ports::NoKubernetes("no Kubernetes API".into())),
        },
        max_attempts: None,
        // As bosun run: on unless QUEUE_ACTIONS_METRICS=no.
        queue_action_metrics: std::env::var("QUEUE_ACTIONS_METRICS").as_deref() != Ok("no"),
        mailboxes: mailboxes.clone(),
        gate: Default::default(),
        modules: Vec::new(),
        monitor_interval: Duration::from_secs(270),
        ignore_releases: Vec::new(),
    })
    .await
    .expect("engine");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !engine.converged() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let batch: Vec<_> = (0..tasks)
        .map(|i| {
            engine.global_hook_task(
                if i % 2 == 0 { "noop-a.sh" } else { "noop-b.sh" },
                "bench",
                "schedule",
                vec![ContextStub::Schedule {
                    binding: "schedule".into(),
                    index: None,
                    group: None,
                }],
            )
        })
        .collect();
    // The queue's mailbox counts the tasks it finished and stamps each end (unix ms): the
    // round ends at the last task's end, found by a look every 20 ms (a look every
    // millisecond was itself a wake-up per millisecond on the cores the hooks need; a queue
    // dump every 25 ms used to add up to 30 µs per task to a round of 400 tasks).
    let queue = mailboxes.handle("queue/bench");
    let before = queue.stats().jobs_finished;
    let unix_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    };
    let idle = || async {
        let queues = engine.queues().await;
        queues
            .iter()
            .any(|q| q.name == "bench" && q.tasks.is_empty() && q.running.is_none())
    };
    let started = Instant::now();
    let started_ms = unix_ms();
    engine.enqueue(batch);
    let mut polls = 0u64;
    let last_end_ms = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let stats = queue.stats();
        let last = stats.recent.back().map(|h| h.finished_at_ms);
        if stats.jobs_finished >= before + tasks as u64 {
            break last;
        }
        polls += 1;
        // Merged tasks would never be counted: a dump now and then ends the round anyway.
        if polls.is_multiple_of(10) && idle().await {
            break last;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the queue did not finish {tasks} tasks in 10 minutes"
        );
    };
    let tasks_done = Duration::from_millis(last_end_ms.unwrap_or(started_ms) - started_ms)
        .max(Duration::from_millis(1));
    // Temp files are removed off the queue's path; the round is over when they are gone, so
    // a backlog of removals is neither hidden nor left to slow the next round down.
    let took = temp_files_gone(tmp, started).await.unwrap_or(tasks_done);
    // Then the last task's end is journaled and the queue is idle.
    while !idle().await {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tasks as f64 / took.as_secs_f64()
}

/// Waits until `tmp` holds no file (the hook runner's removals have caught up): `None` when
/// it held none at the first look, else the time from `started` until it was empty.
pub async fn temp_files_gone(tmp: &std::path::Path, started: Instant) -> Option<Duration> {
    let mut first = true;
    loop {
        let empty = std::fs::read_dir(tmp).map_or(true, |mut d| d.next().is_none());
        if empty {
            return (!first).then(|| started.elapsed());
        }
        first = false;
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "temp files still in {} after 10 minutes",
            tmp.display()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
