//! The engine's task handler: the converge conductor (beforeAll, the modules' enabled
//! state, deletions and runs in order, afterAll and the reload it may ask for), the
//! dispatch of every task to the global hooks actor or a module's actor, and what the
//! modules share (`ModuleSet`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

use bosun_runtime::TaskIds;
use bosun_runtime::mailbox::Tracked;
use bosun_runtime::queue_actor;

use crate::bindings::{HookRef, owner_of};
use crate::events::{Event, TaskSpec};
use crate::global_hooks::{GlobalHook, GlobalHooksMsg};
use crate::modules::{ModuleDef, ModuleError, ModuleMsg, flag_chain};
use crate::ports::{BoxFut, Journal, KubeBindings, Releases};
use crate::scheduler::Scheduler;
use crate::state::QueuedTask;
use crate::sync_waiter::SyncWaiter;
use crate::task::{
    AddonTask, Completion, ConvergePhase, converge_task, module_run_task, module_task,
};
use crate::values::GlobalDocs;

use super::error::RequestError;
use super::router::{QueueRouter, Router};
use super::startup::{around_context, hook_task, main_task, ordered};
use crate::task::TaskOutcome;

/// The global values and config documents, from the global hooks actor.
pub(super) async fn global_docs(
    global: &Tracked<GlobalHooksMsg>,
) -> Result<GlobalDocs, RequestError> {
    let (tx, rx) = ractor::concurrency::oneshot();
    global
        .cast(GlobalHooksMsg::Docs(tx.into()))
        .map_err(|_| RequestError::GlobalHooksNotRunning)?;
    rx.await.map_err(|_| RequestError::GlobalHooksStopped)
}

pub(super) async fn config_to_global(
    global: &Tracked<GlobalHooksMsg>,
    config: Value,
) -> Result<bool, RequestError> {
    let (tx, rx) = ractor::concurrency::oneshot();
    global
        .cast(GlobalHooksMsg::ConfigChanged(config, tx.into()))
        .map_err(|_| RequestError::GlobalHooksNotRunning)?;
    Ok(rx.await.map_err(|_| RequestError::GlobalHooksStopped)??)
}

/// Config sections handed out: what changed at once, and the module actors' answers.
pub(super) struct ConfigSent {
    pub(super) global_changed: bool,
    pub(super) flags_changed: bool,
    pub(super) replies: Vec<(
        String,
        ractor::concurrency::OneshotReceiver<Result<bool, ModuleError>>,
    )>,
}

impl ConfigSent {
    /// The modules whose section changed. Every module's answer is awaited; refusals are
    /// reported together (the other modules keep their new sections).
    pub(super) async fn modules_changed(self) -> Result<Vec<String>, RequestError> {
        let mut changed = Vec::new();
        let mut errors = Vec::new();
        for (name, reply) in self.replies {
            match reply.await {
                Ok(Ok(true)) => changed.push(name),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => errors.push(RequestError::Module(e)),
                Err(_) => errors.push(RequestError::ModuleStopped(name)),
            }
        }
        if errors.is_empty() {
            Ok(changed)
        } else {
            Err(RequestError::Several(errors))
        }
    }
}

/// The modules and what the conductor knows of them.
pub(super) struct ModuleSet {
    /// Sorted by order, then name.
    pub(super) defs: Vec<ModuleDef>,
    pub(super) monitored: crate::modules::Monitored,
    /// The module hooks' rate limits.
    pub(super) limits: crate::rate::Limits,
    pub(super) actors: OnceLock<HashMap<String, Tracked<ModuleMsg>>>,
    pub(super) status: Mutex<ModuleStatus>,
    pub(super) releases: Arc<dyn Releases>,
    pub(super) ignore_releases: Vec<String>,
}

#[derive(Default)]
pub(super) struct ModuleStatus {
    pub(super) enabled: BTreeMap<String, bool>,
    pub(super) flags: BTreeMap<String, bool>,
}

impl ModuleSet {
    pub(super) fn actor(&self, name: &str) -> Option<Tracked<ModuleMsg>> {
        self.actors.get().and_then(|a| a.get(name)).cloned()
    }

