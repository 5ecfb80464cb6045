//! The conductor: starts the global hooks actor and the queue actors, schedules
//! addon-operator's startup sequence (merged with whatever the journal says was still
//! pending), and runs tasks by type.
//!
//! ```text
//!   Engine::start ──► GlobalHooksActor (global values, hook runs)
//!        │
//!        └──► QueueActor "main", named queues on demand ──► EngineHandler::handle(task)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ractor::Actor;
use serde_json::{Value, json};

use bosun_runtime::mailbox::{Mailboxes, Tracked};
use bosun_runtime::queue_actor::{self, QueueActor, QueueArgs, QueueMsg, Router as _};
use bosun_runtime::{Queues, TaskIds};

use crate::bindings::{HookRef, owner_of};
use crate::events::{Event, Position, TaskEvent, TaskId, TaskSpec};
use crate::global_hooks::{GlobalHook, GlobalHooksActor, GlobalHooksArgs, GlobalHooksMsg};
use crate::hook_metrics::HookMetrics;
use crate::modules::{ConfigSections, ModuleActor, ModuleArgs, ModuleDef, ModuleMsg, flag_chain};
use crate::ports::{BoxFut, Journal, KubeBindings, ObjectPreview, PortError, Ports, Releases};
use crate::queue::AddonQueueRules;
use crate::scheduler::{ScheduleEntry, Scheduler};
use crate::state::{QueuedTask, State};
use crate::sync_waiter::SyncWaiter;
use crate::task::{
    AddonTask, Completion, ConvergePhase, HookRunParams, converge_task, module_run_task,
    module_task,
};
use crate::values::GlobalDocs;

pub use crate::task::{QueueDump, TaskOutcome};
type Router = dyn queue_actor::Router<AddonTask>;
type TaskHandler = dyn queue_actor::TaskHandler<AddonTask>;

fn hook_task(
    id: TaskId,
    hook: &GlobalHook,
    binding: &str,
    contexts: Vec<Value>,
    allow_failure: bool,
) -> TaskSpec {
    TaskSpec {
        id,
        queue: "main".into(),
        description: format!("{binding}:{}", hook.name),
        kind: AddonTask::GlobalHookRun {
            hook: hook.name.clone(),
            run: HookRunParams::with(contexts, allow_failure),
        },
    }
}

fn main_task(id: TaskId, kind: AddonTask, description: &str) -> TaskSpec {
    TaskSpec {
        id,
        queue: "main".into(),
        description: description.to_string(),
        kind,
    }
}

/// Hooks with an ORDER for a binding, sorted by order then name.
fn ordered(hooks: &[GlobalHook], order: impl Fn(&GlobalHook) -> Option<i64>) -> Vec<&GlobalHook> {
    let mut with: Vec<(i64, &GlobalHook)> = hooks
        .iter()
        .filter_map(|h| order(h).map(|o| (o, h)))
        .collect();
    with.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    with.into_iter().map(|(_, h)| h).collect()
}

/// Snapshots map for before*/after* contexts: every kubernetes binding, empty until the
/// bindings engine fills them.
fn empty_snapshots(hook: &GlobalHook) -> Value {
    Value::Object(
        hook.config
            .kubernetes
            .iter()
            .map(|b| (b.name.clone(), json!([])))
            .collect(),
    )
}

/// The reference's startup sequence for the main queue.
fn startup_tasks(hooks: &[GlobalHook], ids: &TaskIds) -> Vec<TaskSpec> {
    let mut tasks = Vec::new();
    for h in ordered(hooks, |h| h.config.on_startup) {
        tasks.push(hook_task(
            ids.next(),
            h,
            "onStartup",
            vec![json!({"binding": "onStartup"})],
            false,
        ));
    }
    let mut by_name: Vec<&GlobalHook> = hooks.iter().collect();
    by_name.sort_by(|a, b| a.name.cmp(&b.name));
    for h in by_name.iter().filter(|h| !h.config.schedule.is_empty()) {
        tasks.push(main_task(
            ids.next(),
            AddonTask::GlobalHookEnableScheduleBindings {
                hook: h.name.clone(),
            },
            &h.name,
        ));
    }
    for h in by_name.iter().filter(|h| !h.config.kubernetes.is_empty()) {
        tasks.push(main_task(
            ids.next(),
            AddonTask::GlobalHookEnableKubernetesBindings {
                hook: h.name.clone(),
            },
            &h.name,
        ));
    }
    tasks.push(main_task(
        ids.next(),
        AddonTask::GlobalHookWaitKubernetesSynchronization,
        "",
    ));
    tasks.push(converge_task(ids.next(), "OperatorStartup"));
    tasks
}

/// Whether a pending task from before a restart is the same step as a startup task.
fn same_step(a: &TaskSpec, b: &TaskSpec) -> bool {
    fn binding(t: &TaskSpec) -> Option<&str> {
        t.kind.hook_run().and_then(|r| r.binding())
    }
    a.kind.task_type() == b.kind.task_type()
        && a.kind.hook() == b.kind.hook()
        && a.queue == b.queue
        && binding(a) == binding(b)
        && a.kind.converge_phase() == b.kind.converge_phase()
}

/// Steps of a converge that was running when bosun stopped: the startup converge redoes
/// them (module deletions stay: the modules are already recorded as disabled).
fn interrupted_converge_step(t: &TaskSpec) -> bool {
    crate::queue::is_converge_step(t) && t.kind.converge_phase() != Some(ConvergePhase::StandBy)
}

/// A hook task made only of kubernetes Event and Synchronization contexts: after a
/// restart the bindings synchronize again and deliver the current state, so running it
/// would show the hook a state older than the one it has just seen.
fn superseded_by_resync(t: &TaskSpec) -> bool {
    t.kind.hook_run().is_some_and(|r| {
        let cs = &r.binding_contexts;
        !cs.is_empty()
            && cs.iter().all(|c| {
                matches!(c["type"].as_str(), Some("Event" | "Synchronization"))
                    || c.get("_index").is_some()
            })
    })
}

