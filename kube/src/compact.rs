//! A watched object's compact JSON written while the object is read: the text
//! `serde_json::Value` would print for it (keys sorted, a repeated key's last value kept,
//! strings and numbers in serde_json's form), without building the `Value` tree, printing
//! it and dropping it. The metadata a watch needs (name, namespace, resourceVersion) is
//! taken on the way, and where `apiVersion` and `kind` go is noted, for the list items
//! that lack them.

use std::fmt;
use std::ops::Range;

use serde::Serialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

/// The key serde_json's `Value` reads as an embedded raw value (with its `raw_value`
/// feature): its string is the JSON of the value.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// One of the top-level string fields a watch defaults (`apiVersion`, `kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A non-empty string: kept as it is.
    Given,
    /// Absent: it goes at byte `at` of the text, before the entry starting there, or
    /// before the closing brace.
    Missing { at: usize, before_entry: bool },
    /// Present with another value (the entry at `span`): replaced.
    Other { span: (usize, usize) },
}

/// An object's compact JSON and what a watch reads of it.
#[derive(Clone, Debug)]
pub(crate) struct Compact {
    text: String,
    /// `metadata.name`, `metadata.namespace`, `metadata.resourceVersion` when strings.
    pub(crate) name: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) resource_version: Option<String>,
    /// `Some` when the object is a JSON object: its `apiVersion` and `kind`, and whether it
    /// has any entry.
    top: Option<([Slot; 2], bool)>,
}

impl Compact {
    /// Reads one JSON value.
    pub(crate) fn read<'de, D: Deserializer<'de>>(d: D) -> Result<Compact, D::Error> {
        // The buffers of the last read on this thread, grown to an object's size already.
        let (out, keys, entries) = BUFFERS.take();
        let mut st = State {
            out,
            keys,
            entries,
            ..State::default()
        };
        let read = ValueSeed {
            st: &mut st,
            place: Place::Root,
        }
        .deserialize(d);
        let text = std::str::from_utf8(&st.out).map(str::to_owned);
        st.out.clear();
        st.keys.clear();
        st.entries.clear();
        if st.out.capacity() > KEPT_BUFFER {
            st.out = Vec::new();
        }
        BUFFERS.set((
            std::mem::take(&mut st.out),
            std::mem::take(&mut st.keys),
            std::mem::take(&mut st.entries),
        ));
        read?;
        Ok(Compact {
            text: text.map_err(de::Error::custom)?,
            name: st.name,
            namespace: st.namespace,
            resource_version: st.resource_version,
            top: st.top,
        })
    }

    /// The text, with `apiVersion` and `kind` set to these when they are not non-empty
    /// strings (a JSON object only; other values are kept as they are).
    pub(crate) fn into_text(self, api_version: &str, kind: &str) -> String {
        let Some((slots, has_entries)) = self.top else {
            return self.text;
        };
        if slots.iter().all(|s| *s == Slot::Given) {
            return self.text;
        }
        let mut out = String::with_capacity(self.text.len() + api_version.len() + kind.len() + 32);
        let mut from = 0;
        let mut inserted_at_close = false;
        for (slot, (key, value)) in slots
            .iter()
            .zip([("apiVersion", api_version), ("kind", kind)])
        {
            let entry = format!("{}:{}", Value::from(key), Value::from(value));
            match *slot {
                Slot::Given => {}
                Slot::Missing { at, before_entry } => {
                    out.push_str(self.text.get(from..at).unwrap_or_default());
                    from = at;
                    if before_entry {
                        out.push_str(&entry);
                        out.push(',');
                    } else {
                        if has_entries || inserted_at_close {
                            out.push(',');
                        }
                        out.push_str(&entry);
                        inserted_at_close = true;
                    }
                }
                Slot::Other { span: (start, end) } => {
                    out.push_str(self.text.get(from..start).unwrap_or_default());
                    out.push_str(&entry);
                    from = end;
                }
            }
        }
        out.push_str(self.text.get(from..).unwrap_or_default());
        out
    }
}

/// The largest output buffer kept for the next read (a rare large object's is dropped).
const KEPT_BUFFER: usize = 64 * 1024;

thread_local! {
    /// The buffers of reads on this thread (text, keys, entries), kept between them.
    static BUFFERS: std::cell::Cell<(Vec<u8>, String, Vec<Entry>)> =
        const { std::cell::Cell::new((Vec::new(), String::new(), Vec::new())) };
}

