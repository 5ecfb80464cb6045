//! The bad input campaign for the deployer: malformed DeployItems, mock and
//! kubernetes-manifest configurations, timeouts and Targets each get an error naming the
//! object, the field and what was expected, never a panic.
//!
//! Each case starts from a valid object and applies one mutation; it knows the field it
//! broke and asserts the error names it.
//!
//! Distinct malformed-input shapes (mutation × field), each tried once by
//! `every_shape_names_its_field` and sampled again by the proptests:
//! DeployItem 20 (`ITEM_CASES`), mock configuration 7 (`MOCK_CASES`), manifest
//! configuration 16 (`MANIFEST_CASES`), Target 7 (`TARGET_CASES`): 50 in all.
//!
//! Run: `cargo test -p bosun-deployer --test bad_input`.

use bosun_deployer::item::DeployItem;
use bosun_deployer::manifest::ManifestConfig;
use bosun_deployer::mock::MockConfig;
use bosun_deployer::target::Target;
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
    (0..depth).fold(json!("x"), |v, i| {
        if i % 2 == 0 {
            json!([v])
        } else {
            json!({ "a": v })
        }
    })
}

fn remove(v: &mut Value, key: &str) {
    if let Some(m) = v.as_object_mut() {
        m.remove(key);
    }
}

type Mutate = fn(&mut Value, &str);

/// One shape: the mutation, the field the error must name and what it must say.
struct Case {
    mutate: Mutate,
    field: &'static str,
    expected: &'static str,
}

const fn c(mutate: Mutate, field: &'static str, expected: &'static str) -> Case {
    Case {
        mutate,
        field,
        expected,
    }
}

// ---------------------------------------------------------------------------------------
// DeployItems
// ---------------------------------------------------------------------------------------

fn valid_item(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1",
        "kind": "DeployItem",
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": "u-1",
            "generation": 2,
            "annotations": { "landscaper.gardener.cloud/operation": "reconcile" },
            "finalizers": ["finalizer.deployer.landscaper.gardener.cloud"]
        },
        "spec": {
            "type": "landscaper.gardener.cloud/mock",
            "target": { "name": "my-target" },
            "context": "default",
            "timeout": "10m",
            "updateOnChangeOnly": false,
            "config": {
                "apiVersion": "mock.deployer.landscaper.gardener.cloud/v1alpha1",
                "kind": "ProviderConfiguration",
                "phase": "Succeeded"
            }
        },
        "status": { "phase": "Succeeded", "observedGeneration": 1 }
    })
}

const ITEM_CASES: &[Case] = &[
    c(
        |v, _| remove(&mut v["spec"], "type"),
        "spec.type",
        "missing",
    ),
    c(|v, _| v["spec"]["type"] = json!(""), "spec.type", "missing"),
    c(
        |v, _| v["spec"]["type"] = json!(5),
        "spec.type",
        "expected a string, got 5",
    ),
    c(
        |v, g| v["spec"]["target"] = json!(g),
        "spec.target",
        "expected an object with a name",
    ),
    c(
        |v, _| v["spec"]["target"] = json!(["my-target"]),
        "spec.target",
        "expected an object with a name",
    ),
    c(
        |v, _| v["spec"]["target"]["name"] = json!(5),
        "spec.target.name",
        "expected a string",
    ),
    c(
        |v, _| v["spec"]["target"]["name"] = deep(40),
        "spec.target.name",
        "expected a string",
    ),
    c(
        |v, _| v["spec"]["context"] = json!({}),
        "spec.context",
        "expected a string",
    ),
    c(
        |v, _| v["spec"]["timeout"] = json!(600),
        "spec.timeout",
        "expected a string",
    ),
    c(
        |v, g| v["spec"]["timeout"] = json!(g),
        "spec.timeout",
        "is not a duration",
    ),
    c(
        |v, _| v["spec"]["timeout"] = json!("-5m"),
        "spec.timeout",
        "negative",
    ),
    c(
        |v, _| v["spec"]["timeout"] = json!("10"),
        "spec.timeout",
        "missing unit",
    ),
    c(
        |v, _| v["spec"]["timeout"] = json!("99999999999999999999999h"),
        "spec.timeout",
        "too large",
    ),
    c(
        |v, g| v["spec"]["timeout"] = json!(format!("5{g}")),
        "spec.timeout",
        "unknown unit",
    ),
    c(
        |v, _| v["spec"]["updateOnChangeOnly"] = json!("yes"),
        "spec.updateOnChangeOnly",
        "expected true or false",
    ),
    c(
        |v, g| v["metadata"]["annotations"] = json!({ g: 1 }),
        "metadata.annotations",
        "expected strings",
    ),
    c(
        |v, g| v["metadata"]["finalizers"] = json!(g),
        "metadata.finalizers",
        "expected strings",
    ),
    c(
        |v, g| v["status"] = json!(g),
        "status",
        "expected an object, got \"zq",
    ),
    c(
        |v, _| v["status"] = json!(["Succeeded", 1]),
        "status",
        "expected an object, got [",
    ),
    c(
        |v, g| v["status"]["phase"] = json!(g),
        "status.phase",
        "unknown phase \"zq",
    ),
];

