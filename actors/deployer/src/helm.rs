//! The helm type (`landscaper.gardener.cloud/helm`): ProviderConfiguration
//! `helm.deployer.landscaper.gardener.cloud/v1alpha1`. A chart (from `chart.archive.raw`,
//! `chart.archive.remote.url` or a chart repository) with `values` becomes either a real
//! Helm release in the target cluster (`helmDeployment: true`, the default: install when
//! there is none, else upgrade with at most 10 revisions; on a failure the pending revision
//! is removed so that the next try is not blocked) or, with `helmDeployment: false`, a set
//! of rendered objects applied as the kubernetes-manifest type applies its manifests.
//! Both then wait for the readiness checks and write the exports, which may also read the
//! chart's values root (`.Values`, `.Release`, `.Chart`).
//!
//! The planning is pure ([`HelmConfig::parse`], [`coalesce`], [`release_objects`]); the
//! charts and releases are the [`HelmPort`], the target's objects the manifest type's
//! [`TargetClusters`](crate::manifest::TargetClusters).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::manifest::{
    Flavor, Managed, Manifest, ManifestConfig, ManifestType, Policy, ResourceRef,
};
use crate::ports::{BoxFut, DeployerType, Job, Outcome};
use crate::readiness::{ReadinessChecks, UpdateStrategy};
use crate::status::DeployError;
use crate::target::ResolvedTarget;

/// The type name.
pub const HELM_TYPE: &str = "landscaper.gardener.cloud/helm";
/// The label put on the objects of `helmDeployment: false`.
pub const HELM_DEPLOYITEM_LABEL: &str = "helm.deployer.landscaper.gardener.cloud/deployitem";
const API: &str = "helm.deployer.landscaper.gardener.cloud/v1alpha1";
/// Revisions a release keeps (landscaper's `MaxHistory`).
pub const MAX_HISTORY: u32 = 10;

/// Where the chart comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ChartSource {
    /// `chart.archive.raw`: a gzipped tar, decoded from base64.
    Archive(Arc<Vec<u8>>),
    /// `chart.archive.remote.url`: a gzipped tar to download.
    Remote(String),
    /// `chart.helmChartRepo`: a chart of a Helm chart repository (`index.yaml`).
    Repo {
        url: String,
        name: String,
        /// Empty: the repository's newest.
        version: String,
    },
    /// `chart.ref`: a chart in an OCI registry.
    Oci(crate::oci::OciRef),
    /// `chart.resourceRef`: a resource of an OCM component version, read from the item's
    /// Context's `repositoryContext` (docs/deployer.md).
    Component(crate::ocm::ResourceKey),
}

/// `helmDeploymentConfig.install` / `.upgrade`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OperationOptions {
    pub atomic: bool,
    pub force: bool,
    pub skip_schema_validation: bool,
    pub take_ownership: bool,
    pub wait: bool,
    /// Accepted as landscaper accepts it; the item's remaining time is what Helm gets.
    pub timeout: Option<String>,
}

/// `helmDeploymentConfig.uninstall`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct UninstallOptions {
    pub wait: bool,
    pub timeout: Option<String>,
}

/// The ProviderConfiguration, checked.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HelmConfig {
    pub chart: ChartSource,
    /// Release name.
    pub name: String,
    /// Release namespace.
    pub namespace: String,
    pub create_namespace: bool,
    pub values: Value,
    /// `true`: a real Helm release; `false`: render and apply.
    pub helm_deployment: bool,
    pub install: OperationOptions,
    pub upgrade: OperationOptions,
    pub uninstall: UninstallOptions,
    pub update_strategy: UpdateStrategy,
    pub readiness: ReadinessChecks,
    pub exports: Vec<crate::readiness::Export>,
    pub deletion_groups: Option<Vec<crate::deletion::Group>>,
    pub deletion_groups_during_update: Option<Vec<crate::deletion::Group>>,
}

fn config_error(message: String) -> DeployError {
    DeployError::config("Reconcile", "InvalidProviderConfiguration", message)
}

/// Helm's rule for a release name (`ValidateReleaseName`): at most 53 characters, DNS
/// labels of lowercase letters, digits and `-` joined by `.`, each starting and ending with
/// a letter or digit. A name Helm refuses fails the item at once instead of every retry.
fn release_name(name: &str) -> Result<(), &'static str> {
    if name.len() > 53 {
        return Err("longer than 53 characters");
    }
    for label in name.split('.') {
        let bytes = label.as_bytes();
        let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if bytes.is_empty() {
            return Err("an empty part between dots");
        }
        if !bytes.iter().all(|b| alnum(b) || *b == b'-') {
            return Err("only lowercase letters, digits, '-' and '.' are allowed");
        }
        if !alnum(&bytes[0]) || !alnum(&bytes[bytes.len() - 1]) {
            return Err("each part must start and end with a lowercase letter or digit");
        }
    }
    Ok(())
}

fn string_field(v: &Value, field: &str) -> Result<String, DeployError> {
    match v {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        Value::Null => Err(config_error(format!("{field}: missing"))),
        other => Err(config_error(format!(
            "{field}: expected a non-empty string, got {other}"
        ))),
    }
}

fn flag(v: &Value, field: &str) -> Result<bool, DeployError> {
    match v {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(*b),
        other => Err(config_error(format!(
            "{field}: expected true or false, got {other}"
        ))),
    }
}

