//! The sandbox: bosun's own single-process Kubernetes API server, persisted in sled.

pub mod apply;
pub mod openapi;
pub mod resources;
pub mod selector;
pub mod strategic;

use std::net::SocketAddr;
use std::path::PathBuf;

/// How to start the sandbox.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// Storage folder.
    pub data: PathBuf,
    /// Kubeconfig to write, if any.
    pub kubeconfig: Option<PathBuf>,
    /// Optional static bearer token.
    pub token: Option<String>,
}

/// Serves until interrupted.
pub async fn serve_forever(_config: SandboxConfig) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