fn check_item(case: &Case, token: &str, namespace: &str, name: &str) {
    let mut v = valid_item(namespace, name);
    (case.mutate)(&mut v, token);
    let err = match DeployItem::parse(&v) {
        Err(e) => e,
        Ok(item) => item.timeout().expect_err(&format!(
            "accepted an item with a broken {}: {v}",
            case.field
        )),
    };
    let shown = err.to_string();
    assert_eq!(
        err.object,
        format!("DeployItem {namespace}/{name}"),
        "{shown}"
    );
    assert_eq!(err.field, case.field, "{shown}");
    assert!(
        shown.contains(case.expected),
        "expected {:?} in: {shown}",
        case.expected
    );
}

// ---------------------------------------------------------------------------------------
// The mock type's configuration
// ---------------------------------------------------------------------------------------

fn valid_mock() -> Value {
    valid_item("ns", "item")["spec"]["config"].clone()
}

const MOCK_CASES: &[Case] = &[
    c(
        |v, g| v["kind"] = json!(g),
        "spec.config.kind",
        "expected ProviderConfiguration",
    ),
    c(
        |v, g| v["apiVersion"] = json!(g),
        "spec.config.apiVersion",
        "expected \"mock.deployer.landscaper.gardener.cloud/v1alpha1\"",
    ),
    c(
        |v, g| v["phase"] = json!(g),
        "spec.config.phase",
        "unknown variant",
    ),
    c(
        |v, _| v["initialPhase"] = json!(5),
        "spec.config.initialPhase",
        "invalid type",
    ),
    c(
        |v, _| v["phase"] = deep(31),
        "spec.config.phase",
        "invalid type",
    ),
    c(
        |v, g| *v = json!(g),
        "spec.config",
        "expected an object, got \"zq",
    ),
    c(
        |v, _| *v = json!(["Succeeded", "Failed"]),
        "spec.config",
        "expected an object, got [",
    ),
];

fn check_mock(case: &Case, token: &str) {
    let mut v = valid_mock();
    (case.mutate)(&mut v, token);
    let err = MockConfig::parse(&v).expect_err(&format!("accepted {v}"));
    let shown = err.to_string();
    assert!(shown.starts_with("Reconcile: FailedUnmarshal: "), "{shown}");
    assert!(
        shown.contains(&format!("{}: ", case.field)),
        "expected {:?} named in: {shown}",
        case.field
    );
    assert!(
        shown.contains(case.expected),
        "expected {:?} in: {shown}",
        case.expected
    );
}

// ---------------------------------------------------------------------------------------
// The kubernetes-manifest type's configuration
// ---------------------------------------------------------------------------------------

fn valid_manifest() -> Value {
    let cm = |name: &str| json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name, "namespace": "ns" } });
    json!({
        "apiVersion": "manifest.deployer.landscaper.gardener.cloud/v1alpha2",
        "kind": "ProviderConfiguration",
        "updateStrategy": "update",
        "manifests": [
            { "policy": "manage", "manifest": cm("a") },
            { "policy": "keep", "manifest": cm("b") },
            { "manifest": cm("c") }
        ]
    })
}

/// `{i}` in a field is the manifest's index.
fn m(v: &mut Value, i: usize) -> &mut Value {
    &mut v["manifests"][i]
}

