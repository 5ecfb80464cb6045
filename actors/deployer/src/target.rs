//! Targets: which deployer serves one (target selectors), what it holds once resolved
//! (inline `spec.config` or a Secret through `spec.secretRef`), and the kubeconfig of a
//! `landscaper.gardener.cloud/kubernetes-cluster` target checked as landscaper does: no
//! exec plugins, no files, no auth providers, no impersonation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::item::FieldError;

/// The type of a target that is a Kubernetes cluster.
pub(crate) const KUBERNETES_CLUSTER: &str = "landscaper.gardener.cloud/kubernetes-cluster";

/// A Target read from its JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub type_: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub source: TargetSource,
}

/// Where a target's content is.
#[derive(Clone, Debug, PartialEq)]
pub enum TargetSource {
    /// `spec.config`.
    Inline(Value),
    /// `spec.secretRef` (in the Target's namespace).
    Secret { name: String, key: Option<String> },
    /// Neither.
    Empty,
}

fn string_map(v: &Value, what: &str, field: &str) -> Result<BTreeMap<String, String>, FieldError> {
    match v {
        Value::Null => Ok(BTreeMap::new()),
        v => serde_json::from_value(v.clone())
            .map_err(|e| FieldError::new(what, field, format!("expected strings: {e}"))),
    }
}

impl Target {
    /// Reads a Target; a field of the wrong shape is an error naming it.
    pub fn parse(o: &Value) -> Result<Target, FieldError> {
        let meta = &o["metadata"];
        let namespace = meta["namespace"].as_str().unwrap_or_default().to_string();
        let name = meta["name"].as_str().unwrap_or_default().to_string();
        let what = format!("Target {namespace}/{name}");
        let spec = &o["spec"];
        let source = match (&spec["config"], &spec["secretRef"]) {
            (Value::Null, Value::Null) => TargetSource::Empty,
            (c, Value::Null) => TargetSource::Inline(c.clone()),
            (Value::Null, r) => {
                let name = match r["name"].as_str() {
                    Some(n) if !n.is_empty() => n.to_string(),
                    _ => return Err(FieldError::new(&what, "spec.secretRef.name", "missing")),
                };
                let key = match &r["key"] {
                    Value::Null => None,
                    Value::String(k) if k.is_empty() => None,
                    Value::String(k) => Some(k.clone()),
                    other => {
                        return Err(FieldError::new(
                            &what,
                            "spec.secretRef.key",
                            format!("expected a string, got {other}"),
                        ));
                    }
                };
                TargetSource::Secret { name, key }
            }
            _ => {
                return Err(FieldError::new(
                    &what,
                    "spec",
                    "config and secretRef are mutually exclusive",
                ));
            }
        };
        Ok(Target {
            uid: meta["uid"].as_str().unwrap_or_default().to_string(),
            resource_version: meta["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            type_: spec["type"].as_str().unwrap_or_default().to_string(),
            labels: string_map(&meta["labels"], &what, "metadata.labels")?,
            annotations: string_map(&meta["annotations"], &what, "metadata.annotations")?,
            namespace,
            name,
            source,
        })
    }

    /// `namespace/name`.
    pub fn describe(&self) -> String {
        format!("Target {}/{}", self.namespace, self.name)
    }
}

/// A target with its content: the JSON text of the configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedTarget {
    pub target: Target,
    pub content: String,
}

