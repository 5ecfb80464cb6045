//! Charts from OCM component versions (`chart.resourceRef`): the resource key landscaper's
//! `getResourceKey` template function writes, the Context's repository, where a component
//! version lives in an OCI registry, its component descriptor and how a resource of it is
//! accessed. The requests are the adapter's.
//!
//! ```text
//!   resourceRef = base64(YAML {component: {name, version}, resource: {name, …extra identity}})
//!   Context.repositoryContext = {type: OCIRegistry, baseUrl: host[/path], subPath?}
//!   component version  = <host>/<path>[/<subPath>]/component-descriptors/<name>:<version>
//!                        (an OCI manifest; `+` in a version is `.build-` in its tag)
//!     config           = {componentDescriptorLayer: {mediaType, digest}}
//!     that layer       = the descriptor (YAML or JSON), or a tar holding
//!                        component-descriptor.yaml
//!   resource access    = ociArtifact {imageReference}    → a chart in an OCI registry
//!                        localBlob {localReference, mediaType, globalAccess?}
//!                                                        → a blob of the component's repository
//!                        helm {helmRepository, helmChart: name:version}
//!                                                        → a chart repository
//! ```
//!
//! Component versions are looked for in the Context's `repositoryContext`, then through the
//! resolvers of its `.ocmconfig` ([`OcmConfig`], [`lookup_order`]). Landscaper resolves all
//! this with the OCM library, which also knows repositories bosun does not (the `local`
//! file-system repository of its tests, CTF archives): those are refused with an error
//! that names the field.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;

use crate::oci::OciRef;

/// An OCI artifact in OCM's artifact-set format (a tar, gzipped or not, with `index.json`
/// and `blobs/sha256.<hex>`), as `ocm add resource --type helmChart --input helm` stores a
/// chart.
pub(crate) const ARTIFACT_SET: &str = "application/vnd.oci.image.manifest.v1+tar";

/// OCM input that cannot be used, naming the field, the resource or the document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OcmError {
    /// A `resourceRef` that is not base64.
    #[error(
        "not a resource key (base64 of a global resource identity, as landscaper's getResourceKey writes): {0}"
    )]
    KeyNotBase64(String),
    /// A decoded `resourceRef` that is not YAML.
    #[error("the decoded key is not YAML: {0}")]
    KeyNotYaml(String),
    /// A decoded `resourceRef` without one of its parts.
    #[error("the decoded key has no {0}")]
    KeyMissing(String),
    /// A part of a decoded `resourceRef` that is not a string.
    #[error("the decoded key's {field}: expected a string, got {got}")]
    KeyNotAString {
        /// `component.name`, `resource.<k>`.
        field: String,
        /// What it holds.
        got: Value,
    },
    /// A field of a Context or an `.ocmconfig`.
    #[error("{field}: {problem}")]
    Field {
        /// Where (`repositoryContext.baseUrl`, `….resolvers[0].priority`).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The resource a key names, in its component descriptor.
    #[error("{key}: {problem}")]
    Resource {
        /// The resource (`resource "chart" of name:version`).
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// A component version's manifest, descriptor or artifact set.
    #[error("{0}")]
    Document(&'static str),
    /// A component descriptor that is not YAML.
    #[error("the component descriptor is not YAML: {0}")]
    DescriptorNotYaml(String),
    /// A component descriptor of another component version.
    #[error("the component descriptor is of {found}, not {wanted}")]
    OtherDescriptor {
        /// `name:version` found.
        found: String,
        /// `name:version` asked for.
        wanted: String,
    },
}

/// An [`OcmError::Field`].
fn field_error(field: impl Into<String>, problem: impl Into<String>) -> OcmError {
    OcmError::Field {
        field: field.into(),
        problem: problem.into(),
    }
}

/// An [`OcmError::Resource`].
fn resource_error(key: &ResourceKey, problem: impl Into<String>) -> OcmError {
    OcmError::Resource {
        key: key.to_string(),
        problem: problem.into(),
    }
}

/// A resource of a component version, as `chart.resourceRef` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceKey {
    pub component: String,
    pub version: String,
    /// `name` and the resource's extra identity (and `version`, when the descriptor needs
    /// it to tell two resources apart).
    pub identity: BTreeMap<String, String>,
}

impl ResourceKey {
    /// Decodes a key (base64 of YAML or JSON).
    pub fn decode(key: &str) -> Result<ResourceKey, OcmError> {
        let compact: String = key.split_whitespace().collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .map_err(|e| OcmError::KeyNotBase64(e.to_string()))?;
        let v: Value =
            serde_saphyr::from_slice(&bytes).map_err(|e| OcmError::KeyNotYaml(e.to_string()))?;
        let text = |v: &Value, field: &str| match v {
            Value::String(s) if !s.is_empty() => Ok(s.clone()),
            Value::Null => Err(OcmError::KeyMissing(field.to_string())),
            other => Err(OcmError::KeyNotAString {
                field: field.to_string(),
                got: other.clone(),
            }),
        };
        let component = text(&v["component"]["name"], "component.name")?;
        let version = text(&v["component"]["version"], "component.version")?;
        let resource = v["resource"].as_object().ok_or_else(|| {
            OcmError::KeyMissing("resource identity (resource: {name: …})".into())
        })?;
        let mut identity = BTreeMap::new();
        for (k, val) in resource {
            identity.insert(k.clone(), text(val, &format!("resource.{k}"))?);
        }
        if !identity.contains_key("name") {
            return Err(OcmError::KeyMissing("resource.name".into()));
        }
        Ok(ResourceKey {
            component,
            version,
            identity,
        })
    }

    /// The key as landscaper's `getResourceKey` writes it (for tests and tools).
    pub fn encode(&self) -> String {
        let v = serde_json::json!({
            "component": {"name": self.component, "version": self.version},
            "resource": self.identity,
        });
        base64::engine::general_purpose::STANDARD.encode(v.to_string())
    }
}

impl std::fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.identity.get("name").map_or("", String::as_str);
        write!(
            f,
            "resource {name:?} of {}:{}",
            self.component, self.version
        )
    }
}

