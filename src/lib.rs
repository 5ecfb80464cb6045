//! bosun: a Kubernetes extension operator.
//!
//! ```text
//!   cli ──► run ──► host/ (client, watches, metrics, mailboxes, endpoints)
//!    │        ├───► addon/    (wiring, real ports) ──► bosun_addon actors    ──► journal
//!    │        ├───► lambda/   (wiring, real ports) ──► bosun_lambda syncs    ──► journal
//!    │        ├───► deployer/ (wiring, real ports) ──► bosun_deployer items  ──► journal
//!    │        │     (all three start from the host, on the shared Kubernetes layer:
//!    │        │     the bosun_kube crate — clients, watches, informers, Events, HTTP)
//!    │        ├───► ha (lease, journal following)
//!    │        └───► sandbox_cli (embedded API server, optional)
//!    ├──► sandbox_cli (standalone API server)
//!    ├──► journal (offline inspection)
//!    └──► queue/global/module/actors (debug socket of a running bosun)
//! ```

pub mod addon;
mod child_process;
pub mod cli;
pub mod debug;
pub mod deployer;
pub mod endpoints;
pub mod examples;
pub mod explain_cli;
pub mod explanation;
pub mod ha;
pub mod helm;
pub mod hooks;
pub mod host;
pub mod journal_cli;
pub mod journal_dirs;
pub mod journal_kinds;
pub mod journal_replay;
pub mod journal_sink;
pub mod jq;
pub mod lambda;
pub mod logging;
pub mod memory;
pub mod private_dir;
pub mod profiling;
pub mod prometheus;
pub mod runtime_config;
pub mod sandbox_cli;
