//! Helm charts in OCI registries (`chart.ref`): the reference, the registry's token
//! challenge and the chart layer of a manifest. The requests are the adapter's.
//!
//! A chart pushed with `helm push` is an OCI artifact: a manifest whose layer of media type
//! `application/vnd.cncf.helm.chart.content.v1.tar+gzip` is the chart's gzipped tar.

use serde_json::Value;

/// The media type of a Helm chart's layer.
pub(crate) const CHART_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// What a manifest request accepts.
pub const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// Docker Hub, for references without a registry host.
const DOCKER_HUB: &str = "registry-1.docker.io";

/// `[oci://]host[:port]/repository[:tag][@sha256:…]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciRef {
    /// `host[:port]`.
    pub registry: String,
    pub repository: String,
    /// A tag or a digest (`sha256:…`).
    pub reference: String,
}

/// A reference that is not `host/repository:tag` or `…@sha256:digest`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OciRefError {
    /// Nothing given.
    #[error("an empty reference")]
    Empty,
    /// A URL (`https://…`) instead of a reference.
    #[error("{0:?}: a reference is host/repository:tag, not a URL")]
    Url(String),
    /// A repository with other characters than lowercase letters, digits, `.`, `_`, `-`.
    #[error(
        "{text:?}: the repository {repository:?} is not lowercase letters, digits, '.', '_', '-' separated by '/'"
    )]
    Repository {
        /// The reference as given.
        text: String,
        /// Its repository part.
        repository: String,
    },
    /// A digest of another algorithm.
    #[error("{text:?}: only sha256 digests are supported, got {digest:?}")]
    DigestAlgorithm {
        /// The reference as given.
        text: String,
        /// Its digest.
        digest: String,
    },
    /// A `sha256:` digest that is not 64 hex digits.
    #[error("{text:?}: {digest:?} is not a sha256 digest")]
    Digest {
        /// The reference as given.
        text: String,
        /// Its digest.
        digest: String,
    },
    /// `name:` with nothing after the colon.
    #[error("{0:?}: an empty tag")]
    EmptyTag(String),
}

impl OciRef {
    /// Reads a reference as container tools do: a first part with a `.` or a `:`, or
    /// `localhost`, is the registry (else Docker Hub, `library/` for a single name); the
    /// tag defaults to `latest`; a digest wins over a tag.
    pub fn parse(text: &str) -> Result<OciRef, OciRefError> {
        let text = text.trim();
        let rest = text.strip_prefix("oci://").unwrap_or(text);
        if rest.is_empty() {
            return Err(OciRefError::Empty);
        }
        if rest.contains("://") {
            return Err(OciRefError::Url(text.to_string()));
        }
        let (name, digest) = match rest.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (rest, None),
        };
        // A tag is after the last ':' that comes after the last '/'.
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name[last_slash..].rfind(':') {
            Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
            None => (name, None),
        };
        let (registry, repository) = match name.split_once('/') {
            Some((first, path))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), path.to_string())
            }
            _ if name.contains('/') => (DOCKER_HUB.to_string(), name.to_string()),
            _ => (DOCKER_HUB.to_string(), format!("library/{name}")),
        };
        let valid_part = |p: &str| {
            !p.is_empty()
                && p.chars().all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
                })
        };
        if repository.is_empty() || !repository.split('/').all(valid_part) {
            return Err(OciRefError::Repository {
                text: text.to_string(),
                repository,
            });
        }
        let reference = match (digest, tag) {
            (Some(d), _) => {
                let hex =
                    d.strip_prefix("sha256:")
                        .ok_or_else(|| OciRefError::DigestAlgorithm {
                            text: text.to_string(),
                            digest: d.to_string(),
                        })?;
                if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(OciRefError::Digest {
                        text: text.to_string(),
                        digest: d.to_string(),
                    });
                }
                d.to_string()
            }
            (None, Some(t)) if !t.is_empty() => t.to_string(),
            (None, Some(_)) => return Err(OciRefError::EmptyTag(text.to_string())),
            (None, None) => "latest".to_string(),
        };
        Ok(OciRef {
            registry,
            repository,
            reference,
        })
    }

    /// The registry's base URL: HTTPS, plain HTTP for a loopback registry (as container
    /// tools allow for `localhost`).
    pub fn base_url(&self) -> String {
        let host = self
            .registry
            .rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(self.registry.as_str(), |(h, _)| h);
        let scheme = if matches!(host, "localhost" | "127.0.0.1" | "[::1]") {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{}/v2/{}", self.registry, self.repository)
    }

    /// The reference's digest, when it names one.
    pub fn digest(&self) -> Option<&str> {
        self.reference
            .starts_with("sha256:")
            .then_some(self.reference.as_str())
    }
}

