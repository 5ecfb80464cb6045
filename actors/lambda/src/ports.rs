//! What the lambda controllers need from the world: the cluster (an informer cache and
//! writes) and the webhooks. Implemented in the binary (`src/lambda/`).

use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

pub use bosun_runtime::ports::BoxFut;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::keys::{name_of, namespace_of};
use crate::types::{ControllerKind, EndpointConfig, Hook};

/// A resource the cluster serves, resolved from `apiVersion` + plural by discovery.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Resource {
    /// As written in the rule: `group/version` or `version`.
    pub api_version: String,
    pub group: String,
    pub version: String,
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
    /// Whether the resource has a `/status` subresource.
    pub status_subresource: bool,
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.api_version, self.plural)
    }
}

/// A failed cluster call (the runtime's, shared by every subsystem).
pub use bosun_runtime::ports::ClusterError;

/// An Event to record on an object.
#[derive(Clone, Debug, PartialEq)]
pub struct EventNote {
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    pub reason: String,
    pub message: String,
}

/// Where an object is: its namespace (empty when cluster-scoped) and its name.
pub type ObjectKey = (Arc<str>, Arc<str>);

/// The cluster as the lambda controllers see it: reads from the shared informer caches,
/// writes through the API server.
pub trait Cluster: Send + Sync + 'static {
    /// Resolves `apiVersion` + plural through discovery.
    fn resolve(
        &self,
        api_version: &str,
        plural: &str,
    ) -> BoxFut<'_, Result<Resource, ClusterError>>;
    /// Objects of `resource` in the informer cache (in `namespace`, or all). Starts the
    /// shared watch on first use and waits for its first list.
    fn list(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
    ) -> BoxFut<'_, Result<Vec<Arc<Value>>, ClusterError>>;
    /// The heads of [`Cluster::list`]'s objects: `apiVersion`, `kind` and `metadata`
    /// without `managedFields`, enough for a parent's key and whether a controller wants
    /// it (a resync enqueues every parent by them), cheaper to read than whole objects.
    fn list_heads(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
    ) -> BoxFut<'_, Result<Vec<Arc<Value>>, ClusterError>> {
        self.list(resource, namespace)
    }
    /// The keys of [`Cluster::list`]'s objects, without reading them.
    fn keys(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
    ) -> BoxFut<'_, Result<Vec<ObjectKey>, ClusterError>> {
        let listed = self.list(resource, namespace);
        Box::pin(async move {
            Ok(listed
                .await?
                .iter()
                .map(|o| (namespace_of(o).into(), name_of(o).into()))
                .collect())
        })
    }
    /// Objects of `resource` controlled by `owner_uid` or by nobody (in `namespace`, or
    /// all), from the informer cache's owner index: the candidates of a claim pass, found
    /// without scanning every object of the resource.
    fn candidates(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        owner_uid: &str,
    ) -> BoxFut<'_, Result<Vec<Arc<Value>>, ClusterError>>;
    /// How many changes the informer cache of `resource` has seen: the same count means
    /// the same objects. `None` when the resource has no informer (nothing to compare).
    fn changes(&self, _resource: &Resource) -> Option<u64> {
        None
    }
    /// The compact JSON text the informer cache keeps of an object, shared (a request
    /// body kept for a settled parent refers to it instead of copying it). `None` when
    /// the cache keeps no text of it.
    fn cached_text(&self, _resource: &Resource, _namespace: &str, _name: &str) -> Option<Arc<str>> {
        None
    }
    /// One object from the informer cache.
    fn cached(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Arc<Value>>, ClusterError>>;
    /// One object read from the API server (not the cache).
    fn get(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Value, ClusterError>>;
    /// POST.
    fn create(&self, resource: &Resource, object: Value)
    -> BoxFut<'_, Result<Value, ClusterError>>;
    /// PUT of the whole object.
    fn replace(
        &self,
        resource: &Resource,
        object: Value,
    ) -> BoxFut<'_, Result<Value, ClusterError>>;
    /// PUT of `/status`.
    fn replace_status(
        &self,
        resource: &Resource,
        object: Value,
    ) -> BoxFut<'_, Result<Value, ClusterError>>;
    /// Server-side apply (`application/apply-patch+yaml`, force, field manager).
    fn apply(
        &self,
        resource: &Resource,
        object: Value,
        dry_run: bool,
    ) -> BoxFut<'_, Result<Value, ClusterError>>;
    /// DELETE with a uid precondition and background propagation; NotFound is success.
    fn delete(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> BoxFut<'_, Result<(), ClusterError>>;
    /// Records an Event on `object` (rate-limited by the adapter).
    fn event(&self, object: &Value, note: EventNote) -> BoxFut<'_, ()>;
}

/// Which hook of a controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookType {
    Sync,
    Finalize,
    Customize,
}

impl HookType {
    pub fn as_str(self) -> &'static str {
        match self {
            HookType::Sync => "sync",
            HookType::Finalize => "finalize",
            HookType::Customize => "customize",
        }
    }
}

