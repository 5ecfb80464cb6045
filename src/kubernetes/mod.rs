//! Kubernetes access shared by hooks and the object patcher: resolving the loose kind names
//! hooks write (`po`, `deploy`, `Deployment`) through discovery, executing the object
//! patcher operations hooks write to `KUBERNETES_PATCH_PATH`, and the client's metrics.

pub mod crds;
pub mod metrics;
pub mod patcher;
pub mod resolve;

pub use metrics::{KubeMetricsLayer, measured_client, url_template};
pub use patcher::{KubePatcher, OperationError, PatchError};
pub use resolve::{KindResolver, ResolveError, Resolved};