impl std::fmt::Display for OciRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sep = if self.digest().is_some() { '@' } else { ':' };
        write!(
            f,
            "{}/{}{sep}{}",
            self.registry, self.repository, self.reference
        )
    }
}

/// A `WWW-Authenticate: Bearer realm="…",service="…",scope="…"` challenge: the URL to ask
/// for a token. `None` for other schemes.
pub fn token_url(challenge: &str) -> Option<String> {
    let (realm, params) = challenge_params(challenge)?;
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    Some(if query.is_empty() {
        realm
    } else {
        let sep = if realm.contains('?') { '&' } else { '?' };
        format!("{realm}{sep}{}", query.join("&"))
    })
}

/// The realm and the other parameters of a `Bearer` challenge (`None`: another scheme,
/// or no realm).
fn challenge_params(challenge: &str) -> Option<(String, Vec<(String, String)>)> {
    let rest = challenge.trim();
    let (scheme, params) = rest.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut realm = None;
    let mut out = Vec::new();
    let mut chars = params.trim();
    while !chars.is_empty() {
        let (key, after) = chars.split_once('=')?;
        let key = key.trim().trim_start_matches(',').trim();
        let after = after.trim_start();
        let (value, rest) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"')?;
                (&quoted[..end], &quoted[end + 1..])
            }
            None => match after.find(',') {
                Some(i) => (&after[..i], &after[i..]),
                None => (after, ""),
            },
        };
        if key.eq_ignore_ascii_case("realm") {
            realm = Some(value.to_string());
        } else if !key.is_empty() {
            out.push((key.to_string(), value.to_string()));
        }
        chars = rest.trim_start().trim_start_matches(',').trim_start();
    }
    Some((realm?, out))
}

/// Percent-encoding of a query value.
fn encode(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b':' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The token of a token endpoint's answer (`token`, else `access_token`).
pub fn token_of(answer: &Value) -> Option<&str> {
    answer["token"]
        .as_str()
        .or_else(|| answer["access_token"].as_str())
        .filter(|t| !t.is_empty())
}

/// The name a registry goes by in docker config files (Docker Hub has several).
fn registry_key(host: &str) -> &str {
    match host {
        "docker.io" | "index.docker.io" | "registry.hub.docker.com" => DOCKER_HUB,
        other => other,
    }
}

/// How bosun logs in to a registry, from a docker config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Login {
    /// An `Authorization` value (`Basic …`), sent to the registry and its token service.
    Basic(String),
    /// An `identitytoken`: an OAuth2 refresh token, exchanged at the registry's token
    /// service for an access token (`POST`, `grant_type=refresh_token`).
    IdentityToken(String),
}

/// The login for `registry` in a docker config ([`login_for`]): an `identitytoken` first,
/// else `auth` or `username` and `password`.
pub(crate) fn registry_login_for(config: &Value, registry: &str) -> Option<Login> {
    let entry = entry_for(config, registry)?;
    match &entry["identitytoken"] {
        Value::String(t) if !t.is_empty() => Some(Login::IdentityToken(t.clone())),
        _ => login_of(entry).map(Login::Basic),
    }
}

/// The form a token service gets to exchange `refresh_token` (an `identitytoken`) for an
/// access token, from the registry's `Bearer` challenge: the realm and the
/// `application/x-www-form-urlencoded` body.
pub fn refresh_form(challenge: &str, refresh_token: &str) -> Option<(String, String)> {
    let (realm, params) = challenge_params(challenge)?;
    let mut form = vec![
        "grant_type=refresh_token".to_string(),
        format!("refresh_token={}", encode(refresh_token)),
        "client_id=bosun".to_string(),
    ];
    form.extend(
        params
            .into_iter()
            .filter(|(k, _)| k == "service" || k == "scope")
            .map(|(k, v)| format!("{k}={}", encode(&v))),
    );
    Some((realm, form.join("&")))
}

