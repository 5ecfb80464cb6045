//! `/openapi/v2` and `/openapi/v3`: permissive documents that let kubectl and client-go
//! do their discovery, validation and patch computation against the sandbox.
//!
//! Schemas are permissive (any object): the sandbox stores built-ins schemaless. The v3
//! documents carry `x-kubernetes-group-version-kind` on every operation and schema, and
//! list the `fieldValidation` query parameter on PATCH, so kubectl detects server-side field
//! validation and defers to the server. The v3 PATCH operations do not advertise strategic
//! merge patch, and the v2 definitions carry no group-version-kind: kubectl then computes
//! `kubectl apply` patches from its compiled-in types for built-in kinds (the correct merge
//! keys) and a JSON merge patch for custom resources, instead of from an empty schema.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::discovery;
use super::resources::ResourceInfo;

/// Kubernetes version the sandbox reports in its documents.
fn kube_version() -> String {
    discovery::version()["gitVersion"]
        .as_str()
        .unwrap_or("v1.33.0")
        .to_string()
}

/// Definition name of a kind, in the reverse-domain style kube-apiserver uses.
fn definition_name(r: &ResourceInfo) -> String {
    let package = match r.group.as_str() {
        "" => "io.k8s.api.core".to_string(),
        "apiextensions.k8s.io" => {
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions".to_string()
        }
        g if g.ends_with(".k8s.io") => format!(
            "io.k8s.api.{}",
            g.trim_end_matches(".k8s.io").split('.').next().unwrap_or(g)
        ),
        g if !g.contains('.') => format!("io.k8s.api.{g}"),
        g => g.split('.').rev().collect::<Vec<_>>().join("."),
    };
    format!("{package}.{}.{}", r.version, r.kind)
}

fn gvk(r: &ResourceInfo) -> Value {
    json!({"group": r.group, "version": r.version, "kind": r.kind})
}

/// The distinct kinds served, one per group/version/kind.
fn kinds(resources: &[ResourceInfo]) -> BTreeMap<String, &ResourceInfo> {
    resources.iter().map(|r| (definition_name(r), r)).collect()
}

/// The Swagger 2.0 document, as JSON.
pub(crate) fn v2_json(resources: &[ResourceInfo]) -> Value {
    let definitions: Map<String, Value> = kinds(resources)
        .into_keys()
        .map(|name| {
            (
                name,
                json!({"type": "object", "description": "Stored schemaless by the sandbox."}),
            )
        })
        .collect();
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": kube_version()},
        "paths": {},
        "definitions": definitions,
    })
}

/// Minimal protobuf writer for the gnostic `openapi.v2.Document`.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn bytes(&mut self, field: u32, data: &[u8]) {
        self.varint(u64::from(field) << 3 | 2);
        self.varint(data.len() as u64);
        self.0.extend_from_slice(data);
    }

    fn string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    fn message(&mut self, field: u32, build: impl FnOnce(&mut Pb)) {
        let mut inner = Pb::default();
        build(&mut inner);
        self.bytes(field, &inner.0);
    }
}

/// The Swagger 2.0 document in gnostic protobuf, as client-go requests it.
pub(crate) fn v2_protobuf(resources: &[ResourceInfo]) -> Vec<u8> {
    // Field numbers from gnostic's openapiv2/OpenAPIv2.proto: Document{swagger=1, info=2,
    // paths=8, definitions=9}, Info{title=1, version=2}, Definitions{additional_properties=1},
    // NamedSchema{name=1, value=2}, Schema{description=4, type=22}, TypeItem{value=1}.
    let mut doc = Pb::default();
    doc.string(1, "2.0");
    doc.message(2, |info| {
        info.string(1, "Kubernetes");
        info.string(2, &kube_version());
    });
    doc.message(8, |_| {});
    doc.message(9, |defs| {
        for name in kinds(resources).into_keys() {
            defs.message(1, |named| {
                named.string(1, &name);
                named.message(2, |schema| {
                    schema.string(4, "Stored schemaless by the sandbox.");
                    schema.message(22, |t| t.string(1, "object"));
                });
            });
        }
    });
    doc.0
}

/// `group/version` discovery path used as the key of the v3 index: `api/v1`, `apis/apps/v1`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: one entry per served group/version.
pub(crate) fn v3_index(resources: &[ResourceInfo]) -> Value {
    let mut paths = Map::new();
    for r in resources {
        let p = gv_path(&r.group, &r.version);
        // The hash lets clients cache a document until the served resources change.
        let hash = fingerprint(resources, &r.group, &r.version);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash:016X}")}),
        );
    }
    json!({"paths": paths})
}

