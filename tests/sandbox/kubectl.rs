//! Real kubectl (the one on the PATH, which scripts/setup.sh installs; the test names its
//! version) against the sandbox: apply with validation, get, patch of every type, replace,
//! watch, delete, CRDs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::{Sandbox, run_err, run_ok};
use serde_json::Value;

const CONFIGMAP: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  labels:
    app: demo
data:
  color: blue
";

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
        ports:
        - containerPort: 80
      - name: sidecar
        image: busybox:1
";

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wg]
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
";

const WIDGET: &str = "apiVersion: example.com/v1
kind: Widget
metadata:
  name: gizmo
spec:
  size: 3
";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write manifest");
    path
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("kubectl printed no JSON ({e}): {text}"))
}

/// The version the kubectl of `k` reports of itself (`v1.MINOR.PATCH…`), its parts checked
/// to agree.
fn client_version(k: &dyn Fn() -> std::process::Command) -> String {
    let version = json_of(&run_ok(k().args(["version", "--client", "-o", "json"])));
    let git = version["clientVersion"]["gitVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("no clientVersion.gitVersion: {version}"))
        .to_string();
    let minor: u32 = version["clientVersion"]["minor"]
        .as_str()
        .map(|m| m.trim_end_matches('+'))
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no clientVersion.minor: {version}"));
    assert_eq!(version["clientVersion"]["major"], "1", "{version}");
    assert!(
        git.starts_with(&format!("v1.{minor}.")),
        "kubectl {git} says its minor version is {minor}: {version}"
    );
    git
}

fn exercise(kubectl: &Path) {
    let sb = Sandbox::start();
    let k = || {
        let mut cmd = sb.kubectl_at(kubectl);
        cmd.args(["--request-timeout", "30s"]);
        cmd
    };
    let dir = sb.scratch();
    let version = client_version(&k);
    eprintln!("kubectl {version} against the sandbox");

    run_ok(k().args(["create", "namespace", "demo"]));
    let cm = write(dir, "cm.yaml", CONFIGMAP);
    let deploy = write(dir, "deploy.yaml", DEPLOYMENT);
    run_ok(
        k().args(["apply", "--validate=true", "-n", "demo", "-f"])
            .arg(&cm),
    );
    run_ok(
        k().args(["apply", "--validate=true", "-n", "demo", "-f"])
            .arg(&deploy),
    );

    let yaml = run_ok(k().args(["get", "configmap", "settings", "-n", "demo", "-o", "yaml"]));
    assert!(yaml.contains("color: blue"), "{yaml}");
    assert!(
        yaml.contains("kubectl.kubernetes.io/last-applied-configuration"),
        "{yaml}"
    );

    // Apply again with a change: three-way strategic merge on the Deployment.
    write(dir, "cm.yaml", &CONFIGMAP.replace("blue", "green"));
    run_ok(k().args(["apply", "-n", "demo", "-f"]).arg(&cm));
    let changed = DEPLOYMENT
        .replace("replicas: 1", "replicas: 2")
        .replace("      - name: sidecar\n        image: busybox:1\n", "");
    write(dir, "deploy.yaml", &changed);
    run_ok(k().args(["apply", "-n", "demo", "-f"]).arg(&deploy));
    let d = json_of(&run_ok(
        k().args(["get", "deploy", "web", "-n", "demo", "-o", "json"]),
    ));
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "sidecar removed by apply"
    );
    assert_eq!(d["metadata"]["generation"], 2);
    let c = json_of(&run_ok(
        k().args(["get", "cm", "settings", "-n", "demo", "-o", "json"]),
    ));
    assert_eq!(c["data"]["color"], "green");

    // patch, all three types.
    run_ok(k().args([
        "patch",
        "cm",
        "settings",
        "-n",
        "demo",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"size":"L"}}"#,
    ]));
    run_ok(k().args([
        "patch",
        "cm",
        "settings",
        "-n",
        "demo",
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/data/shape","value":"round"}]"#,
    ]));
    run_ok(k().args([
        "patch",
        "deploy",
        "web",
        "-n",
        "demo",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:1.27"}]}}}}"#,
    ]));
    let c = json_of(&run_ok(
        k().args(["get", "cm", "settings", "-n", "demo", "-o", "json"]),
    ));
    assert_eq!(
        (c["data"]["size"].as_str(), c["data"]["shape"].as_str()),
        (Some("L"), Some("round"))
    );
    let d = json_of(&run_ok(
        k().args(["get", "deploy", "web", "-n", "demo", "-o", "json"]),
    ));
    let containers = &d["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["image"], "nginx:1.27");
    assert_eq!(
        containers[0]["ports"][0]["containerPort"], 80,
        "strategic merge keeps unpatched fields"
    );

    // edit-style replace: get, change, replace.
    let mut c = c;
    c["data"]["color"] = Value::String("red".into());
    let replaced = write(dir, "replaced.json", &c.to_string());
    run_ok(k().args(["replace", "-f"]).arg(&replaced));
    let c2 = json_of(&run_ok(
        k().args(["get", "cm", "settings", "-n", "demo", "-o", "json"]),
    ));
    assert_eq!(c2["data"]["color"], "red");
    // Replacing with the now stale resourceVersion conflicts.
    let err = run_err(k().args(["replace", "-f"]).arg(&replaced));
    assert!(
        err.contains("the object has been modified") || err.contains("Conflict"),
        "{err}"
    );

    // get -w sees ADDED, MODIFIED and DELETED.
    let mut watch = k()
        .args([
            "get",
            "configmaps",
            "-n",
            "demo",
            "-w",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    let stdout = watch.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        // kubectl prints one pretty JSON document per event: collect until braces balance.
        let mut doc = String::new();
        let mut depth = 0i32;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            doc.push_str(&line);
            if depth == 0 && !doc.trim().is_empty() && tx.send(std::mem::take(&mut doc)).is_err() {
                return;
            }
        }
    });
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut expect = |kind: &str, name: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !seen.iter().any(|(t, n)| t == kind && n == name) {
            let left = deadline.saturating_duration_since(Instant::now());
            let doc = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {kind} event for {name}; saw {seen:?}"));
            let ev = json_of(&doc);
            let obj_name = ev["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            seen.push((
                ev["type"].as_str().unwrap_or_default().to_string(),
                obj_name,
            ));
        }
    };
    expect("ADDED", "settings");
    run_ok(k().args([
        "create",
        "configmap",
        "watched",
        "-n",
        "demo",
        "--from-literal=a=1",
    ]));
    expect("ADDED", "watched");
    run_ok(k().args(["label", "configmap", "watched", "-n", "demo", "touched=yes"]));
    expect("MODIFIED", "watched");
    run_ok(k().args(["delete", "configmap", "watched", "-n", "demo"]));
    expect("DELETED", "watched");
    let _ = watch.kill();
    let _ = watch.wait();

    // Plain table output works.
    let table = run_ok(k().args(["get", "deploy", "-n", "demo"]));
    assert!(table.contains("NAME") && table.contains("web"), "{table}");

    // CRDs: create, wait until established, custom resource by plural, kind, singular, short name.
    let crd = write(dir, "crd.yaml", CRD);
    run_ok(k().args(["apply", "-f"]).arg(&crd));
    run_ok(k().args([
        "wait",
        "--for",
        "condition=established",
        "--timeout=30s",
        "crd/widgets.example.com",
    ]));
    let widget = write(dir, "widget.yaml", WIDGET);
    run_ok(k().args(["apply", "-n", "demo", "-f"]).arg(&widget));
    for name in ["widgets", "widget", "Widget", "wg", "widgets.example.com"] {
        let out = run_ok(k().args([
            "get",
            name,
            "gizmo",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.size}",
        ]));
        assert_eq!(out.trim(), "3", "kubectl get {name}");
    }
    write(dir, "widget.yaml", &WIDGET.replace("size: 3", "size: 4"));
    run_ok(k().args(["apply", "-n", "demo", "-f"]).arg(&widget));
    let out = run_ok(k().args([
        "get",
        "wg",
        "gizmo",
        "-n",
        "demo",
        "-o",
        "jsonpath={.spec.size}",
    ]));
    assert_eq!(out.trim(), "4");

    // Server-side apply: field ownership, a conflict between managers, --force-conflicts.
    let ssa_doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned\ndata:\n  k: one\n";
    let ssa = write(dir, "ssa.yaml", ssa_doc);
    let apply_as = |manager: &str, force: bool| {
        let mut cmd = k();
        cmd.args([
            "apply",
            "--server-side",
            "--field-manager",
            manager,
            "-n",
            "demo",
            "-f",
        ])
        .arg(&ssa);
        if force {
            cmd.arg("--force-conflicts");
        }
        cmd
    };
    run_ok(&mut apply_as("alice", false));
    write(dir, "ssa.yaml", &ssa_doc.replace("one", "two"));
    let err = run_err(&mut apply_as("bob", false));
    assert!(
        err.contains("conflict") && err.contains("alice") && err.contains(".data.k"),
        "{err}"
    );
    run_ok(&mut apply_as("bob", true));
    let owned = json_of(&run_ok(k().args([
        "get",
        "cm",
        "owned",
        "-n",
        "demo",
        "-o",
        "json",
        "--show-managed-fields",
    ])));
    assert_eq!(owned["data"]["k"], "two");
    let managers: Vec<&str> = owned["metadata"]["managedFields"]
        .as_array()
        .map(|m| m.iter().filter_map(|e| e["manager"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        managers,
        ["bob"],
        "forcing moved ownership of data.k from alice to bob"
    );

    // RBAC objects as kubectl's typed clients send them (protobuf from 1.32 on).
    run_ok(k().args([
        "create",
        "role",
        "reader",
        "-n",
        "demo",
        "--verb=get,list",
        "--resource=pods",
    ]));
    run_ok(k().args([
        "create",
        "clusterrole",
        "watcher",
        "--verb=watch",
        "--resource=configmaps",
    ]));
    run_ok(k().args([
        "create",
        "rolebinding",
        "reader-binding",
        "-n",
        "demo",
        "--role=reader",
        "--serviceaccount=demo:bosun",
    ]));
    run_ok(k().args([
        "create",
        "clusterrolebinding",
        "watcher-binding",
        "--clusterrole=watcher",
        "--user=alice",
    ]));
    let role = json_of(&run_ok(
        k().args(["get", "role", "reader", "-n", "demo", "-o", "json"]),
    ));
    assert_eq!(
        role["rules"][0]["verbs"],
        serde_json::json!(["get", "list"]),
        "{role}"
    );
    assert_eq!(
        role["rules"][0]["resources"],
        serde_json::json!(["pods"]),
        "{role}"
    );
    let binding = json_of(&run_ok(k().args([
        "get",
        "rolebinding",
        "reader-binding",
        "-n",
        "demo",
        "-o",
        "json",
    ])));
    assert_eq!(binding["roleRef"]["name"], "reader", "{binding}");
    assert_eq!(binding["subjects"][0]["name"], "bosun", "{binding}");
    let cluster_binding = json_of(&run_ok(k().args([
        "get",
        "clusterrolebinding",
        "watcher-binding",
        "-o",
        "json",
    ])));
    assert_eq!(
        cluster_binding["subjects"][0]["kind"], "User",
        "{cluster_binding}"
    );

    // delete.
    run_ok(k().args(["delete", "-n", "demo", "-f"]).arg(&deploy));
    let err = run_err(k().args(["get", "deploy", "web", "-n", "demo"]));
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
    run_ok(k().args(["delete", "namespace", "demo", "--timeout=60s"]));
}

/// One kubectl is installed (scripts/setup.sh): the test says which version it ran.
#[test]
fn the_installed_kubectl_works_against_the_sandbox_and_names_its_version() {
    exercise(Path::new("kubectl"));
}
