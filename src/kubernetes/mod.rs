//! Kubernetes access shared by hooks and the object patcher: resolving the loose kind names
//! hooks write (`po`, `deploy`, `Deployment`) through discovery.

pub mod resolve;

pub use resolve::{KindResolver, ResolveError, Resolved};
