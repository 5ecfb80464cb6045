//! The bad input campaign for the object patcher (`KUBERNETES_PATCH_PATH`): every malformed
//! operation is refused before anything runs, with an error naming the operation by its
//! position and target, the field and what was expected; never a panic.
//!
//! Each case starts from a valid operation and applies one mutation; it knows the field it
//! broke and asserts the error names it. Distinct malformed-input shapes (mutation ×
//! operation × field): 32 (`CASES`, each tried by `every_shape_names_the_operation_and_field`).
//!
//! Run: `cargo test -p bosun --test addon bad_input_patcher`.

use bosun::addon::patcher::{PatchError, check_operations};
use proptest::prelude::*;
use serde_json::{Value, json};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn garbage() -> impl Strategy<Value = String> {
    "zq[a-z0-9]{0,8}"
}

fn object(name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name, "namespace": "ns" }, "data": { "a": "b" } })
}

/// A valid operation of each kind.
fn valid(op: &str) -> Value {
    match op {
        "Create" | "CreateIfNotExists" | "CreateOrUpdate" => {
            json!({ "operation": op, "object": object("cm") })
        }
        "JQPatch" => {
            json!({ "operation": op, "kind": "ConfigMap", "namespace": "ns", "name": "cm", "jqFilter": ".data.a = \"c\"" })
        }
        "MergePatch" => {
            json!({ "operation": op, "kind": "ConfigMap", "namespace": "ns", "name": "cm", "mergePatch": { "data": { "a": "c" } } })
        }
        "JSONPatch" => {
            json!({ "operation": op, "kind": "ConfigMap", "namespace": "ns", "name": "cm", "jsonPatch": [{ "op": "add", "path": "/data/a", "value": "c" }] })
        }
        _ => {
            json!({ "operation": op, "apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "cm" })
        }
    }
}

fn remove(v: &mut Value, key: &str) {
    if let Some(m) = v.as_object_mut() {
        m.remove(key);
    }
}

/// One shape: the operation it starts from, the mutation and what the problem must say.
struct Case {
    op: &'static str,
    mutate: fn(&mut Value, &str),
    expected: &'static str,
}

const fn c(op: &'static str, mutate: fn(&mut Value, &str), expected: &'static str) -> Case {
    Case {
        op,
        mutate,
        expected,
    }
}

const CASES: &[Case] = &[
    // any operation
    c(
        "Delete",
        |v, _| remove(v, "operation"),
        "field \"operation\" is required",
    ),
    c(
        "Delete",
        |v, g| v["operation"] = json!(g),
        "unknown operation \"zq",
    ),
    c(
        "Delete",
        |v, _| v["operation"] = json!(5),
        "field \"operation\" must be a string, not a number",
    ),
    c(
        "Delete",
        |v, _| v["operation"] = json!("delete"),
        "unknown operation \"delete\" (expected one of Create,",
    ),
    c(
        "Delete",
        |v, g| v[format!("x{g}")] = json!(1),
        "unknown field \"xzq",
    ),
    c(
        "Delete",
        |v, _| v["apiVersion"] = json!(5),
        "field \"apiVersion\" must be a string, not a number",
    ),
    c(
        "Delete",
        |v, _| v["namespace"] = json!([]),
        "field \"namespace\" must be a string, not an array",
    ),
    c(
        "Delete",
        |v, g| v["ignoreMissingObject"] = json!(g),
        "field \"ignoreMissingObject\" must be a boolean, not a string",
    ),
    c(
        "JQPatch",
        |v, _| v["ignoreHookError"] = json!(1),
        "field \"ignoreHookError\" must be a boolean, not a number",
    ),
    c(
        "Delete",
        |v, g| *v = json!([g]),
        "an operation must be a map, not an array",
    ),
    // the Create operations
    c(
        "Create",
        |v, _| remove(v, "object"),
        "field \"object\" is required",
    ),
    c(
        "CreateIfNotExists",
        |v, _| remove(v, "object"),
        "field \"object\" is required",
    ),
    c(
        "CreateOrUpdate",
        |v, _| v["object"] = json!(5),
        "field \"object\" must be a map or a JSON/YAML string, not a number",
    ),
    c(
        "Create",
        |v, _| v["object"] = json!("[1, 2]"),
        "field \"object\" must hold a map, but its text is an array",
    ),
    c(
        "Create",
        |v, g| v["object"] = json!(format!("{{{g}: [")),
        "field \"object\" is neither JSON nor YAML",
    ),
    c(
        "Create",
        |v, _| remove(&mut v["object"], "kind"),
        "object.kind is required",
    ),
    c(
        "CreateOrUpdate",
        |v, _| remove(&mut v["object"]["metadata"], "name"),
        "object.metadata.name (or generateName) is required",
    ),
    c(
        "Create",
        |v, _| v["object"]["metadata"]["labels"] = json!({ "a": 1 }),
        "object is malformed",
    ),
    // the Delete operations
    c(
        "Delete",
        |v, _| remove(v, "kind"),
        "field \"kind\" is required",
    ),
    c(
        "DeleteInBackground",
        |v, _| remove(v, "name"),
        "field \"name\" is required",
    ),
    c(
        "DeleteNonCascading",
        |v, _| v["name"] = json!(""),
        "field \"name\" is empty",
    ),
    c(
        "Delete",
        |v, _| v["subresource"] = json!("status"),
        "field \"subresource\" is not supported by Delete",
    ),
    c(
        "DeleteInBackground",
        |v, _| v["kind"] = json!(5),
        "field \"kind\" must be a string, not a number",
    ),
    // the patches
    c(
        "JQPatch",
        |v, _| remove(v, "jqFilter"),
        "field \"jqFilter\" is required",
    ),
    c(
        "JQPatch",
        |v, _| v["jqFilter"] = json!(".data | [[["),
        "field \"jqFilter\": ",
    ),
    c(
        "MergePatch",
        |v, _| remove(v, "mergePatch"),
        "field \"mergePatch\" is required",
    ),
    c(
        "MergePatch",
        |v, _| v["mergePatch"] = json!([1]),
        "field \"mergePatch\" must be a map or a JSON/YAML string, not an array",
    ),
    c(
        "MergePatch",
        |v, _| remove(v, "name"),
        "field \"name\" is required",
    ),
    c(
        "JSONPatch",
        |v, _| remove(v, "jsonPatch"),
        "field \"jsonPatch\" is required",
    ),
    c(
        "JSONPatch",
        |v, _| v["jsonPatch"] = json!({}),
        "field \"jsonPatch\" must be an array or a JSON/YAML string, not a map",
    ),
    c(
        "JSONPatch",
        |v, g| v["jsonPatch"] = json!([{ "op": g, "path": "/data" }]),
        "field \"jsonPatch\" is not a JSON patch",
    ),
    c(
        "JSONPatch",
        |v, _| v["jsonPatch"] = json!("{\"op\": \"add\"}"),
        "field \"jsonPatch\" must hold an array, but its text is a map",
    ),
];

const OPS: [&str; 9] = [
    "Create",
    "CreateIfNotExists",
    "CreateOrUpdate",
    "Delete",
    "DeleteInBackground",
    "DeleteNonCascading",
    "JQPatch",
    "MergePatch",
    "JSONPatch",
];

fn check(case: &Case, token: &str, valid_before: usize, yaml: bool) {
    let mut docs: Vec<Value> = (0..valid_before)
        .map(|i| valid(OPS[i % OPS.len()]))
        .collect();
    let mut bad = valid(case.op);
    (case.mutate)(&mut bad, token);
    docs.push(bad.clone());
    docs.push(valid("Delete"));
    let text = if yaml {
        docs.iter()
            .map(|d| serde_saphyr::to_string(d).unwrap())
            .collect::<Vec<_>>()
            .join("---\n")
    } else {
        docs.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let err = check_operations(&text).expect_err(&format!("accepted {text}"));
    let PatchError::Invalid(errors) = &err else {
        panic!("expected an invalid operation: {err}");
    };
    assert_eq!(errors.len(), 1, "only the broken operation: {err}");
    let e = &errors[0];
    assert_eq!(e.index, valid_before + 1, "{err}");
    let shown = err.to_string();
    assert!(
        shown.starts_with("invalid object patcher operations, none executed: "),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("operation {} ({}", e.index, e.target)),
        "{shown}"
    );
    assert!(
        shown.contains(case.expected),
        "expected {:?} in: {shown}",
        case.expected
    );
}

#[test]
fn the_valid_operations_are_accepted() {
    let text = OPS
        .iter()
        .map(|op| valid(op).to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(check_operations(&text).expect("valid"), OPS.len());
}

#[test]
fn every_shape_names_the_operation_and_field() {
    for case in CASES {
        check(case, "zqtoken", 0, false);
        check(case, "zqtoken", 2, true);
    }
}

#[test]
fn text_that_is_neither_json_nor_yaml_says_both() {
    let err = check_operations("{\"operation\": \"Delete\"\n  - ]: [").expect_err("garbage");
    let shown = err.to_string();
    assert!(
        shown.contains("not a JSON stream") && shown.contains("not YAML"),
        "{shown}"
    );
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn malformed_operations_get_precise_errors(
        i in 0..CASES.len(),
        token in garbage(),
        valid_before in 0usize..4,
        yaml in any::<bool>(),
    ) {
        check(&CASES[i], &token, valid_before, yaml);
    }

    #[test]
    fn garbage_operations_never_panic(text in "\\PC{0,160}") {
        let _ = check_operations(&text);
    }
}
