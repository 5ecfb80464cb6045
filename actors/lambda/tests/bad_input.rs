//! The bad input campaign for lambda webhook responses: every malformed sync, finalize or
//! customize answer gets an error naming the hook, the field (or the child) and what was
//! expected, never a panic.
//!
//! Each case starts from a valid answer and applies one mutation; it knows the field it
//! broke and asserts the error names it.
//!
//! Distinct malformed-input shapes (mutation × field), each tried once by
//! `every_shape_names_its_field` and sampled again by the proptests:
//! composite sync/finalize answers 26 (`COMPOSITE_CASES`), decorator answers 11
//! (`DECORATOR_CASES`), customize answers 8 (`CUSTOMIZE_CASES`): 45 in all.
//!
//! Run: `cargo test -p bosun-lambda --test bad_input`.

use bosun_lambda::ports::HookType;
use bosun_lambda::protocol::{ResponseError, decode_composite, decode_customize, decode_decorator};
use bosun_lambda::types::{HookVersion, UnmarshalMode};
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

fn deep(depth: usize) -> Value {
    (0..depth).fold(json!(1), |v, i| {
        if i % 2 == 0 {
            json!([v])
        } else {
            json!({ "a": v })
        }
    })
}

fn child(name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name, "labels": { "a": "b" } } })
}

fn valid_composite() -> Value {
    json!({
        "status": { "replicas": 1 },
        "children": [child("one"), child("two"), child("three")],
        "resyncAfterSeconds": 2.5,
        "finalized": false
    })
}

fn valid_decorator() -> Value {
    json!({
        "labels": { "a": "1", "b": null },
        "annotations": { "c": "2" },
        "status": { "ok": true },
        "attachments": [child("one"), child("two")],
        "resyncAfterSeconds": 1,
        "finalized": true
    })
}

fn valid_customize() -> Value {
    json!({
        "relatedResources": [{
            "apiVersion": "v1",
            "resource": "configmaps",
            "labelSelector": { "matchLabels": { "a": "b" } },
            "namespace": "ns",
            "names": ["x"]
        }]
    })
}

/// A mutation of a valid answer; `index` picks one of the children (0..=2).
type Mutate = fn(&mut Value, &str, usize);

/// One shape: the mutation, whether it only fails in strict mode, and the pieces the
/// error must contain (`{i}` is replaced by the child's index).
struct Case {
    mutate: Mutate,
    strict_only: bool,
    expected: &'static [&'static str],
}

const fn c(mutate: Mutate, expected: &'static [&'static str]) -> Case {
    Case {
        mutate,
        strict_only: false,
        expected,
    }
}

const fn strict(mutate: Mutate, expected: &'static [&'static str]) -> Case {
    Case {
        mutate,
        strict_only: true,
        expected,
    }
}

fn remove(v: &mut Value, key: &str) {
    if let Some(m) = v.as_object_mut() {
        m.remove(key);
    }
}

const COMPOSITE_CASES: &[Case] = &[
    c(
        |v, g, _| v["resyncAfterSeconds"] = json!(g),
        &["resyncAfterSeconds", "expected f64"],
    ),
    c(
        |v, _, _| v["resyncAfterSeconds"] = json!([1]),
        &["resyncAfterSeconds", "expected f64"],
    ),
    c(
        |v, _, _| v["resyncAfterSeconds"] = json!({ "seconds": 1 }),
        &["resyncAfterSeconds", "expected f64"],
    ),
    c(
        |v, g, _| v["finalized"] = json!(g),
        &["finalized", "expected a boolean"],
    ),
    c(
        |v, _, _| v["finalized"] = json!(1),
        &["finalized", "expected a boolean"],
    ),
    c(
        |v, _, _| v["finalized"] = deep(50),
        &["finalized", "expected a boolean"],
    ),
    c(
        |v, g, _| v["children"] = json!({ "name": g }),
        &["children", "expected a sequence"],
    ),
    c(
        |v, g, _| v["children"] = json!(g),
        &["children", "expected a sequence"],
    ),
    c(
        |v, g, _| v["status"] = json!(g),
        &["status", "expected an object or null"],
    ),
    c(
        |v, _, _| v["status"] = json!([1, 2]),
        &["status", "expected an object or null"],
    ),
    c(
        |v, _, _| v["status"] = json!(1e300),
        &["status", "expected an object or null"],
    ),
    c(
        |v, _, i| remove(&mut v["children"][i], "kind"),
        &["children[{i}]", "'Kind' is missing"],
    ),
    c(
        |v, _, i| v["children"][i]["kind"] = json!(""),
        &["children[{i}]", "'Kind' is missing"],
    ),
    c(
        |v, _, i| v["children"][i]["kind"] = json!(5),
        &["children[{i}]", "'Kind' is missing"],
    ),
    c(
        |v, _, i| remove(&mut v["children"][i], "apiVersion"),
        &["children[{i}]", "'apiVersion' is missing"],
    ),
    c(
        |v, _, i| v["children"][i]["apiVersion"] = json!(["v1"]),
        &["children[{i}]", "'apiVersion' is missing"],
    ),
    c(
        |v, _, i| remove(&mut v["children"][i]["metadata"], "name"),
        &["children[{i}]", "metadata.name is missing"],
    ),
    c(
        |v, _, i| remove(&mut v["children"][i], "metadata"),
        &["children[{i}]", "metadata.name is missing"],
    ),
    c(
        |v, _, i| v["children"][i]["metadata"]["name"] = json!(7),
        &["children[{i}]", "metadata.name is missing"],
    ),
    c(
        |v, g, i| v["children"][i]["metadata"]["labels"] = json!({ g: 1 }),
        &[
            "children[{i}]",
            "metadata.labels must map strings to strings",
        ],
    ),
    c(
        |v, g, i| v["children"][i]["metadata"]["labels"] = json!(g),
        &[
            "children[{i}]",
            "metadata.labels must map strings to strings",
        ],
    ),
    c(
        |v, g, i| v["children"][i] = json!(g),
        &["children[{i}]", "expected an object"],
    ),
    strict(
        |v, g, _| v[format!("x{g}")] = json!(1),
        &["strict validation failed", "unknown field `xzq"],
    ),
    strict(
        |v, _, _| {
            let children = v["children"].take();
            remove(v, "children");
            v["Children"] = children;
        },
        &["strict validation failed", "unknown field `Children`"],
    ),
    strict(
        |v, _, _| {
            let s = v["resyncAfterSeconds"].take();
            remove(v, "resyncAfterSeconds");
            v["resync_after_seconds"] = s;
        },
        &[
            "strict validation failed",
            "unknown field `resync_after_seconds`",
        ],
    ),
    c(
        |v, _, _| *v = json!([v.take()]),
        &["not valid JSON", "expected a JSON object, got a list"],
    ),
];

