//! The kubernetes-manifest type (`landscaper.gardener.cloud/kubernetes-manifest`):
//! ProviderConfiguration v1alpha2 (and v1alpha1), the policies, the update strategies
//! (`update`, `patch`, `merge`, `mergeOverwrite`), CRDs → cluster-scoped → namespaced apply
//! order, `annotateBeforeCreate`, `annotateBeforeDelete`/`patchBeforeDelete`,
//! `managedResources` in the ProviderStatus, orphans removed, default and custom readiness
//! checks, exports from resources (and the objects they reference), `patchAfterDeployment`,
//! and removal in reverse order on deletion. The planning is pure
//! ([`ManifestConfig::parse`], [`order`], [`orphans`], [`crate::readiness`]); the target
//! cluster is the [`TargetClusters`] port.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::ports::{BoxFut, DeployerType, Job, Outcome};
use crate::readiness::{Export, ObjectName, ReadinessChecks, UpdateStrategy};
use crate::status::DeployError;
use crate::target::ResolvedTarget;

/// The type name.
pub const MANIFEST_TYPE: &str = "landscaper.gardener.cloud/kubernetes-manifest";
/// The label put on every object the type creates.
pub const DEPLOYITEM_LABEL: &str = "manifest.deployer.landscaper.gardener.cloud/deployitem";
const API_V1ALPHA1: &str = "manifest.deployer.landscaper.gardener.cloud/v1alpha1";
const API_V1ALPHA2: &str = "manifest.deployer.landscaper.gardener.cloud/v1alpha2";

/// What the type does with one manifest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Create, update, delete (and take over existing objects).
    #[default]
    Manage,
    /// As manage, unless another item's label is on the live object.
    Fallback,
    /// Create and update, never delete.
    Keep,
    /// Skipped entirely.
    Ignore,
    /// Create and delete, never update.
    Immutable,
}

impl Policy {
    /// Whether objects of this policy are deleted (as orphans or with the item).
    pub fn deletes(self) -> bool {
        matches!(self, Policy::Manage | Policy::Fallback | Policy::Immutable)
    }
}

/// One manifest of the configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Manifest {
    pub policy: Policy,
    pub object: Value,
    /// Annotations put on the object when it is created.
    pub annotate_before_create: Map<String, Value>,
    /// Annotations put on the object before it is deleted.
    pub annotate_before_delete: Map<String, Value>,
    /// Deep-merged into the object before it is deleted.
    pub patch_before_delete: Option<Value>,
    /// Deep-merged into the object once the item is ready and exported.
    pub patch_after_deployment: Option<Value>,
}

/// The ProviderConfiguration, checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ManifestConfig {
    pub manifests: Vec<Manifest>,
    pub update_strategy: UpdateStrategy,
    pub readiness: ReadinessChecks,
    pub exports: Vec<Export>,
    /// `deletionGroups` (`None`: the default order).
    pub deletion_groups: Option<Vec<crate::deletion::Group>>,
    /// `deletionGroupsDuringUpdate`, for orphans.
    pub deletion_groups_during_update: Option<Vec<crate::deletion::Group>>,
}

/// An annotations map of a manifest field.
fn annotations(v: &Value, field: &str) -> Result<Map<String, Value>, DeployError> {
    match v {
        Value::Null => Ok(Map::new()),
        Value::Object(m) if m.values().all(Value::is_string) => Ok(m.clone()),
        other => Err(config_error(format!(
            "{field}: expected a map of strings, got {other}"
        ))),
    }
}

/// A patch object of a manifest field.
fn patch_object(v: &Value, field: &str) -> Result<Option<Value>, DeployError> {
    match v {
        Value::Null => Ok(None),
        Value::Object(_) => Ok(Some(v.clone())),
        other => Err(config_error(format!(
            "{field}: expected an object, got {other}"
        ))),
    }
}

fn config_error(message: String) -> DeployError {
    DeployError::config("Reconcile", "InvalidProviderConfiguration", message)
}

