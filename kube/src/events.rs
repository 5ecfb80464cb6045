//! One Event recorder for every subsystem (the lambda controllers, the deployer), which
//! correlates Events as client-go's recorder does, so that `kubectl describe` shows what a
//! metacontroller or landscaper user is used to:
//!
//! ```text
//!   note on object ──► similar? (same object, type, reason; 10 different messages in
//!                      10 min → "(combined from similar events): …")
//!                 ──► seen before? (same object, type, reason, message)
//!                       yes: count + 1, lastTimestamp now → PATCH that Event
//!                       no:  count 1 → POST a new Event, named <object>.<hex nanos>
//!                 ──► per-object token bucket (qps, burst): over it, the write is
//!                     skipped; the count still rises, and the next write carries it
//! ```
//!
//! A PATCH of an Event that is gone (expired, deleted) creates it again with the count so
//! far. As client-go, the cache of seen Events is bounded ([`CACHE_ENTRIES`], least
//! recently used out first) and the bucket refills at `qps` (default one Event per five
//! minutes after a burst of 25, client-go's defaults and metacontroller's
//! `--events-qps` / `--events-burst`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use kube::api::{Patch, PatchParams, PostParams};
use kube::core::Request;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// Per-object Event rate limit (metacontroller's `--events-qps`, `--events-burst`).
#[derive(Clone, Copy, Debug)]
pub struct EventLimits {
    /// Tokens per second.
    pub qps: f64,
    /// Tokens at most, and at first.
    pub burst: u32,
}

impl Default for EventLimits {
    fn default() -> Self {
        EventLimits {
            qps: 1.0 / 300.0,
            burst: 25,
        }
    }
}

/// Seen Events and similar-event groups kept at most (client-go's `maxLruCacheEntries`).
pub(crate) const CACHE_ENTRIES: usize = 4096;
/// Different messages of similar Events within [`SIMILAR_WINDOW`] after which they are
/// combined into one (client-go's `defaultAggregateMaxEvents`).
pub(crate) const SIMILAR_MESSAGES: usize = 10;
/// How long similar Events are looked at together (`defaultAggregateIntervalInSeconds`).
pub(crate) const SIMILAR_WINDOW: Duration = Duration::from_secs(600);
/// The message prefix of combined Events, as client-go writes it.
pub(crate) const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// An Event to record: on which object, of which type, why and what.
#[derive(Clone, Debug, PartialEq)]
pub struct Note<'a> {
    /// The involved object (its apiVersion, kind and metadata are read).
    pub object: &'a Value,
    /// `Normal` or `Warning`.
    pub type_: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

/// What the recorder decided for one note (pure; the write follows it).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Decision {
    /// POST a new Event.
    Create { event: Value },
    /// PATCH the Event `name` with `patch`; if it is gone, POST `event`.
    Update {
        name: String,
        patch: Value,
        event: Value,
    },
    /// Over the object's rate limit: nothing is written now (the count was kept).
    Skip { count: u32 },
}

/// The correlation state: pure, clock passed in, tested without a cluster.
#[derive(Default)]
pub(crate) struct Correlator {
    limits: EventLimits,
    component: String,
    /// Identical Events seen: key → the Event's name, count, first time; and use order.
    seen: Lru<Seen>,
    /// Similar Events: key without the message → the messages seen in the window.
    similar: Lru<Similar>,
    /// Per object: tokens, and when they were counted.
    buckets: Lru<(f64, Instant)>,
}

struct Seen {
    name: String,
    count: u32,
    first: String,
}

struct Similar {
    messages: BTreeSet<String>,
    since: Instant,
}

/// A map bounded to [`CACHE_ENTRIES`] that drops the least recently used entry.
struct Lru<V> {
    entries: HashMap<String, (V, u64)>,
    tick: u64,
}

impl<V> Default for Lru<V> {
    fn default() -> Self {
        Lru {
            entries: HashMap::new(),
            tick: 0,
        }
    }
}