/// Enqueue events that put the startup sequence in the main queue, reusing pending tasks
/// that are the same step (they keep their attempt counts) and keeping the sequence order.
/// Kubernetes event runs left from before the restart are dropped: the bindings'
/// Synchronization replaces them.
fn plan_startup(restored: &Queues<AddonTask>, wanted: Vec<TaskSpec>) -> Vec<TaskEvent> {
    let mut events = Vec::new();
    for task in restored.tasks() {
        if superseded_by_resync(&task.spec) {
            events.push(TaskEvent::TaskDropped {
                id: task.spec.id,
                reason: "superseded by the Synchronization after the restart".into(),
            });
        }
    }
    let mut pending: Vec<&QueuedTask> = Vec::new();
    for task in restored.queue("main") {
        if superseded_by_resync(&task.spec) {
            continue;
        }
        if interrupted_converge_step(&task.spec) {
            events.push(TaskEvent::TaskDropped {
                id: task.spec.id,
                reason: "superseded by the startup converge".into(),
            });
        } else {
            pending.push(task);
        }
    }
    let mut anchor: Option<TaskId> = None;
    let mut used: Vec<TaskId> = Vec::new();
    for task in wanted {
        if let Some(existing) = pending
            .iter()
            .find(|p| !used.contains(&p.spec.id) && same_step(&p.spec, &task))
        {
            used.push(existing.spec.id);
            anchor = Some(existing.spec.id);
            continue;
        }
        let id = task.id;
        let position = match anchor {
            Some(a) => Position::After(a),
            None => match pending.iter().find(|p| !used.contains(&p.spec.id)) {
                Some(first) => Position::Before(first.spec.id),
                None => Position::Tail,
            },
        };
        events.push(TaskEvent::TaskEnqueued { task, position });
        anchor = Some(id);
    }
    events
}

/// The global values and config documents, from the global hooks actor.
async fn global_docs(global: &Tracked<GlobalHooksMsg>) -> Result<GlobalDocs, String> {
    let (tx, rx) = ractor::concurrency::oneshot();
    global
        .cast(GlobalHooksMsg::Docs(tx.into()))
        .map_err(|_| "the global hooks actor is not running".to_string())?;
    rx.await
        .map_err(|_| "the global hooks actor stopped".to_string())
}

async fn config_to_global(global: &Tracked<GlobalHooksMsg>, config: Value) -> Result<bool, String> {
    let (tx, rx) = ractor::concurrency::oneshot();
    global
        .cast(GlobalHooksMsg::ConfigChanged(config, tx.into()))
        .map_err(|_| "the global hooks actor is not running".to_string())?;
    rx.await
        .map_err(|_| "the global hooks actor stopped".to_string())?
}

/// Config sections handed out: what changed at once, and the module actors' answers.
struct ConfigSent {
    global_changed: bool,
    flags_changed: bool,
    replies: Vec<(
        String,
        ractor::concurrency::OneshotReceiver<Result<bool, String>>,
    )>,
}

impl ConfigSent {
    /// The modules whose section changed. Every module's answer is awaited; refusals are
    /// reported together (the other modules keep their new sections).
    async fn modules_changed(self) -> Result<Vec<String>, String> {
        let mut changed = Vec::new();
        let mut errors = Vec::new();
        for (name, reply) in self.replies {
            match reply.await {
                Ok(Ok(true)) => changed.push(name),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push(format!("the actor of module {name} stopped")),
            }
        }
        if errors.is_empty() {
            Ok(changed)
        } else {
            Err(errors.join("; "))
        }
    }
}

/// Everything the engine needs.
pub struct EngineArgs {
    /// Global hooks with their configurations.
    pub global_hooks: Vec<GlobalHook>,
    /// Static global values.
    pub static_global: Value,
    /// `$GLOBAL_HOOKS_DIR/openapi` schemas.
    pub global_schemas: Arc<crate::schema::ValuesSchemas>,
    /// The ConfigMap at start, parsed.
    pub initial_config: Option<ConfigSections>,
    /// Modules found in `MODULES_DIR`, in any order.
    pub modules: Vec<ModuleDef>,
    /// The journal, hook processes, the ConfigMap, Helm, bindings and the object patcher.
    pub ports: Ports,
    /// How often each module's resource monitor checks its release.
    pub monitor_interval: Duration,
    /// Releases never purged (`HELM_IGNORE_RELEASE`).
    pub ignore_releases: Vec<String>,
    /// State rebuilt from the journal.
    pub restored: State,
    /// Park tasks after this many failures.
    pub max_attempts: Option<u32>,
    /// Time low-level queue operations (off with `QUEUE_ACTIONS_METRICS=no`).
    pub queue_action_metrics: bool,
    /// Mailbox registry.
    pub mailboxes: Mailboxes,
}

/// Engine start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The journal refused the startup tasks.
    #[error("cannot journal the startup sequence: {0}")]
    Journal(#[from] PortError),
    /// An actor could not be spawned.
    #[error("cannot start actor {name}: {message}")]
    Spawn {
        /// Actor name.
        name: String,
        /// Why.
        message: String,
    },
    /// The ConfigMap's global section was not accepted.
    #[error("cannot apply the ConfigMap's global section: {0}")]
    Config(String),
}

/// The modules and what the conductor knows of them.
struct ModuleSet {
    /// Sorted by order, then name.
    defs: Vec<ModuleDef>,
    monitored: crate::modules::Monitored,
    /// The module hooks' rate limits.
    limits: crate::rate::Limits,
    actors: OnceLock<HashMap<String, Tracked<ModuleMsg>>>,
    status: Mutex<ModuleStatus>,
    releases: Arc<dyn Releases>,
    ignore_releases: Vec<String>,
}

#[derive(Default)]
struct ModuleStatus {
    enabled: BTreeMap<String, bool>,
    flags: BTreeMap<String, bool>,
}

impl ModuleSet {
    fn actor(&self, name: &str) -> Option<Tracked<ModuleMsg>> {
        self.actors.get().and_then(|a| a.get(name)).cloned()
    }

    fn status(&self) -> std::sync::MutexGuard<'_, ModuleStatus> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_enabled(&self, name: &str) -> bool {
        self.status().enabled.get(name).copied().unwrap_or(false)
    }

    /// The enabled modules in run order (order, then name).
    fn enabled_in_order(&self) -> Vec<String> {
        let status = self.status();
        self.defs
            .iter()
            .filter(|d| status.enabled.get(&d.name).copied().unwrap_or(false))
            .map(|d| d.name.clone())
            .collect()
    }

    fn def(&self, name: &str) -> Option<&ModuleDef> {
        self.defs.iter().find(|d| d.name == name)
    }

    /// Sends a message built around a reply port and waits for the answer.
    async fn ask<T: Send + 'static>(
        &self,
        name: &str,
        msg: impl FnOnce(ractor::RpcReplyPort<T>) -> ModuleMsg,
    ) -> Result<T, String> {
        self.send(name, msg)?
            .await
            .map_err(|_| format!("the actor of module {name} stopped"))
    }

    /// Puts a request in a module actor's mailbox now; the answer comes later.
    fn send<T: Send + 'static>(
        &self,
        name: &str,
        msg: impl FnOnce(ractor::RpcReplyPort<T>) -> ModuleMsg,
    ) -> Result<ractor::concurrency::OneshotReceiver<T>, String> {
        let actor = self
            .actor(name)
            .ok_or_else(|| format!("module {name} is not loaded"))?;
        let (tx, rx) = ractor::concurrency::oneshot();
        actor
            .cast(msg(tx.into()))
            .map_err(|_| format!("the actor of module {name} is not running"))?;
        Ok(rx)
    }
}

