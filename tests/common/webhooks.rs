//! Webhooks served by a test on 127.0.0.1 (the lambda controllers' hooks), and small
//! helpers for objects on the sandbox.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::Sandbox;

pub type Handler = dyn Fn(&str, &Value) -> (u16, Vec<(&'static str, String)>, Value) + Send + Sync;

/// A webhook server: every POST goes to `handler(path, body)`; requests are recorded.
pub struct Hooks {
    pub url: String,
    requests: Arc<Mutex<Vec<(String, Value)>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Hooks {
    pub fn serve(handler: impl Fn(&str, &Value) -> (u16, Value) + Send + Sync + 'static) -> Hooks {
        Hooks::serve_with_headers(move |path, body| {
            let (code, answer) = handler(path, body);
            (code, vec![], answer)
        })
    }

    /// As `serve`, with headers for each answer (a 429's `Retry-After`).
    pub fn serve_with_headers(
        handler: impl Fn(&str, &Value) -> (u16, Vec<(&'static str, String)>, Value)
        + Send
        + Sync
        + 'static,
    ) -> Hooks {
        let handler: Arc<Handler> = Arc::new(handler);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let recorded = requests.clone();
        let app =
            axum::Router::new().fallback(move |uri: axum::http::Uri, body: axum::body::Bytes| {
                let (handler, recorded) = (handler.clone(), recorded.clone());
                async move {
                    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let path = uri.path().to_string();
                    recorded
                        .lock()
                        .expect("requests")
                        .push((path.clone(), value.clone()));
                    let (code, headers, answer) = handler(&path, &value);
                    let body = match answer {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    let mut response = axum::response::IntoResponse::into_response((
                        axum::http::StatusCode::from_u16(code)
                            .unwrap_or(axum::http::StatusCode::OK),
                        [("content-type", "application/json")],
                        body,
                    ));
                    for (name, value) in headers {
                        response
                            .headers_mut()
                            .insert(name, value.parse().expect("a header value"));
                    }
                    response
                }
            });
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Hooks {
            url,
            requests,
            _runtime: runtime,
        }
    }

    pub fn calls(&self, path: &str) -> Vec<Value> {
        self.requests
            .lock()
            .expect("requests")
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Requests to `path` about the parent (or decorated object) named `name`.
    pub fn calls_for(&self, path: &str, name: &str) -> Vec<Value> {
        self.calls(path)
            .into_iter()
            .filter(|r| {
                let root = if r["parent"].is_null() {
                    &r["object"]
                } else {
                    &r["parent"]
                };
                root["metadata"]["name"] == name
            })
            .collect()
    }
}

/// POST that must succeed; returns the created object.
pub fn post_ok(sb: &Sandbox, path: &str, body: &Value) -> Value {
    let (code, answer) = sb.post(path, body);
    assert!(code == 201 || code == 200, "POST {path}: {code} {answer}");
    answer
}

/// GET: the object, or `None` when it is not there.
pub fn get(sb: &Sandbox, path: &str) -> Option<Value> {
    let (code, v) = sb.get(path);
    (code == 200).then_some(v)
}
