//! The hooks of metacontroller's examples (`examples/` of its repository, JavaScript,
//! Python and Jsonnet there), ported to Rust with the same logic: each a plain function
//! from the hook's request to its answer. Both the in-process tests of this crate
//! (`tests/examples.rs`, answered by [`ScriptedHooks`](super::ScriptedHooks)) and the end
//! to end tests of the binary (`tests/lambda/examples.rs`, served over HTTP) answer with
//! them, so the two play the same controllers.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn keys(map: &Value) -> Vec<String> {
    map.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The objects of a hook request's map (`children`, `related`, `attachments` of a kind).
fn objects(map: &Value) -> impl Iterator<Item = &Value> {
    map.as_object().into_iter().flat_map(|m| m.values())
}

/// The ordinal `n` of a name `<base>-<n>`.
pub fn ordinal(base: &str, name: &str) -> Option<i64> {
    name.strip_prefix(base)?.strip_prefix('-')?.parse().ok()
}

/// Whether a Pod runs, is Ready and is not being deleted (catset's readiness).
pub fn running_and_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["metadata"]["deletionTimestamp"].is_null()
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// examples/configmappropagation's customize hook: the source ConfigMap named by the
/// parent (`spec.sourceNamespace`, `spec.sourceName`) is a related object.
pub fn configmappropagation_customize(req: &Value) -> Value {
    let spec = &req["parent"]["spec"];
    json!({"relatedResources": [{
        "apiVersion": "v1", "resource": "configmaps",
        "namespace": spec["sourceNamespace"], "names": [spec["sourceName"]]
    }]})
}

/// examples/configmappropagation's sync hook: a copy of the source ConfigMap in each of
/// `spec.targetNamespaces` (none once the source is gone); the status counts the copies
/// expected and those observed.
pub fn configmappropagation_sync(req: &Value) -> Value {
    let spec = &req["parent"]["spec"];
    let source_key = format!(
        "{}/{}",
        str_of(&spec["sourceNamespace"]),
        str_of(&spec["sourceName"])
    );
    let source = &req["related"]["ConfigMap.v1"][&source_key];
    let targets = spec["targetNamespaces"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let children: Vec<Value> = if source.is_null() {
        Vec::new()
    } else {
        targets
            .iter()
            .map(|ns| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": spec["sourceName"], "namespace": ns},
                       "data": source["data"]})
            })
            .collect()
    };
    let actual = req["children"]["ConfigMap.v1"]
        .as_object()
        .map_or(0, |m| m.len());
    json!({"status": {"expected_copies": targets.len(), "actual_copies": actual},
           "children": children})
}

/// examples/globalconfigmap's customize hook: the source ConfigMap and every Namespace
/// (`labelSelector: {}`) are related objects.
pub fn globalconfigmap_customize(req: &Value) -> Value {
    let spec = &req["parent"]["spec"];
    json!({"relatedResources": [
        {"apiVersion": "v1", "resource": "configmaps",
         "namespace": spec["sourceNamespace"], "names": [spec["sourceName"]]},
        {"apiVersion": "v1", "resource": "namespaces", "labelSelector": {}}
    ]})
}

/// examples/globalconfigmap's sync hook: a copy of the source ConfigMap in every related
/// namespace but the source's own.
pub fn globalconfigmap_sync(req: &Value) -> Value {
    let spec = &req["parent"]["spec"];
    let source_ns = str_of(&spec["sourceNamespace"]);
    let source =
        &req["related"]["ConfigMap.v1"][format!("{source_ns}/{}", str_of(&spec["sourceName"]))];
    let mut children = Vec::new();
    if !source.is_null() {
        for ns in objects(&req["related"]["Namespace.v1"]) {
            let ns = str_of(&ns["metadata"]["name"]);
            if ns != source_ns {
                children.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": spec["sourceName"], "namespace": ns},
                    "data": source["data"]}));
            }
        }
    }
    json!({"status": {"working": "fine"}, "children": children})
}

/// examples/secretpropagation's customize hook with v2 hooks: the Secrets of
/// `spec.secretSelector` in the namespaces of `spec.sourceNamespaceSelector`, and the
/// target Namespaces of `spec.targetNamespaceLabelSelector`.
pub fn secretpropagation_customize(req: &Value) -> Value {
    let spec = &req["parent"]["spec"];
    json!({"relatedResources": [
        {"apiVersion": "v1", "resource": "secrets",
         "labelSelector": spec["secretSelector"],
         "namespaceSelector": spec["sourceNamespaceSelector"]},
        {"apiVersion": "v1", "resource": "namespaces",
         "labelSelector": spec["targetNamespaceLabelSelector"]}
    ]})
}

