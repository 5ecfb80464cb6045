//! CustomResourceDefinitions: creation, structural pruning, schema defaults, validation
//! errors, the status and scale subresources, served versions; and the CRDs bosun ships
//! (landscaper's DeployItems and Targets, metacontroller's controllers).

use serde_json::{Value, json};

use crate::harness::*;

const NS: &str = "diff-crd";
const CRD: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

const APPLY_UNTYPED: &str = "server-side apply does not read the CRD's schema: an object it applies inside fields the schema leaves open (x-kubernetes-preserve-unknown-fields) is not owned as a whole (no `.` in managedFields)";

fn gizmos() -> String {
    format!("/apis/diff.example.com/v1/namespaces/{NS}/gizmos")
}

fn gizmo(name: &str) -> String {
    format!("{}/{name}", gizmos())
}

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "spec": {"type": "object", "required": ["color"], "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
            "color": {"type": "string", "enum": ["red", "blue"]},
            "replicas": {"type": "integer"},
            "label": {"type": "string", "maxLength": 5},
            "tags": {"type": "array", "items": {"type": "string"}},
            "nested": {"type": "object", "default": {}, "properties": {
                "mode": {"type": "string", "default": "auto"},
                "level": {"type": "integer"}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "ratio": {"type": "number"},
            "enabled": {"type": "boolean", "default": true}}},
        "status": {"type": "object", "properties": {
            "replicas": {"type": "integer"}, "selector": {"type": "string"}, "phase": {"type": "string"}}}}})
}

fn gizmo_crd() -> Value {
    let version = |name: &str, served: bool, storage: bool| {
        json!({"name": name, "served": served, "storage": storage,
            "schema": {"openAPIV3Schema": schema()},
            "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
            "additionalPrinterColumns": [{"name": "Color", "type": "string", "jsonPath": ".spec.color"}]})
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gizmos.diff.example.com"},
        "spec": {"group": "diff.example.com", "scope": "Namespaced",
            "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList", "shortNames": ["gz"]},
            "versions": [version("v1", true, true), version("v1beta1", true, false), version("v1alpha1", false, false)]}})
}

fn g(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "diff.example.com/v1", "kind": "Gizmo", "metadata": {"name": name}, "spec": spec})
}

fn create(name: &str, spec: Value) -> Step {
    post(&gizmos(), g(name, spec))
}

/// The documents of a CRD file, as YAML texts.
fn documents(text: &str) -> Vec<String> {
    text.split("\n---")
        .map(|d| d.trim().to_string())
        .filter(|d| d.lines().any(|l| l.starts_with("kind:")))
        .collect()
}

