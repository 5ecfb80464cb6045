//! Operating bosun: its debug socket and web view, metrics, journals (compaction, earlier
//! versions, failing disks), the deploy manifests, running in a pod and under its own RBAC, private files, the
//! runtime configuration, and the reliability campaigns (their full runs are ignored).
//!
//! One test binary for the subsystem (each binary links all of bosun): a module per area.

#[path = "../common/mod.rs"]
mod common;

mod campaign_crash;
mod campaign_long;
mod control_plane;
mod debug_socket;
mod debug_ui;
mod deploy_manifests;
mod in_cluster;
mod journal_compaction;
mod journal_compat;
mod journal_disk_faults;
mod metrics;
mod private_files;
mod rbac;
mod runtime_config;