impl std::fmt::Display for HookType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed webhook call.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum HookError {
    /// The webhook answered 429: retry after the given delay, without backoff.
    #[error("{hook} hook {url}: too many requests, retry after {retry_after:?}")]
    TooManyRequests {
        hook: HookType,
        url: String,
        retry_after: Duration,
    },
    /// Any status other than 200 (and 304/412 with ETags).
    #[error("{hook} hook {url}: unsupported status code: {code} body: {body}")]
    Status {
        hook: HookType,
        url: String,
        code: u16,
        body: String,
    },
    /// Connection refused, DNS, TLS, timeout, …
    #[error("{hook} hook {url}: http error: {message}")]
    Transport {
        hook: HookType,
        url: String,
        message: String,
    },
    /// The webhook's settings cannot be used (URL, CA, credentials).
    #[error("{hook} hook: {message}")]
    Config { hook: HookType, message: String },
}

/// One controller's hook, ready to call: the URL resolved, TLS and credentials loaded.
pub trait HookClient: Send + Sync + 'static {
    /// The URL (for metrics and messages).
    fn url(&self) -> &str;
    /// POSTs `body`; returns the response body. `cache_key` (kind/namespace/name of the
    /// root object) keys the ETag cache when the webhook enables it. Both bodies are
    /// shared buffers: a settled parent's request is sent again without a copy.
    fn call(&self, body: Bytes, cache_key: String) -> BoxFut<'_, Result<Bytes, HookError>>;
}

/// What a controller needs to build its hook clients.
#[derive(Clone, Debug)]
pub struct HookSpec {
    pub controller: String,
    pub controller_kind: ControllerKind,
    pub hook_type: HookType,
    pub hook: Hook,
    pub endpoint_configs: Vec<EndpointConfig>,
}

/// Builds hook clients when a controller starts (credentials are read then, as upstream).
pub trait HookFactory: Send + Sync + 'static {
    fn client(&self, spec: HookSpec) -> BoxFut<'_, Result<Arc<dyn HookClient>, HookError>>;
}

/// A change seen by a shared watch.
#[derive(Clone, Debug)]
pub enum Change {
    /// Added or modified; `old` is the previous state when the watch had one.
    Applied {
        old: Option<Arc<Value>>,
        new: Arc<Value>,
    },
    /// Deleted (its last known state).
    Deleted(Arc<Value>),
}

/// Subscribing to a resource's shared watch.
pub trait Watches: Send + Sync + 'static {
    /// Changes of `resource` from now on (after its first list, which `Cluster::list`
    /// then serves). Dropping the receiver unsubscribes.
    fn watch(
        &self,
        resource: &Resource,
    ) -> BoxFut<'_, Result<tokio::sync::mpsc::UnboundedReceiver<Change>, ClusterError>>;
}
