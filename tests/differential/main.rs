//! The differential suite: the same requests to a sandbox and to a real kube-apiserver
//! (`tests/controlplane`), answers normalised and compared. Each test starts one of each
//! and runs the cases of an area; a difference is either fixed in the sandbox or listed
//! here as a named expected difference, with its reason, as `docs/sandbox.md` ("Where the
//! sandbox differs from kube-apiserver") explains it.

#[path = "../common/mod.rs"]
mod common;

mod harness;

mod core;
mod crds;
mod watch;
mod workloads;

#[test]
fn core_resources_answer_alike() {
    harness::run("core", core::cases());
}

#[test]
fn workloads_and_leases_answer_alike() {
    harness::run("workloads", workloads::cases());
}

#[test]
fn custom_resources_answer_alike() {
    harness::run("crds", crds::cases());
}

#[test]
fn watches_and_discovery_answer_alike() {
    harness::run("watch", watch::cases());
}
