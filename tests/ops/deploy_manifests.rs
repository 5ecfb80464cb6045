//! `deploy/`: every manifest decodes into its typed Kubernetes struct with no field the
//! type does not know (k8s-openapi ignores unknown fields, so a misspelled one would be
//! dropped without a word: the test decodes, encodes again and compares), kustomization.yaml
//! lists every manifest, and `kubectl apply -k deploy/` passes a server-side dry run
//! against the sandbox and stores nothing.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::common::{Sandbox, run_ok};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// What `deploy/kustomization.yaml` may say (unknown keys refused).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct Kustomization {
    api_version: String,
    kind: String,
    namespace: String,
    resources: Vec<String>,
    #[serde(default)]
    images: Vec<KustomizeImage>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct KustomizeImage {
    name: String,
    new_name: Option<String>,
    new_tag: Option<String>,
}

fn kustomization() -> Kustomization {
    let path = deploy_dir().join("kustomization.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/kustomization.yaml");
    serde_saphyr::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: not a kustomization bosun knows: {e}", path.display()))
}

/// Every `.yaml` file under `dir`, relative to it, sorted; the Helm chart (`helm/`, its
/// templates are not manifests) is left out.
fn yaml_files(dir: &Path, base: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("read deploy/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() && path == base.join("helm") {
            continue;
        }
        if path.is_dir() {
            yaml_files(&path, base, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let rel = path.strip_prefix(base).expect("under deploy/");
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    out.sort();
}

/// Decodes `doc` as `T`, encodes it again and names every field of `doc` the type dropped
/// or changed.
fn round_trip<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<(), String> {
    let typed: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let again = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    let mut problems = Vec::new();
    compare(doc, &again, "", &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn compare(original: &Value, typed: &Value, path: &str, out: &mut Vec<String>) {
    match (original, typed) {
        (Value::Object(o), Value::Object(t)) => {
            for (key, value) in o {
                let here = format!("{path}.{key}");
                match t.get(key) {
                    _ if value.is_null() => {}
                    None => out.push(format!("{here}: unknown field")),
                    Some(tv) => compare(value, tv, &here, out),
                }
            }
        }
        (Value::Array(o), Value::Array(t)) if o.len() == t.len() => {
            for (i, (ov, tv)) in o.iter().zip(t).enumerate() {
                compare(ov, tv, &format!("{path}[{i}]"), out);
            }
        }
        // 1 and 1.0 are the same number to the API server.
        (Value::Number(o), Value::Number(t)) if o.as_f64() == t.as_f64() => {}
        (o, t) if o == t => {}
        (o, t) => out.push(format!("{path}: {o} reads back as {t}")),
    }
}

/// Checks one document against the typed struct of its kind.
fn check_typed(doc: &Value) -> Result<(), String> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::{Namespace, Secret, Service, ServiceAccount};
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    match (api_version, kind) {
        ("v1", "Namespace") => round_trip::<Namespace>(doc),
        ("v1", "ServiceAccount") => round_trip::<ServiceAccount>(doc),
        ("v1", "Secret") => round_trip::<Secret>(doc),
        ("v1", "Service") => round_trip::<Service>(doc),
        ("apps/v1", "StatefulSet") => round_trip::<StatefulSet>(doc),
        ("policy/v1", "PodDisruptionBudget") => round_trip::<PodDisruptionBudget>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(doc),
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<Role>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            round_trip::<ClusterRoleBinding>(doc)
        }
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<RoleBinding>(doc),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            round_trip::<CustomResourceDefinition>(doc)
        }
        _ => Err(format!(
            "{api_version:?} {kind:?} is not a kind this test knows: add it to check_typed"
        )),
    }
}

/// Every document of `text`, checked; problems name the file, the document and the field.
fn check_file(name: &str, text: &str) -> Vec<String> {
    let docs: Vec<Value> = match serde_saphyr::from_multiple(text) {
        Ok(docs) => docs,
        Err(e) => return vec![format!("{name}: invalid YAML: {e}")],
    };
    docs.iter()
        .enumerate()
        .filter(|(_, d)| !d.is_null())
        .filter_map(|(i, doc)| {
            check_typed(doc).err().map(|e| {
                format!(
                    "{name}, document {} ({} {}): {e}",
                    i + 1,
                    doc["kind"].as_str().unwrap_or("?"),
                    doc["metadata"]["name"].as_str().unwrap_or("?")
                )
            })
        })
        .collect()
}

#[test]
fn kustomization_lists_every_manifest_and_nothing_else() {
    let k = kustomization();
    assert_eq!(k.namespace, "bosun");
    assert!(k.images.iter().any(|i| i.name == "bosun"), "{k:?}");
    let mut listed = k.resources.clone();
    listed.sort();
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &deploy_dir(), &mut files);
    files.retain(|f| f != "kustomization.yaml");
    assert_eq!(
        listed, files,
        "deploy/kustomization.yaml must list exactly the manifests in deploy/"
    );
    for crd in ["crds/metacontroller.yaml", "crds/landscaper.yaml"] {
        assert!(listed.iter().any(|f| f == crd), "{crd} is not installed");
    }
}

