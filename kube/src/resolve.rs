//! Resolving `apiVersion` + `kind` as hooks write them (Kind, plural or short name, any
//! case, apiVersion optional) to the API resource to call, through discovery.
//!
//! Discovery is fetched once and cached; a miss refreshes it once, because the kind may be
//! a CRD created a moment ago (by a Helm release or by an earlier patcher operation).

use std::sync::{Arc, RwLock};

use futures::future::join_all;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
use kube::core::discovery::v2::{APIGroupDiscoveryList, APIResourceDiscovery};
use kube::discovery::ApiResource;

/// The API resource a kind resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Group, version, Kind and plural to build URLs with.
    pub resource: ApiResource,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Subresource names served for it (`status`, `scale`, …).
    pub subresources: Vec<String>,
}

/// Why a kind could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No served resource matches the kind where it was looked up.
    #[error(
        "kind {kind:?}{} is not served by the cluster (looked in {looked_in})",
        show_version(api_version)
    )]
    NotFound {
        /// The kind as given.
        kind: String,
        /// The apiVersion as given.
        api_version: Option<String>,
        /// Which groups and versions were searched.
        looked_in: String,
    },
    /// The apiVersion is not `version` or `group/version`.
    #[error(
        "invalid apiVersion {api_version:?} for kind {kind:?}: expected \"version\", \"group/version\" or a group name"
    )]
    InvalidApiVersion {
        /// The kind as given.
        kind: String,
        /// The apiVersion as given.
        api_version: String,
    },
    /// The discovery endpoints themselves could not be read.
    #[error(
        "cannot resolve kind {kind:?}{}: discovery request {what} failed: {source}",
        show_version(api_version)
    )]
    Discovery {
        /// The kind as given.
        kind: String,
        /// The apiVersion as given.
        api_version: Option<String>,
        /// The discovery path that failed.
        what: String,
        /// The client error.
        source: kube::Error,
    },
}

fn show_version(api_version: &Option<String>) -> String {
    match api_version {
        Some(v) => format!(" (apiVersion {v:?})"),
        None => String::new(),
    }
}

/// Resolves kinds through the cluster's discovery documents; clones share one cache.
#[derive(Clone)]
pub struct KindResolver {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    /// The last discovery result and its generation.
    catalog: RwLock<Option<(u64, Arc<Catalog>)>>,
    /// Held while discovery is fetched, so concurrent misses fetch it once.
    refreshing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for KindResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindResolver").finish_non_exhaustive()
    }
}

