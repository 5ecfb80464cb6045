//! Watches (event sequences, filtered transitions, bookmarks, initial events, expired
//! resourceVersions) and discovery documents.

use serde_json::json;

use crate::harness::*;

const NS: &str = "diff-watch";

fn cms() -> String {
    format!("/api/v1/namespaces/{NS}/configmaps")
}

fn cm(name: &str) -> String {
    format!("{}/{name}", cms())
}

/// A watch of the namespace's ConfigMaps that ends by itself after a second.
fn watch(query: &str) -> Step {
    get(&format!("{}?watch=true&timeoutSeconds=1&{query}", cms()))
}

fn events(c: Case) -> Case {
    c.view(View::Events)
}

pub fn cases() -> Vec<Case> {
    let mut v = vec![
        case("namespace for watches", vec![], post("/api/v1/namespaces", json!({"metadata": {"name": NS}}))),
        events(case(
            "watch from a resourceVersion sees modify and delete",
            vec![
                post(&cms(), json!({"metadata": {"name": "w-seq"}, "data": {"a": "1"}})).save("rv", "/metadata/resourceVersion"),
                patch(&cm("w-seq"), MERGE, json!({"data": {"a": "2"}})),
                delete(&cm("w-seq")),
            ],
            watch("resourceVersion={rv}&fieldSelector=metadata.name%3Dw-seq"),
        )),
        events(case(
            "watch from before a create sees it added",
            vec![
                get(&cms()).save("rv", "/metadata/resourceVersion"),
                post(&cms(), json!({"metadata": {"name": "w-add", "labels": {"w": "add"}}})),
                patch(&cm("w-add"), MERGE, json!({"data": {"b": "1"}})),
            ],
            watch("resourceVersion={rv}&labelSelector=w%3Dadd"),
        )),
        events(case(
            "filtered watch sees objects leave and enter the selection",
            vec![
                post(&cms(), json!({"metadata": {"name": "w-sel", "labels": {"w": "in"}}})).save("rv", "/metadata/resourceVersion"),
                patch(&cm("w-sel"), MERGE, json!({"metadata": {"labels": {"w": "out"}}})),
                patch(&cm("w-sel"), MERGE, json!({"data": {"unseen": "1"}})),
                patch(&cm("w-sel"), MERGE, json!({"metadata": {"labels": {"w": "in"}}})),
            ],
            watch("resourceVersion={rv}&labelSelector=w%3Din"),
        )),
        events(case(
            "watch without a resourceVersion starts with the current objects",
            vec![post(&cms(), json!({"metadata": {"name": "w-now", "labels": {"w": "now"}}}))],
            watch("labelSelector=w%3Dnow"),
        )),
        events(case(
            "watch from resourceVersion 0 starts with the current objects",
            vec![],
            watch("resourceVersion=0&labelSelector=w%3Dnow"),
        )),
        events(case(
            "watch with initial events and a bookmark",
            vec![],
            watch("sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&labelSelector=w%3Dnow"),
        )),
        events(case(
            "watch with initial events without bookmarks",
            vec![],
            watch("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&labelSelector=w%3Dnow"),
        )),
        events(case(
            "watch with sendInitialEvents and no resourceVersionMatch",
            vec![],
            watch("sendInitialEvents=true&allowWatchBookmarks=true&labelSelector=w%3Dnow"),
        )),
        events(case(
            "watch with bookmarks allowed and nothing happening",
            vec![get(&cms()).save("rv", "/metadata/resourceVersion")],
            watch("resourceVersion={rv}&allowWatchBookmarks=true&labelSelector=w%3Dnothing"),
        )),
        events(case(
            "watch from a too old resourceVersion",
            vec![],
            watch("resourceVersion=1"),
        )),
        events(case(
            "watch with a non-numeric resourceVersion",
            vec![],
            watch("resourceVersion=abc"),
        ))
        .differs("a watch's resourceVersion that is not a number is a 400 BadRequest (kube-apiserver answers 500 InternalError)"),
        events(case(
            "watch with an invalid label selector",
            vec![],
            watch("labelSelector=a%20in%20("),
        ))
        .differs("label selector syntax errors are worded differently (the same 400 BadRequest)"),
        events(case(
            "watch with an unknown field selector",
            vec![],
            watch("fieldSelector=data.x%3Dy"),
        )),
        case(
            "watch of one object by its path is a get",
            vec![
                post(&cms(), json!({"metadata": {"name": "w-one"}})),
                // Not older than the patch: kube-apiserver may answer a GET at an older
                // resourceVersion from its watch cache with the object as it was then.
                patch(&cm("w-one"), MERGE, json!({"data": {"c": "1"}})).save("rv", "/metadata/resourceVersion"),
            ],
            get(&format!("{}?watch=true&timeoutSeconds=1&resourceVersion={{rv}}", cm("w-one"))),
        )
        .fields(&["/kind", "/metadata/name", "/data"]),
        events(case(
            "watch across namespaces by field selector",
            vec![
                post(&cms(), json!({"metadata": {"name": "w-all"}})).save("rv", "/metadata/resourceVersion"),
                delete(&cm("w-all")),
            ],
            get("/api/v1/configmaps?watch=true&timeoutSeconds=1&resourceVersion={rv}&fieldSelector=metadata.name%3Dw-all"),
        )),
        events(case(
            "watch sees a finalizer's deletion steps",
            vec![
                post(&cms(), json!({"metadata": {"name": "w-fin", "finalizers": ["example.com/x"]}})).save("rv", "/metadata/resourceVersion"),
                delete(&cm("w-fin")),
                patch(&cm("w-fin"), MERGE, json!({"metadata": {"finalizers": null}})),
            ],
            watch("resourceVersion={rv}&fieldSelector=metadata.name%3Dw-fin"),
        )),
        events(case(
            "watch as Table",
            vec![
                post(&cms(), json!({"metadata": {"name": "w-tbl"}})).save("rv", "/metadata/resourceVersion"),
                patch(&cm("w-tbl"), MERGE, json!({"data": {"t": "1"}})),
            ],
            watch("resourceVersion={rv}&fieldSelector=metadata.name%3Dw-tbl").accept(TABLE),
        ))
        .differs("Table output of built-in kinds has only Name and Age columns"),
        events(case(
            "watch of namespaces",
            vec![
                post("/api/v1/namespaces", json!({"metadata": {"name": "diff-watch-ns"}})).save("rv", "/metadata/resourceVersion"),
                delete("/api/v1/namespaces/diff-watch-ns"),
            ],
            get("/api/v1/namespaces?watch=true&timeoutSeconds=1&resourceVersion={rv}&fieldSelector=metadata.name%3Ddiff-watch-ns"),
        ))
        .differs("namespace termination is asynchronous in both servers, and takes different steps (the real namespace controller writes conditions while it empties the namespace)"),
    ];
    v.extend(discovery());
    v
}