impl<V> Lru<V> {
    /// The entry of `key`, made by `make` if there is none (the least recently used one
    /// goes first when the cache is full).
    fn get_or_insert_with(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        if self.entries.len() >= CACHE_ENTRIES && !self.entries.contains_key(key) {
            // Linear, and only once the cache is full: one scan per new key then.
            if let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        self.tick += 1;
        let tick = self.tick;
        let (value, used) = self
            .entries
            .entry(key.to_string())
            .or_insert_with(|| (make(), tick));
        *used = tick;
        value
    }
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// `involvedObject` of an Event about `object`.
fn involved(object: &Value) -> Value {
    let m = &object["metadata"];
    let mut r = json!({
        "apiVersion": object["apiVersion"],
        "kind": object["kind"],
        "name": m["name"],
        "uid": m["uid"],
        "resourceVersion": m["resourceVersion"],
    });
    if let Some(ns) = m["namespace"].as_str().filter(|ns| !ns.is_empty()) {
        r["namespace"] = json!(ns);
    }
    r
}

impl Correlator {
    /// A correlator writing as `component` (`source.component`, `reportingComponent`).
    pub fn new(component: &str, limits: EventLimits) -> Correlator {
        Correlator {
            limits,
            component: component.to_string(),
            ..Correlator::default()
        }
    }

    /// The key of the involved object (the rate limit's unit, and part of every key).
    fn object_key(object: &Value) -> String {
        let m = &object["metadata"];
        [
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
            m["namespace"].as_str().unwrap_or_default(),
            m["name"].as_str().unwrap_or_default(),
            m["uid"].as_str().unwrap_or_default(),
        ]
        .join("\u{0}")
    }

    fn allowed(&mut self, object: &str, now: Instant) -> bool {
        let burst = f64::from(self.limits.burst.max(1));
        let (tokens, at) = self.buckets.get_or_insert_with(object, || (burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.limits.qps).min(burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Decides what `note` becomes at `now` (monotonic) and `wall` (the Event's times).
    pub fn decide(&mut self, note: &Note<'_>, now: Instant, wall: SystemTime) -> Decision {
        let object = Self::object_key(note.object);
        let group = [object.as_str(), note.type_, note.reason].join("\u{0}");
        // Similar Events: after SIMILAR_MESSAGES different messages, one combined Event.
        let fresh = || Similar {
            messages: BTreeSet::new(),
            since: now,
        };
        let similar = self.similar.get_or_insert_with(&group, fresh);
        if now.duration_since(similar.since) > SIMILAR_WINDOW {
            *similar = fresh();
        }
        similar.messages.insert(note.message.to_string());
        let combined = similar.messages.len() >= SIMILAR_MESSAGES;
        let (key, message) = if combined {
            (group, format!("{COMBINED_PREFIX}{}", note.message))
        } else {
            (
                [group.as_str(), note.message].join("\u{0}"),
                note.message.to_string(),
            )
        };
        let now_text = rfc3339(wall);
        let seen = self.seen.get_or_insert_with(&key, || {
            let nanos = wall
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            let base = note.object["metadata"]["name"].as_str().unwrap_or("object");
            Seen {
                name: format!("{base}.{nanos:x}"),
                count: 0,
                first: now_text.clone(),
            }
        });
        seen.count += 1;
        let (name, count, first) = (seen.name.clone(), seen.count, seen.first.clone());
        let seen_before = count > 1;
        if !self.allowed(&object, now) {
            return Decision::Skip { count };
        }
        let namespace = note.object["metadata"]["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
            .unwrap_or("default");
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved(note.object),
            "reason": note.reason,
            "message": message,
            "type": note.type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": first,
            "lastTimestamp": now_text,
            "count": count,
        });
        if seen_before {
            Decision::Update {
                name,
                patch: json!({"count": count, "lastTimestamp": now_text, "message": message}),
                event,
            }
        } else {
            Decision::Create { event }
        }
    }
}

/// The Event recorder: a [`Correlator`] and the writes it decides.
pub struct EventRecorder {
    client: kube::Client,
    correlator: Mutex<Correlator>,
}

fn events_api() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    }
}

impl EventRecorder {
    /// A recorder writing with `client` as `component`.
    pub fn new(client: kube::Client, component: &str, limits: EventLimits) -> EventRecorder {
        EventRecorder {
            client,
            correlator: Mutex::new(Correlator::new(component, limits)),
        }
    }

    /// Records `note`; a refused write is logged, never returned (an Event is advice).
    pub async fn record(&self, note: Note<'_>) {
        let decision = self
            .correlator
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .decide(&note, Instant::now(), SystemTime::now());
        if let Err(e) = self.write(decision).await {
            tracing::warn!(reason = %note.reason, "cannot record an Event: {e}");
        }
    }

    async fn write(&self, decision: Decision) -> Result<(), kube::Error> {
        let (event, patch) = match decision {
            Decision::Skip { count } => {
                tracing::debug!(count, "event held back by the rate limit");
                return Ok(());
            }
            Decision::Create { event } => (event, None),
            Decision::Update { name, patch, event } => (event, Some((name, patch))),
        };
        let namespace = event["metadata"]["namespace"].as_str().unwrap_or("default");
        let request = Request::new(<kube::api::DynamicObject as kube::Resource>::url_path(
            &events_api(),
            Some(namespace),
        ));
        if let Some((name, patch)) = patch {
            let sent = request
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .map_err(kube::Error::BuildRequest)?;
            match self.client.request::<Value>(sent).await {
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                other => return other.map(|_| ()),
            }
        }
        let body = serde_json::to_vec(&event).map_err(kube::Error::SerdeError)?;
        let sent = request
            .create(&PostParams::default(), body)
            .map_err(kube::Error::BuildRequest)?;
        self.client.request::<Value>(sent).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7"}})
    }

    fn note<'a>(object: &'a Value, message: &'a str) -> Note<'a> {
        Note {
            object,
            type_: "Warning",
            reason: "SyncError",
            message,
        }
    }

    #[test]
    fn identical_events_become_one_whose_count_rises() {
        let mut c = Correlator::new("metacontroller", EventLimits::default());
        let (t0, w0) = (
            Instant::now(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1000),
        );
        let pod = pod();
        let first = c.decide(&note(&pod, "boom"), t0, w0);
        let Decision::Create { event } = first else {
            panic!("the first one is created: {first:?}")
        };
        assert_eq!(event["count"], 1);
        assert_eq!(event["involvedObject"]["uid"], "u1");
        assert_eq!(event["metadata"]["namespace"], "ns");
        let name = event["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_string();
        assert!(name.starts_with("p."), "{name}");
        for n in 2..=14 {
            let w = w0 + Duration::from_secs(n);
            match c.decide(&note(&pod, "boom"), t0 + Duration::from_secs(n), w) {
                Decision::Update {
                    name: patched,
                    patch,
                    ..
                } => {
                    assert_eq!(patched, name);
                    assert_eq!(patch["count"], n);
                    assert_eq!(patch["lastTimestamp"], rfc3339(w));
                }
                other => panic!("repeat {n} patches: {other:?}"),
            }
        }
        // Another message is another Event.
        assert!(matches!(
            c.decide(&note(&pod, "other"), t0, w0),
            Decision::Create { .. }
        ));
    }

    #[test]
    fn over_the_rate_limit_the_count_is_kept_for_the_next_write() {
        let limits = EventLimits { qps: 1.0, burst: 2 };
        let mut c = Correlator::new("bosun-deployer", limits);
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let pod = pod();
        assert!(matches!(
            c.decide(&note(&pod, "x"), t0, w0),
            Decision::Create { .. }
        ));
        assert!(matches!(
            c.decide(&note(&pod, "x"), t0, w0),
            Decision::Update { .. }
        ));
        assert_eq!(
            c.decide(&note(&pod, "x"), t0, w0),
            Decision::Skip { count: 3 }
        );
        // A second later the bucket has a token again: the write carries all four.
        match c.decide(&note(&pod, "x"), t0 + Duration::from_secs(1), w0) {
            Decision::Update { patch, .. } => assert_eq!(patch["count"], 4),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ten_different_messages_of_one_reason_are_combined() {
        let mut c = Correlator::new("metacontroller", EventLimits::default());
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let pod = pod();
        for i in 0..SIMILAR_MESSAGES - 1 {
            let m = format!("failure {i}");
            assert!(matches!(
                c.decide(&note(&pod, &m), t0, w0),
                Decision::Create { .. }
            ));
        }
        let Decision::Create { event } = c.decide(&note(&pod, "failure 9"), t0, w0) else {
            panic!("the combined Event is new")
        };
        assert_eq!(event["message"], format!("{COMBINED_PREFIX}failure 9"));
        // Further similar ones update the combined Event.
        match c.decide(&note(&pod, "failure 10"), t0, w0) {
            Decision::Update { patch, .. } => {
                assert_eq!(patch["count"], 2);
                assert_eq!(patch["message"], format!("{COMBINED_PREFIX}failure 10"));
            }
            other => panic!("{other:?}"),
        }
        // After the window, messages are counted afresh.
        let later = t0 + SIMILAR_WINDOW + Duration::from_secs(1);
        match c.decide(&note(&pod, "failure 11"), later, w0) {
            Decision::Create { event } => assert_eq!(event["message"], "failure 11"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut lru: Lru<u32> = Lru::default();
        for i in 0..CACHE_ENTRIES + 10 {
            lru.get_or_insert_with(&i.to_string(), || 0);
            // Key 0 stays in use, so it is never the oldest.
            lru.get_or_insert_with("0", || 0);
        }
        assert_eq!(lru.entries.len(), CACHE_ENTRIES);
        assert!(lru.entries.contains_key("0"));
        assert!(!lru.entries.contains_key("1"));
    }
}