/// Where component versions are read: an OCI registry and a path in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repository {
    /// `host[:port]`.
    pub registry: String,
    /// The path under the registry (`baseUrl`'s path, then `subPath`), maybe empty.
    pub path: String,
}

impl Repository {
    /// Reads a Context's `repositoryContext`; `field` names it in errors.
    pub fn of(repository_context: &Value, field: &str) -> Result<Repository, OcmError> {
        let m = match repository_context {
            Value::Object(m) => m,
            Value::Null => return Err(field_error(field, "missing")),
            other => {
                return Err(field_error(
                    field,
                    format!("expected an object, got {other}"),
                ));
            }
        };
        let ty = m.get("type").and_then(Value::as_str).unwrap_or_default();
        if !matches!(
            ty,
            "OCIRegistry" | "ociRegistry" | "OCIRegistry/v1" | "ociRegistry/v1"
        ) {
            return Err(field_error(
                format!("{field}.type"),
                format!(
                    "{ty:?} is not supported; expected OCIRegistry (component versions in an OCI registry)"
                ),
            ));
        }
        if let Some(mapping) = m.get("componentNameMapping").and_then(Value::as_str)
            && mapping != "urlPath"
        {
            return Err(field_error(
                format!("{field}.componentNameMapping"),
                format!("{mapping:?} is not supported; expected urlPath"),
            ));
        }
        let base = m
            .get("baseUrl")
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| field_error(format!("{field}.baseUrl"), "missing (host[:port][/path])"))?
            .trim();
        let base = base.split_once("://").map_or(base, |(_, rest)| rest);
        let (registry, path) = base.split_once('/').unwrap_or((base, ""));
        if registry.is_empty() {
            return Err(field_error(
                format!("{field}.baseUrl"),
                format!("{base:?} names no registry host"),
            ));
        }
        let sub = m.get("subPath").and_then(Value::as_str).unwrap_or_default();
        let path: Vec<&str> = path
            .split('/')
            .chain(sub.split('/'))
            .filter(|p| !p.is_empty())
            .collect();
        Ok(Repository {
            registry: registry.to_string(),
            path: path.join("/"),
        })
    }

    /// Where the component version `name:version` is: its OCI reference.
    pub fn component(&self, name: &str, version: &str) -> OciRef {
        let prefix = if self.path.is_empty() {
            String::new()
        } else {
            format!("{}/", self.path)
        };
        OciRef {
            registry: self.registry.clone(),
            repository: format!("{prefix}component-descriptors/{name}"),
            reference: version.replace('+', ".build-"),
        }
    }
}

/// One place component versions are looked for: the repository for component names under
/// `prefix` (empty: every name), tried in the order of `priority` (highest first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolver {
    pub prefix: String,
    pub priority: i64,
    pub repository: Repository,
}

/// What bosun reads of an `.ocmconfig` (`type: generic.config.ocm.software/v1`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct OcmConfig {
    /// Of its `configurations` of `type: ocm.config.ocm.software`: `resolvers:
    /// [{repository, prefix, priority}]`.
    pub resolvers: Vec<Resolver>,
    /// Of its `type: credentials.config.ocm.software`: `consumers: [{identity: {type:
    /// OCIRegistry, hostname, port?}, credentials: [{type: Credentials, properties:
    /// {username, password} or {identityToken}}]}]`, each as a docker config (`{"auths":
    /// {host: …}}`) so that they are looked up as the Context's pull Secrets are. A
    /// `pathprefix` is not told apart: the login is the registry's.
    pub logins: Vec<Value>,
    /// Of the same configurations' credential `repositories: [{repository: {type:
    /// DockerConfig, dockerConfig | dockerConfigFile, propagateConsumerIdentity}}]`, in
    /// order: asked after every consumer, as OCM falls back to them. One that does not
    /// propagate its consumers' identities only serves credentials asked for by name,
    /// which nothing bosun reads does: it is left out. Other credential repositories
    /// (Vault, npm configs, …) serve no registry login and are not read.
    pub docker_configs: Vec<DockerConfigSource>,
}

