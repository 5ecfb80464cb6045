//! metacontroller's examples end to end where they lean on the API server itself: a real
//! sandbox API server (or kube-apiserver), `bosun run` with no modules, and webhooks written
//! here, served on 127.0.0.1. The garbage collector's cascade and the graceful deletes and
//! many watches of the CatSet pattern are the API server's; the other examples and
//! integration cases run in-process (`actors/lambda/tests/examples.rs`, `integration.rs`).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::webhooks::{Hooks, get, post_ok};
use crate::common::{Operator, Sandbox, wait_for, workdir};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// A CRD `<plural>.example.com` (version v1) with the status subresource.
fn crd(kind: &str, plural: &str, scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    })
}

fn delete(sb: &Sandbox, path: &str) {
    let (code, answer) = sb.request("DELETE", path, "", "");
    assert!(code == 200 || code == 202, "DELETE {path}: {code} {answer}");
}

/// GET, change, PUT; again on a conflict.
fn update(sb: &Sandbox, path: &str, change: impl Fn(&mut Value)) -> Value {
    for _ in 0..20 {
        let mut object = get(sb, path).unwrap_or_else(|| panic!("{path} not found"));
        change(&mut object);
        let (code, answer) = sb.put(path, &object);
        match code {
            200 => return answer,
            409 => continue,
            _ => panic!("PUT {path}: {code} {answer}"),
        }
    }
    panic!("PUT {path}: conflicts all along");
}

/// Starts bosun with no modules and no global hooks: only the lambda controllers work.
fn bosun(sb: &Sandbox, work: &std::path::Path, extra: &[(&str, &str)]) -> Operator {
    let hooks = work.join("global-hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    std::fs::create_dir_all(work.join("modules")).expect("modules dir");
    Operator::start_with(sb, &hooks, work, extra)
}

fn wait_served(sb: &Sandbox, path: &str) {
    wait_for(&format!("{path} served"), WAIT, || sb.get(path).0 == 200);
}

/// Creates the CRD and waits until its resource is served.
fn install_crd(sb: &Sandbox, kind: &str, plural: &str, scope: &str) {
    post_ok(
        sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd(kind, plural, scope),
    );
    wait_served(sb, &format!("/apis/example.com/v1/{plural}"));
}

/// Creates a CompositeController once bosun has installed its CRDs.
fn composite_controller(sb: &Sandbox, object: Value) {
    wait_served(
        sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    post_ok(
        sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &object,
    );
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn owned_by(object: &Value, owner: &Value) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["uid"] == owner["metadata"]["uid"] && r["controller"] == true)
        })
}

/// A namespaced parent kind `<plural>` with a CompositeController whose sync hook is
/// `hooks.url/sync`, its `child` children updated in place.
fn simple_controller(sb: &Sandbox, plural: &str, child: (&str, &str), hooks: &Hooks) {
    composite_controller(
        sb,
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": plural},
        "spec": {
            "parentResource": {"apiVersion": "example.com/v1", "resource": plural},
            "childResources": [{"apiVersion": child.0, "resource": child.1,
                                "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}
        }}),
    );
}

