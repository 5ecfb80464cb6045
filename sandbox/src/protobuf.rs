//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`), decoded to
//! the JSON the same object would have been sent as.
//!
//! client-go's typed clients (kubectl ≥ 1.32, Helm's release storage) send the 4-byte
//! magic `k8s\0` and a `runtime.Unknown` envelope whose `raw` field is the typed object.
//! The decoder is table driven: each supported kind is a list of (field number, JSON name,
//! type) taken from the upstream `generated.proto` files. Fields Go would omit from JSON
//! (empty strings, zero non-pointer integers, empty maps and lists, zero times) are omitted.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Map, Value};

/// A body that cannot be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ProtobufError {
    /// The `k8s\0` magic is missing.
    #[error("not a Kubernetes protobuf body: it does not start with the k8s\\0 magic")]
    BadMagic,
    /// The wire data ends early or is malformed.
    #[error("malformed protobuf at byte {at}: {what}")]
    Malformed {
        /// Offset within the message being decoded.
        at: usize,
        /// What was wrong.
        what: &'static str,
    },
    /// A kind the sandbox has no protobuf table for.
    #[error(
        "protobuf bodies of kind {kind:?} in {api_version:?} are not supported by the sandbox; send JSON (application/json) instead"
    )]
    UnsupportedKind {
        /// `apiVersion` of the envelope.
        api_version: String,
        /// `kind` of the envelope.
        kind: String,
    },
}