/// Reads an options object whose keys must be among `known` (landscaper: NotSupported).
fn options_object<'a>(
    v: &'a Value,
    field: &str,
    known: &[&str],
) -> Result<Option<&'a Map<String, Value>>, DeployError> {
    match v {
        Value::Null => Ok(None),
        Value::Object(m) => {
            if let Some(k) = m.keys().find(|k| !known.contains(&k.as_str())) {
                return Err(config_error(format!(
                    "{field}.{k}: not supported (expected one of {})",
                    known.join(", ")
                )));
            }
            Ok(Some(m))
        }
        other => Err(config_error(format!(
            "{field}: expected an object, got {other}"
        ))),
    }
}

fn timeout_field(m: &Map<String, Value>, field: &str) -> Result<Option<String>, DeployError> {
    match m.get("timeout") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            bosun_runtime::clock::parse_go_duration(s)
                .map_err(|e| config_error(format!("{field}.timeout: {e}")))?;
            Ok(Some(s.clone()))
        }
        Some(other) => Err(config_error(format!(
            "{field}.timeout: expected a duration such as \"5m\", got {other}"
        ))),
    }
}

fn operation_options(v: &Value, field: &str) -> Result<OperationOptions, DeployError> {
    const KNOWN: &[&str] = &[
        "atomic",
        "force",
        "skipSchemaValidation",
        "takeOwnership",
        "wait",
        "timeout",
    ];
    let Some(m) = options_object(v, field, KNOWN)? else {
        return Ok(OperationOptions::default());
    };
    let get = |k: &str| flag(m.get(k).unwrap_or(&Value::Null), &format!("{field}.{k}"));
    Ok(OperationOptions {
        atomic: get("atomic")?,
        force: get("force")?,
        skip_schema_validation: get("skipSchemaValidation")?,
        take_ownership: get("takeOwnership")?,
        wait: get("wait")?,
        timeout: timeout_field(m, field)?,
    })
}

fn chart_source(v: &Value) -> Result<ChartSource, DeployError> {
    const F: &str = "spec.config.chart";
    let chart = match v {
        Value::Object(m) => m,
        Value::Null => return Err(config_error(format!("{F}: missing"))),
        other => {
            return Err(config_error(format!(
                "{F}: expected an object, got {other}"
            )));
        }
    };
    let set: Vec<&str> = [
        "ref",
        "archive",
        "fromResource",
        "helmChartRepo",
        "resourceRef",
    ]
    .into_iter()
    .filter(|k| {
        chart
            .get(*k)
            .is_some_and(|v| !v.is_null() && *v != json!(""))
    })
    .collect();
    match set.as_slice() {
        [] => Err(config_error(format!(
            "{F}: give one of ref, archive, helmChartRepo, resourceRef"
        ))),
        [_, _, ..] => Err(config_error(format!(
            "{F}: give only one chart source, got {}",
            set.join(" and ")
        ))),
        ["archive"] => {
            let a = &chart["archive"];
            match (&a["raw"], &a["remote"]) {
                (Value::String(raw), Value::Null) => {
                    let compact: String = raw.split_whitespace().collect();
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(compact.as_bytes())
                        .map_err(|e| config_error(format!("{F}.archive.raw: not base64: {e}")))?;
                    Ok(ChartSource::Archive(Arc::new(bytes)))
                }
                (Value::Null, remote) if !remote.is_null() => Ok(ChartSource::Remote(
                    string_field(&remote["url"], &format!("{F}.archive.remote.url"))?,
                )),
                (Value::Null, Value::Null) => Err(config_error(format!(
                    "{F}.archive: give raw (a base64 gzipped tar) or remote.url"
                ))),
                _ => Err(config_error(format!(
                    "{F}.archive: give either raw (a base64 string) or remote.url, not both"
                ))),
            }
        }
        ["helmChartRepo"] => {
            let r = &chart["helmChartRepo"];
            let f = format!("{F}.helmChartRepo");
            let version = match &r["helmChartVersion"] {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => {
                    return Err(config_error(format!(
                        "{f}.helmChartVersion: expected a string, got {other}"
                    )));
                }
            };
            Ok(ChartSource::Repo {
                url: string_field(&r["helmChartRepoUrl"], &format!("{f}.helmChartRepoUrl"))?,
                name: string_field(&r["helmChartName"], &format!("{f}.helmChartName"))?,
                version,
            })
        }
        ["ref"] => match &chart["ref"] {
            Value::String(r) => crate::oci::OciRef::parse(r)
                .map(ChartSource::Oci)
                .map_err(|e| config_error(format!("{F}.ref: {e}"))),
            other => Err(config_error(format!(
                "{F}.ref: expected an OCI reference (host/repository:tag), got {other}"
            ))),
        },
        ["resourceRef"] => match &chart["resourceRef"] {
            Value::String(k) => crate::ocm::ResourceKey::decode(k)
                .map(ChartSource::Component)
                .map_err(|e| config_error(format!("{F}.resourceRef: {e}"))),
            other => Err(config_error(format!(
                "{F}.resourceRef: expected a resource key (a string from getResourceKey), got {other}"
            ))),
        },
        // Landscaper dropped it too ("chart.fromResource is no longer supported").
        [other] => Err(config_error(format!(
            "{F}.{other}: no longer supported (as in landscaper); give chart.resourceRef, chart.ref, chart.archive (raw or remote.url) or chart.helmChartRepo"
        ))),
    }
}

