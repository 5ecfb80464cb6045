//! bosun under its own RBAC, on the real control plane: the ServiceAccount, Roles and
//! bindings of `deploy/` (`kubectl apply -k deploy`) or of the Helm chart
//! (`helm template deploy/helm/bosun`), a token of that ServiceAccount, and bosun started with
//! nothing but what its pod has — never as admin. The modules' role allows everything (a
//! module's chart may hold anything), so its binding is dropped, as `deploy/rbac.yaml` says
//! to for a subsystem switched off: the lambda controllers, the deployer and leader election
//! then work with their own narrow roles alone. A request the API server refuses as
//! `Forbidden` fails the test, naming the verb and resource (kube-apiserver's message says
//! both).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::common::webhooks::{Hooks, post_ok};
use crate::common::{Operator, Sandbox, run_ok};

const WAIT: Duration = Duration::from_secs(120);

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// What the user adds for their lambda controller, as `deploy/rbac.yaml` says: its parent
/// resource (and `/status`) and its children.
fn users_rules_for_their_controller(cp: &Sandbox, account: (&str, &str)) {
    post_ok(
        cp,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "bosun-lambda-things"},
        "rules": [
            {"apiGroups": ["example.com"], "resources": ["things", "things/status"],
             "verbs": ["get", "list", "watch", "update", "patch"]},
            {"apiGroups": [""], "resources": ["configmaps"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        ]}),
    );
    post_ok(
        cp,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "bosun-lambda-things"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bosun-lambda-things"},
            "subjects": [{"kind": "ServiceAccount", "name": account.1, "namespace": account.0}]}),
    );
}

/// A token of the ServiceAccount, as the kubelet mounts one, in a folder as a pod has it.
fn service_account_dir(cp: &Sandbox, work: &Path, (namespace, name): (&str, &str)) -> PathBuf {
    let (code, answer) = cp.post(
        &format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"),
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600}}),
    );
    assert_eq!(code, 201, "TokenRequest: {answer}");
    let token = answer["status"]["token"].as_str().expect("a token");
    let dir = work.join("serviceaccount");
    std::fs::create_dir_all(&dir).expect("service account dir");
    std::fs::write(dir.join("token"), token).expect("token");
    let control_plane = cp.control_plane().expect("the real control plane");
    std::fs::copy(control_plane.data.join("ca.crt"), dir.join("ca.crt")).expect("ca.crt");
    std::fs::write(dir.join("namespace"), namespace).expect("namespace");
    dir
}

