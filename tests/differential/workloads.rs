//! apps (Deployments, StatefulSets) and coordination (Leases): generation bumps, the status
//! and scale subresources, apply, conflicts.

use serde_json::{Value, json};

use crate::harness::*;

const NS: &str = "diff-apps";

fn deploys() -> String {
    format!("/apis/apps/v1/namespaces/{NS}/deployments")
}

fn deploy(name: &str) -> String {
    format!("{}/{name}", deploys())
}

fn sts(name: &str) -> String {
    format!("/apis/apps/v1/namespaces/{NS}/statefulsets/{name}")
}

fn leases() -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases")
}

fn lease(name: &str) -> String {
    format!("{}/{name}", leases())
}

fn template(app: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}})
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": template(name)}})
}

fn statefulset(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
        "spec": {"serviceName": name, "selector": {"matchLabels": {"app": name}}, "template": template(name)}})
}

fn create_deploy(name: &str) -> Step {
    post(&deploys(), deployment(name))
}

fn create_sts(name: &str) -> Step {
    post(
        &format!("/apis/apps/v1/namespaces/{NS}/statefulsets"),
        statefulset(name),
    )
}

fn lease_body(name: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
        "spec": {"holderIdentity": "one", "leaseDurationSeconds": 15}})
}

const SPEC_DEFAULTS: &[&str] = &[
    "/metadata/generation",
    "/spec/replicas",
    "/spec/revisionHistoryLimit",
    "/spec/progressDeadlineSeconds",
    "/spec/strategy",
    "/spec/selector",
    "/spec/template/metadata",
    "/spec/template/spec/containers/0/name",
    "/spec/template/spec/containers/0/image",
];

