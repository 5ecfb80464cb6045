//! In-memory versions of every port of the deployer, for tests that run it end to end
//! in-process, one module per port, each with faults a test can switch on:
//!
//! ```text
//!   cluster.rs  MemoryCluster  Cluster         DeployItems, Targets, Secrets and Contexts
//!                                              with resourceVersions, generations,
//!                                              finalizers and the status subresource, and
//!                                              a watch that reports every write (ours
//!                                              included, as a real watch does)
//!   targets.rs  MemoryTargets  TargetClusters  the objects of each target cluster, with
//!                                              discovery of built-in kinds and CRDs,
//!                                              finalizers, and every write recorded
//!   helm.rs     MemoryHelm     HelmPort        charts, rendered objects set by the test,
//!                                              releases with their revisions, and every
//!                                              install, upgrade and uninstall recorded
//!   faults.rs   Fault                          how a call is refused (409, 500, 403, no
//!                                              connection, 413), worded as the real ports
//! ```
//!
//! Faults: [`MemoryCluster::fail`] (reads, item and status writes, exports, Secret
//! deletes, tokens by [`ClusterCall`]), [`MemoryCluster::write_status_before`] (another
//! writer lands first); [`MemoryTargets::fail`] (by [`TargetCall`]),
//! [`MemoryTargets::unreachable`], [`MemoryTargets::refuse`] (422);
//! [`MemoryHelm::fail_deploys`], [`MemoryHelm::fail_uninstalls`],
//! [`MemoryHelm::fail_pulls`], [`MemoryHelm::fail_renders`].

mod cluster;
mod faults;
mod helm;
mod targets;

pub use cluster::{ClusterCall, MemoryCluster};
pub use faults::Fault;
pub use helm::{HelmCall, MemoryHelm};
pub use targets::{MemoryTargets, TargetCall, TargetOp, TargetWrite, target_key};
