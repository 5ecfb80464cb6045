//! How objects are keyed in hook requests and inside the controllers.
//!
//! - A **group key** names an object type in the hook maps: `Kind.version` for the core
//!   group (`Pod.v1`), `Kind.group/version` otherwise (`StatefulSet.apps/v1`).
//! - Inside bosun every object is keyed **uniformly**: `namespace/name` for a namespaced
//!   object, `name` for a cluster-scoped one (the v2 hook form). The v1 hook form
//!   (relative keys) is produced only when a request is written, so rollouts, claims and
//!   the observed children always agree (upstream mixes both and stalls rollouts of
//!   namespaced children).
//! - A controller's **work-queue key** is a [`ParentKey`]: the parent's namespace and
//!   name, with its type for a DecoratorController (whose targets are several types).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::types::HookVersion;

/// Objects of one type, by uniform key; shared with the informer caches they were read
/// from (a sync copies no object it only reads).
pub(crate) type ObjectMap = BTreeMap<String, Arc<Value>>;
/// Objects by group key, then uniform key.
pub(crate) type GroupMap = BTreeMap<String, ObjectMap>;

/// `Kind.version` or `Kind.group/version`.
pub(crate) fn group_key(api_version: &str, kind: &str) -> String {
    format!("{kind}.{api_version}")
}

/// An object's namespace (empty when cluster-scoped or unset).
pub fn namespace_of(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// An object's name.
pub fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// An object's uid.
pub(crate) fn uid_of(object: &Value) -> &str {
    object["metadata"]["uid"].as_str().unwrap_or_default()
}

/// Whether an object carries `finalizer`.
pub fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|l| l.iter().any(|f| f.as_str() == Some(finalizer)))
}

/// Whether an object is being deleted.
pub(crate) fn is_deleting(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

/// Whether a controller's children of `object` are managed: always while it lives, and
/// while it is being deleted only if our finalize hook still holds it (and no garbage
/// collector's foreground or orphan finalizer is at work).
pub(crate) fn manages_children(object: &Value, finalizer: &str, finalize_hook: bool) -> bool {
    !is_deleting(object)
        || (has_finalizer(object, finalizer)
            && finalize_hook
            && !has_finalizer(object, "foregroundDeletion")
            && !has_finalizer(object, "orphan"))
}

/// The uniform key of a namespace and name.
pub(crate) fn uniform_key(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

/// The uniform key of an object.
pub fn key_of(object: &Value) -> String {
    uniform_key(namespace_of(object), name_of(object))
}

/// Splits a uniform key into namespace and name.
pub(crate) fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// An object's type as its `apiVersion` and `kind` name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectType {
    pub api_version: String,
    pub kind: String,
}

/// A controller's work-queue key: the parent one sync is for.
///
/// A CompositeController's parents are all of its one parent resource: its keys name the
/// object alone and read as its uniform key (`namespace/name`, `name`). A
/// DecoratorController serves several resources: its keys carry the type too and read
/// `apiVersion:kind:namespace:name`. That text is what `bosun actors`, the debug views and
/// the journal show, and keys sort as their text does.
///
/// A key is held in several places at once (the queue, its set of waiting keys, the last
/// outcomes, the settled parents): its parts are shared, so a copy costs no allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParentKey {
    /// The parent's type; `None` for a CompositeController's parent.
    pub type_: Option<Arc<ObjectType>>,
    /// Empty for a cluster-scoped parent.
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl ParentKey {
    /// An untyped key sharing `namespace` and `name` (an informer cache's key).
    pub fn shared(namespace: Arc<str>, name: Arc<str>) -> ParentKey {
        ParentKey {
            type_: None,
            namespace,
            name,
        }
    }

    /// The key of a CompositeController's parent at `namespace`/`name`.
    pub fn new(namespace: &str, name: &str) -> ParentKey {
        ParentKey {
            type_: None,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a CompositeController's parent object.
    pub fn of(object: &Value) -> ParentKey {
        ParentKey::new(namespace_of(object), name_of(object))
    }

    /// The key of a DecoratorController's object: its type and where it is.
    pub fn typed(object: &Value) -> ParentKey {
        ParentKey {
            type_: Some(Arc::new(ObjectType {
                api_version: object["apiVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                kind: object["kind"].as_str().unwrap_or_default().to_string(),
            })),
            ..ParentKey::of(object)
        }
    }

    /// The text's bytes, without building it: the order of keys.
    fn text_bytes(&self) -> impl Iterator<Item = u8> + '_ {
        let type_ = self.type_.iter().flat_map(|t| {
            t.api_version
                .bytes()
                .chain([b':'])
                .chain(t.kind.bytes())
                .chain([b':'])
        });
        let separator: &[u8] = match (&self.type_, self.namespace.is_empty()) {
            (Some(_), _) => b":",
            (None, true) => b"",
            (None, false) => b"/",
        };
        type_
            .chain(self.namespace.bytes())
            .chain(separator.iter().copied())
            .chain(self.name.bytes())
    }
}

impl std::fmt::Display for ParentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.type_ {
            Some(t) => write!(
                f,
                "{}:{}:{}:{}",
                t.api_version, t.kind, self.namespace, self.name
            ),
            None if self.namespace.is_empty() => f.write_str(&self.name),
            None => write!(f, "{}/{}", self.namespace, self.name),
        }
    }
}

impl Ord for ParentKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Keys of one type and namespace (most keys a map compares) share the text up to
        // the name: their names decide, without walking the text.
        if self.type_ == other.type_ && self.namespace == other.namespace {
            return self.name.cmp(&other.name);
        }
        self.text_bytes().cmp(other.text_bytes())
    }
}