/// Resolves a target's content. `secret` is the Secret named by `spec.secretRef` (its
/// `data`, base64-decoded), when the target has one. With a `key`, the content is that
/// value; without, a JSON object of every key, each value read as YAML (so a kubeconfig
/// becomes a nested object), as landscaper does.
pub fn resolve(
    target: &Target,
    secret: Option<&BTreeMap<String, Vec<u8>>>,
) -> Result<ResolvedTarget, FieldError> {
    let what = target.describe();
    let content = match &target.source {
        TargetSource::Inline(v) => v.to_string(),
        TargetSource::Empty => String::new(),
        TargetSource::Secret { name, key } => {
            let data = secret.ok_or_else(|| {
                FieldError::new(
                    &what,
                    "spec.secretRef",
                    format!("Secret {}/{name} not found", target.namespace),
                )
            })?;
            match key {
                Some(k) => {
                    let bytes = data.get(k).ok_or_else(|| {
                        FieldError::new(
                            &what,
                            "spec.secretRef.key",
                            format!("Secret {}/{name} has no key {k:?}", target.namespace),
                        )
                    })?;
                    String::from_utf8(bytes.clone()).map_err(|_| {
                        FieldError::new(
                            &what,
                            "spec.secretRef.key",
                            format!("Secret {}/{name} key {k:?} is not UTF-8", target.namespace),
                        )
                    })?
                }
                None => {
                    let mut obj = serde_json::Map::new();
                    for (k, bytes) in data {
                        let text = String::from_utf8_lossy(bytes);
                        let v: Value = serde_saphyr::from_str(&text)
                            .unwrap_or_else(|_| Value::String(text.to_string()));
                        obj.insert(k.clone(), v);
                    }
                    Value::Object(obj).to_string()
                }
            }
        }
    };
    Ok(ResolvedTarget {
        target: target.clone(),
        content,
    })
}

/// A kubernetes-cluster target reached with a service account's token of the resource
/// cluster (the items' cluster) instead of a kubeconfig: `selfConfig` (the resource
/// cluster itself) or `oidcConfig` (another cluster that trusts the resource cluster's
/// tokens).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TokenAccess {
    /// `oidcConfig`: the server and its CA (`caData`, base64 of PEM); `None`: `selfConfig`.
    pub server: Option<(String, Option<String>)>,
    /// The service account (in the Target's namespace) whose token is used.
    pub service_account: String,
    /// `oidcConfig.audience`.
    pub audiences: Vec<String>,
    /// The token's lifetime.
    pub expiration_seconds: u64,
}

/// The default token lifetime of `selfConfig` and `oidcConfig` (landscaper's).
pub(crate) const TOKEN_EXPIRATION_SECONDS: u64 = 86_400;

/// The `selfConfig` or `oidcConfig` of a resolved kubernetes-cluster target (`None`: it has
/// a kubeconfig, or is another type).
pub(crate) fn token_access(resolved: &ResolvedTarget) -> Result<Option<TokenAccess>, FieldError> {
    // Every reconcile resolves its target: most hold a kubeconfig, not worth parsing here.
    if resolved.target.type_ != KUBERNETES_CLUSTER
        || !(resolved.content.contains("selfConfig") || resolved.content.contains("oidcConfig"))
    {
        return Ok(None);
    }
    let what = resolved.target.describe();
    let Ok(Value::Object(config)) = serde_json::from_str::<Value>(&resolved.content) else {
        return Ok(None);
    };
    if config.get("kubeconfig").is_some_and(|k| !k.is_null()) {
        return Ok(None);
    }
    let (field, c) = match (config.get("selfConfig"), config.get("oidcConfig")) {
        (Some(_), Some(_)) => {
            return Err(FieldError::new(
                &what,
                "spec.config",
                "selfConfig and oidcConfig exclude each other",
            ));
        }
        (Some(c), None) => ("spec.config.selfConfig", c),
        (None, Some(c)) => ("spec.config.oidcConfig", c),
        (None, None) => return Ok(None),
    };
    let service_account = match &c["serviceAccount"]["name"] {
        Value::String(n) if !n.is_empty() => n.clone(),
        other => {
            return Err(FieldError::new(
                &what,
                &format!("{field}.serviceAccount.name"),
                format!("expected the name of a service account, got {other}"),
            ));
        }
    };
    let expiration_seconds = match &c["expirationSeconds"] {
        Value::Null => TOKEN_EXPIRATION_SECONDS,
        v => match v.as_u64() {
            Some(n) if n >= 600 => n,
            _ => {
                return Err(FieldError::new(
                    &what,
                    &format!("{field}.expirationSeconds"),
                    format!("expected a number of seconds, at least 600, got {v}"),
                ));
            }
        },
    };
    let server = if field == "spec.config.oidcConfig" {
        let url = match &c["server"] {
            Value::String(u) if u.starts_with("https://") || u.starts_with("http://") => u.clone(),
            other => {
                return Err(FieldError::new(
                    &what,
                    &format!("{field}.server"),
                    format!("expected the URL of the target's API server, got {other}"),
                ));
            }
        };
        let ca = match &c["caData"] {
            Value::Null => None,
            Value::String(b64) if !b64.is_empty() => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| {
                        FieldError::new(
                            &what,
                            &format!("{field}.caData"),
                            format!("not base64: {e}"),
                        )
                    })?;
                Some(b64.clone())
            }
            other => {
                return Err(FieldError::new(
                    &what,
                    &format!("{field}.caData"),
                    format!("expected base64 of the PEM certificates, got {other}"),
                ));
            }
        };
        Some((url, ca))
    } else {
        None
    };
    let audiences = match &c["audience"] {
        Value::Null => Vec::new(),
        Value::Array(a) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                FieldError::new(
                    &what,
                    &format!("{field}.audience"),
                    "expected a list of strings",
                )
            })?,
        _ => {
            return Err(FieldError::new(
                &what,
                &format!("{field}.audience"),
                "expected a list of strings",
            ));
        }
    };
    Ok(Some(TokenAccess {
        server,
        service_account,
        audiences,
        expiration_seconds,
    }))
}