impl ManifestConfig {
    /// Reads `spec.config`; every error names the field.
    pub fn parse(config: &Value) -> Result<ManifestConfig, DeployError> {
        let api = config["apiVersion"].as_str().unwrap_or_default();
        if api != API_V1ALPHA1 && api != API_V1ALPHA2 {
            return Err(config_error(format!(
                "spec.config.apiVersion: expected {API_V1ALPHA2:?} or {API_V1ALPHA1:?}, got {api:?}"
            )));
        }
        if config["kind"] != "ProviderConfiguration" {
            return Err(config_error(format!(
                "spec.config.kind: expected ProviderConfiguration, got {}",
                config["kind"]
            )));
        }
        let update_strategy = UpdateStrategy::parse(&config["updateStrategy"])?;
        let readiness = ReadinessChecks::parse(&config["readinessChecks"])?;
        let exports = crate::readiness::parse_exports(&config["exports"])?;
        let deletion_groups = crate::deletion::parse(&config["deletionGroups"], "deletionGroups")?;
        let deletion_groups_during_update = crate::deletion::parse(
            &config["deletionGroupsDuringUpdate"],
            "deletionGroupsDuringUpdate",
        )?;
        let list = match &config["manifests"] {
            Value::Null => Vec::new(),
            Value::Array(a) => a.clone(),
            other => {
                return Err(config_error(format!(
                    "spec.config.manifests: expected a list, got {other}"
                )));
            }
        };
        let mut manifests = Vec::new();
        for (i, m) in list.into_iter().enumerate() {
            let field = format!("spec.config.manifests[{i}]");
            let mut manifest = Manifest::default();
            let (policy, object) = if api == API_V1ALPHA1 {
                (Policy::Manage, m)
            } else {
                manifest.annotate_before_create = annotations(
                    &m["annotateBeforeCreate"],
                    &format!("{field}.annotateBeforeCreate"),
                )?;
                manifest.annotate_before_delete = annotations(
                    &m["annotateBeforeDelete"],
                    &format!("{field}.annotateBeforeDelete"),
                )?;
                manifest.patch_before_delete = patch_object(
                    &m["patchBeforeDelete"],
                    &format!("{field}.patchBeforeDelete"),
                )?;
                manifest.patch_after_deployment = patch_object(
                    &m["patchAfterDeployment"],
                    &format!("{field}.patchAfterDeployment"),
                )?;
                let policy = match &m["policy"] {
                    Value::Null => Policy::Manage,
                    p => serde_json::from_value(p.clone()).map_err(|_| {
                        config_error(format!(
                            "{field}.policy: unknown policy {p} (expected manage, fallback, keep, ignore or immutable)"
                        ))
                    })?,
                };
                (policy, m["manifest"].clone())
            };
            if !object.is_object() {
                return Err(config_error(format!(
                    "{field}.manifest: expected an object, got {object}"
                )));
            }
            for key in ["apiVersion", "kind"] {
                match &object[key] {
                    Value::String(s) if !s.is_empty() => {}
                    Value::Null | Value::String(_) => {
                        return Err(config_error(format!("{field}.manifest.{key}: missing")));
                    }
                    other => {
                        return Err(config_error(format!(
                            "{field}.manifest.{key}: expected a string, got {other}"
                        )));
                    }
                }
            }
            if object["metadata"]["name"]
                .as_str()
                .is_none_or(str::is_empty)
            {
                return Err(config_error(format!(
                    "{field}.manifest.metadata.name: missing"
                )));
            }
            manifest.policy = policy;
            manifest.object = object;
            manifests.push(manifest);
        }
        Ok(ManifestConfig {
            manifests,
            update_strategy,
            readiness,
            exports,
            deletion_groups,
            deletion_groups_during_update,
        })
    }
}

/// The largest an item with its status may be: etcd's default `--max-request-bytes`
/// (1.5 MiB). kube-apiserver takes request bodies of up to 3 MiB, but it stores a custom
/// resource in one etcd request, and etcd refuses a larger one (`etcdserver: request is too
/// large`, a 500).
pub(crate) const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// Room for the rest of the status (conditions, errors, times, exports' reference).
const STATUS_SLACK: usize = 16 * 1024;

/// The length of `value` as compact JSON, counted as it is serialized.
fn json_len(value: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

/// Refuses, before anything is written, manifests whose `managedResources` would make the
/// item larger than the API server takes: its status write would be refused on every try.
pub(crate) fn check_status_fits(item: &Value, config: &ManifestConfig) -> Result<(), DeployError> {
    // Counted, not copied and written out: this runs on every run of every item.
    let item_bytes = json_len(item).saturating_sub(match item.get("status") {
        Some(status) => json_len(status) + r#","status":"#.len(),
        None => 0,
    });
    let listed: Vec<Managed> = config
        .manifests
        .iter()
        .filter(|m| m.policy != Policy::Ignore)
        .map(|m| {
            let mut resource = ResourceRef::of(&m.object);
            // As written: with a uid, and a namespace for namespaced objects.
            resource.uid = "00000000-0000-0000-0000-000000000000".into();
            if resource.namespace.is_empty() {
                resource.namespace = "default".into();
            }
            Managed {
                policy: m.policy,
                resource,
                annotate_before_delete: m.annotate_before_delete.clone(),
                patch_before_delete: m.patch_before_delete.clone(),
            }
        })
        .collect();
    let listed_bytes = json_len(&listed);
    let total = item_bytes + listed_bytes + STATUS_SLACK;
    if total <= MAX_OBJECT_BYTES {
        return Ok(());
    }
    Err(config_error(format!(
        "spec.config.manifests: {} objects would be listed in status.providerStatus.managedResources (about {} KiB); with the item itself ({} KiB) that is above the {} KiB the API server takes for one object: split the manifests over several DeployItems",
        listed.len(),
        listed_bytes / 1024,
        item_bytes / 1024,
        MAX_OBJECT_BYTES / 1024
    )))
}

/// An object the type manages, as listed in `providerStatus.managedResources`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResourceRef {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl ResourceRef {
    /// The reference of an object.
    pub fn of(o: &Value) -> ResourceRef {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        ResourceRef {
            api_version: s(&o["apiVersion"]),
            kind: s(&o["kind"]),
            name: s(&o["metadata"]["name"]),
            namespace: s(&o["metadata"]["namespace"]),
            uid: s(&o["metadata"]["uid"]),
        }
    }

    /// Whether `live` is this very object: the same uid, when the uid is known. An object
    /// made again under the same name after the delete (a cluster's controller restores
    /// some, such as each namespace's `kube-root-ca.crt` ConfigMap) is another one: the
    /// deleted one is gone.
    pub fn is_this(&self, live: &Value) -> bool {
        self.uid.is_empty() || live["metadata"]["uid"].as_str() == Some(self.uid.as_str())
    }

    /// Identity without the uid.
    fn id(&self) -> (&str, &str, &str, &str) {
        (&self.api_version, &self.kind, &self.namespace, &self.name)
    }
}

