//! The lambda controllers' webhook client against real local HTTP(S) servers, with the
//! credentials in Secrets of a real sandbox API server.

use crate::common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::common::Sandbox;
use crate::common::tls::{Pki, pki};
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bosun::lambda::webhook::Webhooks;
use bosun_lambda::ports::{HookClient, HookError, HookFactory, HookSpec, HookType};
use bosun_lambda::types::{
    Authorization, BasicAuth, CaBundle, ClientTls, ControllerKind, EndpointConfig, Etag, Hook,
    KeyRef, Security, ServiceRef, Webhook,
};
use hyper_util::rt::TokioIo;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ObjectMeta, PostParams};
use tokio_rustls::TlsAcceptor;

// ---------------------------------------------------------------------------------------
// A webhook server: records every request, answers by path.

/// One request the server saw.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

#[derive(Clone, Default)]
struct Hooks {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// The `Authorization` header `/auth` accepts.
    expected_auth: Arc<Mutex<Option<String>>>,
}

impl Hooks {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    fn expect_auth(&self, value: &str) {
        *self.expected_auth.lock().expect("lock") = Some(value.to_string());
    }
}

async fn answer(hooks: Hooks, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    hooks.seen.lock().expect("lock").push(Seen {
        path: uri.path().to_string(),
        headers: headers.clone(),
        body: body.clone(),
    });
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    match uri.path() {
        "/ok" => (StatusCode::OK, r#"{"status":{"ok":true}}"#).into_response(),
        "/fail" => (StatusCode::INTERNAL_SERVER_ERROR, "boom: the hook failed").into_response(),
        "/busy-seconds" => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "3".to_string())],
            "busy",
        )
            .into_response(),
        "/busy-date" => {
            let at = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
            (StatusCode::TOO_MANY_REQUESTS, [("retry-after", at)], "busy").into_response()
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            (StatusCode::OK, "{}").into_response()
        }
        "/auth" => {
            let expected = hooks.expected_auth.lock().expect("lock").clone();
            if expected.is_some() && header("authorization") == expected {
                (StatusCode::OK, r#"{"authorized":true}"#).into_response()
            } else {
                (StatusCode::UNAUTHORIZED, "denied").into_response()
            }
        }
        "/etag" => {
            if header("if-none-match").as_deref() == Some("\"v1\"") {
                StatusCode::NOT_MODIFIED.into_response()
            } else {
                (StatusCode::OK, [("etag", "\"v1\"")], r#"{"version":1}"#).into_response()
            }
        }
        _ => (StatusCode::NOT_FOUND, "no such hook").into_response(),
    }
}

/// Serves `hooks` on a free loopback port, over TLS when `tls` is given.
async fn serve(hooks: &Hooks, tls: Option<TlsAcceptor>) -> SocketAddr {
    let state = hooks.clone();
    let router = Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
        answer(state.clone(), uri, headers, body)
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let service = hyper_util::service::TowerToHyperService::new(router.clone());
            let tls = tls.clone();
            tokio::spawn(async move {
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(acceptor) => {
                        // A refused handshake (no client certificate) is part of the tests.
                        if let Ok(stream) = acceptor.accept(tcp).await {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                    None => {
                        let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                    }
                }
            });
        }
    });
    addr
}

// ---------------------------------------------------------------------------------------
// Specs and clients.

fn spec(webhook: Webhook, endpoint_configs: Vec<EndpointConfig>) -> HookSpec {
    HookSpec {
        controller: "test-controller".into(),
        controller_kind: ControllerKind::CompositeController,
        hook_type: HookType::Sync,
        hook: Hook {
            webhook: Some(webhook),
            ..Hook::default()
        },
        endpoint_configs,
    }
}

fn url_hook(url: String) -> Webhook {
    Webhook {
        url: Some(url),
        ..Webhook::default()
    }
}

/// A Kubernetes client for tests that read no Secret (nothing listens there).
fn no_cluster() -> kube::Client {
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    kube::Client::try_from(config).expect("client")
}

async fn cluster(sb: &Sandbox) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(&sb.kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

async fn create_secret(client: &kube::Client, name: &str, data: &[(&str, &[u8])]) {
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), "default");
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Secret::default()
    };
    api.create(&PostParams::default(), &secret)
        .await
        .expect("create the Secret");
}

