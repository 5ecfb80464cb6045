//! Real Helm through both engines — the library (libhelm_c.so, in-process) and the `helm`
//! binary (one process per call) — installing, upgrading and uninstalling a chart in the
//! sandbox over HTTP with Helm's own release storage, rendering offline, and failing with
//! errors that say what failed and whether another attempt may succeed. Every case runs
//! under both engines (`library::…`, `cli::…`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{HelmEngine as Engine, Sandbox, wait_for};
use bosun::helm::{ClusterOptions, HelmEngine, HelmError, InstallOptions, ReleaseClient};
use serde_json::{Value, json};

fn chart(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/charts")
        .join(name)
}

fn release_secrets(sb: &Sandbox, name: &str) -> Vec<Value> {
    let (code, list) = sb.get(&format!(
        "/api/v1/namespaces/default/secrets?labelSelector=owner%3Dhelm,name%3D{name}"
    ));
    assert_eq!(code, 200, "{list}");
    let mut items = list["items"].as_array().cloned().unwrap_or_default();
    items.sort_by_key(|s| {
        s["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    items
}

fn client(engine: &HelmEngine, sb: &Sandbox) -> ReleaseClient {
    engine
        .client(&ClusterOptions {
            kubeconfig: Some(sb.kubeconfig.clone()),
            context: None,
            namespace: "default".into(),
            ..Default::default()
        })
        .expect("helm client")
}

/// Runs each case under both engines.
macro_rules! for_each_engine {
    ($($case:ident),* $(,)?) => {
        mod library {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Engine::Library).await
                }
            )*
        }
        mod cli {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Engine::Cli).await
                }
            )*
        }
    };
}

for_each_engine!(
    install_upgrade_uninstall,
    render_offline_and_report_template_errors,
    errors_name_the_release_and_say_whether_to_retry,
);

