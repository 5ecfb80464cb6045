//! Server-side apply and `metadata.managedFields`.
//!
//! Field ownership is tracked as sets of paths, serialized as `FieldsV1`
//! (`f:<field>`, `k:<merge key JSON>`, `v:<value JSON>`, `.` for a list element itself).
//! An apply merges the applied configuration into the live object, takes ownership of the
//! fields it names, removes fields the same manager applied before but no longer names
//! (unless someone else owns them), and conflicts with other managers that own a field it
//! sets to a different value — unless forced, which moves ownership. Plain updates give the
//! updater ownership of every field whose value they changed.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::strategic::{ListStrategy, list_strategy};

/// An apply that cannot be carried out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApplyError {
    /// Other managers own fields the apply changes.
    #[error("{}", conflict_message(conflicts))]
    Conflict {
        /// One per conflicting field: the manager as kube-apiserver prints it (`"mgr"`,
        /// or `"mgr" using v1 at <time>` for an updater) and the field (`.spec.x`).
        conflicts: Vec<(String, String)>,
    },
    /// The applied configuration is not an object.
    #[error("the applied configuration must be an object, got {0}")]
    NotAnObject(String),
}

/// kube-apiserver's message of an apply conflict: the one field, or the fields grouped
/// by manager.
fn conflict_message(conflicts: &[(String, String)]) -> String {
    if let [(manager, field)] = conflicts {
        return format!("Apply failed with 1 conflict: conflict with {manager}: {field}");
    }
    let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (manager, field) in conflicts {
        by_manager.entry(manager).or_default().push(field);
    }
    let mut lines = Vec::new();
    for (manager, fields) in by_manager {
        lines.push(format!("conflicts with {manager}:"));
        lines.extend(fields.iter().map(|f| format!("- {f}")));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

type Path = Vec<String>;
type FieldSet = BTreeSet<Path>;

/// Metadata fields the API server manages; never part of a field set.
const IGNORED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
];

fn is_builtin(obj: &Value) -> bool {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let group = api_version
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    super::resources::builtin_resources()
        .iter()
        .any(|r| r.group == group && r.kind == kind)
}

struct Schema<'a> {
    kind: &'a str,
    builtin: bool,
}

/// Kinds whose `spec.selector` is an atomic `LabelSelector` (owned as one field).
const ATOMIC_SELECTOR: &[&str] = &[
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "PodDisruptionBudget",
];

/// Fields of built-in kinds that a Go object always carries (structs and lists that are
/// serialized even when empty): an update never adds them, so they are never owned as
/// a whole, as in kube-apiserver's field sets.
const ALWAYS_PRESENT: &[&str] = &[
    "spec",
    "status",
    "spec.template",
    "spec.template.metadata",
    "spec.template.spec",
    "spec.template.spec.containers",
    "spec.strategy",
    "spec.updateStrategy",
    "spec.containers",
    "spec.jobTemplate",
    "spec.jobTemplate.spec",
    "spec.jobTemplate.spec.template",
    "spec.jobTemplate.spec.template.metadata",
    "spec.jobTemplate.spec.template.spec",
    "spec.jobTemplate.spec.template.spec.containers",
];

impl Schema<'_> {
    /// Whether `path` is owned as one field, whatever it holds.
    fn atomic(&self, path: &[String]) -> bool {
        self.builtin
            && ATOMIC_SELECTOR.contains(&self.kind)
            && path.len() == 2
            && path[0] == "f:spec"
            && path[1] == "f:selector"
    }

    /// Whether the node at `path` exists in every object of the kind (the metadata of
    /// any object, and Go's non-optional structs of a built-in kind).
    fn always_present(&self, path: &[String]) -> bool {
        if path.len() == 1 && path[0] == "f:metadata" {
            return true;
        }
        if !self.builtin || path.iter().any(|s| !s.starts_with("f:")) {
            return false;
        }
        let dotted: Vec<&str> = path.iter().map(|s| &s[2..]).collect();
        ALWAYS_PRESENT.contains(&dotted.join(".").as_str())
    }

    fn strategy(&self, field: &str) -> ListStrategy {
        if self.builtin {
            list_strategy(self.kind, field)
        } else {
            ListStrategy::Replace
        }
    }
}