pub fn cases() -> Vec<Case> {
    let template_defaults = "built-in types are stored schemaless: Pod templates in workloads are not defaulted (restartPolicy, dnsPolicy, schedulerName, terminationGracePeriodSeconds, securityContext, container defaults)";
    vec![
        case("namespace for workloads", vec![], post("/api/v1/namespaces", json!({"metadata": {"name": NS}}))),
        case("deployment create", vec![], create_deploy("dp-create")).fields(SPEC_DEFAULTS),
        case("deployment create whole", vec![], create_deploy("dp-whole")).differs(template_defaults),
        case("deployment get", vec![create_deploy("dp-get")], get(&deploy("dp-get"))).fields(SPEC_DEFAULTS),
        case(
            "deployment spec change bumps generation",
            vec![create_deploy("dp-gen")],
            patch(&deploy("dp-gen"), MERGE, json!({"spec": {"replicas": 3}})),
        )
        .fields(&["/metadata/generation", "/spec/replicas"]),
        case(
            "deployment label change keeps generation",
            vec![create_deploy("dp-lbl")],
            patch(&deploy("dp-lbl"), MERGE, json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .fields(&["/metadata/generation", "/metadata/labels"]),
        case(
            "deployment annotation change bumps generation",
            vec![create_deploy("dp-ann")],
            patch(&deploy("dp-ann"), MERGE, json!({"metadata": {"annotations": {"x": "y"}}})),
        )
        .fields(&["/metadata/generation", "/metadata/annotations"]),
        case(
            "deployment status write keeps generation",
            vec![create_deploy("dp-st")],
            patch(&format!("{}/status", deploy("dp-st")), MERGE, json!({"status": {"replicas": 2, "observedGeneration": 1}})),
        )
        .fields(&["/metadata/generation", "/status", "/spec/replicas"]),
        case(
            "deployment status write ignores the spec",
            vec![create_deploy("dp-st2")],
            patch(&format!("{}/status", deploy("dp-st2")), MERGE, json!({"spec": {"replicas": 7}, "status": {"replicas": 1, "readyReplicas": 1}})),
        )
        .fields(&["/spec/replicas", "/status/readyReplicas", "/metadata/generation"]),
        case(
            "deployment main write ignores the status",
            vec![create_deploy("dp-st3")],
            patch(&deploy("dp-st3"), MERGE, json!({"spec": {"replicas": 4}, "status": {"readyReplicas": 9}})),
        )
        .fields(&["/spec/replicas", "/status", "/metadata/generation"]),
        case(
            "deployment status put",
            vec![create_deploy("dp-st4").save("rv", "/metadata/resourceVersion")],
            put(
                &format!("{}/status", deploy("dp-st4")),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dp-st4", "resourceVersion": "{rv}"},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "dp-st4"}}, "template": template("dp-st4")},
                    "status": {"replicas": 5}}),
            ),
        )
        .fields(&["/spec/replicas", "/status/replicas", "/metadata/generation"]),
        case(
            "deployment status put with a stale resourceVersion",
            vec![create_deploy("dp-st5"), patch(&deploy("dp-st5"), MERGE, json!({"metadata": {"labels": {"a": "b"}}}))],
            put(
                &format!("{}/status", deploy("dp-st5")),
                json!({"metadata": {"name": "dp-st5", "resourceVersion": "1"}, "status": {"replicas": 5}}),
            ),
        ),
        case("deployment scale get", vec![create_deploy("dp-scale")], get(&format!("{}/scale", deploy("dp-scale")))),
        case(
            "deployment scale patch",
            vec![create_deploy("dp-scale2")],
            patch(&format!("{}/scale", deploy("dp-scale2")), MERGE, json!({"spec": {"replicas": 5}})),
        ),
        case(
            "deployment scale put",
            vec![create_deploy("dp-scale3")],
            put(&format!("{}/scale", deploy("dp-scale3")), json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": "dp-scale3", "namespace": NS}, "spec": {"replicas": 4}})),
        ),
        case(
            "deployment after a scale",
            vec![],
            get(&deploy("dp-scale3")),
        )
        .fields(&["/spec/replicas", "/metadata/generation"]),
        case(
            "deployment scale of a missing one",
            vec![],
            get(&format!("{}/scale", deploy("dp-none"))),
        ),
        case(
            "deployment without a selector",
            vec![],
            post(&deploys(), json!({"metadata": {"name": "dp-nosel"}, "spec": {"template": template("x")}})),
        )
        .reason()
        .differs("built-in types are stored schemaless: Deployment specs are not validated"),
        case(
            "deployment apply",
            vec![],
            patch(&format!("{}?fieldManager=deployer", deploy("dp-apply")), APPLY, deployment("dp-apply")),
        )
        .fields(&["/metadata/managedFields", "/metadata/generation", "/spec/replicas"]),
        case(
            "deployment apply conflict on replicas",
            vec![
                patch(&format!("{}?fieldManager=deployer", deploy("dp-conf")), APPLY, deployment("dp-conf")),
                patch(&format!("{}?fieldManager=hpa", deploy("dp-conf")), MERGE, json!({"spec": {"replicas": 9}})),
            ],
            patch(&format!("{}?fieldManager=deployer", deploy("dp-conf")), APPLY, deployment("dp-conf")),
        ),
        case(
            "deployment apply force",
            vec![],
            patch(&format!("{}?fieldManager=deployer&force=true", deploy("dp-conf")), APPLY, deployment("dp-conf")),
        )
        .fields(&["/metadata/managedFields", "/spec/replicas", "/metadata/generation"]),
        case(
            "deployment strategic merge of containers",
            vec![create_deploy("dp-smp")],
            patch(&deploy("dp-smp"), STRATEGIC, json!({"spec": {"template": {"spec": {"containers": [
                {"name": "side", "image": "busybox:1.36"}]}}}})),
        )
        .fields(&["/spec/template/spec/containers/0/name", "/spec/template/spec/containers/1/name", "/metadata/generation"]),
        case(
            "deployment list",
            vec![],
            get(&format!("{}?fieldSelector=metadata.name%3Ddp-get", deploys())),
        )
        .fields(&["/kind", "/items/0/metadata/name", "/items/0/spec/replicas"]),
        case(
            "deployment as Table",
            vec![],
            get(&deploy("dp-get")).accept(TABLE),
        )
        .fields(&["/kind", "/rows/0/cells/0"]),
        case(
            "deployment delete",
            vec![create_deploy("dp-del")],
            delete(&deploy("dp-del")),
        )
        .fields(&["/kind", "/metadata/name", "/status", "/details"]),
        case("statefulset create", vec![], create_sts("st-create")).fields(&[
            "/metadata/generation",
            "/spec/replicas",
            "/spec/podManagementPolicy",
            "/spec/updateStrategy",
            "/spec/revisionHistoryLimit",
            "/spec/persistentVolumeClaimRetentionPolicy",
            "/spec/serviceName",
        ]),
        case("statefulset create whole", vec![], create_sts("st-whole")).differs(template_defaults),
        case(
            "statefulset spec change bumps generation",
            vec![create_sts("st-gen")],
            patch(&sts("st-gen"), MERGE, json!({"spec": {"replicas": 3}})),
        )
        .fields(&["/metadata/generation", "/spec/replicas"]),
        case(
            "statefulset scale",
            vec![create_sts("st-scale")],
            patch(&format!("{}/scale", sts("st-scale")), MERGE, json!({"spec": {"replicas": 2}})),
        ),
        case(
            "statefulset status",
            vec![create_sts("st-status")],
            patch(&format!("{}/status", sts("st-status")), MERGE, json!({"status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}})),
        )
        .fields(&["/status", "/metadata/generation"]),
        case(
            "statefulset forbidden update",
            vec![create_sts("st-forbid")],
            patch(&sts("st-forbid"), MERGE, json!({"spec": {"serviceName": "other"}})),
        )
        .reason()
        .differs("built-in types are stored schemaless: a StatefulSet's immutable spec fields are not enforced"),
        case("lease create", vec![], post(&leases(), lease_body("ls-create"))),
        case("lease get", vec![post(&leases(), lease_body("ls-get"))], get(&lease("ls-get"))),
        case(
            "lease renew",
            vec![post(&leases(), lease_body("ls-renew")).save("rv", "/metadata/resourceVersion")],
            put(&lease("ls-renew"), json!({"metadata": {"name": "ls-renew", "resourceVersion": "{rv}"},
                "spec": {"holderIdentity": "one", "leaseDurationSeconds": 15, "renewTime": "2026-01-01T00:00:00.000000Z"}})),
        ),
        case(
            "lease takeover with a stale resourceVersion",
            vec![
                post(&leases(), lease_body("ls-take")).save("rv", "/metadata/resourceVersion"),
                patch(&lease("ls-take"), MERGE, json!({"spec": {"leaseTransitions": 1}})),
            ],
            put(&lease("ls-take"), json!({"metadata": {"name": "ls-take", "resourceVersion": "{rv}"},
                "spec": {"holderIdentity": "two"}})),
        ),
        case(
            "lease apply",
            vec![],
            patch(&format!("{}?fieldManager=elector", lease("ls-apply")), APPLY, lease_body("ls-apply")),
        ),
        case(
            "lease has no generation",
            vec![post(&leases(), lease_body("ls-gen")), patch(&lease("ls-gen"), MERGE, json!({"spec": {"holderIdentity": "x"}}))],
            get(&lease("ls-gen")),
        )
        .fields(&["/metadata/generation"]),
        case(
            "lease list",
            vec![],
            get(&format!("{}?fieldSelector=metadata.name%3Dls-get", leases())),
        ),
        case("lease delete", vec![post(&leases(), lease_body("ls-del"))], delete(&lease("ls-del"))),
        case(
            "lease deletecollection",
            vec![post(&leases(), lease_body("ls-dc1")), post(&leases(), lease_body("ls-dc2"))],
            delete(&format!("{}?fieldSelector=metadata.name%3Dls-dc1", leases())),
        ),
        case(
            "lease invalid duration type",
            vec![],
            post(&leases(), json!({"metadata": {"name": "ls-bad"}, "spec": {"leaseDurationSeconds": "long"}})),
        )
        .reason()
        .differs("built-in types are stored schemaless: field types of built-in kinds are not checked"),
        case(
            "lease in a cluster path",
            vec![],
            get("/apis/coordination.k8s.io/v1/leases?fieldSelector=metadata.name%3Dls-get"),
        ),
    ]
}