impl HelmConfig {
    /// Reads `spec.config`; every error names the field.
    pub fn parse(config: &Value) -> Result<HelmConfig, DeployError> {
        if config["apiVersion"] != API {
            return Err(config_error(format!(
                "spec.config.apiVersion: expected {API:?}, got {}",
                config["apiVersion"]
            )));
        }
        if config["kind"] != "ProviderConfiguration" {
            return Err(config_error(format!(
                "spec.config.kind: expected ProviderConfiguration, got {}",
                config["kind"]
            )));
        }
        let chart = chart_source(&config["chart"])?;
        let name = string_field(&config["name"], "spec.config.name")?;
        if let Err(why) = release_name(&name) {
            return Err(config_error(format!(
                "spec.config.name: {name:?} is not a Helm release name: {why}"
            )));
        }
        let namespace = string_field(&config["namespace"], "spec.config.namespace")?;
        let values = match &config["values"] {
            Value::Null => json!({}),
            v @ Value::Object(_) => v.clone(),
            other => {
                return Err(config_error(format!(
                    "spec.config.values: expected an object, got {other}"
                )));
            }
        };
        let helm_deployment = match &config["helmDeployment"] {
            Value::Null => true,
            v => flag(v, "spec.config.helmDeployment")?,
        };
        const DC: &str = "spec.config.helmDeploymentConfig";
        let dc = options_object(
            &config["helmDeploymentConfig"],
            DC,
            &["install", "upgrade", "uninstall"],
        )?;
        let part = |k: &str| dc.and_then(|m| m.get(k)).unwrap_or(&Value::Null);
        let uninstall = match options_object(
            part("uninstall"),
            &format!("{DC}.uninstall"),
            &["wait", "timeout"],
        )? {
            None => UninstallOptions::default(),
            Some(m) => UninstallOptions {
                wait: flag(
                    m.get("wait").unwrap_or(&Value::Null),
                    &format!("{DC}.uninstall.wait"),
                )?,
                timeout: timeout_field(m, &format!("{DC}.uninstall"))?,
            },
        };
        let mut exports = crate::readiness::parse_export_list(
            &config["exports"]["exports"],
            "spec.config.exports.exports",
            true,
        )?;
        exports.extend(crate::readiness::parse_export_list(
            &config["exportsFromManifests"],
            "spec.config.exportsFromManifests",
            true,
        )?);
        Ok(HelmConfig {
            chart,
            name,
            namespace,
            create_namespace: flag(&config["createNamespace"], "spec.config.createNamespace")?,
            values,
            helm_deployment,
            install: operation_options(part("install"), &format!("{DC}.install"))?,
            upgrade: operation_options(part("upgrade"), &format!("{DC}.upgrade"))?,
            uninstall,
            update_strategy: UpdateStrategy::parse(&config["updateStrategy"])?,
            readiness: ReadinessChecks::parse(&config["readinessChecks"])?,
            exports,
            deletion_groups: crate::deletion::parse(&config["deletionGroups"], "deletionGroups")?,
            deletion_groups_during_update: crate::deletion::parse(
                &config["deletionGroupsDuringUpdate"],
                "deletionGroupsDuringUpdate",
            )?,
        })
    }

    /// The manifest type's view of the rendered objects (and the checks and exports).
    fn manifests(&self, objects: Vec<Value>) -> ManifestConfig {
        ManifestConfig {
            manifests: objects
                .into_iter()
                .map(|object| Manifest {
                    policy: Policy::Manage,
                    object,
                    ..Manifest::default()
                })
                .collect(),
            update_strategy: self.update_strategy,
            readiness: self.readiness.clone(),
            exports: self.exports.clone(),
            deletion_groups: self.deletion_groups.clone(),
            deletion_groups_during_update: self.deletion_groups_during_update.clone(),
        }
    }
}

/// Helm's coalescing of the user's values over the chart's defaults: maps merge key by
/// key, anything else is replaced, and a `null` removes the default.
pub fn coalesce(defaults: &Value, user: &Value) -> Value {
    match (defaults, user) {
        (Value::Object(d), Value::Object(u)) => {
            let mut out = d.clone();
            for (k, v) in u {
                if v.is_null() {
                    out.remove(k);
                    continue;
                }
                let merged = match out.get(k) {
                    Some(existing) => coalesce(existing, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (_, u) => u.clone(),
    }
}

/// `configurations.helmChartRepoCredentials.auths[]` of the item's Context: for the URLs
/// that start with `url`, the `Authorization` header and the CA that signs the server's
/// certificate (beside the system's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoCredential {
    pub url: String,
    /// Empty: no header.
    pub auth_header: String,
    /// `customCAData`: PEM certificates.
    pub custom_ca: Option<String>,
    /// Where it was found, for errors (`Context ns/name: …auths[i]`).
    pub field: String,
}

impl RepoCredential {
    /// The first credential whose URL starts `url`.
    pub fn for_url<'a>(all: &'a [RepoCredential], url: &str) -> Option<&'a RepoCredential> {
        all.iter().find(|c| url.starts_with(&c.url))
    }

    /// The header of the first credential whose URL starts `url`.
    pub fn header_for<'a>(all: &'a [RepoCredential], url: &str) -> Option<&'a str> {
        Self::for_url(all, url)
            .map(|c| c.auth_header.as_str())
            .filter(|h| !h.is_empty())
    }
}

/// What fetching a chart may use, from the item's Context.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChartAccess {
    /// `configurations.helmChartRepoCredentials.auths`.
    pub repos: Vec<RepoCredential>,
    /// For charts in OCI registries: the docker configs of the Context's
    /// `registryPullSecrets`, in order ([`ChartAccess::login`]).
    pub pull_configs: Vec<Value>,
    /// For `chart.resourceRef`: where the Context's component versions are looked for (its
    /// `repositoryContext` first, then the resolvers of its `ocmConfig`).
    pub resolvers: Vec<crate::ocm::Resolver>,
    /// `landscaper.gardener.cloud/cache-helm-charts: "true"` on the item: a downloaded
    /// chart is reused for a day ([`CACHED_CHART_TTL`]), not only for a minute.
    pub cache_charts: bool,
}