const DECORATOR_CASES: &[Case] = &[
    c(
        |v, _, _| *v = json!([v.take()]),
        &["not valid JSON", "expected a JSON object, got a list"],
    ),
    c(
        |v, _, _| v["labels"]["a"] = json!(1),
        &["labels", "expected a string"],
    ),
    c(
        |v, g, _| v["labels"] = json!(g),
        &["labels", "expected a map"],
    ),
    c(
        |v, _, _| v["annotations"] = json!([1]),
        &["annotations", "expected a map"],
    ),
    c(
        |v, _, _| v["annotations"]["c"] = deep(20),
        &["annotations", "expected a string"],
    ),
    c(
        |v, g, _| v["status"] = json!(g),
        &["status", "expected an object or null"],
    ),
    c(
        |v, _, _| v["resyncAfterSeconds"] = json!(true),
        &["resyncAfterSeconds", "expected f64"],
    ),
    c(
        |v, g, _| v["finalized"] = json!([g]),
        &["finalized", "expected a boolean"],
    ),
    c(
        |v, _, i| remove(&mut v["attachments"][i % 2], "kind"),
        &["attachments[{i2}]", "'Kind' is missing"],
    ),
    c(
        |v, g, _| v["attachments"] = json!(g),
        &["attachments", "expected a sequence"],
    ),
    strict(
        |v, g, _| v[format!("x{g}")] = json!({}),
        &["strict validation failed", "unknown field `xzq"],
    ),
];

const CUSTOMIZE_CASES: &[Case] = &[
    c(
        |v, _, _| *v = json!([v.take()]),
        &["not valid JSON", "expected a JSON object, got a list"],
    ),
    c(
        |v, g, _| v["relatedResources"] = json!({ "resource": g }),
        &["relatedResources", "expected a sequence"],
    ),
    c(
        |v, _, _| v["relatedResources"][0]["apiVersion"] = json!(5),
        &["relatedResources[0].apiVersion", "expected a string"],
    ),
    c(
        |v, _, _| v["relatedResources"][0]["resource"] = json!(["configmaps"]),
        &["relatedResources[0].resource", "expected a string"],
    ),
    c(
        |v, g, _| v["relatedResources"][0]["names"] = json!(g),
        &["relatedResources[0].names", "expected a sequence"],
    ),
    c(
        |v, _, _| v["relatedResources"][0]["namespace"] = json!({ "name": "ns" }),
        &["relatedResources[0].namespace", "expected a string"],
    ),
    c(
        |v, _, _| v["relatedResources"][0] = json!("configmaps"),
        &["relatedResources[0]", "expected struct RelatedRule"],
    ),
    strict(
        |v, g, _| v["relatedResources"][0][format!("x{g}")] = json!(1),
        &["strict validation failed", "unknown field `xzq"],
    ),
];

fn expect(err: &ResponseError, hook: &str, case: &Case, index: usize) {
    let shown = err.to_string();
    assert!(shown.starts_with(&format!("{hook} hook: ")), "{shown}");
    for e in case.expected {
        let e = e
            .replace("{i}", &index.to_string())
            .replace("{i2}", &(index % 2).to_string());
        assert!(shown.contains(&e), "expected {e:?} in: {shown}");
    }
}