/// Where a value is in the object: what is taken of it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Root,
    /// The value of the top-level `apiVersion` (0) or `kind` (1).
    Type(usize),
    Metadata,
    Name,
    Namespace,
    ResourceVersion,
    Other,
}

/// The place of the value of `key` in a map at `place`.
fn child(place: Place, key: &str) -> Place {
    match (place, key) {
        (Place::Root, "apiVersion") => Place::Type(0),
        (Place::Root, "kind") => Place::Type(1),
        (Place::Root, "metadata") => Place::Metadata,
        (Place::Metadata, "name") => Place::Name,
        (Place::Metadata, "namespace") => Place::Namespace,
        (Place::Metadata, "resourceVersion") => Place::ResourceVersion,
        _ => Place::Other,
    }
}

/// A map entry being written: its key (in `State::keys`) and its `"key":value` text (in
/// `State::out`).
struct Entry {
    key: Range<usize>,
    span: Range<usize>,
}

#[derive(Default)]
struct State {
    out: Vec<u8>,
    /// The keys of the maps being read, innermost last.
    keys: String,
    /// The entries of the maps being read, innermost last.
    entries: Vec<Entry>,
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    /// Whether the top-level `apiVersion` and `kind` (last of each, if repeated) are
    /// non-empty strings.
    given: [bool; 2],
    top: Option<([Slot; 2], bool)>,
}

impl State {
    fn key(&self, e: &Entry) -> &str {
        self.keys.get(e.key.clone()).unwrap_or_default()
    }

    fn put<T: Serialize + ?Sized, E: de::Error>(&mut self, v: &T) -> Result<(), E> {
        serde_json::to_writer(&mut self.out, v).map_err(E::custom)
    }

    fn string<E: de::Error>(&mut self, place: Place, s: &str) -> Result<(), E> {
        match place {
            Place::Type(i) => self.given[i] = !s.is_empty(),
            Place::Name => self.name = Some(s.to_owned()),
            Place::Namespace => self.namespace = Some(s.to_owned()),
            Place::ResourceVersion => self.resource_version = Some(s.to_owned()),
            _ => {}
        }
        self.put(s)
    }

    /// Forgets what an earlier entry of the same key gave.
    fn enter(&mut self, place: Place) {
        match place {
            Place::Type(i) => self.given[i] = false,
            Place::Metadata => {
                self.name = None;
                self.namespace = None;
                self.resource_version = None;
            }
            Place::Name => self.name = None,
            Place::Namespace => self.namespace = None,
            Place::ResourceVersion => self.resource_version = None,
            Place::Root | Place::Other => {}
        }
    }

    /// Puts the entries of the map whose text starts at `body` (after its `{`) and whose
    /// entries start at `first` in key order, each key once (its last value).
    fn order(&mut self, first: usize, body: usize) {
        let entries = &self.entries[first..];
        if entries
            .windows(2)
            .all(|w| self.key(&w[0]) < self.key(&w[1]))
        {
            return;
        }
        let mut order: Vec<usize> = (first..self.entries.len()).collect();
        order.sort_by(|&a, &b| {
            self.key(&self.entries[a])
                .cmp(self.key(&self.entries[b]))
                .then(a.cmp(&b))
        });
        let written = self.out.split_off(body);
        let mut kept = Vec::with_capacity(order.len());
        for (n, &i) in order.iter().enumerate() {
            let later = order.get(n + 1).map(|&j| &self.entries[j]);
            if later.is_some_and(|l| self.key(l) == self.key(&self.entries[i])) {
                continue;
            }
            let e = &self.entries[i];
            if !kept.is_empty() {
                self.out.push(b',');
            }
            let start = self.out.len();
            let span = (e.span.start - body)..(e.span.end - body);
            self.out
                .extend_from_slice(written.get(span).unwrap_or_default());
            kept.push(Entry {
                key: e.key.clone(),
                span: start..self.out.len(),
            });
        }
        self.entries.truncate(first);
        self.entries.extend(kept);
    }

    /// The top-level `apiVersion` and `kind`, once the root map's entries are in order.
    fn top_slots(&self, first: usize) -> [Slot; 2] {
        let entries = &self.entries[first..];
        let close = self.out.len();
        let mut slots = [Slot::Given; 2];
        for (i, name) in ["apiVersion", "kind"].into_iter().enumerate() {
            slots[i] = match entries.iter().find(|e| self.key(e) >= name) {
                Some(e) if self.key(e) == name => {
                    if self.given[i] {
                        Slot::Given
                    } else {
                        Slot::Other {
                            span: (e.span.start, e.span.end),
                        }
                    }
                }
                Some(e) => Slot::Missing {
                    at: e.span.start,
                    before_entry: true,
                },
                None => Slot::Missing {
                    at: close,
                    before_entry: false,
                },
            };
        }
        slots
    }
}