/// The `Authorization` value (`Basic …`) for `registry` in a docker config
/// (`.dockerconfigjson`: `{"auths": {host: …}}`, or the older `.dockercfg`: `{host: …}`);
/// each entry gives `auth` (base64 of `user:password`) or `username` and `password`. Keys
/// may carry a scheme and a path (`https://index.docker.io/v1/`).
pub fn login_for(config: &Value, registry: &str) -> Option<String> {
    entry_for(config, registry).and_then(login_of)
}

fn login_of(entry: &Value) -> Option<String> {
    use base64::Engine as _;
    match (&entry["auth"], &entry["username"], &entry["password"]) {
        (Value::String(a), _, _) if !a.is_empty() => Some(format!("Basic {a}")),
        (_, Value::String(u), Value::String(p)) => Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        )),
        _ => None,
    }
}

/// The docker config entry of `registry`.
fn entry_for<'c>(config: &'c Value, registry: &str) -> Option<&'c Value> {
    let auths = config
        .get("auths")
        .and_then(Value::as_object)
        .or_else(|| config.as_object())?;
    let want = registry_key(registry);
    auths.iter().find_map(|(key, entry)| {
        let host = key.split_once("://").map_or(key.as_str(), |(_, h)| h);
        let host = host.split('/').next().unwrap_or_default();
        (registry_key(host) == want).then_some(entry)
    })
}

/// The digest of the chart layer of `manifest`: the layer of the Helm chart media type,
/// else the only layer.
pub fn chart_layer(manifest: &Value) -> Result<String, ChartLayerError> {
    if manifest["manifests"].is_array() {
        return Err(ChartLayerError::ImageIndex);
    }
    let layers = manifest["layers"]
        .as_array()
        .ok_or(ChartLayerError::NoLayers)?;
    let layer = layers
        .iter()
        .find(|l| l["mediaType"] == CHART_LAYER)
        .or(match layers.as_slice() {
            [only] => Some(only),
            _ => None,
        })
        .ok_or_else(|| {
            ChartLayerError::NoChartLayer(
                layers
                    .iter()
                    .filter_map(|l| l["mediaType"].as_str().map(String::from))
                    .collect(),
            )
        })?;
    let digest = layer["digest"].as_str().ok_or(ChartLayerError::NoDigest)?;
    if !digest.starts_with("sha256:") {
        return Err(ChartLayerError::Digest(digest.to_string()));
    }
    Ok(digest.to_string())
}