struct EngineHandler {
    bindings: Arc<dyn KubeBindings>,
    sync_waiter: SyncWaiter,
    router: OnceLock<std::sync::Weak<QueueRouter>>,
    scheduler: OnceLock<Scheduler>,
    /// `settings.executionMinInterval` of global hooks.
    limiters: HashMap<String, crate::rate::Limiter>,
    global: Tracked<GlobalHooksMsg>,
    hooks: Vec<GlobalHook>,
    ids: TaskIds,
    sink: Journal,
    converged: Arc<AtomicBool>,
    converging: Arc<AtomicBool>,
    modules: Arc<ModuleSet>,
    /// When the converge in progress started (in this process).
    converge_started: Mutex<Option<std::time::Instant>>,
    /// The global values' checksum before this converge's afterAll hooks (`None`: there
    /// are none): values they change reload all modules, as addon-operator's last afterAll
    /// hook does.
    before_after_all: Mutex<Option<String>>,
}

impl EngineHandler {
    /// Hands a `GlobalHookRun` to the global hooks actor, which reports its end.
    fn run_global_hook(&self, task: QueuedTask, done: Completion) {
        if let Err(e) = self.global.cast(GlobalHooksMsg::Run(Box::new(task), done)) {
            // The message, completion included, is dropped: the task fails and is retried.
            tracing::error!("the global hooks actor is not running: {e}");
        }
    }

    async fn journal(&self, event: Event) -> Result<(), String> {
        self.sink
            .append(vec![event])
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn converge_phase(&self, reason: &str, phase: ConvergePhase) -> TaskSpec {
        let mut next = converge_task(self.ids.next(), reason);
        next.kind = AddonTask::ConvergeModules {
            phase,
            reason: reason.to_string(),
        };
        next.description = format!("{reason}:{}", phase.as_str());
        next
    }

    fn around_hooks(
        &self,
        binding: &str,
        order: impl Fn(&GlobalHook) -> Option<i64>,
    ) -> Vec<TaskSpec> {
        ordered(&self.hooks, order)
            .into_iter()
            .map(|h| {
                hook_task(
                    self.ids.next(),
                    h,
                    binding,
                    vec![json!({"binding": binding, "snapshots": empty_snapshots(h)})],
                    false,
                )
            })
            .collect()
    }

    async fn converge(&self, phase: ConvergePhase, reason: &str) -> TaskOutcome {
        match phase {
            ConvergePhase::StandBy => {
                let started = Event::ConvergeStarted {
                    reason: reason.to_string(),
                };
                if let Err(e) = self.journal(started).await {
                    return TaskOutcome::Fail(e);
                }
                self.converging.store(true, Ordering::SeqCst);
                *self
                    .converge_started
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
                let mut head = self.around_hooks("beforeAll", |h| h.config.before_all);
                head.push(self.converge_phase(reason, ConvergePhase::WaitBeforeAll));
                TaskOutcome::Success {
                    head,
                    after: Vec::new(),
                    tail: Vec::new(),
                }
            }
            ConvergePhase::WaitBeforeAll => {
                let mut head = match self.plan_modules(reason).await {
                    Ok(tasks) => tasks,
                    Err(e) => return TaskOutcome::Fail(e),
                };
                head.push(self.converge_phase(reason, ConvergePhase::WaitDeleteAndRunModules));
                TaskOutcome::Success {
                    head,
                    after: Vec::new(),
                    tail: Vec::new(),
                }
            }
            ConvergePhase::WaitDeleteAndRunModules => {
                let mut head = self.around_hooks("afterAll", |h| h.config.after_all);
                let before = if head.is_empty() {
                    None
                } else {
                    match self.global_docs().await {
                        Ok(docs) => Some(crate::values::checksum(&docs.values["global"])),
                        Err(e) => return TaskOutcome::Fail(e),
                    }
                };
                *self
                    .before_after_all
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = before;
                head.push(self.converge_phase(reason, ConvergePhase::WaitAfterAll));
                TaskOutcome::Success {
                    head,
                    after: Vec::new(),
                    tail: Vec::new(),
                }
            }
            ConvergePhase::WaitAfterAll => {
                if let Err(e) = self.journal(Event::ConvergeFinished).await {
                    return TaskOutcome::Fail(e);
                }
                self.converging.store(false, Ordering::SeqCst);
                let started = self
                    .converge_started
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                let activation = reason.to_string();
                if let Some(started) = started {
                    metrics::gauge!(crate::telemetry::CONVERGENCE_SECONDS, "activation" => activation.clone())
                        .increment(started.elapsed().as_secs_f64());
                }
                metrics::counter!(crate::telemetry::CONVERGENCE_TOTAL, "activation" => activation)
                    .increment(1);
                let mut tail = Vec::new();
                let before = self
                    .before_after_all
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                if let Some(before) = before {
                    match self.global_docs().await {
                        Ok(docs) if crate::values::checksum(&docs.values["global"]) != before => {
                            tracing::info!(
                                "Global values changed by AfterAll hooks, will run ReloadAll."
                            );
                            tail.push(converge_task(
                                self.ids.next(),
                                "AfterAll-Hooks-Change-GlobalValues",
                            ));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!("cannot compare the global values after afterAll: {e}")
                        }
                    }
                }
                if !self.converged.swap(true, Ordering::SeqCst) {
                    tracing::info!("Startup converge done.");
                    let discover = main_task(self.ids.next(), AddonTask::DiscoverHelmReleases, "");
                    tail.insert(0, discover);
                }
                TaskOutcome::Success {
                    head: Vec::new(),
                    after: Vec::new(),
                    tail,
                }
            }
        }
    }
}

impl EngineHandler {
    /// `GlobalHookEnableKubernetesBindings`: starts a global hook's watches and queues its
    /// Synchronization runs, in the main queue right after this task or in the binding's
    /// named queue (waited for by the startup when `waitForSynchronization`).
    async fn enable_kubernetes(&self, name: &str) -> TaskOutcome {
        let name = name.to_string();
        let Some(hook) = self.hooks.iter().find(|h| h.name == name) else {
            return TaskOutcome::Fail(format!("global hook {name:?} is not loaded"));
        };
        let Some(router) = self.router.get().and_then(std::sync::Weak::upgrade) else {
            return TaskOutcome::Fail("the queues are not running".into());
        };
        let router: Arc<Router> = router;
        let href = HookRef {
            owner: owner_of(None),
            hook: name.clone(),
        };
        let config = Arc::new(hook.config.clone());
        let events =
            crate::bindings::binding_events(None, &name, config.clone(), router, self.ids.clone());
        if let Err(e) = self
            .bindings
            .start(href.clone(), hook.config.kubernetes.clone(), events)
            .await
        {
            return TaskOutcome::Fail(format!("global hook {name:?}: {e}"));
        }
        let mut after = Vec::new();
        for (i, b) in hook.config.kubernetes.iter().enumerate() {
            if !b.execute_hook_on_synchronization {
                self.bindings.release(&href, i);
                continue;
            }
            if b.queue != "main" && b.wait_for_synchronization {
                self.sync_waiter.expect(&name, i);
            }
            after.push(crate::bindings::sync_task(
                self.ids.next(),
                None,
                &name,
                &config,
                i,
            ));
        }
        TaskOutcome::Success {
            head: Vec::new(),
            after,
            tail: Vec::new(),
        }
    }