    pub(super) fn status(&self) -> std::sync::MutexGuard<'_, ModuleStatus> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn is_enabled(&self, name: &str) -> bool {
        self.status().enabled.get(name).copied().unwrap_or(false)
    }

    /// The enabled modules in run order (order, then name).
    pub(super) fn enabled_in_order(&self) -> Vec<String> {
        let status = self.status();
        self.defs
            .iter()
            .filter(|d| status.enabled.get(&d.name).copied().unwrap_or(false))
            .map(|d| d.name.clone())
            .collect()
    }

    pub(super) fn def(&self, name: &str) -> Option<&ModuleDef> {
        self.defs.iter().find(|d| d.name == name)
    }

    /// Sends a message built around a reply port and waits for the answer.
    pub(super) async fn ask<T: Send + 'static>(
        &self,
        name: &str,
        msg: impl FnOnce(ractor::RpcReplyPort<T>) -> ModuleMsg,
    ) -> Result<T, RequestError> {
        self.send(name, msg)?
            .await
            .map_err(|_| RequestError::ModuleStopped(name.to_string()))
    }

    /// Puts a request in a module actor's mailbox now; the answer comes later.
    pub(super) fn send<T: Send + 'static>(
        &self,
        name: &str,
        msg: impl FnOnce(ractor::RpcReplyPort<T>) -> ModuleMsg,
    ) -> Result<ractor::concurrency::OneshotReceiver<T>, RequestError> {
        let actor = self
            .actor(name)
            .ok_or_else(|| RequestError::NotLoaded(name.to_string()))?;
        let (tx, rx) = ractor::concurrency::oneshot();
        actor
            .cast(msg(tx.into()))
            .map_err(|_| RequestError::ModuleNotRunning(name.to_string()))?;
        Ok(rx)
    }
}

pub(super) struct EngineHandler {
    pub(super) bindings: Arc<dyn KubeBindings>,
    pub(super) sync_waiter: SyncWaiter,
    pub(super) router: OnceLock<std::sync::Weak<QueueRouter>>,
    pub(super) scheduler: OnceLock<Scheduler>,
    /// `settings.executionMinInterval` of global hooks.
    pub(super) limiters: HashMap<String, crate::rate::Limiter>,
    pub(super) global: Tracked<GlobalHooksMsg>,
    pub(super) hooks: Vec<GlobalHook>,
    pub(super) ids: TaskIds,
    pub(super) sink: Journal,
    pub(super) converged: Arc<AtomicBool>,
    pub(super) converging: Arc<AtomicBool>,
    pub(super) modules: Arc<ModuleSet>,
    /// When the converge in progress started (in this process).
    pub(super) converge_started: Mutex<Option<std::time::Instant>>,
    /// The global values' checksum before this converge's afterAll hooks (`None`: there
    /// are none): values they change reload all modules, as addon-operator's last afterAll
    /// hook does.
    pub(super) before_after_all: Mutex<Option<String>>,
}

impl EngineHandler {
    /// Hands a `GlobalHookRun` to the global hooks actor, which reports its end.
    pub(super) fn run_global_hook(&self, task: QueuedTask, done: Completion) {
        if let Err(e) = self.global.cast(GlobalHooksMsg::Run(Box::new(task), done)) {
            // The message, completion included, is dropped: the task fails and is retried.
            tracing::error!("the global hooks actor is not running: {e}");
        }
    }

    pub(super) async fn journal(&self, event: Event) -> Result<(), RequestError> {
        self.sink.append(vec![event]).await?;
        Ok(())
    }

    pub(super) fn converge_phase(&self, reason: &str, phase: ConvergePhase) -> TaskSpec {
        let mut next = converge_task(self.ids.next(), reason);
        next.kind = AddonTask::ConvergeModules {
            phase,
            reason: reason.to_string(),
        };
        next.description = format!("{reason}:{}", phase.as_str());
        next
    }

