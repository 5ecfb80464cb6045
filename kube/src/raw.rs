//! Requests whose bodies are plain JSON values.
//!
//! The lambda controllers' and the deployer's adapters hold objects as
//! `serde_json::Value`. Going through
//! `Api<DynamicObject>` would turn each value into a `DynamicObject` (a flattened serde
//! struct, read through serde's buffering) before sending it and back after: two more
//! passes over every object, which the deployer benchmark showed among its largest costs.
//! These requests are built by kube's own request builder and sent by the same client.

use kube::api::{
    DeleteParams, DynamicObject, GetParams, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::Request;
use kube::discovery::ApiResource;
use serde_json::Value;

/// One resource type in one namespace (or cluster-wide), objects as JSON.
pub struct RawApi {
    client: kube::Client,
    request: Request,
    api_version: String,
    kind: String,
}

fn body(object: &(impl serde::Serialize + ?Sized)) -> Result<Vec<u8>, kube::Error> {
    serde_json::to_vec(object).map_err(kube::Error::SerdeError)
}

impl RawApi {
    /// `ar` in `namespace`; `None`: cluster-scoped, or every namespace for a list.
    pub fn new(client: kube::Client, ar: &ApiResource, namespace: Option<&str>) -> RawApi {
        RawApi {
            client,
            request: Request::new(<DynamicObject as kube::Resource>::url_path(ar, namespace)),
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
        }
    }

    async fn send(
        &self,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<Value, kube::Error> {
        let request = request.map_err(kube::Error::BuildRequest)?;
        self.client.request::<Value>(request).await
    }

    /// The object; `None` when it does not exist.
    pub async fn get_opt(&self, name: &str) -> Result<Option<Value>, kube::Error> {
        match self
            .send(self.request.get(name, &GetParams::default()))
            .await
        {
            Ok(o) => Ok(Some(o)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The object; NotFound is an error.
    pub async fn get(&self, name: &str) -> Result<Value, kube::Error> {
        self.send(self.request.get(name, &GetParams::default()))
            .await
    }

    /// Server-side apply (`application/apply-patch+yaml`) with `params` (field manager,
    /// force, dry run).
    pub async fn apply(
        &self,
        name: &str,
        params: &PatchParams,
        object: &Value,
    ) -> Result<Value, kube::Error> {
        self.send(self.request.patch(name, params, &Patch::Apply(object)))
            .await
    }

    /// POST.
    pub async fn create(&self, object: &Value) -> Result<Value, kube::Error> {
        self.send(self.request.create(&PostParams::default(), body(object)?))
            .await
    }

    /// PUT of the whole object.
    pub async fn replace(&self, name: &str, object: &Value) -> Result<Value, kube::Error> {
        self.send(
            self.request
                .replace(name, &PostParams::default(), body(object)?),
        )
        .await
    }

    /// PUT of the object's `/status` (any value that serializes as the object).
    pub async fn replace_status(
        &self,
        name: &str,
        object: &(impl serde::Serialize + Sync + ?Sized),
    ) -> Result<Value, kube::Error> {
        self.send(self.request.replace_subresource(
            "status",
            name,
            &PostParams::default(),
            body(object)?,
        ))
        .await
    }

    /// DELETE; what the API server answered (the object while finalizers hold it, or a
    /// Status).
    pub async fn delete(&self, name: &str, dp: &DeleteParams) -> Result<Value, kube::Error> {
        self.send(self.request.delete(name, dp)).await
    }

    /// The objects selected by `lp`, each with its `apiVersion` and `kind` (a list leaves
    /// them out of its items).
    pub async fn list(&self, lp: &ListParams) -> Result<Vec<Value>, kube::Error> {
        let mut list = self.send(self.request.list(lp)).await?;
        let Some(items) = list.get_mut("items").and_then(Value::as_array_mut) else {
            return Ok(Vec::new());
        };
        let mut items = std::mem::take(items);
        for item in &mut items {
            if let Some(o) = item.as_object_mut() {
                o.entry("apiVersion")
                    .or_insert_with(|| Value::String(self.api_version.clone()));
                o.entry("kind")
                    .or_insert_with(|| Value::String(self.kind.clone()));
            }
        }
        Ok(items)
    }
}