struct ValueSeed<'a> {
    st: &'a mut State,
    place: Place,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.st.put(&v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.st.put(&v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.st.put(&v)
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<(), E> {
        let n =
            <Number as serde::Deserialize>::deserialize(de::value::I128Deserializer::<E>::new(v))?;
        self.st.put(&n)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<(), E> {
        let n =
            <Number as serde::Deserialize>::deserialize(de::value::U128Deserializer::<E>::new(v))?;
        self.st.put(&n)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        match Number::from_f64(v) {
            Some(n) => self.st.put(&n),
            None => self.st.put(&()),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.st.string(self.place, v)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.st.put(&())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.st.put(&())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.st.out.push(b'[');
        let mut first = true;
        loop {
            if !first {
                self.st.out.push(b',');
            }
            let at = self.st.out.len();
            let seed = ValueSeed {
                st: &mut *self.st,
                place: Place::Other,
            };
            if seq.next_element_seed(seed)?.is_none() {
                // No element: the comma written for it goes.
                self.st.out.truncate(at.saturating_sub(usize::from(!first)));
                break;
            }
            first = false;
        }
        self.st.out.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let st = self.st;
        let (first, keys_base) = (st.entries.len(), st.keys.len());
        st.out.push(b'{');
        let body = st.out.len();
        while let Some(key) = map.next_key_seed(KeySeed { keys: &mut st.keys })? {
            let name = st.keys.get(key.clone()).unwrap_or_default();
            if st.entries.len() == first && name == RAW_VALUE_TOKEN {
                // serde_json's Value reads the value's string as the JSON of the whole.
                st.out.truncate(body - 1);
                st.keys.truncate(keys_base);
                let json: String = map.next_value()?;
                let mut d = serde_json::Deserializer::from_str(&json);
                ValueSeed {
                    st: &mut *st,
                    place: self.place,
                }
                .deserialize(&mut d)
                .and_then(|()| d.end())
                .map_err(de::Error::custom)?;
                return Ok(());
            }
            if st.entries.len() > first {
                st.out.push(b',');
            }
            let start = st.out.len();
            let place = child(self.place, name);
            serde_json::to_writer(&mut st.out, name).map_err(de::Error::custom)?;
            st.enter(place);
            st.out.push(b':');
            map.next_value_seed(ValueSeed {
                st: &mut *st,
                place,
            })?;
            st.entries.push(Entry {
                key,
                span: start..st.out.len(),
            });
        }
        st.order(first, body);
        if self.place == Place::Root {
            st.top = Some((st.top_slots(first), st.entries.len() > first));
        }
        st.out.push(b'}');
        st.entries.truncate(first);
        st.keys.truncate(keys_base);
        Ok(())
    }
}

/// Reads a map key into the keys of the maps being read.
struct KeySeed<'a> {
    keys: &'a mut String,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Range<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Range<usize>, D::Error> {
        d.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Range<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Range<usize>, E> {
        let start = self.keys.len();
        self.keys.push_str(v);
        Ok(start..self.keys.len())
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Range<usize>, E> {
        match std::str::from_utf8(v) {
            Ok(s) => self.visit_str(s),
            Err(_) => Err(E::invalid_value(de::Unexpected::Bytes(v), &self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the watch stored before: the object parsed into a `Value`, its `apiVersion`
    /// and `kind` defaulted, printed; and its metadata read from the `Value`.
    fn through_value(text: &str) -> (String, [Option<String>; 3]) {
        let mut object: Value = serde_json::from_str(text).expect("json");
        let m = &object["metadata"];
        let meta =
            ["name", "namespace", "resourceVersion"].map(|k| m[k].as_str().map(str::to_owned));
        if let Some(map) = object.as_object_mut() {
            for (key, default) in [("apiVersion", "v1"), ("kind", "Pod")] {
                match map.get(key) {
                    Some(Value::String(given)) if !given.is_empty() => {}
                    _ => {
                        map.insert(key.into(), Value::String(default.to_string()));
                    }
                }
            }
        }
        (object.to_string(), meta)
    }

    fn compact(text: &str) -> (String, [Option<String>; 3]) {
        let c = Compact::read(&mut serde_json::Deserializer::from_str(text)).expect("json");
        let meta = [
            c.name.clone(),
            c.namespace.clone(),
            c.resource_version.clone(),
        ];
        (c.into_text("v1", "Pod"), meta)
    }

    #[test]
    fn objects_are_written_as_value_prints_them() {
        for text in [
            r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"k":"v"}}"#,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"1","name":"b"}}"#,
            r#"{}"#,
            r#"{"zzz":1}"#,
            r#"{"a":1}"#,
            r#"{"kind":""}"#,
            r#"{"apiVersion":7,"kind":null,"x":[]}"#,
            r#"{"apiVersion":"apps/v1","kind":{"a":1},"b":2}"#,
            r#"{"b":1,"a":2,"b":3,"a":{"z":1,"y":[1,{"d":1,"c":2}]}}"#,
            r#" { "metadata" : { "name" : "x\"y" , "name" : 5 } , "metadata" : { "namespace" : "n" } } "#,
            r#"{"metadata":{"name":"a"},"metadata":7}"#,
            r#"{"s":"\u003c\/\u00e9\ud83d\ude00\t\u0001\u007f","\u0062":"k"}"#,
            r#"{"n":[0,-0,1.0,1e3,-1.5e-7,12345678901234567890,123456789012345678901234,-9223372036854775808,-9223372036854775809,3.141592653589793]}"#,
            r#"{"t":true,"f":false,"z":null,"e":{},"l":[[],[{}]]}"#,
            r#"{"é":1,"e":2,"E":3,"":4}"#,
            r#"[{"b":1,"a":2}]"#,
            r#""text""#,
            r#"42"#,
            r#"null"#,
            r#"{"$serde_json::private::RawValue":"{\"b\":1,\"a\":{\"metadata\":{}}}"}"#,
            r#"{"m":{"$serde_json::private::RawValue":"[1, {\"y\":2,\"x\":3}]"}}"#,
        ] {
            assert_eq!(compact(text), through_value(text), "{text}");
        }
    }

    fn next(seed: &mut u64, n: u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) % n
    }

    /// A random JSON text: objects with keys in any order (some repeated), whitespace,
    /// escapes and numbers of every form.
    fn random_json(seed: &mut u64, depth: u32, out: &mut String) {
        let pick = if depth == 0 { 0 } else { next(seed, 8) };
        let space = [" ", "", "\n", ""][next(seed, 4) as usize];
        match pick {
            0 => {
                out.push('{');
                let n = next(seed, 7);
                for i in 0..n {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(space);
                    let key = [
                        "apiVersion",
                        "kind",
                        "metadata",
                        "name",
                        "namespace",
                        "resourceVersion",
                        "a",
                        "b\\u0041",
                        "é",
                        "spec",
                    ][next(seed, 10) as usize];
                    out.push_str(&format!("\"{key}\"{space}:"));
                    random_json(seed, depth + 1, out);
                }
                out.push_str(space);
                out.push('}');
            }
            1 => {
                out.push('[');
                let n = next(seed, 4);
                for i in 0..n {
                    if i > 0 {
                        out.push(',');
                        out.push_str(space);
                    }
                    random_json(seed, depth + 1, out);
                }
                out.push(']');
            }
            2 | 3 => {
                let s = [
                    "",
                    "x",
                    "a\\\"b",
                    "\\u00e9\\n",
                    "\\/",
                    "ns",
                    "v1",
                    "\\ud83d\\ude00",
                ][next(seed, 8) as usize];
                out.push_str(&format!("\"{s}\""));
            }
            4 | 5 => {
                let n = [
                    "0",
                    "-1",
                    "7",
                    "1.5",
                    "-0.0",
                    "2e10",
                    "1E-3",
                    "18446744073709551615",
                    "18446744073709551616",
                    "-9223372036854775809",
                    "0.1",
                ][next(seed, 11) as usize];
                out.push_str(n);
            }
            6 => out.push_str(["true", "false", "null"][next(seed, 3) as usize]),
            _ => {
                if depth < 4 {
                    random_json(seed, 0, out);
                } else {
                    out.push_str("{}");
                }
            }
        }
    }

    #[test]
    fn random_objects_are_written_as_value_prints_them() {
        let mut seed = 7;
        for _ in 0..5000 {
            let mut text = String::new();
            random_json(&mut seed, 0, &mut text);
            assert_eq!(compact(&text), through_value(&text), "{text}");
        }
    }
}
