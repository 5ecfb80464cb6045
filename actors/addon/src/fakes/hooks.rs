//! Hooks that answer from a script: `--config` text, outputs, `enabled` answers, gates that
//! hold runs, and planned failures (a run that exits non-zero N times, a `--config` that
//! fails, an `enabled` script that errors).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::watch;

use super::{Faults, lock};
use crate::ports::{BoxFut, EnabledRun, HookExecutor, HookResult, HookRun, PortError};

/// One hook run as the fake saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct SeenRun {
    /// The hook's name.
    pub hook: String,
    /// The first binding context's `binding` (`onStartup`, `beforeHelm`, …).
    pub binding: String,
    /// The module, for module hooks.
    pub module: Option<String>,
    /// `VALUES_PATH` as the hook received it.
    pub values: Value,
    /// `CONFIG_VALUES_PATH` as the hook received it.
    pub config_values: Value,
    /// `BINDING_CONTEXT_PATH` as the hook received it.
    pub contexts: Value,
    /// The queue it ran in.
    pub queue: Option<String>,
}

/// One `enabled` script run as the fake saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct SeenEnabled {
    /// The module.
    pub module: String,
    /// `global.enabledModules` of its `VALUES_PATH`.
    pub enabled_modules: Vec<String>,
}

/// What a scripted hook answers.
pub type Answer = Arc<dyn Fn(&HookRun) -> Result<HookResult, PortError> + Send + Sync>;

type EnabledAnswer = Arc<dyn Fn(&EnabledRun) -> bool + Send + Sync>;

#[derive(Default)]
struct Script {
    configs: HashMap<String, String>,
    answers: HashMap<String, Answer>,
    enabled: HashMap<String, EnabledAnswer>,
    gates: HashMap<String, watch::Receiver<bool>>,
    runs: Vec<SeenRun>,
    enabled_runs: Vec<SeenEnabled>,
    run_faults: Faults,
    config_faults: Faults,
    enabled_faults: Faults,
}

/// Hooks whose `--config`, output and `enabled` answers come from a script.
#[derive(Clone, Default)]
pub struct ScriptedHooks {
    script: Arc<Mutex<Script>>,
}

/// Holds a hook's runs until [`Gate::open`].
pub struct Gate(watch::Sender<bool>);

impl Gate {
    /// Lets every held and later run go on.
    pub fn open(&self) {
        let _ = self.0.send(true);
    }
}

impl ScriptedHooks {
    /// `hook --config` prints `config`.
    pub fn config(&self, hook: &str, config: &str) -> &Self {
        lock(&self.script)
            .configs
            .insert(hook.to_string(), config.to_string());
        self
    }

    /// Runs of `hook` answer with `answer` (the default: exit 0, no output).
    pub fn answer(
        &self,
        hook: &str,
        answer: impl Fn(&HookRun) -> Result<HookResult, PortError> + Send + Sync + 'static,
    ) -> &Self {
        lock(&self.script)
            .answers
            .insert(hook.to_string(), Arc::new(answer));
        self
    }

    /// The `enabled` script of `module` answers `on` (the default: true).
    pub fn enabled(&self, module: &str, on: bool) -> &Self {
        self.enabled_by(module, move |_| on)
    }

    /// The `enabled` script of `module` answers what `decide` says of its run (its values
    /// carry `global.enabledModules`).
    pub fn enabled_by(
        &self,
        module: &str,
        decide: impl Fn(&EnabledRun) -> bool + Send + Sync + 'static,
    ) -> &Self {
        lock(&self.script)
            .enabled
            .insert(module.to_string(), Arc::new(decide));
        self
    }

    /// The next `times` runs of `hook` fail with `error`, as a hook exiting non-zero does;
    /// later runs answer as scripted.
    pub fn fail(&self, hook: &str, times: u32, error: PortError) -> &Self {
        lock(&self.script).run_faults.set(hook, times, error);
        self
    }

    /// The next `times` `hook --config` runs fail with `error`.
    pub fn fail_config(&self, hook: &str, times: u32, error: PortError) -> &Self {
        lock(&self.script).config_faults.set(hook, times, error);
        self
    }

    /// The next `times` runs of `module`'s `enabled` script fail with `error`.
    pub fn fail_enabled(&self, module: &str, times: u32, error: PortError) -> &Self {
        lock(&self.script).enabled_faults.set(module, times, error);
        self
    }

    /// Runs of `hook` wait until the returned gate opens.
    pub fn gate(&self, hook: &str) -> Gate {
        let (tx, rx) = watch::channel(false);
        lock(&self.script).gates.insert(hook.to_string(), rx);
        Gate(tx)
    }

    /// Every run so far, in the order they started.
    pub fn runs(&self) -> Vec<SeenRun> {
        lock(&self.script).runs.clone()
    }

    /// Every `enabled` script run so far, in order.
    pub fn enabled_runs(&self) -> Vec<SeenEnabled> {
        lock(&self.script).enabled_runs.clone()
    }
}

impl HookExecutor for ScriptedHooks {
    fn config(&self, name: &str, _path: &Path) -> BoxFut<'_, Result<String, PortError>> {
        let result = {
            let mut script = lock(&self.script);
            match script.config_faults.take(name) {
                Some(e) => Err(e.context(format_args!("hook {name:?} --config"))),
                None => script.configs.get(name).cloned().ok_or_else(|| {
                    PortError::permanent(format!("hook {name:?}: no scripted configuration"))
                }),
            }
        };
        Box::pin(async move { result })
    }

    fn run(&self, run: HookRun) -> BoxFut<'static, Result<HookResult, PortError>> {
        // Recorded when called, as the real runner starts the process when called.
        let (answer, gate, fault) = {
            let mut script = lock(&self.script);
            script.runs.push(SeenRun {
                hook: run.name.clone(),
                binding: run.binding_context[0]["binding"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                module: run.log_fields.module.clone(),
                values: run.values.clone(),
                config_values: run.config_values.clone(),
                contexts: run.binding_context.clone(),
                queue: run.log_fields.queue.clone(),
            });
            (
                script.answers.get(&run.name).cloned(),
                script.gates.get(&run.name).cloned(),
                script.run_faults.take(&run.name),
            )
        };
        Box::pin(async move {
            if let Some(mut gate) = gate {
                let _ = gate.wait_for(|open| *open).await;
            }
            if let Some(e) = fault {
                return Err(e);
            }
            match answer {
                Some(answer) => answer(&run),
                None => Ok(HookResult::default()),
            }
        })
    }

    fn enabled(&self, run: EnabledRun) -> BoxFut<'_, Result<bool, PortError>> {
        let result = {
            let mut script = lock(&self.script);
            script.enabled_runs.push(SeenEnabled {
                module: run.module.clone(),
                enabled_modules: run.values["global"]["enabledModules"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|m| m.as_str().map(String::from))
                    .collect(),
            });
            match script.enabled_faults.take(&run.module) {
                Some(e) => Err(e),
                None => Ok(script
                    .enabled
                    .get(&run.module)
                    .map(|decide| decide(&run))
                    .unwrap_or(true)),
            }
        };
        Box::pin(async move { result })
    }
}