/// bosun as its pod runs it: the in-cluster environment, the lambda controllers and the
/// deployer, leader election on, the modules off. No ADDON_OPERATOR_NAMESPACE: the
/// namespace is the service account's (metacontroller's manifest sets none).
fn bosun_in_its_pod(cp: &Sandbox, work: &Path, sa: &Path) -> Operator {
    let port = cp.url.rsplit(':').next().expect("port").to_string();
    let path = |p: PathBuf| p.display().to_string();
    let env = [
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_string()),
        ("KUBERNETES_SERVICE_PORT", port),
        ("BOSUN_SERVICE_ACCOUNT_DIR", path(sa.to_path_buf())),
        ("BOSUN_MODULES", "false".to_string()),
        (
            "HELM_LIB_PATH",
            path(crate::common::tools_dir().join("helm/libhelm_c.so")),
        ),
        ("BOSUN_JOURNAL_DIR", path(work.join("journal"))),
        ("ADDON_OPERATOR_TMP_DIR", path(work.join("tmp"))),
        ("DEBUG_UNIX_SOCKET", path(work.join("debug.socket"))),
        ("ADDON_OPERATOR_LISTEN_ADDRESS", "127.0.0.1".to_string()),
        ("ADDON_OPERATOR_LISTEN_PORT", "0".to_string()),
        ("ADDON_OPERATOR_HA", "true".to_string()),
        ("ADDON_OPERATOR_POD", "bosun-0".to_string()),
        ("BOSUN_HA_LISTEN", "127.0.0.1:0".to_string()),
        ("HOME", path(work.to_path_buf())),
        ("LOG_LEVEL", "info".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Operator::start_with_only(&env, work)
}

/// Every request the API server refused, as bosun logged it (kube-apiserver's message:
/// `<resource> is forbidden: User "…" cannot <verb> resource "<resource>" …`).
fn forbidden(op: &Operator) -> Vec<String> {
    op.logs()
        .lines()
        .filter(|l| l.contains("forbidden") || l.contains("Forbidden"))
        .map(String::from)
        .collect()
}

fn assert_nothing_forbidden(op: &Operator) {
    let refused = forbidden(op);
    assert!(
        refused.is_empty(),
        "bosun's ServiceAccount was refused (fix the roles in deploy/ and the chart):\n{}",
        refused.join("\n")
    );
}

/// [`Operator::wait`] that fails at the first refused request instead of at the deadline.
fn wait(op: &Operator, what: &str, mut cond: impl FnMut() -> bool) {
    op.wait(what, WAIT, || {
        assert_nothing_forbidden(op);
        cond()
    });
}

/// Drops the modules' ClusterRoleBinding (`name`) and runs the lambda controllers, the
/// deployer and leader election as the ServiceAccount `account`; checks each did its work.
fn everything_works_as(cp: &Sandbox, account: (&str, &str), modules_binding: &str) {
    let work = tempfile::tempdir().expect("tempdir");
    let (code, answer) = cp.request(
        "DELETE",
        &format!("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{modules_binding}"),
        "",
        "",
    );
    assert_eq!(code, 200, "drop the modules' binding: {answer}");
    users_rules_for_their_controller(cp, account);
    let sa = service_account_dir(cp, work.path(), account);

    // A CompositeController whose parent makes one ConfigMap.
    let hooks = Hooks::serve(|_, req| {
        let parent = &req["parent"];
        (
            200,
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{}-child", parent["metadata"]["name"].as_str().unwrap_or_default()),
                             "namespace": parent["metadata"]["namespace"]},
                "data": {"from": "sync"}}],
                "status": {"synced": true}}),
        )
    });
    cp.create_crd(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }));

    let op = bosun_in_its_pod(cp, work.path(), &sa);

    // Leader election: the Lease in bosun's namespace, held by this replica.
    let lease = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases/addon-operator-leader-election",
        account.0
    );
    wait(&op, "bosun holds its Lease", || {
        cp.get(&lease).1["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| h.starts_with("bosun-0."))
    });

    let cm = |ns: &str, name: &str| cp.get(&format!("/api/v1/namespaces/{ns}/configmaps/{name}"));

    // Lambda: the controller syncs a parent into its child and status.
    wait(&op, "the CompositeController CRD served", || {
        cp.get("/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers")
            .0
            == 200
    });
    post_ok(
        cp,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "things"},
            "spec": {"generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}}}),
    );
    post_ok(
        cp,
        "/apis/example.com/v1/namespaces/default/things",
        &json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "one"}}),
    );
    wait(&op, "the Thing's child and status", || {
        cm("default", "one-child").1["data"]["from"] == "sync"
            && cp
                .get("/apis/example.com/v1/namespaces/default/things/one")
                .1["status"]["synced"]
                == true
    });

    // Deployer: a mock item succeeds with its export Secret, a manifest item deploys into
    // a Target (with the Target's own rights) and is deleted again.
    let items = "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/deployitems";
    wait(&op, "the DeployItem CRD served", || cp.get(items).0 == 200);
    post_ok(
        cp,
        items,
        &json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
            "metadata": {"name": "mock"},
            "spec": {"type": "landscaper.gardener.cloud/mock",
                "config": {"apiVersion": "mock.deployer.landscaper.gardener.cloud/v1alpha1", "kind": "ProviderConfiguration",
                           "export": {"key": "value"}}}}),
    );
    let kubeconfig = std::fs::read_to_string(&cp.kubeconfig).expect("kubeconfig");
    post_ok(
        cp,
        "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/targets",
        &json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
            "metadata": {"name": "here"},
            "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": {"kubeconfig": kubeconfig}}}),
    );
    post_ok(
        cp,
        items,
        &json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
            "metadata": {"name": "manifests"},
            "spec": {"type": "landscaper.gardener.cloud/kubernetes-manifest", "target": {"name": "here"},
                "config": {"apiVersion": "manifest.deployer.landscaper.gardener.cloud/v1alpha2", "kind": "ProviderConfiguration",
                    "manifests": [{"policy": "manage", "manifest": {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "deployed", "namespace": "default"}, "data": {"v": "1"}}}]}}}),
    );
    let phase = |name: &str| cp.get(&format!("{items}/{name}")).1["status"]["phase"].clone();
    wait(&op, "both DeployItems Succeeded", || {
        phase("mock") == "Succeeded" && phase("manifests") == "Succeeded"
    });
    assert_eq!(
        cm("default", "deployed").0,
        200,
        "the manifest item's object"
    );
    let export = cp.get(&format!("{items}/mock")).1["status"]["exportRef"]["name"].clone();
    assert!(export.is_string(), "the mock item's export Secret is named");
    let (code, answer) = cp.request("DELETE", &format!("{items}/manifests"), "", "");
    assert_eq!(code, 200, "{answer}");
    wait(&op, "the manifest item and its object gone", || {
        cp.get(&format!("{items}/manifests")).0 == 404 && cm("default", "deployed").0 == 404
    });

    assert_nothing_forbidden(&op);
}

#[test]
fn bosun_works_under_the_rbac_of_deploy() {
    let cp = Sandbox::real();
    // As a user installs it, the StatefulSet and all (no kubelet runs its pods here).
    run_ok(
        cp.kubectl()
            .args(["apply", "-k"])
            .arg(root().join("deploy")),
    );
    everything_works_as(&cp, ("bosun", "bosun"), "bosun-modules");
}

#[test]
fn bosun_works_under_the_rbac_of_the_helm_chart() {
    let cp = Sandbox::real();
    let namespace = "bosun-system";
    run_ok(cp.kubectl().args(["create", "namespace", namespace]));
    // The chart's objects as `helm install bosun deploy/helm/bosun -n bosun-system` makes
    // them, its CRDs included.
    let rendered = run_ok(
        std::process::Command::new(crate::common::helm_bin())
            .args(["template", "bosun", "--include-crds", "-n", namespace])
            .arg(root().join("deploy/helm/bosun"))
            .env("HOME", cp.scratch()),
    );
    let file = cp.scratch().join("chart.yaml");
    std::fs::write(&file, rendered).expect("chart.yaml");
    run_ok(
        cp.kubectl()
            .args(["apply", "-n", namespace, "-f"])
            .arg(&file),
    );
    let accounts = cp.get(&format!(
        "/api/v1/namespaces/{namespace}/serviceaccounts?labelSelector=app.kubernetes.io%2Fname%3Dbosun"
    ));
    let name = accounts.1["items"][0]["metadata"]["name"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| panic!("the chart's ServiceAccount: {}", accounts.1));
    everything_works_as(&cp, (namespace, &name), "bosun-modules");
}
