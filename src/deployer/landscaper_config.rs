//! landscaper's deployer Configuration file (`--config`, as its deployer charts write it
//! into `/app/ls/config/config.yaml`), read onto the deployer's settings.
//!
//! ```text
//! config.yaml ─ apiVersion ─> the one type served (helm, kubernetes-manifest, mock)
//!             ─ identity, targetSelector, controller.workers ─> the same settings
//!             ─ hpa.maxReplicas > 1 ─> SyncObject locks (landscaper locks then)
//!             ─ oci.configFiles ─> docker configs read at start: the helm type's own
//!               registry logins, after an item's Context's
//!             ─ oci.*, export.* asking for what bosun lacks ─> refused, by field
//! ```
//! landscaper's decoder drops fields it does not know (its charts write `namespace`, which
//! no Configuration has); bosun takes `namespace` as landscaper does (no effect) and
//! refuses other unknown fields by name, so a typo does not pass unnoticed.

use std::path::{Path, PathBuf};

use bosun_deployer::target::TargetSelector;
use serde_json::Value;

/// What a Configuration file sets.
#[derive(Debug, Clone, PartialEq)]
pub struct LandscaperConfiguration {
    /// The one type its apiVersion names.
    pub deployer_type: &'static str,
    /// `identity`.
    pub identity: Option<String>,
    /// `targetSelector`.
    pub target_selectors: Vec<TargetSelector>,
    /// `controller.workers`.
    pub workers: Option<usize>,
    /// `hpa.maxReplicas` above 1: several replicas lock items with SyncObjects.
    pub locking: bool,
    /// `oci.configFiles`: docker config files with registry logins.
    pub registry_config_files: Vec<PathBuf>,
    /// Their contents, read by [`LandscaperConfiguration::read`].
    pub registry_configs: Vec<Value>,
}

/// A Configuration file bosun cannot take.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file cannot be read.
    #[error("landscaper deployer configuration {path}: cannot read it: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not YAML, or not an object.
    #[error("landscaper deployer configuration {path}: not a YAML object: {reason}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// An `oci.configFiles` file that cannot be read or is no docker config.
    #[error("landscaper deployer configuration {path}: {field}: {file}: {why}")]
    RegistryConfig {
        /// The Configuration file.
        path: PathBuf,
        /// `oci.configFiles[i]`.
        field: String,
        /// The docker config file.
        file: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A field with a value bosun refuses.
    #[error("landscaper deployer configuration {path}: {field}: {why}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The field, as a dotted path.
        field: String,
        /// What was expected, or what bosun lacks.
        why: String,
    },
}

/// The apiVersions of landscaper's three deployers' Configurations and their types.
const API_VERSIONS: &[(&str, &str)] = &[
    (
        "helm.deployer.landscaper.gardener.cloud/v1alpha1",
        bosun_deployer::helm::HELM_TYPE,
    ),
    (
        "manifest.deployer.landscaper.gardener.cloud/v1alpha1",
        bosun_deployer::manifest::MANIFEST_TYPE,
    ),
    (
        "manifest.deployer.landscaper.gardener.cloud/v1alpha2",
        bosun_deployer::manifest::MANIFEST_TYPE,
    ),
    (
        "mock.deployer.landscaper.gardener.cloud/v1alpha1",
        bosun_deployer::mock::MOCK_TYPE,
    ),
];