async fn install_upgrade_uninstall(which: Engine) {
    let sb = Sandbox::start();
    let engine = which.open().await;
    let client = client(&engine, &sb);

    let started = Instant::now();
    let rel = client
        .deploy(
            bosun::helm::Action::Install,
            &chart("demo"),
            "demo",
            &json!({}),
            &InstallOptions::default(),
        )
        .await
        .expect("install");
    eprintln!("{which:?}: install took {:?}", started.elapsed());
    assert_eq!(
        (rel.revision(), rel.status().as_str()),
        (1, "deployed"),
        "{:?}",
        rel.0
    );
    let (code, cm) = sb.get("/api/v1/namespaces/default/configmaps/demo-settings");
    assert_eq!(code, 200, "{cm}");
    assert_eq!(cm["data"]["color"], "blue");
    let secrets = release_secrets(&sb, "demo");
    assert_eq!(secrets.len(), 1);
    let s = &secrets[0];
    assert_eq!(s["metadata"]["name"], "sh.helm.release.v1.demo.v1");
    assert_eq!(s["type"], "helm.sh/release.v1");
    for (k, v) in [
        ("owner", "helm"),
        ("name", "demo"),
        ("status", "deployed"),
        ("version", "1"),
    ] {
        assert_eq!(
            s["metadata"]["labels"][k], v,
            "label {k}: {}",
            s["metadata"]
        );
    }

    let labels = [("moduleChecksum".to_string(), "abc123".to_string())]
        .into_iter()
        .collect();
    let options = InstallOptions {
        labels,
        timeout_seconds: Some(60),
        max_history: Some(2),
        force_conflicts: true,
        take_ownership: true,
        skip_crds: true,
        ..Default::default()
    };
    let started = Instant::now();
    let rel = client
        .deploy(
            bosun::helm::Action::UpgradeInstall,
            &chart("demo"),
            "demo",
            &json!({"color": "green"}),
            &options,
        )
        .await
        .expect("upgrade");
    eprintln!("{which:?}: upgrade took {:?}", started.elapsed());
    assert_eq!((rel.revision(), rel.status().as_str()), (2, "deployed"));
    let (_, cm) = sb.get("/api/v1/namespaces/default/configmaps/demo-settings");
    assert_eq!(cm["data"]["color"], "green");
    let secrets = release_secrets(&sb, "demo");
    let states: Vec<(String, String)> = secrets
        .iter()
        .map(|s| {
            (
                s["metadata"]["labels"]["version"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
                s["metadata"]["labels"]["status"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("1".to_string(), "superseded".to_string()),
            ("2".to_string(), "deployed".to_string())
        ]
    );
    assert_eq!(
        secrets[1]["metadata"]["labels"]["moduleChecksum"], "abc123",
        "release labels are stored"
    );
    let status = client.status("demo").await.expect("status");
    assert_eq!(
        (status.revision(), status.status().as_str()),
        (2, "deployed")
    );
    // A third revision: with a history of two, the first is gone.
    client
        .deploy(
            bosun::helm::Action::Upgrade,
            &chart("demo"),
            "demo",
            &json!({"color": "red"}),
            &options,
        )
        .await
        .expect("upgrade again");
    let history = client.history("demo").await.expect("history");
    assert_eq!(
        history.iter().map(|r| r.revision()).collect::<Vec<_>>(),
        [2, 3]
    );
    let all = client.list_all().await.expect("list");
    assert_eq!(
        all.iter()
            .map(|r| (r.name().to_string(), r.revision()))
            .collect::<Vec<_>>(),
        [("demo".to_string(), 3)]
    );

    // With Helm's wait (the watcher): the release's objects are gone when it returns.
    client
        .uninstall("demo", true, Some(60))
        .await
        .expect("uninstall");
    let (code, _) = sb.get("/api/v1/namespaces/default/configmaps/demo-settings");
    assert_eq!(code, 404);
    assert!(release_secrets(&sb, "demo").is_empty());
    assert!(matches!(
        client.status("demo").await,
        Err(HelmError::NotFound(_))
    ));
    assert!(matches!(
        client.uninstall("demo", false, Some(60)).await,
        Err(HelmError::NotFound(_))
    ));
}

async fn render_offline_and_report_template_errors(which: Engine) {
    let engine = which.open().await;
    let started = Instant::now();
    let out = engine
        .render(&chart("demo"), &json!({"color": "red"}), "r", "ns", false)
        .await
        .expect("render");
    eprintln!("{which:?}: render took {:?}", started.elapsed());
    let manifest = out
        .get("demo/templates/configmap.yaml")
        .cloned()
        .unwrap_or_default();
    assert!(
        manifest.contains("name: r-settings") && manifest.contains("color: \"red\""),
        "{out:?}"
    );
    let err = engine
        .render(&chart("broken"), &json!({}), "r", "ns", false)
        .await
        .expect_err("broken chart");
    assert!(
        err.to_string().contains("bad.yaml"),
        "the error names the template: {err}"
    );
    assert!(!err.is_transient(), "{err}");
    let err = engine
        .render(&chart("missing"), &json!({}), "r", "ns", false)
        .await
        .expect_err("missing chart");
    assert!(err.to_string().contains("missing"), "{err}");
}

async fn errors_name_the_release_and_say_whether_to_retry(which: Engine) {
    let mut sb = Sandbox::start();
    let engine = which.open().await;
    let client = client(&engine, &sb);
    let dir = tempfile::tempdir().expect("tempdir");
    let rejected = dir.path().join("rejected");
    std::fs::create_dir_all(rejected.join("templates")).expect("chart dir");
    std::fs::write(
        rejected.join("Chart.yaml"),
        "apiVersion: v2\nname: rejected\nversion: 0.1.0\n",
    )
    .expect("Chart.yaml");
    std::fs::write(
        rejected.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n",
    )
    .expect("template");
    let err = client
        .deploy(
            bosun::helm::Action::Install,
            &rejected,
            "rejected",
            &json!({}),
            &InstallOptions::default(),
        )
        .await
        .expect_err("the API server refuses the name");
    let text = err.to_string();
    assert!(text.contains("Bad_Name"), "{text}");
    assert!(
        !err.is_transient(),
        "a rejected manifest fails every time: {text}"
    );
    if which == Engine::Cli {
        assert!(
            matches!(&err, HelmError::Command { release, command, .. }
                if release == "rejected" && command.starts_with("helm install rejected ")),
            "{err:?}"
        );
        assert!(
            text.contains("release rejected") && text.contains("helm install"),
            "{text}"
        );
    }
    // The API server gone: another attempt may succeed.
    sb.kill9();
    let err = client.status("demo").await.expect_err("no API server");
    assert!(err.is_transient(), "{err:?}");
    if which == Engine::Cli {
        assert!(err.to_string().contains("release demo"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_engines_render_a_plain_chart_alike() {
    // Templates that render YAML documents only (no NOTES.txt, none rendering empty): the
    // same files, so the same checksum, and switching engines upgrades nothing.
    let (library, cli) = (Engine::Library.open().await, Engine::Cli.open().await);
    let echo =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/modules/lifecycle/010-echo");
    let values = json!({"echo": {"replicas": 2, "message": "hi"}, "global": {"param1": 7}});
    for (chart, values) in [(chart("demo"), json!({"color": "red"})), (echo, values)] {
        let a = library
            .render(&chart, &values, "r", "ns", true)
            .await
            .expect("library render");
        let b = cli
            .render(&chart, &values, "r", "ns", true)
            .await
            .expect("cli render");
        assert_eq!(a, b, "{}", chart.display());
        assert_eq!(
            bosun::addon::releases::rendered_checksum(&a),
            bosun::addon::releases::rendered_checksum(&b)
        );
    }
}

/// `helm` processes whose command line mentions `needle`.
fn helm_processes(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if line.contains("helm") && line.contains(needle) && !line.contains("cargo") {
            found.push(line);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_cli_call_kills_helm() {
    let sb = Sandbox::start();
    let engine = Engine::Cli.open().await;
    let client = client(&engine, &sb);
    // A pre-install hook Job: nothing runs Jobs in the sandbox, so Helm waits for it until
    // its --timeout.
    let dir = tempfile::tempdir().expect("tempdir");
    let waiting = dir.path().join("waiting");
    std::fs::create_dir_all(waiting.join("templates")).expect("chart dir");
    std::fs::write(
        waiting.join("Chart.yaml"),
        "apiVersion: v2\nname: waiting\nversion: 0.1.0\n",
    )
    .expect("Chart.yaml");
    std::fs::write(
        waiting.join("templates/job.yaml"),
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: waits-forever\n  annotations:\n    helm.sh/hook: pre-install\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: c\n          image: busybox\n",
    )
    .expect("template");
    let release = format!("waiting-{}", std::process::id());
    let call = {
        let (client, waiting, release) = (client.clone(), waiting.clone(), release.clone());
        tokio::spawn(async move {
            client
                .deploy(
                    bosun::helm::Action::Install,
                    &waiting,
                    &release,
                    &json!({}),
                    &InstallOptions {
                        timeout_seconds: Some(600),
                        ..Default::default()
                    },
                )
                .await
        })
    };
    let job = "/apis/batch/v1/namespaces/default/jobs/waits-forever";
    let sb_get = |path: &str| sb.get(path).0;
    tokio::task::block_in_place(|| {
        wait_for(
            "helm creating the hook Job",
            Duration::from_secs(120),
            || sb_get(job) == 200,
        )
    });
    assert!(!helm_processes(&release).is_empty(), "helm is running");
    call.abort();
    let _ = call.await;
    tokio::task::block_in_place(|| {
        wait_for(
            "the helm process gone after the call was dropped",
            Duration::from_secs(30),
            || helm_processes(&release).is_empty(),
        )
    });
}
