//! bosun in a pod: started with nothing but what a pod has (`KUBERNETES_SERVICE_HOST`,
//! `KUBERNETES_SERVICE_PORT` and the service account's token, CA and namespace files,
//! presented through `BOSUN_SERVICE_ACCOUNT_DIR`), against a sandbox serving HTTPS with a
//! CA of its own and requiring a bearer token. With the right token the sample modules of
//! `examples/` converge (Helm included, through the same service account); with a wrong
//! one bosun stops at once and says why.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::{self, Operator, Sandbox, run_ok};

const TOKEN: &str = "in-cluster-test-token";

/// A sandbox with TLS and a token, and the namespace bosun's service account lives in.
fn tls_sandbox() -> Sandbox {
    let sb = Sandbox::start_with(&["--tls", "--token", TOKEN]);
    let kubeconfig = std::fs::read_to_string(&sb.kubeconfig).expect("kubeconfig");
    assert!(
        kubeconfig.contains("server: https://127.0.0.1:"),
        "{kubeconfig}"
    );
    assert!(
        kubeconfig.contains("certificate-authority-data:"),
        "{kubeconfig}"
    );
    // kubectl trusts the CA from the kubeconfig and presents the token.
    run_ok(sb.kubectl().args(["create", "namespace", "bosun"]));
    sb
}

/// A service-account folder as a pod mounts it: `token`, `ca.crt` and `namespace`.
fn service_account(sb: &Sandbox, work: &Path, token: &str) -> PathBuf {
    let dir = work.join("serviceaccount");
    std::fs::create_dir_all(&dir).expect("service account dir");
    std::fs::write(dir.join("token"), token).expect("token");
    std::fs::copy(sb.data.join("ca.crt"), dir.join("ca.crt")).expect("ca.crt");
    std::fs::write(dir.join("namespace"), "bosun").expect("namespace");
    dir
}