fn crd_file(name: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/crds")
        .join(name);
    documents(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

pub fn cases() -> Vec<Case> {
    let mut v = vec![
        case(
            "namespace for crds",
            vec![],
            post("/api/v1/namespaces", json!({"metadata": {"name": NS}})),
        ),
        case("crd create", vec![], post(CRD, gizmo_crd())).fields(&[
            "/metadata/name",
            "/metadata/generation",
            "/spec/names",
            "/spec/scope",
            "/spec/versions/0/name",
            "/spec/versions/0/subresources",
        ]),
        case(
            "crd established",
            vec![
                wait_status(&gizmos(), 200),
                wait_value(
                    &format!("{CRD}/gizmos.diff.example.com"),
                    "/status/conditions/1/status",
                    json!("True"),
                ),
            ],
            get(&format!("{CRD}/gizmos.diff.example.com")),
        )
        .fields(&["/status/acceptedNames", "/status/storedVersions"]),
        case(
            "crd conditions",
            vec![],
            get(&format!("{CRD}/gizmos.diff.example.com")),
        )
        .fields(&["/status/conditions"]),
        case("crd create twice", vec![], post(CRD, gizmo_crd())),
        case(
            "crd with a name that does not match",
            vec![],
            post(CRD, {
                let mut c = gizmo_crd();
                c["metadata"]["name"] = json!("wrong.diff.example.com");
                c
            }),
        )
        .reason()
        .differs("CRDs are not validated beyond what serving them needs"),
        case(
            "custom resource create",
            vec![],
            create("gz-create", json!({"color": "red", "size": 2})),
        ),
        case(
            "custom resource get",
            vec![create("gz-get", json!({"color": "blue"}))],
            get(&gizmo("gz-get")),
        ),
        case(
            "custom resource get missing",
            vec![],
            get(&gizmo("gz-missing")),
        ),
        case(
            "custom resource create twice",
            vec![],
            create("gz-get", json!({"color": "blue"})),
        ),
        case(
            "custom resource unknown fields are pruned",
            vec![],
            create(
                "gz-prune",
                json!({"color": "red", "unknown": 1, "nested": {"mode": "x", "other": true}}),
            ),
        ),
        case(
            "custom resource unknown top-level fields are pruned",
            vec![],
            post(
                &gizmos(),
                json!({"apiVersion": "diff.example.com/v1", "kind": "Gizmo", "metadata": {"name": "gz-top"},
                "spec": {"color": "red"}, "extra": {"a": 1}}),
            ),
        ),
        case(
            "custom resource preserved fields are kept",
            vec![],
            create(
                "gz-free",
                json!({"color": "red", "free": {"anything": {"goes": [1, 2]}}}),
            ),
        ),
        case(
            "custom resource defaults",
            vec![],
            create("gz-default", json!({"color": "blue"})),
        ),
        case(
            "custom resource defaults inside a given object",
            vec![],
            create(
                "gz-default2",
                json!({"color": "blue", "nested": {"level": 2}}),
            ),
        ),
        case(
            "custom resource defaults on update",
            vec![create("gz-default3", json!({"color": "blue"}))],
            put(
                &gizmo("gz-default3"),
                g("gz-default3", json!({"color": "red", "size": null})),
            ),
        ),
        case(
            "custom resource wrong type",
            vec![],
            create("gz-type", json!({"color": "red", "size": "big"})),
        ),
        case(
            "custom resource above the maximum",
            vec![],
            create("gz-max", json!({"color": "red", "size": 20})),
        ),
        case(
            "custom resource below the minimum",
            vec![],
            create("gz-min", json!({"color": "red", "size": 0})),
        ),
        case(
            "custom resource not in the enum",
            vec![],
            create("gz-enum", json!({"color": "green"})),
        ),
        case(
            "custom resource missing a required field",
            vec![],
            create("gz-req", json!({"size": 2})),
        ),
        case(
            "custom resource string too long",
            vec![],
            create("gz-long", json!({"color": "red", "label": "toolong"})),
        ),
        case(
            "custom resource item of a wrong type",
            vec![],
            create("gz-items", json!({"color": "red", "tags": ["a", 2]})),
        ),
        case(
            "custom resource several errors",
            vec![],
            create(
                "gz-many",
                json!({"color": "green", "size": 99, "enabled": "yes"}),
            ),
        ),
        case(
            "custom resource invalid update",
            vec![create("gz-upd", json!({"color": "red"}))],
            patch(&gizmo("gz-upd"), MERGE, json!({"spec": {"size": 11}})),
        ),
        case(
            "custom resource number accepts an integer",
            vec![],
            create("gz-num", json!({"color": "red", "ratio": 2})),
        ),
        case(
            "custom resource status dropped on create",
            vec![],
            post(
                &gizmos(),
                json!({"apiVersion": "diff.example.com/v1", "kind": "Gizmo", "metadata": {"name": "gz-st"},
                "spec": {"color": "red"}, "status": {"phase": "Ready"}}),
            ),
        ),
        case(
            "custom resource status write",
            vec![],
            patch(
                &format!("{}/status", gizmo("gz-st")),
                MERGE,
                json!({"status": {"phase": "Ready", "replicas": 1}}),
            ),
        ),
        case(
            "custom resource status write ignores the spec",
            vec![],
            patch(
                &format!("{}/status", gizmo("gz-st")),
                MERGE,
                json!({"spec": {"color": "blue"}, "status": {"phase": "Done"}}),
            ),
        ),
        case(
            "custom resource main write ignores the status",
            vec![],
            patch(
                &gizmo("gz-st"),
                MERGE,
                json!({"spec": {"size": 5}, "status": {"phase": "Ignored"}}),
            ),
        ),
        case(
            "custom resource status write validated",
            vec![],
            patch(
                &format!("{}/status", gizmo("gz-st")),
                MERGE,
                json!({"status": {"replicas": "many"}}),
            ),
        ),
        case(
            "custom resource generation after spec, status and metadata writes",
            vec![
                create("gz-gen", json!({"color": "red"})),
                patch(&gizmo("gz-gen"), MERGE, json!({"spec": {"size": 4}})),
                patch(
                    &format!("{}/status", gizmo("gz-gen")),
                    MERGE,
                    json!({"status": {"phase": "x"}}),
                ),
                patch(
                    &gizmo("gz-gen"),
                    MERGE,
                    json!({"metadata": {"labels": {"l": "v"}}}),
                ),
            ],
            get(&gizmo("gz-gen")),
        )
        .fields(&["/metadata/generation"]),
        case(
            "custom resource scale get",
            vec![
                create("gz-scale", json!({"color": "red", "replicas": 2})),
                patch(
                    &format!("{}/status", gizmo("gz-scale")),
                    MERGE,
                    json!({"status": {"replicas": 1, "selector": "app=gz"}}),
                ),
            ],
            get(&format!("{}/scale", gizmo("gz-scale"))),
        ),
        case(
            "custom resource scale write",
            vec![],
            patch(
                &format!("{}/scale", gizmo("gz-scale")),
                MERGE,
                json!({"spec": {"replicas": 6}}),
            ),
        ),
        case(
            "custom resource after a scale",
            vec![],
            get(&gizmo("gz-scale")),
        )
        .fields(&["/spec/replicas", "/metadata/generation"]),
        case(
            "custom resource in another served version",
            vec![],
            get(&format!(
                "/apis/diff.example.com/v1beta1/namespaces/{NS}/gizmos/gz-get"
            )),
        ),
        case(
            "custom resource in a version not served",
            vec![],
            get(&format!(
                "/apis/diff.example.com/v1alpha1/namespaces/{NS}/gizmos/gz-get"
            )),
        )
        .reason(),
        case(
            "custom resource created in another served version",
            vec![],
            post(
                &format!("/apis/diff.example.com/v1beta1/namespaces/{NS}/gizmos"),
                json!({"apiVersion": "diff.example.com/v1beta1", "kind": "Gizmo", "metadata": {"name": "gz-beta"}, "spec": {"color": "red"}}),
            ),
        ),
        case(
            "custom resource strategic merge patch",
            vec![],
            patch(&gizmo("gz-get"), STRATEGIC, json!({"spec": {"size": 4}})),
        )
        .reason(),
        case(
            "custom resource json patch",
            vec![],
            patch(
                &gizmo("gz-get"),
                JSON_PATCH,
                json!([{"op": "add", "path": "/spec/tags", "value": ["x"]}]),
            ),
        ),
        case(
            "custom resource apply",
            vec![],
            patch(
                &format!("{}?fieldManager=m", gizmo("gz-apply")),
                APPLY,
                g("gz-apply", json!({"color": "red", "tags": ["a"]})),
            ),
        ),
        case(
            "custom resource apply conflict",
            vec![],
            patch(
                &format!("{}?fieldManager=n", gizmo("gz-apply")),
                APPLY,
                g("gz-apply", json!({"color": "blue"})),
            ),
        ),
        case(
            "custom resource list",
            vec![],
            get(&format!(
                "{}?fieldSelector=metadata.name%3Dgz-get",
                gizmos()
            )),
        ),
        case(
            "custom resource list by label",
            vec![post(
                &gizmos(),
                json!({"apiVersion": "diff.example.com/v1", "kind": "Gizmo",
                "metadata": {"name": "gz-lab", "labels": {"k": "v"}}, "spec": {"color": "red"}}),
            )],
            get(&format!("{}?labelSelector=k%3Dv", gizmos())),
        ),
        case(
            "custom resource as Table",
            vec![],
            get(&format!("{}?labelSelector=k%3Dv", gizmos())).accept(TABLE),
        )
        .fields(&["/kind", "/columnDefinitions", "/rows/0/cells"]),
        case(
            "custom resource in a missing namespace",
            vec![],
            post(
                "/apis/diff.example.com/v1/namespaces/diff-none/gizmos",
                g("gz-nons", json!({"color": "red"})),
            ),
        ),
        case(
            "custom resource deletecollection",
            vec![],
            delete(&format!("{}?labelSelector=k%3Dv", gizmos())),
        ),
        case(
            "custom resource delete",
            vec![create("gz-del", json!({"color": "red"}))],
            delete(&gizmo("gz-del")),
        ),
        case(
            "custom resource discovery",
            vec![],
            get("/apis/diff.example.com/v1"),
        )
        .view(View::Discovery),
        case(
            "custom resource group discovery",
            vec![],
            get("/apis/diff.example.com"),
        ),
        case(
            "crd stops serving a version",
            vec![
                get(&format!("{CRD}/gizmos.diff.example.com"))
                    .save("rv", "/metadata/resourceVersion"),
                patch(
                    &format!("{CRD}/gizmos.diff.example.com"),
                    JSON_PATCH,
                    json!([{"op": "replace", "path": "/spec/versions/1/served", "value": false}]),
                ),
                wait_status(
                    &format!("/apis/diff.example.com/v1beta1/namespaces/{NS}/gizmos"),
                    404,
                ),
            ],
            get(&format!(
                "/apis/diff.example.com/v1beta1/namespaces/{NS}/gizmos/gz-get"
            )),
        )
        .reason(),
        case(
            "crd spec change bumps generation",
            vec![],
            get(&format!("{CRD}/gizmos.diff.example.com")),
        )
        .fields(&["/metadata/generation"]),
        case(
            "cluster-scoped custom resource",
            vec![
                post(
                    CRD,
                    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": "globes.diff.example.com"},
                    "spec": {"group": "diff.example.com", "scope": "Cluster",
                        "names": {"plural": "globes", "singular": "globe", "kind": "Globe"},
                        "versions": [{"name": "v1", "served": true, "storage": true,
                            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}),
                ),
                wait_status("/apis/diff.example.com/v1/globes", 200),
            ],
            post(
                "/apis/diff.example.com/v1/globes",
                json!({"apiVersion": "diff.example.com/v1", "kind": "Globe",
                "metadata": {"name": "earth", "namespace": "ignored"}, "spec": {"any": "thing"}}),
            ),
        ),
        case(
            "crd delete takes its resources",
            vec![
                delete(&format!("{CRD}/globes.diff.example.com")),
                wait_status(&format!("{CRD}/globes.diff.example.com"), 404),
            ],
            get("/apis/diff.example.com/v1/globes/earth"),
        )
        .reason(),
    ];
    v.extend(shipped());
    v
}

fn deploy_item(name: &str) -> Value {
    json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
        "metadata": {"name": name},
        "spec": {"type": "landscaper.gardener.cloud/helm", "target": {"name": "t-one", "namespace": NS},
            "config": {"apiVersion": "helm.deployer.landscaper.gardener.cloud/v1alpha1", "kind": "ProviderConfiguration",
                "chart": {"ref": "example/chart:1.0"}}, "timeout": "10m"}})
}

fn shipped() -> Vec<Case> {
    let dis = format!("/apis/landscaper.gardener.cloud/v1alpha1/namespaces/{NS}/deployitems");
    let targets = format!("/apis/landscaper.gardener.cloud/v1alpha1/namespaces/{NS}/targets");
    let ccs = "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers";
    let dcs = "/apis/metacontroller.k8s.io/v1alpha1/decoratorcontrollers";
    let mut setup: Vec<Step> = crd_file("landscaper.yaml")
        .into_iter()
        .chain(crd_file("metacontroller.yaml"))
        .map(|d| post_yaml(CRD, &d))
        .collect();
    setup.push(wait_status(&dis, 200));
    setup.push(wait_status(&targets, 200));
    setup.push(wait_status(ccs, 200));
    setup.push(wait_status(dcs, 200));
    vec![
        case(
            "landscaper deployitem create",
            setup,
            post(&dis, deploy_item("di-one")),
        ),
        case(
            "landscaper deployitem without its type",
            vec![],
            post(
                &dis,
                json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
                "metadata": {"name": "di-notype"}, "spec": {"timeout": "5m"}}),
            ),
        ),
        case(
            "landscaper deployitem embedded config without a kind",
            vec![],
            post(
                &dis,
                json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
                "metadata": {"name": "di-embed"}, "spec": {"type": "x", "config": {"chart": {}}}}),
            ),
        ),
        case(
            "landscaper deployitem unknown spec field pruned",
            vec![],
            post(
                &dis,
                json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
                "metadata": {"name": "di-prune"}, "spec": {"type": "x", "unknownField": 1, "target": {"name": "t", "extra": 2}}}),
            ),
        ),
        case(
            "landscaper deployitem status",
            vec![],
            patch(
                &format!("{dis}/di-one/status"),
                MERGE,
                json!({"status": {"phase": "Succeeded", "observedGeneration": 1,
                "exportRef": {"name": "exp", "namespace": NS}, "unknown": "pruned"}}),
            ),
        ),
        case(
            "landscaper deployitem status of a wrong type",
            vec![],
            patch(
                &format!("{dis}/di-one/status"),
                MERGE,
                json!({"status": {"observedGeneration": "one"}}),
            ),
        ),
        case(
            "landscaper deployitem as Table",
            vec![],
            get(&format!("{dis}/di-one")).accept(TABLE),
        )
        .fields(&["/columnDefinitions", "/rows/0/cells"]),
        case("landscaper deployitem list", vec![], get(&dis)),
        case(
            "landscaper deployitem apply",
            vec![],
            patch(
                &format!("{dis}/di-apply?fieldManager=landscaper"),
                APPLY,
                deploy_item("di-apply"),
            ),
        )
        .differs(APPLY_UNTYPED),
        case(
            "landscaper deployitem spec change bumps generation",
            vec![],
            patch(
                &format!("{dis}/di-apply"),
                MERGE,
                json!({"spec": {"timeout": "20m"}}),
            ),
        )
        .fields(&["/metadata/generation", "/spec/timeout"]),
        case(
            "landscaper target create",
            vec![],
            post(
                &targets,
                json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
                "metadata": {"name": "t-one"}, "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster",
                    "config": {"kubeconfig": "apiVersion: v1"}}}),
            ),
        ),
        case(
            "landscaper target get",
            vec![],
            get(&format!("{targets}/t-one")),
        ),
        case(
            "landscaper deployitem short name discovery",
            vec![],
            get("/apis/landscaper.gardener.cloud/v1alpha1"),
        )
        .view(View::Discovery),
        case(
            "metacontroller compositecontroller create",
            vec![],
            post(
                ccs,
                json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
                "metadata": {"name": "cc-one"},
                "spec": {"parentResource": {"apiVersion": "v1", "resource": "configmaps"},
                    "childResources": [{"apiVersion": "v1", "resource": "secrets", "updateStrategy": {"method": "InPlace"}}],
                    "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:1/sync"}}},
                    "generateSelector": true}}),
            ),
        ),
        case(
            "metacontroller compositecontroller without a parent",
            vec![],
            post(
                ccs,
                json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
                "metadata": {"name": "cc-bad"}, "spec": {"hooks": {}}}),
            ),
        ),
        case(
            "metacontroller decoratorcontroller create",
            vec![],
            post(
                dcs,
                json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
                "metadata": {"name": "dc-one"},
                "spec": {"resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"a": "b"}}}],
                    "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:1/sync"}}}}}),
            ),
        ),
        case("metacontroller compositecontroller list", vec![], get(ccs)),
        case(
            "metacontroller discovery",
            vec![],
            get("/apis/metacontroller.k8s.io/v1alpha1"),
        )
        .view(View::Discovery),
    ]
}