/// examples/secretpropagation's sync hook with v2 hooks: every related Secret copied into
/// every related namespace; the status lists the Secrets by their v2 keys.
pub fn secretpropagation_sync(req: &Value) -> Value {
    let mut children = Vec::new();
    let secrets = req["related"]["Secret.v1"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for target in objects(&req["related"]["Namespace.v1"]) {
        for secret in secrets.values() {
            children.push(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": secret["metadata"]["name"], "namespace": target["metadata"]["name"]},
                "data": secret["data"]}));
        }
    }
    json!({"status": {"working": "fine", "secrets": keys(&Value::Object(secrets))},
           "children": children})
}

/// examples/secretpropagation's customize hook as upstream runs it (v1 hooks): the one
/// Secret named by the parent, and the Namespaces of `spec.targetNamespaceLabelSelector`.
pub fn secretpropagation_v1_customize(req: &Value) -> Value {
    let spec = &req["parent"]["spec"];
    json!({"relatedResources": [
        {"apiVersion": "v1", "resource": "secrets",
         "namespace": spec["sourceNamespace"], "names": [spec["sourceName"]]},
        {"apiVersion": "v1", "resource": "namespaces",
         "labelSelector": spec["targetNamespaceLabelSelector"]}
    ]})
}

/// examples/secretpropagation's sync hook as upstream runs it (v1 hooks): the source
/// Secret copied into every related namespace but its own.
pub fn secretpropagation_v1_sync(req: &Value) -> Value {
    let spec = &req["parent"]["spec"];
    let source_ns = str_of(&spec["sourceNamespace"]);
    let source =
        &req["related"]["Secret.v1"][format!("{source_ns}/{}", str_of(&spec["sourceName"]))];
    let mut children = Vec::new();
    if !source.is_null() {
        for ns in objects(&req["related"]["Namespace.v1"])
            .map(|n| str_of(&n["metadata"]["name"]))
            .filter(|n| *n != source_ns)
        {
            children.push(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": spec["sourceName"], "namespace": ns},
                "data": source["data"]}));
        }
    }
    json!({"status": {"working": "fine"}, "children": children})
}

/// examples/configmap-list-v2's customize hook: the ConfigMaps of `spec.sourceLabels`, in
/// `spec.sourceNamespace` or, without one, in every namespace.
pub fn configmap_list_customize(req: &Value) -> Value {
    let spec = &req["parent"]["spec"];
    let mut rule = json!({"apiVersion": "v1", "resource": "configmaps",
                          "labelSelector": {"matchLabels": spec["sourceLabels"]}});
    if !spec["sourceNamespace"].is_null() {
        rule["namespace"] = spec["sourceNamespace"].clone();
    }
    json!({"relatedResources": [rule]})
}

/// examples/configmap-list-v2's sync hook: a ConfigMap `<parent>-list` beside the parent
/// listing the related ConfigMaps by key, one a line; the status counts them.
pub fn configmap_list_sync(req: &Value) -> Value {
    let parent = &req["parent"];
    let listed = keys(&req["related"]["ConfigMap.v1"]);
    json!({
        "status": {"count": listed.len()},
        "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": format!("{}-list", str_of(&parent["metadata"]["name"])),
                                   "namespace": parent["metadata"]["namespace"]},
                      "data": {"configmaps": listed.join("\n")}}]
    })
}

/// examples/namespace-list-v2's customize hook: the Namespaces of `spec.labelSelector`.
pub fn namespace_list_customize(req: &Value) -> Value {
    json!({"relatedResources": [{"apiVersion": "v1", "resource": "namespaces",
                                  "labelSelector": req["parent"]["spec"]["labelSelector"]}]})
}

/// examples/namespace-list-v2's sync hook: a ConfigMap `<parent>-list` listing the related
/// Namespaces, one a line; the status counts them.
pub fn namespace_list_sync(req: &Value) -> Value {
    let parent = &req["parent"];
    let listed = keys(&req["related"]["Namespace.v1"]);
    json!({
        "status": {"count": listed.len()},
        "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": format!("{}-list", str_of(&parent["metadata"]["name"]))},
                      "data": {"namespaces": listed.join("\n")}}]
    })
}