/// `resolved` with its content replaced by a kubeconfig that reaches `server` (its CA
/// `ca_data`, base64 of PEM) with `token`.
pub(crate) fn with_token(
    resolved: &ResolvedTarget,
    server: &str,
    ca_data: Option<&str>,
    token: &str,
) -> ResolvedTarget {
    let mut cluster = serde_json::json!({"server": server});
    if let Some(ca) = ca_data {
        cluster["certificate-authority-data"] = Value::String(ca.to_string());
    }
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "target", "cluster": cluster}],
        "users": [{"name": "target", "user": {"token": token}}],
        "contexts": [{"name": "target", "context": {"cluster": "target", "user": "target"}}],
        "current-context": "target",
    });
    ResolvedTarget {
        target: resolved.target.clone(),
        content: serde_json::json!({ "kubeconfig": kubeconfig }).to_string(),
    }
}

/// The kubeconfig of a kubernetes-cluster target, as YAML or JSON text.
pub fn kubeconfig_of(resolved: &ResolvedTarget) -> Result<String, FieldError> {
    let what = resolved.target.describe();
    if resolved.target.type_ != KUBERNETES_CLUSTER {
        return Err(FieldError::new(
            &what,
            "spec.type",
            format!(
                "expected {KUBERNETES_CLUSTER:?}, got {:?}",
                resolved.target.type_
            ),
        ));
    }
    let config: Value = serde_json::from_str(&resolved.content)
        .or_else(|_| serde_saphyr::from_str(&resolved.content))
        .map_err(|e| FieldError::new(&what, "spec.config", format!("not JSON or YAML: {e}")))?;
    let kubeconfig = match &config {
        // A bare string is the kubeconfig itself.
        Value::String(s) => s.clone(),
        Value::Object(m) => match m.get("kubeconfig") {
            Some(Value::String(s)) => s.clone(),
            Some(v @ Value::Object(_)) => v.to_string(),
            Some(other) => {
                return Err(FieldError::new(
                    &what,
                    "spec.config.kubeconfig",
                    format!("expected a string or an object, got {other}"),
                ));
            }
            None if m.contains_key("oidcConfig") || m.contains_key("selfConfig") => {
                return Err(FieldError::new(
                    &what,
                    "spec.config",
                    "oidcConfig and selfConfig need a service account token, which was not requested",
                ));
            }
            None => {
                return Err(FieldError::new(
                    &what,
                    "spec.config.kubeconfig",
                    missing_kubeconfig(&resolved.target, m),
                ));
            }
        },
        _ => {
            return Err(FieldError::new(
                &what,
                "spec.config",
                "expected an object with kubeconfig",
            ));
        }
    };
    validate_kubeconfig(&kubeconfig)
        .map_err(|e| FieldError::new(&what, "spec.config.kubeconfig", e.to_string()))?;
    Ok(kubeconfig)
}