impl std::fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// One entry of `managedResources`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Managed {
    pub policy: Policy,
    pub resource: ResourceRef,
    #[serde(
        rename = "annotateBeforeDelete",
        default,
        skip_serializing_if = "Map::is_empty"
    )]
    pub annotate_before_delete: Map<String, Value>,
    #[serde(
        rename = "patchBeforeDelete",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub patch_before_delete: Option<Value>,
}

/// The apply group of an object: CRDs first, then cluster-scoped, then namespaced.
pub fn group(kind: &str, namespaced: bool) -> u8 {
    if kind == "CustomResourceDefinition" {
        0
    } else if !namespaced {
        1
    } else {
        2
    }
}

/// Indices of `manifests` in apply order (stable within a group).
pub fn order(manifests: &[(Manifest, bool)]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..manifests.len()).collect();
    idx.sort_by_key(|&i| {
        group(
            manifests[i].0.object["kind"].as_str().unwrap_or_default(),
            manifests[i].1,
        )
    });
    idx
}

/// What was managed before and is no longer: to delete (policies that delete only).
pub fn orphans(before: &[Managed], now: &[Managed]) -> Vec<Managed> {
    before
        .iter()
        .filter(|b| b.policy.deletes())
        .filter(|b| !now.iter().any(|n| n.resource.id() == b.resource.id()))
        .cloned()
        .collect()
}

/// The managed resources of a providerStatus.
pub(crate) fn managed_of(provider_status: Option<&Value>) -> Vec<Managed> {
    provider_status
        .and_then(|p| serde_json::from_value(p["managedResources"].clone()).ok())
        .unwrap_or_default()
}

/// The Targets that readiness checks and exports name (`targetName`), resolved once per
/// run: they read objects there instead of in the item's target.
#[derive(Default)]
pub(crate) struct OtherTargets(std::collections::BTreeMap<String, ResolvedTarget>);

impl OtherTargets {
    pub(crate) async fn resolve(
        job: &Job<'_>,
        config: &ManifestConfig,
    ) -> Result<OtherTargets, DeployError> {
        let checks = config.readiness.custom.iter().enumerate().map(|(i, c)| {
            (
                c.target_name.as_deref(),
                format!("spec.config.readinessChecks.custom[{i}].targetName"),
            )
        });
        let exports = config.exports.iter().enumerate().map(|(i, e)| {
            (
                e.target_name.as_deref(),
                format!("spec.config.exports.exports[{i}].targetName"),
            )
        });
        OtherTargets::named(job, checks.chain(exports)).await
    }

    /// The Targets the deletion groups name (`customResourceGroup.targetName`).
    async fn of_groups(
        job: &Job<'_>,
        groups: Option<&[crate::deletion::Group]>,
    ) -> Result<OtherTargets, DeployError> {
        let names = groups.unwrap_or(&[]).iter().enumerate().map(|(i, g)| {
            (
                g.target_name.as_deref(),
                format!("spec.config.deletionGroups[{i}].customResourceGroup.targetName"),
            )
        });
        OtherTargets::named(job, names).await
    }

    /// Resolves each named Target once; `field` names where a name came from.
    async fn named<'n>(
        job: &Job<'_>,
        names: impl Iterator<Item = (Option<&'n str>, String)>,
    ) -> Result<OtherTargets, DeployError> {
        let mut found = std::collections::BTreeMap::new();
        for (name, field) in names {
            let Some(name) = name else { continue };
            if found.contains_key(name) {
                continue;
            }
            let t =
                crate::controller::named_target(job.cluster, &job.item.key.namespace, name, &field)
                    .await?;
            found.insert(name.to_string(), t);
        }
        Ok(OtherTargets(found))
    }

    /// The target a check or an export with `name` reads, and words naming it when it is
    /// not the item's (for what the item waits for).
    fn pick<'t>(
        &'t self,
        own: &'t ResolvedTarget,
        name: Option<&str>,
    ) -> (&'t ResolvedTarget, String) {
        match name.and_then(|n| self.0.get(n)) {
            Some(t) => (t, format!(" in {}", t.target.describe())),
            None => (own, String::new()),
        }
    }
}

/// The target cluster as the manifest type sees it.
pub trait TargetClusters: Send + Sync + 'static {
    /// Whether `apiVersion`/`kind` is namespaced (discovery of the target).
    fn namespaced<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        api_version: &'a str,
        kind: &'a str,
    ) -> BoxFut<'a, Result<bool, DeployError>>;
    /// One object (`None`: not found).
    fn get<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        r: &'a ResourceRef,
    ) -> BoxFut<'a, Result<Option<Value>, DeployError>>;
    /// POST.
    fn create<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        object: Value,
    ) -> BoxFut<'a, Result<Value, DeployError>>;
    /// POST, `None` when the object already exists (409).
    fn create_if_absent<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        object: Value,
    ) -> BoxFut<'a, Result<Option<Value>, DeployError>>;
    /// PUT of the whole object.
    fn replace<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        object: Value,
    ) -> BoxFut<'a, Result<Value, DeployError>>;
    /// The objects of a type with `labels` (`k=v,…`), in every namespace.
    fn list<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        api_version: &'a str,
        kind: &'a str,
        labels: &'a str,
    ) -> BoxFut<'a, Result<Vec<Value>, DeployError>>;
    /// DELETE; not found is success.
    fn delete<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        r: &'a ResourceRef,
    ) -> BoxFut<'a, Result<(), DeployError>>;
}

