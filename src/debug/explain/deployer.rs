//! The deployer's part of an explanation: a DeployItem (its phases, errors and clean-up)
//! or an object one deployed (the runs whose managed list took it in or let it go).

use bosun_deployer::controller::DeployerView;
use bosun_deployer::events::DeployerEvent;
use bosun_deployer::item::Phase;
use bosun_journal::Journal;

use super::{Explanation, Step, Subject};

/// `deployitem/ns/name` → (ns, name).
fn item_parts(item: &str) -> (&str, &str) {
    let rest = item.strip_prefix("deployitem/").unwrap_or(item);
    rest.split_once('/').unwrap_or(("", rest))
}

fn is_item(subject: &Subject, item: &str) -> bool {
    let (ns, name) = item_parts(item);
    subject.kind_is("DeployItem") && subject.names(ns, name)
}

/// Whether a managed entry (`Kind ns/name`) is the subject.
fn is_managed(subject: &Subject, entry: &str) -> bool {
    let Some((kind, rest)) = entry.split_once(' ') else {
        return false;
    };
    let (ns, name) = rest.split_once('/').unwrap_or(("", rest));
    subject.kind_is(kind) && subject.names(ns, name)
}

/// Adds what the deployer's journal says about `subject`.
pub fn explain(
    journal: &Journal<DeployerEvent>,
    subject: &Subject,
    e: &mut Explanation,
) -> Result<(), bosun_journal::JournalError> {
    if matches!(subject, Subject::Values { .. }) {
        return Ok(());
    }
    let mut phase: Option<Phase> = None;
    let mut last_error: Option<String> = None;
    let mut finalized = false;
    // For a deployed object: the item that manages it now, if any.
    let mut managed_by: Option<String> = None;
    for r in journal.read_from(1) {
        let r = r?;
        let step = |what: String| Step::of("deployer", &r, what);
        let item = r.event.item();
        if is_item(subject, item) {
            e.push_made_by(
                "the deployer (landscaper's DeployItem contract): it runs the item's type against its target"
                    .into(),
            );
            e.history.push(step(r.event.line()));
            match &r.event {
                DeployerEvent::DeployItemPhase { to, .. } => {
                    phase = Some(*to);
                    if *to == Phase::Succeeded {
                        last_error = None;
                    }
                }
                DeployerEvent::DeployItemError { .. } => last_error = Some(r.event.line()),
                DeployerEvent::DeployItemFinalized { .. } => finalized = true,
            }
            continue;
        }
        if let DeployerEvent::DeployItemPhase {
            managed: Some(list),
            job_id,
            ..
        } = &r.event
        {
            let ours = list.iter().any(|m| is_managed(subject, m));
            let job = job_id
                .as_deref()
                .map(|j| format!(" (job {j})"))
                .unwrap_or_default();
            if ours {
                e.push_made_by(format!("{item}, which deploys it"));
                if managed_by.as_deref() != Some(item) {
                    e.history.push(step(format!(
                        "applied by {item}'s run{job}: in its manifests"
                    )));
                }
                managed_by = Some(item.to_string());
            } else if managed_by.as_deref() == Some(item) {
                e.history.push(step(format!(
                    "no longer in {item}'s manifests{job}: removed (as an orphan, unless its policy keeps it)"
                )));
                managed_by = None;
            }
        }
        if let DeployerEvent::DeployItemFinalized { .. } = &r.event
            && managed_by.as_deref() == Some(item)
        {
            e.history.push(step(format!(
                "{item} was deleted: its objects were cleaned up with it"
            )));
            managed_by = None;
        }
    }
    if finalized {
        e.push_now("deleted: cleaned up, its finalizer removed".into());
    } else if let Some(p) = phase {
        match (p, &last_error) {
            (Phase::Succeeded, _) => e.push_now("Succeeded".into()),
            (p, Some(err)) => e.push_now(format!("NOT Succeeded: phase {p}; last error: {err}")),
            (p, None) => e.push_now(format!("NOT Succeeded: phase {p}")),
        }
    }
    if let Some(item) = managed_by {
        e.push_now(format!("managed by {item}"));
    }
    Ok(())
}

/// Adds what the running deployer knows: what a Progressing item waits on, its retry.
pub fn live(view: &DeployerView, subject: &Subject, e: &mut Explanation) {
    for (key, run) in view.last_runs().iter() {
        let key = key.to_string();
        if !is_item(subject, &key) {
            continue;
        }
        let phase = run.detail.phase.map_or("-", |p| p.as_str());
        let retry_in_ms = run
            .retry_in
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        match (&run.error, &run.detail.waiting_for, retry_in_ms) {
            (Some(err), _, Some(ms)) => e.push_now(format!(
                "(live) phase {phase}: {err}; tried again in {ms} ms"
            )),
            (Some(err), _, None) => e.push_now(format!("(live) phase {phase}: {err}")),
            (None, Some(w), _) => e.push_now(format!("(live) phase {phase}, waiting for {w}")),
            (None, None, _) => e.push_now(format!("(live) phase {phase}")),
        }
    }
}
