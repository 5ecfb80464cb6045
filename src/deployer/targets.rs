//! One Kubernetes client per target cluster, built from the target's kubeconfig (checked
//! as landscaper checks it: no exec, no files) and reused until the target's content
//! changes; and the manifest type's port on them (`KubeTargets`).

use std::collections::HashMap;
use std::sync::Mutex;

use bosun_deployer::manifest::{ResourceRef, TargetClusters};
use bosun_deployer::ports::BoxFut;
use bosun_deployer::status::DeployError;
use bosun_deployer::target::{ResolvedTarget, kubeconfig_of};

use bosun_kube::raw::RawApi;

/// A target's namespace and name.
type TargetId = (String, String);
/// A client and the digest of the content it was built from.
type Built = ([u8; 16], kube::Client);

/// Clients by target, each with the digest of the content it was built from.
#[derive(Default)]
pub struct TargetClients {
    clients: Mutex<HashMap<TargetId, Built>>,
    built: std::sync::atomic::AtomicUsize,
}

impl TargetClients {
    /// The client of `target`, built on first use and again when its content changed.
    pub async fn client(&self, target: &ResolvedTarget) -> Result<kube::Client, DeployError> {
        let id = (target.target.namespace.clone(), target.target.name.clone());
        let digest: [u8; 16] = {
            use md5::Digest as _;
            md5::Md5::digest(target.content.as_bytes()).into()
        };
        if let Some((d, c)) = self.lock().get(&id)
            && *d == digest
        {
            return Ok(c.clone());
        }
        let what = target.target.describe();
        let text = kubeconfig_of(target)
            .map_err(|e| DeployError::config("ValidateTarget", "InvalidTarget", e.to_string()))?;
        let kc = kube::config::Kubeconfig::from_yaml(&text).map_err(|e| {
            DeployError::config(
                "ValidateTarget",
                "InvalidTarget",
                format!("{what}: spec.config.kubeconfig: {e}"),
            )
        })?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| {
                    DeployError::config(
                        "ValidateTarget",
                        "InvalidTarget",
                        format!("{what}: spec.config.kubeconfig: {e}"),
                    )
                })?;
        // Measured like every client of bosun (kubernetes_client_request_* by host), and
        // not limited: the targets are other clusters, whose load is theirs to bound.
        let client =
            bosun_kube::measured_client(config, "target", bosun_kube::ClientLimits::UNLIMITED)
                .map_err(|e| {
                    DeployError::new(
                        "ValidateTarget",
                        "TargetClient",
                        format!("{what}: cannot build a client: {e}"),
                        &[],
                    )
                })?;
        self.built
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock().insert(id, (digest, client.clone()));
        Ok(client)
    }

    /// Clients built so far (a rebuild counts again).
    pub fn built(&self) -> usize {
        self.built.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Forgets the client of a target that is gone.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.lock()
            .remove(&(namespace.to_string(), name.to_string()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TargetId, Built>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The manifest type's view of target clusters: discovery, reads and writes through the
/// target's client.
pub struct KubeTargets {
    clients: std::sync::Arc<TargetClients>,
    /// What discovery found, by target (and the digest of its content) and type, for
    /// [`DISCOVERY_TTL`]: an apply of N objects costs N discoveries otherwise.
    discovered: Mutex<HashMap<DiscoveryKey, Discovered>>,
}

/// A target (namespace, name, content digest) and a type (apiVersion, kind).
type DiscoveryKey = (String, String, [u8; 16], String, String);
/// When the type was discovered, its resource, whether it is namespaced.
type Discovered = (std::time::Instant, kube::discovery::ApiResource, bool);

/// How long a discovered type is used before the target is asked again (a CRD removed or
/// changed in the target is seen after at most this long).
const DISCOVERY_TTL: std::time::Duration = std::time::Duration::from_secs(60);

impl KubeTargets {
    /// The port on `clients`.
    pub fn new(clients: std::sync::Arc<TargetClients>) -> KubeTargets {
        KubeTargets {
            clients,
            discovered: Mutex::default(),
        }
    }
}

fn gvk(api_version: &str, kind: &str) -> kube::api::GroupVersionKind {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    kube::api::GroupVersionKind::gvk(group, version, kind)
}

fn target_error(target: &ResolvedTarget, what: &str, e: kube::Error) -> DeployError {
    use bosun_deployer::item::ErrorCode;
    let message = format!("{}: {what}: {e}", target.target.describe());
    let codes: &[ErrorCode] = match &e {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => &[ErrorCode::Unauthorized],
        kube::Error::Api(s) if s.code == 422 || s.code == 400 => &[ErrorCode::ConfigurationProblem],
        _ => &[],
    };
    DeployError::new("Reconcile", "TargetCluster", message, codes)
}

impl KubeTargets {
    /// The type's resource and scope in `target`, from the cache or discovery.
    async fn discover(
        &self,
        target: &ResolvedTarget,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<(kube::discovery::ApiResource, bool), DeployError> {
        let key: DiscoveryKey = (
            target.target.namespace.clone(),
            target.target.name.clone(),
            {
                use md5::Digest as _;
                md5::Md5::digest(target.content.as_bytes()).into()
            },
            api_version.to_string(),
            kind.to_string(),
        );
        if let Some((at, ar, namespaced)) = self
            .discovered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            && at.elapsed() < DISCOVERY_TTL
        {
            return Ok((ar.clone(), *namespaced));
        }
        let (ar, caps) = kube::discovery::pinned_kind(client, &gvk(api_version, kind))
            .await
            .map_err(|e| target_error(target, &format!("discovery of {api_version} {kind}"), e))?;
        let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
        self.discovered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (std::time::Instant::now(), ar.clone(), namespaced));
        Ok((ar, namespaced))
    }

    async fn api(
        &self,
        target: &ResolvedTarget,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<(RawApi, bool), DeployError> {
        let client = self.clients.client(target).await?;
        let (ar, namespaced) = self.discover(target, &client, api_version, kind).await?;
        let api = RawApi::new(client, &ar, namespaced.then_some(namespace));
        Ok((api, namespaced))
    }
}

impl KubeTargets {
    /// The API of `object`'s type in `target`, and the object's reference, once its
    /// metadata is checked: what every write starts with.
    async fn writable(
        &self,
        target: &ResolvedTarget,
        object: &serde_json::Value,
    ) -> Result<(RawApi, ResourceRef), DeployError> {
        let r = ResourceRef::of(object);
        check_metadata(object, &r)?;
        let (api, _) = self
            .api(target, &r.api_version, &r.kind, &r.namespace)
            .await?;
        Ok((api, r))
    }
}

/// Refuses an object whose `metadata` is not Kubernetes object metadata (labels that are
/// not strings, …) before the target sees it, naming the object.
fn check_metadata(object: &serde_json::Value, r: &ResourceRef) -> Result<(), DeployError> {
    use serde::Deserialize as _;
    kube::api::ObjectMeta::deserialize(&object["metadata"])
        .map(|_| ())
        .map_err(|e| {
            DeployError::config(
                "Reconcile",
                "InvalidManifest",
                format!("{r}: metadata: not Kubernetes object metadata: {e}"),
            )
        })
}

impl TargetClusters for KubeTargets {
    fn namespaced<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        api_version: &'a str,
        kind: &'a str,
    ) -> BoxFut<'a, Result<bool, DeployError>> {
        Box::pin(async move { Ok(self.api(target, api_version, kind, "default").await?.1) })
    }

    fn get<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        r: &'a ResourceRef,
    ) -> BoxFut<'a, Result<Option<serde_json::Value>, DeployError>> {
        Box::pin(async move {
            let (api, _) = self
                .api(target, &r.api_version, &r.kind, &r.namespace)
                .await?;
            api.get_opt(&r.name)
                .await
                .map_err(|e| target_error(target, &format!("reading {r}"), e))
        })
    }

    fn create<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        object: serde_json::Value,
    ) -> BoxFut<'a, Result<serde_json::Value, DeployError>> {
        Box::pin(async move {
            let (api, r) = self.writable(target, &object).await?;
            api.create(&object)
                .await
                .map_err(|e| target_error(target, &format!("creating {r}"), e))
        })
    }

    fn create_if_absent<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        object: serde_json::Value,
    ) -> BoxFut<'a, Result<Option<serde_json::Value>, DeployError>> {
        Box::pin(async move {
            let (api, r) = self.writable(target, &object).await?;
            match api.create(&object).await {
                Ok(o) => Ok(Some(o)),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
                Err(e) => Err(target_error(target, &format!("creating {r}"), e)),
            }
        })
    }

    fn replace<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        object: serde_json::Value,
    ) -> BoxFut<'a, Result<serde_json::Value, DeployError>> {
        Box::pin(async move {
            let (api, r) = self.writable(target, &object).await?;
            api.replace(&r.name, &object)
                .await
                .map_err(|e| target_error(target, &format!("updating {r}"), e))
        })
    }

    fn list<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        api_version: &'a str,
        kind: &'a str,
        labels: &'a str,
    ) -> BoxFut<'a, Result<Vec<serde_json::Value>, DeployError>> {
        Box::pin(async move {
            let client = self.clients.client(target).await?;
            let (ar, _) = self.discover(target, &client, api_version, kind).await?;
            RawApi::new(client, &ar, None)
                .list(&kube::api::ListParams::default().labels(labels))
                .await
                .map_err(|e| {
                    target_error(target, &format!("listing {api_version} {kind} {labels}"), e)
                })
        })
    }

    fn delete<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        r: &'a ResourceRef,
    ) -> BoxFut<'a, Result<(), DeployError>> {
        Box::pin(async move {
            let (api, _) = self
                .api(target, &r.api_version, &r.kind, &r.namespace)
                .await?;
            match api
                .delete(&r.name, &kube::api::DeleteParams::background())
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(target_error(target, &format!("deleting {r}"), e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use bosun_deployer::target::{Target, resolve};
    use serde_json::json;

    use super::*;

    fn kubeconfig(server: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: abc\n"
        )
    }

    fn target(server: &str, user: &str) -> ResolvedTarget {
        let kc = kubeconfig(server).replace("    token: abc\n", user);
        let t = Target::parse(&json!({
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": {"kubeconfig": kc}},
        }))
        .expect("target");
        resolve(&t, None).expect("resolved")
    }

    #[tokio::test]
    async fn one_client_per_target_rebuilt_when_the_target_changes() {
        let clients = TargetClients::default();
        clients
            .client(&target("https://127.0.0.1:1", "    token: abc\n"))
            .await
            .expect("first");
        clients
            .client(&target("https://127.0.0.1:1", "    token: abc\n"))
            .await
            .expect("again");
        assert_eq!(clients.built(), 1, "an unchanged target reuses its client");
        clients
            .client(&target("https://127.0.0.1:2", "    token: abc\n"))
            .await
            .expect("changed");
        assert_eq!(clients.built(), 2, "a changed target gets a new client");
        let Err(e) = clients
            .client(&target(
                "https://127.0.0.1:2",
                "    exec:\n      command: aws\n",
            ))
            .await
        else {
            panic!("an exec kubeconfig is refused");
        };
        assert!(
            e.is_unrecoverable() && e.message.contains("exec is not allowed"),
            "{e}"
        );
        assert_eq!(clients.built(), 2);
    }
}
