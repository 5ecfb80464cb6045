//! landscaper's DeployItem deployer on the bosun runtime.
//!
//! A DeployItem names a type, a Target and a provider configuration; the deployer of
//! that type deploys it and reports phases, errors and exports on the item. This crate
//! holds the contract (seed 002) as a pure decision and the types behind a trait:
//!
//! ```text
//!   item.rs        DeployItem, status, phases, error codes, annotations (typed)
//!   timeout.rs     spec.timeout: Go durations and "none"
//!   decide.rs      the contract step by step (pure): Ignore / Idle / start / run / fail
//!   status.rs      lastError, firstError, lastErrors; finishing a run (jobIDFinished)
//!   target.rs      Targets: responsibility (selectors), resolution, kubeconfig checks
//!   controller.rs  WorkQueue<ItemKey>, workers: decide, write, run the type, journal
//!   mock.rs        the mock type (landscaper.gardener.cloud/mock)
//!   manifest.rs    the kubernetes-manifest type and its target port
//!   helm.rs        the helm type: real releases or rendered objects; its chart port
//!   lock.rs        SyncObjects: the per-item lock between replicas (pure)
//!   events.rs      the deployer's journal event, its item and readable line
//!   journal_state.rs  the journal folded into each item's state (`bosun journal replay`)
//!   fakes.rs       an in-memory cluster for tests
//! ```
//!
//! The crate does no IO: the cluster is a port (`ports.rs`) implemented in the binary.

pub mod controller;
pub mod decide;
pub mod deletion;
pub mod events;
pub mod fakes;
pub mod helm;
pub mod item;
pub mod journal_state;
pub mod lock;
pub mod manifest;
pub mod mock;
pub mod oci;
pub mod ocm;
pub mod ports;
pub mod readiness;
pub mod status;
pub mod target;
pub mod timeout;