fn last_field(path: &[String]) -> &str {
    path.iter()
        .rev()
        .find_map(|s| s.strip_prefix("f:"))
        .unwrap_or_default()
}

/// The set of field paths a configuration sets.
fn field_set(obj: &Value, schema: &Schema) -> FieldSet {
    let mut set = FieldSet::new();
    if let Some(map) = obj.as_object() {
        for (k, v) in map {
            if k == "apiVersion" || k == "kind" {
                continue;
            }
            if k == "metadata" {
                let Some(meta) = v.as_object() else { continue };
                for (mk, mv) in meta {
                    if !IGNORED_METADATA.contains(&mk.as_str()) {
                        walk(
                            mv,
                            vec!["f:metadata".into(), format!("f:{mk}")],
                            schema,
                            &mut set,
                        );
                    }
                }
                continue;
            }
            walk(v, vec![format!("f:{k}")], schema, &mut set);
        }
    }
    set
}

fn walk(v: &Value, path: Path, schema: &Schema, set: &mut FieldSet) {
    if schema.atomic(&path) {
        set.insert(path);
        return;
    }
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let mut p = path.clone();
                p.push(format!("f:{k}"));
                walk(child, p, schema, set);
            }
        }
        Value::Array(items) => match schema.strategy(last_field(&path)) {
            ListStrategy::MergeByKey(key) if items.iter().all(|i| i.get(key).is_some()) => {
                for item in items {
                    let mut p = path.clone();
                    p.push(element_key(key, item));
                    set.insert(p.clone());
                    walk(item, p, schema, set);
                }
            }
            ListStrategy::Union if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                for item in items {
                    let mut p = path.clone();
                    p.push(format!("v:{item}"));
                    set.insert(p);
                }
            }
            _ => {
                set.insert(path);
            }
        },
        _ => {
            set.insert(path);
        }
    }
}

fn element_key(key: &str, item: &Value) -> String {
    format!(
        "k:{}",
        json!({ key: item.get(key).cloned().unwrap_or(Value::Null) })
    )
}

/// Whether list element `item` is the one a `k:`/`v:` segment names.
fn element_matches(seg: &str, item: &Value) -> bool {
    if let Some(k) = seg.strip_prefix("k:") {
        let Ok(Value::Object(want)) = serde_json::from_str::<Value>(k) else {
            return false;
        };
        want.iter()
            .all(|(field, value)| item.get(field) == Some(value))
    } else if let Some(v) = seg.strip_prefix("v:") {
        serde_json::from_str::<Value>(v).is_ok_and(|want| &want == item)
    } else {
        false
    }
}

fn get<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path {
        cur = match seg.strip_prefix("f:") {
            Some(field) => cur.get(field)?,
            None => cur.as_array()?.iter().find(|i| element_matches(seg, i))?,
        };
    }
    Some(cur)
}

fn remove(obj: &mut Value, path: &[String]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for seg in parent_path {
        let next = match seg.strip_prefix("f:") {
            Some(field) => cur.get_mut(field),
            None => cur
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| element_matches(seg, i))),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last.strip_prefix("f:") {
        Some(field) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(field);
            }
        }
        None => {
            if let Some(a) = cur.as_array_mut() {
                a.retain(|i| !element_matches(last, i));
            }
        }
    }
}

/// Merges an applied configuration into the live object.
fn merge(live: Value, applied: &Value, field: &str, schema: &Schema) -> Value {
    match (live, applied) {
        (Value::Object(mut l), Value::Object(a)) => {
            for (k, av) in a {
                let lv = l.remove(k).unwrap_or(Value::Null);
                l.insert(k.clone(), merge(lv, av, k, schema));
            }
            Value::Object(l)
        }
        (Value::Array(mut l), Value::Array(a)) => match schema.strategy(field) {
            ListStrategy::MergeByKey(key) if a.iter().all(|i| i.get(key).is_some()) => {
                for item in a {
                    let seg = element_key(key, item);
                    match l.iter().position(|e| element_matches(&seg, e)) {
                        Some(i) => {
                            let existing = std::mem::take(&mut l[i]);
                            l[i] = merge(existing, item, "", schema);
                        }
                        None => l.push(item.clone()),
                    }
                }
                Value::Array(l)
            }
            ListStrategy::Union => {
                for item in a {
                    if !l.contains(item) {
                        l.push(item.clone());
                    }
                }
                Value::Array(l)
            }
            _ => applied.clone(),
        },
        (_, other) => other.clone(),
    }
}