impl KindResolver {
    /// A resolver with an empty cache; discovery is fetched on the first call.
    pub fn new(client: kube::Client) -> KindResolver {
        KindResolver {
            inner: Arc::new(Inner {
                client,
                catalog: RwLock::new(None),
                refreshing: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Resolves an optional apiVersion (`"v1"`, `"apps/v1"`, or a bare group name) and a
    /// kind given as Kind, plural, singular or short name, case-insensitively. Without an
    /// apiVersion the first group that has it wins, core first, each group's preferred
    /// version first. On a miss discovery is refreshed once (a CRD may just have been
    /// created).
    pub async fn resolve(
        &self,
        api_version: Option<&str>,
        kind: &str,
    ) -> Result<Resolved, ResolveError> {
        let api_version = api_version.map(str::trim).filter(|v| !v.is_empty());
        let scope = Scope::parse(api_version).ok_or_else(|| ResolveError::InvalidApiVersion {
            kind: kind.to_string(),
            api_version: api_version.unwrap_or_default().to_string(),
        })?;
        let cached = self.cached();
        let seen = match &cached {
            Some((generation, catalog)) => {
                if let Some(found) = catalog.find(&scope, kind) {
                    return Ok(found);
                }
                Some(*generation)
            }
            None => None,
        };
        let catalog = self.refresh(seen, api_version, kind).await?;
        catalog
            .find(&scope, kind)
            .ok_or_else(|| ResolveError::NotFound {
                kind: kind.to_string(),
                api_version: api_version.map(str::to_string),
                looked_in: catalog.describe(&scope),
            })
    }

    /// Fetches discovery again now (metacontroller's `--discovery-interval`): kinds and
    /// versions added or removed since are seen without waiting for a miss.
    pub async fn rediscover(&self) -> Result<(), ResolveError> {
        let seen = self.cached().map(|(generation, _)| generation);
        self.refresh(seen, None, "(periodic discovery)")
            .await
            .map(|_| ())
    }

    fn cached(&self) -> Option<(u64, Arc<Catalog>)> {
        self.inner
            .catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Fetches discovery unless another caller did since generation `seen`.
    async fn refresh(
        &self,
        seen: Option<u64>,
        api_version: Option<&str>,
        kind: &str,
    ) -> Result<Arc<Catalog>, ResolveError> {
        let _guard = self.inner.refreshing.lock().await;
        if let Some((generation, catalog)) = self.cached()
            && Some(generation) != seen
        {
            return Ok(catalog);
        }
        let catalog = Arc::new(
            discover(&self.inner.client)
                .await
                .map_err(|(what, source)| ResolveError::Discovery {
                    kind: kind.to_string(),
                    api_version: api_version.map(str::to_string),
                    what,
                    source,
                })?,
        );
        let mut slot = self
            .inner
            .catalog
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let generation = slot.as_ref().map_or(0, |(g, _)| g + 1);
        *slot = Some((generation, catalog.clone()));
        Ok(catalog)
    }
}

/// Reads the discovery documents: aggregated (`/api` and `/apis` as
/// `apidiscovery.k8s.io/v2`, two requests) where the server serves them, else `/api`,
/// `/apis` and every group version's resource list (one request each: two dozen on a
/// plain kube-apiserver). A group version whose list fails, or that aggregated discovery
/// marks stale (an aggregated API that is down), is left out and logged, like kubectl does.
async fn discover(client: &kube::Client) -> Result<Catalog, (String, kube::Error)> {
    if let Some(catalog) = discover_aggregated(client).await {
        return Ok(catalog);
    }
    let core = client
        .list_core_api_versions()
        .await
        .map_err(|e| ("GET /api".to_string(), e))?;
    let groups = client
        .list_api_groups()
        .await
        .map_err(|e| ("GET /apis".to_string(), e))?;

    let mut wanted: Vec<(String, String)> = core
        .versions
        .iter()
        .map(|v| (String::new(), v.clone()))
        .collect();
    for g in &groups.groups {
        let preferred = g.preferred_version.as_ref().map(|p| p.version.as_str());
        let mut versions: Vec<&str> = preferred.into_iter().collect();
        versions.extend(
            g.versions
                .iter()
                .map(|v| v.version.as_str())
                .filter(|v| Some(*v) != preferred),
        );
        wanted.extend(
            versions
                .into_iter()
                .map(|v| (g.name.clone(), v.to_string())),
        );
    }
    let lists = join_all(wanted.iter().map(|(group, version)| async move {
        if group.is_empty() {
            client.list_core_api_resources(version).await
        } else {
            client
                .list_api_group_resources(&format!("{group}/{version}"))
                .await
        }
    }))
    .await;

    let mut catalog = Catalog::default();
    for ((group, version), list) in wanted.into_iter().zip(lists) {
        match list {
            Ok(list) => catalog.add(&group, &version, list.resources),
            Err(e) => {
                let gv = group_version(&group, &version);
                tracing::warn!("discovery of {gv} failed, its kinds are unknown for now: {e}");
                catalog.failed.push(gv);
            }
        }
    }
    Ok(catalog)
}

/// Aggregated discovery; `None` when the server does not serve it (it then answers with
/// the legacy documents, which have no `items`) or a request fails, for the caller to read
/// the legacy documents instead.
async fn discover_aggregated(client: &kube::Client) -> Option<Catalog> {
    let (core, groups) = futures::join!(
        client.list_core_api_versions_aggregated(),
        client.list_api_groups_aggregated()
    );
    aggregated_catalog(&core.ok()?, &groups.ok()?)
}

/// The catalog of the aggregated documents of `/api` and `/apis`; `None` when `/api`'s
/// has no group (a legacy document read as an aggregated one).
fn aggregated_catalog(
    core: &APIGroupDiscoveryList,
    groups: &APIGroupDiscoveryList,
) -> Option<Catalog> {
    if core.items.is_empty() {
        return None;
    }
    let mut catalog = Catalog::default();
    for g in core.items.iter().chain(&groups.items) {
        let group = g
            .metadata
            .as_ref()
            .and_then(|m| m.name.clone())
            .unwrap_or_default();
        for v in &g.versions {
            let Some(version) = &v.version else { continue };
            if v.freshness.as_deref() == Some("Stale") {
                let gv = group_version(&group, version);
                tracing::warn!("discovery of {gv} is stale, its kinds are unknown for now");
                catalog.failed.push(gv);
                continue;
            }
            let resources = v.resources.iter().flat_map(legacy_resources).collect();
            catalog.add(&group, version, resources);
        }
    }
    Some(catalog)
}

/// An aggregated discovery entry as the legacy documents list it: the resource, then each
/// subresource as `plural/subresource`.
fn legacy_resources(r: &APIResourceDiscovery) -> Vec<APIResource> {
    let Some(name) = &r.resource else {
        return Vec::new();
    };
    let kind = r
        .response_kind
        .as_ref()
        .and_then(|k| k.kind.clone())
        .unwrap_or_default();
    let namespaced = r.scope.as_deref() == Some("Namespaced");
    let listed = |v: &[String]| (!v.is_empty()).then(|| v.to_vec());
    let mut out = vec![APIResource {
        name: name.clone(),
        singular_name: r.singular_resource.clone().unwrap_or_default(),
        namespaced,
        kind: kind.clone(),
        verbs: r.verbs.clone(),
        short_names: listed(&r.short_names),
        categories: listed(&r.categories),
        ..Default::default()
    }];
    out.extend(r.subresources.iter().filter_map(|sub| {
        Some(APIResource {
            name: format!("{name}/{}", sub.subresource.as_ref()?),
            namespaced,
            kind: sub
                .response_kind
                .as_ref()
                .and_then(|k| k.kind.clone())
                .unwrap_or_else(|| kind.clone()),
            verbs: sub.verbs.clone(),
            ..Default::default()
        })
    }));
    out
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// Where to look for a kind.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope<'a> {
    /// Every group, core first.
    Any,
    /// Every version of one group, preferred first.
    Group(&'a str),
    /// One group version (`""` is core).
    GroupVersion(&'a str, &'a str),
}

impl<'a> Scope<'a> {
    /// `None`/`""` → any; `v1`-like → core version; `group/version`; else a group name.
    fn parse(api_version: Option<&'a str>) -> Option<Scope<'a>> {
        let Some(v) = api_version else {
            return Some(Scope::Any);
        };
        match v.split_once('/') {
            Some((g, ver)) if !g.is_empty() && !ver.is_empty() && !ver.contains('/') => {
                Some(Scope::GroupVersion(g, ver))
            }
            Some(_) => None,
            None if looks_like_version(v) => Some(Scope::GroupVersion("", v)),
            None => Some(Scope::Group(v)),
        }
    }
}

/// `v1`, `v2beta1`, `v1alpha3`.
fn looks_like_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return false;
    }
    let tail = &rest[digits..];
    let level = tail
        .strip_prefix("alpha")
        .or_else(|| tail.strip_prefix("beta"));
    match level {
        None => tail.is_empty(),
        Some(n) => !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()),
    }
}

/// A version and the resources it serves.
type VersionResources = (String, Vec<APIResource>);

/// The discovery documents, in lookup order.
#[derive(Debug, Default)]
struct Catalog {
    /// Core first, then `/apis` order; each group's versions preferred first.
    groups: Vec<(String, Vec<VersionResources>)>,
    /// Group versions whose resource list could not be read.
    failed: Vec<String>,
}

impl Catalog {
    fn add(&mut self, group: &str, version: &str, resources: Vec<APIResource>) {
        let entry = (version.to_string(), resources);
        match self.groups.iter_mut().find(|(g, _)| g == group) {
            Some((_, versions)) => versions.push(entry),
            None => self.groups.push((group.to_string(), vec![entry])),
        }
    }

    fn find(&self, scope: &Scope<'_>, kind: &str) -> Option<Resolved> {
        let groups = self.groups.iter().filter(|(g, _)| match scope {
            Scope::Any => true,
            Scope::Group(want) | Scope::GroupVersion(want, _) => g == want,
        });
        for (group, versions) in groups {
            let versions = versions.iter().filter(|(v, _)| match scope {
                Scope::GroupVersion(_, want) => v == want,
                _ => true,
            });
            for (version, resources) in versions {
                let hit = resources
                    .iter()
                    .find(|r| !r.name.contains('/') && names_kind(r, kind));
                if let Some(r) = hit {
                    return Some(resolved(group, version, r, resources));
                }
            }
        }
        None
    }

    /// Where [`Catalog::find`] looked, for error messages.
    fn describe(&self, scope: &Scope<'_>) -> String {
        let mut s = match scope {
            Scope::Any => "every served group, core first".to_string(),
            Scope::Group(g) => match self.groups.iter().find(|(name, _)| name == g) {
                Some((_, versions)) => {
                    let vs: Vec<&str> = versions.iter().map(|(v, _)| v.as_str()).collect();
                    format!("group {g:?}, versions {}", vs.join(", "))
                }
                None => format!("group {g:?}, which the cluster does not serve"),
            },
            Scope::GroupVersion(g, v) => {
                let gv = group_version(g, v);
                let served = self
                    .groups
                    .iter()
                    .any(|(name, vs)| name == g && vs.iter().any(|(ver, _)| ver == v));
                if served {
                    gv
                } else {
                    format!("{gv}, which the cluster does not serve")
                }
            }
        };
        if !self.failed.is_empty() {
            s.push_str(&format!(
                "; discovery failed for {}",
                self.failed.join(", ")
            ));
        }
        s
    }
}

/// Kind, plural, singular or a short name, ignoring case (like kubectl and shell-operator).
fn names_kind(r: &APIResource, kind: &str) -> bool {
    let eq = |s: &str| !s.is_empty() && s.eq_ignore_ascii_case(kind);
    eq(&r.kind)
        || eq(&r.name)
        || eq(&r.singular_name)
        || r.short_names.iter().flatten().any(|s| eq(s))
}

fn resolved(group: &str, version: &str, r: &APIResource, all: &[APIResource]) -> Resolved {
    let prefix = format!("{}/", r.name);
    Resolved {
        resource: ApiResource {
            group: group.to_string(),
            version: version.to_string(),
            api_version: group_version(group, version),
            kind: r.kind.clone(),
            plural: r.name.clone(),
        },
        namespaced: r.namespaced,
        subresources: all
            .iter()
            .filter_map(|s| s.name.strip_prefix(&prefix).map(str::to_string))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list(gv: &str, resources: serde_json::Value) -> Vec<APIResource> {
        serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList>(
            json!({"groupVersion": gv, "resources": resources}),
        )
        .expect("resource list")
        .resources
    }

    fn res(name: &str, kind: &str, namespaced: bool, short: &[&str]) -> serde_json::Value {
        json!({"name": name, "singularName": kind.to_lowercase(), "kind": kind,
               "namespaced": namespaced, "verbs": ["get"], "shortNames": short})
    }

    fn catalog() -> Catalog {
        let mut c = Catalog::default();
        c.add(
            "",
            "v1",
            list(
                "v1",
                json!([
                    res("pods", "Pod", true, &["po"]),
                    res("pods/status", "Pod", true, &[]),
                    res("pods/log", "Pod", true, &[]),
                    res("namespaces", "Namespace", false, &["ns"]),
                    res("events", "Event", true, &["ev"]),
                ]),
            ),
        );
        c.add(
            "apps",
            "v1",
            list(
                "apps/v1",
                json!([
                    res("deployments", "Deployment", true, &["deploy"]),
                    res("deployments/scale", "Scale", true, &[]),
                ]),
            ),
        );
        c.add(
            "events.k8s.io",
            "v1",
            list(
                "events.k8s.io/v1",
                json!([res("events", "Event", true, &["ev"])]),
            ),
        );
        c.add(
            "example.com",
            "v2",
            list(
                "example.com/v2",
                json!([res("widgets", "Widget", false, &["wd"])]),
            ),
        );
        c.add(
            "example.com",
            "v1beta1",
            list(
                "example.com/v1beta1",
                json!([
                    res("widgets", "Widget", false, &["wd"]),
                    res("gadgets", "Gadget", true, &[])
                ]),
            ),
        );
        c
    }

    fn find(api_version: Option<&str>, kind: &str) -> Option<Resolved> {
        catalog().find(&Scope::parse(api_version).expect("scope"), kind)
    }

    /// [`catalog`]'s documents as aggregated discovery serves them, with a stale group.
    fn aggregated() -> Catalog {
        let resource =
            |name: &str, kind: &str, scope: &str, short: &[&str], subs: &[(&str, &str)]| {
                json!({"resource": name, "singularResource": kind.to_lowercase(),
                   "responseKind": {"group": "", "version": "", "kind": kind}, "scope": scope,
                   "verbs": ["get"], "shortNames": short,
                   "subresources": subs.iter().map(|(sub, kind)| json!({"subresource": sub,
                       "responseKind": {"kind": kind}, "verbs": ["get"]})).collect::<Vec<_>>()})
            };
        let doc = |items: serde_json::Value| -> APIGroupDiscoveryList {
            serde_json::from_value(json!({"kind": "APIGroupDiscoveryList", "items": items}))
                .expect("aggregated discovery")
        };
        let core = doc(
            json!([{"metadata": {}, "versions": [{"version": "v1", "freshness": "Current", "resources": [
                resource("pods", "Pod", "Namespaced", &["po"], &[("status", "Pod"), ("log", "Pod")]),
                resource("namespaces", "Namespace", "Cluster", &["ns"], &[]),
                resource("events", "Event", "Namespaced", &["ev"], &[]),
            ]}]}]),
        );
        let groups = doc(json!([
            {"metadata": {"name": "apps"}, "versions": [{"version": "v1", "resources": [
                resource("deployments", "Deployment", "Namespaced", &["deploy"], &[("scale", "Scale")])]}]},
            {"metadata": {"name": "events.k8s.io"}, "versions": [{"version": "v1", "resources": [
                resource("events", "Event", "Namespaced", &["ev"], &[])]}]},
            {"metadata": {"name": "example.com"}, "versions": [
                {"version": "v2", "resources": [resource("widgets", "Widget", "Cluster", &["wd"], &[])]},
                {"version": "v1beta1", "resources": [
                    resource("widgets", "Widget", "Cluster", &["wd"], &[]),
                    resource("gadgets", "Gadget", "Namespaced", &[], &[])]}]},
            {"metadata": {"name": "metrics.example.com"}, "versions": [{"version": "v1",
                "freshness": "Stale", "resources": [resource("readings", "Reading", "Namespaced", &[], &[])]}]},
        ]));
        aggregated_catalog(&core, &groups).expect("an aggregated catalog")
    }

    #[test]
    fn aggregated_discovery_resolves_as_the_legacy_documents_do() {
        let (legacy, aggregated) = (catalog(), aggregated());
        for (api_version, kind) in [
            (None, "Pod"),
            (None, "po"),
            (None, "pods"),
            (None, "deploy"),
            (None, "ns"),
            (None, "Event"),
            (Some("events.k8s.io/v1"), "events"),
            (None, "wd"),
            (Some("example.com"), "Widget"),
            (Some("example.com/v1beta1"), "widgets"),
            (None, "Gadget"),
            (None, "Scale"),
            (None, "pods/status"),
            (None, "Reading"),
        ] {
            let scope = Scope::parse(api_version).expect("scope");
            assert_eq!(
                format!("{:?}", aggregated.find(&scope, kind)),
                format!("{:?}", legacy.find(&scope, kind)),
                "{api_version:?} {kind}"
            );
        }
        assert_eq!(aggregated.failed, vec!["metrics.example.com/v1"]);
        // A legacy document read as an aggregated one has no items: the legacy path reads it.
        let legacy_doc: APIGroupDiscoveryList =
            serde_json::from_value(json!({"kind": "APIVersions", "versions": ["v1"]}))
                .expect("legacy");
        assert!(aggregated_catalog(&legacy_doc, &legacy_doc).is_none());
    }

    #[test]
    fn kind_plural_singular_and_short_names_ignore_case() {
        for name in ["Pod", "pod", "PODS", "po", "Po"] {
            let r = find(None, name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(r.resource.kind, "Pod");
            assert_eq!(r.resource.plural, "pods");
            assert_eq!(r.resource.api_version, "v1");
            assert!(r.namespaced);
            assert_eq!(r.subresources, vec!["status", "log"]);
        }
        let r = find(None, "deploy").expect("deploy");
        assert_eq!(r.resource.api_version, "apps/v1");
        assert_eq!(r.subresources, vec!["scale"]);
        assert!(!find(None, "ns").expect("ns").namespaced);
    }

    #[test]
    fn subresources_are_not_kinds() {
        assert!(find(None, "Scale").is_none());
        assert!(find(None, "pods/status").is_none());
    }

    #[test]
    fn core_wins_without_api_version() {
        assert_eq!(find(None, "Event").expect("event").resource.group, "");
        let r = find(Some("events.k8s.io/v1"), "events").expect("events");
        assert_eq!(r.resource.api_version, "events.k8s.io/v1");
    }

    #[test]
    fn preferred_version_first_then_others() {
        assert_eq!(find(None, "wd").expect("wd").resource.version, "v2");
        assert_eq!(
            find(Some("example.com"), "Widget")
                .expect("group")
                .resource
                .version,
            "v2"
        );
        let r = find(Some("example.com/v1beta1"), "widgets").expect("v1beta1");
        assert_eq!(r.resource.api_version, "example.com/v1beta1");
        assert_eq!(
            find(None, "gadget").expect("gadget").resource.version,
            "v1beta1"
        );
    }

    #[test]
    fn api_version_restricts_the_search() {
        assert!(find(Some("apps/v1"), "Pod").is_none());
        assert!(find(Some("v1"), "Deployment").is_none());
        assert!(find(Some("apps/v2"), "Deployment").is_none());
        assert!(find(Some("v1"), "pods").is_some());
    }

    #[test]
    fn api_version_forms() {
        assert_eq!(Scope::parse(None), Some(Scope::Any));
        assert_eq!(
            Scope::parse(Some("v1")),
            Some(Scope::GroupVersion("", "v1"))
        );
        assert_eq!(
            Scope::parse(Some("v2beta1")),
            Some(Scope::GroupVersion("", "v2beta1"))
        );
        assert_eq!(
            Scope::parse(Some("apps/v1")),
            Some(Scope::GroupVersion("apps", "v1"))
        );
        assert_eq!(Scope::parse(Some("apps")), Some(Scope::Group("apps")));
        assert_eq!(Scope::parse(Some("a/b/c")), None);
        assert_eq!(Scope::parse(Some("/v1")), None);
        assert_eq!(Scope::parse(Some("apps/")), None);
    }

    #[test]
    fn misses_describe_where_they_looked() {
        let c = catalog();
        assert_eq!(
            c.describe(&Scope::GroupVersion("apps", "v9")),
            "apps/v9, which the cluster does not serve"
        );
        assert_eq!(
            c.describe(&Scope::Group("example.com")),
            "group \"example.com\", versions v2, v1beta1"
        );
        let err = ResolveError::NotFound {
            kind: "Nope".into(),
            api_version: Some("apps/v1".into()),
            looked_in: c.describe(&Scope::GroupVersion("apps", "v1")),
        };
        assert_eq!(
            err.to_string(),
            "kind \"Nope\" (apiVersion \"apps/v1\") is not served by the cluster (looked in apps/v1)"
        );
    }
}
