//! Real Helm (the Helm library, libhelm_c.so) installing, upgrading and uninstalling a
//! chart in the sandbox over HTTP, with Helm's own release storage.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use bosun::helm::{ClusterOptions, HelmError, HelmLibrary, InstallOptions};
use common::Sandbox;
use serde_json::{Value, json};

fn chart(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/charts")
        .join(name)
}

fn library() -> HelmLibrary {
    HelmLibrary::load(None).unwrap_or_else(|e| panic!("{e}"))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_upgrade_uninstall_through_the_library() {
    let sb = Sandbox::start();
    let lib = library();
    let client = lib
        .client(&ClusterOptions {
            kubeconfig: Some(sb.kubeconfig.clone()),
            context: None,
            namespace: "default".into(),
            ..Default::default()
        })
        .expect("helm config");

    let started = Instant::now();
    let rel = client
        .install(
            &chart("demo"),
            "demo",
            &json!({}),
            &InstallOptions::default(),
        )
        .await
        .expect("install");
    eprintln!("install took {:?}", started.elapsed());
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
    let rel = client
        .upgrade_install(
            &chart("demo"),
            "demo",
            &json!({"color": "green"}),
            &InstallOptions {
                labels,
                ..InstallOptions::default()
            },
        )
        .await
        .expect("upgrade");
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
    let history = client.history("demo").await.expect("history");
    assert_eq!(
        history.iter().map(|r| r.revision()).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(
        client
            .list_all()
            .await
            .expect("list")
            .iter()
            .map(|r| r.name().to_string())
            .collect::<Vec<_>>(),
        ["demo"]
    );

    client.uninstall("demo").await.expect("uninstall");
    let (code, _) = sb.get("/api/v1/namespaces/default/configmaps/demo-settings");
    assert_eq!(code, 404);
    assert!(release_secrets(&sb, "demo").is_empty());
    assert!(matches!(
        client.status("demo").await,
        Err(HelmError::NotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_offline_and_report_template_errors() {
    let lib = library();
    let started = Instant::now();
    let out = lib
        .render(&chart("demo"), &json!({"color": "red"}), "r", "ns", false)
        .await
        .expect("render");
    eprintln!("render took {:?}", started.elapsed());
    let manifest = out
        .get("demo/templates/configmap.yaml")
        .cloned()
        .unwrap_or_default();
    assert!(
        manifest.contains("name: r-settings") && manifest.contains("color: \"red\""),
        "{out:?}"
    );
    let err = lib
        .render(&chart("broken"), &json!({}), "r", "ns", false)
        .await
        .expect_err("broken chart");
    assert!(
        err.to_string().contains("bad.yaml"),
        "the error names the template: {err}"
    );
    let err = lib
        .render(&chart("missing"), &json!({}), "r", "ns", false)
        .await
        .expect_err("missing chart");
    assert!(err.to_string().contains("missing"), "{err}");
}
