//! The global hook set as an actor: it owns the global values (config and memory layers),
//! runs global hooks with them, validates and journals the patches hooks return, and writes
//! config patches back to the ConfigMap.

use std::path::PathBuf;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Value, json};

use bosun_runtime::TaskIds;
use bosun_runtime::mailbox::{Describe, Envelope, MailboxHandle, Tracked};

use crate::bindings::{HookRef, owner_of};
use crate::context_stub::ContextStub;
use crate::events::{Event, Scope, ValuesLayer};
use crate::hook_config::HookConfig;
use crate::hook_metrics::HookMetrics;
use crate::hook_output::{Effects, Origin, OutputError, ScopeValues};
use crate::ports::{HookResult, HookRun, LogFields, PortError, Ports};
use crate::schema::ValuesSchemas;
use crate::state::{QueuedTask, State};
use crate::sync_waiter::SyncWaiter;
use crate::task::{Completion, TaskOutcome, converge_task};
use crate::telemetry::{self, HookRunLabels, RunOutcome};
use crate::values::{GlobalDocs, apply_memory, checksum};

/// Why the global hooks actor did not take a ConfigMap section.
#[derive(Debug, thiserror::Error)]
pub enum GlobalHooksError {
    /// The journal refused the values change.
    #[error("cannot journal values change: {0}")]
    Journal(PortError),
    /// The global section breaks the global config-values schema.
    #[error("section \"global\": {0}")]
    Section(crate::schema::SchemaError),
}

/// A global hook and its configuration.
#[derive(Clone, Debug)]
pub struct GlobalHook {
    /// Name (path relative to the global hooks directory).
    pub name: String,
    /// Executable.
    pub path: PathBuf,
    /// Its validated configuration.
    pub config: HookConfig,
}

/// Messages of the global hooks actor.
#[derive(Debug)]
pub(crate) enum GlobalHooksMsg {
    /// Run a `GlobalHookRun` task; its end goes to its queue through the completion.
    Run(Box<QueuedTask>, Completion),
    /// A hook process finished (after running this long).
    Done(
        Box<QueuedTask>,
        Result<HookResult, PortError>,
        std::time::Duration,
        Completion,
    ),
    /// Reply with the global values document `{"global": …}`.
    Values(RpcReplyPort<Value>),
    /// Reply with the values and config documents, for module runs.
    Docs(RpcReplyPort<GlobalDocs>),
    /// New config values from the ConfigMap's `global` section.
    /// Replies whether the config values changed (our own writes come back unchanged).
    ConfigChanged(Value, RpcReplyPort<Result<bool, GlobalHooksError>>),
}

impl Describe for GlobalHooksMsg {
    fn summary(&self) -> String {
        match self {
            GlobalHooksMsg::Run(t, _) => format!("Run {}", crate::queue::describe(t)),
            GlobalHooksMsg::Done(t, r, ..) => {
                format!(
                    "Done {} {}",
                    t.spec.kind.hook().unwrap_or_default(),
                    if r.is_ok() { "ok" } else { "error" }
                )
            }
            GlobalHooksMsg::Values(_) => "Values".into(),
            GlobalHooksMsg::Docs(_) => "Docs".into(),
            GlobalHooksMsg::ConfigChanged(..) => "ConfigChanged".into(),
        }
    }
}

/// Start-up arguments.
pub(crate) struct GlobalHooksArgs {
    /// The hooks, with their configurations.
    pub hooks: Vec<GlobalHook>,
    /// Static values (`global` of the values.yaml files).
    pub static_values: Value,
    /// `$GLOBAL_HOOKS_DIR/openapi` schemas.
    pub schemas: Arc<ValuesSchemas>,
    /// State restored from the journal (its `global` values are used).
    pub restored: State,
    /// The journal, hook processes, the ConfigMap, bindings and the object patcher.
    pub ports: Ports,
    /// This actor's mailbox tracking.
    pub mailbox: MailboxHandle,
    /// Task id allocator.
    pub ids: TaskIds,
    /// Synchronization runs the startup waits for.
    pub sync_waiter: SyncWaiter,
    /// Where the hooks' `METRICS_PATH` operations go.
    pub hook_metrics: HookMetrics,
}

/// The actor.
pub(crate) struct GlobalHooksActor;

/// Its state.
pub(crate) struct GlobalHooksState {
    hooks: Vec<GlobalHook>,
    static_values: Value,
    schemas: Arc<ValuesSchemas>,
    /// What the journal holds (this actor reads the global values from it).
    journaled: State,
    /// The journal, hook processes, the ConfigMap, Helm, bindings and the object patcher.
    ports: Ports,
    mailbox: MailboxHandle,
    me: Tracked<GlobalHooksMsg>,
    ids: TaskIds,
    sync_waiter: SyncWaiter,
    hook_metrics: HookMetrics,
}