impl ChartAccess {
    /// The login for `registry` (`Basic …`, or an identity token): from the first pull
    /// Secret that has one.
    pub fn login(&self, registry: &str) -> Option<crate::oci::Login> {
        self.pull_configs
            .iter()
            .find_map(|c| crate::oci::registry_login_for(c, registry))
    }
}

/// The annotation that keeps an item's downloaded charts for a day.
pub(crate) const CACHE_HELM_CHARTS: &str = "landscaper.gardener.cloud/cache-helm-charts";

/// How long a chart archive downloaded for an item with [`CACHE_HELM_CHARTS`] is reused
/// (landscaper's chart cache keeps them a day).
pub const CACHED_CHART_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What fetching `source` may use: the item's Context's chart repository credentials
/// and, for an OCI registry, its login ([`ChartAccess`]), then the deployer's own
/// `registry_configs` (docker configs from its Configuration's `oci.configFiles`, after
/// the Context's); nothing for a chart in the item.
pub(crate) async fn chart_access(
    job: &Job<'_>,
    source: &ChartSource,
    registry_configs: &[Value],
) -> Result<ChartAccess, DeployError> {
    let cache_charts = job
        .item
        .annotations
        .get(CACHE_HELM_CHARTS)
        .is_some_and(|v| v == "true");
    // (whether pull Secrets are read, whether the chart is a component's resource)
    let (registries, component) = match source {
        ChartSource::Archive(_) => return Ok(ChartAccess::default()),
        ChartSource::Oci(_) => (true, false),
        ChartSource::Remote(_) | ChartSource::Repo { .. } => (false, false),
        ChartSource::Component(_) => (true, true),
    };
    let ns = &job.item.key.namespace;
    let name = job.item.context.as_deref().unwrap_or("default");
    let Some(context) = job
        .cluster
        .get_context(ns, name)
        .await
        .map_err(|e| unreadable(format!("Context {ns}/{name}"), e.to_string()))?
    else {
        if component {
            return Err(config_error(format!(
                "spec.context: Context {ns}/{name} not found; chart.resourceRef reads component versions from its repositoryContext"
            )));
        }
        return Ok(ChartAccess {
            cache_charts,
            pull_configs: if registries {
                registry_configs.to_vec()
            } else {
                Vec::new()
            },
            ..ChartAccess::default()
        });
    };
    let repos = repo_credentials(job, &context).await?;
    let mut pull_configs = if registries {
        pull_configs(job, &context).await?
    } else {
        Vec::new()
    };
    let resolvers = if component {
        let (resolvers, logins) = component_resolvers(job, &context).await?;
        pull_configs.extend(logins);
        resolvers
    } else {
        Vec::new()
    };
    if registries {
        pull_configs.extend(registry_configs.iter().cloned());
    }
    Ok(ChartAccess {
        repos,
        pull_configs,
        resolvers,
        cache_charts,
    })
}

/// Where the Context's component versions are: its `repositoryContext` (tried first, as
/// landscaper adds it with the highest priority), then the resolvers of the `.ocmconfig` in
/// the ConfigMap its `ocmConfig` names; and that `.ocmconfig`'s registry logins (as docker
/// configs, after the pull Secrets').
async fn component_resolvers(
    job: &Job<'_>,
    context: &Value,
) -> Result<(Vec<crate::ocm::Resolver>, Vec<Value>), DeployError> {
    let ns = &job.item.key.namespace;
    let name = job.item.context.as_deref().unwrap_or("default");
    let mut out = Vec::new();
    let mut logins = Vec::new();
    if !context["repositoryContext"].is_null() {
        let field = format!("Context {ns}/{name}: repositoryContext");
        out.push(crate::ocm::Resolver {
            prefix: String::new(),
            priority: i64::MAX,
            repository: crate::ocm::Repository::of(&context["repositoryContext"], &field)
                .map_err(|e| config_error(e.to_string()))?,
        });
    }
    if !context["ocmConfig"].is_null() {
        let field = format!("Context {ns}/{name}: ocmConfig");
        let cm = string_field(&context["ocmConfig"]["name"], &format!("{field}.name"))?;
        let object = job
            .cluster
            .get_config_map(ns, &cm)
            .await
            .map_err(|e| unreadable(format!("ConfigMap {ns}/{cm}"), e.to_string()))?
            .ok_or_else(|| config_error(format!("{field}: ConfigMap {ns}/{cm} not found")))?;
        let text = object["data"][".ocmconfig"].as_str().ok_or_else(|| {
            config_error(format!("{field}: ConfigMap {ns}/{cm} has no .ocmconfig"))
        })?;
        let ocm = crate::ocm::OcmConfig::parse(text, &format!("ConfigMap {ns}/{cm} .ocmconfig"))
            .map_err(|e| config_error(e.to_string()))?;
        out.extend(ocm.resolvers);
        logins = ocm.logins;
        for source in ocm.docker_configs {
            logins.push(docker_config(source, &cm).await?);
        }
    }
    if out.is_empty() {
        return Err(config_error(format!(
            "Context {ns}/{name}: repositoryContext: missing, and no ocmConfig resolvers; chart.resourceRef reads component versions from them"
        )));
    }
    Ok((out, logins))
}

