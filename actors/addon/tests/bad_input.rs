//! The bad input campaign for the addon subsystem: every malformed input a hook or the
//! ConfigMap can hand bosun gets an error that names the hook, file or field and says what
//! was expected, and never a panic.
//!
//! Each generator starts from a valid input and applies one mutation (a field dropped, a
//! type changed, a bad enum value, a garbage string, deep nesting, a huge value, a wrong
//! path); the case knows what it broke and asserts the error names it.
//!
//! Distinct malformed-input shapes (mutation × field), in the tables below, each tried once
//! by an `every_…` test and sampled again by the proptests:
//!
//! | area                                              | shapes |
//! |---------------------------------------------------|--------|
//! | hook `--config` (`HOOK_CONFIG_CASES` 56, `…_DOCUMENT_CASES` 4, `…_OTHER_CASES` 9: module hooks and v0) | 69 |
//! | values / config values patches (`PATCH_CASES`)   |   20   |
//! | ConfigMap sections (`CONFIG_MAP_CASES`)           |    9   |
//! | `METRICS_PATH` lines (`METRICS_CASES`)            |   23   |
//! | total                                             |  121   |
//!
//! Run: `cargo test -p bosun-addon --test bad_input`.

use std::collections::BTreeMap;

use bosun_addon::hook_config::{self, HookKind};
use bosun_addon::hook_metrics;
use bosun_addon::hook_output::{self, Origin};
use bosun_addon::modules::parse_config_map;
use bosun_addon::ports::HookResult;
use bosun_addon::values;
use proptest::prelude::*;
use serde_json::{Value, json};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A token that is no valid value of any field here (no keyword starts with `zq`).
fn garbage() -> impl Strategy<Value = String> {
    "zq[a-z0-9]{0,8}"
}

/// A value nested `depth` levels deep in lists and objects.
fn deep(depth: usize) -> Value {
    (0..depth).fold(json!("x"), |v, i| {
        if i % 2 == 0 {
            json!([v])
        } else {
            json!({ "a": v })
        }
    })
}

// ---------------------------------------------------------------------------------------
// 1. hook --config
// ---------------------------------------------------------------------------------------

fn valid_hook_config() -> Value {
    json!({
        "configVersion": "v1",
        "onStartup": 10,
        "schedule": [{ "name": "every", "crontab": "*/5 * * * *" }],
        "kubernetes": [{
            "name": "pods",
            "apiVersion": "v1",
            "kind": "Pod",
            "executeHookOnEvent": ["Added", "Modified"],
            "nameSelector": { "matchNames": ["a"] },
            "labelSelector": { "matchLabels": { "app": "x" } },
            "jqFilter": ".metadata.name",
            "queue": "q"
        }],
        "settings": { "executionMinInterval": "5s", "executionBurst": 3 }
    })
}

type Mutate = fn(&mut Value, &str);

/// One malformed `--config` shape: the mutation, the field the error must name and what
/// its message must say was expected.
struct ConfigCase {
    mutate: Mutate,
    field: &'static str,
    expected: &'static str,
}

const fn cc(mutate: Mutate, field: &'static str, expected: &'static str) -> ConfigCase {
    ConfigCase {
        mutate,
        field,
        expected,
    }
}

fn k0(v: &mut Value) -> &mut Value {
    &mut v["kubernetes"][0]
}

fn s0(v: &mut Value) -> &mut Value {
    &mut v["schedule"][0]
}

fn remove(v: &mut Value, key: &str) {
    if let Some(m) = v.as_object_mut() {
        m.remove(key);
    }
}