/// The kubernetes-manifest type.
pub struct ManifestType {
    pub targets: Arc<dyn TargetClusters>,
}

pub(crate) fn need_target<'a>(job: &Job<'a>) -> Result<&'a ResolvedTarget, DeployError> {
    job.target.ok_or_else(|| {
        DeployError::config(
            "Reconcile",
            "TargetMissing",
            "spec.target: the kubernetes-manifest type needs a target",
        )
    })
}

/// The condition the type keeps on the item: whether the readiness checks and exports
/// are satisfied, and if not, what it waits for.
const READY_CONDITION: &str = "ManifestsReady";

fn condition(ready: bool, message: &str) -> Value {
    json!({
        "type": READY_CONDITION,
        "status": if ready { "True" } else { "False" },
        "reason": if ready { "Ready" } else { "Waiting" },
        "message": message,
    })
}

impl ManifestType {
    async fn get_named(
        &self,
        target: &ResolvedTarget,
        o: &ObjectName,
    ) -> Result<Option<Value>, DeployError> {
        let namespaced = self
            .targets
            .namespaced(target, &o.api_version, &o.kind)
            .await?;
        let r = ResourceRef {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
            namespace: if namespaced {
                if o.namespace.is_empty() {
                    "default".into()
                } else {
                    o.namespace.clone()
                }
            } else {
                String::new()
            },
            uid: String::new(),
        };
        self.targets.get(target, &r).await
    }

    /// What the readiness checks still wait for (empty: ready).
    pub(crate) async fn not_ready(
        &self,
        target: &ResolvedTarget,
        others: &OtherTargets,
        config: &ManifestConfig,
        managed: &[Managed],
    ) -> Result<Vec<String>, DeployError> {
        let mut waiting = Vec::new();
        if !config.readiness.disable_default {
            // Objects of other kinds are ready as they are: not even read.
            let checked = managed
                .iter()
                .filter(|m| crate::readiness::CHECKED_KINDS.contains(&m.resource.kind.as_str()));
            for m in checked {
                if let Some(live) = self.targets.get(target, &m.resource).await?
                    && let Some(why) = crate::readiness::default_not_ready(&live)
                {
                    waiting.push(format!("{}: {why}", m.resource));
                }
            }
        }
        for check in &config.readiness.custom {
            let (target, within) = others.pick(target, check.target_name.as_deref());
            if let Some(sel) = &check.label_selector {
                let label = format!(
                    "readiness check {:?}: {} with labels {}{within}",
                    check.name,
                    sel.kind,
                    sel.selector()
                );
                let found = self
                    .targets
                    .list(target, &sel.api_version, &sel.kind, &sel.selector())
                    .await?;
                if found.is_empty() {
                    waiting.push(format!("{label}: none found"));
                }
                for live in &found {
                    let name = live["metadata"]["name"].as_str().unwrap_or_default();
                    for r in &check.requirements {
                        if let Some(why) = r.unmet(live) {
                            waiting.push(format!("{label}: {name}: {why}"));
                        }
                    }
                }
            }
            for o in &check.resources {
                let label = format!(
                    "readiness check {:?}: {} {}{within}",
                    check.name, o.kind, o.name
                );
                let Some(live) = self.get_named(target, o).await? else {
                    waiting.push(format!("{label}: not found"));
                    continue;
                };
                for r in &check.requirements {
                    if let Some(why) = r.unmet(&live) {
                        waiting.push(format!("{label}: {why}"));
                    }
                }
            }
        }
        Ok(waiting)
    }