/// Whether `set` holds a path below `path`.
fn has_below(set: &FieldSet, path: &Path) -> bool {
    set.range(path.clone()..)
        .find(|q| *q != path)
        .is_some_and(|q| q.starts_with(path))
}

/// `FieldsV1` tree of a set.
fn to_fields_v1(set: &FieldSet) -> Value {
    fn insert(node: &mut Map<String, Value>, path: &[String], set: &FieldSet, at: &mut Path) {
        if let Some((seg, rest)) = path.split_first() {
            at.push(seg.clone());
            let child = node.entry(seg.clone()).or_insert_with(|| json!({}));
            if let Value::Object(child) = child {
                // A member that has members below it is written `.` (the node itself).
                let below = !rest.is_empty() || has_below(set, at);
                if set.contains(at) && below {
                    child.insert(".".into(), json!({}));
                }
                insert(child, rest, set, at);
            }
            at.pop();
        }
    }
    let mut root = Map::new();
    for path in set {
        insert(&mut root, path, set, &mut Vec::new());
    }
    Value::Object(root)
}

/// The set of a `FieldsV1` tree.
fn from_fields_v1(tree: &Value) -> FieldSet {
    fn go(node: &Map<String, Value>, path: &mut Path, set: &mut FieldSet) {
        if node.is_empty() && !path.is_empty() {
            set.insert(path.clone());
        }
        for (k, v) in node {
            if k == "." {
                set.insert(path.clone());
                continue;
            }
            path.push(k.clone());
            match v.as_object() {
                Some(child) => go(child, path, set),
                None => {
                    set.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut set = FieldSet::new();
    if let Some(m) = tree.as_object() {
        go(m, &mut Vec::new(), &mut set);
    }
    set
}

/// One `managedFields` entry, parsed.
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn owner(&self) -> (&str, &str) {
        (&self.manager, &self.operation)
    }

    fn to_json(&self) -> Value {
        let mut e = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(&self.fields),
        });
        if !self.time.is_empty() {
            e["time"] = json!(self.time);
        }
        if let Some(s) = &self.subresource {
            e["subresource"] = json!(s);
        }
        e
    }
}

fn entries(obj: Option<&Value>) -> Vec<Entry> {
    let Some(list) = obj.and_then(|o| o["metadata"]["managedFields"].as_array()) else {
        return Vec::new();
    };
    list.iter()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default().to_string(),
            operation: e["operation"].as_str().unwrap_or("Update").to_string(),
            api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
            time: e["time"].as_str().unwrap_or_default().to_string(),
            subresource: e["subresource"].as_str().map(String::from),
            fields: from_fields_v1(&e["fieldsV1"]),
        })
        .collect()
}

