//! The no-op hook engine the engine and metrics benchmarks drive: two names for one no-op
//! executable, alternated so adjacent tasks never merge, through one queue of a fresh engine.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun::hooks::HookProcess;
use bosun_addon::State;
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

/// No-op hook tasks per second through a fresh engine.
pub async fn round(dir: &std::path::Path, hook: &std::path::Path, tasks: usize) -> f64 {
    let (sink, restored): (_, State) =
        bosun::addon::journal::open(&dir.join("journal")).expect("journal");
    let runner = HookProcess {
        tmp_dir: dir.join("tmp"),
        keep_tmp_files: false,
        timeout: Duration::from_secs(60),
        working_dir: None,
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
        mailboxes: Mailboxes::default(),
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
                vec![json!({"binding": "schedule", "type": "Schedule"})],
            )
        })
        .collect();
    let started = Instant::now();
    engine.enqueue(batch);
    loop {
        let queues = engine.queues().await;
        let busy = queues
            .iter()
            .any(|q| q.name == "bench" && (!q.tasks.is_empty() || q.running.is_some()));
        if queues.iter().any(|q| q.name == "bench") && !busy {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tasks as f64 / started.elapsed().as_secs_f64()
}
