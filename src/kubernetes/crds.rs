//! Installing the CRDs a subsystem needs (the lambda controllers' `metacontroller.k8s.io`,
//! the deployer's `landscaper.gardener.cloud`) when the cluster does not have them yet.

use anyhow::Context as _;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;

/// Creates the CRDs in `yaml` that the cluster does not have yet.
pub async fn install_crds(client: &kube::Client, yaml: &str) -> anyhow::Result<Vec<String>> {
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
        serde_saphyr::from_multiple(yaml).context("the built-in CRDs do not parse")?;
    for doc in docs.into_iter().filter(|d| d.is_object()) {
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if api
            .get_opt(&name)
            .await
            .with_context(|| format!("reading CRD {name}"))?
            .is_some()
        {
            continue;
        }
        let crd: DynamicObject =
            serde_json::from_value(doc).with_context(|| format!("CRD {name}"))?;
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => created.push(name),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating CRD {name}")),
        }
    }
    Ok(created)
}
