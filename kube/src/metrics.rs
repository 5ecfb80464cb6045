//! Metrics of the operator's own Kubernetes client, as client-go exports them: a tower
//! layer around the whole kube-rs service stack (auth, retries and the connection
//! included), so every request bosun makes — watches and lists of bindings, the object
//! patcher, the ConfigMap, discovery, release drift checks — is counted and timed.
//!
//! ```text
//!   kube::Api ──► KubeMetrics ──► kube-rs stack (auth, retry, base URI) ──► hyper
//!                    │  response headers (or an error)
//!                    ├─► kubernetes_client_request_result_total{code,method,host}
//!                    └─► kubernetes_client_request_latency_seconds{verb,url}
//! ```
//!
//! Helm's own requests (install, upgrade, status through `libhelm_c.so`) go through Go's
//! client and are not seen here.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Request, Response};

/// Counter `{code,method,host}`: requests of the operator's Kubernetes client, by HTTP
/// status (`<error>` when no response came).
pub const KUBERNETES_CLIENT_REQUEST_RESULT_TOTAL: &str = "kubernetes_client_request_result_total";
/// Histogram `{verb,url}`: time to the response headers of the operator's Kubernetes
/// client requests; `url` is the path with namespace and name replaced.
pub const KUBERNETES_CLIENT_REQUEST_LATENCY_SECONDS: &str =
    "kubernetes_client_request_latency_seconds";

/// The `code` of a request that got no response (connection refused, timeout, TLS).
pub(crate) const NO_RESPONSE: &str = "<error>";

/// A Kubernetes client for `config` whose requests are measured and limited to `limits`
/// (`client` names it in the limiter's metric).
pub fn measured_client(
    config: kube::Config,
    client: &'static str,
    limits: crate::limiter::ClientLimits,
) -> Result<kube::Client, kube::Error> {
    let layer = KubeMetricsLayer::for_cluster(&config.cluster_url);
    let limit = crate::limiter::ClientLimitLayer::new(client, limits);
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .with_layer(&limit)
        .build())
}

/// Wraps a Kubernetes client's service in [`KubeMetrics`].
#[derive(Clone, Debug)]
pub struct KubeMetricsLayer {
    host: Arc<str>,
}

impl KubeMetricsLayer {
    /// `host` is the API server's `host[:port]` (the `host` label).
    pub fn new(host: &str) -> KubeMetricsLayer {
        KubeMetricsLayer { host: host.into() }
    }

    /// For the API server of `url` (its authority; empty when it has none).
    pub fn for_cluster(url: &http::Uri) -> KubeMetricsLayer {
        KubeMetricsLayer::new(url.authority().map(|a| a.as_str()).unwrap_or_default())
    }
}

impl<S> tower::Layer<S> for KubeMetricsLayer {
    type Service = KubeMetrics<S>;

    fn layer(&self, inner: S) -> KubeMetrics<S> {
        KubeMetrics {
            inner,
            host: self.host.clone(),
        }
    }
}

/// Counts and times each request of the service it wraps (see the module docs).
#[derive(Clone, Debug)]
pub struct KubeMetrics<S> {
    inner: S,
    host: Arc<str>,
}

impl<S, B, RB> tower::Service<Request<B>> for KubeMetrics<S>
where
    S: tower::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().as_str().to_string();
        let url = url_template(request.uri().path());
        let host = self.host.clone();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            // A watch's future resolves with the headers: its latency is the time to the
            // start of the stream, not the stream's length.
            let response = response.await;
            metrics::histogram!(
                KUBERNETES_CLIENT_REQUEST_LATENCY_SECONDS,
                "verb" => method.clone(),
                "url" => url
            )
            .record(started.elapsed().as_secs_f64());
            let code = match &response {
                Ok(r) => r.status().as_str().to_string(),
                Err(_) => NO_RESPONSE.to_string(),
            };
            metrics::counter!(
                KUBERNETES_CLIENT_REQUEST_RESULT_TOTAL,
                "code" => code,
                "method" => method,
                "host" => host.to_string()
            )
            .increment(1);
            response
        })
    }
}

