//! The one HTTP(S) client builder of the binary, shared by every subsystem's adapters: the
//! lambda controllers' webhooks and the deployer's chart downloads (repositories and OCI
//! registries). TLS through rustls with ring (no aws-lc), HTTP/1.1, https and plain http
//! alike; the system's CA certificates read once per holder, off the async threads.
//!
//! ```text
//!   SystemRoots::get ─┐
//!   caBundle / customCAData ─► tls_config(roots, client cert?) ─► https_connector(tls, tcp)
//!                                                 CloseIsEnd(connector) ─► hyper Client
//! ```
//!
//! A TLS peer that closes the connection without a `close_notify` alert ends what it sent
//! ([`CloseIsEnd`]), as Go's `net/http` takes it: plenty of webhook servers answer and
//! close that way (Python's `http.server` behind an `ssl` socket, metacontroller's own
//! `webhook-auth` example). The HTTP framing still tells a cut answer from a whole one: a
//! body shorter than its `Content-Length` or a chunked body without its last chunk is an
//! error as before; only a body that is delimited by the close is taken as it stands,
//! which is what such a server means.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{Connected, Connection};
use rustls::client::ResolvesClientCert;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore};
use tower::Service;

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
///
/// The client certificate is taken as Go's `crypto/tls` takes it: the key must load and,
/// where the certificate can be read, match it; a certificate in a form that the server
/// may still accept (X.509 v1, as `openssl x509 -req` makes without extensions) is sent as
/// it is, for the server to judge.
pub fn tls_config(
    roots: Arc<RootCertStore>,
    client_cert: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    match client_cert {
        Some((certs, key)) => {
            let key = provider.key_provider.load_private_key(key)?;
            let certified = CertifiedKey::new(certs, key);
            match certified.keys_match() {
                Err(e @ rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch))
                | Err(e @ rustls::Error::NoCertificatesPresented) => return Err(e),
                Ok(()) | Err(_) => {}
            }
            Ok(builder.with_client_cert_resolver(Arc::new(OneClientCert(Arc::new(certified)))))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// Presents one certificate to every server that asks for one.
#[derive(Debug)]
struct OneClientCert(Arc<CertifiedKey>);

impl ResolvesClientCert for OneClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
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

/// A connector whose connections take a peer's close without `close_notify` as the end of
/// what it sent (see the module's docs).
#[derive(Clone, Debug)]
pub struct CloseIsEnd<C>(pub C);

impl<C> Service<Uri> for CloseIsEnd<C>
where
    C: Service<Uri>,
    C::Future: Send + 'static,
{
    type Response = EndAtClose<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connect = self.0.call(uri);
        Box::pin(async move { connect.await.map(EndAtClose) })
    }
}

/// A connection of [`CloseIsEnd`]: the TLS layer's "peer closed connection without sending
/// TLS close_notify" (`UnexpectedEof`) reads as the end of the stream.
#[derive(Debug)]
pub struct EndAtClose<S>(S);

impl<S: hyper::rt::Read + Unpin> hyper::rt::Read for EndAtClose<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.get_mut().0).poll_read(cx, buf) {
            // Nothing was read: to hyper, the end of the stream.
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

impl<S: hyper::rt::Write + Unpin> hyper::rt::Write for EndAtClose<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }
}

impl<S: Connection> Connection for EndAtClose<S> {
    fn connected(&self) -> Connected {
        self.0.connected()
    }
}
