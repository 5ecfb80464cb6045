//! One Kubernetes client per target cluster, built from the target's kubeconfig (checked
//! as landscaper checks it: no exec, no files) and reused until the target's content
//! changes. The kubernetes-manifest and Helm types take their clients from here.

use std::collections::HashMap;
use std::sync::Mutex;

use bosun_deployer::status::DeployError;
use bosun_deployer::target::{ResolvedTarget, kubeconfig_of};

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
        let client = kube::Client::try_from(config).map_err(|e| {
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