#[test]
fn every_manifest_decodes_into_its_typed_struct_without_unknown_fields() {
    let k = kustomization();
    let mut problems = Vec::new();
    let mut kinds = Vec::new();
    for file in &k.resources {
        let path = deploy_dir().join(file);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        problems.extend(check_file(&format!("deploy/{file}"), &text));
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_default();
        kinds.extend(
            docs.iter()
                .filter_map(|d| d["kind"].as_str().map(String::from)),
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for kind in [
        "Namespace",
        "ServiceAccount",
        "StatefulSet",
        "Service",
        "PodDisruptionBudget",
        "ClusterRole",
        "Role",
        "ClusterRoleBinding",
        "RoleBinding",
        "Secret",
        "CustomResourceDefinition",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} in deploy/");
    }
}

#[test]
fn a_misspelled_field_is_named_with_its_file() {
    let text = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: x\nspec:\n  replcas: 2\n  serviceName: x\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers:\n      - name: c\n        image: i\n        imagePullPolcy: Always\n";
    let problems = check_file("deploy/typo.yaml", text);
    let all = problems.join("\n");
    assert!(
        all.contains("deploy/typo.yaml, document 1 (StatefulSet x)"),
        "{all}"
    );
    assert!(all.contains(".spec.replcas: unknown field"), "{all}");
    assert!(
        all.contains(".spec.template.spec.containers[0].imagePullPolcy: unknown field"),
        "{all}"
    );
    // A value of the wrong type is refused by the decoding itself.
    let problems = check_file(
        "deploy/bad.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: http}]}\n",
    );
    assert!(
        problems.len() == 1 && problems[0].starts_with("deploy/bad.yaml, document 1 (Service s)"),
        "{problems:?}"
    );
}

#[test]
fn the_statefulset_runs_two_hardened_replicas() {
    use k8s_openapi::api::apps::v1::StatefulSet;
    let text = std::fs::read_to_string(deploy_dir().join("statefulset.yaml")).expect("read");
    let sts: StatefulSet = serde_saphyr::from_str(&text).expect("a StatefulSet");
    let spec = sts.spec.expect("spec");
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
    let pod = spec.template.spec.expect("pod spec");
    let c = &pod.containers[0];
    let sc = c
        .security_context
        .as_ref()
        .expect("container securityContext");
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.run_as_user, Some(65532));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let drop = sc.capabilities.as_ref().and_then(|c| c.drop.clone());
    assert_eq!(drop, Some(vec!["ALL".to_string()]));
    let env: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    for name in [
        "ADDON_OPERATOR_HA",
        "ADDON_OPERATOR_POD",
        "ADDON_OPERATOR_NAMESPACE",
        "POD_IP",
        "ADDON_OPERATOR_LISTEN_ADDRESS",
        "BOSUN_JOURNAL_DIR",
        "BOSUN_HA_TOKEN",
    ] {
        assert!(env.contains(&name), "{name} missing from {env:?}");
    }
    let token = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "BOSUN_HA_TOKEN")
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.secret_key_ref.as_ref())
        .expect("BOSUN_HA_TOKEN from a Secret");
    assert_eq!(token.name, "bosun-journal-token");
    assert_eq!(token.optional, Some(true));
    let ports: Vec<i32> = c.ports.iter().flatten().map(|p| p.container_port).collect();
    assert_eq!(ports, vec![9650, 9651]);
    let claims = spec.volume_claim_templates.expect("volumeClaimTemplates");
    assert_eq!(claims[0].metadata.name.as_deref(), Some("journal"));
    let mounts = c.volume_mounts.clone().unwrap_or_default();
    assert!(
        mounts
            .iter()
            .any(|m| m.name == "journal" && m.mount_path == "/var/lib/bosun"),
        "{mounts:?}"
    );
}

