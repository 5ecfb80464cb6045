//! The one HTTP(S) client builder of the binary, shared by every subsystem's adapters: the
//! lambda controllers' webhooks and the deployer's chart downloads (repositories and OCI
//! registries). TLS through rustls with ring (no aws-lc), HTTP/1.1, https and plain http
//! alike; the system's CA certificates read once per holder, off the async threads.
//!
//! ```text
//!   SystemRoots::get ─┐
//!   caBundle / customCAData ─► tls_config(roots, client cert?) ─► https_connector(tls, tcp)
//!                                                                  └─► hyper Client
//! ```

use std::sync::Arc;

use hyper_rustls::HttpsConnector;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// The system's CA certificates, read on first use (warnings logged for unreadable ones).
#[derive(Default)]
pub struct SystemRoots(tokio::sync::OnceCell<Arc<RootCertStore>>);

impl SystemRoots {
    /// The roots, read (off the async threads) the first time they are asked for; none
    /// if they cannot be read at all (https to a public CA then fails, and says why).
    pub async fn get(&self) -> Arc<RootCertStore> {
        self.0
            .get_or_init(|| async {
                match tokio::task::spawn_blocking(load_system_roots).await {
                    Ok(roots) => Arc::new(roots),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the system CA certificates");
                        Arc::new(RootCertStore::empty())
                    }
                }
            })
            .await
            .clone()
    }
}

/// Reads the system's CA certificates now (blocking).
fn load_system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!(error = %e, "cannot read a system CA certificate");
    }
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        tracing::warn!("no system CA certificates: https without a CA of its own will fail");
    }
    tracing::debug!(added, ignored, "system CA certificates loaded");
    roots
}

/// A TLS client configuration trusting `roots`, presenting `client_cert` if given
/// (TLS 1.3 and 1.2, ring's cipher suites).
pub fn tls_config(
    roots: Arc<RootCertStore>,
    client_cert: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<ClientConfig, rustls::Error> {
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
    match client_cert {
        Some((certs, key)) => builder.with_client_auth_cert(certs, key),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// A connector for https and plain http URLs over `tcp` (which must let https URLs
/// through: `HttpConnector::enforce_http(false)`), speaking HTTP/1.1.
pub fn https_connector<C>(tls: ClientConfig, tcp: C) -> HttpsConnector<C> {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp)
}
