//! The Kubernetes layer against the sandbox API server, in-process: the shared watches
//! and the informer the lambda controllers and the deployer rely on, and the Event
//! recorder every subsystem writes through.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_kube::events::Note;
use bosun_kube::informer::{Event, Informer};
use bosun_kube::raw::RawApi;
use bosun_kube::watch::{Listener, key_of};
use bosun_kube::{EventLimits, EventRecorder, KindResolver, WatchManager};
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

/// A sandbox API server in this process, and a client of it.
async fn sandbox(dir: &tempfile::TempDir) -> (bosun_sandbox::RunningSandbox, kube::Client) {
    let sandbox = bosun_sandbox::start(bosun_sandbox::SandboxConfig::loopback(
        dir.path().join("data"),
    ))
    .await
    .expect("sandbox");
    let config = kube::Config::new(sandbox.url.parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    (sandbox, client)
}

fn config_map(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"},
           "data": {"k": value}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informer_sees_the_cluster_and_our_writes_before_their_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (sandbox, client) = sandbox(&dir).await;
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

/// Fourteen identical notes on one object leave one Event whose count is fourteen, as
/// client-go's recorder does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorder_leaves_one_event_with_the_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (sandbox, client) = sandbox(&dir).await;
    let recorder = EventRecorder::new(client.clone(), "metacontroller", EventLimits::default());
    let parent = json!({"apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "t", "namespace": "default", "uid": "u-t"}});
    for _ in 0..14 {
        recorder
            .record(Note {
                object: &parent,
                type_: "Warning",
                reason: "SyncError",
                message: "the hook failed",
            })
            .await;
    }
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(client, "default");
    let list = events
        .list(&kube::api::ListParams::default())
        .await
        .expect("list");
    let ours: Vec<_> = list
        .items
        .iter()
        .filter(|e| e.involved_object.uid.as_deref() == Some("u-t"))
        .collect();
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(ours[0].count, Some(14));
    assert_eq!(ours[0].message.as_deref(), Some("the hook failed"));
    assert_eq!(
        ours[0].source.as_ref().and_then(|s| s.component.as_deref()),
        Some("metacontroller")
    );
    sandbox.shutdown().await.expect("shutdown");
}
