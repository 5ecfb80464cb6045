//! The modules' part of an explanation: a values path (the hooks and ConfigMap sections
//! that set it), a module (enabled, its runs, releases and failures), or — live — an
//! object one of the modules' charts renders.

use std::collections::HashMap;

use bosun_addon::{Event, Scope, TaskEvent, TaskId, ValuesLayer};
use bosun_journal::Journal;
use serde_json::Value;

use super::{Explanation, Step, Subject};
use crate::debug::journal_views::{describe_op, state_at};

/// `global.foo.bar` → (`global`, `/global/foo/bar`); `my-module.x` → (`myModule`,
/// `/myModule/x`): the scope's key in a hook's values document and the JSON pointer there.
fn pointer(path: &str) -> (String, String) {
    let mut segments = path.split('.');
    let first = segments.next().unwrap_or_default();
    let key = if first == "global" {
        first.to_string()
    } else {
        bosun_addon::values::values_key(first)
    };
    let mut ptr = format!("/{key}");
    for s in segments.filter(|s| !s.is_empty()) {
        ptr.push('/');
        ptr.push_str(&s.replace('~', "~0").replace('/', "~1"));
    }
    (key, ptr)
}

/// Whether one path lies on the other (equal, above or below it).
fn touches(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"))
}

fn layer_name(layer: ValuesLayer) -> &'static str {
    match layer {
        ValuesLayer::Config => "config values",
        ValuesLayer::Memory => "values",
    }
}

/// Adds what the modules' journal says about `subject`.
pub fn explain(
    journal: &Journal<Event>,
    subject: &Subject,
    e: &mut Explanation,
) -> Result<(), String> {
    match subject {
        Subject::Values { path } => values(journal, path, e),
        Subject::Object { name, .. } if subject.kind_is("Module") => module(journal, name, e),
        Subject::Object { .. } => Ok(()),
    }
}

fn values(journal: &Journal<Event>, path: &str, e: &mut Explanation) -> Result<(), String> {
    let (key, ptr) = pointer(path);
    // Which task was running each hook, to name the task a patch came from.
    let mut running: HashMap<TaskId, String> = HashMap::new();
    let mut descriptions: HashMap<TaskId, String> = HashMap::new();
    for r in journal.read_from(1) {
        let r = r.map_err(|e| e.to_string())?;
        let step = |what: String| Step::of("modules", &r, what);
        match &r.event {
            Event::Task(TaskEvent::TaskEnqueued { task, .. }) => {
                descriptions.insert(task.id, task.description.clone());
            }
            Event::Task(TaskEvent::TaskStarted { id, .. }) => {
                if let Some(d) = descriptions.get(id) {
                    running.insert(*id, d.clone());
                }
            }
            Event::Task(
                TaskEvent::TaskSucceeded { id }
                | TaskEvent::TaskFailed { id, .. }
                | TaskEvent::TaskDropped { id, .. }
                | TaskEvent::TaskParked { id, .. },
            ) => {
                running.remove(id);
            }
            Event::ValuesPatched {
                scope,
                layer,
                patch,
                source,
            } if scope.values_key() == key => {
                let ops: Vec<String> = patch
                    .0
                    .iter()
                    .filter(|op| touches(op.path().as_str(), &ptr))
                    .map(describe_op)
                    .collect();
                if ops.is_empty() {
                    continue;
                }
                let task = running
                    .iter()
                    .find(|(_, d)| d.contains(source.as_str()))
                    .map(|(id, d)| format!(" in task {id} ({d})"))
                    .unwrap_or_default();
                e.push_made_by(format!("hook {source} (a values patch)"));
                e.history.push(step(format!(
                    "{scope} {} patched by hook {source}{task}: {}",
                    layer_name(*layer),
                    ops.join("; ")
                )));
            }
            Event::ValuesSet {
                scope,
                layer,
                values,
                source,
            } if scope.values_key() == key => {
                let inner = ptr.strip_prefix(&format!("/{key}")).unwrap_or_default();
                let value = if inner.is_empty() {
                    Some(values)
                } else {
                    values.pointer(inner)
                };
                let what = match value {
                    Some(v) => format!("set to {v}"),
                    None => "left out (the new content does not have it)".into(),
                };
                e.push_made_by(format!("{source} (sets {scope}'s {})", layer_name(*layer)));
                e.history.push(step(format!(
                    "{scope} {} replaced by {source}: {path} {what}",
                    layer_name(*layer)
                )));
            }
            _ => {}
        }
    }
    let state = state_at(journal, None).map_err(|e| e.to_string())?;
    let scope = state.values.iter().find(|(name, _)| {
        let s = if name.as_str() == "global" {
            Scope::Global
        } else {
            Scope::Module((*name).clone())
        };
        s.values_key() == key
    });
    if let Some((_, v)) = scope {
        let inner = ptr.strip_prefix(&format!("/{key}")).unwrap_or_default();
        let config = if inner.is_empty() {
            Some(&v.config)
        } else {
            v.config.pointer(inner)
        };
        if let Some(c) = config.filter(|c| !c.is_null()) {
            e.push_now(format!("config values: {path} = {c}"));
        }
        let ops: Vec<String> = v
            .memory
            .iter()
            .filter(|op| touches(op.path().as_str(), &ptr))
            .map(describe_op)
            .collect();
        if !ops.is_empty() {
            e.push_now(format!(
                "hooks' values patches kept (applied over the config values and the module's defaults): {}",
                ops.join("; ")
            ));
        }
    }
    Ok(())
}