/// Why a target has no kubeconfig, naming where it was looked for: the inline
/// configuration, or the Secret and key `spec.secretRef` names, with the keys found there.
fn missing_kubeconfig(target: &Target, found: &serde_json::Map<String, Value>) -> String {
    let keys = || {
        let keys: Vec<&str> = found.keys().map(String::as_str).collect();
        if keys.is_empty() {
            "none".to_string()
        } else {
            keys.join(", ")
        }
    };
    match &target.source {
        TargetSource::Secret { name, key: None } => format!(
            "missing: Secret {}/{name} (spec.secretRef) has no key \"kubeconfig\" (its keys: {})",
            target.namespace,
            keys()
        ),
        TargetSource::Secret {
            name,
            key: Some(key),
        } => format!(
            "missing: the value of key {key:?} of Secret {}/{name} (spec.secretRef) has no kubeconfig (its fields: {})",
            target.namespace,
            keys()
        ),
        _ => format!("missing (spec.config's fields: {})", keys()),
    }
}

/// Targets whose kubeconfig passed [`kubeconfig_of`], by a digest of the target's name and
/// content: every run reads its item's target, and parsing the kubeconfig's YAML again on
/// each run cost the deployer more CPU than any other step of a run but its requests.
/// A target whose content changes is checked again; one that fails is checked each time.
#[derive(Default)]
pub(crate) struct CheckedKubeconfigs(std::sync::Mutex<std::collections::HashSet<[u8; 16]>>);

impl CheckedKubeconfigs {
    /// Targets remembered at most; past that the memory starts over.
    const MAX: usize = 4096;

    /// [`kubeconfig_of`]'s verdict on `resolved`, without its text.
    pub fn check(&self, resolved: &ResolvedTarget) -> Result<(), FieldError> {
        let digest: [u8; 16] = {
            use md5::Digest as _;
            let mut h = md5::Md5::new();
            for part in [
                &resolved.target.namespace,
                &resolved.target.name,
                &resolved.target.type_,
                &resolved.content,
            ] {
                h.update(part.as_bytes());
                h.update([0]);
            }
            h.finalize().into()
        };
        if self.seen().contains(&digest) {
            return Ok(());
        }
        kubeconfig_of(resolved)?;
        let mut seen = self.seen();
        if seen.len() >= Self::MAX {
            seen.clear();
        }
        seen.insert(digest);
        Ok(())
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<[u8; 16]>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A target kubeconfig landscaper would refuse, naming the user or cluster entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigError {
    /// Not YAML.
    #[error("not a kubeconfig: {0}")]
    NotYaml(String),
    /// YAML, but not a mapping.
    #[error("not a kubeconfig: expected a mapping")]
    NotAMapping,
    /// A user's credentials read from a file or a command, an auth provider or
    /// impersonation.
    #[error(
        "users[{index}] ({name}): {key} is not allowed in a target kubeconfig (only inline client-certificate-data, client-key-data, token, username and password)"
    )]
    RefusedUserKey {
        /// The entry of `users`.
        index: usize,
        /// Its name.
        name: String,
        /// The refused key.
        key: &'static str,
    },
    /// A cluster's CA read from a file.
    #[error(
        "clusters[{index}] ({name}): certificate-authority (a file) is not allowed; use certificate-authority-data"
    )]
    CertificateAuthorityFile {
        /// The entry of `clusters`.
        index: usize,
        /// Its name.
        name: String,
    },
}