    pub(super) fn around_hooks(
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
                    vec![around_context(h, binding)],
                    false,
                )
            })
            .collect()
    }

    pub(super) async fn converge(&self, phase: ConvergePhase, reason: &str) -> TaskOutcome {
        match phase {
            ConvergePhase::StandBy => {
                let started = Event::ConvergeStarted {
                    reason: reason.to_string(),
                };
                if let Err(e) = self.journal(started).await {
                    return TaskOutcome::Fail(e.to_string());
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
                    Err(e) => return TaskOutcome::Fail(e.to_string()),
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
                        Err(e) => return TaskOutcome::Fail(e.to_string()),
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
                    return TaskOutcome::Fail(e.to_string());
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
    pub(super) async fn enable_kubernetes(&self, name: &str) -> TaskOutcome {
        let name = name.to_string();
        let Some(hook) = self.hooks.iter().find(|h| h.name == name) else {
            return TaskOutcome::Fail(format!("global hook {name:?} is not loaded"));
        };
        let Some(router) = self.router.get().and_then(std::sync::Weak::upgrade) else {
            return TaskOutcome::Fail("the queues are not running".into());
        };
        let router: Arc<Router> = router;
        let href = HookRef {
            owner: owner_of(None).into(),
            hook: name.as_str().into(),
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

    pub(super) async fn global_docs(&self) -> Result<GlobalDocs, RequestError> {
        global_docs(&self.global).await
    }

    /// The flag chain and the `enabled` script for one module.
    pub(super) async fn decide(
        &self,
        def: &ModuleDef,
        docs: &GlobalDocs,
        before: &[String],
    ) -> Result<(bool, &'static str), RequestError> {
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
    pub(super) async fn record_enabled(
        &self,
        name: &str,
        on: bool,
        by: &str,
    ) -> Result<bool, RequestError> {
        let was = self.modules.is_enabled(name);
        self.record_enabled_all(vec![(name.to_string(), on, by)])
            .await?;
        Ok(was)
    }

    /// Journals the modules' new enabled states in one append (one flush for a converge's
    /// hundreds of modules, not one each), then takes them in memory; a module whose state
    /// did not change writes nothing.
    async fn record_enabled_all(
        &self,
        states: Vec<(String, bool, &str)>,
    ) -> Result<(), RequestError> {
        let changed: Vec<(String, bool, &str)> = states
            .into_iter()
            .filter(|(name, on, _)| self.modules.is_enabled(name) != *on)
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        let events = changed
            .iter()
            .map(|(name, on, by)| {
                let (module, reason) = (name.clone(), by.to_string());
                if *on {
                    Event::ModuleEnabled { module, reason }
                } else {
                    Event::ModuleDisabled { module, reason }
                }
            })
            .collect();
        self.sink.append(events).await?;
        let mut status = self.modules.status();
        for (name, on, by) in changed {
            tracing::info!(module = %name, "module {} ({by})", if on { "enabled" } else { "disabled" });
            status.enabled.insert(name, on);
        }
        Ok(())
    }

    /// WaitBeforeAll: recomputes enabled modules and returns the module tasks: CRDs of newly
    /// enabled modules, deletions (reverse order), then runs in order. A module whose
    /// `enabled` script fails gets a run that re-checks it, after the others.
    pub(super) async fn plan_modules(&self, reason: &str) -> Result<Vec<TaskSpec>, RequestError> {
        let reason = reason.to_string();
        let first = !self.converged.load(Ordering::SeqCst);
        let docs = self.global_docs().await?;
        let mut enabled: Vec<(String, bool)> = Vec::new();
        let mut disabled: Vec<String> = Vec::new();
        let mut unsure: Vec<String> = Vec::new();
        let mut states = Vec::new();
        for def in &self.modules.defs {
            let before: Vec<String> = enabled.iter().map(|(n, _)| n.clone()).collect();
            match self.decide(def, &docs, &before).await {
                Ok((on, by)) => {
                    let was = self.modules.is_enabled(&def.name);
                    states.push((def.name.clone(), on, by));
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
        self.record_enabled_all(states).await?;
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
    pub(super) async fn recheck_enabled(
        &self,
        name: &str,
    ) -> Result<Option<TaskOutcome>, RequestError> {
        let name = name.to_string();
        let def = self
            .modules
            .def(&name)
            .ok_or_else(|| RequestError::NotLoaded(name.clone()))?;
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

    pub(super) async fn module_task(&self, task: QueuedTask) -> TaskOutcome {
        let name = task.spec.kind.module().unwrap_or_default().to_string();
        if let AddonTask::ModuleRun { run, .. } = &task.spec.kind {
            if run.check_enabled {
                match self.recheck_enabled(&name).await {
                    Ok(Some(outcome)) => return outcome,
                    Ok(None) => {}
                    Err(e) => return TaskOutcome::Fail(e.to_string()),
                }
            }
            if !self.modules.is_enabled(&name) {
                tracing::info!(module = %name, "module is disabled; ModuleRun skipped");
                return TaskOutcome::done();
            }
        }
        let mut docs = match self.global_docs().await {
            Ok(d) => d,
            Err(e) => return TaskOutcome::Fail(e.to_string()),
        };
        docs.enabled_modules = self.modules.enabled_in_order();
        let task = Box::new(task);
        self.modules
            .ask(&name, |reply| ModuleMsg::Run(task, docs, reply))
            .await
            .unwrap_or_else(|e| TaskOutcome::Fail(e.to_string()))
    }

    /// Releases in the namespace that belong to no enabled module are purged.
    pub(super) async fn discover_releases(&self) -> TaskOutcome {
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
    pub(super) async fn purge(&self, release: &str) -> TaskOutcome {
        let name = release.to_string();
        match self.modules.releases.uninstall(name.clone()).await {
            Ok(_) => {
                tracing::info!(release = %name, "purged release of an unknown module");
                if let Err(e) = self.journal(Event::ReleaseDeleted { module: name }).await {
                    return TaskOutcome::Fail(e.to_string());
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