/// examples/clusteredparent's sync hook (a DecoratorController on ClusterRoles): a
/// RoleBinding in `default` binding the ClusterRole to the default ServiceAccount.
pub fn clusteredparent_sync(req: &Value) -> Value {
    let name = &req["object"]["metadata"]["name"];
    json!({"attachments": [{
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": "default"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}],
        "roleRef": {"kind": "ClusterRole", "name": name, "apiGroup": "rbac.authorization.k8s.io"}
    }]})
}

/// The sync hook of metacontroller's cluster-scoped parent test (a RoleSet): a ClusterRole
/// `<parent>-<resource>` reading each resource of `spec.readers`; the status lists the
/// ClusterRoles observed.
pub fn rolesets_sync(req: &Value) -> Value {
    let parent = &req["parent"];
    let children: Vec<Value> = parent["spec"]["readers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": format!("{}-{}", str_of(&parent["metadata"]["name"]), str_of(r))},
                   "rules": [{"apiGroups": [""], "resources": [r], "verbs": ["get", "list"]}]})
        })
        .collect();
    let seen = keys(&req["children"]["ClusterRole.rbac.authorization.k8s.io/v1"]);
    json!({"status": {"roles": seen}, "children": children})
}

/// examples/crd-roles' sync hook (a DecoratorController on CustomResourceDefinitions): a
/// ClusterRole `<crd>-reader` reading the CRD's resource.
pub fn crd_roles_sync(req: &Value) -> Value {
    let crd = &req["object"];
    json!({"attachments": [{
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": format!("{}-reader", str_of(&crd["metadata"]["name"]))},
        "rules": [{"apiGroups": [crd["spec"]["group"]], "resources": [crd["spec"]["names"]["plural"]],
                   "verbs": ["get", "list", "watch"]}]
    }]})
}

/// The sync hook of metacontroller's decorator-on-namespaces test: a ConfigMap
/// `global-settings` in the decorated Namespace, naming it.
pub fn global_settings_sync(req: &Value) -> Value {
    let ns = &req["object"]["metadata"]["name"];
    json!({"attachments": [{"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "global-settings", "namespace": ns},
                            "data": {"namespace": ns}}]})
}

/// examples/indexedjob's sync hook: Pods `<job>-<index>` with `JOB_INDEX` set, at most
/// `spec.parallelism` active at a time, until `spec.completions` have succeeded; the
/// status counts them and says `Complete`; a finished job keeps its status and Pods.
pub fn indexedjob_sync(req: &Value) -> Value {
    let job = &req["parent"];
    let name = str_of(&job["metadata"]["name"]);
    let index_of = |pod: &str| {
        pod.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|i| i.parse::<u64>().ok())
    };
    let new_pod = |index: u64| {
        let mut pod = job["spec"]["template"].clone();
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod["metadata"]["name"] = json!(format!("{name}-{index}"));
        if let Some(containers) = pod["spec"]["containers"].as_array_mut() {
            for c in containers {
                c["env"] = json!([{"name": "JOB_INDEX", "value": index.to_string()}]);
            }
        }
        pod
    };
    let (mut active, mut succeeded, mut failed) = (0u64, 0u64, 0u64);
    let mut observed = BTreeSet::new();
    for (key, pod) in req["children"]["Pod.v1"].as_object().into_iter().flatten() {
        let Some(index) = index_of(key) else { continue };
        match str_of(&pod["status"]["phase"]) {
            "Succeeded" => succeeded += 1,
            "Failed" => failed += 1,
            _ => active += 1,
        }
        observed.insert(index);
    }
    let finished = job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Complete" && c["status"] == "True");
    let completions = job["spec"]["completions"].as_u64().unwrap_or(1);
    let parallelism = job["spec"]["parallelism"].as_u64().unwrap_or(1);
    let mut pods: Vec<Value> = observed.iter().map(|i| new_pod(*i)).collect();
    if finished {
        return json!({"status": job["status"], "children": pods});
    }
    for index in 0..completions {
        if !observed.contains(&index) && active < parallelism {
            pods.push(new_pod(index));
            active += 1;
        }
    }
    let complete = if succeeded == completions {
        "True"
    } else {
        "False"
    };
    json!({"status": {"active": active, "succeeded": succeeded, "failed": failed,
                      "conditions": [{"type": "Complete", "status": complete}]},
           "children": pods})
}

