//! Core resources: namespaces, ConfigMaps, Secrets, Services, Pods, ServiceAccounts and
//! Events, with the verbs, patch types, errors and list options clients rely on.

use serde_json::{Value, json};

use crate::harness::*;

const NS: &str = "diff-core";

const NO_SA_CONTROLLER: &str = "no ServiceAccount controller: a namespace gets no default ServiceAccount (nor kube-root-ca.crt ConfigMap)";

const EVENT_ZERO_VALUES: &str = "built-in types are stored schemaless: an Event's unset fields are not written as Go zero values (eventTime: null, reportingComponent: \"\"), and its object reference is not owned as one field";

fn cms() -> String {
    format!("/api/v1/namespaces/{NS}/configmaps")
}

fn cm(name: &str) -> String {
    format!("{}/{name}", cms())
}

fn cm_body(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "diff"}}, "data": {"a": "1"}})
}

fn create_cm(name: &str) -> Step {
    post(&cms(), cm_body(name))
}

fn ns_ready() -> Vec<Step> {
    Vec::new()
}

pub fn cases() -> Vec<Case> {
    let mut c = Vec::new();
    c.extend(namespaces());
    c.extend(configmaps());
    c.extend(patches());
    c.extend(apply());
    c.extend(lists());
    c.extend(deletion());
    c.extend(secrets());
    c.extend(services_pods());
    c.extend(accounts_events());
    c
}

fn namespaces() -> Vec<Case> {
    vec![
        case(
            "namespace create",
            vec![],
            post("/api/v1/namespaces", json!({"metadata": {"name": NS}})),
        ),
        case(
            "namespace get",
            vec![],
            get(&format!("/api/v1/namespaces/{NS}")),
        ),
        case(
            "namespace create again is AlreadyExists",
            vec![],
            post("/api/v1/namespaces", json!({"metadata": {"name": NS}})),
        ),
        case(
            "namespace with an invalid name",
            vec![],
            post(
                "/api/v1/namespaces",
                json!({"metadata": {"name": "Diff.Core"}}),
            ),
        ),
        case(
            "namespace missing",
            vec![],
            get("/api/v1/namespaces/diff-nowhere"),
        ),
        case(
            "namespace generateName",
            vec![],
            post(
                "/api/v1/namespaces",
                json!({"metadata": {"generateName": "diff-gen-"}}),
            ),
        ),
        case(
            "namespace list by name label",
            vec![],
            get("/api/v1/namespaces?labelSelector=kubernetes.io%2Fmetadata.name%3Ddiff-core"),
        ),
        case(
            "namespace delete answers it terminating",
            vec![post(
                "/api/v1/namespaces",
                json!({"metadata": {"name": "diff-core-del"}}),
            )],
            delete("/api/v1/namespaces/diff-core-del"),
        )
        .fields(&[
            "/kind",
            "/status/phase",
            "/metadata/deletionTimestamp",
            "/spec",
        ]),
        case(
            "namespace gone after deletion",
            vec![wait_status("/api/v1/namespaces/diff-core-del", 404)],
            get("/api/v1/namespaces/diff-core-del"),
        ),
        case(
            "configmap in a missing namespace",
            vec![],
            post("/api/v1/namespaces/diff-nowhere/configmaps", cm_body("x")),
        ),
        case(
            "namespace label put back",
            vec![post(
                "/api/v1/namespaces",
                json!({"metadata": {"name": "diff-core-lbl"}}),
            )],
            patch(
                "/api/v1/namespaces/diff-core-lbl",
                MERGE,
                json!({"metadata": {"labels": {"kubernetes.io/metadata.name": null, "x": "y"}}}),
            ),
        ),
    ]
}