/// A docker config an `.ocmconfig` names as a credential repository.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum DockerConfigSource {
    /// `dockerConfig`: the config itself (an object, or its JSON text).
    Inline(Value),
    /// `dockerConfigFile`: a file on bosun's file system (`~/` is the home folder), read
    /// when the chart is fetched; `field` names where the file was given.
    File {
        path: std::path::PathBuf,
        field: String,
    },
}

/// `v` as a list (null: empty); `field` names it in the error.
fn list<'a>(v: &'a Value, field: &str) -> Result<&'a [Value], OcmError> {
    match v {
        Value::Array(a) => Ok(a.as_slice()),
        Value::Null => Ok(&[]),
        other => Err(field_error(field, format!("expected a list, got {other}"))),
    }
}

/// Whether `v`'s `type` is `ty` (any version of it).
fn of_type(v: &Value, ty: &str) -> bool {
    v["type"].as_str().unwrap_or_default().split('/').next() == Some(ty)
}

impl OcmConfig {
    /// Reads an `.ocmconfig`; other configurations are not read.
    pub fn parse(text: &str, field: &str) -> Result<OcmConfig, OcmError> {
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        Self::parse_with_home(text, field, home)
    }

    /// [`OcmConfig::parse`] with `home` as the folder `~/` names.
    pub fn parse_with_home(
        text: &str,
        field: &str,
        home: Option<std::path::PathBuf>,
    ) -> Result<OcmConfig, OcmError> {
        let config: Value = serde_saphyr::from_str(text)
            .map_err(|e| field_error(field, format!("not YAML: {e}")))?;
        let mut out = OcmConfig::default();
        let f = format!("{field}.configurations");
        for (i, c) in list(&config["configurations"], &f)?.iter().enumerate() {
            let f = format!("{f}[{i}]");
            if of_type(c, "ocm.config.ocm.software") {
                for (j, r) in list(&c["resolvers"], &format!("{f}.resolvers"))?
                    .iter()
                    .enumerate()
                {
                    out.resolvers
                        .push(resolver(r, &format!("{f}.resolvers[{j}]"))?);
                }
            } else if of_type(c, "credentials.config.ocm.software") {
                for (j, consumer) in list(&c["consumers"], &format!("{f}.consumers"))?
                    .iter()
                    .enumerate()
                {
                    out.logins
                        .extend(logins(consumer, &format!("{f}.consumers[{j}]"))?);
                }
                for (j, r) in list(&c["repositories"], &format!("{f}.repositories"))?
                    .iter()
                    .enumerate()
                {
                    let f = format!("{f}.repositories[{j}].repository");
                    out.docker_configs.extend(docker_config(
                        &r["repository"],
                        &f,
                        home.as_deref(),
                    )?);
                }
            }
        }
        Ok(out)
    }
}

fn resolver(r: &Value, f: &str) -> Result<Resolver, OcmError> {
    let priority = match &r["priority"] {
        Value::Null => 10,
        v => v.as_i64().ok_or_else(|| {
            field_error(
                format!("{f}.priority"),
                format!("expected a whole number, got {v}"),
            )
        })?,
    };
    Ok(Resolver {
        prefix: r["prefix"].as_str().unwrap_or_default().to_string(),
        priority,
        repository: Repository::of(&r["repository"], &format!("{f}.repository"))?,
    })
}

/// The docker config a credential repository gives (none unless it is a `DockerConfig` that
/// propagates its consumers' identities).
fn docker_config(
    r: &Value,
    f: &str,
    home: Option<&std::path::Path>,
) -> Result<Option<DockerConfigSource>, OcmError> {
    if !of_type(r, "DockerConfig") {
        if r["type"].as_str().is_none_or(str::is_empty) {
            return Err(field_error(format!("{f}.type"), "missing"));
        }
        return Ok(None);
    }
    match &r["propagateConsumerIdentity"] {
        Value::Null | Value::Bool(true) => {}
        Value::Bool(false) => return Ok(None),
        v => {
            return Err(field_error(
                format!("{f}.propagateConsumerIdentity"),
                format!("expected true or false, got {v}"),
            ));
        }
    }
    match (&r["dockerConfig"], &r["dockerConfigFile"]) {
        (Value::Object(_), _) => Ok(Some(DockerConfigSource::Inline(r["dockerConfig"].clone()))),
        (Value::String(text), _) => match serde_json::from_str::<Value>(text) {
            Ok(config @ Value::Object(_)) => Ok(Some(DockerConfigSource::Inline(config))),
            _ => Err(field_error(
                format!("{f}.dockerConfig"),
                "expected a docker config (a JSON object)",
            )),
        },
        (Value::Null, Value::String(path)) if !path.is_empty() => {
            let path = match path.strip_prefix("~/") {
                Some(rest) => home
                    .ok_or_else(|| {
                        field_error(
                            format!("{f}.dockerConfigFile"),
                            format!("{path}: no home folder (HOME is not set)"),
                        )
                    })?
                    .join(rest),
                None => std::path::PathBuf::from(path),
            };
            Ok(Some(DockerConfigSource::File {
                path,
                field: format!("{f}.dockerConfigFile"),
            }))
        }
        (Value::Null, Value::Null) => {
            Err(field_error(f, "expected dockerConfig or dockerConfigFile"))
        }
        (Value::Null, v) => Err(field_error(
            format!("{f}.dockerConfigFile"),
            format!("expected a path, got {v}"),
        )),
        (v, _) => Err(field_error(
            format!("{f}.dockerConfig"),
            format!("expected a docker config (a JSON object), got {v}"),
        )),
    }
}

