//! The world an in-process engine runs in: every port faked (hooks, the ConfigMap, Helm,
//! bindings, the object patcher, the journal), shared across restarts, with the waits and
//! readings the scenario tests share. Waits poll with a deadline. The scenarios run on
//! tokio's paused clock: a queue's retry backoff (journaled as a wall-clock time, waited
//! for on tokio's clock) and the rate limits (`settings.executionMinInterval`) pass at once;
//! the schedules, which fire by the wall clock, run on the real one.

#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bosun_addon::engine::{Engine, EngineArgs};
use bosun_addon::fakes::{
    MemoryBindings, MemoryConfigMap, MemoryReleases, RecordingPatcher, ScriptedHooks, SeenRun,
};
use bosun_addon::global_hooks::GlobalHook;
use bosun_addon::hook_config::{HookKind, parse};
use bosun_addon::mailbox::Mailboxes;
use bosun_addon::modules::{ModuleDef, parse_config_map};
use bosun_addon::ports::{HookResult, HookRun, MemoryJournal, PortError, Ports};
use bosun_addon::{Event, State, TaskEvent};
use serde_json::{Value, json};

/// Everything outside the engine, shared across a restart (the cluster and the journal).
#[derive(Clone, Default)]
pub struct World {
    pub journal: MemoryJournal<Event>,
    pub hooks: ScriptedHooks,
    pub config_map: MemoryConfigMap,
    pub releases: MemoryReleases,
    pub patcher: RecordingPatcher,
    pub bindings: MemoryBindings,
}

/// How an engine is started beyond its hooks and modules.
pub struct Options {
    pub max_attempts: Option<u32>,
    pub monitor_interval: Duration,
    pub static_global: Value,
    pub ignore_releases: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_attempts: None,
            monitor_interval: Duration::from_secs(3600),
            static_global: json!({}),
            ignore_releases: Vec::new(),
        }
    }
}

/// A global hook whose `--config` printed `config`.
pub fn global_hook(name: &str, config: &str) -> GlobalHook {
    GlobalHook {
        name: name.into(),
        path: PathBuf::from(name),
        config: parse(config, HookKind::Global, name).expect("valid hook config"),
    }
}

/// A module with a chart, enabled by its values.yaml, with these hooks.
pub fn module(name: &str, order: u32, hooks: &[&str]) -> ModuleDef {
    ModuleDef {
        name: name.into(),
        order,
        dir: PathBuf::from(name),
        chart: Some(PathBuf::from(format!("{name}/chart"))),
        static_enabled: Some(true),
        hooks: hooks
            .iter()
            .map(|h| (h.to_string(), PathBuf::from(h)))
            .collect(),
        ..ModuleDef::default()
    }
}

/// A hook answer that writes `patch` (a JSON patch array) to `VALUES_JSON_PATCH_PATH`.
pub fn values_patch(patch: Value) -> impl Fn(&HookRun) -> Result<HookResult, PortError> {
    let text = patch.to_string();
    move |_run| {
        Ok(HookResult {
            values_patch: text.clone(),
            ..HookResult::default()
        })
    }
}

/// A hook answer that writes `patch` to `CONFIG_VALUES_JSON_PATCH_PATH`.
pub fn config_patch(patch: Value) -> impl Fn(&HookRun) -> Result<HookResult, PortError> {
    let text = patch.to_string();
    move |_run| {
        Ok(HookResult {
            config_values_patch: text.clone(),
            ..HookResult::default()
        })
    }
}

/// Waits for `done` (checked every 2 ms) or fails after 60 s of the test's clock, saying
/// what it waited for.
pub async fn wait_for<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

impl World {
    /// A fresh engine on what the journal holds (a restart when it holds something).
    pub async fn engine(&self, global_hooks: Vec<GlobalHook>, modules: Vec<ModuleDef>) -> Engine {
        self.engine_with(global_hooks, modules, Options::default())
            .await
    }

