//! Why a module actor's step failed: each error names the module and the step (the hook,
//! the binding, the Helm operation), and carries what failed beneath it. A task that
//! fails records its display text.

use crate::hook_config::HookConfigError;
use crate::hook_output::OutputError;
use crate::ports::PortError;
use crate::schema::SchemaError;

/// A hook run that failed: the hook itself, or what it wrote.
#[derive(Debug, thiserror::Error)]
pub enum HookRunError {
    /// The hook did not run to a successful end.
    #[error(transparent)]
    Run(PortError),
    /// Its output was refused.
    #[error(transparent)]
    Output(Box<OutputError>),
}

/// A step of a module that failed, naming the module.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    /// The journal refused the module's events.
    #[error("module {module}: cannot journal: {source}")]
    Journal {
        /// The module.
        module: String,
        /// The journal's error.
        source: PortError,
    },
    /// A hook's `--config` run failed.
    #[error("module {module}: {source}")]
    HookConfigRun {
        /// The module.
        module: String,
        /// The run's error (naming the hook).
        source: PortError,
    },
    /// A hook's configuration is invalid.
    #[error("module {module}: {source}")]
    HookConfig {
        /// The module.
        module: String,
        /// What is wrong (naming the hook and field).
        source: HookConfigError,
    },
    /// A hook of one of the module's fixed bindings (`onStartup`, `beforeHelm`, …) failed.
    #[error("module {module}: {binding} hook failed: {source}")]
    BindingHook {
        /// The module.
        module: String,
        /// The binding.
        binding: &'static str,
        /// What failed.
        source: HookRunError,
    },
    /// A hook run of a task (kubernetes, schedule or Synchronization) failed.
    #[error("module {module}: {source}")]
    Hook {
        /// The module.
        module: String,
        /// What failed.
        source: HookRunError,
    },
    /// The kubernetes bindings of a hook did not start.
    #[error("module {module}: hook {hook:?}: {source}")]
    Bindings {
        /// The module.
        module: String,
        /// The hook.
        hook: String,
        /// The bindings' error.
        source: PortError,
    },
    /// A Synchronization run waited for (main queue or `waitForSynchronization`) failed.
    #[error(
        "module {module}: Synchronization of binding {binding:?} of hook {hook:?} failed: {source}"
    )]
    Synchronization {
        /// The module.
        module: String,
        /// The binding.
        binding: String,
        /// The hook.
        hook: String,
        /// What failed.
        source: HookRunError,
    },
    /// Rendering was asked of a module without a chart.
    #[error("module {module} has no chart")]
    NoChart {
        /// The module.
        module: String,
    },
    /// The values for Helm break the values schema.
    #[error("module {module}: {source}")]
    HelmValues {
        /// The module.
        module: String,
        /// The schema's error.
        source: SchemaError,
    },
    /// The chart does not render.
    #[error("module {module}: chart does not render: {source}")]
    Render {
        /// The module.
        module: String,
        /// Helm's error.
        source: PortError,
    },
    /// The release's status cannot be read.
    #[error("module {module}: cannot read release status: {source}")]
    ReleaseStatus {
        /// The module.
        module: String,
        /// Helm's error.
        source: PortError,
    },
    /// The live objects cannot be compared with the rendered ones.
    #[error("module {module}: cannot check resources: {source}")]
    Drift {
        /// The module.
        module: String,
        /// The cluster's error.
        source: PortError,
    },
    /// `helm upgrade` failed.
    #[error("module {module}: helm upgrade failed: {source}")]
    Upgrade {
        /// The module.
        module: String,
        /// Helm's error.
        source: PortError,
    },
    /// `helm uninstall` failed.
    #[error("module {module}: helm uninstall failed: {source}")]
    Uninstall {
        /// The module.
        module: String,
        /// Helm's error.
        source: PortError,
    },
    /// The `enabled` script failed.
    #[error("module {module}: enabled script: {source}")]
    EnabledScript {
        /// The module.
        module: String,
        /// The run's error.
        source: PortError,
    },
    /// The module's ConfigMap section breaks its config-values schema.
    #[error("section {key:?}: {source}")]
    Section {
        /// The section's key (the module's values key).
        key: String,
        /// The schema's error.
        source: SchemaError,
    },
}