fn module(journal: &Journal<Event>, name: &str, e: &mut Explanation) -> Result<(), String> {
    let mut of_module: HashMap<TaskId, String> = HashMap::new();
    for r in journal.read_from(1) {
        let r = r.map_err(|e| e.to_string())?;
        let step = |what: String| Step::of("modules", &r, what);
        if let Event::Task(TaskEvent::TaskEnqueued { task, .. }) = &r.event
            && task.kind.module() == Some(name)
        {
            of_module.insert(task.id, task.description.clone());
            continue;
        }
        let about_it = match &r.event {
            Event::Task(TaskEvent::TaskFailed { id, .. } | TaskEvent::TaskParked { id, .. }) => {
                of_module.contains_key(id)
            }
            Event::Task(_) | Event::ValuesPatched { .. } | Event::ValuesSet { .. } => false,
            other => other.module() == Some(name),
        };
        if about_it {
            e.history
                .push(step(crate::debug::journal_views::summary(&r.event)));
        }
    }
    let state = state_at(journal, None).map_err(|e| e.to_string())?;
    if let Some(m) = state.modules.get(name) {
        e.push_made_by(format!(
            "the modules engine: module {name} ({}, {})",
            if m.enabled { "enabled" } else { "disabled" },
            m.reason
        ));
        let release = if m.revision > 0 {
            format!("; release revision {}", m.revision)
        } else {
            String::new()
        };
        e.push_now(format!("phase {}{release}", m.phase));
    }
    for (queue, tasks) in state.tasks.queues.iter() {
        for t in tasks.iter().filter(|t| of_module.contains_key(&t.spec.id)) {
            let failing = if t.last_error.is_empty() {
                String::new()
            } else {
                format!(", failed {} time(s): {}", t.failures, t.last_error)
            };
            e.push_now(format!(
                "task {} waits in queue {queue}: {}{failing}",
                t.spec.id, t.spec.description
            ));
        }
    }
    Ok(())
}