/// cascading delete: a child no longer desired is deleted with background propagation,
/// so what it owns (a Job's Pods) goes too.
#[test]
fn children_no_longer_desired_are_deleted_with_what_they_own() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|_, req| {
        let replicas = req["parent"]["spec"]["replicas"].as_i64().unwrap_or(0);
        let children: Vec<Value> = (0..replicas.min(1))
            .map(|_| {
                json!({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": "test-cascading-delete", "labels": {"test": "cascading-delete"}},
                       "spec": {"template": {"spec": {"restartPolicy": "Never",
                                                      "containers": [{"name": "pi", "image": "perl"}]}}}})
            })
            .collect();
        (200, json!({"children": children}))
    });
    install_crd(&sb, "Cascader", "cascaders", "Namespaced");
    let op = bosun(&sb, work.path(), &[]);
    simple_controller(&sb, "cascaders", ("batch/v1", "jobs"), &hooks);
    let parent_path = "/apis/example.com/v1/namespaces/default/cascaders/test-cascading-delete";
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/cascaders",
        &json!({"apiVersion": "example.com/v1", "kind": "Cascader", "metadata": {"name": "test-cascading-delete"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"test": "cascading-delete"}}}}),
    );
    let job_path = "/apis/batch/v1/namespaces/default/jobs/test-cascading-delete";
    op.wait("the Job", WAIT, || get(&sb, job_path).is_some());
    let job = get(&sb, job_path).expect("job");
    // Play the Job controller: one Pod owned by the Job.
    post_ok(
        &sb,
        "/api/v1/namespaces/default/pods",
        &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "test-cascading-delete-pod",
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                  "name": "test-cascading-delete", "uid": job["metadata"]["uid"],
                                                  "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "pi", "image": "perl"}]}}),
    );
    update(&sb, parent_path, |p| p["spec"]["replicas"] = json!(0));
    op.wait("the Job deleted", WAIT, || get(&sb, job_path).is_none());
    op.wait("the Job's Pod deleted too", WAIT, || {
        get(
            &sb,
            "/api/v1/namespaces/default/pods/test-cascading-delete-pod",
        )
        .is_none()
    });
}

// ---------------------------------------------------------------------------------------
// The pattern of metacontroller's examples/catset. Its hook (JavaScript there) is written
// here with the same logic; the test plays the kubelet, which the sandbox does not run.
// ---------------------------------------------------------------------------------------

/// The ordinal of `<base>-<n>`.
fn ordinal(base: &str, name: &str) -> Option<i64> {
    name.strip_prefix(base)?.strip_prefix('-')?.parse().ok()
}