/// Refuses what landscaper refuses in a target kubeconfig: credentials read from files or
/// commands, auth providers, impersonation. Only inline data, tokens and basic auth pass.
pub(crate) fn validate_kubeconfig(text: &str) -> Result<(), KubeconfigError> {
    let kc: Value =
        serde_saphyr::from_str(text).map_err(|e| KubeconfigError::NotYaml(e.to_string()))?;
    if !kc.is_object() {
        return Err(KubeconfigError::NotAMapping);
    }
    const REFUSED: &[&str] = &[
        "exec",
        "auth-provider",
        "client-certificate",
        "client-key",
        "tokenFile",
        "as",
        "as-uid",
        "as-groups",
        "as-user-extra",
    ];
    for (i, u) in kc["users"].as_array().into_iter().flatten().enumerate() {
        let name = u["name"].as_str().unwrap_or_default();
        let Some(user) = u["user"].as_object() else {
            continue;
        };
        for key in REFUSED {
            if user.get(*key).is_some_and(|v| !v.is_null() && v != "") {
                return Err(KubeconfigError::RefusedUserKey {
                    index: i,
                    name: name.to_string(),
                    key,
                });
            }
        }
    }
    for (i, c) in kc["clusters"].as_array().into_iter().flatten().enumerate() {
        let name = c["name"].as_str().unwrap_or_default();
        if c["cluster"]["certificate-authority"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
        {
            return Err(KubeconfigError::CertificateAuthorityFile {
                index: i,
                name: name.to_string(),
            });
        }
    }
    Ok(())
}

/// One requirement of a target selector (`operator` as Kubernetes label selectors).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

/// A target by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetName {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

/// One target selector: every part given must match.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetSelector {
    #[serde(default)]
    pub targets: Vec<TargetName>,
    #[serde(default)]
    pub annotations: Vec<Requirement>,
    #[serde(default)]
    pub labels: Vec<Requirement>,
}

/// A target selector that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// `--deployer-target-selector` is not a JSON list of selectors.
    #[error("expected a JSON list of {{targets, annotations, labels}}: {0}")]
    NotJson(String),
    /// A requirement's operator that is none of the label selector's.
    #[error("unknown operator {operator:?} of key {key:?}")]
    UnknownOperator {
        /// The requirement's key.
        key: String,
        /// The operator given.
        operator: String,
    },
    /// A selector of the list, by its index.
    #[error("selector [{index}]: {source}")]
    Selector {
        /// Its index in the list.
        index: usize,
        /// What is wrong with it.
        source: Box<SelectorError>,
    },
}

impl Requirement {
    fn matches(&self, m: &BTreeMap<String, String>) -> Result<bool, SelectorError> {
        let v = m.get(&self.key);
        Ok(match self.operator.as_str() {
            "=" | "==" | "in" => v.is_some_and(|v| self.values.contains(v)),
            "!=" | "notin" => v.is_none_or(|v| !self.values.contains(v)),
            "exists" => v.is_some(),
            "!" | "doesnotexist" => v.is_none(),
            op @ ("gt" | "lt") => {
                let (Some(have), Some(want)) = (
                    v.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|w| w.parse::<i64>().ok()),
                ) else {
                    return Ok(false);
                };
                if op == "gt" { have > want } else { have < want }
            }
            other => {
                return Err(SelectorError::UnknownOperator {
                    key: self.key.clone(),
                    operator: other.to_string(),
                });
            }
        })
    }
}