/// A docker config an `.ocmconfig` (in ConfigMap `cm`) names: as given, or read from
/// bosun's file system. A file that cannot be read now is retried (a Secret being mounted);
/// one that holds no docker config fails the item naming it.
async fn docker_config(
    source: crate::ocm::DockerConfigSource,
    cm: &str,
) -> Result<Value, DeployError> {
    let (path, field) = match source {
        crate::ocm::DockerConfigSource::Inline(config) => return Ok(config),
        crate::ocm::DockerConfigSource::File { path, field } => (path, field),
    };
    let what = format!("ConfigMap {cm} {field}: {}", path.display());
    let text = tokio::fs::read(&path)
        .await
        .map_err(|e| DeployError::new("Reconcile", "OcmConfig", format!("{what}: {e}"), &[]))?;
    match serde_json::from_slice::<Value>(&text) {
        Ok(config @ Value::Object(_)) => Ok(config),
        Ok(_) => Err(config_error(format!(
            "{what}: not a docker config (a JSON object)"
        ))),
        Err(e) => Err(config_error(format!("{what}: not a docker config: {e}"))),
    }
}

fn unreadable(what: String, e: String) -> DeployError {
    DeployError::new(
        "Reconcile",
        "HelmChartRepoCredentials",
        format!("{what}: {e}"),
        &[],
    )
}

/// The docker configs of the Context's `registryPullSecrets[] {name}` (Secrets in the
/// item's namespace), in order; every one must exist and hold a docker config.
async fn pull_configs(job: &Job<'_>, context: &Value) -> Result<Vec<Value>, DeployError> {
    let ns = &job.item.key.namespace;
    let name = job.item.context.as_deref().unwrap_or("default");
    let secrets = match &context["registryPullSecrets"] {
        Value::Null => return Ok(Vec::new()),
        Value::Array(a) => a.clone(),
        other => {
            return Err(config_error(format!(
                "Context {ns}/{name}: registryPullSecrets: expected a list, got {other}"
            )));
        }
    };
    let mut configs = Vec::new();
    for (i, r) in secrets.iter().enumerate() {
        let field = format!("Context {ns}/{name}: registryPullSecrets[{i}]");
        let secret = string_field(&r["name"], &format!("{field}.name"))?;
        let data = job
            .cluster
            .get_secret(ns, &secret)
            .await
            .map_err(|e| unreadable(format!("Secret {ns}/{secret}"), e.to_string()))?
            .ok_or_else(|| config_error(format!("{field}: Secret {ns}/{secret} not found")))?;
        let Some((key, bytes)) = [".dockerconfigjson", ".dockercfg"]
            .iter()
            .find_map(|k| data.get(*k).map(|b| (*k, b)))
        else {
            return Err(config_error(format!(
                "{field}: Secret {ns}/{secret} has neither .dockerconfigjson nor .dockercfg"
            )));
        };
        let config: Value = serde_json::from_slice(bytes).map_err(|e| {
            config_error(format!(
                "{field}: Secret {ns}/{secret} {key}: not a docker config: {e}"
            ))
        })?;
        configs.push(config);
    }
    Ok(configs)
}

/// The chart repository credentials of the item's Context: `authHeader` inline, or from
/// `secretRef {name, key (default authHeader)}` in the item's namespace, and
/// `customCAData`.
async fn repo_credentials(
    job: &Job<'_>,
    context: &Value,
) -> Result<Vec<RepoCredential>, DeployError> {
    const F: &str = "configurations.helmChartRepoCredentials.auths";
    let ns = &job.item.key.namespace;
    let name = job.item.context.as_deref().unwrap_or("default");
    let auths = match &context["configurations"]["helmChartRepoCredentials"]["auths"] {
        Value::Null => return Ok(Vec::new()),
        Value::Array(a) => a.clone(),
        other => {
            return Err(config_error(format!(
                "Context {ns}/{name}: {F}: expected a list, got {other}"
            )));
        }
    };
    let mut out = Vec::new();
    for (i, a) in auths.iter().enumerate() {
        let field = format!("Context {ns}/{name}: {F}[{i}]");
        let url = string_field(&a["url"], &format!("{field}.url"))?;
        let auth_header = match (&a["authHeader"], &a["secretRef"]) {
            (Value::String(h), _) if !h.is_empty() => h.clone(),
            (_, r) if r.is_object() => {
                let secret = string_field(&r["name"], &format!("{field}.secretRef.name"))?;
                let key = r["key"].as_str().unwrap_or("authHeader");
                let data = job
                    .cluster
                    .get_secret(ns, &secret)
                    .await
                    .map_err(|e| unreadable(format!("Secret {ns}/{secret}"), e.to_string()))?
                    .ok_or_else(|| {
                        config_error(format!("{field}.secretRef: Secret {ns}/{secret} not found"))
                    })?;
                let bytes = data.get(key).ok_or_else(|| {
                    config_error(format!(
                        "{field}.secretRef: Secret {ns}/{secret} has no key {key:?}"
                    ))
                })?;
                String::from_utf8(bytes.clone()).map_err(|_| {
                    config_error(format!(
                        "{field}.secretRef: the value of {key:?} is not text"
                    ))
                })?
            }
            // A credential may only bring its CA.
            _ if a["customCAData"].is_string() => String::new(),
            _ => {
                return Err(config_error(format!(
                    "{field}: give authHeader, secretRef or customCAData"
                )));
            }
        };
        let custom_ca = match &a["customCAData"] {
            Value::Null => None,
            Value::String(pem) if pem.contains("-----BEGIN CERTIFICATE-----") => Some(pem.clone()),
            other => {
                return Err(config_error(format!(
                    "{field}.customCAData: expected PEM certificates (-----BEGIN CERTIFICATE-----), got {}",
                    match other {
                        Value::String(_) => "text without a certificate".to_string(),
                        other => other.to_string(),
                    }
                )));
            }
        };
        out.push(RepoCredential {
            url,
            auth_header,
            custom_ca,
            field,
        });
    }
    Ok(out)
}

