//! bosun's one Kubernetes layer, shared by every subsystem (the addon's modules, the
//! lambda controllers, the deployer) and depending on none of them.
//!
//! ```text
//!   in_cluster ──► kube::Config ──► measured_client(limits)      one client per purpose,
//!                                    │ metrics (client-go's)      each with client-go's
//!                                    │ limiter (QPS / burst)      QPS/burst token bucket
//!                                    ▼
//!   resolve (kinds via discovery)   raw (JSON requests, server-side apply)
//!   watch (shared watches) ──► informer (cache + own-writes overlay + indexes)
//!   events (one recorder, counts repeats as client-go)   errors (one ClusterError mapping)
//!   crds (installs missing CRDs)    http_client (webhooks, chart downloads: one TLS builder)
//! ```
//!
//! - `in_cluster`: where the client's configuration comes from (a kubeconfig or the pod's
//!   service account, and a clear error when the API server refuses the credentials);
//! - `metrics` and `limiter`: the client's request metrics and its QPS/burst limiter;
//! - `resolve`: the loose kind names hooks and bindings write (`po`, `deploy`,
//!   `Deployment`) resolved through discovery;
//! - `raw`: requests with plain JSON bodies, no typed round trips;
//! - `watch`: one watcher per distinct resource and selectors, shared by every listener;
//! - `informer`: a cache of one shared watch with this process's own writes visible
//!   before their watch events (one resourceVersion rule: [`watch::supersedes`]);
//! - `events`: the one Event recorder;
//! - `errors`: the one mapping of the client's errors to the ports' `ClusterError`;
//! - `crds`: installing the CRDs a subsystem needs;
//! - `http_client`: the one HTTP(S) client builder.

mod compact;
pub mod crds;
pub mod errors;
pub mod events;
pub mod http_client;
pub mod in_cluster;
pub mod informer;
pub mod limiter;
pub mod metrics;
pub mod raw;
pub mod resolve;
pub mod watch;

/// How kube-apiserver stores a Secret's `stringData` (written once, in bosun-platform, for
/// the sandbox too).
pub use bosun_platform::fold_string_data;
pub use errors::{cluster_error, port_error};
pub use events::{EventLimits, EventRecorder};
pub use limiter::ClientLimits;
pub use metrics::{KubeMetricsLayer, measured_client, url_template};
pub use resolve::{KindResolver, ResolveError, Resolved};
pub use watch::WatchManager;
