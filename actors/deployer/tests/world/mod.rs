//! The world the fault, target and lifecycle scenarios run in: the items' cluster with one
//! Target (`ns/cluster`), the target clusters, Helm, and the deployer running the mock,
//! kubernetes-manifest and helm types on them, each port a fake a test can make fail.
//! Every wait polls a condition with a deadline (on tokio's clock: paused time skips the
//! deployer's 5 s retries).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use bosun_deployer::controller::{Deployer, Settings};
use bosun_deployer::events::DeployerEvent;
use bosun_deployer::fakes::{MemoryCluster, MemoryHelm, MemoryTargets, TargetOp, TargetWrite};
use bosun_deployer::helm::{HELM_TYPE, HelmType};
use bosun_deployer::item::{DeployerInfo, ItemKey, Phase};
use bosun_deployer::manifest::{MANIFEST_TYPE, ManifestType};
use bosun_deployer::mock::Mock;
use bosun_deployer::ports::{DeployerType, EventNote};
use bosun_runtime::ports::MemoryJournal;
use serde_json::{Value, json};

/// How long a scenario waits for a condition before it fails (tokio's clock).
pub const WAIT: Duration = Duration::from_secs(60);
pub const MANIFEST_API: &str = "manifest.deployer.landscaper.gardener.cloud/v1alpha2";
pub const HELM_API: &str = "helm.deployer.landscaper.gardener.cloud/v1alpha1";
pub const MOCK_TYPE: &str = "landscaper.gardener.cloud/mock";
pub const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: abc\n";

/// The items' cluster, the target clusters, Helm and the deployer on them.
pub struct World {
    pub cluster: MemoryCluster,
    pub journal: MemoryJournal<DeployerEvent>,
    pub targets: MemoryTargets,
    pub helm: MemoryHelm,
    pub deployer: Deployer,
}

/// The Target every item deploys to unless it names another.
pub fn target() -> ItemKey {
    key("cluster")
}

pub fn key(name: &str) -> ItemKey {
    ItemKey {
        namespace: "ns".into(),
        name: name.into(),
    }
}

/// A kubernetes-cluster Target `namespace/name` with an inline kubeconfig.
pub fn cluster_target(namespace: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": {"kubeconfig": KUBECONFIG}},
    })
}

/// The settings of the deployer the scenarios start.
pub fn settings() -> Settings {
    Settings {
        workers: 2,
        deployer: DeployerInfo {
            identity: "test".into(),
            name: "bosun".into(),
            version: "0".into(),
        },
        target_selectors: Vec::new(),
        timeouts: Default::default(),
        lock_holder: None,
        contract: Default::default(),
        gate: Default::default(),
    }
}

impl World {
    /// The world with the deployer started with [`settings`].
    pub async fn start() -> World {
        World::with(settings()).await
    }

    /// The world with the deployer started with `settings`.
    pub async fn with(settings: Settings) -> World {
        let cluster = MemoryCluster::default();
        cluster.put_target(cluster_target("ns", "cluster", json!({})));
        World::on(cluster, settings).await
    }

    /// The deployer started on `cluster` as it is.
    pub async fn on(cluster: MemoryCluster, settings: Settings) -> World {
        let journal = MemoryJournal::default();
        let targets = MemoryTargets::default();
        let helm = MemoryHelm::applying_to(&targets);
        let manifests = || ManifestType {
            targets: Arc::new(targets.clone()),
        };
        let types: Vec<Arc<dyn DeployerType>> = vec![
            Arc::new(Mock),
            Arc::new(manifests()),
            Arc::new(HelmType {
                helm: Arc::new(helm.clone()),
                manifests: manifests(),
                registry_configs: Arc::from([]),
            }),
        ];
        let deployer = Deployer::start(
            Arc::new(cluster.clone()),
            Arc::new(journal.clone()),
            types,
            settings,
        )
        .await
        .expect("the deployer starts on the memory cluster");
        World {
            cluster,
            journal,
            targets,
            helm,
            deployer,
        }
    }