/// A chart, fetched and read.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// The gzipped tar.
    pub archive: Arc<Vec<u8>>,
    /// A digest of the archive (hex).
    pub digest: String,
    /// `Chart.yaml`: name, version, appVersion.
    pub metadata: Value,
    /// `values.yaml`.
    pub default_values: Value,
}

/// A release as the type needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReleaseState {
    pub namespace: String,
    pub revision: u64,
    /// `deployed`, `failed`, `pending-install`, …
    pub status: String,
    /// The rendered manifest of the revision.
    pub manifest: String,
}

/// One install, upgrade or render.
#[derive(Clone, Copy, Debug)]
pub struct HelmRun<'a> {
    pub chart: &'a Chart,
    pub release: &'a str,
    pub namespace: &'a str,
    pub values: &'a Value,
    pub create_namespace: bool,
    pub options: &'a OperationOptions,
    /// What Helm may take (the item's remaining time).
    pub timeout: Option<Duration>,
}

/// Charts and releases, as the helm type needs them.
pub trait HelmPort: Send + Sync + 'static {
    /// Fetches (or finds in the cache) and reads a chart; a download whose URL starts with
    /// a credential's URL carries its `Authorization` header (an OCI registry's requests,
    /// the registry login).
    fn chart<'a>(
        &'a self,
        source: &'a ChartSource,
        access: &'a ChartAccess,
    ) -> BoxFut<'a, Result<Arc<Chart>, DeployError>>;
    /// Renders the chart offline: the objects of its templates.
    fn render<'a>(&'a self, run: HelmRun<'a>) -> BoxFut<'a, Result<Vec<Value>, DeployError>>;
    /// The release's last revision (`None`: no release of that name).
    fn release<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFut<'a, Result<Option<ReleaseState>, DeployError>>;
    /// Installs (`upgrade = false`) or upgrades the release.
    fn deploy<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        run: HelmRun<'a>,
        upgrade: bool,
    ) -> BoxFut<'a, Result<ReleaseState, DeployError>>;
    /// Uninstalls the release; a missing release is success.
    fn uninstall<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
        wait: bool,
        timeout: Option<Duration>,
    ) -> BoxFut<'a, Result<(), DeployError>>;
    /// Removes the release's pending revisions (`pending-install`, `pending-upgrade`,
    /// `pending-rollback`) so that the next operation is not blocked; how many.
    fn unblock<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFut<'a, Result<usize, DeployError>>;
}

/// The objects of a release manifest the default readiness check looks at (the ProviderStatus
/// of a real release lists only these, as landscaper's does), in `namespace` when they name
/// none.
pub(crate) fn release_objects(manifest: &str, namespace: &str) -> Vec<ResourceRef> {
    let mut out = Vec::new();
    for doc in split_documents(manifest) {
        let Ok(v) = serde_saphyr::from_str::<Value>(doc) else {
            continue;
        };
        let kind = v["kind"].as_str().unwrap_or_default();
        if !crate::readiness::CHECKED_KINDS.contains(&kind) {
            continue;
        }
        let mut r = ResourceRef::of(&v);
        if r.namespace.is_empty() {
            r.namespace = namespace.to_string();
        }
        out.push(r);
    }
    out
}

/// The YAML documents of a multi-document text.
pub fn split_documents(text: &str) -> impl Iterator<Item = &str> {
    text.split("\n---")
        .map(|d| d.trim_start_matches("---"))
        .filter(|d| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
}

/// The digest of what a release is asked to be: when it equals the one of the last
/// revision bosun made, and that revision is still the deployed one, an unforced
/// reconcile leaves the release alone (no new revision every 5 s while it waits for
/// readiness).
pub(crate) fn desired_digest(config: &HelmConfig, chart: &Chart) -> String {
    use md5::Digest as _;
    let text = json!({
        "chart": chart.digest,
        "values": config.values,
        "name": config.name,
        "namespace": config.namespace,
        "createNamespace": config.create_namespace,
        "install": format!("{:?}", config.install),
        "upgrade": format!("{:?}", config.upgrade),
    })
    .to_string();
    md5::Md5::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The chart's values root for exports: `.Values`, `.Release`, `.Chart`.
pub(crate) fn values_root(config: &HelmConfig, chart: &Chart, revision: Option<u64>) -> Value {
    json!({
        "Values": coalesce(&chart.default_values, &config.values),
        "Release": {
            "Name": config.name,
            "Namespace": config.namespace,
            "Revision": revision.unwrap_or(0),
            "Service": "Helm",
        },
        "Chart": {
            "Name": chart.metadata["name"],
            "Version": chart.metadata["version"],
            "AppVersion": chart.metadata["appVersion"],
        },
    })
}

/// The helm type.
pub struct HelmType {
    pub helm: Arc<dyn HelmPort>,
    /// The manifest type on the same target clusters (`helmDeployment: false`,
    /// readiness checks and exports).
    pub manifests: ManifestType,
    /// Registry logins of the deployer itself (docker configs: landscaper's
    /// `oci.configFiles`), tried after the item's Context's.
    pub registry_configs: Arc<[Value]>,
}

fn need_target<'a>(job: &Job<'a>) -> Result<&'a ResolvedTarget, DeployError> {
    job.target.ok_or_else(|| {
        DeployError::config(
            "Reconcile",
            "TargetMissing",
            "spec.target: the helm type needs a target",
        )
    })
}

fn flavor(namespace: &str) -> Flavor {
    Flavor {
        label: HELM_DEPLOYITEM_LABEL,
        provider_api: API,
        default_namespace: namespace.to_string(),
    }
}

