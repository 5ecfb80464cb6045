//! `bosun explain`: why an object looks the way it does. For anything bosun touches — a
//! lambda parent or child, a DeployItem or an object it deployed, a module, a values path —
//! it names who made it, each change bosun made to it and why (from the three journals,
//! in each journal's order), and what it is waiting for now.
//!
//! ```text
//!   bosun explain ConfigMap/web -n default
//!        │ offline: the journals under --journal-dir (read-only copies while bosun runs)
//!        │ --live:  GET /explain.{text|json}?subject=…&namespace=… on the debug socket,
//!        │          the same explanation plus what the running subsystems wait for
//!        ▼
//!   Subject ──► each registered journal (cli::SUBSYSTEMS) ──► Explanation
//!                 offline (explain_cli): JournalKind::explain     { made_by, history, now }
//!                 live: SubsystemView::{explain, now, ask}          ──► text/json/yaml
//! ```
//!
//! What each journal says is in its own file here (`modules.rs`, `lambda.rs`,
//! `deployer.rs`), named by its subsystem's registration.
//!
//! No reference keeps a history: addon-operator, metacontroller and landscaper can only
//! show an object's present state.

pub mod deployer;
pub mod lambda;
pub mod modules;

pub use crate::explanation::{Explanation, Step, Subject};

/// Explains `subject` in a running bosun: what each subsystem's journal says (read off
/// the async threads), then what each knows now, then what each asks its actors.
pub async fn explain_running(subject: &Subject, parts: &crate::host::Parts) -> Explanation {
    let views: Vec<_> = parts.views().cloned().collect();
    let (s, read_views) = (subject.clone(), views.clone());
    let read = tokio::task::spawn_blocking(move || {
        let mut e = Explanation::new(&s);
        for view in &read_views {
            if let Err(err) = view.explain(&s, &mut e) {
                e.unreadable.push(err);
            }
        }
        e
    })
    .await;
    let mut e = read.unwrap_or_else(|err| {
        let mut e = Explanation::new(subject);
        e.unreadable
            .push(format!("reading the journals failed: {err}"));
        e
    });
    for view in &views {
        view.now(subject, &mut e);
    }
    for view in &views {
        view.ask(subject, &mut e).await;
    }
    e
}