impl TargetSelector {
    /// Whether `t` matches every part of this selector.
    pub fn matches(&self, t: &Target) -> Result<bool, SelectorError> {
        if !self.targets.is_empty()
            && !self.targets.iter().any(|n| {
                n.name == t.name && n.namespace.as_deref().is_none_or(|ns| ns == t.namespace)
            })
        {
            return Ok(false);
        }
        for r in &self.annotations {
            if !r.matches(&t.annotations)? {
                return Ok(false);
            }
        }
        for r in &self.labels {
            if !r.matches(&t.labels)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Whether a deployer with `selectors` serves `t`: no selectors serve every target; else any one must match.
pub fn serves(selectors: &[TargetSelector], t: &Target) -> bool {
    selectors.is_empty() || selectors.iter().any(|s| s.matches(t).unwrap_or(false))
}

/// Parses `--deployer-target-selector` (a JSON list of selectors), checking the operators.
pub fn parse_selectors(text: &str) -> Result<Vec<TargetSelector>, SelectorError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let sels: Vec<TargetSelector> =
        serde_json::from_str(text).map_err(|e| SelectorError::NotJson(e.to_string()))?;
    let probe = Target {
        namespace: String::new(),
        name: String::new(),
        uid: String::new(),
        resource_version: String::new(),
        type_: String::new(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        source: TargetSource::Empty,
    };
    for (i, s) in sels.iter().enumerate() {
        for r in s.annotations.iter().chain(&s.labels) {
            r.matches(&probe.labels)
                .map_err(|e| SelectorError::Selector {
                    index: i,
                    source: Box::new(e),
                })?;
        }
    }
    Ok(sels)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: abc\n";

    fn target(spec: Value) -> Target {
        Target::parse(&json!({
            "metadata": {"name": "t", "namespace": "ns", "labels": {"env": "prod", "size": "3"}, "annotations": {"landscaper.gardener.cloud/environment": "fenced"}},
            "spec": spec,
        }))
        .expect("target")
    }

    #[test]
    fn a_secret_without_the_kubeconfig_is_named_with_its_key_and_the_keys_it_has() {
        let kubeconfig_error = |secret_ref: Value, data: &[(&str, &str)]| {
            let t = target(json!({"type": KUBERNETES_CLUSTER, "secretRef": secret_ref}));
            let data: BTreeMap<String, Vec<u8>> = data
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect();
            let resolved = resolve(&t, Some(&data)).expect("resolved");
            kubeconfig_of(&resolved)
                .expect_err("no kubeconfig")
                .to_string()
        };
        let e = kubeconfig_error(json!({"name": "creds"}), &[("token", "abc"), ("ca", "x")]);
        assert!(
            e.contains("Secret ns/creds (spec.secretRef) has no key \"kubeconfig\"")
                && e.contains("its keys: ca, token"),
            "{e}"
        );
        let e = kubeconfig_error(
            json!({"name": "creds", "key": "target"}),
            &[("target", "server: https://x")],
        );
        assert!(
            e.contains("the value of key \"target\" of Secret ns/creds")
                && e.contains("its fields: server"),
            "{e}"
        );
        let t = target(json!({"type": KUBERNETES_CLUSTER, "config": {"server": "x"}}));
        let e = kubeconfig_of(&resolve(&t, None).expect("resolved"))
            .expect_err("no kubeconfig")
            .to_string();
        assert!(e.contains("spec.config's fields: server"), "{e}");
    }

    #[test]
    fn self_and_oidc_configs_read_with_defaults_and_named_errors() {
        let access = |config: Value| {
            let t = target(json!({"type": KUBERNETES_CLUSTER, "config": config}));
            token_access(&resolve(&t, None).expect("resolved"))
        };
        let own = access(json!({"selfConfig": {"serviceAccount": {"name": "sa"}}}));
        assert_eq!(
            own.ok().flatten(),
            Some(TokenAccess {
                server: None,
                service_account: "sa".into(),
                audiences: Vec::new(),
                expiration_seconds: TOKEN_EXPIRATION_SECONDS,
            })
        );
        let oidc = access(
            json!({"oidcConfig": {"server": "https://other:6443", "caData": "Y2E=",
            "serviceAccount": {"name": "sa"}, "audience": ["other"], "expirationSeconds": 3600}}),
        );
        let Ok(Some(oidc)) = oidc else {
            panic!("{oidc:?}")
        };
        assert_eq!(
            oidc.server,
            Some(("https://other:6443".into(), Some("Y2E=".into())))
        );
        assert_eq!(
            (oidc.audiences, oidc.expiration_seconds),
            (vec!["other".to_string()], 3600)
        );
        // A kubeconfig wins; no config is no token access.
        assert!(access(json!({"kubeconfig": KUBECONFIG})).is_ok_and(|a| a.is_none()));
        for (config, field) in [
            (
                json!({"selfConfig": {}}),
                "spec.config.selfConfig.serviceAccount.name",
            ),
            (
                json!({"selfConfig": {"serviceAccount": {"name": "sa"}, "expirationSeconds": 60}}),
                "spec.config.selfConfig.expirationSeconds",
            ),
            (
                json!({"oidcConfig": {"serviceAccount": {"name": "sa"}}}),
                "spec.config.oidcConfig.server",
            ),
            (
                json!({"oidcConfig": {"server": "https://x", "caData": "%%", "serviceAccount": {"name": "sa"}}}),
                "spec.config.oidcConfig.caData",
            ),
            (
                json!({"oidcConfig": {"server": "https://x", "audience": "one", "serviceAccount": {"name": "sa"}}}),
                "spec.config.oidcConfig.audience",
            ),
            (json!({"selfConfig": {}, "oidcConfig": {}}), "spec.config"),
        ] {
            let err = access(config.clone())
                .expect_err(&config.to_string())
                .to_string();
            assert!(err.contains(field), "{config}: {err}");
        }
        // The token becomes a kubeconfig that passes upstream's checks.
        let t = target(
            json!({"type": KUBERNETES_CLUSTER, "config": {"selfConfig": {"serviceAccount": {"name": "sa"}}}}),
        );
        let r = with_token(
            &resolve(&t, None).expect("resolved"),
            "https://api:6443",
            Some("Y2E="),
            "tok",
        );
        let kc: Value =
            serde_json::from_str(&kubeconfig_of(&r).expect("a kubeconfig")).expect("json");
        assert_eq!(kc["users"][0]["user"]["token"], "tok");
        assert_eq!(kc["clusters"][0]["cluster"]["server"], "https://api:6443");
        assert_eq!(
            kc["clusters"][0]["cluster"]["certificate-authority-data"],
            "Y2E="
        );
    }

    #[test]
    fn inline_and_secret_targets_resolve_as_upstream() {
        let t = target(json!({"type": KUBERNETES_CLUSTER, "config": {"kubeconfig": KUBECONFIG}}));
        let r = resolve(&t, None).expect("inline");
        assert_eq!(kubeconfig_of(&r).expect("kubeconfig"), KUBECONFIG);

        let t = target(
            json!({"type": KUBERNETES_CLUSTER, "secretRef": {"name": "s", "key": "target"}}),
        );
        let mut data = BTreeMap::new();
        data.insert(
            "target".to_string(),
            format!(
                "kubeconfig: |\n{}",
                KUBECONFIG
                    .lines()
                    .map(|l| format!("  {l}\n"))
                    .collect::<String>()
            )
            .into_bytes(),
        );
        let r = resolve(&t, Some(&data)).expect("with key");
        assert_eq!(kubeconfig_of(&r).expect("kubeconfig"), KUBECONFIG);

        let t = target(json!({"type": KUBERNETES_CLUSTER, "secretRef": {"name": "s"}}));
        let mut data = BTreeMap::new();
        data.insert("kubeconfig".to_string(), KUBECONFIG.as_bytes().to_vec());
        let r = resolve(&t, Some(&data)).expect("without key");
        // Without a key each value is read as YAML: the kubeconfig is an object now.
        let kc = kubeconfig_of(&r).expect("kubeconfig");
        let v: Value = serde_json::from_str(&kc).expect("json");
        assert_eq!(v["users"][0]["user"]["token"], "abc");

        let e = resolve(
            &target(json!({"type": KUBERNETES_CLUSTER, "secretRef": {"name": "s", "key": "nope"}})),
            Some(&data),
        )
        .unwrap_err();
        assert_eq!(e.field, "spec.secretRef.key");
        let e = resolve(
            &target(json!({"type": KUBERNETES_CLUSTER, "secretRef": {"name": "s"}})),
            None,
        )
        .unwrap_err();
        assert!(e.message.contains("Secret ns/s not found"), "{e}");
    }

    #[test]
    fn a_checked_kubeconfig_is_checked_again_only_when_its_target_changes() {
        let resolved = |kubeconfig: &str| {
            let t =
                target(json!({"type": KUBERNETES_CLUSTER, "config": {"kubeconfig": kubeconfig}}));
            resolve(&t, None).expect("resolved")
        };
        let checked = CheckedKubeconfigs::default();
        assert!(checked.check(&resolved(KUBECONFIG)).is_ok());
        assert!(checked.check(&resolved(KUBECONFIG)).is_ok(), "from memory");
        assert_eq!(checked.seen().len(), 1);
        let exec = KUBECONFIG.replace("    token: abc\n", "    exec:\n      command: aws\n");
        let e = checked.check(&resolved(&exec)).unwrap_err();
        assert!(e.to_string().contains("exec is not allowed"), "{e}");
        assert!(
            checked.check(&resolved(&exec)).is_err(),
            "a refusal is not remembered"
        );
        assert_eq!(checked.seen().len(), 1);
    }

    #[test]
    fn kubeconfigs_with_exec_files_or_impersonation_are_refused() {
        let cases = [
            ("exec", "    exec:\n      command: aws\n"),
            ("client-certificate", "    client-certificate: /etc/cert\n"),
            ("client-key", "    client-key: /etc/key\n"),
            ("tokenFile", "    tokenFile: /var/token\n"),
            ("auth-provider", "    auth-provider:\n      name: gcp\n"),
            ("as", "    as: admin\n"),
        ];
        for (key, user) in cases {
            let kc = KUBECONFIG.replace("    token: abc\n", user);
            let e = validate_kubeconfig(&kc).unwrap_err().to_string();
            assert!(e.contains(&format!("{key} is not allowed")), "{key}: {e}");
        }
        let kc = KUBECONFIG.replace("    server:", "    certificate-authority: /ca\n    server:");
        assert!(
            validate_kubeconfig(&kc)
                .unwrap_err()
                .to_string()
                .contains("certificate-authority")
        );
        assert!(validate_kubeconfig(KUBECONFIG).is_ok());
        let t = target(
            json!({"type": "landscaper.gardener.cloud/other", "config": {"kubeconfig": KUBECONFIG}}),
        );
        assert_eq!(
            kubeconfig_of(&resolve(&t, None).expect("r"))
                .unwrap_err()
                .field,
            "spec.type"
        );
    }

    #[test]
    fn config_and_secret_ref_are_exclusive_and_errors_name_the_field() {
        let e = Target::parse(&json!({"metadata": {"name": "t", "namespace": "ns"}, "spec": {"config": {}, "secretRef": {"name": "s"}}})).unwrap_err();
        assert_eq!(e.field, "spec");
        let e = Target::parse(
            &json!({"metadata": {"name": "t", "namespace": "ns"}, "spec": {"secretRef": {}}}),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "Target ns/t: spec.secretRef.name: missing");
    }

    #[test]
    fn selectors_match_any_of_the_list_and_all_of_one() {
        let t = target(json!({"type": KUBERNETES_CLUSTER}));
        let sel = |s: &str| parse_selectors(s).expect("selector");
        assert!(serves(&[], &t));
        assert!(serves(&sel(r#"[{"targets": [{"name": "t"}]}]"#), &t));
        assert!(!serves(
            &sel(r#"[{"targets": [{"name": "t", "namespace": "other"}]}]"#),
            &t
        ));
        assert!(serves(
            &sel(r#"[{"labels": [{"key": "env", "operator": "in", "values": ["prod", "dev"]}]}]"#),
            &t
        ));
        assert!(!serves(
            &sel(
                r#"[{"labels": [{"key": "env", "operator": "=", "values": ["prod"]}], "annotations": [{"key": "landscaper.gardener.cloud/environment", "operator": "!="  , "values": ["fenced"]}]}]"#
            ),
            &t
        ));
        assert!(serves(
            &sel(
                r#"[{"labels": [{"key": "env", "operator": "!", "values": []}]}, {"labels": [{"key": "size", "operator": "gt", "values": ["2"]}]}]"#
            ),
            &t
        ));
        assert!(serves(
            &sel(r#"[{"labels": [{"key": "zone", "operator": "notin", "values": ["a"]}]}]"#),
            &t
        ));
        let e = parse_selectors(r#"[{"labels": [{"key": "env", "operator": "like"}]}]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("selector [0]") && e.contains("\"like\""), "{e}");
    }
}
