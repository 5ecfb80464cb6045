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
//!   Subject ──► lambda::explain ──┐
//!           ──► deployer::explain ├─► Explanation { made_by, history, now } ──► text/json/yaml
//!           ──► modules::explain ─┘
//! ```
//!
//! No reference keeps a history: addon-operator, metacontroller and landscaper can only
//! show an object's present state.

pub mod deployer;
pub mod lambda;
pub mod modules;

pub use crate::explanation::{Explanation, Step, Subject};

/// The journals an explanation reads.
pub struct Journals<'a> {
    /// The modules' journal.
    pub modules: Option<&'a bosun_journal::Journal<bosun_addon::Event>>,
    /// The lambda controllers' journal.
    pub lambda: Option<&'a bosun_journal::Journal<bosun_lambda::events::LambdaEvent>>,
    /// The deployer's journal.
    pub deployer: Option<&'a bosun_journal::Journal<bosun_deployer::events::DeployerEvent>>,
}

/// Explains `subject` from the journals.
pub fn explain(subject: &Subject, journals: &Journals<'_>) -> Explanation {
    let mut e = Explanation::new(subject);
    if let Some(j) = journals.modules
        && let Err(err) = modules::explain(j, subject, &mut e)
    {
        e.unreadable.push(format!("modules journal: {err}"));
    }
    if let Some(j) = journals.lambda
        && let Err(err) = lambda::explain(j, subject, &mut e)
    {
        e.unreadable.push(format!("lambda journal: {err}"));
    }
    if let Some(j) = journals.deployer
        && let Err(err) = deployer::explain(j, subject, &mut e)
    {
        e.unreadable.push(format!("deployer journal: {err}"));
    }
    e
}

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

/// The `what` journal in `d`, read only; `None` when `d` holds nothing, and when it
/// cannot be opened, with why in `unreadable`.
fn open_present<E>(
    what: &str,
    d: &std::path::Path,
    unreadable: &mut Vec<String>,
) -> Option<bosun_journal::Journal<E>>
where
    E: serde::Serialize + serde::de::DeserializeOwned + bosun_journal::Versioned,
{
    let present = d.is_dir() && std::fs::read_dir(d).is_ok_and(|mut r| r.next().is_some());
    if !present {
        return None;
    }
    bosun_journal::Journal::open_read_only(d)
        .map_err(|e| unreadable.push(format!("{what} journal {}: {e}", d.display())))
        .ok()
}

/// Explains from the journals under `dir` (each read from a private copy while bosun
/// holds it). A journal that is not there is left out; none there at all is an error.
pub fn offline(subject: &Subject, dir: &std::path::Path) -> anyhow::Result<Explanation> {
    let mut unreadable = Vec::new();
    let modules = if has_modules(dir) {
        open_present("modules", dir, &mut unreadable)
    } else {
        None
    };
    let lambda_dir = crate::journal_dirs::subsystem_journal(dir, "lambda");
    let lambda = open_present("lambda", &lambda_dir, &mut unreadable);
    let deployer_dir = crate::journal_dirs::subsystem_journal(dir, "deployer");
    let deployer = open_present("deployer", &deployer_dir, &mut unreadable);
    if modules.is_none() && lambda.is_none() && deployer.is_none() && unreadable.is_empty() {
        anyhow::bail!(
            "{}: no journal there (expected bosun's journal folder: --journal-dir or BOSUN_JOURNAL_DIR)",
            dir.display()
        );
    }
    let mut e = explain(
        subject,
        &Journals {
            modules: modules.as_ref(),
            lambda: lambda.as_ref(),
            deployer: deployer.as_ref(),
        },
    );
    e.unreadable.extend(unreadable);
    Ok(e)
}

/// Whether `dir` holds the modules' journal (and not only the other journals' folders).
pub fn has_modules(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            name != "lambda" && name != "deployer"
        })
    })
}