/// A request path with the namespace and object name replaced by `{namespace}` and
/// `{name}`, as client-go's URL template does, so the `url` label names API resources and
/// not objects: `/api/v1/namespaces/default/configmaps/x/status` is
/// `/api/v1/namespaces/{namespace}/configmaps/{name}/status`. Paths outside `/api` and
/// `/apis` (`/version`, `/openapi/v2`) and discovery paths are kept; what follows a
/// subresource (the path of a `proxy` request) is dropped.
pub fn url_template(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let prefix = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return path.to_string(),
    };
    if segments.len() <= prefix {
        return path.to_string();
    }
    let mut out: Vec<&str> = segments[..prefix].to_vec();
    let mut rest = &segments[prefix..];
    // The deprecated `/watch/` prefix of watch requests.
    if rest.first() == Some(&"watch") {
        out.push("watch");
        rest = &rest[1..];
    }
    match rest {
        // The Namespace object itself: `namespaces/{name}[/status]`.
        ["namespaces", _] | ["namespaces", _, "status" | "finalize"] => {
            out.push("namespaces");
            out.push("{name}");
            out.extend(rest.get(2));
            rest = &[];
        }
        ["namespaces", _, more @ ..] => {
            out.push("namespaces");
            out.push("{namespace}");
            rest = more;
        }
        _ => {}
    }
    if let Some((resource, more)) = rest.split_first() {
        out.push(resource);
        if let Some((_name, more)) = more.split_first() {
            out.push("{name}");
            out.extend(more.first());
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service};

    /// Answers `/missing/…` paths with 404, fails `/down/…` ones, 200 otherwise.
    struct Answers;

    impl Service<Request<()>> for Answers {
        type Response = Response<()>;
        type Error = std::io::Error;
        type Future = std::future::Ready<Result<Response<()>, std::io::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<()>) -> Self::Future {
            let path = request.uri().path();
            std::future::ready(if path.contains("/down/") {
                Err(std::io::Error::other("connection refused"))
            } else {
                let mut r = Response::new(());
                if path.contains("/missing/") {
                    *r.status_mut() = http::StatusCode::NOT_FOUND;
                }
                Ok(r)
            })
        }
    }

    /// A Prometheus recorder of its own, with the exporter's default summaries.
    fn test_recorder() -> (
        metrics_exporter_prometheus::PrometheusRecorder,
        metrics_exporter_prometheus::PrometheusHandle,
    ) {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        (recorder, handle)
    }

    #[test]
    fn each_request_counts_by_status_and_times_by_template() {
        let (recorder, handle) = test_recorder();
        let mut svc = KubeMetricsLayer::new("10.0.0.1:6443").layer(Answers);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        metrics::with_local_recorder(&recorder, || {
            runtime.block_on(async {
                for (method, path) in [
                    ("GET", "/api/v1/namespaces/a/configmaps/one?watch=true"),
                    ("GET", "/api/v1/namespaces/b/configmaps/two"),
                    ("PATCH", "/api/v1/namespaces/missing/configmaps/x"),
                    ("GET", "/api/v1/namespaces/down/pods"),
                ] {
                    let request = Request::builder()
                        .method(method)
                        .uri(path)
                        .body(())
                        .expect("request");
                    let _ = svc.call(request).await;
                }
            })
        });
        let text = handle.render();
        for line in [
            r#"kubernetes_client_request_result_total{code="200",method="GET",host="10.0.0.1:6443"} 2"#,
            r#"kubernetes_client_request_result_total{code="404",method="PATCH",host="10.0.0.1:6443"} 1"#,
            r#"kubernetes_client_request_result_total{code="<error>",method="GET",host="10.0.0.1:6443"} 1"#,
            r#"kubernetes_client_request_latency_seconds_count{verb="GET",url="/api/v1/namespaces/{namespace}/configmaps/{name}"} 2"#,
            r#"kubernetes_client_request_latency_seconds_count{verb="GET",url="/api/v1/namespaces/{namespace}/pods"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
    }

    #[test]
    fn names_become_placeholders() {
        for (path, want) in [
            (
                "/api/v1/namespaces/default/configmaps/addon-operator",
                "/api/v1/namespaces/{namespace}/configmaps/{name}",
            ),
            (
                "/api/v1/namespaces/default/configmaps",
                "/api/v1/namespaces/{namespace}/configmaps",
            ),
            (
                "/apis/apps/v1/namespaces/ns-1/deployments/web/scale",
                "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale",
            ),
            (
                "/api/v1/namespaces/ns/pods/p/proxy/some/path",
                "/api/v1/namespaces/{namespace}/pods/{name}/proxy",
            ),
            ("/api/v1/nodes/node-1", "/api/v1/nodes/{name}"),
            ("/api/v1/configmaps", "/api/v1/configmaps"),
            (
                "/api/v1/namespaces/kube-system",
                "/api/v1/namespaces/{name}",
            ),
            (
                "/api/v1/namespaces/kube-system/status",
                "/api/v1/namespaces/{name}/status",
            ),
            (
                "/api/v1/watch/namespaces/default/pods/p",
                "/api/v1/watch/namespaces/{namespace}/pods/{name}",
            ),
            (
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/crontabs.example.com",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
            ),
            ("/apis/apps/v1", "/apis/apps/v1"),
            ("/apis", "/apis"),
            ("/api", "/api"),
            ("/version", "/version"),
        ] {
            assert_eq!(url_template(path), want, "{path}");
        }
    }
}
