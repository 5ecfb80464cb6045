//! The binding contexts a hook-run task carries until the hook starts: which binding and
//! why, with what the context needs then (the event's object, the binding's index for its
//! snapshots). `bindings::render` turns them into the array at `BINDING_CONTEXT_PATH`.
//!
//! ```text
//!   watch event / Synchronization / timer / startup ──► ContextStub in a task
//!   journal: the JSON objects bosun has always written (`_index`, `_schedule` inside)
//! ```
//!
//! The JSON form is the journal's: a stub serializes to exactly the object it was queued
//! as before it was typed, with its keys in the order a JSON object sorts them, and every
//! journaled stub reads back. Decoding is strict: a key that does not belong to the
//! context's type is an error naming it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::hook_config::WatchEvent;

/// A JSON value a queued context carries, kept as its compact text and shared between
/// copies: a task's contexts are copied when tasks merge and when the hook starts, and a
/// burst of events can queue tens of thousands of them (as a `Value` tree an object takes
/// about four times its text). An object comes as the watch's own text, shared by every
/// binding that delivers it (no copy per binding). Written out as it is, read back into a
/// `Value` only when the hook's context file is made.
#[derive(Clone, Debug)]
pub struct SharedJson(Arc<str>);

impl SharedJson {
    /// The compact text of `v`.
    pub fn new(v: &Value) -> SharedJson {
        SharedJson(Arc::from(v.to_string()))
    }

    /// JSON text made already (a watch's copy of an object, a filter's result written
    /// out), shared as it is. Text that is not JSON reads, and is written, as `null`.
    pub fn from_text(text: Arc<str>) -> SharedJson {
        SharedJson(text)
    }

    /// The value again.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.0
    }
}

impl PartialEq for SharedJson {
    fn eq(&self, other: &SharedJson) -> bool {
        self.0 == other.0
    }
}

impl Eq for SharedJson {}

impl Serialize for SharedJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match serde_json::from_str::<&RawValue>(&self.0) {
            Ok(raw) => raw.serialize(serializer),
            Err(_) => serializer.serialize_unit(),
        }
    }
}

/// One queued binding context.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ContextStub {
    /// A kubernetes binding's Synchronization; its `objects` are read when the hook starts.
    Synchronization {
        binding: String,
        /// The binding's index in the hook's `kubernetes` list (`_index`).
        index: usize,
        /// The binding's group when it was queued (`groupName`).
        group: Option<String>,
    },
    /// A watch event of a kubernetes binding.
    Event {
        binding: String,
        /// `_index`, as for a Synchronization.
        index: usize,
        group: Option<String>,
        watch_event: WatchEvent,
        /// The object, when the binding keeps full objects or it was deleted.
        object: Option<SharedJson>,
        /// The jq filter's result, when the binding has a filter (`null` when it gave none).
        filter_result: Option<SharedJson>,
    },
    /// A firing of a schedule binding.
    Schedule {
        binding: String,
        /// The binding's index in the hook's `schedule` list (`_schedule`); `None`: found
        /// by name when the hook starts (the scheduler's tasks).
        index: Option<usize>,
        group: Option<String>,
    },
    /// `onStartup`, `beforeAll`/`afterAll`, `beforeHelm`/`afterHelm`…: the binding alone.
    Named {
        binding: String,
        /// The placeholder global beforeAll/afterAll runs are queued with: every kubernetes
        /// binding with no objects (the hook sees the snapshots of the time it starts).
        snapshots: Option<BTreeMap<String, Vec<Value>>>,
    },
}

impl ContextStub {
    /// A context of the binding alone (`onStartup`, `beforeHelm`…).
    pub fn named(binding: &str) -> ContextStub {
        ContextStub::Named {
            binding: binding.to_string(),
            snapshots: None,
        }
    }

    /// A watch event of binding `index` without its object or a filter result.
    pub fn event(binding: &str, index: usize, watch_event: WatchEvent) -> ContextStub {
        ContextStub::Event {
            binding: binding.to_string(),
            index,
            group: None,
            watch_event,
            object: None,
            filter_result: None,
        }
    }

    /// The binding's name.
    pub fn binding(&self) -> &str {
        match self {
            ContextStub::Synchronization { binding, .. }
            | ContextStub::Event { binding, .. }
            | ContextStub::Schedule { binding, .. }
            | ContextStub::Named { binding, .. } => binding,
        }
    }

    /// The binding's group when it was queued (non-empty).
    pub fn group(&self) -> Option<&str> {
        match self {
            ContextStub::Synchronization { group, .. }
            | ContextStub::Event { group, .. }
            | ContextStub::Schedule { group, .. } => group.as_deref().filter(|g| !g.is_empty()),
            ContextStub::Named { .. } => None,
        }
    }

    /// The index of a kubernetes binding's context (a Synchronization or an Event).
    pub fn kubernetes_index(&self) -> Option<usize> {
        match self {
            ContextStub::Synchronization { index, .. } | ContextStub::Event { index, .. } => {
                Some(*index)
            }
            _ => None,
        }
    }