    async fn global_docs(&self) -> Result<GlobalDocs, String> {
        global_docs(&self.global).await
    }

    /// The flag chain and the `enabled` script for one module.
    async fn decide(
        &self,
        def: &ModuleDef,
        docs: &GlobalDocs,
        before: &[String],
    ) -> Result<(bool, &'static str), String> {
        let dynamic = docs.values[format!("{}Enabled", def.key())].as_bool();
        let flag = self.modules.status().flags.get(&def.name).copied();
        let (on, by) = flag_chain(def.static_enabled, dynamic, flag);
        if !on || def.enabled_script.is_none() {
            return Ok((on, by.as_str()));
        }
        let (d, b) = (docs.clone(), before.to_vec());
        let script = self
            .modules
            .ask(&def.name, |reply| ModuleMsg::Enabled(d, b, reply))
            .await??;
        Ok(if script {
            (true, by.as_str())
        } else {
            (false, "script")
        })
    }

    /// Journals a module's new enabled state; returns whether it was enabled before.
    async fn record_enabled(&self, name: &str, on: bool, by: &str) -> Result<bool, String> {
        let was = self.modules.is_enabled(name);
        if was != on {
            let event = if on {
                Event::ModuleEnabled {
                    module: name.to_string(),
                    reason: by.to_string(),
                }
            } else {
                Event::ModuleDisabled {
                    module: name.to_string(),
                    reason: by.to_string(),
                }
            };
            self.journal(event).await?;
            self.modules.status().enabled.insert(name.to_string(), on);
            tracing::info!(module = %name, "module {} ({by})", if on { "enabled" } else { "disabled" });
        }
        Ok(was)
    }

    /// WaitBeforeAll: recomputes enabled modules and returns the module tasks: CRDs of newly
    /// enabled modules, deletions (reverse order), then runs in order. A module whose
    /// `enabled` script fails gets a run that re-checks it, after the others.
    async fn plan_modules(&self, reason: &str) -> Result<Vec<TaskSpec>, String> {
        let reason = reason.to_string();
        let first = !self.converged.load(Ordering::SeqCst);
        let docs = self.global_docs().await?;
        let mut enabled: Vec<(String, bool)> = Vec::new();
        let mut disabled: Vec<String> = Vec::new();
        let mut unsure: Vec<String> = Vec::new();
        for def in &self.modules.defs {
            let before: Vec<String> = enabled.iter().map(|(n, _)| n.clone()).collect();
            match self.decide(def, &docs, &before).await {
                Ok((on, by)) => {
                    let was = self.record_enabled(&def.name, on, by).await?;
                    if on {
                        enabled.push((def.name.clone(), first || !was));
                    } else if was {
                        disabled.push(def.name.clone());
                    }
                }
                Err(e) => {
                    tracing::error!(module = %def.name, "{e}");
                    unsure.push(def.name.clone());
                }
            }
        }
        let mut tasks = Vec::new();
        for (name, newly) in &enabled {
            if *newly && self.modules.def(name).is_some_and(|d| !d.crds.is_empty()) {
                tasks.push(module_task(
                    self.ids.next(),
                    AddonTask::ModuleEnsureCRDs {
                        module: name.clone(),
                        reason: reason.clone(),
                    },
                ));
            }
        }
        for name in disabled.iter().rev() {
            tasks.push(module_task(
                self.ids.next(),
                AddonTask::ModuleDelete {
                    module: name.clone(),
                    reason: reason.clone(),
                },
            ));
        }
        for (name, newly) in &enabled {
            tasks.push(module_run_task(
                self.ids.next(),
                name,
                *newly,
                &reason,
                true,
            ));
        }
        for name in &unsure {
            let mut t = module_run_task(self.ids.next(), name, true, &reason, true);
            if let AddonTask::ModuleRun { run, .. } = &mut t.kind {
                run.check_enabled = true;
            }
            tasks.push(t);
        }
        Ok(tasks)
    }

    /// A module run whose `enabled` script failed during the converge: check it again.
    async fn recheck_enabled(&self, name: &str) -> Result<Option<TaskOutcome>, String> {
        let name = name.to_string();
        let def = self
            .modules
            .def(&name)
            .ok_or_else(|| format!("module {name} is not loaded"))?;
        let docs = self.global_docs().await?;
        let before: Vec<String> = self
            .modules
            .defs
            .iter()
            .take_while(|d| d.name != name)
            .filter(|d| self.modules.is_enabled(&d.name))
            .map(|d| d.name.clone())
            .collect();
        let (on, by) = self.decide(def, &docs, &before).await?;
        let was = self.record_enabled(&name, on, by).await?;
        if on {
            return Ok(None);
        }
        let head = if was {
            vec![module_task(
                self.ids.next(),
                AddonTask::ModuleDelete {
                    module: name.clone(),
                    reason: "EnabledScript".into(),
                },
            )]
        } else {
            Vec::new()
        };
        Ok(Some(TaskOutcome::Success {
            head,
            after: Vec::new(),
            tail: Vec::new(),
        }))
    }

    async fn module_task(&self, task: QueuedTask) -> TaskOutcome {
        let name = task.spec.kind.module().unwrap_or_default().to_string();
        if let AddonTask::ModuleRun { run, .. } = &task.spec.kind {
            if run.check_enabled {
                match self.recheck_enabled(&name).await {
                    Ok(Some(outcome)) => return outcome,
                    Ok(None) => {}
                    Err(e) => return TaskOutcome::Fail(e),
                }
            }
            if !self.modules.is_enabled(&name) {
                tracing::info!(module = %name, "module is disabled; ModuleRun skipped");
                return TaskOutcome::done();
            }
        }
        let mut docs = match self.global_docs().await {
            Ok(d) => d,
            Err(e) => return TaskOutcome::Fail(e),
        };
        docs.enabled_modules = self.modules.enabled_in_order();
        let task = Box::new(task);
        self.modules
            .ask(&name, |reply| ModuleMsg::Run(task, docs, reply))
            .await
            .unwrap_or_else(TaskOutcome::Fail)
    }