/// A manifest without a Helm chart layer to fetch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChartLayerError {
    /// A multi-platform index instead of a manifest.
    #[error("an image index, not a Helm chart (a chart's manifest has layers)")]
    ImageIndex,
    /// No `layers`.
    #[error("not an OCI manifest: no layers")]
    NoLayers,
    /// Several layers, none of the chart media type (their media types).
    #[error("no Helm chart layer ({CHART_LAYER}) among {0:?}")]
    NoChartLayer(Vec<String>),
    /// The chart layer has no `digest`.
    #[error("the chart layer has no digest")]
    NoDigest,
    /// A digest of another algorithm.
    #[error("the chart layer's digest {0:?} is not sha256")]
    Digest(String),
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn r(registry: &str, repository: &str, reference: &str) -> OciRef {
        OciRef {
            registry: registry.into(),
            repository: repository.into(),
            reference: reference.into(),
        }
    }

    #[test]
    fn references_read_as_container_tools_read_them() {
        let d = format!("sha256:{}", "a".repeat(64));
        for (text, want) in [
            (
                "eu.gcr.io/gardener-project/charts/web:1.0.0",
                r("eu.gcr.io", "gardener-project/charts/web", "1.0.0"),
            ),
            (
                "oci://127.0.0.1:5000/charts/web:0.1.0",
                r("127.0.0.1:5000", "charts/web", "0.1.0"),
            ),
            ("localhost/web", r("localhost", "web", "latest")),
            ("bitnami/nginx:15", r(DOCKER_HUB, "bitnami/nginx", "15")),
            ("nginx", r(DOCKER_HUB, "library/nginx", "latest")),
            (
                &format!("ghcr.io/org/web:1.0@{d}"),
                r("ghcr.io", "org/web", &d),
            ),
        ] {
            assert_eq!(OciRef::parse(text), Ok(want), "{text}");
        }
        assert_eq!(
            r("127.0.0.1:5000", "charts/web", "1").base_url(),
            "http://127.0.0.1:5000/v2/charts/web"
        );
        assert_eq!(
            r("eu.gcr.io", "x/web", "1").base_url(),
            "https://eu.gcr.io/v2/x/web"
        );
        assert_eq!(
            r("eu.gcr.io", "x/web", "1").to_string(),
            "eu.gcr.io/x/web:1"
        );
    }

    #[test]
    fn bad_references_say_what_is_wrong() {
        for (text, says) in [
            ("", "empty"),
            ("https://eu.gcr.io/x/web:1", "not a URL"),
            ("eu.gcr.io/X/Web:1", "lowercase"),
            ("eu.gcr.io/x/web:", "empty tag"),
            ("eu.gcr.io/x/web@md5:abc", "only sha256"),
            ("eu.gcr.io/x/web@sha256:abc", "not a sha256 digest"),
        ] {
            let e = OciRef::parse(text).expect_err(text).to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn a_bearer_challenge_gives_the_token_url() {
        assert_eq!(
            token_url(
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:charts/web:pull""#
            )
            .as_deref(),
            Some(
                "https://auth.example/token?service=registry.example&scope=repository:charts/web:pull"
            )
        );
        assert_eq!(
            token_url(r#"Bearer realm="http://127.0.0.1:1/t?a=b""#).as_deref(),
            Some("http://127.0.0.1:1/t?a=b")
        );
        assert_eq!(token_url(r#"Basic realm="x""#), None);
        assert_eq!(token_of(&json!({"token": "t"})), Some("t"));
        assert_eq!(token_of(&json!({"access_token": "a"})), Some("a"));
        assert_eq!(token_of(&json!({"token": ""})), None);
    }

    #[test]
    fn a_registry_login_from_docker_config() {
        let config = json!({"auths": {
            "https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="},
            "127.0.0.1:5000": {"username": "u", "password": "p"},
            "ghcr.io": {"identitytoken": "x"},
        }});
        assert_eq!(
            login_for(&config, DOCKER_HUB).as_deref(),
            Some("Basic aHViOnNlY3JldA==")
        );
        assert_eq!(
            login_for(&config, "127.0.0.1:5000").as_deref(),
            Some("Basic dTpw")
        );
        assert_eq!(login_for(&config, "ghcr.io"), None);
        assert_eq!(
            registry_login_for(&config, "ghcr.io"),
            Some(Login::IdentityToken("x".into())),
            "an identity token is exchanged, not sent"
        );
        assert_eq!(
            registry_login_for(&config, "127.0.0.1:5000"),
            Some(Login::Basic("Basic dTpw".into()))
        );
        let form = refresh_form(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:charts/web:pull""#,
            "refresh me",
        );
        assert_eq!(
            form,
            Some((
                "https://auth.example/token".into(),
                "grant_type=refresh_token&refresh_token=refresh%20me&client_id=bosun&service=registry.example&scope=repository:charts/web:pull".into()
            ))
        );
        assert_eq!(login_for(&config, "eu.gcr.io"), None);
        let legacy = json!({"eu.gcr.io": {"auth": "YTpi"}});
        assert_eq!(
            login_for(&legacy, "eu.gcr.io").as_deref(),
            Some("Basic YTpi")
        );
    }

    #[test]
    fn the_chart_layer_of_a_manifest() {
        let d = format!("sha256:{}", "b".repeat(64));
        let manifest = json!({"schemaVersion": 2, "layers": [
            {"mediaType": "application/vnd.cncf.helm.chart.provenance.v1.prov", "digest": "sha256:00"},
            {"mediaType": CHART_LAYER, "digest": d},
        ]});
        assert_eq!(chart_layer(&manifest), Ok(d.clone()));
        let only = json!({"layers": [{"mediaType": "application/tar+gzip", "digest": d}]});
        assert_eq!(chart_layer(&only), Ok(d));
        assert!(
            chart_layer(&json!({"manifests": []}))
                .is_err_and(|e| e.to_string().contains("image index"))
        );
        assert!(
            chart_layer(&json!({"layers": [
                {"mediaType": "a", "digest": "sha256:1"}, {"mediaType": "b", "digest": "sha256:2"}]}))
            .is_err_and(|e| e.to_string().contains("no Helm chart layer"))
        );
    }
}
