//! The kind resolver and the object patcher against a real sandbox API server.

mod common;

use bosun::kubernetes::{KindResolver, ResolveError};
use common::Sandbox;
use serde_json::{Value, json};

async fn client(sb: &Sandbox) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(&sb.kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wg"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}}}]},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolver_finds_builtin_kinds_by_any_name() {
    let sb = Sandbox::start();
    let resolver = KindResolver::new(client(&sb).await);
    for name in ["Pod", "pods", "po", "POD"] {
        let r = resolver.resolve(None, name).await.expect(name);
        assert_eq!(
            (r.resource.api_version.as_str(), r.resource.kind.as_str()),
            ("v1", "Pod")
        );
        assert_eq!(r.resource.plural, "pods");
        assert!(r.namespaced);
        assert!(r.subresources.iter().any(|s| s == "status"), "{r:?}");
    }
    for (api_version, name) in [(None, "deploy"), (Some("apps/v1"), "Deployment")] {
        let r = resolver.resolve(api_version, name).await.expect(name);
        assert_eq!(r.resource.api_version, "apps/v1");
        assert_eq!(r.resource.kind, "Deployment");
        assert_eq!(r.resource.plural, "deployments");
    }
    let ns = resolver.resolve(Some("v1"), "ns").await.expect("ns");
    assert!(!ns.namespaced);
    assert_eq!(ns.resource.kind, "Namespace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolver_sees_a_crd_created_after_the_first_lookup() {
    let sb = Sandbox::start();
    let resolver = KindResolver::new(client(&sb).await);
    // Fills the discovery cache before the CRD exists.
    resolver.resolve(None, "Pod").await.expect("pod");
    let (code, body) = sb.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &widget_crd(),
    );
    assert_eq!(code, 201, "{body}");
    for (api_version, name) in [
        (None, "Widget"),
        (None, "widgets"),
        (None, "wg"),
        (Some("example.com/v1"), "widget"),
        (Some("example.com"), "WG"),
    ] {
        let r = resolver.resolve(api_version, name).await.expect(name);
        assert_eq!(r.resource.api_version, "example.com/v1");
        assert_eq!(r.resource.kind, "Widget");
        assert_eq!(r.resource.plural, "widgets");
        assert!(r.namespaced);
        assert_eq!(r.subresources, vec!["status".to_string()]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolver_reports_unknown_kinds() {
    let sb = Sandbox::start();
    let resolver = KindResolver::new(client(&sb).await);
    let err = resolver
        .resolve(None, "Gizmo")
        .await
        .expect_err("unknown kind");
    assert!(matches!(err, ResolveError::NotFound { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "kind \"Gizmo\" is not served by the cluster (looked in every served group, core first)"
    );
    let err = resolver
        .resolve(Some("apps/v1"), "Pod")
        .await
        .expect_err("pod is not in apps");
    assert!(
        err.to_string().contains("(apiVersion \"apps/v1\")"),
        "{err}"
    );
    let err = resolver
        .resolve(Some("nope.example.com/v1"), "Thing")
        .await
        .expect_err("unknown group");
    assert!(
        err.to_string()
            .contains("nope.example.com/v1, which the cluster does not serve"),
        "{err}"
    );
    let err = resolver
        .resolve(Some("a/b/c"), "Pod")
        .await
        .expect_err("invalid apiVersion");
    assert!(
        matches!(err, ResolveError::InvalidApiVersion { .. }),
        "{err:?}"
    );
}