    /// Releases in the namespace that belong to no enabled module are purged.
    async fn discover_releases(&self) -> TaskOutcome {
        let names = match self.modules.releases.list().await {
            Ok(n) => n,
            Err(e) => {
                crate::telemetry::module_discover_error();
                return TaskOutcome::Fail(format!("cannot list Helm releases: {e}"));
            }
        };
        let mut orphans: Vec<String> = names
            .into_iter()
            .filter(|n| !self.modules.is_enabled(n))
            .filter(|n| !self.modules.ignore_releases.contains(n))
            .collect();
        orphans.sort();
        orphans.dedup();
        let after = orphans
            .iter()
            .rev()
            .map(|n| {
                module_task(
                    self.ids.next(),
                    AddonTask::ModulePurge {
                        module: n.clone(),
                        reason: "DiscoverHelmReleases".into(),
                    },
                )
            })
            .collect();
        TaskOutcome::Success {
            head: Vec::new(),
            after,
            tail: Vec::new(),
        }
    }

    /// `helm uninstall`; a failure is only logged, as in the reference.
    async fn purge(&self, release: &str) -> TaskOutcome {
        let name = release.to_string();
        match self.modules.releases.uninstall(name.clone()).await {
            Ok(_) => {
                tracing::info!(release = %name, "purged release of an unknown module");
                if let Err(e) = self.journal(Event::ReleaseDeleted { module: name }).await {
                    return TaskOutcome::Fail(e);
                }
            }
            Err(e) => tracing::error!(release = %name, "cannot purge release: {e}"),
        }
        TaskOutcome::done()
    }
}

impl queue_actor::TaskHandler<AddonTask> for EngineHandler {
    fn ready_in(&self, task: &QueuedTask) -> Option<Duration> {
        match &task.spec.kind {
            AddonTask::GlobalHookRun { hook, .. } => self.limiters.get(hook)?.ready_in(),
            AddonTask::ModuleHookRun { module, hook, .. } => {
                self.modules.limits.ready_in(module, hook)
            }
            _ => None,
        }
    }

    /// A global hook's run goes straight to the global hooks actor, which reports its end
    /// to the queue: no task of its own waits for it (one spawn and two hand-offs fewer per
    /// run than [`TaskHandler::handle`]). Held by its rate limit, it waits in `handle`.
    fn start(self: Arc<Self>, task: QueuedTask, done: Completion) {
        if let AddonTask::GlobalHookRun { hook, .. } = &task.spec.kind
            && self.limiters.get(hook).is_none_or(|l| l.try_take().is_ok())
        {
            return self.run_global_hook(task, done);
        }
        queue_actor::run_on_own_task(self, task, done)
    }

    fn handle(&self, task: QueuedTask) -> BoxFut<'_, TaskOutcome> {
        Box::pin(async move {
            match &task.spec.kind {
                AddonTask::GlobalHookRun { hook, .. } => {
                    if let Some(l) = self.limiters.get(hook) {
                        l.wait().await;
                    }
                    let (tx, rx) = ractor::concurrency::oneshot();
                    self.run_global_hook(
                        task,
                        Completion::new(move |outcome| {
                            let _ = tx.send(outcome);
                        }),
                    );
                    rx.await.unwrap_or_else(|_| {
                        TaskOutcome::Fail("the global hooks actor stopped during the run".into())
                    })
                }
                AddonTask::ConvergeModules { phase, reason } => self.converge(*phase, reason).await,
                AddonTask::ModuleRun { .. }
                | AddonTask::ModuleDelete { .. }
                | AddonTask::ModuleEnsureCRDs { .. } => self.module_task(task).await,
                AddonTask::ModuleHookRun { module, .. } => {
                    if !self.modules.is_enabled(module) {
                        tracing::info!(module = %module, task = %crate::queue::describe(&task), "module is disabled; hook run dropped");
                        return TaskOutcome::done();
                    }
                    self.module_task(task).await
                }
                AddonTask::GlobalHookEnableKubernetesBindings { hook } => {
                    self.enable_kubernetes(hook).await
                }
                AddonTask::GlobalHookWaitKubernetesSynchronization => {
                    self.sync_waiter.wait().await;
                    TaskOutcome::done()
                }
                AddonTask::DiscoverHelmReleases => self.discover_releases().await,
                AddonTask::ModulePurge { module, .. } => self.purge(module).await,
                AddonTask::GlobalHookEnableScheduleBindings { hook: name } => {
                    let name = name.clone();
                    let Some(hook) = self.hooks.iter().find(|h| h.name == name) else {
                        return TaskOutcome::Fail(format!("global hook {name:?} is not loaded"));
                    };
                    let Some(scheduler) = self.scheduler.get() else {
                        return TaskOutcome::Fail("the scheduler is not running".into());
                    };
                    scheduler.add(crate::bindings::schedule_entries(
                        &owner_of(None),
                        &name,
                        &hook.config,
                    ));
                    TaskOutcome::done()
                }
            }
        })
    }
}

struct QueueRouter {
    queues: Mutex<HashMap<String, Tracked<QueueMsg<AddonTask>>>>,
    handler: Arc<TaskHandler>,
    sink: Journal,
    mailboxes: Mailboxes,
    max_attempts: Option<u32>,
    action_metrics: bool,
    this: Mutex<Option<std::sync::Weak<QueueRouter>>>,
}

impl QueueRouter {
    fn get(&self, name: &str) -> Option<Tracked<QueueMsg<AddonTask>>> {
        self.queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    async fn spawn(
        self: &Arc<Self>,
        name: &str,
        restored: Queues<AddonTask>,
    ) -> Result<Tracked<QueueMsg<AddonTask>>, EngineError> {
        let mailbox = self.mailboxes.handle(&format!("queue/{name}"));
        let router: Arc<Router> = self.clone();
        let args = QueueArgs {
            name: name.to_string(),
            sink: self.sink.clone(),
            handler: self.handler.clone(),
            router,
            rules: Arc::new(AddonQueueRules),
            mailbox: mailbox.clone(),
            restored,
            max_attempts: self.max_attempts,
            action_metrics: self.action_metrics,
        };
        let (actor, _) = Actor::spawn(None, QueueActor::<AddonTask, Event>::default(), args)
            .await
            .map_err(|e| EngineError::Spawn {
                name: format!("queue/{name}"),
                message: e.to_string(),
            })?;
        let tracked = Tracked::new(actor, mailbox);
        self.queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), tracked.clone());
        Ok(tracked)
    }
}