impl GlobalHooksState {
    fn config(&self) -> Value {
        self.journaled
            .values
            .get("global")
            .map(|v| v.config.clone())
            .filter(|c| !c.is_null())
            .unwrap_or(json!({}))
    }

    /// `CONFIG_VALUES_PATH`: the config values alone (the ConfigMap's section).
    fn config_document(&self) -> Value {
        json!({ "global": self.config() })
    }

    /// `VALUES_PATH`: static values, then config values, then the memory patches.
    fn values_document(&self) -> Value {
        self.values_with(&self.config())
    }

    /// The values document with `config` as the config values (static values and schema
    /// defaults layered around it, memory patches on top).
    fn values_with(&self, config: &Value) -> Value {
        let mut doc = json!({ "global": self.schemas.layer(&self.static_values, config) });
        if let Some(v) = self.journaled.values.get("global") {
            // Patches were checked when accepted; keep what applies.
            let _ = apply_memory(&mut doc, &v.memory);
        }
        doc
    }

    async fn journal(&mut self, events: Vec<Event>) -> Result<(), GlobalHooksError> {
        self.ports
            .journal
            .append(events.clone())
            .await
            .map_err(GlobalHooksError::Journal)?;
        self.journaled.apply_all(&events);
        Ok(())
    }

    fn start(&self, task: QueuedTask, done: Completion) {
        let Some(hook) = self
            .hooks
            .iter()
            .find(|h| Some(h.name.as_str()) == task.spec.kind.hook())
        else {
            done.finish(TaskOutcome::Fail(format!(
                "global hook {:?} is not loaded",
                task.spec.kind.hook()
            )));
            return;
        };
        let href = HookRef {
            owner: owner_of(None).into(),
            hook: hook.name.as_str().into(),
        };
        let stubs = crate::queue::compact_groups(task.spec.kind.contexts().to_vec());
        let (contexts, binding) = crate::bindings::contexts_for_run(&hook.config, stubs, &|i| {
            self.ports.bindings.snapshot(&href, i)
        });
        let run = HookRun {
            name: hook.name.clone(),
            path: hook.path.clone(),
            binding_context: contexts,
            values: self.values_document(),
            config_values: self.config_document(),
            log_fields: LogFields {
                module: None,
                binding: Some(binding.to_string()),
                queue: Some(task.spec.queue.to_string()),
            },
        };
        let me = self.me.clone();
        let mailbox = self.mailbox.clone();
        let job = mailbox.job_started(format!("hook {binding}:{}", hook.name));
        let started = std::time::Instant::now();
        // The process starts here, on this actor's turn; the task only waits for its end
        // (a task spawned at the end of a chain of hand-offs may first wake another worker
        // and wait for it, and the hook would wait with it).
        let running = self.ports.executor.run(run);
        tokio::spawn(async move {
            let result = running.await;
            let took = started.elapsed();
            let outcome = match &result {
                Ok(_) => "exited 0".to_string(),
                Err(e) => format!("error: {e}"),
            };
            // Report first, so the actor never looks idle between the two.
            let _ = me.cast(GlobalHooksMsg::Done(Box::new(task), result, took, done));
            mailbox.job_finished(job, outcome);
        });
    }

