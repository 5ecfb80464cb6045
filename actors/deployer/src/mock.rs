//! The mock type (`landscaper.gardener.cloud/mock`): its ProviderConfiguration says what
//! to report (`phase`, `initialPhase`, `providerStatus`, `export`), which makes it the
//! reference for the contract's tests. Delete and abort do nothing of their own (the
//! controller removes the export Secret).

use serde::Deserialize;
use serde_json::{Value, json};

use crate::item::{Phase, format_time};
use crate::ports::{BoxFut, DeployerType, Job, Outcome};
use crate::status::DeployError;

/// The type name.
pub const MOCK_TYPE: &str = "landscaper.gardener.cloud/mock";
/// The ProviderConfiguration's apiVersion.
pub(crate) const MOCK_API_VERSION: &str = "mock.deployer.landscaper.gardener.cloud/v1alpha1";

/// The mock's ProviderConfiguration.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MockConfig {
    #[serde(default)]
    pub phase: Option<Phase>,
    #[serde(default)]
    pub initial_phase: Option<Phase>,
    #[serde(default)]
    pub provider_status: Option<Value>,
    #[serde(default)]
    pub export: Option<Value>,
    #[serde(default)]
    pub continuous_reconcile: Option<Value>,
}

impl MockConfig {
    /// Reads `spec.config`; the error names the field.
    pub fn parse(config: &Value) -> Result<MockConfig, DeployError> {
        // serde would read a struct from a list, field by field in order.
        if !config.is_object() {
            return Err(DeployError::config(
                "Reconcile",
                "FailedUnmarshal",
                format!("spec.config: expected an object, got {config}"),
            ));
        }
        if let Some(kind) = config.get("kind").and_then(Value::as_str)
            && kind != "ProviderConfiguration"
        {
            return Err(DeployError::config(
                "Reconcile",
                "FailedUnmarshal",
                format!("spec.config.kind: expected ProviderConfiguration, got {kind:?}"),
            ));
        }
        if let Some(api) = config.get("apiVersion").and_then(Value::as_str)
            && api != MOCK_API_VERSION
        {
            return Err(DeployError::config(
                "Reconcile",
                "FailedUnmarshal",
                format!("spec.config.apiVersion: expected {MOCK_API_VERSION:?}, got {api:?}"),
            ));
        }
        let parsed: MockConfig = serde_path_to_error::deserialize(config.clone()).map_err(|e| {
            let field = match e.path().to_string() {
                p if p == "." || p.is_empty() => "spec.config".to_string(),
                p => format!("spec.config.{p}"),
            };
            DeployError::config(
                "Reconcile",
                "FailedUnmarshal",
                format!("{field}: {}", e.into_inner()),
            )
        })?;
        // `status.providerStatus` is an embedded resource: the API server refuses anything
        // else in the status write (an object without apiVersion and kind too), so it is
        // refused here, before any write.
        if let Some(ps) = parsed.provider_status.as_ref().filter(|ps| !ps.is_null()) {
            let named = |f: &str| ps[f].as_str().is_some_and(|s| !s.is_empty());
            if !ps.is_object() {
                return Err(DeployError::config(
                    "Reconcile",
                    "FailedUnmarshal",
                    format!(
                        "spec.config.providerStatus: expected an object (apiVersion, kind, …), got {ps}"
                    ),
                ));
            }
            if let Some(missing) = ["apiVersion", "kind"].into_iter().find(|f| !named(f)) {
                return Err(DeployError::config(
                    "Reconcile",
                    "FailedUnmarshal",
                    format!(
                        "spec.config.providerStatus.{missing}: must not be empty (providerStatus is an embedded resource; the API server refuses the status otherwise)"
                    ),
                ));
            }
        }
        Ok(parsed)
    }

    /// The phase a reconcile ends in, given the phase the item has.
    pub fn phase_after(&self, current: Option<Phase>) -> Phase {
        if let Some(p) = self.phase {
            return p;
        }
        match self.initial_phase {
            Some(p) if current.is_none_or(|c| matches!(c, Phase::Init | Phase::Progressing)) => p,
            _ => Phase::Succeeded,
        }
    }
}