fn running_and_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["metadata"]["deletionTimestamp"].is_null()
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// examples/catset's sync (and finalize) hook: a StatefulSet written as a lambda. Pods
/// come up one at a time in ordinal order, each once all below it are Ready; scaling down
/// removes the highest ordinal first; each Pod has a PVC per claim template, kept after a
/// scale-down; finalizing scales to zero.
fn catset_sync(req: &Value) -> Value {
    let catset = &req["parent"];
    let name = str_of(&catset["metadata"]["name"]).to_string();
    let mut replicas = catset["spec"]["replicas"].as_i64().unwrap_or(0);
    let observed: std::collections::BTreeMap<i64, Value> = req["children"]["Pod.v1"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(|p| Some((ordinal(&name, str_of(&p["metadata"]["name"]))?, p.clone())))
        .collect();
    let mut answer = json!({});
    if req["finalizing"] == true {
        replicas = 0;
        answer["finalized"] = json!(observed.is_empty());
    }
    let mut ready = 0;
    while ready < replicas && observed.get(&ready).is_some_and(running_and_ready) {
        ready += 1;
    }
    answer["status"] = json!({"replicas": observed.len(), "readyReplicas": ready});
    let claims = catset["spec"]["volumeClaimTemplates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let pod = |n: i64| {
        let mut pod = catset["spec"]["template"].clone();
        let pod_name = format!("{name}-{n}");
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod["metadata"]["name"] = json!(pod_name);
        pod["spec"]["hostname"] = json!(pod_name);
        pod["spec"]["subdomain"] = catset["spec"]["serviceName"].clone();
        let volumes: Vec<Value> = claims
            .iter()
            .map(|c| {
                let claim = str_of(&c["metadata"]["name"]);
                json!({"name": claim, "persistentVolumeClaim": {"claimName": format!("{claim}-{pod_name}")}})
            })
            .collect();
        if !volumes.is_empty() {
            pod["spec"]["volumes"] = json!(volumes);
        }
        pod
    };
    let mut desired: std::collections::BTreeMap<i64, Value> =
        observed.keys().map(|&n| (n, pod(n))).collect();
    if ready < replicas {
        desired.entry(ready).or_insert_with(|| pod(ready));
    }
    if ready == replicas
        && let Some(&top) = desired.keys().next_back().filter(|&&top| top >= replicas)
    {
        desired.remove(&top);
    }
    let mut children: Vec<Value> = desired.into_values().rev().collect();
    for template in &claims {
        let base = format!("{}-{name}", str_of(&template["metadata"]["name"]));
        let pvc = |pvc_name: String| {
            let mut pvc = template.clone();
            pvc["apiVersion"] = json!("v1");
            pvc["kind"] = json!("PersistentVolumeClaim");
            pvc["metadata"]["name"] = json!(pvc_name);
            pvc
        };
        children.extend((0..replicas).map(|n| pvc(format!("{base}-{n}"))));
        // Claims beyond the replicas are kept after a scale-down.
        for existing in req["children"]["PersistentVolumeClaim.v1"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
        {
            let existing = str_of(&existing["metadata"]["name"]);
            if ordinal(&base, existing).is_some_and(|n| n >= replicas) {
                children.push(pvc(existing.to_string()));
            }
        }
    }
    answer["children"] = json!(children);
    answer
}

/// examples/catset: a CatSet (a StatefulSet written as a lambda, with `RollingRecreate`
/// Pods and a revision history) brings its Pods up in ordinal order, one at a time as
/// each becomes Ready, with a PVC each; it scales up and down as a StatefulSet does; its
/// finalize hook scales it to zero before it goes. The test plays the kubelet: it makes
/// each Pod Running and Ready, and checks that no Pod ever starts before all below it are
/// Ready.
#[test]
fn catset_brings_pods_up_in_order_scales_and_finalizes_to_zero() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|_, req| (200, catset_sync(req)));
    install_crd(&sb, "CatSet", "catsets", "Namespaced");
    let op = bosun(&sb, work.path(), &[]);
    let url = format!("{}/sync", hooks.url);
    composite_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "catset-controller"},
            "spec": {
                "parentResource": {"apiVersion": "example.com/v1", "resource": "catsets",
                                   "revisionHistory": {"fieldPaths": ["spec.template"]}},
                "childResources": [
                    {"apiVersion": "v1", "resource": "pods",
                     "updateStrategy": {"method": "RollingRecreate",
                                        "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}}},
                    {"apiVersion": "v1", "resource": "persistentvolumeclaims"}
                ],
                "hooks": {"sync": {"webhook": {"url": url}}, "finalize": {"webhook": {"url": url}}}
            }
        }),
    );
    let labels = json!({"app": "nginx", "component": "backend"});
    let catset = "/apis/example.com/v1/namespaces/default/catsets/nginx-backend";
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/catsets",
        &json!({"apiVersion": "example.com/v1", "kind": "CatSet", "metadata": {"name": "nginx-backend"},
                "spec": {"serviceName": "nginx-backend", "replicas": 3,
                         "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels},
                                      "spec": {"terminationGracePeriodSeconds": 1,
                                               "containers": [{"name": "nginx", "image": "gcr.io/google_containers/nginx-slim:0.8",
                                                               "ports": [{"containerPort": 80, "name": "web"}],
                                                               "volumeMounts": [{"name": "www", "mountPath": "/usr/share/nginx/html"}]}]}},
                         "volumeClaimTemplates": [{"metadata": {"name": "www", "labels": labels},
                                                   "spec": {"accessModes": ["ReadWriteOnce"],
                                                            "resources": {"requests": {"storage": "1Gi"}}}}]}}),
    );
    let pods = || -> Vec<Value> {
        get(
            &sb,
            "/api/v1/namespaces/default/pods?labelSelector=app%3Dnginx",
        )
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
    };
    // The kubelet: the lowest Pod not Ready yet becomes Running and Ready. Every Pod above
    // it must not exist yet: the CatSet waits for each Pod before the next.
    let kubelet = || {
        // A deleted Pod stops at once (terminationGracePeriodSeconds is 1) and is gone.
        let (deleting, mut pods): (Vec<Value>, Vec<Value>) = pods()
            .into_iter()
            .partition(|p| !p["metadata"]["deletionTimestamp"].is_null());
        for pod in deleting {
            let path = format!(
                "/api/v1/namespaces/default/pods/{}?gracePeriodSeconds=0",
                str_of(&pod["metadata"]["name"])
            );
            sb.request("DELETE", &path, "", "");
        }
        pods.sort_by_key(|p| ordinal("nginx-backend", str_of(&p["metadata"]["name"])));
        if let Some(first) = pods.iter().position(|p| !running_and_ready(p)) {
            assert_eq!(
                first,
                pods.len() - 1,
                "a Pod started before the ones below it were Ready: {:?}",
                pods.iter()
                    .map(|p| (p["metadata"]["name"].clone(), running_and_ready(p)))
                    .collect::<Vec<_>>()
            );
            let path = format!(
                "/api/v1/namespaces/default/pods/{}/status",
                str_of(&pods[first]["metadata"]["name"])
            );
            update(&sb, &path, |p| {
                p["status"]["phase"] = json!("Running");
                p["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
            });
        }
    };
    let ready_replicas = |n: i64| {
        get(&sb, catset)
            .is_some_and(|c| c["status"]["readyReplicas"] == n && c["status"]["replicas"] == n)
    };
    op.wait("3 Pods Ready, brought up in order", WAIT, || {
        kubelet();
        ready_replicas(3)
    });
    for n in 0..3 {
        let pod = get(
            &sb,
            &format!("/api/v1/namespaces/default/pods/nginx-backend-{n}"),
        )
        .expect("pod");
        assert_eq!(pod["spec"]["hostname"], format!("nginx-backend-{n}"));
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            format!("www-nginx-backend-{n}")
        );
        let claim = get(
            &sb,
            &format!("/api/v1/namespaces/default/persistentvolumeclaims/www-nginx-backend-{n}"),
        )
        .expect("the Pod's claim");
        let parent = get(&sb, catset).expect("catset");
        assert!(owned_by(&claim, &parent), "{claim}");
    }
    update(&sb, catset, |c| c["spec"]["replicas"] = json!(4));
    op.wait("scaled up to 4 Ready", WAIT, || {
        kubelet();
        ready_replicas(4)
    });
    update(&sb, catset, |c| c["spec"]["replicas"] = json!(2));
    op.wait("scaled down to 2", WAIT, || {
        kubelet();
        ready_replicas(2) && pods().len() == 2
    });
    let names: BTreeSet<String> = pods()
        .iter()
        .map(|p| str_of(&p["metadata"]["name"]).to_string())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["nginx-backend-0".to_string(), "nginx-backend-1".to_string()])
    );
    for n in 2..4 {
        assert!(
            get(
                &sb,
                &format!("/api/v1/namespaces/default/persistentvolumeclaims/www-nginx-backend-{n}")
            )
            .is_some(),
            "the claim of a removed Pod is kept, as a StatefulSet keeps it"
        );
    }
    // Deleted with a finalizer of our own, to read the final state.
    update(&sb, catset, |c| {
        c["metadata"]["finalizers"]
            .as_array_mut()
            .expect("the controller's finalizer")
            .push(json!("metacontroller.io/catset-test"))
    });
    delete(&sb, catset);
    op.wait(
        "the finalize hook scaled the CatSet to zero and let it go",
        WAIT,
        || {
            kubelet();
            get(&sb, catset).is_some_and(|c| {
                c["status"]["replicas"] == 0
                    && c["metadata"]["finalizers"] == json!(["metacontroller.io/catset-test"])
            })
        },
    );
    assert!(pods().is_empty(), "{:?}", pods());
    update(&sb, catset, |c| c["metadata"]["finalizers"] = json!([]));
    op.wait("the CatSet gone", WAIT, || get(&sb, catset).is_none());
}