#[derive(Clone, Copy)]
enum Ty {
    /// A string; empty strings are omitted.
    Str,
    /// An integer that Go omits when zero.
    IntOmitZero,
    /// An integer behind a pointer: kept whenever present.
    Int,
    /// A boolean (all booleans in these kinds are pointers: kept whenever present).
    Bool,
    /// A nested message.
    Msg(&'static [F]),
    /// Repeated strings.
    StrList,
    /// Repeated messages.
    MsgList(&'static [F]),
    /// `map<string, string>`.
    StrMap,
    /// `map<string, bytes>` (base64 values).
    BytesMap,
    /// `metav1.Time`: RFC 3339 seconds.
    Time,
    /// `metav1.MicroTime`: RFC 3339 with microseconds.
    MicroTime,
    /// `metav1.FieldsV1`: raw JSON.
    FieldsV1,
}

/// One field of a message table.
struct F(u32, &'static str, Ty);

use Ty::*;

static OWNER_REFERENCE: &[F] = &[
    F(5, "apiVersion", Str),
    F(1, "kind", Str),
    F(3, "name", Str),
    F(4, "uid", Str),
    F(6, "controller", Bool),
    F(7, "blockOwnerDeletion", Bool),
];

static MANAGED_FIELDS_ENTRY: &[F] = &[
    F(1, "manager", Str),
    F(2, "operation", Str),
    F(3, "apiVersion", Str),
    F(4, "time", Time),
    F(6, "fieldsType", Str),
    F(7, "fieldsV1", FieldsV1),
    F(8, "subresource", Str),
];

static OBJECT_META: &[F] = &[
    F(1, "name", Str),
    F(2, "generateName", Str),
    F(3, "namespace", Str),
    F(4, "selfLink", Str),
    F(5, "uid", Str),
    F(6, "resourceVersion", Str),
    F(7, "generation", IntOmitZero),
    F(8, "creationTimestamp", Time),
    F(9, "deletionTimestamp", Time),
    F(10, "deletionGracePeriodSeconds", Int),
    F(11, "labels", StrMap),
    F(12, "annotations", StrMap),
    F(13, "ownerReferences", MsgList(OWNER_REFERENCE)),
    F(14, "finalizers", StrList),
    F(17, "managedFields", MsgList(MANAGED_FIELDS_ENTRY)),
];

static PRECONDITIONS: &[F] = &[F(1, "uid", Str), F(2, "resourceVersion", Str)];

static DELETE_OPTIONS: &[F] = &[
    F(1, "gracePeriodSeconds", Int),
    F(2, "preconditions", Msg(PRECONDITIONS)),
    F(3, "orphanDependents", Bool),
    F(4, "propagationPolicy", Str),
    F(5, "dryRun", StrList),
    F(6, "ignoreStoreReadErrorWithClusterBreakingPotential", Bool),
];

static NAMESPACE_CONDITION: &[F] = &[
    F(1, "type", Str),
    F(2, "status", Str),
    F(4, "lastTransitionTime", Time),
    F(5, "reason", Str),
    F(6, "message", Str),
];

static NAMESPACE: &[F] = &[
    F(1, "metadata", Msg(OBJECT_META)),
    F(2, "spec", Msg(&[F(1, "finalizers", StrList)])),
    F(
        3,
        "status",
        Msg(&[
            F(1, "phase", Str),
            F(2, "conditions", MsgList(NAMESPACE_CONDITION)),
        ]),
    ),
];

static CONFIG_MAP: &[F] = &[
    F(1, "metadata", Msg(OBJECT_META)),
    F(4, "immutable", Bool),
    F(2, "data", StrMap),
    F(3, "binaryData", BytesMap),
];

static SECRET: &[F] = &[
    F(1, "metadata", Msg(OBJECT_META)),
    F(5, "immutable", Bool),
    F(2, "data", BytesMap),
    F(4, "stringData", StrMap),
    F(3, "type", Str),
];

static OBJECT_REFERENCE: &[F] = &[
    F(1, "kind", Str),
    F(2, "namespace", Str),
    F(3, "name", Str),
    F(4, "uid", Str),
    F(5, "apiVersion", Str),
    F(6, "resourceVersion", Str),
    F(7, "fieldPath", Str),
];

static SERVICE_ACCOUNT: &[F] = &[
    F(1, "metadata", Msg(OBJECT_META)),
    F(2, "secrets", MsgList(OBJECT_REFERENCE)),
    F(3, "imagePullSecrets", MsgList(&[F(1, "name", Str)])),
    F(4, "automountServiceAccountToken", Bool),
];

static EVENT_SOURCE: &[F] = &[F(1, "component", Str), F(2, "host", Str)];
static EVENT_SERIES: &[F] = &[
    F(1, "count", IntOmitZero),
    F(2, "lastObservedTime", MicroTime),
];

static CORE_EVENT: &[F] = &[
    F(1, "metadata", Msg(OBJECT_META)),
    F(2, "involvedObject", Msg(OBJECT_REFERENCE)),
    F(3, "reason", Str),
    F(4, "message", Str),
    F(5, "source", Msg(EVENT_SOURCE)),
    F(6, "firstTimestamp", Time),
    F(7, "lastTimestamp", Time),
    F(8, "count", IntOmitZero),
    F(9, "type", Str),
    F(10, "eventTime", MicroTime),
    F(11, "series", Msg(EVENT_SERIES)),
    F(12, "action", Str),
    F(13, "related", Msg(OBJECT_REFERENCE)),
    F(14, "reportingComponent", Str),
    F(15, "reportingInstance", Str),
];

static EVENTS_V1_EVENT: &[F] = &[
    F(1, "metadata", Msg(OBJECT_META)),
    F(2, "eventTime", MicroTime),
    F(3, "series", Msg(EVENT_SERIES)),
    F(4, "reportingController", Str),
    F(5, "reportingInstance", Str),
    F(6, "action", Str),
    F(7, "reason", Str),
    F(8, "regarding", Msg(OBJECT_REFERENCE)),
    F(9, "related", Msg(OBJECT_REFERENCE)),
    F(10, "note", Str),
    F(11, "type", Str),
    F(12, "deprecatedSource", Msg(EVENT_SOURCE)),
    F(13, "deprecatedFirstTimestamp", Time),
    F(14, "deprecatedLastTimestamp", Time),
    F(15, "deprecatedCount", IntOmitZero),
];

static LEASE: &[F] = &[
    F(1, "metadata", Msg(OBJECT_META)),
    F(
        2,
        "spec",
        Msg(&[
            F(1, "holderIdentity", Str),
            F(2, "leaseDurationSeconds", Int),
            F(3, "acquireTime", MicroTime),
            F(4, "renewTime", MicroTime),
            F(5, "leaseTransitions", Int),
            F(6, "strategy", Str),
            F(7, "preferredHolder", Str),
        ]),
    ),
];

// rbac.authorization.k8s.io/v1 (k8s.io/api/rbac/v1/generated.proto).
static LABEL_SELECTOR: &[F] = &[
    F(1, "matchLabels", StrMap),
    F(
        2,
        "matchExpressions",
        MsgList(&[
            F(1, "key", Str),
            F(2, "operator", Str),
            F(3, "values", StrList),
        ]),
    ),
];

static POLICY_RULE: &[F] = &[
    F(1, "verbs", StrList),
    F(2, "apiGroups", StrList),
    F(3, "resources", StrList),
    F(4, "resourceNames", StrList),
    F(5, "nonResourceURLs", StrList),
];

static ROLE: &[F] = &[
    F(1, "metadata", Msg(OBJECT_META)),
    F(2, "rules", MsgList(POLICY_RULE)),
];

static CLUSTER_ROLE: &[F] = &[
    F(1, "metadata", Msg(OBJECT_META)),
    F(2, "rules", MsgList(POLICY_RULE)),
    F(
        3,
        "aggregationRule",
        Msg(&[F(1, "clusterRoleSelectors", MsgList(LABEL_SELECTOR))]),
    ),
];

static ROLE_BINDING: &[F] = &[
    F(1, "metadata", Msg(OBJECT_META)),
    F(
        2,
        "subjects",
        MsgList(&[
            F(1, "kind", Str),
            F(2, "apiGroup", Str),
            F(3, "name", Str),
            F(4, "namespace", Str),
        ]),
    ),
    F(
        3,
        "roleRef",
        Msg(&[F(1, "apiGroup", Str), F(2, "kind", Str), F(3, "name", Str)]),
    ),
];

fn table(api_version: &str, kind: &str) -> Option<&'static [F]> {
    Some(match (api_version, kind) {
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("v1", "Event") => CORE_EVENT,
        ("events.k8s.io/v1", "Event") => EVENTS_V1_EVENT,
        ("coordination.k8s.io/v1", "Lease") => LEASE,
        ("rbac.authorization.k8s.io/v1", "Role") => ROLE,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => CLUSTER_ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => ROLE_BINDING,
        ("v1" | "meta.k8s.io/v1", "DeleteOptions") => DELETE_OPTIONS,
        _ => return None,
    })
}

/// A protobuf wire reader over one message.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

impl<'a> Reader<'a> {
    fn err(&self, what: &'static str) -> ProtobufError {
        ProtobufError::Malformed { at: self.pos, what }
    }

    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut v: u64 = 0;
        for shift in (0..70).step_by(7) {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(self.err("truncated varint"));
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(self.err("varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err("varint longer than 10 bytes"))
    }

    fn next(&mut self) -> Result<Option<(u32, Wire<'a>)>, ProtobufError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| self.err("field number out of range"))?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.skip(8)?;
                Wire::Fixed
            }
            2 => {
                let len =
                    usize::try_from(self.varint()?).map_err(|_| self.err("length out of range"))?;
                let end = self
                    .pos
                    .checked_add(len)
                    .filter(|e| *e <= self.buf.len())
                    .ok_or_else(|| self.err("length runs past the end"))?;
                let bytes = &self.buf[self.pos..end];
                self.pos = end;
                Wire::Bytes(bytes)
            }
            5 => {
                self.skip(4)?;
                Wire::Fixed
            }
            _ => return Err(self.err("unsupported wire type")),
        };
        Ok(Some((field, wire)))
    }

    fn skip(&mut self, n: usize) -> Result<(), ProtobufError> {
        self.pos = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| self.err("fixed-width field runs past the end"))?;
        Ok(())
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn string(bytes: &[u8], at: usize) -> Result<String, ProtobufError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| ProtobufError::Malformed {
        at,
        what: "string is not UTF-8",
    })
}

fn timestamp(bytes: &[u8], micro: bool) -> Result<Value, ProtobufError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let (mut seconds, mut nanos) = (0i64, 0i64);
    while let Some((field, wire)) = r.next()? {
        match (field, wire) {
            (1, Wire::Varint(v)) => seconds = v as i64,
            (2, Wire::Varint(v)) => nanos = v as i64,
            _ => {}
        }
    }
    if seconds == 0 && nanos == 0 {
        return Ok(Value::Null);
    }
    let t = UNIX_EPOCH + Duration::new(seconds.max(0) as u64, nanos.clamp(0, 999_999_999) as u32);
    let text = if micro {
        humantime::format_rfc3339_micros(t).to_string()
    } else {
        humantime::format_rfc3339_seconds(t).to_string()
    };
    Ok(Value::String(text))
}

