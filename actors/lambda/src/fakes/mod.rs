//! In-memory fakes of the lambda ports, beside the ports they stand for, each with the
//! faults of the real thing to arm. They run controllers in-process in tests, the whole way
//! from a controller object to children and status, without an API server.
//!
//! ```text
//!   cluster.rs  MemoryCluster: `Cluster` + `Watches`; objects, versions, finalizers,
//!               watchers; interrupted watches resumed with a relist
//!   faults.rs   Verb + Fault: the next calls of a verb refused as an API server refuses
//!   hooks.rs    ScriptedHooks: `HookFactory`, webhooks answered by closures; HookFault:
//!               an error status, a 429, a refused connection, garbage, a slow answer
//!   examples.rs the hooks of metacontroller's examples as functions from request to
//!               answer, for the in-process and the end to end tests alike
//! ```

mod cluster;
pub mod examples;
mod faults;
mod hooks;

use std::sync::{Mutex, MutexGuard};

pub use cluster::{MemoryCluster, RecordedEvent, resource};
pub use faults::{Fault, Verb};
pub use hooks::{HookFault, Script, ScriptedFactory, ScriptedHooks};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
