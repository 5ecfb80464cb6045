//! Kubernetes access shared by hooks and the object patcher: resolving the loose kind names
//! hooks write (`po`, `deploy`, `Deployment`) through discovery, executing the object
//! patcher operations hooks write to `KUBERNETES_PATCH_PATH`, the client's metrics, and
//! where the client's configuration comes from (`in_cluster.rs`: a kubeconfig or the pod's
//! service account, and a clear error when the API server refuses the credentials), and
//! requests with plain JSON bodies (`raw.rs`). Shared by every subsystem: the one mapping
//! of the client's errors to the ports' `ClusterError` (`errors.rs`) and the one Event
//! recorder, which counts repeated Events as client-go does (`events.rs`).

pub mod crds;
pub mod errors;
pub mod events;
pub mod in_cluster;
pub mod limiter;
pub mod metrics;
pub mod patcher;
pub mod raw;
pub mod resolve;

pub use errors::cluster_error;
pub use events::{EventLimits, EventRecorder};
pub use limiter::ClientLimits;
pub use metrics::{KubeMetricsLayer, measured_client, url_template};
pub use patcher::{KubePatcher, OperationError, PatchError};
pub use resolve::{KindResolver, ResolveError, Resolved};