/// Adds what the running modules know: the value hooks see now, and which module's chart
/// renders an object.
pub async fn live(engine: &bosun_addon::engine::Engine, subject: &Subject, e: &mut Explanation) {
    match subject {
        Subject::Values { path } => {
            let (key, ptr) = pointer(path);
            let doc = if key == "global" {
                // The global hooks' values document, `{"global": …}` (taken bare too).
                engine.global_values().await.map(|g| {
                    if g.get("global").is_some() {
                        g
                    } else {
                        serde_json::json!({ "global": g })
                    }
                })
            } else {
                let module = engine
                    .modules()
                    .into_iter()
                    .map(|(m, _)| m)
                    .find(|m| bosun_addon::values::values_key(m) == key);
                match module {
                    Some(m) => engine.module_values(&m).await.ok(),
                    None => None,
                }
            };
            if let Some(v) = doc.as_ref().and_then(|d| d.pointer(&ptr)) {
                e.push_now(format!("(live) the value hooks and Helm see: {path} = {v}"));
            }
        }
        Subject::Object { .. } if subject.kind_is("Module") => {}
        Subject::Object { .. } => {
            for (module, enabled) in engine.modules() {
                if !enabled {
                    continue;
                }
                let Ok(objects) = engine.module_render(&module).await else {
                    continue;
                };
                let rendered: Vec<Value> = objects
                    .into_iter()
                    .filter(|o| renders(subject, o))
                    .collect();
                if !rendered.is_empty() {
                    e.push_made_by(format!(
                        "module {module}: its Helm chart renders it (explain Module/{module} for its runs)"
                    ));
                    drift(engine, &module, rendered, subject, e).await;
                }
            }
        }
    }
}

/// How the object in the cluster differs from what `module`'s next upgrade would make of
/// it (a server-side apply run dry, as `module render --diff`, of the `rendered` objects
/// that are the subject only), into `e`.
async fn drift(
    engine: &bosun_addon::engine::Engine,
    module: &str,
    rendered: Vec<Value>,
    subject: &Subject,
    e: &mut Explanation,
) {
    let preview = engine.preview_objects(module, rendered);
    let previews = match tokio::time::timeout(crate::debug::DIFF_TIMEOUT, preview).await {
        Ok(Ok(p)) => p,
        Ok(Err(why)) => {
            e.push_now(format!(
                "(live) cannot compare with module {module}'s chart: {why}"
            ));
            return;
        }
        Err(_) => {
            e.push_now(format!(
                "(live) cannot compare with module {module}'s chart: no answer within {}s",
                crate::debug::DIFF_TIMEOUT.as_secs()
            ));
            return;
        }
    };
    let Some(preview) = previews.iter().find(|p| renders(subject, &p.merged)) else {
        return;
    };
    match crate::debug::diff::object_diff(preview) {
        Ok(None) => e.push_now(format!(
            "(live) as module {module}'s next upgrade would make it: no drift"
        )),
        Ok(Some(diff)) => {
            e.push_now(format!(
                "(live) drifted from what module {module}'s next upgrade would make of it (the diff below)"
            ));
            e.drift = Some(diff);
        }
        Err(why) => e.push_now(format!(
            "(live) cannot compare with module {module}'s chart: {why}"
        )),
    }
}

/// Whether a rendered object is the subject. An object rendered without a namespace
/// goes to the release's namespace, so only its name is compared.
fn renders(subject: &Subject, o: &Value) -> bool {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let name = s(&o["metadata"]["name"]);
    let namespace = match (o["metadata"]["namespace"].as_str(), subject) {
        (Some(ns), _) if !ns.is_empty() => ns.to_string(),
        (_, Subject::Object { namespace, .. }) => namespace.clone(),
        _ => String::new(),
    };
    subject.kind_is(&s(&o["kind"])) && subject.names(&namespace, &name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_paths_become_pointers_in_the_hooks_document() {
        assert_eq!(
            pointer("global.foo.bar"),
            ("global".into(), "/global/foo/bar".into())
        );
        assert_eq!(
            pointer("my-module.replicas"),
            ("myModule".into(), "/myModule/replicas".into())
        );
        assert!(touches("/global/foo", "/global/foo/bar"));
        assert!(touches("/global/foo/bar", "/global/foo"));
        assert!(!touches("/global/foobar", "/global/foo"));
    }
}
