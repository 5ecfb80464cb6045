//! Where bosun's Kubernetes client comes from, and a first request that says plainly when
//! the API server refuses its credentials.
//!
//! ```text
//!  KUBE_CONFIG set ─────────────► that kubeconfig
//!  KUBERNETES_SERVICE_HOST set ─► the pod's service account (BOSUN_SERVICE_ACCOUNT_DIR,
//!                                 default /var/run/secrets/kubernetes.io/serviceaccount)
//!  neither ─────────────────────► KUBECONFIG or ~/.kube/config (kube's inference)
//! ```
//!
//! The service-account configuration is the one kube's `Config::incluster()` builds (the
//! API server from `KUBERNETES_SERVICE_HOST`/`_PORT`, the CA from `ca.crt`, the namespace
//! from `namespace`, the token *file*, which the client re-reads about every minute so a
//! rotated token is picked up), read from a folder bosun can be pointed at: kube's own
//! reads fixed paths only. Helm gets the same settings as a kubeconfig whose user has a
//! `tokenFile` (client-go re-reads it too).

use std::path::{Path, PathBuf};

/// Where a pod's service-account files are mounted.
pub(crate) const DEFAULT_SERVICE_ACCOUNT_DIR: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount";

/// The variable that points bosun at another service-account folder.
pub(crate) const SERVICE_ACCOUNT_DIR_ENV: &str = "BOSUN_SERVICE_ACCOUNT_DIR";

/// Why no client configuration could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientConfigError {
    /// `KUBERNETES_SERVICE_PORT` is missing or not a port.
    #[error(
        "KUBERNETES_SERVICE_HOST is {host:?} but KUBERNETES_SERVICE_PORT is {port:?}, not a port"
    )]
    BadPort {
        /// `KUBERNETES_SERVICE_HOST`.
        host: String,
        /// `KUBERNETES_SERVICE_PORT`.
        port: String,
    },
    /// The API server address does not make a URL.
    #[error("the API server address {url:?} (from KUBERNETES_SERVICE_HOST/PORT) is not a URL")]
    BadUrl {
        /// What was built.
        url: String,
    },
    /// A service-account file could not be read.
    #[error(
        "cannot read the service account's {what} {} (set {SERVICE_ACCOUNT_DIR_ENV} if the \
         service account is mounted elsewhere): {source}", path.display()
    )]
    Read {
        /// `token`, `CA certificate` or `namespace`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The CA file holds no certificate.
    #[error("the service account's CA file {} holds no PEM certificate", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor the in-cluster environment.
    #[error(
        "cannot configure a Kubernetes client: no KUBE_CONFIG, KUBERNETES_SERVICE_HOST is not \
         set (not in a pod), and KUBECONFIG or ~/.kube/config did not work: {0}"
    )]
    Infer(kube::config::InferConfigError),
    /// The default kubeconfig could not be read or has no such context (`KUBE_CONTEXT`).
    #[error("KUBECONFIG or ~/.kube/config with context {context:?}: {source}")]
    Context {
        /// The context asked for.
        context: String,
        /// What was wrong.
        source: kube::config::KubeconfigError,
    },
}

/// bosun's first request showed that it cannot talk to the API server as configured.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The API server refused the credentials.
    #[error(
        "the API server {url} answered {code} {reason} to bosun's first request: it refused \
         {whose} ({message})"
    )]
    Refused {
        /// The API server.
        url: String,
        /// 401 or 403.
        code: u16,
        /// `Unauthorized`, `Forbidden`.
        reason: String,
        /// Which credentials: the service-account token file, the kubeconfig.
        whose: String,
        /// The API server's message.
        message: String,
    },
    /// The credentials could not even be sent (a token that is no valid header value).
    #[error("cannot use {whose} to talk to the API server {url}: {message}")]
    Unusable {
        /// The API server.
        url: String,
        /// Which credentials.
        whose: String,
        /// What the client said.
        message: String,
    },
    /// The API server's certificate is not trusted.
    #[error("the API server {url} is not trusted: {message} (the CA bosun trusts comes from {ca})")]
    Untrusted {
        /// The API server.
        url: String,
        /// Where the trusted CA comes from.
        ca: String,
        /// What TLS said.
        message: String,
    },
}

