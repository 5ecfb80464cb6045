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
}

/// Creates the CRDs in `yaml` that the cluster does not have yet; returns their names.
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
    for doc in docs.into_iter().filter(|d| d.is_object()) {
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
    Ok(created)
}
