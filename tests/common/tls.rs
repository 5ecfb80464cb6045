//! TLS for tests: a CA, a server certificate for 127.0.0.1 and a client certificate made
//! by openssl, and a rustls server configuration with them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read a PEM file")
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate. Without openssl the
/// test fails naming it (scripts/setup.sh installs it): a TLS test never passes untried.
pub fn pki() -> Pki {
    if let Err(e) = Command::new("openssl").arg("version").output() {
        panic!(
            "this TLS test needs the `openssl` command to make its certificates ({e}); \
             scripts/setup.sh installs it"
        );
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let write = |name: &str, text: &str| std::fs::write(d.join(name), text).expect("write");
    write(
        "ca.cnf",
        "[req]\ndistinguished_name=dn\nx509_extensions=ext\nprompt=no\n[dn]\nCN=bosun test CA\n\
         [ext]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n\
         subjectKeyIdentifier=hash\n",
    );
    write(
        "leaf.cnf",
        "[req]\ndistinguished_name=dn\nprompt=no\n[dn]\nCN=webhook\n",
    );
    write(
        "server.ext",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
         extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    );
    write(
        "client.ext",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
         extendedKeyUsage=clientAuth\n",
    );
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut ca = vec!["req", "-x509", "-config", "ca.cnf", "-nodes", "-days", "2"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    openssl(d, &ca);
    for leaf in ["server", "client"] {
        let (key, csr, crt, ext) = (
            format!("{leaf}.key"),
            format!("{leaf}.csr"),
            format!("{leaf}.crt"),
            format!("{leaf}.ext"),
        );
        let mut req = vec!["req", "-new", "-config", "leaf.cnf", "-nodes"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr]);
        openssl(d, &req);
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &ext,
                "-out",
                &crt,
            ],
        );
    }
    // The client's key again, in an X.509 v1 certificate (no extensions), as the openssl
    // command of metacontroller's `webhook-auth` example makes it.
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "client-v1.crt",
        ],
    );
    Pki { dir }
}

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's certificate for 127.0.0.1 and its key.
fn server_cert(pki: &Pki) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let certs = CertificateDer::pem_file_iter(pki.path("server.crt"))
        .expect("server.crt")
        .collect::<Result<Vec<_>, _>>()
        .expect("server certificate");
    let key = PrivateKeyDer::from_pem_file(pki.path("server.key")).expect("server key");
    (certs, key)
}

/// The server's TLS settings (its certificate for 127.0.0.1); with `require_client_cert`,
/// a client certificate signed by the test CA is required.
pub fn server_config(pki: &Pki, require_client_cert: bool) -> Arc<rustls::ServerConfig> {
    let (certs, key) = server_cert(pki);
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = if require_client_cert {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(pki.path("ca.crt")).expect("ca.crt") {
            roots
                .add(cert.expect("CA certificate"))
                .expect("add the CA");
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .build()
        .expect("client verifier");
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder
        .with_single_cert(certs, key)
        .expect("server certificate and key");
    Arc::new(config)
}

/// A server configuration that asks for a client certificate and takes whatever is
/// presented without verifying it (for a client certificate that webpki cannot read, an
/// X.509 v1 one); `presented` counts the handshakes that carried one.
pub fn server_config_any_client_cert(
    pki: &Pki,
    presented: Arc<std::sync::atomic::AtomicUsize>,
) -> Arc<rustls::ServerConfig> {
    let (certs, key) = server_cert(pki);
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(Arc::new(AnyClientCert(presented)))
        .with_single_cert(certs, key)
        .expect("server certificate and key");
    Arc::new(config)
}

#[derive(Debug)]
struct AnyClientCert(Arc<std::sync::atomic::AtomicUsize>);

impl rustls::server::danger::ClientCertVerifier for AnyClientCert {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