const HOOK_CONFIG_CASES: &[ConfigCase] = &[
    // configVersion
    cc(
        |v, _| v["configVersion"] = json!(1),
        "configVersion",
        "expected \"v1\"",
    ),
    cc(
        |v, g| v["configVersion"] = json!(g),
        "configVersion",
        "expected \"v1\"",
    ),
    cc(
        |v, _| v["configVersion"] = json!(["v1"]),
        "configVersion",
        "expected \"v1\"",
    ),
    // onStartup
    cc(
        |v, g| v["onStartup"] = json!(g),
        "onStartup",
        "expected an integer order",
    ),
    cc(
        |v, _| v["onStartup"] = json!(1.5),
        "onStartup",
        "expected an integer order",
    ),
    cc(
        |v, _| v["onStartup"] = deep(40),
        "onStartup",
        "expected an integer order",
    ),
    // top level
    cc(
        |v, g| v[format!("x{g}")] = json!(1),
        "x",
        "unknown field; expected one of",
    ),
    cc(
        |v, _| v["beforeHelm"] = json!(1),
        "beforeHelm",
        "not allowed in a global hook",
    ),
    cc(
        |v, _| v["kubernetesValidating"] = json!([]),
        "kubernetesValidating",
        "webhooks are not supported",
    ),
    // schedule
    cc(
        |v, g| v["schedule"] = json!({ "crontab": g }),
        "schedule",
        "expected a list of bindings",
    ),
    cc(
        |v, _| v["schedule"] = json!([]),
        "schedule",
        "expected at least 1 binding",
    ),
    cc(
        |v, g| v["schedule"][0] = json!(g),
        "schedule[0]",
        "expected an object",
    ),
    cc(
        |v, _| remove(s0(v), "crontab"),
        "schedule[0].crontab",
        "required field is missing",
    ),
    cc(
        |v, g| s0(v)["crontab"] = json!(g),
        "schedule[0].crontab",
        "invalid crontab",
    ),
    cc(
        |v, _| s0(v)["crontab"] = json!(5),
        "schedule[0].crontab",
        "expected a string",
    ),
    cc(
        |v, _| s0(v)["crontab"] = json!("@every -5s"),
        "schedule[0].crontab",
        "invalid crontab",
    ),
    cc(
        |v, g| s0(v)[format!("x{g}")] = json!(1),
        "schedule[0].x",
        "unknown field",
    ),
    cc(
        |v, g| s0(v)["allowFailure"] = json!(g),
        "schedule[0].allowFailure",
        "expected true or false",
    ),
    cc(
        |v, _| s0(v)["includeSnapshotsFrom"] = json!([]),
        "schedule[0].includeSnapshotsFrom",
        "expected at least 1 item",
    ),
    cc(
        |v, g| s0(v)["includeSnapshotsFrom"] = json!([g]),
        "schedule[0].includeSnapshotsFrom",
        "is not the name of a kubernetes binding",
    ),
    cc(
        |v, _| s0(v)["queue"] = json!(7),
        "schedule[0].queue",
        "expected a string",
    ),
    // kubernetes
    cc(
        |v, g| v["kubernetes"] = json!(g),
        "kubernetes",
        "expected a list of bindings",
    ),
    cc(
        |v, _| v["kubernetes"] = json!([]),
        "kubernetes",
        "expected at least 1 binding",
    ),
    cc(
        |v, _| v["kubernetes"][0] = json!(["Pod"]),
        "kubernetes[0]",
        "expected an object",
    ),
    cc(
        |v, _| remove(k0(v), "kind"),
        "kubernetes[0].kind",
        "required field is missing",
    ),
    cc(
        |v, _| k0(v)["kind"] = json!(""),
        "kubernetes[0].kind",
        "required field is missing",
    ),
    cc(
        |v, _| k0(v)["kind"] = json!(1e300),
        "kubernetes[0].kind",
        "expected a string",
    ),
    cc(
        |v, g| k0(v)["apiVersion"] = json!(format!("a/{g}/c")),
        "kubernetes[0].apiVersion",
        "is not a group/version",
    ),
    cc(
        |v, _| k0(v)["apiVersion"] = json!("/v1"),
        "kubernetes[0].apiVersion",
        "is not a group/version",
    ),
    cc(
        |v, g| k0(v)["executeHookOnEvent"] = json!([g]),
        "kubernetes[0].executeHookOnEvent[0]",
        "expected Added, Modified or Deleted",
    ),
    cc(
        |v, _| k0(v)["executeHookOnEvent"] = json!("Added"),
        "kubernetes[0].executeHookOnEvent",
        "expected a list of strings",
    ),
    cc(
        |v, _| k0(v)["executeHookOnEvent"] = json!(["Added", 3]),
        "kubernetes[0].executeHookOnEvent[1]",
        "expected a string",
    ),
    cc(
        |v, g| k0(v)["nameSelector"] = json!(g),
        "kubernetes[0].nameSelector",
        "expected an object",
    ),
    cc(
        |v, _| k0(v)["nameSelector"] = json!({}),
        "kubernetes[0].nameSelector.matchNames",
        "required field is missing",
    ),
    cc(
        |v, _| k0(v)["nameSelector"] = json!({ "matchNames": [{}] }),
        "kubernetes[0].nameSelector.matchNames[0]",
        "expected a string",
    ),
    cc(
        |v, _| k0(v)["labelSelector"] = json!({}),
        "kubernetes[0].labelSelector",
        "expected matchLabels and/or matchExpressions",
    ),
    cc(
        |v, _| k0(v)["labelSelector"]["matchLabels"]["app"] = deep(30),
        "kubernetes[0].labelSelector.matchLabels.app",
        "expected a string",
    ),
    cc(
        |v, g| {
            k0(v)["labelSelector"] = json!({ "matchExpressions": [{ "key": "a", "operator": g }] })
        },
        "kubernetes[0].labelSelector.matchExpressions[0].operator",
        "expected In, NotIn, Exists or DoesNotExist",
    ),
    cc(
        |v, _| {
            k0(v)["labelSelector"] =
                json!({ "matchExpressions": [{ "key": "a", "operator": "In" }] })
        },
        "kubernetes[0].labelSelector.matchExpressions[0].values",
        "needs at least one value",
    ),
    cc(
        |v, _| {
            k0(v)["labelSelector"] = json!({ "matchExpressions": [{ "key": "a", "operator": "Exists", "values": ["b"] }] })
        },
        "kubernetes[0].labelSelector.matchExpressions[0].values",
        "takes no values",
    ),
    cc(
        |v, _| k0(v)["labelSelector"] = json!({ "matchExpressions": [{ "operator": "Exists" }] }),
        "kubernetes[0].labelSelector.matchExpressions[0].key",
        "required field is missing",
    ),
    cc(
        |v, g| k0(v)["labelSelector"] = json!({ "matchExpressions": g }),
        "kubernetes[0].labelSelector.matchExpressions",
        "expected a list",
    ),
    cc(
        |v, _| k0(v)["jqFilter"] = json!(42),
        "kubernetes[0].jqFilter",
        "expected a string",
    ),
    cc(
        |v, g| k0(v)[format!("x{g}")] = json!(true),
        "kubernetes[0].x",
        "unknown field; expected one of",
    ),
    cc(
        |v, g| {
            k0(v)["fieldSelector"] =
                json!({ "matchExpressions": [{ "field": "a", "operator": g, "value": "b" }] })
        },
        "kubernetes[0].fieldSelector.matchExpressions[0].operator",
        "expected =, ==, Equals, != or NotEquals",
    ),
    cc(
        |v, _| k0(v)["fieldSelector"] = json!({}),
        "kubernetes[0].fieldSelector.matchExpressions",
        "required list is missing",
    ),
    cc(
        |v, g| k0(v)["namespace"] = json!({ format!("x{g}"): 1 }),
        "kubernetes[0].namespace.x",
        "unknown field",
    ),
    cc(
        |v, g| k0(v)["resynchronizationPeriod"] = json!(g),
        "kubernetes[0].resynchronizationPeriod",
        "is not a duration",
    ),
    cc(
        |v, _| k0(v)["waitForSynchronization"] = json!(3),
        "kubernetes[0].waitForSynchronization",
        "expected true or false",
    ),
    cc(
        |v, g| k0(v)["keepFullObjectsInMemory"] = json!(g),
        "kubernetes[0].keepFullObjectsInMemory",
        "expected true or false",
    ),
    cc(
        |v, _| k0(v)["group"] = json!(["g"]),
        "kubernetes[0].group",
        "expected a string",
    ),
    // settings
    cc(
        |v, _| v["settings"]["executionBurst"] = json!(0),
        "settings.executionBurst",
        "expected a positive integer",
    ),
    cc(
        |v, g| v["settings"]["executionBurst"] = json!(g),
        "settings.executionBurst",
        "expected a positive integer",
    ),
    cc(
        |v, g| v["settings"]["executionMinInterval"] = json!(g),
        "settings.executionMinInterval",
        "is not a duration",
    ),
    cc(
        |v, _| v["settings"]["executionMinPeriod"] = json!("1s"),
        "settings.executionMinPeriod",
        "not both",
    ),
    cc(
        |v, _| v["settings"] = json!([1]),
        "settings",
        "expected an object",
    ),
];