fn store_entries(obj: &mut Value, mut entries: Vec<Entry>) {
    // kube-apiserver's order: applies before updates, then the oldest first, then by
    // manager and subresource.
    entries.sort_by(|a, b| {
        (&a.operation, &a.time, &a.manager, &a.subresource).cmp(&(
            &b.operation,
            &b.time,
            &b.manager,
            &b.subresource,
        ))
    });
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(Entry::to_json)
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// A field path as kube-apiserver prints it: `.spec.containers[name="main"].image`.
fn display_path(path: &[String]) -> String {
    path.iter()
        .map(|s| {
            if let Some(f) = s.strip_prefix("f:") {
                return format!(".{f}");
            }
            if let Some(Ok(Value::Object(keys))) =
                s.strip_prefix("k:").map(serde_json::from_str::<Value>)
            {
                let keys: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
                return format!("[{}]", keys.join(","));
            }
            match s.strip_prefix("v:") {
                Some(v) => format!("[={v}]"),
                None => format!("[{s}]"),
            }
        })
        .collect()
}

/// Server-side apply of `applied` by `manager` onto `live` (absent on create). Returns the
/// new object, with `metadata.managedFields` updated.
pub(crate) fn server_side_apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    group: &str,
    kind: &str,
    now: &str,
) -> Result<Value, ApplyError> {
    if !applied.is_object() {
        return Err(ApplyError::NotAnObject(applied.to_string()));
    }
    let builtin = super::resources::builtin_resources()
        .iter()
        .any(|r| r.group == group && r.kind == kind);
    let schema = Schema { kind, builtin };
    let mut applied = applied.clone();
    if let Some(meta) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    let applied_set = field_set(&applied, &schema);
    let mut owners = entries(live);
    let base = live.cloned().unwrap_or_else(|| json!({}));
    let mut merged = merge(base.clone(), &applied, "", &schema);

    // Conflicts: fields owned by someone else that this apply gives a different value.
    let mut conflicts = Vec::new();
    let mut taken: BTreeMap<usize, Vec<Path>> = BTreeMap::new();
    for (i, e) in owners.iter().enumerate() {
        if e.owner() == (manager, "Apply") || e.subresource.is_some() {
            continue;
        }
        for path in applied_set.intersection(&e.fields) {
            let leaf = path.last().is_some_and(|s| s.starts_with("f:"));
            if leaf && get(&base, path) != get(&merged, path) {
                let manager = if e.operation == "Update" {
                    format!("{:?} using {}", e.manager, e.api_version)
                } else {
                    format!("{:?}", e.manager)
                };
                conflicts.push((manager, display_path(path)));
                taken.entry(i).or_default().push(path.clone());
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(ApplyError::Conflict { conflicts });
    }
    for (i, paths) in taken {
        for p in paths {
            owners[i].fields.remove(&p);
        }
    }

    // Fields this manager applied before and no longer names are removed, unless shared.
    let previous = owners.iter().position(|e| e.owner() == (manager, "Apply"));
    if let Some(prev) = previous {
        let dropped: Vec<Path> = owners[prev]
            .fields
            .difference(&applied_set)
            .cloned()
            .collect();
        for path in dropped {
            let shared = owners
                .iter()
                .enumerate()
                .any(|(j, e)| j != prev && e.fields.contains(&path));
            if !shared {
                remove(&mut merged, &path);
            }
        }
    }
    let api_version = merged["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // An apply that changes nothing but ownership is recorded without a time, as
    // kube-apiserver records it (and so sorted before the timed entries).
    let unchanged = live.is_some_and(|l| without_managed(l) == without_managed(&merged));
    let entry = Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        api_version,
        time: if unchanged {
            String::new()
        } else {
            now.to_string()
        },
        subresource: None,
        fields: applied_set,
    };
    match previous {
        Some(i) => owners[i] = entry,
        None => owners.push(entry),
    }
    store_entries(&mut merged, owners);
    Ok(merged)
}

/// An object without its `managedFields`.
fn without_managed(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    o
}

/// Records a non-apply write (`operation` is `Update`) by `manager` in `new`'s
/// `metadata.managedFields`: the manager takes ownership of every field it changed.
pub(crate) fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
    now: &str,
) {
    let kind = new["kind"].as_str().unwrap_or_default().to_string();
    let schema = Schema {
        kind: &kind,
        builtin: is_builtin(new),
    };
    let leaves = field_set(new, &schema);
    // The nodes above the leaves: an update owns one (written `.`) when it adds it.
    let mut new_set = leaves.clone();
    for path in &leaves {
        for end in 1..path.len() {
            new_set.insert(path[..end].to_vec());
        }
    }
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| {
            let node = has_below(&leaves, p) || !p.last().is_some_and(|s| s.starts_with("f:"));
            if node {
                !schema.always_present(p) && old.is_none_or(|o| get(o, p).is_none())
            } else {
                old.is_none_or(|o| get(o, p) != get(new, p))
            }
        })
        .cloned()
        .collect();
    // A client may send managedFields back (kubectl edit); the server's record wins unless
    // the client explicitly replaced it with different content.
    let supplied = new["metadata"]["managedFields"].clone();
    let mut owners =
        if old.is_some_and(|o| o["metadata"]["managedFields"] != supplied) && supplied.is_array() {
            entries(Some(new))
        } else {
            entries(old)
        };
    for e in &mut owners {
        e.fields
            .retain(|p| new_set.contains(p) && !changed.contains(p));
    }
    if !changed.is_empty() {
        let api_version = new["apiVersion"].as_str().unwrap_or_default().to_string();
        match owners
            .iter_mut()
            .find(|e| e.owner() == (manager, operation) && e.subresource.as_deref() == subresource)
        {
            Some(e) => {
                e.fields.extend(changed);
                e.time = now.to_string();
                e.api_version = api_version;
            }
            None => owners.push(Entry {
                manager: manager.to_string(),
                operation: operation.to_string(),
                api_version,
                time: now.to_string(),
                subresource: subresource.map(String::from),
                fields: changed,
            }),
        }
    }
    store_entries(new, owners);
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-01T00:00:00Z";

    fn deploy(replicas: i64, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"a": "1"}},
               "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": image}]}}}})
    }

    #[test]
    fn apply_creates_and_records_ownership() {
        let out = server_side_apply(
            None,
            &deploy(1, "x"),
            "me",
            false,
            "apps",
            "Deployment",
            NOW,
        )
        .unwrap();
        let mf = &out["metadata"]["managedFields"][0];
        assert_eq!(mf["manager"], "me");
        assert_eq!(mf["operation"], "Apply");
        assert_eq!(mf["fieldsV1"]["f:spec"]["f:replicas"], json!({}));
        assert_eq!(
            mf["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"]
                ["."],
            json!({})
        );
        assert!(mf["fieldsV1"]["f:metadata"].get("f:name").is_none());
    }

    #[test]
    fn conflicts_and_force() {
        let live = server_side_apply(None, &deploy(1, "x"), "a", false, "apps", "Deployment", NOW)
            .unwrap();
        // Same value: shared ownership, no conflict.
        let shared = server_side_apply(
            Some(&live),
            &deploy(1, "x"),
            "b",
            false,
            "apps",
            "Deployment",
            NOW,
        )
        .unwrap();
        assert_eq!(
            shared["metadata"]["managedFields"].as_array().map(Vec::len),
            Some(2)
        );
        let err = server_side_apply(
            Some(&live),
            &deploy(2, "x"),
            "b",
            false,
            "apps",
            "Deployment",
            NOW,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("conflict with \"a\": .spec.replicas"),
            "{err}"
        );
        let forced = server_side_apply(
            Some(&live),
            &deploy(2, "x"),
            "b",
            true,
            "apps",
            "Deployment",
            NOW,
        )
        .unwrap();
        assert_eq!(forced["spec"]["replicas"], 2);
        let a = &forced["metadata"]["managedFields"][0];
        assert_eq!(a["manager"], "a");
        assert!(a["fieldsV1"]["f:spec"].get("f:replicas").is_none());
    }

    #[test]
    fn fields_no_longer_applied_are_removed() {
        let live = server_side_apply(None, &deploy(1, "x"), "a", false, "apps", "Deployment", NOW)
            .unwrap();
        let mut next = deploy(1, "x");
        next["metadata"]["labels"] = json!({});
        next["metadata"].as_object_mut().map(|m| m.remove("labels"));
        let out =
            server_side_apply(Some(&live), &next, "a", false, "apps", "Deployment", NOW).unwrap();
        assert!(
            out["metadata"]
                .get("labels")
                .is_none_or(|l| l.get("a").is_none()),
            "{out}"
        );
        assert_eq!(out["spec"]["replicas"], 1);
    }

    #[test]
    fn updates_take_ownership_of_changed_fields() {
        let live = server_side_apply(None, &deploy(1, "x"), "a", false, "apps", "Deployment", NOW)
            .unwrap();
        let mut edited = live.clone();
        edited["spec"]["replicas"] = json!(3);
        record_update(
            Some(&live),
            &mut edited,
            "kubectl-edit",
            "Update",
            None,
            NOW,
        );
        let mf = edited["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(mf.len(), 2);
        assert!(mf[0]["fieldsV1"]["f:spec"].get("f:replicas").is_none());
        assert_eq!(mf[1]["fieldsV1"]["f:spec"]["f:replicas"], json!({}));
        // Now the applier conflicts with the editor on replicas.
        let err = server_side_apply(
            Some(&edited),
            &deploy(1, "x"),
            "a",
            false,
            "apps",
            "Deployment",
            NOW,
        )
        .unwrap_err();
        assert!(err.to_string().contains("kubectl-edit"));
    }

    #[test]
    fn fields_v1_round_trip() {
        let set = field_set(
            &deploy(1, "x"),
            &Schema {
                kind: "Deployment",
                builtin: true,
            },
        );
        assert_eq!(from_fields_v1(&to_fields_v1(&set)), set);
    }
}