impl LandscaperConfiguration {
    /// Reads and checks the file.
    pub fn read(path: &Path) -> Result<LandscaperConfiguration, ConfigFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut out = Self::parse(path, &text)?;
        out.registry_configs = out
            .registry_config_files
            .iter()
            .enumerate()
            .map(|(i, file)| {
                registry_config(file).map_err(|why| ConfigFileError::RegistryConfig {
                    path: path.to_path_buf(),
                    field: format!("oci.configFiles[{i}]"),
                    file: file.clone(),
                    why,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(out)
    }

    /// Checks the file's text; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<LandscaperConfiguration, ConfigFileError> {
        let syntax = |reason: String| ConfigFileError::Syntax {
            path: path.to_path_buf(),
            reason,
        };
        let doc: Value = serde_saphyr::from_str(text).map_err(|e| syntax(e.to_string()))?;
        let Value::Object(doc) = doc else {
            return Err(syntax(format!("found {doc}")));
        };
        let field = |field: &str, why: String| ConfigFileError::Field {
            path: path.to_path_buf(),
            field: field.to_string(),
            why,
        };
        let known: Vec<&str> = API_VERSIONS.iter().map(|(v, _)| *v).collect();
        let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let deployer_type = API_VERSIONS
            .iter()
            .find(|(v, _)| *v == api_version)
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                field(
                    "apiVersion",
                    format!("{api_version:?}: expected one of {}", known.join(", ")),
                )
            })?;
        if doc.get("kind").and_then(Value::as_str) != Some("Configuration") {
            return Err(field(
                "kind",
                format!(
                    "{}: expected \"Configuration\"",
                    doc.get("kind").unwrap_or(&Value::Null)
                ),
            ));
        }
        let is_helm = deployer_type == bosun_deployer::helm::HELM_TYPE;
        let is_mock = deployer_type == bosun_deployer::mock::MOCK_TYPE;
        let mut out = LandscaperConfiguration {
            deployer_type,
            identity: None,
            target_selectors: Vec::new(),
            workers: None,
            locking: false,
            registry_config_files: Vec::new(),
            registry_configs: Vec::new(),
        };
        for (key, value) in &doc {
            match key.as_str() {
                "apiVersion" | "kind" => {}
                // Written by the helm and manifest deployer charts; no Configuration has it,
                // and landscaper's decoder drops it.
                "namespace" => {}
                "identity" => match value {
                    Value::String(s) if !s.is_empty() => out.identity = Some(s.clone()),
                    Value::String(_) | Value::Null => {}
                    other => return Err(field("identity", format!("{other}: expected a string"))),
                },
                "targetSelector" => {
                    let text = match value {
                        Value::Null => String::new(),
                        v => v.to_string(),
                    };
                    out.target_selectors = bosun_deployer::target::parse_selectors(&text)
                        .map_err(|e| field("targetSelector", e.to_string()))?;
                }
                "oci" if is_helm => out.registry_config_files = oci(value, &field)?,
                "export" if !is_mock => export(value, &field)?,
                "hpa" if !is_mock => {
                    let max = match value.get("maxReplicas") {
                        None | Some(Value::Null) => 1,
                        Some(v) => v.as_i64().ok_or_else(|| {
                            field("hpa.maxReplicas", format!("{v}: expected a whole number"))
                        })?,
                    };
                    out.locking = max > 1;
                }
                "controller" if !is_mock => {
                    if let Some(v) = value.get("workers").filter(|v| !v.is_null()) {
                        let n = v.as_u64().ok_or_else(|| {
                            field(
                                "controller.workers",
                                format!("{v}: expected a whole number"),
                            )
                        })?;
                        out.workers = (n > 0).then_some(n as usize);
                    }
                    // bosun's informers wait for their first list without a limit; the
                    // value is checked, not used.
                    if let Some(v) = value.get("cacheSyncTimeout").filter(|v| !v.is_null()) {
                        let text = v.as_str().unwrap_or_default();
                        bosun_runtime::clock::parse_go_duration(text).map_err(|e| {
                            field(
                                "controller.cacheSyncTimeout",
                                format!("{v}: {e} (expected a duration such as 2m)"),
                            )
                        })?;
                    }
                    if let Some(other) = value.as_object().and_then(|m| {
                        m.keys()
                            .find(|k| *k != "workers" && *k != "cacheSyncTimeout")
                    }) {
                        return Err(field(
                            &format!("controller.{other}"),
                            "unknown field: expected workers or cacheSyncTimeout".into(),
                        ));
                    }
                }
                other => {
                    return Err(field(
                        other,
                        format!(
                            "unknown field of {api_version} Configuration (bosun reads identity, \
                             targetSelector{})",
                            if is_mock {
                                ""
                            } else if is_helm {
                                ", oci, export, hpa, controller"
                            } else {
                                ", export, hpa, controller"
                            }
                        ),
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// A docker config file (`{"auths": {registry: {auth | username, password |
/// identitytoken}}}`, or the older `.dockercfg` shape), as `docker login` and the
/// helm-deployer chart's registry Secret write it.
fn registry_config(file: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read it: {e}"))?;
    let config: Value = serde_json::from_str(&text)
        .map_err(|e| format!("not JSON: {e} (expected a docker config: {{\"auths\": {{…}}}})"))?;
    match config.get("auths") {
        Some(Value::Object(_)) => Ok(config),
        Some(other) => Err(format!("auths: {other}: expected an object of registries")),
        None if config.is_object() => Ok(config),
        None => Err(format!("{config}: expected a docker config object")),
    }
}

/// `oci`: `configFiles` are the helm type's registry logins; the other defaults the helm
/// deployer's chart writes are what bosun does; the rest is refused by name.
fn oci(
    value: &Value,
    field: &dyn Fn(&str, String) -> ConfigFileError,
) -> Result<Vec<PathBuf>, ConfigFileError> {
    let Some(m) = value.as_object() else {
        return if value.is_null() {
            Ok(Vec::new())
        } else {
            Err(field("oci", format!("{value}: expected an object")))
        };
    };
    let mut files = Vec::new();
    for (k, v) in m {
        match (k.as_str(), v) {
            ("allowPlainHttp", Value::Bool(false) | Value::Null) => {}
            ("allowPlainHttp", _) => {
                return Err(field(
                    "oci.allowPlainHttp",
                    format!(
                        "{v}: bosun speaks plain HTTP only to a loopback registry; serve the \
                         registry over HTTPS"
                    ),
                ));
            }
            ("insecureSkipVerify", Value::Bool(false) | Value::Null) => {}
            ("insecureSkipVerify", _) => {
                return Err(field(
                    "oci.insecureSkipVerify",
                    format!("{v}: bosun always verifies a registry's certificate"),
                ));
            }
            ("configFiles", Value::Null) => {}
            ("configFiles", Value::Array(a)) => {
                for (i, f) in a.iter().enumerate() {
                    match f.as_str() {
                        Some(path) if !path.is_empty() => files.push(PathBuf::from(path)),
                        _ => {
                            return Err(field(
                                &format!("oci.configFiles[{i}]"),
                                format!("{f}: expected the path of a docker config file"),
                            ));
                        }
                    }
                }
            }
            ("configFiles", _) => {
                return Err(field(
                    "oci.configFiles",
                    format!("{v}: expected a list of docker config files"),
                ));
            }
            // A download cache's place: bosun keeps its own under ADDON_OPERATOR_TMP_DIR.
            ("cache", _) => {}
            (other, _) => {
                return Err(field(
                    &format!("oci.{other}"),
                    "unknown field: expected allowPlainHttp, insecureSkipVerify, configFiles or cache"
                        .into(),
                ));
            }
        }
    }
    Ok(files)
}

/// `export`: only an empty one; bosun waits for exports within the item's timeout.
fn export(
    value: &Value,
    field: &dyn Fn(&str, String) -> ConfigFileError,
) -> Result<(), ConfigFileError> {
    match value {
        Value::Null => Ok(()),
        Value::Object(m) => match m.iter().find(|(_, v)| !v.is_null()) {
            None => Ok(()),
            Some((k, v)) => Err(field(
                &format!("export.{k}"),
                format!(
                    "{v}: bosun has no separate export timeout: exports are waited for within \
                     the item's spec.timeout"
                ),
            )),
        },
        other => Err(field("export", format!("{other}: expected an object"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<LandscaperConfiguration, ConfigFileError> {
        LandscaperConfiguration::parse(Path::new("/app/ls/config/config.yaml"), text)
    }

    #[test]
    fn the_helm_deployer_chart_s_default_configuration_is_taken() {
        // charts/helm-deployer with its default values, released in namespace ls-system.
        let c = parse(
            "apiVersion: helm.deployer.landscaper.gardener.cloud/v1alpha1\nkind: Configuration\n\
             namespace: ls-system\noci:\n  allowPlainHttp: false\n  insecureSkipVerify: false\n\
             controller:\n  workers: 30\n",
        )
        .expect("taken");
        assert_eq!(c.deployer_type, bosun_deployer::helm::HELM_TYPE);
        assert_eq!(c.workers, Some(30));
        assert!(!c.locking);
    }

    #[test]
    fn settings_bosun_cannot_honour_are_refused_naming_the_field() {
        for (text, named) in [
            (
                "apiVersion: helm.deployer.landscaper.gardener.cloud/v1alpha1\nkind: Configuration\noci:\n  allowPlainHttp: true\n",
                "oci.allowPlainHttp",
            ),
            (
                "apiVersion: manifest.deployer.landscaper.gardener.cloud/v1alpha2\nkind: Configuration\nexport:\n  defaultTimeout: 5m\n",
                "export.defaultTimeout",
            ),
            (
                "apiVersion: mock.deployer.landscaper.gardener.cloud/v1alpha1\nkind: Configuration\nidentitty: x\n",
                "identitty",
            ),
            (
                "apiVersion: container.deployer.landscaper.gardener.cloud/v1alpha1\nkind: Configuration\n",
                "apiVersion",
            ),
        ] {
            let err = parse(text).expect_err(named).to_string();
            assert!(
                err.starts_with(&format!(
                    "landscaper deployer configuration /app/ls/config/config.yaml: {named}:"
                )),
                "{err}"
            );
        }
    }

    /// `oci.configFiles` as the helm-deployer chart writes them (its registry Secret's
    /// keys under /app/ls/registry/secrets): each file's logins are read at start; a
    /// missing file or one that is no docker config stops it, naming both files.
    #[test]
    fn oci_config_files_are_read_as_registry_logins() {
        let dir = tempfile::tempdir().expect("tempdir");
        let login = dir.path().join("registry.example.com");
        std::fs::write(
            &login,
            r#"{"auths": {"registry.example.com": {"auth": "dXNlcjpzZWNyZXQ="}}}"#,
        )
        .expect("docker config");
        let config = dir.path().join("config.yaml");
        let write = |files: &str| {
            std::fs::write(
                &config,
                format!(
                    "apiVersion: helm.deployer.landscaper.gardener.cloud/v1alpha1\n\
                     kind: Configuration\noci:\n  allowPlainHttp: false\n  configFiles: {files}\n"
                ),
            )
            .expect("config.yaml")
        };
        write(&format!("[{}]", login.display()));
        let c = LandscaperConfiguration::read(&config).expect("taken");
        assert_eq!(c.registry_config_files, std::slice::from_ref(&login));
        assert_eq!(
            bosun_deployer::oci::login_for(&c.registry_configs[0], "registry.example.com")
                .as_deref(),
            Some("Basic dXNlcjpzZWNyZXQ=")
        );
        let missing = dir.path().join("missing");
        write(&format!("[{}, {}]", login.display(), missing.display()));
        let err = LandscaperConfiguration::read(&config)
            .expect_err("missing")
            .to_string();
        assert!(
            err.starts_with(&format!(
                "landscaper deployer configuration {}: oci.configFiles[1]: {}: cannot read it",
                config.display(),
                missing.display()
            )),
            "{err}"
        );
        std::fs::write(&missing, "registry.example.com user secret").expect("not JSON");
        let err = LandscaperConfiguration::read(&config)
            .expect_err("not JSON")
            .to_string();
        assert!(
            err.contains("oci.configFiles[1]") && err.contains("not JSON"),
            "{err}"
        );
        write("registry.json");
        let err = LandscaperConfiguration::read(&config)
            .expect_err("not a list")
            .to_string();
        assert!(
            err.contains("oci.configFiles: \"registry.json\": expected a list"),
            "{err}"
        );
    }

    #[test]
    fn selectors_identity_and_replicas_are_read() {
        let c = parse(
            "apiVersion: mock.deployer.landscaper.gardener.cloud/v1alpha1\nkind: Configuration\n\
             identity: mock-1\ntargetSelector:\n- targets:\n  - name: t\n",
        )
        .expect("taken");
        assert_eq!(c.identity.as_deref(), Some("mock-1"));
        assert_eq!(c.target_selectors.len(), 1);
        let c = parse(
            "apiVersion: manifest.deployer.landscaper.gardener.cloud/v1alpha2\nkind: Configuration\n\
             hpa:\n  maxReplicas: 3\n",
        )
        .expect("taken");
        assert!(c.locking);
    }
}