/// The release bosun last made, as its ProviderStatus remembers it.
fn last_release(provider_status: Option<&Value>) -> (Option<u64>, Option<&str>) {
    let r = provider_status.map(|p| &p["release"]);
    (
        r.and_then(|r| r["revision"].as_u64()),
        r.and_then(|r| r["digest"].as_str()),
    )
}

impl HelmType {
    async fn apply(&self, job: &Job<'_>) -> Result<Outcome, DeployError> {
        let target = need_target(job)?;
        let config = HelmConfig::parse(job.item.config().unwrap_or(&Value::Null))?;
        let access = chart_access(job, &config.chart, &self.registry_configs).await?;
        let chart = self.helm.chart(&config.chart, &access).await?;
        let run = HelmRun {
            chart: &chart,
            release: &config.name,
            namespace: &config.namespace,
            values: &config.values,
            create_namespace: config.create_namespace,
            options: &config.install,
            timeout: job.remaining,
        };
        if !config.helm_deployment {
            let objects = self.helm.render(run).await?;
            let manifests = config.manifests(objects);
            let root = values_root(&config, &chart, None);
            return self
                .manifests
                .apply_config(
                    job,
                    target,
                    &manifests,
                    &flavor(&config.namespace),
                    Some(&root),
                )
                .await;
        }
        let digest = desired_digest(&config, &chart);
        let live = self
            .helm
            .release(target, &config.namespace, &config.name)
            .await?;
        if let Some(r) = &live
            && r.namespace != config.namespace
        {
            return Err(DeployError::new(
                "Reconcile",
                "ReleaseNamespace",
                format!(
                    "release {} not found in namespace {} (it is in {})",
                    config.name, config.namespace, r.namespace
                ),
                &[],
            ));
        }
        // One run of an item at a time (and one replica per item): a pending revision here
        // is an operation that died with its process (a crash, a killed Helm) and would
        // refuse every later one as "another operation is in progress". Removed first,
        // as landscaper does after a failed operation, and the release read again.
        let live = match live {
            Some(r) if r.status.starts_with("pending-") => {
                let removed = self
                    .helm
                    .unblock(target, &config.namespace, &config.name)
                    .await?;
                tracing::warn!(release = %config.name, namespace = %config.namespace, status = %r.status, removed, "the release was left pending by an operation that is gone; its pending revisions were removed");
                self.helm
                    .release(target, &config.namespace, &config.name)
                    .await?
            }
            live => live,
        };
        let (last_revision, last_digest) = last_release(job.item.status.provider_status.as_ref());
        let unchanged = !job.force
            && live.as_ref().is_some_and(|r| {
                r.status == "deployed"
                    && Some(r.revision) == last_revision
                    && Some(digest.as_str()) == last_digest
            });
        let release = match live {
            Some(r) if unchanged => r,
            live => {
                let upgrade = live.is_some();
                let run = HelmRun {
                    options: if upgrade {
                        &config.upgrade
                    } else {
                        &config.install
                    },
                    ..run
                };
                match self.helm.deploy(target, run, upgrade).await {
                    Ok(r) => r,
                    Err(e) => {
                        // Landscaper removes pending revisions after a failure, so that
                        // the next try is not refused as "another operation in progress".
                        if let Err(u) = self
                            .helm
                            .unblock(target, &config.namespace, &config.name)
                            .await
                        {
                            tracing::warn!(release = %config.name, error = %u, "cannot remove the pending revisions");
                        }
                        return Err(e);
                    }
                }
            }
        };
        let managed: Vec<Managed> = release_objects(&release.manifest, &config.namespace)
            .into_iter()
            .map(|resource| Managed {
                policy: Policy::Manage,
                resource,
                annotate_before_delete: Map::new(),
                patch_before_delete: None,
            })
            .collect();
        let provider_status = json!({
            "apiVersion": API,
            "kind": "ProviderStatus",
            "managedResources": managed,
            "release": {
                "name": config.name,
                "namespace": config.namespace,
                "revision": release.revision,
                "digest": digest,
            },
        });
        let checks = config.manifests(Vec::new());
        let root = values_root(&config, &chart, Some(release.revision));
        self.manifests
            .conclude(job, &checks, &managed, provider_status, &[], Some(&root))
            .await
    }

    async fn remove(&self, job: &Job<'_>) -> Result<(), DeployError> {
        let config = HelmConfig::parse(job.item.config().unwrap_or(&Value::Null));
        let real = match &config {
            Ok(c) => c.helm_deployment,
            // A configuration that no longer parses: what the ProviderStatus says.
            Err(_) => job
                .item
                .status
                .provider_status
                .as_ref()
                .is_some_and(|p| p["release"].is_object()),
        };
        if !real {
            let groups = config.ok().and_then(|c| c.deletion_groups);
            let namespace = job.item.key.namespace.clone();
            return self
                .manifests
                .remove_managed(job, groups.as_deref(), &flavor(&namespace))
                .await;
        }
        let (name, namespace, uninstall) = match config {
            Ok(c) => (c.name, c.namespace, c.uninstall),
            Err(e) => {
                let p = job.item.status.provider_status.as_ref();
                let r = p.map(|p| &p["release"]);
                match (
                    r.and_then(|r| r["name"].as_str()),
                    r.and_then(|r| r["namespace"].as_str()),
                ) {
                    (Some(n), Some(ns)) => {
                        (n.to_string(), ns.to_string(), UninstallOptions::default())
                    }
                    _ => return Err(e),
                }
            }
        };
        let target = need_target(job)?;
        self.helm
            .uninstall(target, &namespace, &name, uninstall.wait, job.remaining)
            .await
    }
}

impl DeployerType for HelmType {
    fn name(&self) -> &str {
        HELM_TYPE
    }