fn fingerprint(resources: &[ResourceInfo], group: &str, version: &str) -> u64 {
    // FNV-1a over the served plurals and kinds of the group/version.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for r in resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        for b in r
            .plural
            .bytes()
            .chain(r.kind.bytes())
            .chain(std::iter::once(u8::from(r.namespaced)))
        {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn query_params(names: &[&str]) -> Value {
    Value::Array(
        names.iter().map(|n| json!({"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": true})).collect(),
    )
}

fn operation(r: &ResourceInfo, action: &str, params: &[&str], body_types: &[&str]) -> Value {
    let reference = json!({"$ref": format!("#/components/schemas/{}", definition_name(r))});
    let mut op = json!({
        "operationId": format!("{action}{}", r.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(r),
        "parameters": query_params(params),
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}},
    });
    if !body_types.is_empty() {
        let content: Map<String, Value> = body_types
            .iter()
            .map(|t| (t.to_string(), json!({"schema": reference})))
            .collect();
        op["requestBody"] = json!({"content": content, "required": true});
    }
    op
}

const WRITE_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];
const PATCH_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force"];
const PATCH_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
];

/// `/openapi/v3/{api/v1|apis/G/V}`: the OpenAPI 3 document of one group/version.
pub(crate) fn v3_group_version(
    resources: &[ResourceInfo],
    group: &str,
    version: &str,
) -> Option<Value> {
    let served: Vec<&ResourceInfo> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    let prefix = served.first().map(|r| r.path_prefix()).unwrap_or_default();
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for r in served {
        let collection = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{prefix}/{}", r.plural)
        };
        let item = format!("{collection}/{{name}}");
        paths.insert(
            collection,
            json!({
                "get": operation(r, "list", &["labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch"], &[]),
                "post": operation(r, "post", WRITE_PARAMS, &["application/json", "application/yaml"]),
                "delete": operation(r, "deletecollection", &["labelSelector", "fieldSelector", "propagationPolicy"], &[]),
            }),
        );
        paths.insert(
            item.clone(),
            json!({
                "get": operation(r, "get", &[], &[]),
                "put": operation(r, "put", WRITE_PARAMS, &["application/json", "application/yaml"]),
                "patch": operation(r, "patch", PATCH_PARAMS, PATCH_TYPES),
                "delete": operation(r, "delete", &["dryRun", "propagationPolicy", "gracePeriodSeconds"], &[]),
            }),
        );
        for (sub, present) in [
            ("status", r.status_subresource),
            ("scale", r.scale.is_some()),
        ] {
            if present {
                paths.insert(
                    format!("{item}/{sub}"),
                    json!({
                        "get": operation(r, "get", &[], &[]),
                        "put": operation(r, "put", WRITE_PARAMS, &["application/json"]),
                        "patch": operation(r, "patch", PATCH_PARAMS, PATCH_TYPES),
                    }),
                );
            }
        }
        schemas.insert(
            definition_name(r),
            json!({
                "type": "object",
                "description": "Stored schemaless by the sandbox.",
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-group-version-kind": [gvk(r)],
            }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": kube_version()},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    #[test]
    fn v3_documents_declare_field_validation_on_patch() {
        let res = builtin_resources();
        let doc = v3_group_version(&res, "apps", "v1").unwrap_or_default();
        let patch =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert!(
            patch["parameters"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["name"] == "fieldValidation"))
        );
        let ns = v3_group_version(&res, "", "v1").unwrap_or_default();
        assert!(ns["paths"]["/api/v1/namespaces/{name}"]["patch"].is_object());
        assert!(
            v3_index(&res)["paths"]["apis/apps/v1"]["serverRelativeURL"]
                .as_str()
                .is_some_and(|u| u.starts_with("/openapi/v3/apis/apps/v1?hash="))
        );
        assert!(v3_group_version(&res, "nope", "v1").is_none());
    }

    #[test]
    fn v2_protobuf_starts_with_the_swagger_version() {
        let pb = v2_protobuf(&builtin_resources());
        assert_eq!(&pb[..5], &[0x0a, 0x03, b'2', b'.', b'0']);
        assert!(
            v2_json(&builtin_resources())["definitions"]["io.k8s.api.apps.v1.Deployment"]
                .is_object()
        );
    }
}
