//! What the deployer needs from the world: the cluster its DeployItems, Targets, Secrets
//! and Contexts live in, and the deployer types that do the work. Implemented in the
//! binary (`src/deployer/`); [`crate::fakes`] holds in-memory versions for tests.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use bosun_runtime::ports::BoxFut;
use serde_json::Value;

use crate::item::{DeployItem, ItemKey, ObjectRef, Phase, WithStatus};
use crate::status::DeployError;
use crate::target::ResolvedTarget;

/// A Secret's `data`, decoded.
pub type SecretData = BTreeMap<String, Vec<u8>>;

/// The name of a new export Secret of the item `item_name`: `<item>-export`, as
/// landscaper's deployer library names it (`CreateOrUpdateExport`).
pub fn export_secret_name(item_name: &str) -> String {
    format!("{item_name}-export")
}

/// A failed cluster call (the runtime's, shared by every subsystem).
pub use bosun_runtime::ports::ClusterError;

/// An Event to record on an item.
#[derive(Clone, Debug, PartialEq)]
pub struct EventNote {
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    pub reason: String,
    pub message: String,
}

/// A change the deployer reacts to.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A DeployItem was added, changed or deleted; `type_` is its deployer type as the
    /// metadata tells (annotation, else spec.type), for the cheap filter.
    /// `resource_version`: the object's, empty for a deletion (so that it never passes
    /// for the deployer's own write).
    Item {
        key: ItemKey,
        type_: String,
        resource_version: String,
    },
    /// A Target (or the Secret it points to) changed: its items are looked at again.
    Target { namespace: String, name: String },
    /// A pod of this deployer's namespace was deleted (watched only with per-item locks):
    /// the items whose lock it held are looked at again at once, not a minute later.
    PodGone { name: String },
}

/// The cluster as the deployer sees it.
pub trait Cluster: Send + Sync + 'static {
    /// Changes of DeployItems and Targets from now on, after every existing item once.
    fn watch(
        &self,
    ) -> BoxFut<'_, Result<tokio::sync::mpsc::UnboundedReceiver<Change>, ClusterError>>;
    /// The DeployItems of `namespace` in the informer cache.
    fn cached_items(&self, namespace: &str) -> Vec<Arc<Value>>;
    /// A DeployItem as last known: the informer's copy, or this deployer's own later write
    /// of it; the API server when the watch has not brought it yet. A copy older than the
    /// API server's ends in a conflict on the next write, and that item's run is retried.
    fn get_item(&self, key: &ItemKey) -> BoxFut<'_, Result<Option<Value>, ClusterError>>;
    /// A DeployItem read from the API server, not the cache (after taking its lock,
    /// another replica may just have written it).
    fn read_item(&self, key: &ItemKey) -> BoxFut<'_, Result<Option<Value>, ClusterError>>;
    /// PUT of the whole item (annotations, finalizers).
    fn update_item(&self, object: Value) -> BoxFut<'_, Result<Value, ClusterError>>;
    /// PUT of the item's `/status`.
    fn update_status<'a>(&'a self, item: WithStatus<'a>)
    -> BoxFut<'a, Result<Value, ClusterError>>;
    /// A Target: the informer's copy, else the API server's.
    fn get_target(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Value>, ClusterError>>;
    /// A Secret's data, decoded.
    fn get_secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<SecretData>, ClusterError>>;
    /// A Context.
    fn get_context(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Value>, ClusterError>>;
    /// A ConfigMap (a Context's `ocmConfig`); the fakes have none.
    fn get_config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFut<'a, Result<Option<Value>, ClusterError>> {
        let _ = (namespace, name);
        Box::pin(async { Ok(None) })
    }
    /// Writes the export Secret of `item` (key `config`, owned by the item): the one of
    /// `existing`, else `<item>-export` ([`export_secret_name`]), created or replaced.
    fn write_export(
        &self,
        item: &Value,
        existing: Option<ObjectRef>,
        exports: &Value,
    ) -> BoxFut<'_, Result<ObjectRef, ClusterError>>;
    /// Deletes a Secret; NotFound is success.
    fn delete_secret(&self, namespace: &str, name: &str) -> BoxFut<'_, Result<(), ClusterError>>;
    /// Records an Event on `item`.
    fn event(&self, item: &Value, note: EventNote) -> BoxFut<'_, ()>;
    /// Takes `item`'s SyncObject for `holder` ([`crate::lock`]): created when missing,
    /// kept when ours, taken over when free or its holder pod is gone.
    fn lock_item<'a>(
        &'a self,
        item: &'a Value,
        prefix: &'a str,
        holder: &'a str,
    ) -> BoxFut<'a, Result<crate::lock::Found, ClusterError>>;
    /// Frees `item`'s SyncObject if `holder` holds it.
    fn unlock_item<'a>(
        &'a self,
        item: &'a Value,
        prefix: &'a str,
        holder: &'a str,
    ) -> BoxFut<'a, Result<(), ClusterError>>;
    /// A token of service account `name` in `namespace` of the items' cluster (a
    /// TokenRequest), for targets with `selfConfig` or `oidcConfig`; reused while most of
    /// its lifetime is left.
    fn service_account_token<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        audiences: &'a [String],
        expiration_seconds: u64,
    ) -> BoxFut<'a, Result<String, ClusterError>> {
        let _ = (audiences, expiration_seconds);
        Box::pin(async move {
            Err(ClusterError::Other {
                what: format!("ServiceAccount {namespace}/{name}"),
                message: "this cluster port issues no tokens".into(),
            })
        })
    }
    /// The items' cluster as bosun reaches it: its server URL and CA (base64 of PEM), for
    /// `selfConfig` targets.
    fn resource_cluster(&self) -> Option<(String, Option<String>)> {
        None
    }
}

/// One run of a type on one item.
#[derive(Clone)]
pub struct Job<'a> {
    pub item: &'a DeployItem,
    pub target: Option<&'a ResolvedTarget>,
    /// `force-reconcile`.
    pub force: bool,
    /// Time left before the item's timeout (`None`: no timeout).
    pub remaining: Option<Duration>,
    /// The items' cluster, for what a type reads beside the item (its Context, Secrets).
    pub cluster: &'a dyn Cluster,
}

/// What a reconcile of a type ended with.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// `Succeeded`, or a phase that is not final to be looked at again in 5 s.
    pub phase: Phase,
    /// Written to `status.providerStatus`.
    pub provider_status: Option<Value>,
    /// Written to the export Secret (`status.exportRef`).
    pub export: Option<Value>,
    /// Written to `status.conditions` (by type).
    pub conditions: Vec<Value>,
}

/// A deployer type (`spec.type`): mock, kubernetes-manifest, helm, …
pub trait DeployerType: Send + Sync + 'static {
    /// The `spec.type` it serves.
    fn name(&self) -> &str;
    /// Applies the item.
    fn reconcile<'a>(&'a self, job: Job<'a>) -> BoxFut<'a, Result<Outcome, DeployError>>;
    /// Removes what the item applied.
    fn delete<'a>(&'a self, job: Job<'a>) -> BoxFut<'a, Result<(), DeployError>>;
    /// Stops a run gracefully (`operation: abort`).
    fn abort<'a>(&'a self, job: Job<'a>) -> BoxFut<'a, ()>;
}