/// bosun with only the in-cluster environment and the sample hooks and modules.
fn in_cluster_bosun(sb: &Sandbox, work: &Path, sa: &Path) -> Operator {
    let port = sb.addr().rsplit(':').next().expect("port").to_string();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = |p: PathBuf| p.display().to_string();
    let env = [
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_string()),
        ("KUBERNETES_SERVICE_PORT", port),
        ("BOSUN_SERVICE_ACCOUNT_DIR", path(sa.to_path_buf())),
        ("GLOBAL_HOOKS_DIR", path(root.join("examples/global-hooks"))),
        ("MODULES_DIR", path(root.join("examples/modules"))),
        (
            "HELM_LIB_PATH",
            path(common::tools_dir().join("helm/libhelm_c.so")),
        ),
        ("BOSUN_JOURNAL_DIR", path(work.join("journal"))),
        ("ADDON_OPERATOR_TMP_DIR", path(work.join("tmp"))),
        ("DEBUG_UNIX_SOCKET", path(work.join("debug.socket"))),
        ("ADDON_OPERATOR_LISTEN_ADDRESS", "127.0.0.1".to_string()),
        ("ADDON_OPERATOR_LISTEN_PORT", "0".to_string()),
        ("HOME", path(work.to_path_buf())),
        ("LOG_LEVEL", "info".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Operator::start_with_only(&env, work)
}

/// `kubectl get <what> -n bosun -o json`, or `None` while it does not exist.
fn get(sb: &Sandbox, what: &[&str]) -> Option<Value> {
    let out = sb
        .kubectl()
        .args(["get", "-n", "bosun", "-o", "json"])
        .args(what)
        .output()
        .expect("kubectl");
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

#[test]
fn with_only_the_in_cluster_environment_the_sample_modules_converge() {
    let sb = tls_sandbox();
    let work = tempfile::tempdir().expect("tempdir");
    let sa = service_account(&sb, work.path(), TOKEN);
    let op = in_cluster_bosun(&sb, work.path(), &sa);

    // The global hook's config value went through the ConfigMap into the greeter's chart,
    // and the beforeHelm hook's memory value too: hooks, values and Helm all ran.
    op.wait(
        "the greeter module's ConfigMap with the global hook's greeting",
        Duration::from_secs(120),
        || {
            get(&sb, &["configmap", "greeter"]).is_some_and(|cm| {
                cm["data"]["greeting"] == "hello from bosun"
                    && cm["data"]["setBy"] == "the beforeHelm hook"
            })
        },
    );
    op.wait(
        "the optional module's ConfigMap and the greeter Deployment",
        Duration::from_secs(60),
        || {
            get(&sb, &["configmap", "optional"]).is_some()
                && get(&sb, &["deployment", "greeter"]).is_some()
        },
    );
    // Helm's release record: Helm reached the TLS API server with the service account.
    let secrets = get(&sb, &["secrets", "-l", "owner=helm,name=greeter"]).expect("secrets");
    assert!(
        secrets["items"].as_array().is_some_and(|i| !i.is_empty()),
        "no Helm release of greeter: {secrets}"
    );
    // The namespace came from the service account's namespace file.
    let cm = get(&sb, &["configmap", "addon-operator"]).expect("the addon-operator ConfigMap");
    assert!(
        cm["data"]["global"]
            .as_str()
            .is_some_and(|g| g.contains("hello from bosun")),
        "{cm}"
    );
    let logs = op.logs();
    assert!(logs.contains("in-cluster Kubernetes client"), "{logs}");
    // The helper kubeconfig for Helm names files, never the token itself.
    let helm_kc =
        std::fs::read_to_string(work.path().join("tmp/helm-kubeconfig")).expect("helm kubeconfig");
    assert!(!helm_kc.contains(TOKEN), "{helm_kc}");
    assert!(helm_kc.contains("tokenFile:"), "{helm_kc}");
}

#[test]
fn a_refused_service_account_token_stops_the_start_with_a_clear_error() {
    let sb = tls_sandbox();
    let work = tempfile::tempdir().expect("tempdir");
    let sa = service_account(&sb, work.path(), "not-the-token");
    let mut op = in_cluster_bosun(&sb, work.path(), &sa);
    let exited = op.wait_exit(Duration::from_secs(60));
    let logs = op.logs();
    assert_eq!(exited, Some(false), "bosun did not exit non-zero:\n{logs}");
    let url = format!("https://{}", sb.addr());
    for needle in [
        url.as_str(),
        "401 Unauthorized",
        "refused the service-account token read from",
        &sa.join("token").display().to_string(),
        "the bearer token was refused",
    ] {
        assert!(logs.contains(needle), "missing {needle:?} in:\n{logs}");
    }
    assert!(!logs.contains("panicked"), "{logs}");
}

#[test]
fn a_token_file_ending_in_a_newline_is_named_as_unusable() {
    let sb = tls_sandbox();
    let work = tempfile::tempdir().expect("tempdir");
    let sa = service_account(&sb, work.path(), &format!("{TOKEN}\n"));
    let mut op = in_cluster_bosun(&sb, work.path(), &sa);
    let exited = op.wait_exit(Duration::from_secs(60));
    let logs = op.logs();
    assert_eq!(exited, Some(false), "bosun did not exit non-zero:\n{logs}");
    assert!(
        logs.contains("cannot use the service-account token read from"),
        "{logs}"
    );
    assert!(logs.contains("a trailing newline"), "{logs}");
}

#[test]
fn an_api_server_signed_by_another_ca_is_named_as_untrusted() {
    let sb = tls_sandbox();
    let other = Sandbox::start_with(&["--tls"]);
    let work = tempfile::tempdir().expect("tempdir");
    let sa = service_account(&sb, work.path(), TOKEN);
    std::fs::copy(other.data.join("ca.crt"), sa.join("ca.crt")).expect("the other CA");
    let mut op = in_cluster_bosun(&sb, work.path(), &sa);
    let exited = op.wait_exit(Duration::from_secs(60));
    let logs = op.logs();
    assert_eq!(exited, Some(false), "bosun did not exit non-zero:\n{logs}");
    assert!(
        logs.contains(&format!(
            "the API server https://{} is not trusted",
            sb.addr()
        )),
        "{logs}"
    );
    assert!(
        logs.contains(&sa.join("ca.crt").display().to_string()),
        "{logs}"
    );
}