/// A pod's service account as bosun reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccount {
    /// The folder with `token`, `ca.crt` and `namespace`.
    pub dir: PathBuf,
}

impl ServiceAccount {
    /// `BOSUN_SERVICE_ACCOUNT_DIR`, or the standard mount.
    pub fn from_env() -> ServiceAccount {
        let dir = std::env::var(SERVICE_ACCOUNT_DIR_ENV)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| DEFAULT_SERVICE_ACCOUNT_DIR.to_string());
        ServiceAccount {
            dir: PathBuf::from(dir),
        }
    }

    /// The token file (re-read by the client, so a rotated token is used).
    pub fn token_file(&self) -> PathBuf {
        self.dir.join("token")
    }

    /// The API server's CA bundle.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The pod's namespace.
    pub fn namespace_file(&self) -> PathBuf {
        self.dir.join("namespace")
    }

    /// The client configuration kube's `Config::incluster()` would build from these files
    /// and `url`.
    pub fn config(&self, url: &str) -> Result<kube::Config, ClientConfigError> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let read = |what: &'static str, path: PathBuf| {
            std::fs::read(&path).map_err(|source| ClientConfigError::Read { what, path, source })
        };
        let cluster_url: http::Uri = url.parse().map_err(|_| ClientConfigError::BadUrl {
            url: url.to_string(),
        })?;
        let pem = read("CA certificate", self.ca_file())?;
        let certs: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(&pem)
            .filter_map(Result::ok)
            .map(|c| c.to_vec())
            .collect();
        if certs.is_empty() {
            return Err(ClientConfigError::NoCertificate {
                path: self.ca_file(),
            });
        }
        let namespace = read("namespace", self.namespace_file())?;
        let namespace = String::from_utf8_lossy(&namespace).trim().to_string();
        // Read once here so that a missing token fails the start, not the first request.
        read("token", self.token_file())?;
        let mut config = kube::Config::new(cluster_url);
        config.default_namespace = if namespace.is_empty() {
            "default".into()
        } else {
            namespace
        };
        config.root_cert = Some(certs);
        config.root_cert_file = Some(self.ca_file());
        config.auth_info = kube::config::AuthInfo {
            token_file: Some(self.token_file().to_string_lossy().into_owned()),
            ..Default::default()
        };
        Ok(config)
    }

    /// A kubeconfig with the same settings for Helm (client-go): the CA file and the token
    /// file by path, nothing secret inside.
    pub fn kubeconfig_text(&self, url: &str, namespace: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: in-cluster\n  cluster:\n    \
             server: {url}\n    certificate-authority: {ca}\ncontexts:\n- name: in-cluster\n  \
             context:\n    cluster: in-cluster\n    user: service-account\n    namespace: \
             {namespace}\ncurrent-context: in-cluster\nusers:\n- name: service-account\n  user:\n    \
             tokenFile: {token}\n",
            ca = self.ca_file().display(),
            token = self.token_file().display(),
        )
    }
}

/// The API server URL of the in-cluster environment, as client-go builds it, or `None`
/// outside a pod (`KUBERNETES_SERVICE_HOST` unset).
pub(crate) fn in_cluster_url() -> Result<Option<String>, ClientConfigError> {
    let Some(host) = std::env::var("KUBERNETES_SERVICE_HOST")
        .ok()
        .filter(|h| !h.is_empty())
    else {
        return Ok(None);
    };
    let port_text = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_default();
    let port: u16 = port_text.parse().map_err(|_| ClientConfigError::BadPort {
        host: host.clone(),
        port: port_text.clone(),
    })?;
    Ok(Some(service_url(&host, port)))
}