    pub fn item(&self, name: &str) -> Value {
        self.cluster
            .item(&key(name))
            .unwrap_or_else(|| panic!("item {name} is in the cluster"))
    }

    pub fn phase(&self, name: &str) -> Option<Phase> {
        self.cluster
            .item(&key(name))
            .and_then(|o| o["status"]["phase"].as_str().and_then(Phase::parse))
    }

    /// The item's `status.lastError`.
    pub fn last_error(&self, name: &str) -> Value {
        self.item(name)["status"]["lastError"].clone()
    }

    /// Waits until the item is in `phase` and returns it.
    pub async fn in_phase(&self, name: &str, phase: Phase) -> Value {
        until(&format!("{name} {phase:?}"), || {
            self.phase(name) == Some(phase)
        })
        .await;
        self.item(name)
    }

    /// Waits until the item has observed `generation` and ended in `phase`.
    pub async fn settled(&self, name: &str, generation: i64, phase: Phase) -> Value {
        until(
            &format!("{name} {phase:?} at generation {generation}"),
            || {
                self.cluster.item(&key(name)).is_some_and(|o| {
                    o["status"]["observedGeneration"] == generation
                        && o["status"]["phase"].as_str().and_then(Phase::parse) == Some(phase)
                })
            },
        )
        .await;
        self.item(name)
    }

    /// Waits until the item is in `phase` with a lastError whose message has `part`.
    pub async fn waiting_with(&self, name: &str, phase: Phase, part: &str) -> Value {
        until(
            &format!("{name} {phase:?} with an error saying {part:?}"),
            || {
                self.cluster.item(&key(name)).is_some_and(|o| {
                    o["status"]["phase"].as_str().and_then(Phase::parse) == Some(phase)
                        && o["status"]["lastError"]["message"]
                            .as_str()
                            .is_some_and(|m| m.contains(part))
                })
            },
        )
        .await;
        self.item(name)
    }

    /// Waits until the item is gone from the cluster (its finalizer removed).
    pub async fn gone(&self, name: &str) {
        until(&format!("{name} gone"), || {
            self.cluster.item(&key(name)).is_none()
        })
        .await;
    }

    /// Changes the item as a user would (read, edit, write back).
    pub fn edit(&self, name: &str, edit: impl FnOnce(&mut Value)) {
        let mut o = self.item(name);
        edit(&mut o);
        self.cluster.put_item(o);
    }

    /// Sets the item's `landscaper.gardener.cloud/operation` annotation.
    pub fn operate(&self, name: &str, operation: &str) {
        self.edit(name, |o| {
            o["metadata"]["annotations"]["landscaper.gardener.cloud/operation"] = json!(operation);
        });
    }

    /// The ConfigMap `namespace/name` in the default Target's cluster.
    pub fn config_map(&self, namespace: &str, name: &str) -> Option<Value> {
        self.targets.object(&target(), "ConfigMap", namespace, name)
    }

    /// The deployer's writes of `write` to the targets, as `kind namespace/name`.
    pub fn writes(&self, write: TargetWrite) -> Vec<String> {
        self.targets
            .ops()
            .into_iter()
            .filter(|TargetOp { write: w, .. }| *w == write)
            .map(|op| op.resource.to_string())
            .collect()
    }

    /// The phases the journal recorded for the item, in order.
    pub fn journaled_phases(&self, name: &str) -> Vec<Phase> {
        let id = format!("deployitem/ns/{name}");
        self.journal
            .events()
            .into_iter()
            .filter_map(|e| match e {
                DeployerEvent::DeployItemPhase { item, to, .. } if item == id => Some(to),
                _ => None,
            })
            .collect()
    }