/// Whole-document shapes: the field is empty (the document), the message says why.
const HOOK_CONFIG_DOCUMENT_CASES: &[(&str, &str)] = &[
    ("", "printed nothing"),
    ("{ \"configVersion\": \"v1\", ", "not valid YAML or JSON"),
    ("[1, 2]", "expected an object"),
    ("{\"configVersion\": \"v1\"}", "needs at least one binding"),
];

/// Module hooks and the legacy v0 format: (kind, the document from a token, the field
/// the error names, what it says).
type OtherConfigCase = (HookKind, fn(&str) -> Value, &'static str, &'static str);

fn v0() -> Value {
    json!({
        "onStartup": 1,
        "schedule": [{ "crontab": "* * * * *" }],
        "onKubernetesEvent": [{ "kind": "Pod", "event": ["add"] }]
    })
}

fn with(mut v: Value, f: impl FnOnce(&mut Value)) -> Value {
    f(&mut v);
    v
}

const HOOK_CONFIG_OTHER_CASES: &[OtherConfigCase] = &[
    (
        HookKind::Module,
        |_| json!({ "configVersion": "v1", "beforeHelm": 1, "afterAll": 1 }),
        "afterAll",
        "not allowed in a module hook",
    ),
    (
        HookKind::Module,
        |g| json!({ "configVersion": "v1", "beforeHelm": g }),
        "beforeHelm",
        "expected an integer order",
    ),
    (
        HookKind::Module,
        |_| json!({ "configVersion": "v1", "afterDeleteHelm": [] }),
        "afterDeleteHelm",
        "expected an integer order",
    ),
    (
        HookKind::Global,
        |_| with(v0(), |v| v["kubernetes"] = json!([])),
        "kubernetes",
        "unknown field; expected one of: onStartup, schedule, onKubernetesEvent",
    ),
    (
        HookKind::Global,
        |g| with(v0(), |v| v["onKubernetesEvent"][0]["event"] = json!([g])),
        "onKubernetesEvent[0].event",
        "expected add, update or delete",
    ),
    (
        HookKind::Global,
        |_| with(v0(), |v| remove(&mut v["onKubernetesEvent"][0], "kind")),
        "onKubernetesEvent[0].kind",
        "required field is missing",
    ),
    (
        HookKind::Module,
        |g| with(v0(), |v| v["schedule"][0]["queue"] = json!(g)),
        "schedule[0].queue",
        "unknown field",
    ),
    (
        HookKind::Module,
        |g| {
            with(v0(), |v| {
                v["onKubernetesEvent"][0]["namespaceSelector"] = json!(g)
            })
        },
        "onKubernetesEvent[0].namespaceSelector",
        "expected an object",
    ),
    (
        HookKind::Global,
        |_| json!({}),
        "",
        "the configuration has no bindings",
    ),
];

