//! Installing the CRDs a subsystem needs (the lambda controllers' `metacontroller.k8s.io`,
//! the deployer's `landscaper.gardener.cloud`) when the cluster does not have them yet.

use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;

/// Why the CRDs could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The YAML of the CRDs does not parse.
    #[error("the built-in CRDs do not parse: {0}")]
    Parse(String),
    /// A CRD is not an object the API takes.
    #[error("CRD {name}: {source}")]
    Invalid {
        /// The CRD.
        name: String,
        /// What is wrong.
        source: serde_json::Error,
    },
    /// The API server refused a read or a create.
    #[error("{doing} CRD {name}: {source}")]
    Api {
        /// `reading` or `creating`.
        doing: &'static str,
        /// The CRD.
        name: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// A CRD was not served within the deadline (a real API server serves a new CRD a
    /// moment after it is created: `Established`, then in discovery).
    #[error("CRD {name} not served after {waited:?}: {missing}")]
    NotServed {
        /// The CRD.
        name: String,
        /// How long it was waited for.
        waited: std::time::Duration,
        /// What was still missing.
        missing: String,
    },
}

/// How long [`install_crds`] waits for a CRD to be served.
const SERVED_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Creates the CRDs in `yaml` that the cluster does not have yet, then waits until every
/// CRD of `yaml` is served (its `Established` condition, and each served version's resource
/// in discovery) so that the caller's discovery and watches find them; returns the names of
/// those it created.
pub async fn install_crds(client: &kube::Client, yaml: &str) -> Result<Vec<String>, CrdError> {
    let ar = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut created = Vec::new();
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(yaml).map_err(|e| CrdError::Parse(e.to_string()))?;
    let docs: Vec<serde_json::Value> = docs.into_iter().filter(|d| d.is_object()).collect();
    for doc in docs.iter().cloned() {
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let api_error = |doing, source| CrdError::Api {
            doing,
            name: name.clone(),
            source,
        };
        if api
            .get_opt(&name)
            .await
            .map_err(|e| api_error("reading", e))?
            .is_some()
        {
            continue;
        }
        let crd: DynamicObject =
            serde_json::from_value(doc).map_err(|source| CrdError::Invalid {
                name: name.clone(),
                source,
            })?;
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => created.push(name),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(api_error("creating", e)),
        }
    }
    for doc in &docs {
        wait_served(client, &api, doc).await?;
    }
    Ok(created)
}

/// Waits until the CRD `doc` is `Established` and each of its served versions lists its
/// resource in discovery.
async fn wait_served(
    client: &kube::Client,
    api: &Api<DynamicObject>,
    doc: &serde_json::Value,
) -> Result<(), CrdError> {
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let group = doc["spec"]["group"].as_str().unwrap_or_default();
    let plural = doc["spec"]["names"]["plural"].as_str().unwrap_or_default();
    let versions: Vec<&str> = doc["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"].as_bool().unwrap_or(true))
        .filter_map(|v| v["name"].as_str())
        .collect();
    let start = tokio::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(20);
    loop {
        let missing = match api.get_opt(name).await {
            Err(e) => format!("reading it: {e}"),
            Ok(None) => "it does not exist".to_string(),
            Ok(Some(crd)) if !established(&crd) => "not Established yet".to_string(),
            Ok(Some(_)) => {
                let mut missing = String::new();
                for version in &versions {
                    let gv = format!("{group}/{version}");
                    let listed = client
                        .list_api_group_resources(&gv)
                        .await
                        .is_ok_and(|list| list.resources.iter().any(|r| r.name == plural));
                    if !listed {
                        missing = format!("{plural} not in the discovery of {gv} yet");
                        break;
                    }
                }
                if missing.is_empty() {
                    return Ok(());
                }
                missing
            }
        };
        let waited = start.elapsed();
        if waited >= SERVED_WITHIN {
            return Err(CrdError::NotServed {
                name: name.to_string(),
                waited,
                missing,
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(500));
    }
}

/// Whether a CRD's `Established` condition is `True`.
fn established(crd: &DynamicObject) -> bool {
    crd.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
}