fn body(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn modes(case: &Case, loose: bool) -> (UnmarshalMode, bool) {
    if case.strict_only && loose {
        // Loose mode lets it through with a warning.
        (UnmarshalMode::Loose, false)
    } else if loose {
        (UnmarshalMode::Loose, true)
    } else {
        (UnmarshalMode::Strict, true)
    }
}

fn check_composite(case: &Case, token: &str, index: usize, hook: HookType, v2: bool, loose: bool) {
    let mut v = valid_composite();
    (case.mutate)(&mut v, token, index);
    let version = if v2 { HookVersion::V2 } else { HookVersion::V1 };
    let (mode, fails) = modes(case, loose);
    let result = decode_composite(hook, version, mode, &body(&v));
    match (result, fails) {
        (Err(e), true) => {
            expect(&e, hook.as_str(), case, index);
            if case.strict_only {
                let shown = e.to_string();
                let name = if v2 { "v2" } else { "v1" };
                assert!(
                    shown.contains(&format!("for {name} webhookResponse")),
                    "{shown}"
                );
            }
        }
        (Ok(d), false) => assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings),
        (other, _) => panic!("{v}: unexpected {other:?}"),
    }
}

fn check_decorator(case: &Case, token: &str, index: usize, hook: HookType, loose: bool) {
    let mut v = valid_decorator();
    (case.mutate)(&mut v, token, index);
    let (mode, fails) = modes(case, loose);
    match (
        decode_decorator(hook, HookVersion::V1, mode, &body(&v)),
        fails,
    ) {
        (Err(e), true) => expect(&e, hook.as_str(), case, index),
        (Ok(d), false) => assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings),
        (other, _) => panic!("{v}: unexpected {other:?}"),
    }
}

fn check_customize(case: &Case, token: &str, loose: bool) {
    let mut v = valid_customize();
    (case.mutate)(&mut v, token, 0);
    let (mode, fails) = modes(case, loose);
    match (decode_customize(HookVersion::V2, mode, &body(&v)), fails) {
        (Err(e), true) => expect(&e, "customize", case, 0),
        (Ok(d), false) => assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings),
        (other, _) => panic!("{v}: unexpected {other:?}"),
    }
}

#[test]
fn the_valid_answers_decode() {
    let strict = UnmarshalMode::Strict;
    decode_composite(
        HookType::Sync,
        HookVersion::V2,
        strict,
        &body(&valid_composite()),
    )
    .expect("composite");
    decode_decorator(
        HookType::Sync,
        HookVersion::V2,
        strict,
        &body(&valid_decorator()),
    )
    .expect("decorator");
    decode_customize(HookVersion::V2, strict, &body(&valid_customize())).expect("customize");
}

#[test]
fn every_shape_names_its_field() {
    for loose in [false, true] {
        for case in COMPOSITE_CASES {
            for index in 0..3 {
                check_composite(case, "zqtoken", index, HookType::Sync, false, loose);
            }
        }
        for case in DECORATOR_CASES {
            check_decorator(case, "zqtoken", 1, HookType::Finalize, loose);
        }
        for case in CUSTOMIZE_CASES {
            check_customize(case, "zqtoken", loose);
        }
    }
}

#[test]
fn bodies_that_are_not_json_name_the_hook() {
    for body in ["", "<html>", "{\"children\": [", "{} trailing"] {
        let err = decode_composite(
            HookType::Finalize,
            HookVersion::V1,
            UnmarshalMode::Loose,
            body.as_bytes(),
        )
        .expect_err(body);
        assert!(
            err.to_string().starts_with(
                "finalize hook: the response is not valid JSON for a finalize response"
            ),
            "{err}"
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn malformed_composite_answers_get_precise_errors(
        i in 0..COMPOSITE_CASES.len(),
        token in garbage(),
        index in 0usize..3,
        finalize in any::<bool>(),
        v2 in any::<bool>(),
        loose in any::<bool>(),
    ) {
        let hook = if finalize { HookType::Finalize } else { HookType::Sync };
        check_composite(&COMPOSITE_CASES[i], &token, index, hook, v2, loose);
    }

    #[test]
    fn malformed_decorator_answers_get_precise_errors(
        i in 0..DECORATOR_CASES.len(),
        token in garbage(),
        index in 0usize..3,
        loose in any::<bool>(),
    ) {
        check_decorator(&DECORATOR_CASES[i], &token, index, HookType::Sync, loose);
    }

    #[test]
    fn malformed_customize_answers_get_precise_errors(
        i in 0..CUSTOMIZE_CASES.len(),
        token in garbage(),
        loose in any::<bool>(),
    ) {
        check_customize(&CUSTOMIZE_CASES[i], &token, loose);
    }

    #[test]
    fn garbage_bodies_never_panic(text in "\\PC{0,120}") {
        if let Err(e) = decode_composite(HookType::Sync, HookVersion::V2, UnmarshalMode::Strict, text.as_bytes()) {
            prop_assert!(e.to_string().starts_with("sync hook: "), "{e}");
        }
    }
}
