//! The conductor: starts the global hooks actor and the queue actors, schedules
//! addon-operator's startup sequence (`startup.rs`: planned, merged with whatever the
//! journal says was still pending), and runs tasks by type; `router.rs` keeps the queue
//! actors.
//!
//! ```text
//!   Engine::start ──► GlobalHooksActor (global values, hook runs)
//!        │
//!        └──► QueueActor "main", named queues on demand ──► EngineHandler::handle(task)
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ractor::Actor;
use serde_json::{Value, json};

use bosun_runtime::mailbox::{Mailboxes, Tracked};
use bosun_runtime::queue_actor::{QueueMsg, Router as _};
use bosun_runtime::{Queues, TaskIds};

use crate::bindings::owner_of;
use crate::context_stub::ContextStub;
use crate::events::{Event, TaskSpec};
use crate::global_hooks::{GlobalHook, GlobalHooksActor, GlobalHooksArgs, GlobalHooksMsg};
use crate::hook_metrics::HookMetrics;
use crate::modules::{ConfigSections, ModuleActor, ModuleArgs, ModuleDef, ModuleMsg};
use crate::ports::{Journal, KubeBindings, ObjectPreview, Ports};
use crate::scheduler::{ScheduleEntry, Scheduler};
use crate::state::State;
use crate::sync_waiter::SyncWaiter;
use crate::task::{AddonTask, HookRunParams, converge_task, module_run_task};
use crate::values::GlobalDocs;

mod error;
mod handler;
mod router;
mod startup;

pub use crate::task::{QueueDump, TaskOutcome};
pub use error::{EngineError, RequestError};
use handler::{ConfigSent, EngineHandler, ModuleSet, ModuleStatus, config_to_global, global_docs};
use router::QueueRouter;
use startup::{plan_startup, startup_tasks};

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
    /// The host's work gate: the queues start no task once it stops.
    pub gate: bosun_runtime::lifecycle::WorkGate,
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
        contexts: Vec<ContextStub>,
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
    pub async fn config_changed(
        &self,
        sections: ConfigSections,
    ) -> Result<Vec<String>, RequestError> {
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
    async fn apply_config(&self, sections: ConfigSections) -> Result<(), RequestError> {
        self.send_config(sections).await?.modules_changed().await?;
        Ok(())
    }

    /// Applies the global section and the enabled flags, and sends every module actor its
    /// section (all at once, so a busy module does not hold the others back).
    async fn send_config(&self, sections: ConfigSections) -> Result<ConfigSent, RequestError> {
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
                .await?;
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
    pub async fn module_values(&self, module: &str) -> Result<Value, RequestError> {
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
    pub async fn module_render(&self, module: &str) -> Result<Vec<Value>, RequestError> {
        let docs = self.global_docs().await?;
        Ok(self
            .modules
            .ask(module, |reply| ModuleMsg::Render(docs, reply))
            .await??)
    }

    /// A module's rendered objects, each as it is live and as applying it would leave it
    /// (a dry run), for `module render --diff`.
    pub async fn module_preview(&self, module: &str) -> Result<Vec<ObjectPreview>, RequestError> {
        let objects = self.module_render(module).await?;
        self.preview_objects(module, objects).await
    }

    /// [`Engine::module_preview`] of some of a module's rendered objects (`bosun explain`
    /// previews the one it explains).
    pub async fn preview_objects(
        &self,
        module: &str,
        objects: Vec<Value>,
    ) -> Result<Vec<ObjectPreview>, RequestError> {
        self.modules
            .releases
            .preview(module.to_string(), objects)
            .await
            .map_err(|source| RequestError::Preview {
                module: module.to_string(),
                source,
            })
    }

    /// A module's config values document (`CONFIG_VALUES_PATH` of its hooks).
    pub async fn module_config(&self, module: &str) -> Result<Value, RequestError> {
        let docs = self.global_docs().await?;
        self.modules
            .ask(module, |reply| ModuleMsg::Config(docs, reply))
            .await
    }

    /// The global config values document `{"global": …}`.
    pub async fn global_config(&self) -> Result<Value, RequestError> {
        Ok(self.global_docs().await?.config)
    }

    async fn global_docs(&self) -> Result<GlobalDocs, RequestError> {
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
            gate: args.gate.clone(),
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