    /// The exports, or what they still wait for. An export without an object reads
    /// `values_root` (the helm type's `.Values`, `.Release`, `.Chart`).
    pub(crate) async fn exports(
        &self,
        target: &ResolvedTarget,
        others: &OtherTargets,
        exports: &[Export],
        values_root: Option<&Value>,
    ) -> Result<Result<Value, Vec<String>>, DeployError> {
        let mut out = json!({});
        let mut waiting = Vec::new();
        for e in exports {
            let Some(from_name) = &e.from else {
                let root = values_root.unwrap_or(&Value::Null);
                match crate::readiness::at(root, &e.json_path)
                    .map_err(|m| config_error(format!("spec.config.exports: {m}")))?
                {
                    Some(v) => crate::readiness::put_export(&mut out, &e.key, v.clone()),
                    None => waiting.push(format!(
                        "export {:?}: nothing at {} of the values",
                        e.key, e.json_path
                    )),
                }
                continue;
            };
            let (target, within) = others.pick(target, e.target_name.as_deref());
            let label = format!(
                "export {:?} from {} {}{within}",
                e.key, from_name.kind, from_name.name
            );
            let Some(from) = self.get_named(target, from_name).await? else {
                waiting.push(format!("{label}: object not found"));
                continue;
            };
            let found = crate::readiness::at(&from, &e.json_path)
                .map_err(|m| config_error(format!("spec.config.exports: {m}")))?
                .cloned();
            let Some(found) = found else {
                waiting.push(format!("{label}: nothing at {}", e.json_path));
                continue;
            };
            let value = match &e.through {
                None => found,
                Some((api, kind, path)) => {
                    let name = found["name"].as_str().unwrap_or_default().to_string();
                    let namespace = found["namespace"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| from_name.namespace.clone());
                    if name.is_empty() {
                        waiting.push(format!(
                            "{label}: {} is not an object reference {{name, namespace}}",
                            e.json_path
                        ));
                        continue;
                    }
                    let referred = ObjectName {
                        api_version: api.clone(),
                        kind: kind.clone(),
                        name,
                        namespace,
                    };
                    let Some(obj) = self.get_named(target, &referred).await? else {
                        waiting.push(format!(
                            "{label}: referenced {} {} not found",
                            referred.kind, referred.name
                        ));
                        continue;
                    };
                    match crate::readiness::at(&obj, path)
                        .map_err(|m| config_error(format!("spec.config.exports: {m}")))?
                    {
                        Some(v) => v.clone(),
                        None => {
                            waiting.push(format!(
                                "{label}: nothing at {path} of {kind} {}",
                                referred.name
                            ));
                            continue;
                        }
                    }
                }
            };
            crate::readiness::put_export(&mut out, &e.key, value);
        }
        Ok(if waiting.is_empty() {
            Ok(out)
        } else {
            Err(waiting)
        })
    }

    /// Writes `object` over `live` unless nothing would change.
    async fn write_over(
        &self,
        target: &ResolvedTarget,
        live: Value,
        mut object: Value,
    ) -> Result<Value, DeployError> {
        if contained_ignoring_version(&object, &live) {
            return Ok(live);
        }
        object["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"].clone();
        self.targets.replace(target, object).await
    }

    /// Annotates and patches an object as its manifest asks, then deletes it.
    async fn delete_managed(
        &self,
        target: &ResolvedTarget,
        m: &Managed,
    ) -> Result<(), DeployError> {
        if (!m.annotate_before_delete.is_empty() || m.patch_before_delete.is_some())
            && let Some(live) = self.targets.get(target, &m.resource).await?
        {
            let mut object = live.clone();
            for (k, v) in &m.annotate_before_delete {
                object["metadata"]["annotations"][k] = v.clone();
            }
            if let Some(p) = &m.patch_before_delete {
                crate::readiness::deep_merge(&mut object, p, true);
            }
            self.write_over(target, live, object).await?;
        }
        self.targets.delete(target, &m.resource).await
    }