fn map_entry(bytes: &[u8], bytes_value: bool) -> Result<(String, Value), ProtobufError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let (mut key, mut value) = (String::new(), Value::String(String::new()));
    while let Some((field, wire)) = r.next()? {
        match (field, wire) {
            (1, Wire::Bytes(b)) => key = string(b, r.pos)?,
            (2, Wire::Bytes(b)) if bytes_value => value = Value::String(base64(b)),
            (2, Wire::Bytes(b)) => value = Value::String(string(b, r.pos)?),
            _ => {}
        }
    }
    Ok((key, value))
}

fn message(bytes: &[u8], fields: &[F]) -> Result<Value, ProtobufError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let mut out = Map::new();
    while let Some((num, wire)) = r.next()? {
        let Some(F(_, name, ty)) = fields.iter().find(|f| f.0 == num) else {
            continue;
        };
        let name = name.to_string();
        let at = r.pos;
        match (ty, wire) {
            (Str, Wire::Bytes(b)) => {
                out.insert(name, Value::String(string(b, at)?));
            }
            (Int | IntOmitZero, Wire::Varint(v)) => {
                out.insert(name, Value::from(v as i64));
            }
            (Bool, Wire::Varint(v)) => {
                out.insert(name, Value::Bool(v != 0));
            }
            (Msg(inner), Wire::Bytes(b)) => {
                out.insert(name, message(b, inner)?);
            }
            (StrList, Wire::Bytes(b)) => push(&mut out, name, Value::String(string(b, at)?)),
            (MsgList(inner), Wire::Bytes(b)) => push(&mut out, name, message(b, inner)?),
            (StrMap | BytesMap, Wire::Bytes(b)) => {
                let (k, v) = map_entry(b, matches!(ty, BytesMap))?;
                if let Value::Object(m) =
                    out.entry(name).or_insert_with(|| Value::Object(Map::new()))
                {
                    m.insert(k, v);
                }
            }
            (Time | MicroTime, Wire::Bytes(b)) => {
                out.insert(name, timestamp(b, matches!(ty, MicroTime))?);
            }
            (FieldsV1, Wire::Bytes(b)) => {
                let mut inner = Reader { buf: b, pos: 0 };
                let mut raw = Value::Object(Map::new());
                while let Some((field, wire)) = inner.next()? {
                    if let (1, Wire::Bytes(json)) = (field, wire) {
                        raw =
                            serde_json::from_slice(json).map_err(|_| ProtobufError::Malformed {
                                at,
                                what: "fieldsV1 is not JSON",
                            })?;
                    }
                }
                out.insert(name, raw);
            }
            _ => {
                return Err(ProtobufError::Malformed {
                    at,
                    what: "field has an unexpected wire type",
                });
            }
        }
    }
    // Omit what Go's JSON encoding would omit.
    for F(_, name, ty) in fields {
        let drop = match (ty, out.get(*name)) {
            (_, None) => false,
            (_, Some(Value::Null)) => true,
            (Str, Some(Value::String(s))) => s.is_empty(),
            (IntOmitZero, Some(v)) => v.as_i64() == Some(0),
            (StrMap | BytesMap | Msg(_), Some(Value::Object(m))) => m.is_empty(),
            _ => false,
        };
        if drop {
            out.remove(*name);
        }
    }
    Ok(Value::Object(out))
}