    /// [`World::engine`] with options.
    pub async fn engine_with(
        &self,
        global_hooks: Vec<GlobalHook>,
        modules: Vec<ModuleDef>,
        options: Options,
    ) -> Engine {
        let mut restored = State::default();
        restored.apply_all(&self.journal.events());
        let initial_config = self.config_map.data().map(|data| {
            parse_config_map(&data, &modules, "addon-operator")
                .expect("a valid ConfigMap")
                .0
        });
        Engine::start(EngineArgs {
            global_hooks,
            static_global: options.static_global,
            global_schemas: Default::default(),
            initial_config,
            modules,
            ports: Ports {
                journal: Arc::new(self.journal.clone()),
                executor: Arc::new(self.hooks.clone()),
                config_store: Arc::new(self.config_map.clone()),
                releases: Arc::new(self.releases.clone()),
                bindings: Arc::new(self.bindings.clone()),
                patcher: Arc::new(self.patcher.clone()),
            },
            monitor_interval: options.monitor_interval,
            ignore_releases: options.ignore_releases,
            restored,
            max_attempts: options.max_attempts,
            queue_action_metrics: false,
            mailboxes: Mailboxes::default(),
            gate: Default::default(),
        })
        .await
        .expect("the engine starts")
    }

    /// The world after bosun was killed (`kill -9`): what its journal held, the same
    /// cluster (ConfigMap, releases, objects), hooks with no script (a new process; set them
    /// again). The killed engine keeps its old journal and hooks, where it can do no harm.
    pub fn after_kill(&self) -> World {
        World {
            journal: MemoryJournal::with(self.journal.events()),
            hooks: ScriptedHooks::default(),
            ..self.clone()
        }
    }

    /// A user edits the ConfigMap: the watch hands its new data to the engine.
    pub async fn edit_config_map(
        &self,
        engine: &Engine,
        modules: &[ModuleDef],
        edits: &[(&str, &str)],
    ) -> Vec<String> {
        for (key, text) in edits {
            self.config_map.put(key, text);
        }
        let data = self.config_map.data().unwrap_or_default();
        let (sections, _) = parse_config_map(&data, modules, "addon-operator").expect("valid");
        engine.config_changed(sections).await.expect("accepted")
    }

    /// Every run so far as `binding:hook`.
    pub fn runs(&self) -> Vec<String> {
        self.hooks
            .runs()
            .into_iter()
            .map(|r| format!("{}:{}", r.binding, r.hook))
            .collect()
    }

    /// The runs of `hook`.
    pub fn runs_of(&self, hook: &str) -> Vec<SeenRun> {
        self.hooks
            .runs()
            .into_iter()
            .filter(|r| r.hook == hook)
            .collect()
    }

    /// Every binding context `hook` received, run after run, flattened.
    pub fn contexts(&self, hook: &str) -> Vec<Value> {
        self.runs_of(hook)
            .into_iter()
            .flat_map(|r| r.contexts.as_array().cloned().unwrap_or_default())
            .collect()
    }

    pub fn count(&self, matches: impl Fn(&Event) -> bool) -> usize {
        self.journal.events().iter().filter(|e| matches(e)).count()
    }

    pub fn converges_finished(&self) -> usize {
        self.count(|e| matches!(e, Event::ConvergeFinished))
    }

    /// The state the journal folds into.
    pub fn state(&self) -> State {
        let mut state = State::default();
        state.apply_all(&self.journal.events());
        state
    }

    /// The errors of failed tasks, in journal order.
    pub fn task_errors(&self) -> Vec<String> {
        self.journal
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Task(TaskEvent::TaskFailed { error, .. }) => Some(error),
                _ => None,
            })
            .collect()
    }

    /// Reasons of the converges started, in order.
    pub fn converge_reasons(&self) -> Vec<String> {
        self.journal
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::ConvergeStarted { reason } => Some(reason),
                _ => None,
            })
            .collect()
    }

    /// Descriptions of the tasks enqueued, in journal order.
    pub fn enqueued(&self) -> Vec<String> {
        self.journal
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Task(TaskEvent::TaskEnqueued { task, .. }) => Some(task.description),
                _ => None,
            })
            .collect()
    }
}

/// Names of the objects in one run's contexts (`object.metadata.name`, in order).
pub fn object_names(run: &SeenRun) -> Vec<String> {
    run.contexts
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["object"]["metadata"]["name"].as_str())
        .map(String::from)
        .collect()
}

/// A namespaced object of `kind` with labels.
pub fn object(kind: &str, namespace: &str, name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": kind,
           "metadata": {"name": name, "namespace": namespace, "labels": labels}})
}
