//! The lambda controllers' part of an explanation: a parent (its syncs and failures) or a
//! child (the syncs that created, updated or deleted it, and its parent's state).

use bosun_journal::Journal;
use bosun_lambda::events::LambdaEvent;
use bosun_lambda::keys::ParentKey;
use bosun_lambda::registry::ControllerView;

use super::{Explanation, Step, Subject};

/// A parent key as the journal writes it: `ns/name`, `name`, or a decorator's
/// `apiVersion:kind:ns:name`; returns (kind when known, namespace, name).
fn parent_of(key: &str) -> (Option<&str>, &str, &str) {
    let parts: Vec<&str> = key.split(':').collect();
    if let [_, kind, ns, name] = parts[..] {
        return (Some(kind), ns, name);
    }
    match key.split_once('/') {
        Some((ns, name)) => (None, ns, name),
        None => (None, "", key),
    }
}

/// A child as a sync lists it: `Kind ns/name` or `Kind name`.
fn child_of(what: &str) -> Option<(&str, &str, &str)> {
    let (kind, rest) = what.split_once(' ')?;
    Some(match rest.split_once('/') {
        Some((ns, name)) => (kind, ns, name),
        None => (kind, "", rest),
    })
}

/// Whether `key` is the subject as a parent. A composite parent's key does not carry its
/// kind: `composite_kind` is its controller's parent kind (unknown in journals written
/// before it was recorded: then it matches by namespace and name alone).
fn is_parent(subject: &Subject, key: &str, composite_kind: Option<&str>) -> bool {
    let (kind, ns, name) = parent_of(key);
    names_parent(subject, kind.or(composite_kind), ns, name)
}

/// [`is_parent`] of a running controller's key.
fn is_parent_key(subject: &Subject, key: &ParentKey, composite_kind: Option<&str>) -> bool {
    let kind = key.type_.as_ref().map(|t| t.kind.as_str());
    names_parent(subject, kind.or(composite_kind), &key.namespace, &key.name)
}

fn names_parent(subject: &Subject, kind: Option<&str>, ns: &str, name: &str) -> bool {
    subject.names(ns, name) && kind.is_none_or(|k| subject.kind_is(k))
}

/// Adds what the lambda journal says about `subject`.
pub fn explain(
    journal: &Journal<LambdaEvent>,
    subject: &Subject,
    e: &mut Explanation,
) -> Result<(), bosun_journal::JournalError> {
    if matches!(subject, Subject::Values { .. }) {
        return Ok(());
    }
    // The last event of each (controller, parent) seen, to tell the parent's state.
    let mut last_of_parent: Option<LambdaEvent> = None;
    let mut parent_of_child: Option<(String, String)> = None;
    let mut child_last: Option<LambdaEvent> = None;
    // Each controller's parent kind, as its latest start recorded it.
    let mut parent_kinds: std::collections::BTreeMap<String, String> = Default::default();
    for r in journal.read_from(1) {
        let r = r?;
        let step = |what: String| Step::of("lambda", &r, what);
        let parent_kind = |controller: &str| parent_kinds.get(controller).map(String::as_str);
        match &r.event {
            LambdaEvent::ControllerStarted {
                name, parent_kind, ..
            } => match parent_kind {
                Some(k) => {
                    parent_kinds.insert(name.clone(), k.clone());
                }
                None => {
                    parent_kinds.remove(name);
                }
            },
            LambdaEvent::Synced {
                controller, key, ..
            }
            | LambdaEvent::SyncFailed {
                controller, key, ..
            } if is_parent(subject, key, parent_kind(controller)) => {
                e.push_made_by(format!(
                    "parent of lambda controller {controller} (its sync hook decides the children)"
                ));
                e.history.push(step(r.event.line()));
                last_of_parent = Some(r.event.clone());
            }
            LambdaEvent::Synced {
                controller,
                key,
                hook,
                answer,
                created,
                updated,
                deleted,
                ..
            } => {
                let named = |list: &Vec<String>| {
                    list.iter().any(|c| {
                        child_of(c).is_some_and(|(kind, ns, name)| {
                            subject.kind_is(kind) && subject.names(ns, name)
                        })
                    })
                };
                let what = if named(created) {
                    "created"
                } else if named(updated) {
                    "updated"
                } else if named(deleted) {
                    "deleted"
                } else {
                    if parent_of_child
                        .as_ref()
                        .is_some_and(|(c, k)| c == controller && k == key)
                    {
                        child_last = Some(r.event.clone());
                    }
                    continue;
                };
                e.push_made_by(format!(
                    "lambda controller {controller}, as a child of parent {key}"
                ));
                e.history.push(step(format!(
                    "{what} by {controller}: the {hook} hook's answer {answer} for parent {key} asked for it"
                )));
                parent_of_child = Some((controller.clone(), key.clone()));
                child_last = Some(r.event.clone());
            }
            LambdaEvent::SyncFailed {
                controller, key, ..
            } if parent_of_child
                .as_ref()
                .is_some_and(|(c, k)| c == controller && k == key) =>
            {
                e.history.push(step(format!(
                    "its parent's sync failed: {}",
                    r.event.line()
                )));
                child_last = Some(r.event.clone());
            }
            _ => {}
        }
    }
    if let Some(last) = last_of_parent {
        e.push_now(state(&last, "its last sync"));
    }
    if let (Some(last), Some((_, key))) = (child_last, parent_of_child) {
        e.push_now(state(&last, &format!("its parent {key}'s last sync")));
    }
    Ok(())
}