type MutateAt = fn(&mut Value, &str, usize);

struct ManifestCase {
    mutate: MutateAt,
    field: &'static str,
    expected: &'static str,
}

const fn mc(mutate: MutateAt, field: &'static str, expected: &'static str) -> ManifestCase {
    ManifestCase {
        mutate,
        field,
        expected,
    }
}

const MANIFEST_CASES: &[ManifestCase] = &[
    mc(
        |v, g, _| v["apiVersion"] = json!(g),
        "spec.config.apiVersion",
        "expected \"manifest.deployer.landscaper.gardener.cloud/v1alpha2\"",
    ),
    mc(
        |v, _, _| remove(v, "apiVersion"),
        "spec.config.apiVersion",
        "got \"\"",
    ),
    mc(
        |v, g, _| v["kind"] = json!(g),
        "spec.config.kind",
        "expected ProviderConfiguration",
    ),
    mc(
        |v, g, _| v["updateStrategy"] = json!(g),
        "spec.config.updateStrategy",
        "unknown strategy",
    ),
    mc(
        |v, _, _| v["updateStrategy"] = json!(7),
        "spec.config.updateStrategy",
        "expected a string",
    ),
    mc(
        |v, _, _| v["readinessChecks"] = json!({"custom": [{"name": "c", "resourceSelector": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}], "requirements": [{"jsonPath": ".a", "operator": "about"}]}]}),
        "spec.config.readinessChecks.custom[0].requirements[0].operator",
        "expected exists",
    ),
    mc(
        |v, _, _| {
            v["readinessChecks"] =
                json!({"custom": [{"name": "c", "resourceSelector": [], "requirements": []}]})
        },
        "spec.config.readinessChecks.custom[0].resourceSelector",
        "expected a non-empty list",
    ),
    mc(
        |v, _, _| v["exports"] = json!({"exports": [{"key": "k", "jsonPath": ".a"}]}),
        "spec.config.exports.exports[0].fromResource",
        "missing",
    ),
    mc(
        |v, _, _| v["exports"] = json!({"exports": [{"key": "k", "jsonPath": ".a[", "fromResource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}}]}),
        "spec.config.exports.exports[0].jsonPath",
        "unclosed",
    ),
    mc(
        |v, g, _| v["manifests"] = json!({ "a": g }),
        "spec.config.manifests",
        "expected a list",
    ),
    mc(
        |v, g, i| m(v, i)["policy"] = json!(g),
        "spec.config.manifests[{i}].policy",
        "unknown policy",
    ),
    mc(
        |v, _, i| remove(&mut m(v, i)["manifest"], "kind"),
        "spec.config.manifests[{i}].manifest.kind",
        "missing",
    ),
    mc(
        |v, _, i| m(v, i)["manifest"]["apiVersion"] = json!(5),
        "spec.config.manifests[{i}].manifest.apiVersion",
        "expected a string, got 5",
    ),
    mc(
        |v, _, i| remove(&mut m(v, i)["manifest"]["metadata"], "name"),
        "spec.config.manifests[{i}].manifest.metadata.name",
        "missing",
    ),
    mc(
        |v, _, i| remove(m(v, i), "manifest"),
        "spec.config.manifests[{i}].manifest",
        "expected an object, got null",
    ),
    mc(
        |v, g, i| m(v, i)["manifest"] = json!(g),
        "spec.config.manifests[{i}].manifest",
        "expected an object, got \"zq",
    ),
];

fn check_manifest(case: &ManifestCase, token: &str, index: usize) {
    let mut v = valid_manifest();
    (case.mutate)(&mut v, token, index);
    let err = ManifestConfig::parse(&v).expect_err(&format!("accepted {v}"));
    let shown = err.to_string();
    let field = case.field.replace("{i}", &index.to_string());
    assert!(
        shown.starts_with("Reconcile: InvalidProviderConfiguration: "),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("{field}: ")),
        "expected {field:?} named in: {shown}"
    );
    assert!(
        shown.contains(case.expected),
        "expected {:?} in: {shown}",
        case.expected
    );
}

// ---------------------------------------------------------------------------------------
// Targets
// ---------------------------------------------------------------------------------------

fn valid_target(name: &str) -> Value {
    json!({
        "metadata": { "namespace": "ns", "name": name, "labels": { "a": "b" }, "annotations": { "c": "d" } },
        "spec": { "type": "landscaper.gardener.cloud/kubernetes-cluster", "secretRef": { "name": "kubeconfig", "key": "kubeconfig" } }
    })
}

const TARGET_CASES: &[Case] = &[
    c(
        |v, _| remove(&mut v["spec"]["secretRef"], "name"),
        "spec.secretRef.name",
        "missing",
    ),
    c(
        |v, g| v["spec"]["secretRef"] = json!(g),
        "spec.secretRef.name",
        "missing",
    ),
    c(
        |v, _| v["spec"]["secretRef"]["key"] = json!(5),
        "spec.secretRef.key",
        "expected a string",
    ),
    c(
        |v, _| v["spec"]["secretRef"]["key"] = deep(25),
        "spec.secretRef.key",
        "expected a string",
    ),
    c(
        |v, g| v["spec"]["config"] = json!({ "kubeconfig": g }),
        "spec",
        "mutually exclusive",
    ),
    c(
        |v, g| v["metadata"]["labels"] = json!({ g: 1 }),
        "metadata.labels",
        "expected strings",
    ),
    c(
        |v, _| v["metadata"]["annotations"] = json!([1]),
        "metadata.annotations",
        "expected strings",
    ),
];

fn check_target(case: &Case, token: &str, name: &str) {
    let mut v = valid_target(name);
    (case.mutate)(&mut v, token);
    let err = Target::parse(&v).expect_err(&format!("accepted {v}"));
    let shown = err.to_string();
    assert_eq!(err.object, format!("Target ns/{name}"), "{shown}");
    assert_eq!(err.field, case.field, "{shown}");
    assert!(
        shown.contains(case.expected),
        "expected {:?} in: {shown}",
        case.expected
    );
}

// ---------------------------------------------------------------------------------------

#[test]
fn the_valid_objects_are_accepted() {
    let item = DeployItem::parse(&valid_item("ns", "item")).expect("item");
    item.timeout().expect("timeout");
    MockConfig::parse(&valid_mock()).expect("mock");
    ManifestConfig::parse(&valid_manifest()).expect("manifest");
    Target::parse(&valid_target("t")).expect("target");
}

#[test]
fn every_shape_names_its_field() {
    for case in ITEM_CASES {
        check_item(case, "zqtoken", "ns", "item");
    }
    for case in MOCK_CASES {
        check_mock(case, "zqtoken");
    }
    for case in MANIFEST_CASES {
        for index in 0..3 {
            check_manifest(case, "zqtoken", index);
        }
    }
    for case in TARGET_CASES {
        check_target(case, "zqtoken", "t");
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn malformed_deploy_items_get_precise_errors(
        i in 0..ITEM_CASES.len(),
        token in garbage(),
        namespace in "[a-z][a-z0-9-]{0,8}",
        name in "[a-z][a-z0-9-]{0,8}",
    ) {
        check_item(&ITEM_CASES[i], &token, &namespace, &name);
    }

    #[test]
    fn malformed_mock_configs_get_precise_errors(i in 0..MOCK_CASES.len(), token in garbage()) {
        check_mock(&MOCK_CASES[i], &token);
    }

    #[test]
    fn malformed_manifest_configs_get_precise_errors(
        i in 0..MANIFEST_CASES.len(),
        token in garbage(),
        index in 0usize..3,
    ) {
        check_manifest(&MANIFEST_CASES[i], &token, index);
    }

    #[test]
    fn malformed_targets_get_precise_errors(
        i in 0..TARGET_CASES.len(),
        token in garbage(),
        name in "[a-z][a-z0-9-]{0,8}",
    ) {
        check_target(&TARGET_CASES[i], &token, &name);
    }

    #[test]
    fn garbage_timeouts_never_panic(text in "\\PC{0,40}") {
        let mut v = valid_item("ns", "item");
        v["spec"]["timeout"] = json!(text);
        if let Ok(item) = DeployItem::parse(&v)
            && let Err(e) = item.timeout()
        {
            prop_assert_eq!(e.field.as_str(), "spec.timeout");
        }
    }
}