fn check_other_hook_config(case: &OtherConfigCase, token: &str, hook: &str) {
    let (kind, doc, field, expected) = case;
    let text = serde_json::to_string(&doc(token)).unwrap();
    let err = hook_config::parse(&text, *kind, hook).expect_err(&text);
    let shown = err.to_string();
    assert_eq!(err.hook, hook, "{shown}");
    assert_eq!(err.field, *field, "{shown}");
    assert!(
        shown.contains(expected),
        "expected {expected:?} in: {shown}"
    );
}

#[test]
fn module_and_v0_hook_config_shapes_name_their_field() {
    for case in HOOK_CONFIG_OTHER_CASES {
        check_other_hook_config(case, "zqtoken", "hooks/other");
    }
}

fn check_hook_config(case: &ConfigCase, token: &str, hook: &str) {
    let mut doc = valid_hook_config();
    (case.mutate)(&mut doc, token);
    let text = serde_json::to_string(&doc).unwrap();
    let err = hook_config::parse(&text, HookKind::Global, hook).expect_err(&format!(
        "accepted a config with a broken {}: {text}",
        case.field
    ));
    let shown = err.to_string();
    assert_eq!(err.hook, hook, "{shown}");
    assert!(
        err.field.starts_with(case.field),
        "expected the error to name {:?}: {shown}",
        case.field
    );
    assert!(shown.contains(&err.field), "{shown}");
    assert!(shown.contains(hook), "{shown}");
    assert!(
        shown.contains(case.expected),
        "expected {:?} in: {shown}",
        case.expected
    );
}

#[test]
fn the_valid_hook_config_is_accepted() {
    let text = serde_json::to_string(&valid_hook_config()).unwrap();
    hook_config::parse(&text, HookKind::Global, "base").expect("the valid base");
}