/// The docker configs of one credentials consumer (none unless it is an OCI registry).
fn logins(consumer: &Value, f: &str) -> Result<Vec<Value>, OcmError> {
    let id = &consumer["identity"];
    if !of_type(id, "OCIRegistry") {
        return Ok(Vec::new());
    }
    let host = id["hostname"]
        .as_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| field_error(format!("{f}.identity.hostname"), "missing"))?;
    let registry = match &id["port"] {
        Value::String(p) if !p.is_empty() => format!("{host}:{p}"),
        Value::Number(p) => format!("{host}:{p}"),
        _ => host.to_string(),
    };
    let mut out = Vec::new();
    for (k, cred) in list(&consumer["credentials"], &format!("{f}.credentials"))?
        .iter()
        .enumerate()
    {
        let props = &cred["properties"];
        let entry = match (
            props["username"].as_str(),
            props["password"].as_str(),
            props["identityToken"].as_str(),
        ) {
            (_, _, Some(t)) if !t.is_empty() => serde_json::json!({"identitytoken": t}),
            (Some(u), Some(p), _) => serde_json::json!({"username": u, "password": p}),
            _ => {
                return Err(field_error(
                    format!("{f}.credentials[{k}].properties"),
                    "expected username and password, or identityToken",
                ));
            }
        };
        out.push(serde_json::json!({ "auths": { registry.clone(): entry } }));
    }
    Ok(out)
}

/// The repositories to look for `component` in, in order: the resolvers whose prefix is
/// the name or a path above it, by priority (highest first; ties in the given order).
pub fn lookup_order<'a>(resolvers: &'a [Resolver], component: &str) -> Vec<&'a Repository> {
    let mut matching: Vec<&Resolver> = resolvers
        .iter()
        .filter(|r| {
            let p = r.prefix.trim_end_matches('/');
            p.is_empty()
                || component == p
                || component
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
        .collect();
    matching.sort_by_key(|r| std::cmp::Reverse(r.priority));
    matching.into_iter().map(|r| &r.repository).collect()
}

/// The layer of a component version's manifest that holds its descriptor: the one its
/// config names, else the only layer. Its digest and media type.
pub fn descriptor_layer(manifest: &Value, config: &Value) -> Result<(String, String), OcmError> {
    let layers = manifest["layers"]
        .as_array()
        .ok_or(OcmError::Document("not an OCI manifest: no layers"))?;
    let named = &config["componentDescriptorLayer"];
    let layer = match named["digest"].as_str() {
        Some(d) => layers.iter().find(|l| l["digest"] == d).unwrap_or(named),
        None => match layers.as_slice() {
            [only] => only,
            _ => {
                return Err(OcmError::Document(
                    "the config names no componentDescriptorLayer: not an OCM component version",
                ));
            }
        },
    };
    let digest = layer["digest"]
        .as_str()
        .filter(|d| d.starts_with("sha256:"))
        .ok_or(OcmError::Document(
            "the component descriptor layer has no sha256 digest",
        ))?;
    let media_type = layer["mediaType"].as_str().unwrap_or_default();
    Ok((digest.to_string(), media_type.to_string()))
}

/// Whether a descriptor layer of `media_type` is a tar (holding
/// `component-descriptor.yaml`).
pub fn descriptor_in_tar(media_type: &str) -> bool {
    media_type.ends_with("+tar") || media_type.ends_with(".tar")
}

/// Reads a component descriptor (v2 or `ocm.software/v3alpha1`) and checks that it is the
/// version asked for.
pub fn descriptor(text: &[u8], key: &ResourceKey) -> Result<Value, OcmError> {
    let cd: Value =
        serde_saphyr::from_slice(text).map_err(|e| OcmError::DescriptorNotYaml(e.to_string()))?;
    let (name, version) = if cd["component"].is_object() {
        (&cd["component"]["name"], &cd["component"]["version"])
    } else {
        (&cd["metadata"]["name"], &cd["metadata"]["version"])
    };
    if name != key.component.as_str() || version != key.version.as_str() {
        return Err(OcmError::OtherDescriptor {
            found: format!(
                "{}:{}",
                name.as_str().unwrap_or("?"),
                version.as_str().unwrap_or("?")
            ),
            wanted: format!("{}:{}", key.component, key.version),
        });
    }
    Ok(cd)
}

/// How a resource's content is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// An artifact in an OCI registry (`ociArtifact`, `ociRegistry`).
    Oci(OciRef),
    /// A blob stored with the component version (`localBlob`).
    LocalBlob { digest: String, media_type: String },
    /// A chart of a Helm chart repository (`helm`).
    HelmRepo {
        url: String,
        name: String,
        version: String,
    },
}