impl queue_actor::Router<AddonTask> for QueueRouter {
    fn enqueue(&self, queue: &str, tasks: Vec<TaskSpec>) {
        let batch: Vec<(TaskSpec, Position)> =
            tasks.into_iter().map(|t| (t, Position::Tail)).collect();
        if let Some(q) = self.get(queue) {
            let _ = q.cast(QueueMsg::Enqueue(batch));
            return;
        }
        let Some(this) = self
            .this
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(std::sync::Weak::upgrade)
        else {
            return;
        };
        let queue = queue.to_string();
        tokio::spawn(async move {
            let q = match this.get(&queue) {
                Some(q) => q,
                None => match this.spawn(&queue, Queues::default()).await {
                    Ok(q) => q,
                    Err(e) => {
                        tracing::error!("{e}");
                        return;
                    }
                },
            };
            let _ = q.cast(QueueMsg::Enqueue(batch));
        });
    }
}

/// The running engine.
pub struct Engine {
    bindings: Arc<dyn KubeBindings>,
    router: Arc<QueueRouter>,
    converging: Arc<AtomicBool>,
    global: Tracked<GlobalHooksMsg>,
    modules: Arc<ModuleSet>,
    sink: Journal,
    converged: Arc<AtomicBool>,
    ids: TaskIds,
    global_hooks: Vec<String>,
    /// Mailbox registry (for the debug endpoints).
    pub mailboxes: Mailboxes,
    /// What hooks wrote to `METRICS_PATH` (served at `/metrics/hooks`).
    pub hook_metrics: HookMetrics,
}

impl Engine {
    /// A `GlobalHookRun` task for `hook` with the given binding contexts, with a fresh id.
    pub fn global_hook_task(
        &self,
        hook: &str,
        queue: &str,
        binding: &str,
        contexts: Vec<Value>,
    ) -> TaskSpec {
        TaskSpec {
            id: self.ids.next(),
            queue: queue.to_string(),
            description: format!("{binding}:{hook}"),
            kind: AddonTask::GlobalHookRun {
                hook: hook.to_string(),
                run: HookRunParams::with(contexts, false),
            },
        }
    }

    /// The ConfigMap changed. Changed sections are journaled first; a changed `global`
    /// section or changed `<key>Enabled` flags queue `ConvergeModules(ReloadAllModules)`;
    /// otherwise each enabled module whose section changed gets a `ModuleRun`. Our own
    /// writes come back unchanged and queue nothing. Returns what was queued.
    pub async fn config_changed(&self, sections: ConfigSections) -> Result<Vec<String>, String> {
        let applied = self.send_config(sections).await?;
        if applied.global_changed || applied.flags_changed {
            let task = converge_task(self.ids.next(), "ReloadAllModules");
            // A converge in progress started from older values: restart it, as the
            // reference does, instead of finishing it and converging again. This does not
            // wait for busy module actors: they have their sections in their mailboxes,
            // ahead of any run the restarted converge gives them.
            let queued = if self.converging.load(Ordering::SeqCst)
                && let Some(main) = self.router.get("main")
                && main.cast(QueueMsg::Restart(Box::new(task.clone()))).is_ok()
            {
                tracing::info!("config values changed during a converge: restarting it");
                "ConvergeModules:ReloadAllModules (restarting the converge in progress)"
            } else {
                self.enqueue(vec![task]);
                "ConvergeModules:ReloadAllModules"
            };
            applied.modules_changed().await?;
            return Ok(vec![queued.into()]);
        }
        let changed_modules = applied.modules_changed().await?;
        let tasks: Vec<TaskSpec> = changed_modules
            .iter()
            .filter(|m| self.modules.is_enabled(m))
            .map(|m| module_run_task(self.ids.next(), m, false, "ModuleValuesChanged", false))
            .collect();
        let queued = tasks
            .iter()
            .map(|t| format!("ModuleRun:{}", t.description))
            .collect();
        self.enqueue(tasks);
        Ok(queued)
    }

    /// Applies config sections and waits for every module to take its own.
    async fn apply_config(&self, sections: ConfigSections) -> Result<(), String> {
        self.send_config(sections).await?.modules_changed().await?;
        Ok(())
    }

    /// Applies the global section and the enabled flags, and sends every module actor its
    /// section (all at once, so a busy module does not hold the others back).
    async fn send_config(&self, sections: ConfigSections) -> Result<ConfigSent, String> {
        let global_changed = config_to_global(&self.global, sections.global).await?;
        let flags_changed = {
            let current = self.modules.status().flags.clone();
            current != sections.flags
        };
        if flags_changed {
            self.sink
                .append(vec![Event::ModuleFlagsSet {
                    flags: sections.flags.clone(),
                }])
                .await
                .map_err(|e| e.to_string())?;
            self.modules.status().flags = sections.flags;
        }
        let mut replies = Vec::new();
        for def in &self.modules.defs {
            let config = sections
                .modules
                .get(&def.name)
                .cloned()
                .unwrap_or(json!({}));
            let reply = self
                .modules
                .send(&def.name, |reply| ModuleMsg::ConfigChanged(config, reply))?;
            replies.push((def.name.clone(), reply));
        }
        Ok(ConfigSent {
            global_changed,
            flags_changed,
            replies,
        })
    }

    /// A module's values document (`VALUES_PATH` of its hooks).
    pub async fn module_values(&self, module: &str) -> Result<Value, String> {
        let docs = global_docs(&self.global).await?;
        self.modules
            .ask(module, |reply| ModuleMsg::Values(docs, reply))
            .await
    }

    /// What each enabled module's resource monitor checks: `{module: [Kind/ns/name]}`, or
    /// `"No monitor"` for a module without one (no chart, or not run yet).
    pub fn resource_monitors(&self) -> Value {
        let monitored = self
            .modules
            .monitored
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut out = serde_json::Map::new();
        for def in self
            .modules
            .defs
            .iter()
            .filter(|d| self.modules.is_enabled(&d.name))
        {
            out.insert(
                def.name.clone(),
                monitored
                    .get(&def.name)
                    .map(|ids| json!(ids))
                    .unwrap_or_else(|| json!("No monitor")),
            );
        }
        Value::Object(out)
    }

    /// A module's chart rendered with its current values, without installing it.
    pub async fn module_render(&self, module: &str) -> Result<Vec<Value>, String> {
        let docs = self.global_docs().await?;
        self.modules
            .ask(module, |reply| ModuleMsg::Render(docs, reply))
            .await?
    }

    /// A module's rendered objects, each as it is live and as applying it would leave it
    /// (a dry run), for `module render --diff`.
    pub async fn module_preview(&self, module: &str) -> Result<Vec<ObjectPreview>, String> {
        let objects = self.module_render(module).await?;
        self.modules
            .releases
            .preview(module.to_string(), objects)
            .await
            .map_err(|e| format!("module {module}: {e}"))
    }