impl PartialOrd for ParentKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// As its text: a map keyed by parents is a JSON object keyed by their text.
impl serde::Serialize for ParentKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A group map as its [`HookMap`] serializes it, as a `Value`.
#[cfg(test)]
pub(crate) fn for_hook(map: &GroupMap, version: HookVersion, parent_namespace: &str) -> Value {
    serde_json::to_value(HookMap {
        map,
        version,
        parent_namespace,
    })
    .unwrap_or(Value::Null)
}

/// The hook's form of a group map: v2 keeps the uniform keys; v1 keys objects relative
/// to the parent (bare names, `namespace/name` only for namespaced objects of a
/// cluster-scoped parent) and leaves out objects of other namespaces than a namespaced
/// parent's, as upstream does. Serialized straight from the borrowed objects: a request
/// body is written without copying the objects into a `Value` first.
pub(crate) struct HookMap<'a> {
    pub map: &'a GroupMap,
    pub version: HookVersion,
    pub parent_namespace: &'a str,
}

/// Where a written [`HookMap`] holds each object's text: by group in the map's order, by
/// object in key order, the byte range in the output (`None` for an object left out).
pub(crate) type Places = Vec<Vec<Option<std::ops::Range<usize>>>>;

impl HookMap<'_> {
    /// One type's objects under their hook keys, in key order (the order, and for a
    /// repeated key the winner, that a JSON object built from them has), each with its
    /// position among `objects`.
    fn entries<'b>(&self, objects: &'b ObjectMap) -> BTreeMap<&'b str, (usize, &'b Value)> {
        let mut out = BTreeMap::new();
        for (index, (key, object)) in objects.iter().enumerate() {
            let (ns, name) = split_key(key);
            let key = match self.version {
                HookVersion::V2 => key.as_str(),
                HookVersion::V1 if self.parent_namespace.is_empty() => key.as_str(),
                HookVersion::V1 if ns.is_empty() || ns == self.parent_namespace => name,
                HookVersion::V1 => continue,
            };
            out.insert(key, (index, object.as_ref()));
        }
        out
    }

    /// Appends the map to `out` as compact JSON, the bytes its serialization writes, and
    /// tells where each object went.
    pub(crate) fn write(&self, out: &mut Vec<u8>) -> Places {
        // Writing into memory cannot fail (nor can serializing strings and `Value`s).
        let mut places = Vec::with_capacity(self.map.len());
        out.push(b'{');
        for (i, (group, objects)) in self.map.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let _ = serde_json::to_writer(&mut *out, group);
            out.extend_from_slice(b":{");
            let mut at = vec![None; objects.len()];
            for (j, (key, (index, object))) in self.entries(objects).into_iter().enumerate() {
                if j > 0 {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, key);
                out.push(b':');
                let start = out.len();
                let _ = serde_json::to_writer(&mut *out, object);
                at[index] = Some(start..out.len());
            }
            out.push(b'}');
            places.push(at);
        }
        out.push(b'}');
        places
    }
}