/// Whether a DaemonSet's status says its Pods are ready on every node it wants them on.
fn daemonset_finished(status: &Value) -> bool {
    let desired = status["desiredNumberScheduled"].as_i64().unwrap_or(1);
    desired > 0 && status["numberReady"].as_i64().unwrap_or(0) == desired
}

/// examples/daemonjob's sync hook: a DaemonSet `<job>-dj` running the job's containers
/// as init containers (a pause container after them) until it is ready on every node;
/// then the job is `Complete` and the DaemonSet no longer desired.
pub fn daemonjob_sync(req: &Value) -> Value {
    let job = &req["parent"];
    let name = format!("{}-dj", str_of(&job["metadata"]["name"]));
    if !job["status"].is_null() && daemonset_finished(&job["status"]) {
        let mut status = job["status"].clone();
        status["conditions"] = json!([{"type": "Complete", "status": "True"}]);
        return json!({"status": status, "children": []});
    }
    let child = &req["children"]["DaemonSet.apps/v1"][&name];
    let mut status = child["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let done = !child["status"].is_null() && daemonset_finished(&child["status"]);
    status["conditions"] =
        json!([{"type": "Complete", "status": if done { "True" } else { "False" }}]);
    let template = &job["spec"]["template"];
    let labels = &template["metadata"]["labels"];
    let mut pod_spec = template["spec"].clone();
    pod_spec["initContainers"] = template["spec"]["containers"].clone();
    pod_spec["containers"] = json!([{"name": "pause", "image": "registry.k8s.io/pause",
                                     "resources": {"requests": {"cpu": "10m"}}}]);
    json!({"status": status, "children": [{
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": pod_spec}}
    }]})
}

/// The annotation of examples/bluegreen's ReplicaSets holding the pod template they run.
const BLUEGREEN_TEMPLATE: &str = "bluegreendeployments.ctl.enisoc.com/pod-template-json";

/// examples/bluegreen's sync hook: two ReplicaSets, blue and green, and a Service on the
/// active one. A new pod template rolls out to the inactive ReplicaSet; once all its
/// replicas are available, the Service swaps to it and the old one scales to zero.
pub fn bluegreen_sync(req: &Value) -> Value {
    let bgd = &req["parent"];
    let name = str_of(&bgd["metadata"]["name"]);
    let replicas = bgd["spec"]["replicas"].clone();
    let service =
        &req["children"]["Service.v1"][str_of(&bgd["spec"]["service"]["metadata"]["name"])];
    let mut active_color = service["spec"]["selector"]["color"]
        .as_str()
        .unwrap_or("blue")
        .to_string();
    let rs_of =
        |color: &str| req["children"]["ReplicaSet.apps/v1"][format!("{name}-{color}")].clone();
    let other = |color: &str| if color == "blue" { "green" } else { "blue" };
    let (active, inactive) = (rs_of(&active_color), rs_of(other(&active_color)));
    let status = json!({"activeColor": active_color,
                        "active": if active.is_null() { json!({}) } else { active["status"].clone() },
                        "inactive": if inactive.is_null() { json!({}) } else { inactive["status"].clone() }});
    let template_of = |rs: &Value| -> Option<Value> {
        serde_json::from_str(rs["metadata"]["annotations"][BLUEGREEN_TEMPLATE].as_str()?).ok()
    };
    let current = |rs: &Value| template_of(rs).as_ref() == Some(&bgd["spec"]["template"]);
    let mut active_replicas = if active.is_null() {
        replicas.clone()
    } else {
        active["spec"]["replicas"].clone()
    };
    let mut active_template =
        template_of(&active).unwrap_or_else(|| bgd["spec"]["template"].clone());
    let mut inactive_replicas: Value;
    let mut inactive_template =
        template_of(&inactive).unwrap_or_else(|| bgd["spec"]["template"].clone());
    if current(&active) {
        inactive_replicas = json!(0);
    } else if current(&inactive) {
        inactive_replicas = replicas.clone();
        if inactive["status"]["availableReplicas"] == replicas {
            active_color = other(&active_color).to_string();
            std::mem::swap(&mut active_replicas, &mut inactive_replicas);
            std::mem::swap(&mut active_template, &mut inactive_template);
        }
    } else if inactive["spec"]["replicas"] == 0 && inactive["status"]["replicas"] == 0 {
        inactive_replicas = replicas.clone();
        inactive_template = bgd["spec"]["template"].clone();
    } else {
        inactive_replicas = json!(0);
    }
    let replica_set = |color: &str, replicas: &Value, template: &Value| {
        let mut labels = template["metadata"]["labels"].clone();
        labels["color"] = json!(color);
        let mut selector = bgd["spec"]["selector"].clone();
        selector["matchLabels"]["color"] = json!(color);
        let mut pod_template = template.clone();
        pod_template["metadata"]["labels"]["color"] = json!(color);
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": format!("{name}-{color}"), "labels": labels,
                            "annotations": {BLUEGREEN_TEMPLATE: template.to_string()}},
               "spec": {"replicas": replicas, "minReadySeconds": bgd["spec"]["minReadySeconds"],
                        "selector": selector, "template": pod_template}})
    };
    let mut service = bgd["spec"]["service"].clone();
    service["apiVersion"] = json!("v1");
    service["kind"] = json!("Service");
    service["spec"]["selector"]["color"] = json!(active_color);
    json!({"status": status, "children": [
        service,
        replica_set(&active_color, &active_replicas, &active_template),
        replica_set(other(&active_color), &inactive_replicas, &inactive_template),
    ]})
}

