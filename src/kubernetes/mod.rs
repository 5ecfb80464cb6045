//! Kubernetes access shared by hooks and the object patcher: resolving the loose kind names
//! hooks write (`po`, `deploy`, `Deployment`) through discovery, and executing the object
//! patcher operations hooks write to `KUBERNETES_PATCH_PATH`.

pub mod patcher;
pub mod resolve;

pub use patcher::{KubePatcher, OperationError, PatchError};
pub use resolve::{KindResolver, ResolveError, Resolved};