impl serde::Serialize for HookMap<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        /// One type's objects, as their entries.
        struct Objects<'b>(BTreeMap<&'b str, (usize, &'b Value)>);
        impl serde::Serialize for Objects<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_map(self.0.iter().map(|(key, (_, object))| (key, object)))
            }
        }
        let mut groups = serializer.serialize_map(Some(self.map.len()))?;
        for (group, objects) in self.map {
            groups.serialize_entry(group, &Objects(self.entries(objects)))?;
        }
        groups.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_queue_key_reads_back_as_the_object_it_names() {
        let o = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                       "metadata": {"namespace": "ns", "name": "a:b"}});
        let key = ParentKey::typed(&o);
        let t = key
            .type_
            .as_ref()
            .expect("a decorator's key carries the type");
        assert_eq!(
            (
                t.api_version.as_str(),
                t.kind.as_str(),
                &*key.namespace,
                &*key.name
            ),
            ("apps/v1", "Deployment", "ns", "a:b")
        );
        assert_eq!(key.to_string(), "apps/v1:Deployment:ns:a:b");
        let cluster = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}});
        let key = ParentKey::typed(&cluster);
        assert_eq!((&*key.namespace, &*key.name), ("", "x"));
        assert_eq!(key.to_string(), "v1:Namespace::x");
        assert_eq!(ParentKey::of(&o).to_string(), "ns/a:b");
        assert_eq!(ParentKey::of(&cluster).to_string(), "x");
        assert_eq!(
            serde_json::to_value(std::collections::BTreeMap::from([(
                ParentKey::new("ns", "p"),
                1
            )]))
            .expect("a map of keys"),
            json!({"ns/p": 1})
        );
    }

    #[test]
    fn queue_keys_sort_as_their_text() {
        let typed = |api_version: &str, kind: &str, ns: &str, name: &str| ParentKey {
            type_: Some(Arc::new(ObjectType {
                api_version: api_version.into(),
                kind: kind.into(),
            })),
            ..ParentKey::new(ns, name)
        };
        let keys = [
            ParentKey::new("ns", "a"),
            ParentKey::new("ns", "a-b"),
            ParentKey::new("ns", "ab"),
            ParentKey::new("ns-b", "x"),
            ParentKey::new("", "ns"),
            ParentKey::new("", "ns0"),
            ParentKey::new("", "a"),
            typed("apps/v1", "Deployment", "ns", "a"),
            typed("apps/v1", "Deployment", "ns", "0"),
            typed("apps/v1-x", "Deployment", "ns", "a"),
            typed("v1", "ConfigMap", "", "a"),
            typed("v1", "ConfigMap", "a", ""),
        ];
        for a in &keys {
            for b in &keys {
                assert_eq!(
                    a.cmp(b),
                    a.to_string().cmp(&b.to_string()),
                    "{a} against {b}"
                );
            }
        }
    }

    #[test]
    fn group_keys_follow_metacontroller() {
        assert_eq!(group_key("v1", "Pod"), "Pod.v1");
        assert_eq!(group_key("apps/v1", "StatefulSet"), "StatefulSet.apps/v1");
    }

    fn map() -> GroupMap {
        let mut objects = ObjectMap::new();
        objects.insert("ns1/a".into(), Arc::new(json!({"n": 1})));
        objects.insert("ns2/b".into(), Arc::new(json!({"n": 2})));
        objects.insert("c".into(), Arc::new(json!({"n": 3})));
        let mut m = GroupMap::new();
        m.insert("ConfigMap.v1".into(), objects);
        m.insert("Secret.v1".into(), ObjectMap::new());
        m
    }

    #[test]
    fn v1_keys_are_relative_to_a_namespaced_parent() {
        let v = for_hook(&map(), HookVersion::V1, "ns1");
        assert_eq!(
            v,
            json!({"ConfigMap.v1": {"a": {"n": 1}, "c": {"n": 3}}, "Secret.v1": {}})
        );
    }

    #[test]
    fn v1_keys_of_a_cluster_scoped_parent_carry_the_namespace() {
        let v = for_hook(&map(), HookVersion::V1, "");
        assert_eq!(v["ConfigMap.v1"]["ns2/b"], json!({"n": 2}));
        assert_eq!(v["ConfigMap.v1"]["c"], json!({"n": 3}));
    }

    #[test]
    fn v2_keys_are_uniform() {
        let v = for_hook(&map(), HookVersion::V2, "ns1");
        assert_eq!(v["ConfigMap.v1"]["ns2/b"], json!({"n": 2}));
        assert_eq!(v["ConfigMap.v1"]["ns1/a"], json!({"n": 1}));
    }

    #[test]
    fn a_written_hook_map_is_its_json_and_tells_where_each_object_is() {
        let mut map = GroupMap::new();
        map.insert("Empty.v1".into(), ObjectMap::new());
        map.entry("ConfigMap.v1".into()).or_default().extend(
            [
                ("a", json!({"n": 1, "s": "<\"é\">"})),
                ("ns/a", json!({"n": 2})),
                ("ns/b", json!({"n": [3, {"m": null}]})),
                ("other/c", json!({})),
                ("ns/q\"uote", json!("x")),
            ]
            .map(|(k, v)| (k.to_string(), Arc::new(v))),
        );
        map.entry("Secret.v1".into())
            .or_default()
            .insert("ns/s".into(), Arc::new(json!({"k": "v"})));
        for version in [HookVersion::V1, HookVersion::V2] {
            for parent_namespace in ["", "ns", "other"] {
                let hook = HookMap {
                    map: &map,
                    version,
                    parent_namespace,
                };
                let mut out = b"prefix".to_vec();
                let places = hook.write(&mut out);
                let serialized = serde_json::to_vec(&hook).expect("serializes");
                assert_eq!(out[6..], serialized[..], "{version:?} {parent_namespace:?}");
                let written = for_hook(&map, version, parent_namespace);
                assert_eq!(places.len(), map.len());
                for ((group, objects), at) in map.iter().zip(&places) {
                    assert_eq!(at.len(), objects.len());
                    let mut placed = 0;
                    for (object, at) in objects.values().zip(at) {
                        if let Some(at) = at {
                            assert_eq!(
                                out[at.clone()],
                                serde_json::to_vec(object).expect("json")[..]
                            );
                            placed += 1;
                        }
                    }
                    let in_body = written[group].as_object().map_or(0, |m| m.len());
                    assert_eq!(placed, in_body, "{group} {version:?} {parent_namespace:?}");
                }
            }
        }
    }
}