fn kubectl_json(sb: &Sandbox, args: &[&str]) -> Value {
    let out = run_ok(sb.kubectl().args(args).args(["-o", "json"]));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl {args:?}: {e}: {out}"))
}

#[test]
fn kubectl_apply_k_passes_a_server_side_dry_run_and_stores_nothing() {
    let sb = Sandbox::start();
    let deploy = deploy_dir();
    let deploy = deploy.to_string_lossy();
    // As on a real API server, a dry run creates no namespace, and namespaced objects in
    // a namespace that does not exist are refused: create it first.
    run_ok(sb.kubectl().args(["create", "namespace", "bosun"]));
    let out = run_ok(
        sb.kubectl()
            .args(["apply", "-k", &deploy, "--dry-run=server"]),
    );
    for line in [
        "statefulset.apps/bosun created (server dry run)",
        "service/bosun created (server dry run)",
        "poddisruptionbudget.policy/bosun created (server dry run)",
        "clusterrole.rbac.authorization.k8s.io/bosun-lambda created (server dry run)",
        "role.rbac.authorization.k8s.io/bosun-leader-election created (server dry run)",
        "customresourcedefinition.apiextensions.k8s.io/deployitems.landscaper.gardener.cloud created (server dry run)",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    // Nothing was stored.
    let sts = kubectl_json(&sb, &["get", "statefulsets", "-n", "bosun"]);
    assert_eq!(sts["items"], Value::Array(vec![]), "{sts}");
    let (code, _) = sb.get(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/deployitems.landscaper.gardener.cloud",
    );
    assert_eq!(code, 404, "the dry run stored a CRD");
    let roles = kubectl_json(
        &sb,
        &["get", "clusterroles", "-l", "app.kubernetes.io/name=bosun"],
    );
    assert_eq!(roles["items"], Value::Array(vec![]), "{roles}");

    // And for real: everything is created, and the CRDs are served.
    run_ok(sb.kubectl().args(["apply", "-k", &deploy]));
    let sts = kubectl_json(&sb, &["get", "statefulset", "bosun", "-n", "bosun"]);
    assert_eq!(sts["spec"]["replicas"], 2);
    assert_eq!(
        sts["spec"]["template"]["spec"]["containers"][0]["image"],
        "bosun:latest"
    );
    let binding = kubectl_json(&sb, &["get", "clusterrolebinding", "bosun-deployer"]);
    assert_eq!(binding["subjects"][0]["namespace"], "bosun");
    run_ok(sb.kubectl().args(["get", "compositecontrollers", "-A"]));
    // `kubectl get di` shows the CRD's printer columns, as on a cluster.
    let dir = tempfile::tempdir().expect("tempdir");
    let item = dir.path().join("item.yaml");
    std::fs::write(
        &item,
        "apiVersion: landscaper.gardener.cloud/v1alpha1\nkind: DeployItem\nmetadata:\n  name: shown\n  namespace: bosun\nspec:\n  type: landscaper.gardener.cloud/mock\n",
    )
    .expect("write the item");
    run_ok(sb.kubectl().args(["apply", "-f"]).arg(&item));
    let table = run_ok(sb.kubectl().args(["get", "di", "-n", "bosun"]));
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "TYPE", "PHASE", "EXPORTREF", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        row.get(..2),
        Some(&["shown", "landscaper.gardener.cloud/mock"][..]),
        "{table}"
    );
}

/// `helm template demo deploy/helm/bosun --namespace tools` with `args`, by the real Helm.
fn helm_template(args: &[&str]) -> String {
    let chart = deploy_dir().join("helm").join("bosun");
    run_ok(
        std::process::Command::new(crate::common::helm_bin())
            .arg("template")
            .arg("demo")
            .arg(&chart)
            .args(["--namespace", "tools"])
            .args(args),
    )
}

/// The documents of a rendering of `kind`.
fn of_kind(text: &str, kind: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_default()
        .into_iter()
        .filter(|d| d["kind"] == kind)
        .collect()
}