/// The resource of `cd` that `key` names, and how to reach it.
pub fn resource_access(cd: &Value, key: &ResourceKey) -> Result<Access, OcmError> {
    let resources = cd["component"]["resources"]
        .as_array()
        .or(cd["spec"]["resources"].as_array())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let identity_of = |r: &Value| {
        let mut id: BTreeMap<String, String> = r["extraIdentity"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        for k in ["name", "version"] {
            if let Some(v) = r[k].as_str() {
                id.insert(k.to_string(), v.to_string());
            }
        }
        id
    };
    let matching: Vec<&Value> = resources
        .iter()
        .filter(|r| {
            let id = identity_of(r);
            key.identity.iter().all(|(k, v)| id.get(k) == Some(v))
                // Extra identity the key does not give tells resources apart.
                && r["extraIdentity"]
                    .as_object()
                    .is_none_or(|m| m.keys().all(|k| key.identity.contains_key(k)))
        })
        .collect();
    let r = match matching.as_slice() {
        [one] => *one,
        [] => {
            let names: Vec<&str> = resources
                .iter()
                .filter_map(|r| r["name"].as_str())
                .collect();
            return Err(resource_error(
                key,
                format!("no such resource (the component has {names:?})"),
            ));
        }
        _ => {
            return Err(resource_error(
                key,
                format!(
                    "{} resources match; the key must give their extra identity",
                    matching.len()
                ),
            ));
        }
    };
    access(&r["access"], key, true)
}

fn access(a: &Value, key: &ResourceKey, allow_global: bool) -> Result<Access, OcmError> {
    let ty = a["type"].as_str().unwrap_or_default();
    let ty = ty.split_once('/').map_or(ty, |(t, _)| t);
    match ty {
        "ociArtifact" | "ociRegistry" | "OCIImage" => {
            let image = a["imageReference"]
                .as_str()
                .ok_or_else(|| resource_error(key, "access.imageReference missing"))?;
            OciRef::parse(image)
                .map(Access::Oci)
                .map_err(|e| resource_error(key, format!("access.imageReference: {e}")))
        }
        "localBlob" => {
            if allow_global && a["globalAccess"].is_object() {
                // Where the blob was also copied to (an OCI artifact) is as good.
                if let Ok(global) = access(&a["globalAccess"], key, false) {
                    return Ok(global);
                }
            }
            let digest = a["localReference"]
                .as_str()
                .filter(|d| d.starts_with("sha256:"))
                .ok_or_else(|| {
                    resource_error(key, "access.localReference: expected a sha256 digest")
                })?;
            Ok(Access::LocalBlob {
                digest: digest.to_string(),
                media_type: a["mediaType"].as_str().unwrap_or_default().to_string(),
            })
        }
        "helm" => {
            let url = a["helmRepository"]
                .as_str()
                .ok_or_else(|| resource_error(key, "access.helmRepository missing"))?;
            let chart = a["helmChart"]
                .as_str()
                .ok_or_else(|| resource_error(key, "access.helmChart missing (name:version)"))?;
            let (name, version) = chart.split_once(':').unwrap_or((chart, ""));
            Ok(Access::HelmRepo {
                url: url.to_string(),
                name: name.to_string(),
                version: version.to_string(),
            })
        }
        other => Err(resource_error(
            key,
            format!("access type {other:?} is not supported (ociArtifact, localBlob, helm)"),
        )),
    }
}

/// Whether a local blob of `media_type` is an OCI artifact in artifact-set format (else it
/// is taken for the chart's gzipped tar itself).
pub fn is_artifact_set(media_type: &str) -> bool {
    media_type.starts_with(ARTIFACT_SET)
        || media_type.starts_with("application/vnd.oci.image.index.v1+tar")
}

/// The manifest digest an artifact set's `index.json` names (its only or first manifest).
pub fn artifact_set_manifest(index: &Value) -> Result<String, OcmError> {
    index["manifests"]
        .as_array()
        .and_then(|m| m.first())
        .and_then(|m| m["digest"].as_str())
        .filter(|d| d.starts_with("sha256:"))
        .map(str::to_string)
        .ok_or(OcmError::Document(
            "the artifact set's index.json names no sha256 manifest",
        ))
}

/// The file of blob `digest` in an artifact set.
pub fn artifact_set_blob(digest: &str) -> String {
    format!("blobs/{}", digest.replacen(':', ".", 1))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key(name: &str, extra: &[(&str, &str)]) -> ResourceKey {
        let mut identity: BTreeMap<String, String> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        identity.insert("name".into(), name.into());
        ResourceKey {
            component: "example.com/app".into(),
            version: "1.0.0+1".into(),
            identity,
        }
    }

    #[test]
    fn keys_decode_as_get_resource_key_writes_them_and_errors_say_what_is_missing() {
        let yaml = "component:\n  name: example.com/app\n  version: 1.0.0+1\nresource:\n  name: chart\n  flavour: small\n";
        let k = ResourceKey::decode(&base64::engine::general_purpose::STANDARD.encode(yaml))
            .expect("key");
        assert_eq!(k, key("chart", &[("flavour", "small")]));
        assert_eq!(ResourceKey::decode(&k.encode()), Ok(k));
        for (text, want) in [
            ("%%%", "not a resource key"),
            ("e30=", "no component.name"), // {}
            (
                &base64::engine::general_purpose::STANDARD
                    .encode("component: {name: a, version: '1'}"),
                "no resource identity",
            ),
            (
                &base64::engine::general_purpose::STANDARD
                    .encode("component: {name: a, version: '1'}\nresource: {flavour: x}"),
                "no resource.name",
            ),
        ] {
            let e = ResourceKey::decode(text).expect_err(text);
            assert!(e.to_string().contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn repositories_and_component_versions_map_to_oci_references() {
        let repo = Repository::of(
            &json!({"type": "OCIRegistry", "baseUrl": "https://ghcr.io/acme/ocm", "subPath": "prod"}),
            "repositoryContext",
        )
        .expect("repository");
        assert_eq!(repo.registry, "ghcr.io");
        assert_eq!(repo.path, "acme/ocm/prod");
        let r = repo.component("example.com/app", "1.0.0+1");
        assert_eq!(
            r.to_string(),
            "ghcr.io/acme/ocm/prod/component-descriptors/example.com/app:1.0.0.build-1"
        );
        let bare = Repository::of(
            &json!({"type": "ociRegistry", "baseUrl": "localhost:5000"}),
            "f",
        )
        .expect("bare");
        assert_eq!(
            bare.component("a", "1").to_string(),
            "localhost:5000/component-descriptors/a:1"
        );
        for (ctx, want) in [
            (Value::Null, "f: missing"),
            (
                json!({"type": "local", "filePath": "x"}),
                "f.type: \"local\"",
            ),
            (json!({"type": "OCIRegistry"}), "f.baseUrl: missing"),
            (
                json!({"type": "OCIRegistry", "baseUrl": "r.io", "componentNameMapping": "sha256-digest"}),
                "f.componentNameMapping",
            ),
        ] {
            let e = Repository::of(&ctx, "f").expect_err("refused");
            assert!(e.to_string().starts_with(want), "{ctx}: {e}");
        }
    }

    #[test]
    fn resolvers_of_an_ocmconfig_are_tried_by_prefix_and_priority() {
        let text = "type: generic.config.ocm.software/v1\nconfigurations:\n- type: credentials.config.ocm.software\n  consumers: []\n- type: ocm.config.ocm.software\n  resolvers:\n  - repository: {type: OCIRegistry, baseUrl: ghcr.io, subPath: one}\n    prefix: github.com/acme.org/component\n    priority: 10\n  - repository: {type: OCIRegistry, baseUrl: docker.io, subPath: two}\n    prefix: github.com/acme.org\n    priority: 20\n  - repository: {type: OCIRegistry, baseUrl: r.io}\n";
        let rs = OcmConfig::parse(text, ".ocmconfig")
            .expect("resolvers")
            .resolvers;
        assert_eq!(rs.len(), 3);
        let order = |name: &str| -> Vec<String> {
            lookup_order(&rs, name)
                .into_iter()
                .map(|r| format!("{}/{}", r.registry, r.path))
                .collect()
        };
        assert_eq!(
            order("github.com/acme.org/component"),
            ["docker.io/two", "ghcr.io/one", "r.io/"]
        );
        assert_eq!(
            order("github.com/acme.org/componentx"),
            ["docker.io/two", "r.io/"],
            "a prefix ends at a path segment"
        );
        assert_eq!(order("example.com/other"), ["r.io/"]);
        for (bad, want) in [
            (
                "configurations: 3",
                ".ocmconfig.configurations: expected a list",
            ),
            (
                "configurations: [{type: ocm.config.ocm.software, resolvers: [{repository: {type: local}}]}]",
                ".ocmconfig.configurations[0].resolvers[0].repository.type",
            ),
            (
                "configurations: [{type: ocm.config.ocm.software, resolvers: [{priority: x, repository: {type: OCIRegistry, baseUrl: r.io}}]}]",
                ".ocmconfig.configurations[0].resolvers[0].priority",
            ),
        ] {
            let e = OcmConfig::parse(bad, ".ocmconfig").expect_err(bad);
            assert!(e.to_string().starts_with(want), "{bad}: {e}");
        }
    }

    #[test]
    fn credentials_of_an_ocmconfig_become_registry_logins() {
        let text = "configurations:\n- type: credentials.config.ocm.software\n  consumers:\n  - identity: {type: OCIRegistry, hostname: ghcr.io}\n    credentials:\n    - type: Credentials\n      properties: {username: u, password: p}\n  - identity: {type: OCIRegistry, hostname: localhost, port: '5000'}\n    credentials:\n    - type: Credentials\n      properties: {identityToken: refresh}\n  - identity: {type: Github, hostname: github.com}\n    credentials: [{type: Credentials, properties: {token: t}}]\n- type: ocm.config.ocm.software\n  resolvers: []\n";
        let configs = OcmConfig::parse(text, ".ocmconfig")
            .expect("credentials")
            .logins;
        assert_eq!(configs.len(), 2, "{configs:?}");
        assert_eq!(
            crate::oci::registry_login_for(&configs[0], "ghcr.io"),
            Some(crate::oci::Login::Basic("Basic dTpw".into()))
        );
        assert_eq!(
            crate::oci::registry_login_for(&configs[1], "localhost:5000"),
            Some(crate::oci::Login::IdentityToken("refresh".into()))
        );
        let bad = "configurations: [{type: credentials.config.ocm.software, consumers: [{identity: {type: OCIRegistry, hostname: r.io}, credentials: [{properties: {username: u}}]}]}]";
        let e = OcmConfig::parse(bad, ".ocmconfig").expect_err("refused");
        assert!(
            e.to_string()
                .starts_with(".ocmconfig.configurations[0].consumers[0].credentials[0].properties"),
            "{e}"
        );
    }

    #[test]
    fn docker_configs_of_an_ocmconfig_are_its_credential_repositories() {
        let text = r#"configurations:
- type: credentials.config.ocm.software
  repositories:
  - repository:
      type: DockerConfig/v1
      dockerConfig: {auths: {ghcr.io: {auth: dTpw}}}
  - repository:
      type: DockerConfig
      dockerConfig: '{"auths": {"r.io": {"username": "a", "password": "b"}}}'
  - repository: {type: DockerConfig/v1, dockerConfigFile: ~/.docker/config.json}
  - repository: {type: DockerConfig/v1, dockerConfigFile: /etc/bosun/docker.json, propagateConsumerIdentity: true}
  - repository: {type: DockerConfig/v1, dockerConfigFile: /ignored.json, propagateConsumerIdentity: false}
  - repository: {type: HashiCorpVault, serverURL: 'https://vault'}
"#;
        let home = Some(std::path::PathBuf::from("/home/bosun"));
        let configs = OcmConfig::parse_with_home(text, ".ocmconfig", home.clone())
            .expect("repositories")
            .docker_configs;
        let f = ".ocmconfig.configurations[0].repositories";
        assert_eq!(
            configs,
            [
                DockerConfigSource::Inline(json!({"auths": {"ghcr.io": {"auth": "dTpw"}}})),
                DockerConfigSource::Inline(
                    json!({"auths": {"r.io": {"username": "a", "password": "b"}}})
                ),
                DockerConfigSource::File {
                    path: "/home/bosun/.docker/config.json".into(),
                    field: format!("{f}[2].repository.dockerConfigFile"),
                },
                DockerConfigSource::File {
                    path: "/etc/bosun/docker.json".into(),
                    field: format!("{f}[3].repository.dockerConfigFile"),
                },
            ]
        );
        for (bad, want) in [
            (
                "repositories: [{repository: {type: DockerConfig}}]",
                "[0].repository: expected dockerConfig or dockerConfigFile",
            ),
            (
                "repositories: [{repository: {type: DockerConfig, dockerConfig: '{not json'}}]",
                "[0].repository.dockerConfig: expected a docker config",
            ),
            (
                "repositories: [{repository: {type: DockerConfig, dockerConfig: [1]}}]",
                "[0].repository.dockerConfig: expected a docker config",
            ),
            (
                "repositories: [{repository: {type: DockerConfig, dockerConfigFile: 3}}]",
                "[0].repository.dockerConfigFile: expected a path",
            ),
            (
                "repositories: [{repository: {type: DockerConfig, dockerConfigFile: /f, propagateConsumerIdentity: 'yes'}}]",
                "[0].repository.propagateConsumerIdentity: expected true or false",
            ),
            (
                "repositories: [{repository: {}}]",
                "[0].repository.type: missing",
            ),
            ("repositories: {}", ": expected a list"),
        ] {
            let text =
                format!("configurations: [{{type: credentials.config.ocm.software, {bad}}}]");
            let e = OcmConfig::parse_with_home(&text, ".ocmconfig", home.clone()).expect_err(bad);
            assert!(
                e.to_string().starts_with(&format!("{f}{want}")),
                "{bad}: {e}"
            );
        }
        let e = OcmConfig::parse_with_home(
            "configurations: [{type: credentials.config.ocm.software, repositories: [{repository: {type: DockerConfig, dockerConfigFile: ~/.docker/config.json}}]}]",
            ".ocmconfig",
            None,
        )
        .expect_err("no home");
        assert!(e.to_string().contains("HOME is not set"), "{e}");
    }

    #[test]
    fn the_descriptor_layer_is_the_one_the_config_names() {
        let manifest = json!({"layers": [
            {"mediaType": "application/vnd.ocm.software.component-descriptor.v2+yaml+tar", "digest": "sha256:cd"},
            {"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "digest": "sha256:chart"},
        ]});
        let config = json!({"componentDescriptorLayer": {"digest": "sha256:cd"}});
        let (d, m) = descriptor_layer(&manifest, &config).expect("layer");
        assert_eq!(d, "sha256:cd");
        assert!(descriptor_in_tar(&m));
        assert!(descriptor_layer(&manifest, &json!({})).is_err());
    }

    #[test]
    fn resources_are_found_by_identity_and_their_access_read() {
        let cd = json!({"meta": {"schemaVersion": "v2"}, "component": {
        "name": "example.com/app", "version": "1.0.0+1",
        "resources": [
            {"name": "chart", "version": "1.0.0", "type": "helmChart",
             "access": {"type": "ociArtifact", "imageReference": "ghcr.io/acme/web:1.0.0"}},
            {"name": "local", "type": "helmChart", "extraIdentity": {"flavour": "small"},
             "access": {"type": "localBlob/v1", "localReference": "sha256:aa", "mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip"}},
            {"name": "local", "type": "helmChart", "extraIdentity": {"flavour": "big"},
             "access": {"type": "localBlob", "localReference": "sha256:bb",
                        "globalAccess": {"type": "ociArtifact", "imageReference": "ghcr.io/acme/big:2"}}},
            {"name": "repo", "access": {"type": "helm", "helmRepository": "https://charts.example.com", "helmChart": "web:2.0.0"}},
            {"name": "odd", "access": {"type": "s3", "bucket": "b"}},
        ]}});
        assert_eq!(
            resource_access(&cd, &key("chart", &[])),
            Ok(Access::Oci(
                OciRef::parse("ghcr.io/acme/web:1.0.0").expect("ref")
            ))
        );
        assert_eq!(
            resource_access(&cd, &key("local", &[("flavour", "small")])),
            Ok(Access::LocalBlob {
                digest: "sha256:aa".into(),
                media_type: "application/vnd.cncf.helm.chart.content.v1.tar+gzip".into()
            })
        );
        assert_eq!(
            resource_access(&cd, &key("local", &[("flavour", "big")])),
            Ok(Access::Oci(
                OciRef::parse("ghcr.io/acme/big:2").expect("ref")
            )),
            "a global access is used"
        );
        assert_eq!(
            resource_access(&cd, &key("repo", &[])),
            Ok(Access::HelmRepo {
                url: "https://charts.example.com".into(),
                name: "web".into(),
                version: "2.0.0".into()
            })
        );
        for (k, want) in [
            (key("nope", &[]), "no such resource"),
            (key("local", &[]), "no such resource"),
            (key("odd", &[]), "access type \"s3\""),
        ] {
            let e = resource_access(&cd, &k).expect_err("refused");
            assert!(e.to_string().contains(want), "{k}: {e}");
        }
        let v3 = json!({"apiVersion": "ocm.software/v3alpha1", "kind": "ComponentVersion",
            "metadata": {"name": "example.com/app", "version": "1.0.0+1"},
            "spec": {"resources": [{"name": "chart", "access": {"type": "ociArtifact", "imageReference": "r.io/c:1"}}]}});
        let text = serde_json::to_vec(&v3).expect("json");
        let read = descriptor(&text, &key("chart", &[])).expect("v3 descriptor");
        assert!(matches!(
            resource_access(&read, &key("chart", &[])),
            Ok(Access::Oci(_))
        ));
        let other = descriptor(
            &text,
            &ResourceKey {
                version: "2".into(),
                ..key("chart", &[])
            },
        );
        assert!(other.is_err_and(|e| e.to_string().contains("not example.com/app:2")));
    }

    #[test]
    fn artifact_sets_name_their_manifest_and_blobs() {
        assert!(is_artifact_set(
            "application/vnd.oci.image.manifest.v1+tar+gzip"
        ));
        assert!(!is_artifact_set(
            "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
        ));
        assert_eq!(
            artifact_set_manifest(&json!({"manifests": [{"digest": "sha256:ab"}]})),
            Ok("sha256:ab".into())
        );
        assert_eq!(artifact_set_blob("sha256:ab"), "blobs/sha256.ab");
    }
}