fn state(last: &LambdaEvent, whose: &str) -> String {
    match last {
        LambdaEvent::SyncFailed {
            error,
            retry_in_ms,
            failures,
            ..
        } => {
            let count = match failures {
                0 | 1 => String::new(),
                n => format!(" ({n} failures in a row)"),
            };
            format!(
                "NOT converged: {whose} failed{count}: {error}; retried {retry_in_ms} ms after it"
            )
        }
        LambdaEvent::Synced { hook, answer, .. } => {
            format!("converged: {whose} applied the {hook} hook's answer {answer}")
        }
        _ => String::new(),
    }
}

/// Adds what the running controllers know: the next retry and the last outcome.
pub fn live(controllers: &[ControllerView], subject: &Subject, e: &mut Explanation) {
    for c in controllers {
        for (key, last) in c.last_syncs.iter() {
            // Planned children read `Kind.version ns/name`.
            let is_child = last.detail.planned.iter().any(|p| {
                child_of(p).is_some_and(|(kind, ns, name)| {
                    let kind = kind.split_once('.').map_or(kind, |(k, _)| k);
                    subject.kind_is(kind) && subject.names(ns, name)
                })
            });
            if !is_parent_key(subject, key, c.parent_kind.as_deref()) && !is_child {
                continue;
            }
            let whose = if is_child {
                format!("(live) its parent {key} in {} {}", c.kind, c.name)
            } else {
                format!("(live) {} {}", c.kind, c.name)
            };
            let next_retry_ms = last
                .retry_in
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            match (&last.error, next_retry_ms) {
                (Some(err), Some(ms)) => e.push_now(format!(
                    "{whose}: the last sync failed: {err}; the next retry in {ms} ms"
                )),
                (Some(err), None) => e.push_now(format!("{whose}: the last sync failed: {err}")),
                (None, _) if is_child => e.push_now(format!(
                    "{whose}: the {} hook's last answer asks for it",
                    last.detail.hook.unwrap_or("sync")
                )),
                (None, _) => e.push_now(format!(
                    "{whose}: in sync; the last answer planned {} children",
                    last.detail.planned.len()
                )),
            }
        }
        let queue = &c.queue;
        for d in queue["delayed"].as_array().into_iter().flatten() {
            if d["key"]
                .as_str()
                .is_some_and(|k| is_parent(subject, k, c.parent_kind.as_deref()))
            {
                e.push_now(format!(
                    "(live) queued in {} {}: due in {} ms",
                    c.kind, c.name, d["dueInMs"]
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_and_children_are_read_as_the_journal_writes_them() {
        assert_eq!(parent_of("default/world"), (None, "default", "world"));
        assert_eq!(
            parent_of("apps/v1:Deployment:default:web"),
            (Some("Deployment"), "default", "web")
        );
        assert_eq!(
            child_of("ConfigMap default/web-0"),
            Some(("ConfigMap", "default", "web-0"))
        );
        assert_eq!(child_of("Namespace team"), Some(("Namespace", "", "team")));
    }
}