#[test]
fn the_helm_chart_takes_metacontroller_s_values_and_passes_a_server_side_dry_run() {
    // Defaults, and every value metacontroller's chart has set away from its default.
    let defaults = helm_template(&[]);
    let custom = helm_template(&[
        "--set",
        "replicas=3",
        "--set",
        "image.repository=registry.example/bosun",
        "--set",
        "image.tag=1.2.3",
        "--set",
        "image.pullPolicy=Always",
        "--set",
        "imagePullSecrets[0].name=pull",
        "--set",
        "serviceAccount.name=ops",
        "--set",
        "serviceAccount.annotations.team=platform",
        "--set",
        "podAnnotations.scrape=yes",
        "--set",
        "podDisruptionBudget.maxUnavailable=null",
        "--set",
        "podDisruptionBudget.minAvailable=1",
        "--set",
        "zap.logLevel=4",
        "--set",
        "zap.encoder=json",
        "--set",
        "commandArgs[0]=--client-go-qps=100",
        "--set",
        "resources.limits.memory=1Gi",
        "--set",
        "priorityClassName=system-cluster-critical",
        "--set",
        "nodeSelector.disk=ssd",
        "--set",
        "tolerations[0].key=dedicated",
        "--set",
        "tolerations[0].operator=Exists",
        "--set",
        "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
        "--set",
        "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey=kubernetes.io/hostname",
        "--set",
        "service.annotations.a=b",
        "--set",
        "journal.storageClassName=fast",
        "--set",
        "fullnameOverride=bosun",
    ]);
    for (name, text) in [("defaults", &defaults), ("custom", &custom)] {
        let problems = check_file(&format!("helm template ({name})"), text);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
    let sts = &of_kind(&custom, "StatefulSet")[0];
    let pod = &sts["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(sts["metadata"]["name"], "bosun");
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(c["image"], "registry.example/bosun:1.2.3");
    assert_eq!(c["imagePullPolicy"], "Always");
    let args: Vec<&str> = c["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for arg in [
        "run",
        "--zap-log-level=4",
        "--zap-encoder=json",
        "--discovery-interval=20s",
        "--cache-flush-interval=30m",
        "--client-go-qps=100",
    ] {
        assert!(args.contains(&arg), "{arg} missing from {args:?}");
    }
    assert_eq!(pod["serviceAccountName"], "ops");
    assert_eq!(pod["imagePullSecrets"][0]["name"], "pull");
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["nodeSelector"]["disk"], "ssd");
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    assert!(pod["affinity"]["podAntiAffinity"].is_object(), "{pod}");
    assert_eq!(
        sts["spec"]["template"]["metadata"]["annotations"]["scrape"],
        "yes"
    );
    assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"],
        "fast"
    );
    let pdb = &of_kind(&custom, "PodDisruptionBudget")[0];
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert!(pdb["spec"]["maxUnavailable"].is_null(), "{pdb}");
    assert_eq!(
        of_kind(&custom, "ServiceAccount")[0]["metadata"]["annotations"]["team"],
        "platform"
    );
    assert_eq!(
        of_kind(&custom, "Service")[0]["metadata"]["annotations"]["a"],
        "b"
    );
    let bindings = of_kind(&custom, "ClusterRoleBinding");
    assert_eq!(bindings.len(), 3);
    assert!(
        bindings
            .iter()
            .all(|b| b["subjects"][0]["name"] == "ops" && b["subjects"][0]["namespace"] == "tools")
    );
    // rbac.create and serviceAccount.create off: neither is rendered, the pods run as
    // "default"; no budget with podDisruptionBudget {}.
    let bare = helm_template(&[
        "--set",
        "rbac.create=false",
        "--set",
        "serviceAccount.create=false",
        "--set",
        "podDisruptionBudget=null",
    ]);
    for kind in [
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "PodDisruptionBudget",
    ] {
        assert!(
            of_kind(&bare, kind).is_empty(),
            "{kind} rendered in:\n{bare}"
        );
    }
    assert_eq!(
        of_kind(&bare, "StatefulSet")[0]["spec"]["template"]["spec"]["serviceAccountName"],
        "default"
    );

    // The defaults pass the API server's dry run, and nothing is stored.
    let sb = Sandbox::start();
    run_ok(sb.kubectl().args(["create", "namespace", "tools"]));
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("chart.yaml");
    std::fs::write(&file, &defaults).expect("write the rendering");
    let out = run_ok(
        sb.kubectl()
            .args(["apply", "--dry-run=server", "-f"])
            .arg(&file),
    );
    for line in [
        "statefulset.apps/demo-bosun created (server dry run)",
        "service/demo-bosun created (server dry run)",
        "secret/demo-bosun-journal-token created (server dry run)",
        "poddisruptionbudget.policy/demo-bosun created (server dry run)",
        "clusterrole.rbac.authorization.k8s.io/demo-bosun-modules created (server dry run)",
        "role.rbac.authorization.k8s.io/demo-bosun-leader-election created (server dry run)",
        "rolebinding.rbac.authorization.k8s.io/demo-bosun-leader-election created (server dry run)",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    let sts = kubectl_json(&sb, &["get", "statefulsets", "-n", "tools"]);
    assert_eq!(sts["items"], Value::Array(vec![]), "{sts}");

    // metacontroller-helm's own values file, unchanged: its command (the image's link),
    // its commandArgs, its probe port, its ClusterRole; no extra Service.
    let theirs = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/references/metacontroller-helm-values.yaml");
    let theirs = theirs.display().to_string();
    let rendered = helm_template(&["-f", &theirs]);
    let problems = check_file("helm template (metacontroller's values)", &rendered);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let c = &of_kind(&rendered, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"], json!(["/usr/bin/metacontroller"]), "{c}");
    let args: Vec<&str> = c["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        !args.contains(&"run"),
        "metacontroller's defaults imply it: {args:?}"
    );
    assert!(
        args.ends_with(&[
            "--zap-log-level=4",
            "--discovery-interval=20s",
            "--cache-flush-interval=30m",
            "--health-probe-bind-address=:8081"
        ]),
        "{args:?}"
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], 8081, "{c}");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], 8081, "{c}");
    let broad = of_kind(&rendered, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "demo-bosun-modules")
        .expect("the broad role");
    assert_eq!(
        broad["rules"],
        json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
    );
    assert!(broad["aggregationRule"].is_null(), "{broad}");
    assert_eq!(
        of_kind(&rendered, "Service").len(),
        1,
        "only the headless one"
    );
    let file = dir.path().join("metacontroller-values.yaml");
    std::fs::write(&file, &rendered).expect("write the rendering");
    let out = run_ok(
        sb.kubectl()
            .args(["apply", "--dry-run=server", "-f"])
            .arg(&file),
    );
    assert!(
        out.contains("statefulset.apps/demo-bosun created (server dry run)"),
        "{out}"
    );

    // The keys metacontroller's chart has and bosun's lacked, set away from default.
    let keyed = helm_template(&[
        "-f",
        &theirs,
        "--set",
        "command=/addon-operator",
        "--set",
        "env[0].name=LOG_LEVEL",
        "--set",
        "env[0].value=debug",
        "--set",
        "clusterRole.rules=null",
        "--set-string",
        "clusterRole.aggregationRule.clusterRoleSelectors[0].matchLabels.rbac\\.example/aggregate-to-bosun=true",
        "--set",
        "service.enabled=true",
        "--set",
        "service.ports[0].name=metrics",
        "--set",
        "service.ports[0].port=9999",
        "--set",
        "service.ports[0].targetPort=9999",
    ]);
    let problems = check_file("helm template (metacontroller's keys)", &keyed);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let c = &of_kind(&keyed, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"], json!(["/addon-operator"]), "{c}");
    assert!(
        c["env"].as_array().is_some_and(|e| e
            .iter()
            .any(|v| v["name"] == "LOG_LEVEL" && v["value"] == "debug")),
        "{c}"
    );
    let broad = of_kind(&keyed, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "demo-bosun-modules")
        .expect("the broad role");
    assert_eq!(
        broad["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"]["rbac.example/aggregate-to-bosun"],
        "true",
        "{broad}"
    );
    let ports = of_kind(&keyed, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "demo-bosun-ports")
        .expect("metacontroller's Service");
    assert_eq!(ports["spec"]["ports"][0]["port"], 9999, "{ports}");
    assert!(
        ports["spec"]["clusterIP"].is_null(),
        "not headless: {ports}"
    );
    let file = dir.path().join("metacontroller-keys.yaml");
    std::fs::write(&file, &keyed).expect("write the rendering");
    let out = run_ok(
        sb.kubectl()
            .args(["apply", "--dry-run=server", "-f"])
            .arg(&file),
    );
    for line in [
        "service/demo-bosun-ports created (server dry run)",
        "clusterrole.rbac.authorization.k8s.io/demo-bosun-modules created (server dry run)",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
}
