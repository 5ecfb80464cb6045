//! The shared watches and the informer against the sandbox API server, in-process: what
//! the lambda controllers and the deployer rely on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_kube::informer::{Event, Informer};
use bosun_kube::raw::RawApi;
use bosun_kube::watch::{Listener, key_of};
use bosun_kube::{KindResolver, WatchManager};
use kube::api::DeleteParams;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

/// Waits until `check` holds, failing with `what` at the deadline.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let until = tokio::time::Instant::now() + DEADLINE;
    while !check() {
        assert!(tokio::time::Instant::now() < until, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether the subscriber was told `line`.
fn saw(seen: &Mutex<Vec<String>>, line: &str) -> bool {
    seen.lock().expect("log").iter().any(|l| l == line)
}

fn config_map(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"},
           "data": {"k": value}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informer_sees_the_cluster_and_our_writes_before_their_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = bosun_sandbox::start(bosun_sandbox::SandboxConfig::loopback(
        dir.path().join("data"),
    ))
    .await
    .expect("sandbox");
    let config = kube::Config::new(sandbox.url.parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    let resolved = KindResolver::new(client.clone())
        .resolve(Some("v1"), "cm")
        .await
        .expect("ConfigMap resolves from its short name");
    let api = RawApi::new(client.clone(), &resolved.resource, Some("default"));
    api.create(&config_map("before", "1"))
        .await
        .expect("create before");

    let watches = WatchManager::new(client.clone());
    let informer: Arc<Informer> = Arc::new(Informer::default());
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    informer.subscribe(Box::new(move |e| {
        let line = match e {
            Event::Applied { old, new } => format!(
                "{} {} {}",
                if old.is_some() { "changed" } else { "new" },
                new["metadata"]["name"].as_str().unwrap_or_default(),
                new["data"]["k"].as_str().unwrap_or_default()
            ),
            Event::Deleted(o) => format!(
                "deleted {}",
                o["metadata"]["name"].as_str().unwrap_or_default()
            ),
        };
        log.lock().expect("log").push(line);
        true
    }));
    let listener: Arc<dyn Listener> = informer.clone();
    watches
        .listen(&resolved.resource, listener)
        .await
        .expect("the watch lists");
    assert!(
        informer.read().get(&key_of("default", "before")).is_some(),
        "an informer attached after the first list holds what was there"
    );

    // Our write is visible at once, and stays so until the watch brings it or later.
    let written = api.create(&config_map("ours", "1")).await.expect("create");
    informer
        .change()
        .remember(key_of("default", "ours"), &written);
    let held = informer.read().get(&key_of("default", "ours"));
    assert_eq!(held.map(|o| o["data"]["k"].clone()), Some(json!("1")));
    eventually("the watch event of our create", || saw(&seen, "new ours 1")).await;

    // A change made by someone else comes through the watch as a change.
    let mut other = written.clone();
    other["data"]["k"] = json!("2");
    api.replace("ours", &other).await.expect("replace");
    eventually("someone else's update", || saw(&seen, "changed ours 2")).await;

    // Two listeners of the same resource share one watch.
    let second: Arc<dyn Listener> = Arc::new(Informer::<()>::default());
    watches
        .listen(&resolved.resource, second)
        .await
        .expect("second listener");
    let running = watches.watches();
    assert_eq!(running.len(), 1, "{running:?}");
    assert_eq!(running[0].1, 2, "{running:?}");

    api.delete("ours", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the delete", || saw(&seen, "deleted ours")).await;
    assert!(informer.read().get(&key_of("default", "ours")).is_none());

    watches.stop_all();
    sandbox.shutdown().await.expect("shutdown");
}