/// examples/catset's sync (and finalize) hook: a StatefulSet written as a lambda. Pods
/// come up one at a time in ordinal order, each once all below it are Ready; scaling down
/// removes the highest ordinal first; each Pod has a PVC per claim template, kept after a
/// scale-down; finalizing scales to zero.
pub fn catset_sync(req: &Value) -> Value {
    let catset = &req["parent"];
    let name = str_of(&catset["metadata"]["name"]).to_string();
    let mut replicas = catset["spec"]["replicas"].as_i64().unwrap_or(0);
    let observed: BTreeMap<i64, Value> = objects(&req["children"]["Pod.v1"])
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
    let mut desired: BTreeMap<i64, Value> = observed.keys().map(|&n| (n, pod(n))).collect();
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
        for existing in objects(&req["children"]["PersistentVolumeClaim.v1"]) {
            let existing = str_of(&existing["metadata"]["name"]);
            if ordinal(&base, existing).is_some_and(|n| n >= replicas) {
                children.push(pvc(existing.to_string()));
            }
        }
    }
    answer["children"] = json!(children);
    answer
}

/// examples/service-per-pod's sync hook (a DecoratorController on StatefulSets): a
/// Service `<sts>-<n>` per replica, selecting its Pod by the label the
/// `service-per-pod-label` annotation names, on the `port:targetPort` pairs of
/// `service-per-pod-ports`.
pub fn service_per_pod_sync(req: &Value) -> Value {
    let object = &req["object"];
    let name = str_of(&object["metadata"]["name"]);
    let annotations = &object["metadata"]["annotations"];
    let key = str_of(&annotations["service-per-pod-label"]);
    let ports: Vec<Value> = str_of(&annotations["service-per-pod-ports"])
        .split(',')
        .filter_map(|p| {
            let (port, target) = p.split_once(':')?;
            let (port, target): (i64, i64) = (port.parse().ok()?, target.parse().ok()?);
            Some(json!({"name": format!("port-{port}"), "port": port, "targetPort": target}))
        })
        .collect();
    let services: Vec<Value> = (0..object["spec"]["replicas"].as_i64().unwrap_or(0))
        .map(|n| {
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": format!("{name}-{n}"), "labels": {"app": "service-per-pod"}},
                   "spec": {"selector": {key: format!("{name}-{n}")}, "ports": ports}})
        })
        .collect();
    json!({"attachments": services})
}

/// examples/service-per-pod's finalize hook: no Services; finalized once none is left.
pub fn service_per_pod_finalize(req: &Value) -> Value {
    json!({
        "attachments": [],
        "finalized": req["attachments"]["Service.v1"].as_object().is_none_or(|m| m.is_empty())
    })
}

/// examples/service-per-pod's second hook (pod-name-label, a DecoratorController on
/// Pods): the Pod labelled with its own name, under the label its `pod-name-label`
/// annotation names.
pub fn pod_name_label_sync(req: &Value) -> Value {
    let object = &req["object"];
    let label = str_of(&object["metadata"]["annotations"]["pod-name-label"]);
    json!({"labels": {label: object["metadata"]["name"]}})
}
