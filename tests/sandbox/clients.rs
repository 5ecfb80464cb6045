//! Clients written elsewhere against the sandbox: the Python `kubernetes` client resumes
//! a watch across a sandbox restart; kube-rs watcher + reflector stay consistent under
//! 1,000 concurrent writes and relist after a 410.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Sandbox, http};
use serde_json::json;

#[test]
fn python_client_resumes_watch_across_restart() {
    let mut sb = Sandbox::start();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/python_watch_resume.py"
    );
    let mut child = Command::new(common::python())
        .arg(script)
        .arg(&sb.kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (run scripts/setup.sh: the kubernetes package in .tools/venv)");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut last = String::new();
    for line in lines.by_ref() {
        last = line.expect("read");
        if last == "ready-for-restart" {
            sb.restart();
            writeln!(stdin, "restarted").expect("answer");
        }
        if last.starts_with("ok ") {
            break;
        }
    }
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        last,
        "ok 40 events",
        "python client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn kube_client(sb: &Sandbox) -> kube::Client {
    let config = kube::Config::new(sb.url.parse().expect("url"));
    kube::Client::try_from(config).expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reflector_stays_consistent_under_concurrent_writes() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, DeleteParams, PostParams};
    use kube::runtime::{WatchStreamExt, reflector, watcher};

    let sb = tokio::task::spawn_blocking(Sandbox::start)
        .await
        .expect("start");
    let client = kube_client(&sb);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector(
        writer,
        watcher(api.clone(), watcher::Config::default().labels("load=yes")),
    )
    .default_backoff()
    .applied_objects();
    let driver = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.expect("reflector ready");

    // 1,000 writes from 16 concurrent writers: 800 creates then 200 deletes.
    let mut tasks = Vec::new();
    for w in 0..16 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..800).step_by(16) {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("load-{i}"), "labels": {"load": "yes"}}, "data": {"i": i.to_string()}}))
                .expect("cm");
                api.create(&PostParams::default(), &cm).await.expect("create");
            }
        }));
    }
    for t in tasks.drain(..) {
        t.await.expect("writer");
    }
    for w in 0..8 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..200).step_by(8) {
                api.delete(&format!("load-{i}"), &DeleteParams::default())
                    .await
                    .expect("delete");
            }
        }));
    }
    for t in tasks {
        t.await.expect("deleter");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let names: std::collections::BTreeSet<String> = reader
            .state()
            .iter()
            .filter_map(|cm| cm.metadata.name.clone())
            .collect();
        let want: std::collections::BTreeSet<String> =
            (200..800).map(|i| format!("load-{i}")).collect();
        if names == want {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "reflector has {} objects, want 600",
            names.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    driver.abort();
    drop(sb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_resource_version_gets_410_and_the_watcher_relists() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use kube::runtime::watcher;

    let mut sb = tokio::task::spawn_blocking(|| Sandbox::start_with(&["--watch-history", "20"]))
        .await
        .expect("start");
    // Push the first resourceVersions out of the 20-change window.
    let addr = sb.addr().to_string();
    tokio::task::spawn_blocking(move || {
        for i in 0..40 {
            let body = json!({"metadata": {"name": format!("early-{i}")}}).to_string();
            http(
                &addr,
                "POST",
                "/api/v1/namespaces/default/configmaps",
                "application/json",
                &body,
            );
        }
    })
    .await
    .expect("writes");
    // A watch from a compacted resourceVersion answers one ERROR event carrying a 410 Status.
    let (code, raw) = common::http_raw(
        sb.addr(),
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=2&timeoutSeconds=1",
        "",
        b"",
    );
    let text = String::from_utf8_lossy(&raw).to_string();
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().unwrap_or_default()).expect("event");
    assert_eq!(
        (
            code,
            first["type"].as_str(),
            first["object"]["code"].as_i64()
        ),
        (200, Some("ERROR"), Some(410)),
        "{text}"
    );

    // kube-rs: a watcher whose resourceVersion is compacted while it reconnects relists.
    let api: Api<ConfigMap> = Api::namespaced(kube_client(&sb), "default");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(watcher(api.clone(), watcher::Config::default()).for_each(
        move |ev| {
            let _ = tx.send(ev.map_err(|e| e.to_string()));
            async {}
        },
    ));
    until_init_done(&mut rx).await;
    // While the watcher is connected, move the resourceVersion on with writes it does not
    // watch, then restart the server keeping only one change of history.
    let addr = sb.addr().to_string();
    let sb = tokio::task::spawn_blocking(move || {
        for i in 0..5 {
            let body = json!({"metadata": {"name": format!("late-{i}")}}).to_string();
            http(
                &addr,
                "POST",
                "/api/v1/namespaces/default/secrets",
                "application/json",
                &body,
            );
        }
        sb.stop();
        sb.args = vec!["--watch-history".into(), "1".into()];
        sb.restart();
        sb
    })
    .await
    .expect("restart");
    // The resumed watch gets 410 and the watcher lists again (a second InitDone).
    until_init_done(&mut rx).await;
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "after"}})).expect("cm"),
    )
    .await
    .expect("create after relist");
    let saw_after = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = rx.recv().await {
            if let Ok(watcher::Event::Apply(cm)) = ev
                && cm.metadata.name.as_deref() == Some("after")
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(saw_after, Ok(true));
    driver.abort();
    drop(sb);
}

async fn until_init_done(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<
        Result<kube::runtime::watcher::Event<k8s_openapi::api::core::v1::ConfigMap>, String>,
    >,
) {
    use kube::runtime::watcher::Event;
    let wait = async {
        loop {
            match rx.recv().await {
                Some(Ok(Event::InitDone)) => return,
                Some(_) => {}
                None => panic!("watcher ended"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("watcher (re)listed in time");
}
