//! Adapters from the actors' ports to the real world: hook processes and the ConfigMap.

use std::collections::BTreeMap;
use std::path::Path;

use bosun_addon::ports::{
    BoxFut, ConfigStore, EnabledRun, HookExecutor, HookResult, HookRun, LogFields, PortError,
};
use bosun_kube::port_error;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

use crate::hooks::{HookInput, HookProcess};

impl HookExecutor for HookProcess {
    fn config(&self, name: &str, path: &Path) -> BoxFut<'_, Result<String, PortError>> {
        let (name, path) = (name.to_string(), path.to_path_buf());
        Box::pin(async move {
            HookProcess::config(self, &name, &path)
                .await
                .map_err(|e| PortError::transient(e.to_string()))
        })
    }

    fn run(&self, run: HookRun) -> BoxFut<'static, Result<HookResult, PortError>> {
        let input = HookInput {
            name: &run.name,
            path: &run.path,
            binding_context: &run.binding_context,
            values: Some(&run.values),
            config_values: Some(&run.config_values),
            env: Vec::new(),
            log_fields: run.log_fields.clone(),
        };
        let started = HookProcess::start(self, &input);
        Box::pin(async move {
            let out = started
                .map_err(|e| PortError::transient(e.to_string()))?
                .finish()
                .await
                .map_err(|e| PortError::transient(e.to_string()))?;
            Ok(HookResult {
                values_patch: out.values_patch,
                config_values_patch: out.config_values_patch,
                metrics: out.metrics,
                kubernetes_patch: out.kubernetes_patch,
                duration: out.duration,
                usage: out.usage,
            })
        })
    }

    fn enabled(&self, run: EnabledRun) -> BoxFut<'_, Result<bool, PortError>> {
        Box::pin(run_enabled(self, run))
    }
}

/// The file contract of `enabled` scripts, through the hook runner.
pub(crate) async fn run_enabled(runner: &HookProcess, run: EnabledRun) -> Result<bool, PortError> {
    let name = format!("{}/enabled", run.module);
    let context = serde_json::json!([]);
    let input = HookInput {
        name: &name,
        path: &run.path,
        binding_context: &context,
        values: Some(&run.values),
        config_values: Some(&run.config_values),
        env: Vec::new(),
        log_fields: LogFields {
            module: Some(run.module.clone()),
            binding: Some("enabled".into()),
            queue: None,
        },
    };
    runner
        .enabled(&input)
        .await
        .map_err(|e| PortError::transient(e.to_string()))
}

/// The operator's ConfigMap, through the Kubernetes API.
pub struct KubeConfigStore {
    api: Api<ConfigMap>,
    name: String,
}

impl KubeConfigStore {
    /// The ConfigMap `name` in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> KubeConfigStore {
        KubeConfigStore {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
        }
    }
}

impl ConfigStore for KubeConfigStore {
    fn load(&self) -> BoxFut<'_, Result<Option<BTreeMap<String, String>>, PortError>> {
        Box::pin(async move {
            match self.api.get_opt(&self.name).await {
                Ok(cm) => Ok(cm.map(|cm| cm.data.unwrap_or_default())),
                Err(e) => Err(port_error(
                    format!("cannot read ConfigMap {}: {e}", self.name),
                    e,
                )),
            }
        })
    }

    fn save(&self, key: String, yaml: String) -> BoxFut<'_, Result<(), PortError>> {
        Box::pin(self.edit(key, Some(yaml)))
    }

    fn remove(&self, key: String) -> BoxFut<'_, Result<(), PortError>> {
        Box::pin(self.edit(key, None))
    }
}

impl KubeConfigStore {
    /// Sets (`Some`) or removes (`None`) one key: read-modify-write with the
    /// resourceVersion, retried on conflicts.
    async fn edit(&self, key: String, yaml: Option<String>) -> Result<(), PortError> {
        for _ in 0..5 {
            let existing =
                self.api.get_opt(&self.name).await.map_err(|e| {
                    port_error(format!("cannot read ConfigMap {}: {e}", self.name), e)
                })?;
            let result = match (existing, &yaml) {
                (Some(mut cm), _) => {
                    let data = cm.data.get_or_insert_with(Default::default);
                    let changed = match &yaml {
                        Some(text) => data.insert(key.clone(), text.clone()).as_ref() != Some(text),
                        None => data.remove(&key).is_some(),
                    };
                    if !changed {
                        return Ok(());
                    }
                    self.api
                        .replace(&self.name, &PostParams::default(), &cm)
                        .await
                }
                (None, None) => return Ok(()),
                (None, Some(text)) => {
                    let mut cm = ConfigMap::default();
                    cm.metadata.name = Some(self.name.clone());
                    cm.data = Some(BTreeMap::from([(key.clone(), text.clone())]));
                    self.api.create(&PostParams::default(), &cm).await
                }
            };
            match result {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(e) => {
                    return Err(port_error(
                        format!("cannot write ConfigMap {}: {e}", self.name),
                        e,
                    ));
                }
            }
        }
        Err(PortError::conflict(format!(
            "cannot write ConfigMap {}: too many conflicting writers",
            self.name
        )))
    }
}