    /// The `type` of the context (`Synchronization`, `Event`, `Schedule`); none for a
    /// named one.
    pub fn type_name(&self) -> Option<&'static str> {
        match self {
            ContextStub::Synchronization { .. } => Some("Synchronization"),
            ContextStub::Event { .. } => Some("Event"),
            ContextStub::Schedule { .. } => Some("Schedule"),
            ContextStub::Named { .. } => None,
        }
    }
}

impl Serialize for ContextStub {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Keys in the order of a JSON object's (sorted), as these stubs were written when
        // they were objects.
        let mut m = serializer.serialize_map(None)?;
        if let Some(i) = self.kubernetes_index() {
            m.serialize_entry(INDEX, &i)?;
        }
        if let ContextStub::Schedule { index: Some(i), .. } = self {
            m.serialize_entry(SCHEDULE, i)?;
        }
        m.serialize_entry("binding", self.binding())?;
        if let ContextStub::Event {
            filter_result: Some(f),
            ..
        } = self
        {
            m.serialize_entry("filterResult", f)?;
        }
        if let ContextStub::Synchronization { group: Some(g), .. }
        | ContextStub::Event { group: Some(g), .. }
        | ContextStub::Schedule { group: Some(g), .. } = self
        {
            m.serialize_entry("groupName", g)?;
        }
        if let ContextStub::Event {
            object: Some(o), ..
        } = self
        {
            m.serialize_entry("object", o)?;
        }
        if let ContextStub::Named {
            snapshots: Some(s), ..
        } = self
        {
            m.serialize_entry("snapshots", s)?;
        }
        if let Some(t) = self.type_name() {
            m.serialize_entry("type", t)?;
        }
        if let ContextStub::Event { watch_event, .. } = self {
            m.serialize_entry("watchEvent", watch_event.as_str())?;
        }
        m.end()
    }
}

/// Key of the kubernetes binding index in the JSON form (never shown to a hook).
const INDEX: &str = "_index";
/// Key of the schedule binding index in the JSON form (never shown to a hook).
const SCHEDULE: &str = "_schedule";

/// The JSON form, every key there is, before it is checked against the type.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    binding: String,
    #[serde(rename = "type", default)]
    type_: Option<String>,
    #[serde(rename = "_index", default)]
    index: Option<usize>,
    #[serde(rename = "_schedule", default)]
    schedule: Option<usize>,
    #[serde(rename = "groupName", default)]
    group: Option<String>,
    #[serde(rename = "watchEvent", default)]
    watch_event: Option<String>,
    #[serde(default, deserialize_with = "present")]
    object: Option<Value>,
    #[serde(rename = "filterResult", default, deserialize_with = "present")]
    filter_result: Option<Value>,
    #[serde(default)]
    snapshots: Option<BTreeMap<String, Vec<Value>>>,
}

/// A key that is there, `null` included (`filterResult: null` is a filter's answer).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl<'de> Deserialize<'de> for ContextStub {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ContextStub, D::Error> {
        ContextStub::try_from(Wire::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Why a journaled binding context does not fit its type, naming the binding and the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum StubError {
    /// A key its type does not have.
    #[error("{what} of binding {binding:?} has no {key}")]
    Unexpected {
        /// `a Schedule context`, `a named context`, …
        what: String,
        /// The binding.
        binding: String,
        /// The key.
        key: &'static str,
    },
    /// A key its type needs.
    #[error("{what} of binding {binding:?} needs {key}")]
    Missing {
        /// `an Event context`, …
        what: String,
        /// The binding.
        binding: String,
        /// The key.
        key: &'static str,
    },
    /// A `watchEvent` that is none of the three.
    #[error(
        "{what} of binding {binding:?}: unknown watchEvent {name:?}; expected Added, Modified or Deleted"
    )]
    UnknownWatchEvent {
        /// `an Event context`.
        what: String,
        /// The binding.
        binding: String,
        /// The value given.
        name: String,
    },
    /// A `type` that is none of the three.
    #[error(
        "a context of binding {binding:?} has the unknown type {type_:?}; expected Synchronization, Event or Schedule"
    )]
    UnknownType {
        /// The binding.
        binding: String,
        /// The type given.
        type_: String,
    },
}

impl TryFrom<Wire> for ContextStub {
    type Error = StubError;