fn configmaps() -> Vec<Case> {
    let mut v = vec![
        case("configmap create", ns_ready(), create_cm("c-create")),
        case("configmap get", vec![create_cm("c-get")], get(&cm("c-get"))),
        case("configmap get missing", vec![], get(&cm("c-missing"))),
        case(
            "configmap create twice",
            vec![create_cm("c-twice")],
            create_cm("c-twice"),
        ),
        case(
            "configmap invalid name",
            vec![],
            post(&cms(), json!({"metadata": {"name": "Bad_Name"}})),
        ),
        case(
            "configmap name too long",
            vec![],
            post(&cms(), json!({"metadata": {"name": "a".repeat(254)}})),
        )
        .reason(),
        // A subdomain has no limit on the length of its parts (only on the whole).
        case(
            "configmap name of 253 characters",
            ns_ready(),
            post(&cms(), json!({"metadata": {"name": "a".repeat(253)}})),
        ),
        case(
            "configmap name with a part over 63 characters",
            ns_ready(),
            post(&cms(), json!({"metadata": {"name": format!("{}.b", "a".repeat(100))}})),
        ),
        case(
            "configmap without a name",
            vec![],
            post(&cms(), json!({"metadata": {"labels": {"a": "b"}}})),
        ),
        case(
            "configmap generateName",
            vec![],
            post(&cms(), json!({"metadata": {"generateName": "c-gen-"}, "data": {"k": "v"}})),
        ),
        case(
            "configmap namespace mismatch",
            vec![],
            post(&cms(), json!({"metadata": {"name": "c-mis", "namespace": "other"}})),
        ),
        case(
            "configmap wrong kind",
            vec![],
            post(&cms(), json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c-kind"}})),
        )
        .reason(),
        case(
            "configmap data not a string",
            vec![],
            post(&cms(), json!({"metadata": {"name": "c-num"}, "data": {"a": 1}})),
        )
        .reason(),
        case(
            "configmap invalid label value",
            vec![],
            post(&cms(), json!({"metadata": {"name": "c-lbl", "labels": {"a": "-x-"}}})),
        ),
        case(
            "configmap invalid label key",
            vec![],
            post(&cms(), json!({"metadata": {"name": "c-lbk", "labels": {"Bad Key": "x"}}})),
        ),
        case(
            "configmap invalid annotation key",
            vec![],
            post(&cms(), json!({"metadata": {"name": "c-ann", "annotations": {"a/b/c": "x"}}})),
        ),
        case(
            "configmap invalid data key",
            vec![],
            post(&cms(), json!({"metadata": {"name": "c-dk"}, "data": {"a b": "x"}})),
        )
        .differs("built-in types are stored schemaless: ConfigMap data keys are not validated"),
        case(
            "configmap put with the current resourceVersion",
            vec![create_cm("c-put").save("rv", "/metadata/resourceVersion")],
            put(
                &cm("c-put"),
                json!({"metadata": {"name": "c-put", "resourceVersion": "{rv}"}, "data": {"b": "2"}}),
            ),
        ),
        case(
            "configmap put with a stale resourceVersion",
            vec![
                create_cm("c-stale").save("rv", "/metadata/resourceVersion"),
                patch(&cm("c-stale"), MERGE, json!({"data": {"x": "y"}})),
            ],
            put(
                &cm("c-stale"),
                json!({"metadata": {"name": "c-stale", "resourceVersion": "{rv}"}, "data": {"b": "2"}}),
            ),
        ),
        case(
            "configmap put without resourceVersion",
            vec![create_cm("c-norv")],
            put(&cm("c-norv"), json!({"metadata": {"name": "c-norv"}, "data": {"b": "3"}})),
        ),
        case(
            "configmap put of a missing object",
            vec![],
            put(&cm("c-putmissing"), json!({"metadata": {"name": "c-putmissing"}})),
        ),
        case(
            "configmap put with another name",
            vec![create_cm("c-putname")],
            put(&cm("c-putname"), json!({"metadata": {"name": "other"}})),
        )
        .reason(),
        case(
            "configmap put unchanged keeps resourceVersion",
            vec![create_cm("c-noop").save("rv", "/metadata/resourceVersion")],
            put(&cm("c-noop"), cm_body("c-noop")),
        ),
        case(
            "configmap put managedFields",
            vec![create_cm("c-mf")],
            put(
                &format!("{}?fieldManager=editor", cm("c-mf")),
                json!({"metadata": {"name": "c-mf", "labels": {"app": "diff", "b": "c"}}, "data": {"z": "1"}}),
            ),
        )
        .fields(&["/metadata/managedFields"]),
        case(
            "configmap dryRun create",
            vec![],
            post(&format!("{}?dryRun=All", cms()), cm_body("c-dry")),
        ),
        case(
            "configmap dryRun create stores nothing",
            vec![post(&format!("{}?dryRun=All", cms()), cm_body("c-dry2"))],
            get(&cm("c-dry2")),
        ),
        case(
            "configmap dryRun update stores nothing",
            vec![
                create_cm("c-dry3"),
                put(
                    &format!("{}?dryRun=All", cm("c-dry3")),
                    json!({"metadata": {"name": "c-dry3"}, "data": {"changed": "yes"}}),
                ),
            ],
            get(&cm("c-dry3")),
        ),
        case(
            "configmap dryRun delete keeps it",
            vec![create_cm("c-dry4"), delete(&format!("{}?dryRun=All", cm("c-dry4")))],
            get(&cm("c-dry4")),
        ),
        case(
            "configmap has no generation",
            vec![create_cm("c-gen0"), patch(&cm("c-gen0"), MERGE, json!({"data": {"n": "1"}}))],
            get(&cm("c-gen0")),
        )
        .fields(&["/metadata/generation"]),
        case(
            "configmap immutable update refused",
            vec![post(
                &cms(),
                json!({"metadata": {"name": "c-imm"}, "data": {"a": "1"}, "immutable": true}),
            )],
            patch(&cm("c-imm"), MERGE, json!({"data": {"a": "2"}})),
        )
        .reason()
        .differs("built-in types are stored schemaless: immutable ConfigMaps and Secrets are not enforced"),
        case(
            "configmap yaml body",
            vec![],
            post_yaml(
                &cms(),
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c-yaml\ndata:\n  k: v\n",
            ),
        ),
        case(
            "configmap body not JSON",
            vec![],
            Step {
                body: "{not json".into(),
                ..post(&cms(), json!({}))
            },
        )
        .reason(),
    ];
    // Names of every kind of validity, as kube-apiserver sees them.
    for (i, name) in [
        "a", "a.b", "a-b.c-d", "0abc", "abc-", "a..b", "a_b", "ABC", "x.-y",
    ]
    .iter()
    .enumerate()
    {
        v.push(case(
            format!("configmap name {name:?}"),
            vec![],
            post(
                &cms(),
                json!({"metadata": {"name": format!("{name}")}, "data": {"i": i.to_string()}}),
            ),
        ));
    }
    v
}

fn patches() -> Vec<Case> {
    vec![
        case(
            "merge patch",
            vec![create_cm("p-merge")],
            patch(
                &cm("p-merge"),
                MERGE,
                json!({"data": {"a": null, "b": "2"}, "metadata": {"labels": {"x": "y"}}}),
            ),
        ),
        case(
            "merge patch of a missing object",
            vec![],
            patch(&cm("p-missing"), MERGE, json!({"data": {"b": "2"}})),
        ),
        case(
            "json patch add and replace",
            vec![create_cm("p-json")],
            patch(
                &cm("p-json"),
                JSON_PATCH,
                json!([{"op": "add", "path": "/data/b", "value": "2"}, {"op": "replace", "path": "/data/a", "value": "9"}]),
            ),
        ),
        case(
            "json patch remove",
            vec![create_cm("p-jrm")],
            patch(
                &cm("p-jrm"),
                JSON_PATCH,
                json!([{"op": "remove", "path": "/data/a"}]),
            ),
        ),
        case(
            "json patch failed test",
            vec![create_cm("p-jtest")],
            patch(
                &cm("p-jtest"),
                JSON_PATCH,
                json!([{"op": "test", "path": "/data/a", "value": "nope"}]),
            ),
        )
        .reason(),
        case(
            "json patch on a missing path",
            vec![create_cm("p-jpath")],
            patch(
                &cm("p-jpath"),
                JSON_PATCH,
                json!([{"op": "remove", "path": "/data/zz"}]),
            ),
        )
        .reason(),
        case(
            "json patch not a list",
            vec![create_cm("p-jbad")],
            patch(&cm("p-jbad"), JSON_PATCH, json!({"op": "add"})),
        )
        .reason(),
        case(
            "json patch with a stale resourceVersion test",
            vec![create_cm("p-jrv")],
            patch(
                &cm("p-jrv"),
                JSON_PATCH,
                json!([{"op": "replace", "path": "/metadata/resourceVersion", "value": "1"}]),
            ),
        )
        .reason(),
        case(
            "strategic merge patch of data",
            vec![create_cm("p-smp")],
            patch(&cm("p-smp"), STRATEGIC, json!({"data": {"c": "3"}})),
        ),
        case(
            "strategic merge patch of a pod's containers",
            vec![post(&format!("/api/v1/namespaces/{NS}/pods"), pod("p-pod"))],
            patch(
                &format!("/api/v1/namespaces/{NS}/pods/p-pod"),
                STRATEGIC,
                json!({"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}),
            ),
        )
        .fields(&[
            "/spec/containers/0/name",
            "/spec/containers/0/image",
            "/spec/containers/1",
        ]),
        case(
            "strategic merge patch $patch delete",
            vec![post(
                &format!("/api/v1/namespaces/{NS}/pods"),
                pod_two("p-pod2"),
            )],
            patch(
                &format!("/api/v1/namespaces/{NS}/pods/p-pod2"),
                STRATEGIC,
                json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}}),
            ),
        )
        .fields(&[
            "/metadata/labels",
            "/spec/containers/0/name",
            "/spec/containers/1/name",
        ]),
        case(
            "patch with an unknown content type",
            vec![create_cm("p-ct")],
            patch(&cm("p-ct"), "application/x-other", json!({})),
        )
        .reason(),
        case(
            "merge patch managedFields",
            vec![create_cm("p-mf")],
            patch(
                &format!("{}?fieldManager=patcher", cm("p-mf")),
                MERGE,
                json!({"data": {"p": "1"}}),
            ),
        )
        .fields(&["/metadata/managedFields"]),
        case(
            "merge patch with a stale resourceVersion",
            vec![create_cm("p-mrv")],
            patch(
                &cm("p-mrv"),
                MERGE,
                json!({"metadata": {"resourceVersion": "1"}, "data": {"x": "1"}}),
            ),
        ),
        case(
            "merge patch changing the name",
            vec![create_cm("p-name")],
            patch(
                &cm("p-name"),
                MERGE,
                json!({"metadata": {"name": "p-other"}}),
            ),
        )
        .reason(),
        case(
            "merge patch dryRun",
            vec![create_cm("p-dry")],
            patch(
                &format!("{}?dryRun=All", cm("p-dry")),
                MERGE,
                json!({"data": {"dry": "1"}}),
            ),
        ),
    ]
}