    /// Deletes `list` group by group: configured groups in their order, each waited for
    /// until its objects are gone (bounded by the item's timeout) and stripped of
    /// finalizers if it forces; then what no group selected, in the default order
    /// (namespaced, cluster-scoped, CRDs), each waited for before the next.
    async fn delete_in_groups(
        &self,
        target: &ResolvedTarget,
        list: &[&Managed],
        groups: Option<&[crate::deletion::Group]>,
        job: &Job<'_>,
    ) -> Result<(), DeployError> {
        // deleteAllResources: every object of the group's types in the target (the group's
        // `targetName`, else the item's) joins in.
        let others = OtherTargets::of_groups(job, groups).await?;
        let mut extra: Vec<(Managed, Option<&str>)> = Vec::new();
        for g in groups.unwrap_or(&[]).iter().filter(|g| g.delete_all) {
            let crate::deletion::Select::Custom(types) = &g.select else {
                continue;
            };
            let in_target = g.target_name.as_deref();
            let (group_target, _) = others.pick(target, in_target);
            for t in types {
                for live in self
                    .targets
                    .list(group_target, &t.api_version, &t.kind, "")
                    .await?
                {
                    let mut resource = ResourceRef::of(&live);
                    resource.api_version = t.api_version.clone();
                    resource.kind = t.kind.clone();
                    let managed = in_target.is_none()
                        && list.iter().any(|m| m.resource.id() == resource.id());
                    let known = managed
                        || extra
                            .iter()
                            .any(|(m, at)| *at == in_target && m.resource.id() == resource.id());
                    // Only what the group selects (its names and namespaces): anything
                    // else would fall to the default order and be deleted too.
                    let selected = g.selects(&crate::deletion::Candidate {
                        target: in_target,
                        api_version: &resource.api_version,
                        kind: &resource.kind,
                        name: &resource.name,
                        namespace: &resource.namespace,
                    });
                    if selected && !known && live["metadata"]["deletionTimestamp"].is_null() {
                        extra.push((
                            Managed {
                                policy: Policy::Manage,
                                resource,
                                annotate_before_delete: Map::new(),
                                patch_before_delete: None,
                            },
                            in_target,
                        ));
                    }
                }
            }
        }
        // Each object with the Target it is in (`None`: the item's).
        let list: Vec<(&Managed, Option<&str>)> = list
            .iter()
            .map(|m| (*m, None))
            .chain(extra.iter().map(|(m, at)| (m, *at)))
            .collect();
        let list = list.as_slice();
        if list.is_empty() {
            return Ok(());
        }
        let in_target = |i: usize| others.pick(target, list[i].1).0;
        let candidates: Vec<crate::deletion::Candidate<'_>> = list
            .iter()
            .map(|(m, at)| crate::deletion::Candidate {
                target: *at,
                api_version: &m.resource.api_version,
                kind: &m.resource.kind,
                name: &m.resource.name,
                namespace: &m.resource.namespace,
            })
            .collect();
        let configured = groups.is_some();
        let steps = crate::deletion::plan(groups.unwrap_or(&[]), &candidates);
        let deadline = job.remaining.map(|r| tokio::time::Instant::now() + r);
        let last = steps.len().saturating_sub(1);
        for (n, step) in steps.into_iter().enumerate() {
            for &i in &step.indices {
                let (m, at) = (list[i].0, in_target(i));
                self.delete_managed(at, m).await?;
                if step.force
                    && let Some(mut live) = self.targets.get(at, &m.resource).await?
                    && live["metadata"]["finalizers"]
                        .as_array()
                        .is_some_and(|f| !f.is_empty())
                {
                    live["metadata"]["finalizers"] = json!([]);
                    self.targets.replace(at, live).await?;
                }
            }
            // The next group starts once this one is gone (landscaper's 1 s polls). In the
            // default order the last group is not waited for: a Namespace can stay
            // `Terminating` long after the item let it go.
            if !configured && n == last {
                continue;
            }
            loop {
                let mut left = Vec::new();
                for &i in &step.indices {
                    let resource = &list[i].0.resource;
                    if self
                        .targets
                        .get(in_target(i), resource)
                        .await?
                        .is_some_and(|live| resource.is_this(&live))
                    {
                        left.push(resource.to_string());
                    }
                }
                if left.is_empty() {
                    break;
                }
                if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                    return Err(DeployError::new(
                        "DeleteGroup",
                        "WaitingForDeletion",
                        format!("still there at the timeout: {}", left.join(", ")),
                        &[crate::item::ErrorCode::Timeout],
                    ));
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
        Ok(())
    }

    async fn apply(&self, job: &Job<'_>) -> Result<Outcome, DeployError> {
        let target = need_target(job)?;
        let config = ManifestConfig::parse(job.item.config().unwrap_or(&Value::Null))?;
        self.apply_config(job, target, &config, &MANIFEST_FLAVOR, None)
            .await
    }

    /// Applies `config`'s manifests, removes the orphans, then waits for readiness and
    /// exports (`values_root`: what an export without an object reads): the whole of a
    /// reconcile once the configuration is read.
    pub(crate) async fn apply_config(
        &self,
        job: &Job<'_>,
        target: &ResolvedTarget,
        config: &ManifestConfig,
        flavor: &Flavor,
        values_root: Option<&Value>,
    ) -> Result<Outcome, DeployError> {
        check_status_fits(&job.item.object, config)?;
        let before = managed_of(job.item.status.provider_status.as_ref());
        let mut scoped = Vec::new();
        for m in &config.manifests {
            if m.policy == Policy::Ignore {
                continue;
            }
            let api = m.object["apiVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let kind = m.object["kind"].as_str().unwrap_or_default().to_string();
            let namespaced = self.targets.namespaced(target, &api, &kind).await?;
            scoped.push((m.clone(), namespaced));
        }
        let mut managed = Vec::new();
        let mut after_deployment = Vec::new();
        for i in order(&scoped) {
            let (m, namespaced) = &scoped[i];
            let mut object = m.object.clone();
            if *namespaced
                && object["metadata"]["namespace"]
                    .as_str()
                    .is_none_or(str::is_empty)
            {
                object["metadata"]["namespace"] = json!(flavor.default_namespace);
            }
            if !*namespaced && let Some(meta) = object["metadata"].as_object_mut() {
                meta.remove("namespace");
            }
            object["metadata"]["labels"][flavor.label] = json!(job.item.key.name);
            let r = ResourceRef::of(&object);
            // An object this item never applied is most likely new: POST first and read it
            // only if it exists (one request instead of two); one it applied before is
            // read first.
            let known = before.iter().any(|b| b.resource.id() == r.id());
            let created = if known {
                None
            } else {
                let mut new = object.clone();
                for (k, v) in &m.annotate_before_create {
                    new["metadata"]["annotations"][k] = v.clone();
                }
                self.targets.create_if_absent(target, new).await?
            };
            let live = match created {
                Some(_) => None,
                None => self.targets.get(target, &r).await?,
            };
            let written = match (created, live) {
                (Some(written), _) => written,
                (None, None) => {
                    for (k, v) in &m.annotate_before_create {
                        object["metadata"]["annotations"][k] = v.clone();
                    }
                    self.targets.create(target, object).await?
                }
                (None, Some(live)) => {
                    // `fallback` takes over nothing: an object this item's label does not
                    // name (another item's, or nobody's) is left as it is, and not managed
                    // (landscaper's objectapplier.go).
                    let owner = live["metadata"]["labels"][flavor.label].as_str();
                    if m.policy == Policy::Fallback && owner != Some(job.item.key.name.as_str()) {
                        continue;
                    }
                    if m.policy == Policy::Immutable {
                        live
                    } else {
                        let updated = config.update_strategy.updated(&live, &object);
                        self.write_over(target, live, updated).await?
                    }
                }
            };
            let resource = ResourceRef::of(&written);
            if let Some(p) = &m.patch_after_deployment {
                after_deployment.push((resource.clone(), p.clone()));
            }
            managed.push(Managed {
                policy: m.policy,
                resource,
                annotate_before_delete: m.annotate_before_delete.clone(),
                patch_before_delete: m.patch_before_delete.clone(),
            });
        }
        let gone = orphans(&before, &managed);
        let gone = self.ours(target, gone.iter(), flavor, job).await?;
        self.delete_in_groups(
            target,
            &gone,
            config.deletion_groups_during_update.as_deref(),
            job,
        )
        .await?;
        let provider_status = json!({
            "apiVersion": flavor.provider_api,
            "kind": "ProviderStatus",
            "managedResources": managed,
        });
        self.conclude(
            job,
            config,
            &managed,
            provider_status,
            &after_deployment,
            values_root,
        )
        .await
    }

    /// After the objects are written: `Progressing` while a readiness check or an export
    /// waits, else the exports, `patchAfterDeployment`, and `Succeeded`.
    pub(crate) async fn conclude(
        &self,
        job: &Job<'_>,
        config: &ManifestConfig,
        managed: &[Managed],
        provider_status: Value,
        after_deployment: &[(ResourceRef, Value)],
        values_root: Option<&Value>,
    ) -> Result<Outcome, DeployError> {
        let progressing = |waiting: Vec<String>| Outcome {
            phase: crate::item::Phase::Progressing,
            provider_status: Some(provider_status.clone()),
            export: None,
            conditions: vec![condition(false, &waiting.join("; "))],
        };
        let target = need_target(job)?;
        let others = OtherTargets::resolve(job, config).await?;
        let waiting = self.not_ready(target, &others, config, managed).await?;
        if !waiting.is_empty() {
            return Ok(progressing(waiting));
        }
        let export = if config.exports.is_empty() {
            None
        } else {
            match self
                .exports(target, &others, &config.exports, values_root)
                .await?
            {
                Ok(v) => Some(v),
                Err(waiting) => return Ok(progressing(waiting)),
            }
        };
        for (r, patch) in after_deployment {
            if let Some(live) = self.targets.get(target, r).await? {
                let mut object = live.clone();
                crate::readiness::deep_merge(&mut object, patch, true);
                self.write_over(target, live, object).await?;
            }
        }
        Ok(Outcome {
            phase: crate::item::Phase::Succeeded,
            provider_status: Some(provider_status),
            export,
            conditions: vec![condition(true, "every readiness check passed")],
        })
    }

    async fn remove(&self, job: &Job<'_>) -> Result<(), DeployError> {
        // A configuration that no longer parses still lets the item go, in the default order.
        let groups = ManifestConfig::parse(job.item.config().unwrap_or(&Value::Null))
            .ok()
            .and_then(|c| c.deletion_groups);
        self.remove_managed(job, groups.as_deref(), &MANIFEST_FLAVOR)
            .await
    }

    /// Deletes what the item's ProviderStatus says it manages, in `groups`.
    pub(crate) async fn remove_managed(
        &self,
        job: &Job<'_>,
        groups: Option<&[crate::deletion::Group]>,
        flavor: &Flavor,
    ) -> Result<(), DeployError> {
        let managed = managed_of(job.item.status.provider_status.as_ref());
        if managed.is_empty() {
            return Ok(());
        }
        let target = need_target(job)?;
        let ours = self
            .ours(
                target,
                managed.iter().filter(|m| m.policy.deletes()),
                flavor,
                job,
            )
            .await?;
        self.delete_in_groups(target, &ours, groups, job).await?;
        Ok(())
    }

    /// Of `list`, what this item may delete: a `fallback` object only while it carries
    /// this item's label (relabelled to another item, or gone, it is left alone), as
    /// landscaper's `ShouldDeleteManagedResource`.
    async fn ours<'m>(
        &self,
        target: &ResolvedTarget,
        list: impl Iterator<Item = &'m Managed>,
        flavor: &Flavor,
        job: &Job<'_>,
    ) -> Result<Vec<&'m Managed>, DeployError> {
        let mut ours = Vec::new();
        for m in list {
            if m.policy == Policy::Fallback {
                let owned = self
                    .targets
                    .get(target, &m.resource)
                    .await?
                    .is_some_and(|live| {
                        live["metadata"]["labels"][flavor.label].as_str()
                            == Some(job.item.key.name.as_str())
                    });
                if !owned {
                    continue;
                }
            }
            ours.push(m);
        }
        Ok(ours)
    }
}

/// What differs between the types that apply objects themselves: the label on the
/// objects, the ProviderStatus's apiVersion, and the namespace of an object that names
/// none.
pub(crate) struct Flavor {
    pub label: &'static str,
    pub provider_api: &'static str,
    pub default_namespace: String,
}

// A constant built once (its `String` cannot be made in a `const`); never written.
static MANIFEST_FLAVOR: std::sync::LazyLock<Flavor> = std::sync::LazyLock::new(|| Flavor {
    label: DEPLOYITEM_LABEL,
    provider_api: API_V1ALPHA2,
    default_namespace: "default".into(),
});

/// Whether writing `object` over `live` would change nothing (the resourceVersion aside).
fn contained_ignoring_version(object: &Value, live: &Value) -> bool {
    let mut o = object.clone();
    if let Some(meta) = o["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
    }
    crate::readiness::contained(&o, live)
}

impl DeployerType for ManifestType {
    fn name(&self) -> &str {
        MANIFEST_TYPE
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
    fn an_item_s_size_is_counted_as_its_json_without_copying_it() {
        let item = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "é\"q"},
                          "status": {"phase": "Succeeded"}, "spec": {"a": [1, 2.5, null]}});
        let len = serde_json::to_vec(&item).expect("json").len();
        assert_eq!(json_len(&item), len);
        let mut without = item.clone();
        without.as_object_mut().expect("object").remove("status");
        let without_len = serde_json::to_vec(&without).expect("json").len();
        let counted = len - json_len(&item["status"]) - r#","status":"#.len();
        assert_eq!(counted, without_len);
    }

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
    }

    #[test]
    fn configs_of_both_versions_parse_and_errors_name_the_field() {
        let c = ManifestConfig::parse(
            &json!({"apiVersion": API_V1ALPHA2, "kind": "ProviderConfiguration",
            "manifests": [{"policy": "keep", "manifest": cm("a")}, {"manifest": cm("b")}]}),
        )
        .expect("v1alpha2");
        assert_eq!(
            c.manifests.iter().map(|m| m.policy).collect::<Vec<_>>(),
            [Policy::Keep, Policy::Manage]
        );
        let c = ManifestConfig::parse(&json!({"apiVersion": API_V1ALPHA1, "kind": "ProviderConfiguration", "manifests": [cm("a")]}))
            .expect("v1alpha1");
        assert_eq!(c.manifests[0].object["metadata"]["name"], "a");
        let bad = |c: Value| ManifestConfig::parse(&c).unwrap_err().message;
        assert!(bad(json!({"apiVersion": API_V1ALPHA2, "kind": "ProviderConfiguration", "manifests": [{"policy": "sometimes", "manifest": cm("a")}]}))
            .starts_with("spec.config.manifests[0].policy: unknown policy \"sometimes\""));
        assert!(bad(json!({"apiVersion": API_V1ALPHA2, "kind": "ProviderConfiguration", "manifests": [{"manifest": {"kind": "ConfigMap"}}]}))
            .starts_with("spec.config.manifests[0].manifest.apiVersion: missing"));
        assert!(
            bad(json!({"apiVersion": "v1", "kind": "ProviderConfiguration"}))
                .starts_with("spec.config.apiVersion")
        );
        assert!(
            bad(json!({"apiVersion": API_V1ALPHA2, "kind": "Configuration"}))
                .starts_with("spec.config.kind")
        );
        assert!(bad(json!({"apiVersion": API_V1ALPHA2, "kind": "ProviderConfiguration", "updateStrategy": "replace"})).contains("spec.config.updateStrategy: unknown strategy"));
    }

    #[test]
    fn crds_then_cluster_scoped_then_namespaced() {
        let m = |kind: &str| Manifest {
            policy: Policy::Manage,
            object: json!({"kind": kind}),
            ..Manifest::default()
        };
        let list = vec![
            (m("ConfigMap"), true),
            (m("Namespace"), false),
            (m("CustomResourceDefinition"), false),
            (m("Secret"), true),
        ];
        assert_eq!(order(&list), [2, 1, 0, 3]);
    }

    #[test]
    fn an_object_made_again_under_the_same_name_is_not_the_deleted_one() {
        let deleted = ResourceRef::of(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt", "namespace": "x", "uid": "u1"}}));
        let same = json!({"metadata": {"name": "kube-root-ca.crt", "uid": "u1"}});
        let again = json!({"metadata": {"name": "kube-root-ca.crt", "uid": "u2"}});
        assert!(deleted.is_this(&same));
        assert!(!deleted.is_this(&again));
        let unknown_uid = ResourceRef {
            uid: String::new(),
            ..deleted
        };
        assert!(
            unknown_uid.is_this(&again),
            "without a uid, the name decides"
        );
    }

    #[test]
    fn orphans_are_what_was_managed_and_is_gone_and_kept_ones_stay() {
        let r = |name: &str| ResourceRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: name.into(),
            namespace: "ns".into(),
            uid: format!("u-{name}"),
        };
        let before = vec![
            Managed {
                annotate_before_delete: Map::new(),
                patch_before_delete: None,
                policy: Policy::Manage,
                resource: r("a"),
            },
            Managed {
                annotate_before_delete: Map::new(),
                patch_before_delete: None,
                policy: Policy::Manage,
                resource: r("b"),
            },
            Managed {
                annotate_before_delete: Map::new(),
                patch_before_delete: None,
                policy: Policy::Keep,
                resource: r("c"),
            },
        ];
        let mut a = r("a");
        a.uid = "other-uid".into();
        let now = vec![Managed {
            annotate_before_delete: Map::new(),
            patch_before_delete: None,
            policy: Policy::Manage,
            resource: a,
        }];
        let gone: Vec<String> = orphans(&before, &now)
            .iter()
            .map(|m| m.resource.name.clone())
            .collect();
        assert_eq!(gone, ["b"]);
    }
}