    fn reconcile<'a>(&'a self, job: Job<'a>) -> BoxFut<'a, Result<Outcome, DeployError>> {
        Box::pin(async move { self.apply(&job).await })
    }

    fn delete<'a>(&'a self, job: Job<'a>) -> BoxFut<'a, Result<(), DeployError>> {
        Box::pin(async move { self.remove(&job).await })
    }

    fn abort<'a>(&'a self, _job: Job<'a>) -> BoxFut<'a, ()> {
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_names_follow_helm_s_rule() {
        for ok in ["app", "my-app", "a1.b2", "x", &"a".repeat(53)] {
            assert_eq!(release_name(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("My-App", "only lowercase"),
            ("app_1", "only lowercase"),
            ("-app", "start and end"),
            ("app-", "start and end"),
            ("a..b", "empty part"),
            (&"a".repeat(54), "53"),
        ] {
            let e = release_name(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    fn config(extra: Value) -> Value {
        let mut c = json!({
            "apiVersion": API, "kind": "ProviderConfiguration",
            "name": "web", "namespace": "apps",
            "chart": {"archive": {"raw": "H4sI"}},
        });
        if let (Some(c), Value::Object(e)) = (c.as_object_mut(), extra) {
            c.extend(e);
        }
        c
    }

    fn err(v: Value) -> String {
        match HelmConfig::parse(&v) {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => {
                assert!(e.is_unrecoverable(), "a configuration problem: {e}");
                e.message
            }
        }
    }

    #[test]
    fn a_config_reads_every_field_with_landscaper_defaults() {
        let c = HelmConfig::parse(&config(json!({
            "values": {"a": 1},
            "createNamespace": true,
            "helmDeploymentConfig": {"install": {"atomic": true, "timeout": "5m"}, "uninstall": {"wait": true}},
            "exports": {"exports": [{"key": "port", "jsonPath": ".Values.port"}]},
        })))
        .expect("parses");
        assert_eq!(
            c.chart,
            ChartSource::Archive(Arc::new(vec![0x1f, 0x8b, 0x08]))
        );
        assert!(c.helm_deployment, "helmDeployment defaults to true");
        assert!(c.create_namespace && c.install.atomic && c.uninstall.wait);
        assert_eq!(c.install.timeout.as_deref(), Some("5m"));
        assert!(c.exports[0].from.is_none(), "an export of the values");
        let repo = HelmConfig::parse(&config(json!({"chart": {"helmChartRepo": {
            "helmChartRepoUrl": "http://127.0.0.1/charts", "helmChartName": "web"}}})))
        .expect("repo");
        assert_eq!(
            repo.chart,
            ChartSource::Repo {
                url: "http://127.0.0.1/charts".into(),
                name: "web".into(),
                version: String::new()
            }
        );
    }

    #[test]
    fn bad_configs_name_the_field() {
        for (v, field) in [
            (json!({"apiVersion": "v1"}), "spec.config.apiVersion"),
            (config(json!({"name": null})), "spec.config.name: missing"),
            (config(json!({"namespace": 3})), "spec.config.namespace"),
            (
                config(json!({"chart": {}})),
                "spec.config.chart: give one of",
            ),
            (
                config(json!({"chart": {"ref": "https://eu.gcr.io/x/chart:1"}})),
                "spec.config.chart.ref: \"https://eu.gcr.io/x/chart:1\": a reference is host/repository:tag, not a URL",
            ),
            (
                config(json!({"chart": {"resourceRef": "cd://x"}})),
                "spec.config.chart.resourceRef: not a resource key",
            ),
            (
                config(json!({"chart": {"fromResource": {"resourceName": "chart"}}})),
                "spec.config.chart.fromResource: no longer supported",
            ),
            (
                config(json!({"chart": {"archive": {"raw": "%%%"}}})),
                "spec.config.chart.archive.raw: not base64",
            ),
            (
                config(json!({"chart": {"helmChartRepo": {"helmChartName": "x"}}})),
                "helmChartRepo.helmChartRepoUrl: missing",
            ),
            (
                config(json!({"helmDeploymentConfig": {"install": {"recreate": true}}})),
                "spec.config.helmDeploymentConfig.install.recreate: not supported",
            ),
            (
                config(json!({"helmDeploymentConfig": {"upgrade": {"timeout": "soon"}}})),
                "spec.config.helmDeploymentConfig.upgrade.timeout",
            ),
            (
                config(json!({"values": [1]})),
                "spec.config.values: expected an object",
            ),
            (
                config(json!({"helmDeployment": "yes"})),
                "spec.config.helmDeployment: expected true or false",
            ),
        ] {
            let m = err(v);
            assert!(m.contains(field), "{m:?} names {field:?}");
        }
    }

    #[test]
    fn user_values_coalesce_over_the_chart_defaults() {
        let defaults =
            json!({"image": {"repo": "nginx", "tag": "1"}, "port": 80, "extra": {"a": 1}});
        let user = json!({"image": {"tag": "2"}, "extra": null, "new": true});
        assert_eq!(
            coalesce(&defaults, &user),
            json!({"image": {"repo": "nginx", "tag": "2"}, "port": 80, "new": true})
        );
    }

    #[test]
    fn the_release_objects_are_the_ones_the_readiness_check_reads() {
        let manifest = "---\n# Source: web/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\n  namespace: data\n";
        let objects = release_objects(manifest, "apps");
        let names: Vec<String> = objects.iter().map(|r| r.to_string()).collect();
        assert_eq!(objects.len(), 2, "{names:?}");
        assert_eq!(
            (objects[0].kind.as_str(), objects[0].namespace.as_str()),
            ("Deployment", "apps")
        );
        assert_eq!(objects[1].namespace, "data");
    }
}