pub fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "diff"}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}})
}

fn pod_two(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"a": "1", "b": "2"}},
        "spec": {"containers": [
            {"name": "one", "image": "busybox:1.36"},
            {"name": "two", "image": "busybox:1.36"}]}})
}

fn apply_cm(name: &str, manager: &str, data: Value, force: bool) -> Step {
    let q = if force { "&force=true" } else { "" };
    patch(
        &format!("{}?fieldManager={manager}{q}", cm(name)),
        APPLY,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}),
    )
}

fn apply() -> Vec<Case> {
    vec![
        case("apply creates", vec![], apply_cm("a-create", "mgr", json!({"a": "1"}), false)),
        case(
            "apply by the same manager",
            vec![apply_cm("a-same", "mgr", json!({"a": "1", "b": "2"}), false)],
            apply_cm("a-same", "mgr", json!({"a": "3"}), false),
        ),
        case(
            "apply conflict",
            vec![apply_cm("a-conf", "one", json!({"a": "1"}), false)],
            apply_cm("a-conf", "two", json!({"a": "2"}), false),
        ),
        case(
            "apply conflict with an update manager",
            vec![
                create_cm("a-upd"),
                patch(&format!("{}?fieldManager=kubectl-edit", cm("a-upd")), MERGE, json!({"data": {"a": "5"}})),
            ],
            apply_cm("a-upd", "applier", json!({"a": "6"}), false),
        ),
        case(
            "apply force takes the field",
            vec![apply_cm("a-force", "one", json!({"a": "1", "k": "x"}), false)],
            apply_cm("a-force", "two", json!({"a": "2"}), true),
        ),
        case(
            "apply same value shares the field",
            vec![apply_cm("a-share", "one", json!({"a": "1"}), false)],
            apply_cm("a-share", "two", json!({"a": "1"}), false),
        ),
        case(
            "apply without fieldManager",
            vec![],
            patch(&cm("a-nomgr"), APPLY, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a-nomgr"}})),
        ),
        case(
            "apply with another name in the body",
            vec![],
            patch(
                &format!("{}?fieldManager=m", cm("a-name")),
                APPLY,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a-other"}}),
            ),
        )
        .reason(),
        case(
            "apply without kind",
            vec![],
            patch(&format!("{}?fieldManager=m", cm("a-nokind")), APPLY, json!({"metadata": {"name": "a-nokind"}})),
        )
        .reason(),
        case(
            "apply dropping a field removes it",
            vec![apply_cm("a-drop", "mgr", json!({"a": "1", "b": "2"}), false)],
            apply_cm("a-drop", "mgr", json!({"a": "1"}), false),
        ),
        case(
            "apply after update keeps both managers",
            vec![
                apply_cm("a-both", "mgr", json!({"a": "1"}), false),
                put(
                    &format!("{}?fieldManager=writer", cm("a-both")),
                    json!({"metadata": {"name": "a-both"}, "data": {"a": "1", "w": "2"}}),
                ),
            ],
            get(&cm("a-both")),
        )
        .fields(&["/metadata/managedFields", "/data"]),
        case(
            "apply dryRun",
            vec![],
            patch(
                &format!("{}?fieldManager=m&dryRun=All", cm("a-dry")),
                APPLY,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a-dry"}}),
            ),
        ),
        case(
            "apply of labels",
            vec![],
            patch(
                &format!("{}?fieldManager=m", cm("a-labels")),
                APPLY,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a-labels", "labels": {"x": "1"}, "annotations": {"y": "2"}}}),
            ),
        ),
        case(
            "apply of a pod's containers merges by name",
            vec![patch(
                &format!("/api/v1/namespaces/{NS}/pods/a-pod?fieldManager=one"),
                APPLY,
                pod("a-pod"),
            )],
            patch(
                &format!("/api/v1/namespaces/{NS}/pods/a-pod?fieldManager=two"),
                APPLY,
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a-pod", "labels": {"two": "yes"}}}),
            ),
        )
        .fields(&["/metadata/labels", "/spec/containers/0/name", "/metadata/managedFields/1"]),
        case(
            "apply conflict on a pod image",
            vec![patch(
                &format!("/api/v1/namespaces/{NS}/pods/a-pod2?fieldManager=one"),
                APPLY,
                pod("a-pod2"),
            )],
            patch(
                &format!("/api/v1/namespaces/{NS}/pods/a-pod2?fieldManager=two"),
                APPLY,
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a-pod2"},
                    "spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}),
            ),
        ),
    ]
}

fn labelled(name: &str, labels: Value) -> Step {
    post(
        &cms(),
        json!({"metadata": {"name": name, "labels": labels}}),
    )
}

fn lists() -> Vec<Case> {
    let select_setup = vec![
        labelled("l-one", json!({"sel": "one", "tier": "a"})),
        labelled("l-two", json!({"sel": "two", "tier": "b"})),
        labelled("l-three", json!({"sel": "three"})),
    ];
    let page_setup: Vec<Step> = (1..=5)
        .map(|i| labelled(&format!("pg-{i}"), json!({"page": "yes"})))
        .collect();
    let mut v = vec![
        case(
            "list selected by equality",
            select_setup,
            get(&format!("{}?labelSelector=sel%3Done", cms())),
        ),
        case(
            "list selected by inequality",
            vec![],
            get(&format!("{}?labelSelector=sel,sel!%3Done", cms())),
        ),
        case(
            "list selected by set",
            vec![],
            get(&format!("{}?labelSelector=sel%20in%20(one,two)", cms())),
        ),
        case(
            "list selected by notin",
            vec![],
            get(&format!("{}?labelSelector=sel,sel%20notin%20(one)", cms())),
        ),
        case(
            "list selected by existence",
            vec![],
            get(&format!("{}?labelSelector=tier", cms())),
        ),
        case(
            "list selected by absence",
            vec![],
            get(&format!("{}?labelSelector=sel,!tier", cms())),
        ),
        case(
            "list selected by two terms",
            vec![],
            get(&format!("{}?labelSelector=sel,tier%3Db", cms())),
        ),
        case(
            "list with an invalid label selector",
            vec![],
            get(&format!("{}?labelSelector=sel%20in%20(", cms())),
        )
        .reason(),
        case(
            "list with an invalid label value",
            vec![],
            get(&format!("{}?labelSelector=sel%3D-x-", cms())),
        )
        .reason(),
        case(
            "list with a field selector on the name",
            vec![],
            get(&format!("{}?fieldSelector=metadata.name%3Dl-two", cms())),
        ),
        case(
            "list with a field selector !=",
            vec![],
            get(&format!(
                "{}?fieldSelector=metadata.name!%3Dl-two&labelSelector=sel",
                cms()
            )),
        ),
        case(
            "list with an unknown field selector",
            vec![],
            get(&format!("{}?fieldSelector=data.a%3Db", cms())),
        ),
        case(
            "list with a malformed field selector",
            vec![],
            get(&format!("{}?fieldSelector=metadata.name", cms())),
        )
        .reason(),
        case(
            "list with label and field selectors",
            vec![],
            get(&format!(
                "{}?fieldSelector=metadata.namespace%3D{NS}&labelSelector=sel%3Dthree",
                cms()
            )),
        ),
        case(
            "list across namespaces with a field selector",
            vec![],
            get("/api/v1/configmaps?fieldSelector=metadata.name%3Dl-one"),
        ),
        case(
            "list first page",
            page_setup,
            get(&format!("{}?labelSelector=page%3Dyes&limit=2", cms())),
        ),
        case(
            "list second page",
            vec![
                get(&format!("{}?labelSelector=page%3Dyes&limit=2", cms()))
                    .save("c", "/metadata/continue"),
            ],
            get(&format!(
                "{}?labelSelector=page%3Dyes&limit=2&continue={{c}}",
                cms()
            )),
        ),
        case(
            "list last page",
            vec![
                get(&format!("{}?labelSelector=page%3Dyes&limit=2", cms()))
                    .save("c", "/metadata/continue"),
                get(&format!(
                    "{}?labelSelector=page%3Dyes&limit=2&continue={{c}}",
                    cms()
                ))
                .save("d", "/metadata/continue"),
            ],
            get(&format!(
                "{}?labelSelector=page%3Dyes&limit=2&continue={{d}}",
                cms()
            )),
        ),
        case(
            "list page without selector counts the rest",
            vec![],
            get(&format!("/api/v1/namespaces/{NS}/serviceaccounts?limit=1")),
        )
        .fields(&["/metadata/remainingItemCount", "/items/0/metadata/name"]),
        case(
            "list with an invalid continue token",
            vec![],
            get(&format!("{}?limit=2&continue=zzz", cms())),
        )
        .reason(),
        case(
            "list with an invalid limit",
            vec![],
            get(&format!("{}?limit=abc", cms())),
        )
        .reason(),
        case(
            "list with a non-numeric resourceVersion",
            vec![],
            get(&format!("{}?resourceVersion=abc", cms())),
        )
        .reason(),
        case(
            "list with an invalid resourceVersionMatch",
            vec![],
            get(&format!(
                "{}?resourceVersion=0&resourceVersionMatch=Newest",
                cms()
            )),
        ),
        case(
            "list with resourceVersionMatch alone",
            vec![],
            get(&format!("{}?resourceVersionMatch=NotOlderThan", cms())),
        ),
        case(
            "list with resourceVersion=0",
            vec![],
            get(&format!(
                "{}?resourceVersion=0&labelSelector=sel%3Dtwo",
                cms()
            )),
        ),
        case(
            "list of a missing resource",
            vec![],
            get(&format!("/api/v1/namespaces/{NS}/widgets")),
        )
        .reason(),
        case(
            "list in a missing namespace",
            vec![],
            get("/api/v1/namespaces/diff-absent/configmaps"),
        ),
        case(
            "list as Table",
            vec![],
            get(&format!("{}?labelSelector=sel%3Done", cms())).accept(TABLE),
        )
        .fields(&[
            "/kind",
            "/apiVersion",
            "/rows/0/cells/0",
            "/rows/0/object/metadata/name",
        ]),
        case(
            "list as Table columns",
            vec![],
            get(&format!("{}?labelSelector=sel%3Done", cms())).accept(TABLE),
        )
        .fields(&["/columnDefinitions", "/rows/0/cells"])
        .differs("Table output of built-in kinds has only Name and Age columns"),
        case("get as Table", vec![], get(&cm("l-one")).accept(TABLE)).fields(&[
            "/kind",
            "/rows/0/cells/0",
            "/rows/0/object/kind",
        ]),
        case(
            "deletecollection by label",
            vec![
                labelled("dc-1", json!({"dc": "yes"})),
                labelled("dc-2", json!({"dc": "yes"})),
                labelled("dc-3", json!({"dc": "no"})),
            ],
            delete(&format!("{}?labelSelector=dc%3Dyes", cms())),
        ),
        case(
            "deletecollection left the others",
            vec![],
            get(&format!("{}?labelSelector=dc", cms())),
        ),
        case(
            "deletecollection of nothing",
            vec![],
            delete(&format!("{}?labelSelector=dc%3Dnothing", cms())),
        ),
    ];
    v.push(case(
        "list kinds and apiVersion",
        vec![],
        get(&format!(
            "/api/v1/namespaces/{NS}/secrets?labelSelector=none"
        )),
    ));
    v
}

fn deletion() -> Vec<Case> {
    let fin = |name: &str| {
        post(
            &cms(),
            json!({"metadata": {"name": name, "finalizers": ["example.com/hold"]}}),
        )
    };
    vec![
        case(
            "delete answers",
            vec![create_cm("d-plain")],
            delete(&cm("d-plain")),
        ),
        case("delete missing", vec![], delete(&cm("d-missing"))),
        case(
            "get after delete",
            vec![create_cm("d-gone"), delete(&cm("d-gone"))],
            get(&cm("d-gone")),
        ),
        case(
            "delete with a wrong uid precondition",
            vec![create_cm("d-uid")],
            delete_with(
                &cm("d-uid"),
                json!({"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}),
            ),
        ),
        case(
            "delete with a stale resourceVersion precondition",
            vec![create_cm("d-rv")],
            delete_with(
                &cm("d-rv"),
                json!({"preconditions": {"resourceVersion": "1"}}),
            ),
        ),
        case(
            "delete with a bad propagation policy",
            vec![create_cm("d-prop")],
            delete_with(&cm("d-prop"), json!({"propagationPolicy": "Sometimes"})),
        )
        .reason(),
        case(
            "delete with a finalizer answers it terminating",
            vec![fin("d-fin")],
            delete(&cm("d-fin")),
        ),
        case("get of a terminating object", vec![], get(&cm("d-fin"))),
        case(
            "adding a finalizer while terminating",
            vec![],
            patch(
                &cm("d-fin"),
                MERGE,
                json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
            ),
        )
        .reason(),
        case(
            "delete again while terminating",
            vec![],
            delete(&cm("d-fin")),
        ),
        case(
            "removing the last finalizer",
            vec![],
            patch(
                &cm("d-fin"),
                MERGE,
                json!({"metadata": {"finalizers": null}}),
            ),
        ),
        case("gone after the finalizer", vec![], get(&cm("d-fin"))),
        case(
            "foreground deletion adds its finalizer",
            vec![create_cm("d-fg")],
            delete_with(&cm("d-fg"), json!({"propagationPolicy": "Foreground"})),
        )
        .fields(&["/metadata/finalizers", "/metadata/deletionTimestamp"]),
        case(
            "orphan deletion adds its finalizer",
            vec![fin("d-or")],
            delete_with(&cm("d-or"), json!({"propagationPolicy": "Orphan"})),
        )
        .fields(&["/metadata/finalizers", "/metadata/deletionTimestamp"]),
        case(
            "metadata update of a terminating object",
            vec![fin("d-meta"), delete(&cm("d-meta"))],
            patch(
                &cm("d-meta"),
                MERGE,
                json!({"metadata": {"labels": {"x": "y"}}}),
            ),
        ),
        case(
            "owner deleted, dependent collected",
            vec![
                create_cm("d-owner").save("uid", "/metadata/uid"),
                post(
                    &cms(),
                    json!({"metadata": {"name": "d-dep", "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "d-owner", "uid": "{uid}"}]}}),
                ),
                delete(&cm("d-owner")),
                wait_status(&cm("d-dep"), 404),
            ],
            get(&cm("d-dep")),
        ),
        case(
            "gracePeriodSeconds not a number",
            vec![create_cm("d-grace")],
            delete(&format!("{}?gracePeriodSeconds=soon", cm("d-grace"))),
        )
        .reason(),
    ]
}

fn secrets() -> Vec<Case> {
    let secrets = format!("/api/v1/namespaces/{NS}/secrets");
    vec![
        case(
            "secret stringData",
            vec![],
            post(&secrets, json!({"metadata": {"name": "s-str"}, "stringData": {"user": "admin"}})),
        ),
        case(
            "secret data",
            vec![],
            post(&secrets, json!({"metadata": {"name": "s-data"}, "data": {"k": "dmFsdWU="}, "type": "Opaque"})),
        ),
        case(
            "secret stringData overrides data",
            vec![],
            post(&secrets, json!({"metadata": {"name": "s-both"}, "data": {"k": "dmFsdWU="}, "stringData": {"k": "other"}})),
        ),
        case(
            "secret of a type",
            vec![],
            post(&secrets, json!({"metadata": {"name": "s-tls"}, "type": "kubernetes.io/tls",
                "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}})),
        ),
        case(
            "secret data not base64",
            vec![],
            post(&secrets, json!({"metadata": {"name": "s-b64"}, "data": {"k": "not base64!"}})),
        )
        .reason()
        .differs("built-in types are stored schemaless: Secret data is not decoded, so bad base64 is kept"),
        case(
            "secret tls without its keys",
            vec![],
            post(&secrets, json!({"metadata": {"name": "s-tls2"}, "type": "kubernetes.io/tls"})),
        )
        .reason()
        .differs("built-in types are stored schemaless: Secret types' required keys are not validated"),
        case(
            "secret type change refused",
            vec![post(&secrets, json!({"metadata": {"name": "s-type"}, "data": {"k": "dg=="}}))],
            patch(&format!("{secrets}/s-type"), MERGE, json!({"type": "example.com/other"})),
        )
        .reason()
        .differs("built-in types are stored schemaless: a Secret's immutable type is not enforced"),
        case(
            "secret patch of stringData",
            vec![post(&secrets, json!({"metadata": {"name": "s-patch"}, "data": {"k": "dg=="}}))],
            patch(&format!("{secrets}/s-patch"), MERGE, json!({"stringData": {"n": "new"}})),
        ),
        case(
            "secret list",
            vec![],
            get(&format!("{secrets}?fieldSelector=metadata.name%3Ds-str")),
        ),
        case(
            "secret field selector on type",
            vec![],
            get(&format!("{secrets}?fieldSelector=type%3Dkubernetes.io%2Ftls,metadata.name%3Ds-tls")),
        ),
    ]
}

fn services_pods() -> Vec<Case> {
    let svcs = format!("/api/v1/namespaces/{NS}/services");
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    let lb = |name: &str| {
        json!({"metadata": {"name": name}, "spec": {"type": "LoadBalancer", "selector": {"app": "diff"},
            "ports": [{"name": "http", "port": 80}]}})
    };
    let svc = |name: &str| {
        json!({"metadata": {"name": name}, "spec": {"selector": {"app": "diff"},
            "ports": [{"name": "http", "port": 80}]}})
    };
    vec![
        case("service create", vec![], post(&svcs, svc("sv-create")))
            .fields(&["/metadata/name", "/spec/type", "/spec/sessionAffinity", "/spec/ports", "/spec/selector"]),
        case("service create whole", vec![], post(&svcs, svc("sv-whole")))
            .differs("no IPs are allocated: Service clusterIP, clusterIPs, ipFamilies, ipFamilyPolicy and internalTrafficPolicy are not set"),
        case(
            "service without ports",
            vec![],
            post(&svcs, json!({"metadata": {"name": "sv-noports"}, "spec": {"selector": {"a": "b"}}})),
        )
        .reason()
        .differs("built-in types are stored schemaless: Service specs are not validated"),
        case("service invalid name", vec![], post(&svcs, svc("sv.dotted"))),
        case(
            "service status update",
            vec![post(&svcs, lb("sv-status"))],
            put(&format!("{svcs}/sv-status/status"), json!({"metadata": {"name": "sv-status"},
                "spec": {"ports": [{"port": 81}]},
                "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}}})),
        )
        .fields(&["/spec/ports/0/port", "/status"]),
        case("pod create", vec![], post(&pods, pod("po-create")))
            .fields(&["/metadata/name", "/metadata/labels", "/spec/containers/0/image", "/spec/containers/0/command", "/metadata/generation"]),
        case("pod create whole", vec![], post(&pods, pod("po-whole")))
            .differs("built-in types are stored schemaless: Pod specs are not defaulted (restartPolicy, dnsPolicy, container defaults, tolerations, the service account token volume) and no status is set"),
        case(
            "pod without containers",
            vec![],
            post(&pods, json!({"metadata": {"name": "po-empty"}, "spec": {"containers": []}})),
        )
        .reason()
        .differs("built-in types are stored schemaless: Pod specs are not validated"),
        case(
            "pod status write ignores the spec",
            vec![post(&pods, pod("po-status"))],
            patch(&format!("{pods}/po-status/status"), MERGE, json!({"spec": {"activeDeadlineSeconds": 5},
                "status": {"phase": "Running", "message": "up"}})),
        )
        .fields(&["/spec/activeDeadlineSeconds", "/status/phase", "/status/message"]),
        case(
            "pod main write ignores the status",
            vec![post(&pods, pod("po-main"))],
            patch(&format!("{pods}/po-main"), MERGE, json!({"metadata": {"labels": {"n": "1"}},
                "status": {"message": "ignored"}})),
        )
        .fields(&["/metadata/labels", "/status/message"]),
        case(
            "pod image update",
            vec![post(&pods, pod("po-img"))],
            patch(&format!("{pods}/po-img"), STRATEGIC, json!({"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}})),
        )
        .fields(&["/spec/containers/0/image", "/metadata/generation"]),
        case(
            "pod forbidden spec update",
            vec![post(&pods, pod("po-forbid"))],
            patch(&format!("{pods}/po-forbid"), MERGE, json!({"spec": {"restartPolicy": "Never"}})),
        )
        .reason()
        .differs("built-in types are stored schemaless: a Pod's immutable spec fields are not enforced"),
        case(
            "pod field selector on phase",
            vec![],
            get(&format!("{pods}?fieldSelector=status.phase%3DRunning")),
        )
        .fields(&["/items/0/metadata/name", "/items/1"]),
        case(
            "pod field selector on node",
            vec![],
            get(&format!("{pods}?fieldSelector=spec.nodeName%3Dnode-x")),
        ),
    ]
}

fn accounts_events() -> Vec<Case> {
    let sas = format!("/api/v1/namespaces/{NS}/serviceaccounts");
    let events = format!("/api/v1/namespaces/{NS}/events");
    let new_events = format!("/apis/events.k8s.io/v1/namespaces/{NS}/events");
    vec![
        case("serviceaccount create", vec![], post(&sas, json!({"metadata": {"name": "sa-one"}}))),
        case("serviceaccount get default", vec![], get(&format!("{sas}/default")))
            .fields(&["/metadata/name", "/kind"])
            .differs(NO_SA_CONTROLLER),
        case("serviceaccount list", vec![], get(&sas)),
        case(
            "serviceaccount token",
            vec![],
            post(&format!("{sas}/sa-one/token"), json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})),
        )
        .fields(&["/kind", "/apiVersion", "/spec/expirationSeconds"]),
        case(
            "serviceaccount token of a missing account",
            vec![],
            post(&format!("{sas}/sa-none/token"), json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})),
        ),
        case(
            "core event create",
            vec![],
            post(&events, json!({"metadata": {"name": "ev-one"},
                "involvedObject": {"kind": "ConfigMap", "name": "c-get", "namespace": NS},
                "reason": "Tested", "message": "a test event", "type": "Normal", "count": 1,
                "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
                "source": {"component": "diff"}})),
        )
        .differs(EVENT_ZERO_VALUES),
        case(
            "core event field selector",
            vec![],
            get(&format!("{events}?fieldSelector=involvedObject.name%3Dc-get")),
        )
        .differs(EVENT_ZERO_VALUES),
        case(
            "events.k8s.io event create",
            vec![],
            post(&new_events, json!({"metadata": {"name": "ev-two"},
                "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "example.com/diff",
                "reportingInstance": "diff-1", "action": "Test", "reason": "Tested", "type": "Normal",
                "regarding": {"kind": "ConfigMap", "name": "c-get", "namespace": NS}, "note": "hello"})),
        )
        .differs(EVENT_ZERO_VALUES),
        case(
            "events.k8s.io event read as core",
            vec![],
            get(&format!("{events}/ev-two")),
        )
        .differs("one storage version per resource: an events.k8s.io Event is not converted to core/v1 fields"),
    ]
}