    /// A module's config values document (`CONFIG_VALUES_PATH` of its hooks).
    pub async fn module_config(&self, module: &str) -> Result<Value, String> {
        let docs = self.global_docs().await?;
        self.modules
            .ask(module, |reply| ModuleMsg::Config(docs, reply))
            .await
    }

    /// The global config values document `{"global": …}`.
    pub async fn global_config(&self) -> Result<Value, String> {
        Ok(self.global_docs().await?.config)
    }

    async fn global_docs(&self) -> Result<GlobalDocs, String> {
        global_docs(&self.global).await
    }

    /// Names of the global hooks.
    pub fn global_hook_names(&self) -> Vec<String> {
        self.global_hooks.clone()
    }

    /// Module names in run order with whether each is enabled.
    pub fn modules(&self) -> Vec<(String, bool)> {
        self.modules
            .defs
            .iter()
            .map(|d| (d.name.clone(), self.modules.is_enabled(&d.name)))
            .collect()
    }

    /// Modules in run order: name, order (the weight the reference's graph groups by) and
    /// whether each is enabled.
    pub fn module_orders(&self) -> Vec<(String, u32, bool)> {
        self.modules
            .defs
            .iter()
            .map(|d| (d.name.clone(), d.order, self.modules.is_enabled(&d.name)))
            .collect()
    }

    /// Appends tasks to the tail of their queues (created on demand).
    pub fn enqueue(&self, tasks: Vec<TaskSpec>) {
        let mut by_queue: HashMap<String, Vec<TaskSpec>> = HashMap::new();
        for t in tasks {
            by_queue.entry(t.queue.clone()).or_default().push(t);
        }
        for (queue, tasks) in by_queue {
            self.router.enqueue(&queue, tasks);
        }
    }