/// The mock deployer type.
#[derive(Clone, Debug, Default)]
pub struct Mock;

fn validation(ok: bool, message: &str) -> Value {
    let now = format_time(std::time::SystemTime::now());
    json!({
        "type": "DeployItemValidation",
        "status": if ok { "True" } else { "False" },
        "reason": if ok { "SuccessfullValidation" } else { "FailedUnmarshal" },
        "message": message,
        "lastTransitionTime": now,
        "lastUpdateTime": now,
    })
}

impl DeployerType for Mock {
    fn name(&self) -> &str {
        MOCK_TYPE
    }

    fn reconcile<'a>(&'a self, job: Job<'a>) -> BoxFut<'a, Result<Outcome, DeployError>> {
        Box::pin(async move {
            let config = job.item.config().cloned().unwrap_or(Value::Null);
            // As landscaper's mock: a configuration it cannot read sets
            // `DeployItemValidation=False` (FailedUnmarshal) beside the error.
            let config = MockConfig::parse(&config).map_err(|e| {
                let condition = validation(false, &e.message);
                e.with_conditions(vec![condition])
            })?;
            Ok(Outcome {
                phase: config.phase_after(job.item.status.phase),
                provider_status: config.provider_status,
                export: config.export,
                conditions: vec![validation(true, "Successfully validated configuration")],
            })
        })
    }

    fn delete<'a>(&'a self, _job: Job<'a>) -> BoxFut<'a, Result<(), DeployError>> {
        Box::pin(async { Ok(()) })
    }

    fn abort<'a>(&'a self, job: Job<'a>) -> BoxFut<'a, ()> {
        Box::pin(async move {
            tracing::info!(item = %job.item.key, "mock: abort has nothing to stop");
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_decides_the_phase() {
        let cases: &[(Value, Option<Phase>, Phase)] = &[
            (json!({}), None, Phase::Succeeded),
            (json!({"phase": "Failed"}), Some(Phase::Init), Phase::Failed),
            (
                json!({"phase": "Progressing"}),
                Some(Phase::Progressing),
                Phase::Progressing,
            ),
            (
                json!({"initialPhase": "Progressing"}),
                Some(Phase::Init),
                Phase::Progressing,
            ),
            (
                json!({"initialPhase": "Progressing"}),
                Some(Phase::Succeeded),
                Phase::Succeeded,
            ),
            (
                json!({"initialPhase": "Init", "phase": "Succeeded"}),
                None,
                Phase::Succeeded,
            ),
        ];
        for (config, current, want) in cases {
            let c = MockConfig::parse(config).expect("config");
            assert_eq!(c.phase_after(*current), *want, "{config} from {current:?}");
        }
    }

    #[test]
    fn bad_configs_name_the_field() {
        let e = MockConfig::parse(&json!({"phase": "Sleeping"})).unwrap_err();
        assert!(
            e.message.starts_with("spec.config.phase: ") && e.message.contains("Sleeping"),
            "{e}"
        );
        assert!(e.is_unrecoverable());
        let e =
            MockConfig::parse(&json!({"apiVersion": MOCK_API_VERSION, "kind": "Configuration"}))
                .unwrap_err();
        assert!(e.message.starts_with("spec.config.kind:"), "{e}");
        let e = MockConfig::parse(&json!({"apiVersion": "v1", "kind": "ProviderConfiguration"}))
            .unwrap_err();
        assert!(e.message.starts_with("spec.config.apiVersion:"), "{e}");
        let e = MockConfig::parse(&json!({"providerStatus": "done"})).unwrap_err();
        assert!(
            e.message
                .starts_with("spec.config.providerStatus: expected an object"),
            "{e}"
        );
        assert!(e.is_unrecoverable());
        let e = MockConfig::parse(&json!({"providerStatus": {"kind": "S"}})).unwrap_err();
        assert!(
            e.message
                .starts_with("spec.config.providerStatus.apiVersion: must not be empty"),
            "{}",
            e.message
        );
        let ok = MockConfig::parse(&json!({"providerStatus": {"apiVersion": "x/v1", "kind": "S"}}));
        assert!(ok.is_ok(), "{ok:?}");
    }
}
