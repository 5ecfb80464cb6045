//! The sandbox API server as Kubernetes clients see it: access control, kubectl, the Python
//! and kube-rs clients, its lifecycle and its API semantics.
//!
//! One test binary for the subsystem (each binary links all of bosun): a module per area.

#[path = "../common/mod.rs"]
mod common;

mod access;
mod clients;
mod kubectl;
mod lifecycle;
mod semantics;