/// `https://host:port`, with IPv6 addresses bracketed and `:443` left out.
pub(crate) fn service_url(host: &str, port: u16) -> String {
    let host = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        _ => host.to_string(),
    };
    if port == 443 {
        format!("https://{host}")
    } else {
        format!("https://{host}:{port}")
    }
}

/// Which credentials the client uses, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientSource {
    /// A kubeconfig bosun was given.
    Kubeconfig(PathBuf),
    /// The pod's service account.
    ServiceAccount(ServiceAccount),
    /// kube's inference (`KUBECONFIG`, `~/.kube/config`).
    Inferred,
}

impl ClientSource {
    /// Where the CA bosun trusts comes from, as an error says it.
    pub fn ca(&self) -> String {
        match self {
            ClientSource::Kubeconfig(path) => format!("kubeconfig {}", path.display()),
            ClientSource::ServiceAccount(sa) => sa.ca_file().display().to_string(),
            ClientSource::Inferred => "KUBECONFIG or ~/.kube/config".into(),
        }
    }

    /// Whose credentials these are, as an error says it.
    pub fn whose(&self) -> String {
        match self {
            ClientSource::Kubeconfig(path) => {
                format!("the credentials of kubeconfig {}", path.display())
            }
            ClientSource::ServiceAccount(sa) => format!(
                "the service-account token read from {}",
                sa.token_file().display()
            ),
            ClientSource::Inferred => "the credentials of KUBECONFIG or ~/.kube/config".into(),
        }
    }
}

/// The client configuration: see the module doc for the order.
pub async fn client_config(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<(kube::Config, ClientSource), ClientConfigError> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    if let Some(path) = kubeconfig {
        let kc = kube::config::Kubeconfig::read_from(path).map_err(|source| {
            ClientConfigError::Kubeconfig {
                path: path.to_path_buf(),
                source,
            }
        })?;
        let config = kube::Config::from_custom_kubeconfig(kc, &options)
            .await
            .map_err(|source| ClientConfigError::Kubeconfig {
                path: path.to_path_buf(),
                source,
            })?;
        return Ok((config, ClientSource::Kubeconfig(path.to_path_buf())));
    }
    if let Some(url) = in_cluster_url()? {
        let sa = ServiceAccount::from_env();
        let config = sa.config(&url)?;
        tracing::info!(api_server = %url, service_account = %sa.dir.display(), "in-cluster Kubernetes client");
        return Ok((config, ClientSource::ServiceAccount(sa)));
    }
    // A context names one of the kubeconfig's: read it (`KUBECONFIG`, `~/.kube/config`).
    let config = match context {
        Some(name) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|source| ClientConfigError::Context {
                context: name.to_string(),
                source,
            })?,
        None => kube::Config::infer()
            .await
            .map_err(ClientConfigError::Infer)?,
    };
    Ok((config, ClientSource::Inferred))
}

/// What in `err`'s chain is a credentials or TLS failure, if anything: those do not heal
/// by retrying.
fn local_failure(err: &kube::Error) -> Option<(bool, String)> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(auth) = e.downcast_ref::<kube::client::AuthError>() {
            return Some((false, auth.to_string()));
        }
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some((true, tls.to_string()));
        }
        // io::Error's `source` skips the error it wraps (often another io::Error): follow
        // `get_ref` instead.
        next = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// Asks the API server for its version with `config`'s credentials: a 401 or 403, a token