/// Group versions where kube-apiserver serves resources the sandbox does not.
const SUBSET: &[&str] = &[
    "/api/v1",
    "/apis/networking.k8s.io/v1",
    "/apis/storage.k8s.io/v1",
    "/apis/admissionregistration.k8s.io/v1",
];

fn discovery() -> Vec<Case> {
    let mut v = Vec::new();
    for path in [
        "/api/v1",
        "/apis/apps/v1",
        "/apis/batch/v1",
        "/apis/coordination.k8s.io/v1",
        "/apis/apiextensions.k8s.io/v1",
        "/apis/rbac.authorization.k8s.io/v1",
        "/apis/networking.k8s.io/v1",
        "/apis/events.k8s.io/v1",
        "/apis/policy/v1",
        "/apis/storage.k8s.io/v1",
        "/apis/scheduling.k8s.io/v1",
        "/apis/admissionregistration.k8s.io/v1",
        "/apis/autoscaling/v2",
        "/apis/discovery.k8s.io/v1",
    ] {
        v.push(case(format!("discovery {path}"), vec![], get(path)).view(View::Discovery));
        let names =
            case(format!("discovery names {path}"), vec![], get(path)).view(View::DiscoveryNames);
        v.push(if SUBSET.contains(&path) {
            names.differs("the sandbox serves a subset of the built-in resources and subresources (no pods/log, pods/exec, bindings, …)")
        } else {
            names
        });
    }
    v.push(
        case(
            "discovery of a missing group version",
            vec![],
            get("/apis/nothing.example.com/v1"),
        )
        .reason(),
    );
    v.push(case("core versions", vec![], get("/api")).fields(&["/kind", "/versions"]));
    v
}