    /// Applies a finished run's output and records the run; an error fails the task.
    async fn finish(
        &mut self,
        task: &QueuedTask,
        result: Result<HookResult, PortError>,
        took: std::time::Duration,
    ) -> TaskOutcome {
        let hook = task.spec.kind.hook().unwrap_or_default().to_string();
        let allow_failure = task.spec.kind.hook_run().is_some_and(|r| r.allow_failure);
        let labels = HookRunLabels {
            module: None,
            hook: hook.clone(),
            binding: telemetry::binding_of(task),
            queue: task.spec.queue.clone(),
            activation: telemetry::activation_of(task),
        };
        let failed = if allow_failure {
            RunOutcome::AllowedError
        } else {
            RunOutcome::Error
        };
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                labels.record(failed, took, None);
                if allow_failure {
                    tracing::warn!(hook = %hook, "hook failed, allowed by allowFailure: {e}");
                    self.synchronized(task);
                    return TaskOutcome::done();
                }
                return TaskOutcome::Fail(e.to_string());
            }
        };
        // Only patches change the values: without them the documents are not hashed.
        let patched = [&out.values_patch, &out.config_values_patch]
            .iter()
            .any(|p| !p.trim().is_empty());
        let before = patched.then(|| checksum(&self.values_document()));
        let applied = self.apply_output(&hook, &out).await;
        let outcome = if applied.is_ok() {
            RunOutcome::Success
        } else {
            failed
        };
        labels.record(outcome, took, out.usage.as_ref());
        match applied {
            Ok(()) => {}
            Err(e) if allow_failure => {
                tracing::warn!(hook = %hook, "hook output rejected, allowed by allowFailure: {e}");
                self.synchronized(task);
                return TaskOutcome::done();
            }
            Err(e) => return TaskOutcome::Fail(e.to_string()),
        }
        self.synchronized(task);
        let changed = before.is_some_and(|b| checksum(&self.values_document()) != b);
        let event_driven = task
            .spec
            .kind
            .contexts()
            .iter()
            .any(|c| matches!(c, ContextStub::Event { .. } | ContextStub::Schedule { .. }));
        if changed && event_driven {
            let tail = vec![converge_task(self.ids.next(), "GlobalValuesChanged")];
            return TaskOutcome::Success {
                head: Vec::new(),
                after: Vec::new(),
                tail,
            };
        }
        TaskOutcome::done()
    }

    /// The task's Synchronization runs are done: their bindings' events flow, and the
    /// startup stops waiting for them.
    fn synchronized(&self, task: &QueuedTask) {
        let hook = task.spec.kind.hook().unwrap_or_default().to_string();
        let href = HookRef {
            owner: owner_of(None).into(),
            hook: hook.as_str().into(),
        };
        for i in crate::bindings::synchronized(task.spec.kind.contexts()) {
            self.ports.bindings.release(&href, i);
            self.sync_waiter.done(&hook, i);
        }
    }

    /// Takes what a hook wrote (see [`crate::hook_output`]) and folds the journaled events.
    async fn apply_output(&mut self, hook: &str, out: &HookResult) -> Result<(), OutputError> {
        let values_with = |config: &Value| self.values_with(config);
        let memory = self
            .journaled
            .values
            .get("global")
            .map(|v| v.memory.as_slice())
            .unwrap_or_default();
        let scope = ScopeValues {
            config: self.config(),
            memory,
            static_values: &self.static_values,
            schemas: &self.schemas,
            values_with: &values_with,
        };
        let effects = Effects {
            journal: self.ports.journal.as_ref(),
            patcher: self.ports.patcher.as_ref(),
            config_store: self.ports.config_store.as_ref(),
            hook_metrics: &self.hook_metrics,
        };
        let origin = Origin { hook, module: None };
        let events = crate::hook_output::apply(origin, out, &scope, &effects).await?;
        self.journaled.apply_all(&events);
        Ok(())
    }
}

impl Actor for GlobalHooksActor {
    type Msg = Envelope<GlobalHooksMsg>;
    type State = GlobalHooksState;
    type Arguments = GlobalHooksArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: GlobalHooksArgs,
    ) -> Result<GlobalHooksState, ActorProcessingErr> {
        Ok(GlobalHooksState {
            me: Tracked::new(myself, args.mailbox.clone()),
            hooks: args.hooks,
            static_values: args.static_values,
            schemas: args.schemas,
            journaled: args.restored,
            ports: args.ports,
            mailbox: args.mailbox,
            ids: args.ids,
            sync_waiter: args.sync_waiter,
            hook_metrics: args.hook_metrics,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        envelope: Self::Msg,
        st: &mut GlobalHooksState,
    ) -> Result<(), ActorProcessingErr> {
        st.mailbox.begin(envelope.seq);
        match envelope.msg {
            GlobalHooksMsg::Run(task, done) => st.start(*task, done),
            GlobalHooksMsg::Done(task, result, took, done) => {
                let outcome = st.finish(&task, result, took).await;
                done.finish(outcome);
            }
            GlobalHooksMsg::Values(reply) => {
                let _ = reply.send(st.values_document());
            }
            GlobalHooksMsg::Docs(reply) => {
                let _ = reply.send(GlobalDocs {
                    values: st.values_document(),
                    config: st.config_document(),
                    enabled_modules: Vec::new(),
                });
            }
            GlobalHooksMsg::ConfigChanged(config, reply) => {
                let result = if st.config() == config {
                    Ok(false)
                } else if let Err(e) = st.schemas.validate_config(&st.static_values, &config) {
                    telemetry::config_values_error();
                    Err(GlobalHooksError::Section(e))
                } else {
                    st.journal(vec![Event::ValuesSet {
                        scope: Scope::Global,
                        layer: ValuesLayer::Config,
                        values: config,
                        source: "configmap".into(),
                    }])
                    .await
                    .map(|()| true)
                };
                let _ = reply.send(result);
            }
        }
        st.mailbox.end();
        Ok(())
    }
}