#[test]
fn every_hook_config_shape_names_its_field() {
    for case in HOOK_CONFIG_CASES {
        check_hook_config(case, "zqtoken", "hooks/every.sh");
    }
    for (text, expected) in HOOK_CONFIG_DOCUMENT_CASES {
        let err = hook_config::parse(text, HookKind::Module, "hooks/doc.sh").expect_err(text);
        let shown = err.to_string();
        assert!(
            shown.contains("hooks/doc.sh") && shown.contains(expected),
            "{shown}"
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn malformed_hook_configs_get_precise_errors(
        i in 0..HOOK_CONFIG_CASES.len(),
        token in garbage(),
        hook in "[a-z]{1,6}/[a-z]{1,6}\\.sh",
        yaml in any::<bool>(),
    ) {
        let case = &HOOK_CONFIG_CASES[i];
        if yaml {
            // The same document as YAML: the errors do not depend on the syntax.
            let mut doc = valid_hook_config();
            (case.mutate)(&mut doc, &token);
            let text = serde_saphyr::to_string(&doc).unwrap();
            let err = hook_config::parse(&text, HookKind::Global, &hook).expect_err(&text);
            prop_assert!(err.field.starts_with(case.field), "{err}");
            prop_assert!(err.to_string().contains(case.expected), "{err}");
        } else {
            check_hook_config(case, &token, &hook);
        }
    }

    #[test]
    fn malformed_module_and_v0_hook_configs_get_precise_errors(
        i in 0..HOOK_CONFIG_OTHER_CASES.len(),
        token in garbage(),
        hook in "[a-z]{1,6}/[a-z]{1,6}",
    ) {
        check_other_hook_config(&HOOK_CONFIG_OTHER_CASES[i], &token, &hook);
    }

    #[test]
    fn garbage_hook_configs_never_panic(text in "\\PC{0,200}") {
        // Anything at all: either a configuration or an error naming the hook.
        if let Err(e) = hook_config::parse(&text, HookKind::Module, "hooks/any") {
            prop_assert!(e.to_string().contains("hooks/any"), "{e}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// 2. VALUES_JSON_PATCH_PATH and CONFIG_VALUES_JSON_PATCH_PATH
// ---------------------------------------------------------------------------------------

const VALUES: &str = "VALUES_JSON_PATCH_PATH";
const CONFIG: &str = "CONFIG_VALUES_JSON_PATCH_PATH";

/// Which hook writes the patch.
#[derive(Clone, Copy, Debug)]
enum Writer {
    Global,
    Module,
}

/// One malformed patch shape: who writes it, into which file, the text (from a token) and
/// what the error must say.
struct PatchCase {
    writer: Writer,
    file: &'static str,
    text: fn(&str) -> String,
    expected: &'static [&'static str],
}

const fn pc(
    writer: Writer,
    file: &'static str,
    text: fn(&str) -> String,
    expected: &'static [&'static str],
) -> PatchCase {
    PatchCase {
        writer,
        file,
        text,
        expected,
    }
}

const PATCH_CASES: &[PatchCase] = &[
    pc(
        Writer::Module,
        VALUES,
        |g| format!("[{{\"op\": \"add\", {g}"),
        &["not a JSON patch stream at item 0"],
    ),
    pc(
        Writer::Module,
        VALUES,
        |g| format!("\"{g}\""),
        &["item 0", "expected an operation object or a list of them"],
    ),
    pc(
        Writer::Module,
        VALUES,
        |_| "42".into(),
        &["item 0", "expected an operation object"],
    ),
    pc(
        Writer::Module,
        VALUES,
        |g| format!(r#"[{{"path": "/myModule/{g}", "value": 1}}]"#),
        &["item 0", "has no \"op\""],
    ),
    pc(
        Writer::Module,
        VALUES,
        |g| format!(r#"[{{"op": "replace", "path": "/myModule/{g}", "value": 1}}]"#),
        &[
            "operation 0 (replace /myModule/",
            "may only use add and remove",
        ],
    ),
    pc(
        Writer::Module,
        VALUES,
        |g| format!(r#"[{{"op": "move", "from": "/myModule/a", "path": "/myModule/{g}"}}]"#),
        &["operation 0 (move", "may only use add and remove"],
    ),
    pc(
        Writer::Module,
        VALUES,
        |g| format!(r#"[{{"op": "{g}", "path": "/myModule/a"}}]"#),
        &["operation 0 (zq", "may only use add and remove"],
    ),
    pc(
        Writer::Module,
        VALUES,
        |g| format!(r#"[{{"op": "add", "path": "/myModule/{g}"}}]"#),
        &["item 0", "missing field `value`"],
    ),
    pc(
        Writer::Module,
        VALUES,
        |_| r#"[{"op": "add", "path": 5, "value": 1}]"#.into(),
        &["item 0", "invalid type"],
    ),
    pc(
        Writer::Module,
        VALUES,
        |g| format!(r#"[{{"op": "add", "path": "myModule/{g}", "value": 1}}]"#),
        &["myModule/zq"],
    ),
    pc(
        Writer::Module,
        VALUES,
        |g| format!(r#"[{{"op": "add", "path": "/global/{g}", "value": 1}}]"#),
        &[
            "operation 0 changes /global/",
            "outside this hook's values (/myModule/…)",
        ],
    ),
    pc(
        Writer::Module,
        VALUES,
        |g| format!(r#"[{{"op": "remove", "path": "/otherModule/{g}"}}]"#),
        &["operation 0 changes /otherModule/", "(/myModule/…)"],
    ),
    pc(
        Writer::Module,
        VALUES,
        |g| {
            format!(
                r#"{{"op": "add", "path": "/myModule/a", "value": 1}} [{{"op": "add", "path": "/{g}", "value": 1}}]"#
            )
        },
        &["operation 1 changes /zq", "(/myModule/…)"],
    ),
    pc(
        Writer::Global,
        VALUES,
        |g| format!(r#"[{{"op": "add", "path": "/myModule/{g}", "value": 1}}]"#),
        &[
            "operation 0 changes /myModule/",
            "(/global/… and /<module>Enabled)",
        ],
    ),
    pc(
        Writer::Global,
        VALUES,
        |g| format!(r#"[{{"op": "add", "path": "/{g}Enabled/x", "value": true}}]"#),
        &[
            "operation 0 changes /zq",
            "(/global/… and /<module>Enabled)",
        ],
    ),
    pc(
        Writer::Global,
        VALUES,
        |_| r#"[{"op": "add", "path": "/Enabled", "value": true}]"#.into(),
        &["operation 0 changes /Enabled"],
    ),
    pc(
        Writer::Module,
        CONFIG,
        |g| format!(r#"[{{"op": "copy", "from": "/myModule/a", "path": "/myModule/{g}"}}]"#),
        &["operation 0 (copy", "may only use add and remove"],
    ),
    pc(
        Writer::Module,
        CONFIG,
        |g| format!(r#"[{{"op": "add", "path": "/global/{g}", "value": 1}}]"#),
        &["operation 0 changes /global/", "(/myModule/…)"],
    ),
    pc(
        Writer::Global,
        CONFIG,
        |g| format!(r#"[{{"op": "add", "path": "/{g}Enabled", "value": "yes"}}]"#),
        &[
            "operation on /zq",
            "Enabled: expected true or false, got \"yes\"",
        ],
    ),
    pc(
        Writer::Global,
        CONFIG,
        |g| format!("[{{\"op\": \"add\", \"path\": \"/global/{g}\", \"value\": }}]"),
        &["not a JSON patch stream at item 0"],
    ),
];

fn check_patch(case: &PatchCase, token: &str, hook: &str) {
    let text = (case.text)(token);
    let (module, origin_shown) = match case.writer {
        Writer::Global => (None, format!("hook {hook:?}")),
        Writer::Module => (
            Some("my-module"),
            format!("module my-module: hook {hook:?}"),
        ),
    };
    let mut out = HookResult::default();
    match case.file {
        VALUES => out.values_patch = text.clone(),
        _ => out.config_values_patch = text.clone(),
    }
    let origin = Origin { hook, module };
    let problem = hook_output::parse(origin, &out).expect_err(&format!("accepted {text}"));
    // What the hook runner reports: the origin, then the problem.
    let shown = format!("{origin}: {problem}");
    assert!(shown.starts_with(&origin_shown), "{shown}");
    assert!(shown.contains(case.file), "expected the file in: {shown}");
    for e in case.expected {
        assert!(shown.contains(e), "expected {e:?} in: {shown}");
    }
}

#[test]
fn every_patch_shape_names_the_file_and_operation() {
    for case in PATCH_CASES {
        check_patch(case, "zqtoken", "hooks/patch");
    }
}

#[test]
fn a_patch_that_does_not_apply_names_the_operation_and_path() {
    let ops = values::parse_patch_stream(
        VALUES,
        r#"[{"op": "add", "path": "/myModule/a", "value": 1}, {"op": "add", "path": "/myModule/list/7", "value": 1}]"#,
    )
    .unwrap();
    let mut doc = json!({ "myModule": { "list": [1] } });
    let (index, message) = values::apply_memory(&mut doc, &ops).expect_err("past the end");
    assert_eq!(index, 1, "{message}");
    assert!(message.contains("/myModule/list/7"), "{message}");
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn malformed_patches_get_precise_errors(
        i in 0..PATCH_CASES.len(),
        token in garbage(),
        hook in "[a-z]{1,8}",
    ) {
        check_patch(&PATCH_CASES[i], &token, &hook);
    }

    #[test]
    fn garbage_patch_streams_never_panic(text in "\\PC{0,120}") {
        if let Err(e) = values::parse_patch_stream(VALUES, &text) {
            prop_assert!(e.to_string().starts_with(VALUES), "{e}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// 4. the addon-operator ConfigMap
// ---------------------------------------------------------------------------------------

/// One malformed ConfigMap shape: the key, its text (from a token) and the expectation.
struct ConfigMapCase {
    key: fn(&str) -> String,
    text: fn(&str) -> String,
    expected: &'static str,
}

const CONFIG_MAP_CASES: &[ConfigMapCase] = &[
    ConfigMapCase {
        key: |_| "global".into(),
        text: |g| format!("a: [{g}"),
        expected: "is not valid YAML",
    },
    ConfigMapCase {
        key: |_| "global".into(),
        text: |g| g.to_string(),
        expected: "must be a YAML mapping of values, got the scalar",
    },
    ConfigMapCase {
        key: |_| "global".into(),
        text: |g| format!("- {g}\n- b\n"),
        expected: "must be a YAML mapping of values, got a list",
    },
    ConfigMapCase {
        key: |_| "myModule".into(),
        text: |g| format!("{{{g}: "),
        expected: "is not valid YAML",
    },
    ConfigMapCase {
        key: |_| "myModule".into(),
        text: |_| "12345".into(),
        expected: "got the scalar 12345",
    },
    ConfigMapCase {
        key: |_| "myModule".into(),
        text: |g| format!("[{g}]"),
        expected: "got a list",
    },
    ConfigMapCase {
        key: |_| "myModuleEnabled".into(),
        text: |g| g.to_string(),
        expected: "must be \"true\" or \"false\"",
    },
    ConfigMapCase {
        key: |_| "myModuleEnabled".into(),
        text: |_| "yes".into(),
        expected: "must be \"true\" or \"false\", got \"yes\"",
    },
    ConfigMapCase {
        key: |g| format!("My_{g}"),
        text: |_| "{}".into(),
        expected: "is not a module key",
    },
];

fn check_config_map(case: &ConfigMapCase, token: &str, name: &str) {
    let key = (case.key)(token);
    let mut data = BTreeMap::new();
    data.insert("global".to_string(), "a: 1\n".to_string());
    data.insert("myModule".to_string(), "b: 2\n".to_string());
    data.insert(key.clone(), (case.text)(token));
    let err = parse_config_map(&data, &[], name)
        .expect_err(&format!("accepted {data:?}"))
        .to_string();
    assert!(err.contains(&format!("ConfigMap {name}")), "{err}");
    assert!(err.contains(&format!("key {key:?}")), "{err}");
    assert!(
        err.contains(case.expected),
        "expected {:?} in: {err}",
        case.expected
    );
}

#[test]
fn every_config_map_shape_names_the_key() {
    for case in CONFIG_MAP_CASES {
        check_config_map(case, "zqtoken", "addon-operator");
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn malformed_config_maps_get_precise_errors(
        i in 0..CONFIG_MAP_CASES.len(),
        token in garbage(),
        name in "[a-z][a-z-]{0,10}",
    ) {
        check_config_map(&CONFIG_MAP_CASES[i], &token, &name);
    }
}

// ---------------------------------------------------------------------------------------
// 5. METRICS_PATH
// ---------------------------------------------------------------------------------------

const VALID_METRIC: &str =
    r#"{"name": "ok_total", "action": "add", "value": 1, "labels": {"a": "b"}}"#;

/// One malformed metrics line (from a token) and what the error must say.
struct MetricsCase {
    line: fn(&str) -> String,
    expected: &'static str,
}

const METRICS_CASES: &[MetricsCase] = &[
    MetricsCase {
        line: |g| format!(r#"{{"name": "m", "action": "{g}", "value": 1}}"#),
        expected: "unknown action \"zq",
    },
    MetricsCase {
        line: |_| r#"{"action": "set", "value": 1}"#.into(),
        expected: "action \"set\" needs a \"name\"",
    },
    MetricsCase {
        line: |_| r#"{"name": "", "action": "add", "value": 1}"#.into(),
        expected: "action \"add\" needs a \"name\"",
    },
    MetricsCase {
        line: |_| r#"{"name": 7, "action": "add", "value": 1}"#.into(),
        expected: "\"name\" must be a string",
    },
    MetricsCase {
        line: |g| format!(r#"{{"name": "1{g}", "action": "set", "value": 1}}"#),
        expected: "invalid metric name \"1zq",
    },
    MetricsCase {
        line: |g| format!(r#"{{"name": "m", "action": "set", "value": "{g}"}}"#),
        expected: "\"value\" must be a number",
    },
    MetricsCase {
        line: |_| r#"{"name": "m", "action": "observe"}"#.into(),
        expected: "action \"observe\" needs a \"value\"",
    },
    MetricsCase {
        line: |_| r#"{"name": "m", "action": "set", "value": [1]}"#.into(),
        expected: "\"value\" must be a number",
    },
    MetricsCase {
        line: |g| format!(r#"{{"name": "m", "set": "{g}"}}"#),
        expected: "\"set\" must be a number",
    },
    MetricsCase {
        line: |_| r#"{"name": "m", "add": -1}"#.into(),
        expected: "a counter cannot decrease",
    },
    MetricsCase {
        line: |g| format!(r#"{{"name": "m", "set": 1, "labels": "{g}"}}"#),
        expected: "\"labels\" must be an object",
    },
    MetricsCase {
        line: |g| format!(r#"{{"name": "m", "set": 1, "labels": {{"{g}": 5}}}}"#),
        expected: "label \"zq",
    },
    MetricsCase {
        line: |g| format!(r#"{{"name": "m", "set": 1, "labels": {{"__{g}": "v"}}}}"#),
        expected: "invalid label name \"__zq",
    },
    MetricsCase {
        line: |g| format!(r#"{{"name": "m", "set": 1, "labels": {{"9{g}": "v"}}}}"#),
        expected: "invalid label name \"9zq",
    },
    MetricsCase {
        line: |_| r#"{"action": "expire"}"#.into(),
        expected: "action \"expire\" needs a \"group\"",
    },
    MetricsCase {
        line: |g| format!(r#"{{"name": "m", "action": "observe", "value": 1, "group": "{g}"}}"#),
        expected: "\"observe\" cannot be used with a \"group\"",
    },
    MetricsCase {
        line: |g| format!(r#"{{"name": "m", "action": "observe", "value": 1, "buckets": "{g}"}}"#),
        expected: "\"buckets\" must be an array",
    },
    MetricsCase {
        line: |_| r#"{"name": "m", "action": "observe", "value": 1, "buckets": []}"#.into(),
        expected: "\"buckets\" must not be empty",
    },
    MetricsCase {
        line: |g| {
            format!(r#"{{"name": "m", "action": "observe", "value": 1, "buckets": [1, "{g}"]}}"#)
        },
        expected: "\"buckets\" must be a number",
    },
    MetricsCase {
        line: |_| r#"{"name": "m", "action": "set", "add": 1, "value": 1}"#.into(),
        expected: "both \"action\":\"set\" and the \"add\" shortcut",
    },
    MetricsCase {
        line: |_| r#"{"name": "m", "add": 1, "set": 1}"#.into(),
        expected: "both the \"add\" and \"set\" shortcuts",
    },
    MetricsCase {
        line: |g| format!(r#"{{"name": "m", "value": 1, "group": "{g}"}}"#),
        expected: "no \"action\"",
    },
    MetricsCase {
        line: |g| format!(r#"["{g}"]"#),
        expected: "expected a JSON object",
    },
];

fn check_metrics(case: &MetricsCase, token: &str, valid_before: usize) {
    let mut text = String::new();
    for _ in 0..valid_before {
        text.push_str(VALID_METRIC);
        text.push('\n');
    }
    text.push_str(&(case.line)(token));
    text.push('\n');
    let err = hook_metrics::parse(&text).expect_err(&format!("accepted {text}"));
    assert_eq!(err.line, valid_before + 1, "{err}");
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("line {}: ", valid_before + 1)),
        "{shown}"
    );
    assert!(
        shown.contains(case.expected),
        "expected {:?} in: {shown}",
        case.expected
    );
    // As the hook runner reports it.
    let hook = format!(
        "{}",
        Origin {
            hook: "hooks/m",
            module: None
        }
    );
    let out = HookResult {
        metrics: text,
        ..HookResult::default()
    };
    let problem = hook_output::parse(
        Origin {
            hook: "hooks/m",
            module: None,
        },
        &out,
    )
    .expect_err("the same metrics through the output pipeline");
    let shown = format!("{hook}: {problem}");
    assert!(
        shown.contains("hook \"hooks/m\": METRICS_PATH line"),
        "{shown}"
    );
}

#[test]
fn every_metrics_shape_names_the_line_and_field() {
    for case in METRICS_CASES {
        check_metrics(case, "zqtoken", 0);
    }
}

#[test]
fn metrics_that_are_not_json_name_the_line() {
    let text = format!("{VALID_METRIC}\n{VALID_METRIC}\n{{\"name\": \"m\", \"set\": }}\n");
    let err = hook_metrics::parse(&text).expect_err("not JSON");
    assert_eq!(err.line, 3, "{err}");
    assert!(err.to_string().contains("not JSON"), "{err}");
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn malformed_metrics_get_precise_errors(
        i in 0..METRICS_CASES.len(),
        token in garbage(),
        valid_before in 0usize..4,
    ) {
        check_metrics(&METRICS_CASES[i], &token, valid_before);
    }

    #[test]
    fn garbage_metrics_never_panic(text in "\\PC{0,160}") {
        if let Err(e) = hook_metrics::parse(&text) {
            prop_assert!(e.to_string().starts_with("line "), "{e}");
        }
    }
}

#[test]
fn deeply_nested_input_is_an_error_not_a_stack_overflow() {
    for depth in [1_000, 100_000] {
        let lists = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let maps = format!("{}1{}", "{a: ".repeat(depth), "}".repeat(depth));
        let block = (0..depth.min(5_000))
            .map(|i| format!("{}- ", "  ".repeat(i)))
            .collect::<Vec<_>>()
            .join("\n");
        for text in [&lists, &maps, &block] {
            let config = format!("configVersion: v1\nonStartup: {text}\n");
            let err = hook_config::parse(&config, HookKind::Global, "hooks/deep")
                .expect_err("too deep or wrong type");
            assert!(err.to_string().contains("hooks/deep"), "{err}");
            let data = BTreeMap::from([("global".to_string(), format!("a: {text}\n"))]);
            // Either refused as too deep, or taken as the mapping it is.
            if let Err(e) = parse_config_map(&data, &[], "addon-operator") {
                assert!(e.to_string().contains("key \"global\""), "{e}");
            }
        }
        let metrics = format!("{{\"name\": \"m\", \"set\": 1, \"labels\": {lists}}}");
        let err = hook_metrics::parse(&metrics).expect_err("too deep");
        assert_eq!(err.line, 1, "{err}");
        let err = values::parse_patch_stream(VALUES, &lists).expect_err("too deep");
        assert!(err.to_string().starts_with(VALUES), "{err}");
    }
}

/// YAML aliases that expand to a document far larger than the text ("billion laughs").
fn alias_bomb(levels: usize) -> String {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..levels {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    text
}

#[test]
fn yaml_alias_bombs_are_refused_or_bounded() {
    let bomb = alias_bomb(9);
    let data = BTreeMap::from([("global".to_string(), bomb.clone())]);
    let started = std::time::Instant::now();
    let result = parse_config_map(&data, &[], "addon-operator");
    let e = result.expect_err("the expansion is refused").to_string();
    assert!(
        e.contains("ConfigMap addon-operator: key \"global\" is not valid YAML"),
        "{e}"
    );
    let config = format!(
        "configVersion: v1\nonStartup: 1\nsettings:\n  {}",
        bomb.replace('\n', "\n  ")
    );
    let e = hook_config::parse(&config, HookKind::Global, "hooks/bomb").expect_err("refused");
    assert!(e.to_string().contains("hooks/bomb"), "{e}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}