fn secret_ref(name: &str, key: Option<&str>) -> KeyRef {
    KeyRef {
        name: name.into(),
        namespace: "default".into(),
        key: key.map(Into::into),
    }
}

async fn client(factory: &Webhooks, spec: HookSpec) -> Arc<dyn HookClient> {
    match factory.client(spec).await {
        Ok(c) => c,
        Err(e) => panic!("cannot build the hook client: {e}"),
    }
}

async fn call(c: &Arc<dyn HookClient>) -> Result<String, HookError> {
    c.call(
        bytes::Bytes::from_static(br#"{"parent":{}}"#),
        "Thing/default/a".into(),
    )
    .await
    .map(|b| String::from_utf8_lossy(&b).into_owned())
}

// ---------------------------------------------------------------------------------------
// Plain HTTP.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_returns_the_body_of_a_json_post() {
    let hooks = Hooks::default();
    let addr = serve(&hooks, None).await;
    let factory = Webhooks::new(no_cluster());
    let c = client(
        &factory,
        spec(url_hook(format!("http://{addr}/ok")), vec![]),
    )
    .await;
    assert_eq!(c.url(), format!("http://{addr}/ok"));
    assert_eq!(call(&c).await.expect("call"), r#"{"status":{"ok":true}}"#);
    let seen = hooks.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/ok");
    assert_eq!(
        seen[0].headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );
    assert!(seen[0].headers.get("authorization").is_none());
    assert_eq!(seen[0].body, Bytes::from_static(br#"{"parent":{}}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_statuses_are_errors_with_code_and_body() {
    let hooks = Hooks::default();
    let addr = serve(&hooks, None).await;
    let factory = Webhooks::new(no_cluster());
    let c = client(
        &factory,
        spec(url_hook(format!("http://{addr}/fail")), vec![]),
    )
    .await;
    match call(&c).await {
        Err(HookError::Status {
            hook,
            url,
            code,
            body,
        }) => {
            assert_eq!(hook, HookType::Sync);
            assert_eq!(url, format!("http://{addr}/fail"));
            assert_eq!(code, 500);
            assert_eq!(body, "boom: the hook failed");
        }
        other => panic!("expected a status error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_carries_retry_after_in_seconds_or_as_a_date() {
    let hooks = Hooks::default();
    let addr = serve(&hooks, None).await;
    let factory = Webhooks::new(no_cluster());
    let c = client(
        &factory,
        spec(url_hook(format!("http://{addr}/busy-seconds")), vec![]),
    )
    .await;
    match call(&c).await {
        Err(HookError::TooManyRequests { retry_after, .. }) => {
            assert_eq!(retry_after, Duration::from_secs(3))
        }
        other => panic!("expected 429, got {other:?}"),
    }
    let c = client(
        &factory,
        spec(url_hook(format!("http://{addr}/busy-date")), vec![]),
    )
    .await;
    match call(&c).await {
        // 30 s ahead at the server, rounded up at the client: a little slack for the trip.
        Err(HookError::TooManyRequests { retry_after, .. }) => assert!(
            (Duration::from_secs(25)..=Duration::from_secs(31)).contains(&retry_after),
            "{retry_after:?}"
        ),
        other => panic!("expected 429, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_covers_the_whole_exchange() {
    let hooks = Hooks::default();
    let addr = serve(&hooks, None).await;
    let factory = Webhooks::new(no_cluster());
    let mut webhook = url_hook(format!("http://{addr}/slow"));
    webhook.timeout = Some("200ms".into());
    let c = client(&factory, spec(webhook, vec![])).await;
    let started = Instant::now();
    match call(&c).await {
        Err(HookError::Transport { message, .. }) => {
            assert!(message.contains("timeout"), "{message}")
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    // Well before the 10 s default (and the server's 30 s).
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_url_is_a_transport_error() {
    // A port that was free a moment ago and has no listener now.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let factory = Webhooks::new(no_cluster());
    let c = client(
        &factory,
        spec(url_hook(format!("http://{addr}/ok")), vec![]),
    )
    .await;
    match call(&c).await {
        Err(HookError::Transport { url, message, .. }) => {
            assert_eq!(url, format!("http://{addr}/ok"));
            assert!(!message.is_empty());
        }
        other => panic!("expected a transport error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_and_path_make_the_url() {
    let factory = Webhooks::new(no_cluster());
    let webhook = Webhook {
        service: Some(ServiceRef {
            name: "hooks".into(),
            namespace: "ops".into(),
            port: Some(8080),
            protocol: None,
        }),
        path: Some("/sync".into()),
        ..Webhook::default()
    };
    let c = client(&factory, spec(webhook.clone(), vec![])).await;
    assert_eq!(c.url(), "http://hooks.ops:8080/sync");

    let mut no_path = webhook;
    no_path.path = None;
    match factory.client(spec(no_path, vec![])).await {
        Err(HookError::Config { message, .. }) => assert_eq!(
            message,
            "must specify either a full 'url', or both 'service' and 'path'"
        ),
        Err(e) => panic!("expected a config error, got {e:?}"),
        Ok(_) => panic!("a webhook without url or path was accepted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etag_304_reuses_the_cached_body() {
    let hooks = Hooks::default();
    let addr = serve(&hooks, None).await;
    let factory = Webhooks::new(no_cluster());
    let mut webhook = url_hook(format!("http://{addr}/etag"));
    webhook.etag = Some(Etag {
        enabled: Some(true),
        cache_timeout_seconds: Some(60),
        cache_cleanup_seconds: None,
    });
    let c = client(&factory, spec(webhook, vec![])).await;
    assert_eq!(call(&c).await.expect("first call"), r#"{"version":1}"#);
    assert_eq!(call(&c).await.expect("second call"), r#"{"version":1}"#);
    // Another root object has no entry yet: no If-None-Match.
    let other = c
        .call(bytes::Bytes::from_static(b"{}"), "Thing/default/b".into())
        .await
        .expect("call for b");
    assert_eq!(&other[..], br#"{"version":1}"#);
    let sent: Vec<Option<String>> = hooks
        .seen()
        .iter()
        .map(|s| {
            s.headers
                .get("if-none-match")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        })
        .collect();
    assert_eq!(sent, vec![None, Some("\"v1\"".to_string()), None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_etags_no_if_none_match_is_sent() {
    let hooks = Hooks::default();
    let addr = serve(&hooks, None).await;
    let factory = Webhooks::new(no_cluster());
    let c = client(
        &factory,
        spec(url_hook(format!("http://{addr}/etag")), vec![]),
    )
    .await;
    assert_eq!(call(&c).await.expect("call"), r#"{"version":1}"#);
    // The server would answer 304 only to If-None-Match, which is never sent.
    assert_eq!(call(&c).await.expect("call"), r#"{"version":1}"#);
    assert!(
        hooks
            .seen()
            .iter()
            .all(|s| s.headers.get("if-none-match").is_none())
    );
}

// ---------------------------------------------------------------------------------------
// Credentials from Secrets of a real API server.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_from_a_secret_reaches_the_server() {
    let sb = Sandbox::start();
    let kube = cluster(&sb).await;
    // A trailing newline, as `kubectl create secret --from-file` leaves it.
    create_secret(&kube, "hook-token", &[("token", b"s3cr3t\n")]).await;
    let hooks = Hooks::default();
    hooks.expect_auth("Bearer s3cr3t");
    let addr = serve(&hooks, None).await;
    let factory = Webhooks::new(kube);
    let mut webhook = url_hook(format!("http://{addr}/auth"));
    webhook.security.authorization = Some(Authorization {
        type_: None,
        secret_ref: secret_ref("hook-token", Some("token")),
    });
    let c = client(&factory, spec(webhook.clone(), vec![])).await;
    assert_eq!(call(&c).await.expect("call"), r#"{"authorized":true}"#);

    // A custom type; "basic" is refused.
    hooks.expect_auth("Token s3cr3t");
    webhook.security.authorization.as_mut().expect("set").type_ = Some(" Token ".into());
    let c = client(&factory, spec(webhook.clone(), vec![])).await;
    assert_eq!(call(&c).await.expect("call"), r#"{"authorized":true}"#);
    webhook.security.authorization.as_mut().expect("set").type_ = Some("BASIC".into());
    match factory.client(spec(webhook.clone(), vec![])).await {
        Err(HookError::Config { message, .. }) => {
            assert!(message.contains("authorization.type"), "{message}")
        }
        Err(e) => panic!("expected a config error, got {e:?}"),
        Ok(_) => panic!("type basic was accepted"),
    }

    // A missing Secret is named.
    webhook.security.authorization = Some(Authorization {
        type_: None,
        secret_ref: secret_ref("nowhere", Some("token")),
    });
    match factory.client(spec(webhook, vec![])).await {
        Err(HookError::Config { message, .. }) => assert!(
            message.contains("webhook.authorization.secretRef")
                && message.contains("Secret default/nowhere"),
            "{message}"
        ),
        Err(e) => panic!("expected a config error, got {e:?}"),
        Ok(_) => panic!("a missing Secret was accepted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_and_wrong_credentials() {
    let sb = Sandbox::start();
    let kube = cluster(&sb).await;
    create_secret(
        &kube,
        "hook-basic",
        &[("username", b"alice"), ("password", b"wonderland")],
    )
    .await;
    create_secret(
        &kube,
        "hook-custom-keys",
        &[("user", b"alice"), ("pass", b"guess")],
    )
    .await;
    create_secret(
        &kube,
        "hook-colon",
        &[("username", b"al:ice"), ("password", b"x")],
    )
    .await;
    let hooks = Hooks::default();
    // base64("alice:wonderland")
    hooks.expect_auth("Basic YWxpY2U6d29uZGVybGFuZA==");
    let addr = serve(&hooks, None).await;
    let factory = Webhooks::new(kube);
    let with = |secret: &str, keys: Option<(&str, &str)>| {
        let mut webhook = url_hook(format!("http://{addr}/auth"));
        webhook.security.basic_auth = Some(BasicAuth {
            secret_ref: secret_ref(secret, None),
            username_key: keys.map(|k| k.0.to_string()),
            password_key: keys.map(|k| k.1.to_string()),
        });
        spec(webhook, vec![])
    };

    let c = client(&factory, with("hook-basic", None)).await;
    assert_eq!(call(&c).await.expect("call"), r#"{"authorized":true}"#);

    let c = client(&factory, with("hook-custom-keys", Some(("user", "pass")))).await;
    match call(&c).await {
        Err(HookError::Status { code, body, .. }) => {
            assert_eq!(code, 401);
            assert_eq!(body, "denied");
        }
        other => panic!("expected 401, got {other:?}"),
    }

    match factory.client(with("hook-colon", None)).await {
        Err(HookError::Config { message, .. }) => assert!(
            message.contains("basicAuth") && message.contains("':'"),
            "{message}"
        ),
        Err(e) => panic!("expected a config error, got {e:?}"),
        Ok(_) => panic!("a username with ':' was accepted"),
    }

    // authorization and basicAuth together are refused.
    let mut both = with("hook-basic", None);
    if let Some(w) = both.hook.webhook.as_mut() {
        w.security.authorization = Some(Authorization {
            type_: None,
            secret_ref: secret_ref("hook-basic", Some("password")),
        });
    }
    match factory.client(both).await {
        Err(HookError::Config { message, .. }) => {
            assert!(message.contains("mutually exclusive"), "{message}")
        }
        Err(e) => panic!("expected a config error, got {e:?}"),
        Ok(_) => panic!("authorization and basicAuth together were accepted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_configs_apply_by_host() {
    let sb = Sandbox::start();
    let kube = cluster(&sb).await;
    create_secret(&kube, "right", &[("token", b"right")]).await;
    create_secret(&kube, "wrong", &[("token", b"wrong")]).await;
    let hooks = Hooks::default();
    hooks.expect_auth("Bearer right");
    let addr = serve(&hooks, None).await;
    let factory = Webhooks::new(kube);
    let endpoint = |host: String, secret: &str| EndpointConfig {
        host,
        security: Security {
            authorization: Some(Authorization {
                type_: None,
                secret_ref: secret_ref(secret, Some("token")),
            }),
            ..Security::default()
        },
    };
    let configs = vec![
        endpoint("elsewhere.example:8080".into(), "wrong"),
        endpoint(format!("127.0.0.1:{}", addr.port()), "right"),
        endpoint(format!("127.0.0.1:{}", addr.port()), "wrong"),
    ];
    let c = client(
        &factory,
        spec(url_hook(format!("http://{addr}/auth")), configs.clone()),
    )
    .await;
    assert_eq!(call(&c).await.expect("call"), r#"{"authorized":true}"#);

    // The webhook's own settings win over endpointConfigs.
    let mut own = url_hook(format!("http://{addr}/auth"));
    own.security.authorization = Some(Authorization {
        type_: None,
        secret_ref: secret_ref("wrong", Some("token")),
    });
    let c = client(&factory, spec(own, configs)).await;
    assert!(matches!(
        call(&c).await,
        Err(HookError::Status { code: 401, .. })
    ));
}

// ---------------------------------------------------------------------------------------
// TLS, with a CA and certificates made by openssl for the test (`common::tls`).

/// The server's TLS acceptor; with `require_client_cert`, a client certificate signed by
/// the test CA is required.
fn acceptor(pki: &Pki, require_client_cert: bool) -> TlsAcceptor {
    TlsAcceptor::from(common::tls::server_config(pki, require_client_cert))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_ca_bundle_trusts_the_webhook_over_https() {
    let pki = pki();
    let hooks = Hooks::default();
    let addr = serve(&hooks, Some(acceptor(&pki, false))).await;
    let factory = Webhooks::new(no_cluster());
    let url = format!("https://127.0.0.1:{}/ok", addr.port());

    // The system roots do not know the test CA.
    let c = client(&factory, spec(url_hook(url.clone()), vec![])).await;
    match call(&c).await {
        Err(HookError::Transport { message, .. }) => {
            assert!(message.to_lowercase().contains("certificate"), "{message}")
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }

    let mut webhook = url_hook(url);
    webhook.security.ca_bundle = Some(CaBundle {
        inline: Some(String::from_utf8(pki.read("ca.crt")).expect("PEM is text")),
        ..CaBundle::default()
    });
    let c = client(&factory, spec(webhook.clone(), vec![])).await;
    assert_eq!(call(&c).await.expect("call"), r#"{"status":{"ok":true}}"#);

    // Two sources at once are refused.
    webhook.security.ca_bundle = Some(CaBundle {
        inline: Some("x".into()),
        secret_ref: Some(secret_ref("ca", None)),
        config_map_ref: None,
    });
    match factory.client(spec(webhook, vec![])).await {
        Err(HookError::Config { message, .. }) => {
            assert!(message.contains("exactly one"), "{message}")
        }
        Err(e) => panic!("expected a config error, got {e:?}"),
        Ok(_) => panic!("two caBundle sources were accepted"),
    }
}

/// A TLS server that reads one request, writes `answer` and drops the connection without a
/// `close_notify` alert (as Python's `http.server` behind an `ssl` socket does, and so
/// metacontroller's `webhook-auth` example).
async fn serve_then_cut(acceptor: TlsAcceptor, answer: &'static str) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // The request's head and its small JSON body.
                while !request.ends_with(b"}") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.flush().await;
                // Dropped, not shut down: the TCP connection ends with no close_notify.
                drop(tls);
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_answer_ended_by_a_close_without_close_notify_is_taken() {
    let pki = pki();
    let factory = Webhooks::new(no_cluster());
    let ca = CaBundle {
        inline: Some(String::from_utf8(pki.read("ca.crt")).expect("PEM is text")),
        ..CaBundle::default()
    };
    let body = r#"{"status":{"ok":true}}"#;
    for (what, answer) in [
        (
            "an HTTP/1.0 body delimited by the close",
            "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"status\":{\"ok\":true}}",
        ),
        (
            "a body with its Content-Length",
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 22\r\nConnection: close\r\n\r\n{\"status\":{\"ok\":true}}",
        ),
    ] {
        let addr = serve_then_cut(acceptor(&pki, false), answer).await;
        let mut webhook = url_hook(format!("https://127.0.0.1:{}/ok", addr.port()));
        webhook.security.ca_bundle = Some(ca.clone());
        let c = client(&factory, spec(webhook, vec![])).await;
        assert_eq!(call(&c).await.expect(what), body, "{what}");
    }
    // A body cut short of its Content-Length is still an error.
    let addr = serve_then_cut(
        acceptor(&pki, false),
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99\r\n\r\n{\"status\":{}}",
    )
    .await;
    let mut webhook = url_hook(format!("https://127.0.0.1:{}/ok", addr.port()));
    webhook.security.ca_bundle = Some(ca);
    let c = client(&factory, spec(webhook, vec![])).await;
    assert!(
        matches!(call(&c).await, Err(HookError::Transport { .. })),
        "a truncated answer is refused"
    );
}

/// A client certificate in X.509 v1 form (what `openssl x509 -req` makes without
/// extensions, as in metacontroller's `webhook-auth` example) is presented, as Go's
/// client presents it: the server is the one that judges it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_x509_v1_client_certificate_is_presented() {
    let pki = pki();
    let sb = Sandbox::start();
    let kube = cluster(&sb).await;
    create_secret(
        &kube,
        "hook-client-v1",
        &[
            ("tls.crt", &pki.read("client-v1.crt")),
            ("tls.key", &pki.read("client.key")),
        ],
    )
    .await;
    let presented = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hooks = Hooks::default();
    let addr = serve(
        &hooks,
        Some(TlsAcceptor::from(
            common::tls::server_config_any_client_cert(&pki, presented.clone()),
        )),
    )
    .await;
    let factory = Webhooks::new(kube);
    let mut webhook = url_hook(format!("https://127.0.0.1:{}/ok", addr.port()));
    webhook.security.ca_bundle = Some(CaBundle {
        inline: Some(String::from_utf8(pki.read("ca.crt")).expect("PEM is text")),
        ..CaBundle::default()
    });
    webhook.security.client_tls = Some(ClientTls {
        secret_ref: secret_ref("hook-client-v1", None),
        cert_key: None,
        private_key_key: None,
    });
    let c = client(&factory, spec(webhook, vec![])).await;
    assert_eq!(call(&c).await.expect("call"), r#"{"status":{"ok":true}}"#);
    assert_eq!(
        presented.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the certificate was presented"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_tls_from_a_secret_passes_mutual_tls() {
    let pki = pki();
    let sb = Sandbox::start();
    let kube = cluster(&sb).await;
    create_secret(
        &kube,
        "hook-client-cert",
        &[
            ("tls.crt", &pki.read("client.crt")),
            ("tls.key", &pki.read("client.key")),
        ],
    )
    .await;
    create_secret(&kube, "hook-ca", &[("ca.crt", &pki.read("ca.crt"))]).await;
    let hooks = Hooks::default();
    let addr = serve(&hooks, Some(acceptor(&pki, true))).await;
    let factory = Webhooks::new(kube.clone());
    let mut webhook = url_hook(format!("https://127.0.0.1:{}/ok", addr.port()));
    webhook.security.ca_bundle = Some(CaBundle {
        secret_ref: Some(secret_ref("hook-ca", None)),
        ..CaBundle::default()
    });

    // Without a client certificate the server ends the handshake.
    let c = client(&factory, spec(webhook.clone(), vec![])).await;
    assert!(
        matches!(call(&c).await, Err(HookError::Transport { .. })),
        "the server requires a client certificate"
    );
    assert!(hooks.seen().is_empty());

    webhook.security.client_tls = Some(ClientTls {
        secret_ref: secret_ref("hook-client-cert", None),
        cert_key: None,
        private_key_key: None,
    });
    let c = client(&factory, spec(webhook.clone(), vec![])).await;
    assert_eq!(call(&c).await.expect("call"), r#"{"status":{"ok":true}}"#);
    assert_eq!(hooks.seen().len(), 1);

    // The CA from a ConfigMap, under another key.
    let config_maps: kube::Api<ConfigMap> = kube::Api::namespaced(kube.clone(), "default");
    let ca = ConfigMap {
        metadata: ObjectMeta {
            name: Some("hook-ca".into()),
            ..ObjectMeta::default()
        },
        data: Some(
            [(
                "bundle.pem".to_string(),
                String::from_utf8(pki.read("ca.crt")).expect("PEM is text"),
            )]
            .into(),
        ),
        ..ConfigMap::default()
    };
    config_maps
        .create(&PostParams::default(), &ca)
        .await
        .expect("create the ConfigMap");
    webhook.security.ca_bundle = Some(CaBundle {
        config_map_ref: Some(secret_ref("hook-ca", Some("bundle.pem"))),
        ..CaBundle::default()
    });
    let c = client(&factory, spec(webhook.clone(), vec![])).await;
    assert_eq!(call(&c).await.expect("call"), r#"{"status":{"ok":true}}"#);

    // A missing key is named with its ConfigMap.
    webhook.security.ca_bundle = Some(CaBundle {
        config_map_ref: Some(secret_ref("hook-ca", None)),
        ..CaBundle::default()
    });
    match factory.client(spec(webhook, vec![])).await {
        Err(HookError::Config { message, .. }) => assert!(
            message.contains("webhook.caBundle.configMapRef")
                && message.contains("ConfigMap default/hook-ca has no key \"ca.crt\""),
            "{message}"
        ),
        Err(e) => panic!("expected a config error, got {e:?}"),
        Ok(_) => panic!("a missing CA key was accepted"),
    }
}

// ---------------------------------------------------------------------------------------
// Metrics.

#[test]
fn metrics_are_named_and_labelled_as_metacontrollers() {
    let (recorder, handle) = bosun::prometheus::recorder("addon_operator_");
    let _local = metrics::set_default_local_recorder(&recorder);
    bosun::lambda::webhook::describe_metrics();
    // One thread: the local recorder sees every request.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // localhost: a DNS lookup; over https.
    let pki = pki();
    runtime.block_on(async {
        let hooks = Hooks::default();
        let addr = serve(&hooks, Some(acceptor(&pki, false))).await;
        let factory = Webhooks::new(no_cluster());
        let url = format!("https://localhost:{}/ok", addr.port());
        let mut webhook = url_hook(url.clone());
        webhook.security.ca_bundle = Some(CaBundle {
            inline: Some(String::from_utf8(pki.read("ca.crt")).expect("PEM is text")),
            ..CaBundle::default()
        });
        let c = client(&factory, spec(webhook, vec![])).await;
        call(&c).await.expect("call");
        call(&c).await.expect("call");
        let text = handle.render();
        let line = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{name}{{")))
                .unwrap_or_else(|| panic!("no {name} in {text}"))
                .to_string()
        };
        let labelled = |l: &str, extra: &[&str]| {
            [
                "controller_name=\"test-controller\"".to_string(),
                "controller_type=\"CompositeController\"".to_string(),
                format!("url=\"{url}\""),
            ]
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
            .all(|label| l.contains(label))
        };
        let requests = line("metacontroller_sync_requests_total");
        assert!(
            labelled(&requests, &["code=\"200\"", "method=\"post\""]) && requests.ends_with(" 2"),
            "{requests}"
        );
        let duration = line("metacontroller_sync_request_duration_histogram_seconds_count");
        assert!(
            labelled(&duration, &["method=\"post\""]) && duration.ends_with(" 2"),
            "{duration}"
        );
        let in_flight = line("metacontroller_sync_in_flight_requests");
        assert!(
            labelled(&in_flight, &[]) && in_flight.ends_with(" 0"),
            "{in_flight}"
        );
        assert!(!text.contains("addon_operator_metacontroller"), "{text}");
        for name in [
            "requests_total",
            "request_duration_histogram_seconds",
            "in_flight_requests",
            "dns_duration_histogram_seconds",
            "tls_duration_histogram_seconds",
        ] {
            assert!(
                text.contains(&format!("# HELP metacontroller_sync_{name} ")),
                "{name} is described: {text}"
            );
        }
        // Prometheus' Go default buckets, as metacontroller's.
        assert!(
            text.contains("metacontroller_sync_request_duration_histogram_seconds_bucket{")
                && text.contains("le=\"2.5\""),
            "{text}"
        );
        // One new connection: one lookup and, over https, one handshake.
        let events = [
            "dns_start",
            "dns_done",
            "tls_handshake_start",
            "tls_handshake_done",
        ];
        for event in events {
            let kind = if event.starts_with("dns") {
                "dns"
            } else {
                "tls"
            };
            let count = text
                .lines()
                .find(|l| {
                    l.starts_with(&format!(
                        "metacontroller_sync_{kind}_duration_histogram_seconds_count{{"
                    )) && l.contains(&format!("event=\"{event}\""))
                })
                .unwrap_or_else(|| panic!("no {event} in {text}"));
            assert!(labelled(count, &[]) && count.ends_with(" 1"), "{count}");
        }
    });
}