    /// Starts the actors and schedules the startup sequence.
    pub async fn start(args: EngineArgs) -> Result<Engine, EngineError> {
        let ids = TaskIds::after(args.restored.tasks.last_task_id);
        let ids_for_engine = ids.clone();
        let mut restored = args.restored;
        let startup: Vec<Event> =
            plan_startup(&restored.tasks, startup_tasks(&args.global_hooks, &ids))
                .into_iter()
                .map(Event::Task)
                .collect();
        if !startup.is_empty() {
            args.ports.journal.append(startup.clone()).await?;
            restored.apply_all(&startup);
        }
        let sync_waiter = SyncWaiter::default();
        let hook_metrics = HookMetrics::default();
        for h in &args.global_hooks {
            crate::telemetry::binding_count(None, &h.name, &h.config);
        }
        let global_mailbox = args.mailboxes.handle("global-hooks");
        let (global_actor, _) = Actor::spawn(
            None,
            GlobalHooksActor,
            GlobalHooksArgs {
                hooks: args.global_hooks.clone(),
                static_values: args.static_global,
                schemas: args.global_schemas.clone(),
                restored: restored.clone(),
                ports: args.ports.clone(),
                mailbox: global_mailbox.clone(),
                ids: ids.clone(),
                sync_waiter: sync_waiter.clone(),
                hook_metrics: hook_metrics.clone(),
            },
        )
        .await
        .map_err(|e| EngineError::Spawn {
            name: "global-hooks".into(),
            message: e.to_string(),
        })?;
        let global = Tracked::new(global_actor, global_mailbox);
        let mut defs = args.modules;
        defs.sort_by(|a, b| (a.order, &a.name).cmp(&(b.order, &b.name)));
        let modules = Arc::new(ModuleSet {
            defs,
            monitored: Default::default(),
            limits: Default::default(),
            actors: OnceLock::new(),
            status: Mutex::new(ModuleStatus {
                enabled: restored
                    .modules
                    .iter()
                    .map(|(n, m)| (n.clone(), m.enabled))
                    .collect(),
                flags: restored.module_flags.clone(),
            }),
            releases: args.ports.releases.clone(),
            ignore_releases: args.ignore_releases,
        });
        let converged = Arc::new(AtomicBool::new(false));
        let converging = Arc::new(AtomicBool::new(false));
        let global_hooks = args.global_hooks.iter().map(|h| h.name.clone()).collect();
        let handler = Arc::new(EngineHandler {
            bindings: args.ports.bindings.clone(),
            sync_waiter: sync_waiter.clone(),
            router: OnceLock::new(),
            scheduler: OnceLock::new(),
            limiters: args
                .global_hooks
                .iter()
                .filter_map(|h| {
                    crate::rate::Limiter::for_settings(&h.config.settings)
                        .map(|l| (h.name.clone(), l))
                })
                .collect(),
            converging: converging.clone(),
            global: global.clone(),
            hooks: args.global_hooks,
            ids: ids.clone(),
            sink: args.ports.journal.clone(),
            converged: converged.clone(),
            modules: modules.clone(),
            converge_started: Mutex::new(None),
            before_after_all: Mutex::new(None),
        });
        let engine_ids = ids_for_engine;
        let router = Arc::new(QueueRouter {
            queues: Mutex::new(HashMap::new()),
            handler: handler.clone(),
            sink: args.ports.journal.clone(),
            mailboxes: args.mailboxes.clone(),
            max_attempts: args.max_attempts,
            action_metrics: args.queue_action_metrics,
            this: Mutex::new(None),
        });
        *router.this.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::downgrade(&router));
        let _ = handler.router.set(Arc::downgrade(&router));
        let scheduler = {
            let (router, ids, converged) =
                (Arc::downgrade(&router), ids.clone(), converged.clone());
            Scheduler::new(Arc::new(move |entries: Vec<ScheduleEntry>| {
                let Some(router) = router.upgrade() else {
                    return;
                };
                for e in entries {
                    // As in the reference: module schedules wait for the first converge.
                    if e.owner != "global" && !converged.load(Ordering::SeqCst) {
                        continue;
                    }
                    let task = crate::bindings::schedule_task(ids.next(), &e);
                    router.enqueue(&task.queue.clone(), vec![task]);
                }
            }))
        };
        let _ = handler.scheduler.set(scheduler.clone());
        let mut actors = HashMap::new();
        for def in &modules.defs {
            let name = format!("module/{}", def.name);
            let mailbox = args.mailboxes.handle(&name);
            let (actor, _) = Actor::spawn(
                None,
                ModuleActor,
                ModuleArgs {
                    def: def.clone(),
                    restored: restored.clone(),
                    ports: args.ports.clone(),
                    router: router.clone(),
                    ids: ids.clone(),
                    monitor_interval: args.monitor_interval,
                    mailbox: mailbox.clone(),
                    scheduler: scheduler.clone(),
                    monitored: modules.monitored.clone(),
                    limits: modules.limits.clone(),
                    hook_metrics: hook_metrics.clone(),
                },
            )
            .await
            .map_err(|e| EngineError::Spawn {
                name: name.clone(),
                message: e.to_string(),
            })?;
            actors.insert(def.name.clone(), Tracked::new(actor, mailbox));
        }
        let _ = modules.actors.set(actors);
        let engine_partial = Engine {
            bindings: args.ports.bindings.clone(),
            router: router.clone(),
            converging,
            global: global.clone(),
            modules: modules.clone(),
            sink: args.ports.journal.clone(),
            converged: converged.clone(),
            ids: engine_ids.clone(),
            global_hooks,
            mailboxes: args.mailboxes.clone(),
            hook_metrics,
        };
        if let Some(config) = args.initial_config {
            engine_partial
                .apply_config(config)
                .await
                .map_err(EngineError::Config)?;
        }
        let mut names: Vec<String> = restored.tasks.queues.keys().cloned().collect();
        if !names.iter().any(|n| n == "main") {
            names.push("main".into());
        }
        for name in names {
            let mut own = Queues {
                last_task_id: restored.tasks.last_task_id,
                ..Queues::default()
            };
            if let Some(q) = restored.tasks.queues.get(&name) {
                own.queues.insert(name.clone(), q.clone());
            }
            if let Some(p) = restored.tasks.parked.get(&name) {
                own.parked.insert(name.clone(), p.clone());
            }
            router.spawn(&name, own).await?;
        }
        Ok(engine_partial)
    }

    /// Snapshots of the kubernetes bindings of the global hooks (no module) or of a
    /// module's hooks: `{hook: {binding: [...]}}`.
    pub fn snapshots(&self, module: Option<&str>) -> Value {
        self.bindings.snapshots(&owner_of(module))
    }

    /// Whether the first converge has finished (`/readyz`).
    pub fn converged(&self) -> bool {
        self.converged.load(Ordering::SeqCst)
    }

    /// The global values document.
    pub async fn global_values(&self) -> Option<Value> {
        let (tx, rx) = ractor::concurrency::oneshot();
        self.global.cast(GlobalHooksMsg::Values(tx.into())).ok()?;
        rx.await.ok()
    }

    /// Dumps every queue, `main` first.
    pub async fn queues(&self) -> Vec<QueueDump> {
        let all: Vec<(String, Tracked<QueueMsg<AddonTask>>)> = {
            let q = self.router.queues.lock().unwrap_or_else(|p| p.into_inner());
            q.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let mut out = Vec::new();
        for (_, q) in all {
            let (tx, rx) = ractor::concurrency::oneshot();
            if q.cast(QueueMsg::Dump(tx.into())).is_ok()
                && let Ok(d) = rx.await
            {
                out.push(d);
            }
        }
        out.sort_by(|a, b| (a.name != "main", &a.name).cmp(&(b.name != "main", &b.name)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook_config::{HookKind, parse};

    fn hook(name: &str, config: &str) -> GlobalHook {
        GlobalHook {
            name: name.into(),
            path: name.into(),
            config: parse(config, HookKind::Global, name).unwrap_or_default(),
        }
    }

    #[test]
    fn startup_sequence_follows_the_reference_order() {
        let hooks = vec![
            hook("b.sh", "configVersion: v1\nonStartup: 1"),
            hook(
                "a.sh",
                "configVersion: v1\nonStartup: 2\nschedule: [{crontab: '@daily'}]",
            ),
            hook(
                "c.sh",
                "configVersion: v1\nonStartup: 1\nkubernetes: [{kind: Pod}]",
            ),
        ];
        let tasks = startup_tasks(&hooks, &TaskIds::after(0));
        let lines: Vec<String> = tasks
            .iter()
            .map(|t| format!("{}:{}", t.kind.task_type().as_str(), t.description))
            .collect();
        assert_eq!(
            lines,
            [
                "GlobalHookRun:onStartup:b.sh",
                "GlobalHookRun:onStartup:c.sh",
                "GlobalHookRun:onStartup:a.sh",
                "GlobalHookEnableScheduleBindings:a.sh",
                "GlobalHookEnableKubernetesBindings:c.sh",
                "GlobalHookWaitKubernetesSynchronization:",
                "ConvergeModules:OperatorStartup",
            ]
        );
    }

    #[test]
    fn kubernetes_event_runs_from_before_a_restart_are_dropped() {
        let hooks = vec![hook("a.sh", "configVersion: v1\nonStartup: 1")];
        let mut restored = Queues::<AddonTask>::default();
        let event = crate::bindings::hook_run_task(
            TaskId(50),
            None,
            "w.sh",
            "other",
            "pods",
            vec![json!({"binding": "pods", "type": "Event", "_index": 0})],
            false,
        );
        let schedule = crate::bindings::hook_run_task(
            TaskId(51),
            None,
            "w.sh",
            "other",
            "tick",
            vec![json!({"binding": "tick", "type": "Schedule"})],
            false,
        );
        for task in [event, schedule] {
            restored.apply(&TaskEvent::TaskEnqueued {
                task,
                position: Position::Tail,
            });
        }
        for e in plan_startup(&restored, startup_tasks(&hooks, &TaskIds::after(51))) {
            restored.apply(&e);
        }
        let other: Vec<TaskId> = restored.queues["other"].iter().map(|t| t.spec.id).collect();
        assert_eq!(
            other,
            [TaskId(51)],
            "the Event run is dropped, the Schedule run kept"
        );
    }

    #[test]
    fn restart_reuses_pending_steps_in_order() {
        let hooks = vec![
            hook("a.sh", "configVersion: v1\nonStartup: 1"),
            hook("b.sh", "configVersion: v1\nonStartup: 2"),
        ];
        let first = startup_tasks(&hooks, &TaskIds::after(0));
        let mut restored = Queues::<AddonTask>::default();
        for e in plan_startup(&restored, first.clone()) {
            restored.apply(&e);
        }
        // a.sh finished; b.sh failed twice before the crash.
        restored.apply(&TaskEvent::TaskSucceeded { id: first[0].id });
        restored.apply(&TaskEvent::TaskFailed {
            id: first[1].id,
            error: "boom".into(),
            failures: 2,
            next_retry_at_ms: 0,
        });
        let again = startup_tasks(&hooks, &TaskIds::after(restored.last_task_id));
        for e in plan_startup(&restored, again) {
            restored.apply(&e);
        }
        let main = &restored.queues["main"];
        let lines: Vec<String> = main
            .iter()
            .map(|t| format!("{}:{}", t.spec.description, t.failures))
            .collect();
        assert_eq!(
            lines,
            [
                "onStartup:a.sh:0",
                "onStartup:b.sh:2",
                ":0",
                "OperatorStartup:0"
            ]
        );
        assert_eq!(
            main[1].spec.id, first[1].id,
            "the failed task resumes, not a copy"
        );
    }
}
