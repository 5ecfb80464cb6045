//! TLS for the sandbox, as a cluster's API server serves it: a certificate authority made
//! at start (self-signed, ECDSA P-256 through ring) and a server certificate it signs for
//! `localhost`, `127.0.0.1`, `::1` and the listen address. Clients trust the CA from
//! `ca.crt` in the data folder or from the kubeconfig; the keys never touch the disk.

use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Making a key or a certificate failed.
    #[error("generating the sandbox's {what}: {source}")]
    Generate {
        /// Which key or certificate.
        what: &'static str,
        /// The generator's error.
        source: rcgen::Error,
    },
    /// rustls refused the server configuration.
    #[error("configuring TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// A CA and the server configuration of a certificate it signed.
pub struct ServerTls {
    /// The CA certificate (PEM), what clients trust.
    pub ca_pem: String,
    /// The server side: certificate chain and key, HTTP/1.1 by ALPN.
    pub config: Arc<rustls::ServerConfig>,
}

fn generate(what: &'static str) -> impl FnOnce(rcgen::Error) -> TlsError {
    move |source| TlsError::Generate { what, source }
}

/// Makes a fresh CA and a server certificate for the loopback names and `listen`.
pub fn generate_server_tls(listen: IpAddr) -> Result<ServerTls, TlsError> {
    let ca_key = KeyPair::generate().map_err(generate("CA key"))?;
    let mut ca_params =
        CertificateParams::new(Vec::<String>::new()).map_err(generate("CA certificate"))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "bosun-sandbox-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .map_err(generate("CA certificate"))?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if !listen.is_unspecified() && !listen.is_loopback() {
        names.push(listen.to_string());
    }
    let server_key = KeyPair::generate().map_err(generate("server key"))?;
    let mut params = CertificateParams::new(names).map_err(generate("server certificate"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "bosun-sandbox");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let server_cert = params
        .signed_by(&server_key, &issuer)
        .map_err(generate("server certificate"))?;

    let chain = vec![
        server_cert.der().clone(),
        CertificateDer::from(ca_cert.der().to_vec()),
    ];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    // The server speaks HTTP/1.1 only; clients that offer h2 fall back to it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(ServerTls {
        ca_pem: ca_cert.pem(),
        config: Arc::new(config),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_pem_and_the_config_speaks_http_1_1() {
        let tls = generate_server_tls(IpAddr::from([127, 0, 0, 1])).expect("tls");
        assert!(tls.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(tls.config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