fn push(out: &mut Map<String, Value>, name: String, v: Value) {
    if let Value::Array(a) = out.entry(name).or_insert_with(|| Value::Array(Vec::new())) {
        a.push(v);
    }
}

/// Decodes a `application/vnd.kubernetes.protobuf` body to JSON.
pub(crate) fn decode_body(body: &[u8]) -> Result<Value, ProtobufError> {
    let envelope = body.strip_prefix(b"k8s\0").ok_or(ProtobufError::BadMagic)?;
    let mut r = Reader {
        buf: envelope,
        pos: 0,
    };
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    while let Some((field, wire)) = r.next()? {
        match (field, wire) {
            (1, Wire::Bytes(type_meta)) => {
                let mut t = Reader {
                    buf: type_meta,
                    pos: 0,
                };
                while let Some((f, w)) = t.next()? {
                    match (f, w) {
                        (1, Wire::Bytes(b)) => api_version = string(b, t.pos)?,
                        (2, Wire::Bytes(b)) => kind = string(b, t.pos)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let fields = table(&api_version, &kind).ok_or_else(|| ProtobufError::UnsupportedKind {
        api_version: api_version.clone(),
        kind: kind.clone(),
    })?;
    let mut obj = message(raw, fields)?;
    if let Value::Object(m) = &mut obj {
        let mut with_type = Map::new();
        with_type.insert("apiVersion".into(), Value::String(api_version));
        with_type.insert("kind".into(), Value::String(kind));
        with_type.extend(std::mem::take(m));
        *m = with_type;
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A minimal protobuf writer for building test bodies.
    #[derive(Default)]
    struct W(Vec<u8>);

    impl W {
        fn varint(&mut self, mut v: u64) -> &mut Self {
            while v >= 0x80 {
                self.0.push((v as u8) | 0x80);
                v >>= 7;
            }
            self.0.push(v as u8);
            self
        }
        fn int(&mut self, field: u32, v: i64) -> &mut Self {
            self.varint(u64::from(field) << 3).varint(v as u64)
        }
        fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
            self.varint(u64::from(field) << 3 | 2)
                .varint(b.len() as u64);
            self.0.extend_from_slice(b);
            self
        }
        fn str(&mut self, field: u32, s: &str) -> &mut Self {
            self.bytes(field, s.as_bytes())
        }
        fn msg(&mut self, field: u32, m: &W) -> &mut Self {
            self.bytes(field, &m.0)
        }
        fn entry(&mut self, field: u32, k: &str, v: &[u8]) -> &mut Self {
            let mut e = W::default();
            e.str(1, k).bytes(2, v);
            self.msg(field, &e)
        }
    }

    fn envelope(api_version: &str, kind: &str, raw: &W) -> Vec<u8> {
        let mut tm = W::default();
        tm.str(1, api_version).str(2, kind);
        let mut u = W::default();
        u.msg(1, &tm).msg(2, raw).str(3, "").str(4, "");
        [b"k8s\0".as_slice(), &u.0].concat()
    }

    fn meta(name: &str) -> W {
        // As gogo-protobuf writes it: empty strings and zero values included.
        let mut m = W::default();
        m.str(1, name)
            .str(2, "")
            .str(3, "")
            .str(4, "")
            .str(5, "")
            .str(6, "")
            .int(7, 0)
            .msg(8, &W::default());
        m.entry(11, "app", b"web");
        m
    }

    #[test]
    fn secrets_decode_with_base64_data_and_omitted_empties() {
        let mut s = W::default();
        s.msg(1, &meta("release-v1"))
            .entry(2, "release", b"\x00\xffhello")
            .str(3, "helm.sh/release.v1")
            .int(5, 1);
        let v = decode_body(&envelope("v1", "Secret", &s)).expect("decode");
        assert_eq!(
            v,
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "release-v1", "labels": {"app": "web"}},
                "data": {"release": "AP9oZWxsbw=="},
                "type": "helm.sh/release.v1",
                "immutable": true
            })
        );
    }

    #[test]
    fn namespaces_config_maps_leases_and_delete_options() {
        let mut ns = W::default();
        ns.msg(1, &meta("demo"))
            .msg(2, &W::default())
            .msg(3, &W::default());
        assert_eq!(
            decode_body(&envelope("v1", "Namespace", &ns)).expect("ns"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo", "labels": {"app": "web"}}})
        );

        let mut cm = W::default();
        cm.msg(1, &meta("settings"))
            .entry(2, "color", b"blue")
            .entry(2, "size", b"L");
        let v = decode_body(&envelope("v1", "ConfigMap", &cm)).expect("cm");
        assert_eq!(v["data"], json!({"color": "blue", "size": "L"}));

        let mut time = W::default();
        time.int(1, 1_700_000_000).int(2, 123_456_000);
        let mut spec = W::default();
        spec.str(1, "me").int(2, 15).msg(4, &time).int(5, 0);
        let mut lease = W::default();
        lease.msg(1, &meta("lock")).msg(2, &spec);
        let v = decode_body(&envelope("coordination.k8s.io/v1", "Lease", &lease)).expect("lease");
        assert_eq!(
            v["spec"],
            json!({"holderIdentity": "me", "leaseDurationSeconds": 15, "renewTime": "2023-11-14T22:13:20.123456Z", "leaseTransitions": 0})
        );

        let mut pre = W::default();
        pre.str(1, "abc");
        let mut del = W::default();
        del.int(1, 0).msg(2, &pre).str(4, "Foreground");
        let v = decode_body(&envelope("meta.k8s.io/v1", "DeleteOptions", &del))
            .expect("delete options");
        assert_eq!(v["gracePeriodSeconds"], 0);
        assert_eq!(v["preconditions"], json!({"uid": "abc"}));
        assert_eq!(v["propagationPolicy"], "Foreground");
    }

    #[test]
    fn rbac_roles_and_bindings_decode_as_kubectl_sends_them() {
        let mut rule = W::default();
        rule.str(1, "get").str(1, "list").str(2, "").str(3, "pods");
        let mut role = W::default();
        role.msg(1, &meta("reader")).msg(2, &rule);
        let v =
            decode_body(&envelope("rbac.authorization.k8s.io/v1", "Role", &role)).expect("role");
        assert_eq!(
            v["rules"],
            json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}])
        );

        let mut selector = W::default();
        selector.entry(1, "aggregate-to-view", b"true");
        let mut aggregation = W::default();
        aggregation.msg(1, &selector);
        let mut cluster_role = W::default();
        cluster_role.msg(1, &meta("view")).msg(3, &aggregation);
        let v = decode_body(&envelope(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            &cluster_role,
        ))
        .expect("cluster role");
        assert_eq!(
            v["aggregationRule"],
            json!({"clusterRoleSelectors": [{"matchLabels": {"aggregate-to-view": "true"}}]})
        );

        let mut subject = W::default();
        subject
            .str(1, "ServiceAccount")
            .str(2, "")
            .str(3, "bosun")
            .str(4, "d8-system");
        let mut role_ref = W::default();
        role_ref
            .str(1, "rbac.authorization.k8s.io")
            .str(2, "Role")
            .str(3, "reader");
        let mut binding = W::default();
        binding
            .msg(1, &meta("bosun-reads"))
            .msg(2, &subject)
            .msg(3, &role_ref);
        for kind in ["RoleBinding", "ClusterRoleBinding"] {
            let v = decode_body(&envelope("rbac.authorization.k8s.io/v1", kind, &binding))
                .expect("binding");
            assert_eq!(v["kind"], kind);
            assert_eq!(
                v["subjects"],
                json!([{"kind": "ServiceAccount", "name": "bosun", "namespace": "d8-system"}])
            );
            assert_eq!(
                v["roleRef"],
                json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"})
            );
        }
    }

    #[test]
    fn bad_bodies_are_errors_not_panics() {
        assert_eq!(decode_body(b"{}"), Err(ProtobufError::BadMagic));
        assert!(matches!(
            decode_body(b"k8s\0\x0a\xff"),
            Err(ProtobufError::Malformed { .. })
        ));
        assert!(matches!(
            decode_body(b"k8s\0\x0a\x05\x0a"),
            Err(ProtobufError::Malformed { .. })
        ));
        let mut d = W::default();
        d.str(1, "x");
        let err = decode_body(&envelope("apps/v1", "Deployment", &d)).expect_err("unsupported");
        assert!(err.to_string().contains("send JSON"), "{err}");
        // Every prefix of a valid body either decodes or fails cleanly.
        let mut s = W::default();
        s.msg(1, &meta("x")).entry(2, "k", b"v");
        let body = envelope("v1", "Secret", &s);
        for n in 0..body.len() {
            let _ = decode_body(&body[..n]);
        }
    }
}