/// the client cannot send, or a certificate it does not trust become a
/// [`CredentialsError`] naming the server and the credentials. Other failures (the server
/// not reachable yet) are logged and left to the requests that follow, which retry.
pub async fn check_credentials(
    config: &kube::Config,
    source: &ClientSource,
) -> Result<(), CredentialsError> {
    let url = config.cluster_url.to_string();
    let url = url.trim_end_matches('/').to_string();
    let client = match kube::Client::try_from(config.clone()) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(api_server = %url, "cannot check the credentials: {e}");
            return Ok(());
        }
    };
    match client.apiserver_version().await {
        Ok(v) => {
            tracing::info!(api_server = %url, version = %v.git_version, "API server reached");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 401 || status.code == 403 => {
            Err(CredentialsError::Refused {
                url,
                code: status.code,
                reason: status.reason.clone(),
                whose: source.whose(),
                message: status.message.clone(),
            })
        }
        Err(e) => match local_failure(&e) {
            Some((false, message)) => Err(CredentialsError::Unusable {
                url,
                whose: source.whose(),
                message: format!(
                    "{message} (a token must be one line of text: a trailing newline or a \
                     space makes it unusable)"
                ),
            }),
            Some((true, message)) => Err(CredentialsError::Untrusted {
                url,
                ca: source.ca(),
                message,
            }),
            None => {
                tracing::warn!(api_server = %url, "the API server did not answer bosun's first request: {e}");
                Ok(())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_urls_are_built_as_client_go_builds_them() {
        assert_eq!(service_url("10.0.0.1", 443), "https://10.0.0.1");
        assert_eq!(service_url("127.0.0.1", 6443), "https://127.0.0.1:6443");
        assert_eq!(service_url("fd00::1", 443), "https://[fd00::1]");
        assert_eq!(service_url("fd00::1", 6443), "https://[fd00::1]:6443");
        assert_eq!(
            service_url("kubernetes.default.svc", 8443),
            "https://kubernetes.default.svc:8443"
        );
    }

    #[test]
    fn a_missing_service_account_names_the_file_and_the_variable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sa = ServiceAccount {
            dir: dir.path().to_path_buf(),
        };
        let err = sa.config("https://127.0.0.1:6443").expect_err("no files");
        let text = err.to_string();
        assert!(text.contains("CA certificate"), "{text}");
        assert!(text.contains(&dir.path().join("ca.crt").display().to_string()));
        assert!(text.contains(SERVICE_ACCOUNT_DIR_ENV), "{text}");
        std::fs::write(dir.path().join("ca.crt"), "not pem").expect("write");
        let err = sa
            .config("https://127.0.0.1:6443")
            .expect_err("no certificate");
        assert!(
            matches!(err, ClientConfigError::NoCertificate { .. }),
            "{err}"
        );
    }

    #[test]
    fn the_token_is_a_file_the_client_re_reads_not_a_copy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tls = bosun_sandbox::tls::generate_server_tls(std::net::IpAddr::from([127, 0, 0, 1]))
            .expect("a CA");
        std::fs::write(dir.path().join("ca.crt"), &tls.ca_pem).expect("ca.crt");
        std::fs::write(dir.path().join("token"), "t0k3n").expect("token");
        std::fs::write(dir.path().join("namespace"), "bosun\n").expect("namespace");
        let sa = ServiceAccount {
            dir: dir.path().to_path_buf(),
        };
        let config = sa.config("https://127.0.0.1:6443").expect("config");
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(config.default_namespace, "bosun");
        // kube re-reads a token file shortly before its one-minute cache expires, and the
        // CA file likewise: rotated tokens and CAs are picked up without a restart.
        assert_eq!(
            config.auth_info.token_file.as_deref(),
            Some(dir.path().join("token").to_string_lossy().as_ref())
        );
        assert!(config.auth_info.token.is_none());
        assert_eq!(config.root_cert_file, Some(dir.path().join("ca.crt")));
        assert_eq!(config.root_cert.map(|c| c.len()), Some(1));
    }

    #[test]
    fn the_helm_kubeconfig_names_files_not_secrets() {
        let sa = ServiceAccount {
            dir: PathBuf::from("/sa"),
        };
        let text = sa.kubeconfig_text("https://10.0.0.1", "bosun");
        let kc: serde_json::Value = serde_saphyr::from_str(&text).expect("yaml");
        assert_eq!(kc["clusters"][0]["cluster"]["server"], "https://10.0.0.1");
        assert_eq!(
            kc["clusters"][0]["cluster"]["certificate-authority"],
            "/sa/ca.crt"
        );
        assert_eq!(kc["users"][0]["user"]["tokenFile"], "/sa/token");
        assert_eq!(kc["contexts"][0]["context"]["namespace"], "bosun");
    }
}