    fn try_from(w: Wire) -> Result<ContextStub, StubError> {
        let type_ = w.type_.as_deref();
        let what = type_.map_or("a named context".to_string(), |t| format!("a {t} context"));
        let none = |there: bool, key: &'static str| {
            if there {
                Err(StubError::Unexpected {
                    what: what.clone(),
                    binding: w.binding.clone(),
                    key,
                })
            } else {
                Ok(())
            }
        };
        let needs = |key: &'static str| StubError::Missing {
            what: what.clone(),
            binding: w.binding.clone(),
            key,
        };
        let kubernetes = matches!(type_, Some("Synchronization" | "Event"));
        none(!kubernetes && w.index.is_some(), INDEX)?;
        none(type_ != Some("Schedule") && w.schedule.is_some(), SCHEDULE)?;
        none(type_.is_none() && w.group.is_some(), "groupName")?;
        none(
            type_ != Some("Event") && w.watch_event.is_some(),
            "watchEvent",
        )?;
        none(type_ != Some("Event") && w.object.is_some(), "object")?;
        none(
            type_ != Some("Event") && w.filter_result.is_some(),
            "filterResult",
        )?;
        none(type_.is_some() && w.snapshots.is_some(), "snapshots")?;
        Ok(match type_ {
            Some("Synchronization") => ContextStub::Synchronization {
                index: w.index.ok_or_else(|| needs(INDEX))?,
                binding: w.binding,
                group: w.group,
            },
            Some("Event") => {
                let name = w
                    .watch_event
                    .as_deref()
                    .ok_or_else(|| needs("watchEvent"))?;
                let watch_event =
                    WatchEvent::named(name).ok_or_else(|| StubError::UnknownWatchEvent {
                        what: what.clone(),
                        binding: w.binding.clone(),
                        name: name.to_string(),
                    })?;
                ContextStub::Event {
                    index: w.index.ok_or_else(|| needs(INDEX))?,
                    binding: w.binding,
                    group: w.group,
                    watch_event,
                    object: w.object.as_ref().map(SharedJson::new),
                    filter_result: w.filter_result.as_ref().map(SharedJson::new),
                }
            }
            Some("Schedule") => ContextStub::Schedule {
                binding: w.binding,
                index: w.schedule,
                group: w.group,
            },
            None => ContextStub::Named {
                binding: w.binding,
                snapshots: w.snapshots,
            },
            Some(other) => {
                return Err(StubError::UnknownType {
                    binding: w.binding,
                    type_: other.to_string(),
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape bosun has journaled, as the JSON text it wrote.
    const SHAPES: [&str; 12] = [
        r#"{"_index":0,"binding":"pods","type":"Synchronization"}"#,
        r#"{"_index":1,"binding":"nodes","groupName":"g","type":"Synchronization"}"#,
        r#"{"_index":0,"binding":"pods","type":"Event","watchEvent":"Added"}"#,
        r#"{"_index":2,"binding":"pods","filterResult":{"ready":true},"object":{"kind":"Pod","metadata":{"name":"a","namespace":"ns"}},"type":"Event","watchEvent":"Modified"}"#,
        r#"{"_index":0,"binding":"cms","filterResult":null,"groupName":"g","object":{"kind":"ConfigMap"},"type":"Event","watchEvent":"Deleted"}"#,
        r#"{"binding":"every-min","type":"Schedule"}"#,
        r#"{"binding":"every-min","groupName":"g","type":"Schedule"}"#,
        r#"{"_schedule":1,"binding":"s","groupName":"g","type":"Schedule"}"#,
        r#"{"binding":"onStartup"}"#,
        r#"{"binding":"beforeHelm"}"#,
        r#"{"binding":"beforeAll","snapshots":{"cms":[],"pods":[]}}"#,
        r#"{"binding":"afterAll","snapshots":{}}"#,
    ];

    #[test]
    fn every_journaled_shape_reads_back_and_writes_the_same_bytes() {
        for text in SHAPES {
            let stub: ContextStub =
                serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                serde_json::to_string(&stub).unwrap_or_default(),
                text,
                "{stub:?}"
            );
            // Through a `Value`, as a task's params are journaled.
            let value = serde_json::to_value(&stub).unwrap_or_default();
            assert_eq!(value.to_string(), text);
            assert_eq!(
                serde_json::from_value::<ContextStub>(value).ok(),
                Some(stub)
            );
        }
    }

    #[test]
    fn the_typed_fields_are_what_the_keys_said() {
        let read = |text: &str| serde_json::from_str::<ContextStub>(text).ok();
        assert_eq!(
            read(SHAPES[4]),
            Some(ContextStub::Event {
                binding: "cms".into(),
                index: 0,
                group: Some("g".into()),
                watch_event: WatchEvent::Deleted,
                object: Some(SharedJson::new(&serde_json::json!({"kind": "ConfigMap"}))),
                filter_result: Some(SharedJson::new(&Value::Null)),
            })
        );
        assert_eq!(
            read(SHAPES[7]),
            Some(ContextStub::Schedule {
                binding: "s".into(),
                index: Some(1),
                group: Some("g".into()),
            })
        );
        assert_eq!(read(SHAPES[8]), Some(ContextStub::named("onStartup")));
    }

    #[test]
    fn keys_that_do_not_fit_the_type_are_refused_by_name() {
        let err = |text: &str| {
            serde_json::from_str::<ContextStub>(text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(r#"{"binding":"pods","type":"Synchronization"}"#).contains("needs _index"));
        assert!(err(r#"{"_index":0,"binding":"t","type":"Schedule"}"#).contains("has no _index"));
        assert!(
            err(r#"{"_index":0,"binding":"p","type":"Event","watchEvent":"Bumped"}"#)
                .contains("unknown watchEvent \"Bumped\"")
        );
        assert!(err(r#"{"binding":"p","type":"Group"}"#).contains("unknown type \"Group\""));
        assert!(err(r#"{"binding":"p","n":1}"#).contains("unknown field `n`"));
    }
}