    /// The errors the journal recorded for the item: (reason, message, retried).
    pub fn journaled_errors(&self, name: &str) -> Vec<(String, String, bool)> {
        let id = format!("deployitem/ns/{name}");
        self.journal
            .events()
            .into_iter()
            .filter_map(|e| match e {
                DeployerEvent::DeployItemError {
                    item,
                    reason,
                    message,
                    retry_in_ms,
                    ..
                } if item == id => Some((reason, message, retry_in_ms.is_some())),
                _ => None,
            })
            .collect()
    }

    /// The Events recorded on the item.
    pub fn events_of(&self, name: &str) -> Vec<EventNote> {
        self.cluster
            .events()
            .into_iter()
            .filter(|(k, _)| k.name == name)
            .map(|(_, e)| e)
            .collect()
    }

    /// Whether a Warning Event with `reason` was recorded on the item.
    pub fn warned(&self, name: &str, reason: &str) -> bool {
        self.events_of(name)
            .iter()
            .any(|e| e.type_ == "Warning" && e.reason == reason)
    }

    /// Waits until the deployer has nothing ready or in flight (retries may be scheduled).
    pub async fn idle(&self) {
        until("the deployer idle", || {
            let q = self.deployer.view().queue();
            q.waiting.is_empty() && q.in_flight.is_empty()
        })
        .await;
    }

    /// The error of the item's last reconcile as the debug view shows it.
    pub fn last_run_error(&self, name: &str) -> Option<String> {
        self.deployer
            .view()
            .last_runs()
            .get(&key(name))
            .and_then(|r| r.error.clone())
    }
}

/// Polls `cond` every few milliseconds until it holds, failing after [`WAIT`].
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub fn config_map(namespace: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data})
}

/// A kubernetes-manifest item on the Target `target` with `manifests`, each managed.
pub fn manifest_item_on(name: &str, target: &str, manifests: &[Value]) -> Value {
    let list: Vec<Value> = manifests
        .iter()
        .map(|m| json!({"policy": "manage", "manifest": m}))
        .collect();
    json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "type": MANIFEST_TYPE,
            "target": {"name": target},
            "config": {"apiVersion": MANIFEST_API, "kind": "ProviderConfiguration", "manifests": list},
        },
    })
}

/// Whether the `message` of `error` (a status's `lastError`) holds every one of `parts`.
pub fn message_has(error: &Value, parts: &[&str]) -> bool {
    error["message"]
        .as_str()
        .is_some_and(|m| parts.iter().all(|p| m.contains(p)))
}

/// A kubernetes-manifest item on the default Target.
pub fn manifest_item(name: &str, manifests: &[Value]) -> Value {
    manifest_item_on(name, "cluster", manifests)
}

/// A helm item on the Target: release `web` in `apps`, its chart from `chart`.
pub fn helm_item(name: &str, chart: Value, extra_config: Value) -> Value {
    let mut config = json!({
        "apiVersion": HELM_API, "kind": "ProviderConfiguration",
        "name": "web", "namespace": "apps", "createNamespace": true,
        "chart": chart,
        "values": {"replicas": 1},
    });
    if let (Some(c), Value::Object(extra)) = (config.as_object_mut(), extra_config) {
        c.extend(extra);
    }
    json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"type": HELM_TYPE, "target": {"name": "cluster"}, "config": config},
    })
}

/// An inline chart.
pub fn inline_chart() -> Value {
    json!({"archive": {"raw": "H4sI"}})
}

/// A mock item with `config` added to its ProviderConfiguration and `spec` to its spec.
pub fn mock_item(name: &str, config: Value, spec: Value) -> Value {
    let mut c = json!({"apiVersion": "mock.deployer.landscaper.gardener.cloud/v1alpha1", "kind": "ProviderConfiguration"});
    if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), config) {
        c.extend(extra);
    }
    let mut s = json!({"type": MOCK_TYPE, "config": c});
    if let (Some(s), Value::Object(extra)) = (s.as_object_mut(), spec) {
        s.extend(extra);
    }
    json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": s,
    })
}
