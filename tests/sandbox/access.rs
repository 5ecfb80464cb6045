//! What a web page can make bosun's HTTP surfaces do, end to end: the sandbox refuses a
//! foreign `Host` on loopback (DNS rebinding) and writes with a content type a browser
//! sends cross-origin without asking, answering a `Status`; it does not serve a
//! non-loopback address without a token unless told to; the debug TCP listener refuses a
//! cross-origin style `POST /config/set` while `bosun config set` keeps working.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    Killed, Operator, Sandbox, bosun_bin, capture, http_full, run_ok, wait_for, workdir,
};
use serde_json::{Value, json};

fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    let (code, bytes) = http_full(addr, method, path, headers, body.as_bytes());
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn assert_status(answer: &(u16, Value), code: u16, reason: &str, needles: &[&str]) {
    let (got, body) = answer;
    assert_eq!(*got, code, "{body}");
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["status"], "Failure", "{body}");
    assert_eq!(body["reason"], reason, "{body}");
    assert_eq!(body["code"], code, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    for needle in needles {
        assert!(message.contains(needle), "{needle:?} not in {message:?}");
    }
}

#[test]
fn the_sandbox_refuses_writes_a_web_page_could_send() {
    let sb = Sandbox::start();
    let cm = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"k": "v"}})
        .to_string()
    };
    let list = "/api/v1/namespaces/default/configmaps";
    for ct in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let answer = request(
            sb.addr(),
            "POST",
            list,
            &[("Content-Type", ct)],
            &cm("from-page"),
        );
        assert_status(
            &answer,
            415,
            "UnsupportedMediaType",
            &[ct, "application/json", "application/merge-patch+json"],
        );
    }
    // No content type at all from a browser (a fetch() of a Blob or an ArrayBuffer).
    let answer = request(
        sb.addr(),
        "POST",
        list,
        &[("Origin", "https://page.example")],
        &cm("from-page"),
    );
    assert_status(&answer, 415, "UnsupportedMediaType", &["no Content-Type"]);
    let (code, _) = sb.get(&format!("{list}/from-page"));
    assert_eq!(code, 404, "a refused write created nothing");
    // A client that sends no content type and no Origin (the Python client) is served.
    let (code, body) = request(sb.addr(), "POST", list, &[], &cm("from-client"));
    assert_eq!(code, 201, "{body}");

    // The same object as JSON is created; replacing and patching it as text is refused.
    let (code, body) = sb.post(list, &serde_json::from_str(&cm("real")).expect("json"));
    assert_eq!(code, 201, "{body}");
    let one = format!("{list}/real");
    let answer = request(
        sb.addr(),
        "PUT",
        &one,
        &[("Content-Type", "text/plain")],
        &cm("real"),
    );
    assert_status(&answer, 415, "UnsupportedMediaType", &["PUT", "text/plain"]);
    let answer = request(
        sb.addr(),
        "PATCH",
        &one,
        &[("Content-Type", "application/x-www-form-urlencoded")],
        r#"{"data":{"k":"changed"}}"#,
    );
    assert_status(
        &answer,
        415,
        "UnsupportedMediaType",
        &["PATCH", "application/x-www-form-urlencoded"],
    );
    let (code, body) = sb.get(&one);
    assert_eq!((code, &body["data"]["k"]), (200, &json!("v")), "{body}");
    // What clients send still works.
    let (code, body) = sb.request(
        "PATCH",
        &one,
        "application/merge-patch+json",
        r#"{"data":{"k":"merged"}}"#,
    );
    assert_eq!(
        (code, &body["data"]["k"]),
        (200, &json!("merged")),
        "{body}"
    );
}

#[test]
fn the_sandbox_answers_loopback_host_names_only() {
    let sb = Sandbox::start();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
        "stringData": {"password": "hunter2"}});
    let (code, body) = sb.post("/api/v1/namespaces/default/secrets", &secret);
    assert_eq!(code, 201, "{body}");
    let port = sb.addr().rsplit(':').next().expect("port").to_string();
    let path = "/api/v1/namespaces/default/secrets/db";
    // A page whose own name was made to resolve to 127.0.0.1 reads nothing.
    for host in [
        format!("rebound.example:{port}"),
        "rebound.example".into(),
        // Parsed strictly: what follows the port is not a port.
        format!("127.0.0.1:{port}@rebound.example"),
        "[::1]rebound.example".into(),
    ] {
        let answer = get_as(sb.addr(), &host, path);
        assert_status(
            &answer,
            403,
            "Forbidden",
            &[&format!("{host:?}"), "not a loopback name"],
        );
        assert!(!answer.1.to_string().contains("password"), "{}", answer.1);
    }
    // Loopback names, with or without a port, are served.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_string(),
    ] {
        let (code, body) = get_as(sb.addr(), &host, path);
        assert_eq!(code, 200, "{host}: {body}");
    }
}

/// A GET with the given `Host` header (the test client sends its own): status and JSON.
fn get_as(addr: &str, host: &str, path: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// Waits for a child to exit; `None` when it is still running at the deadline.
fn exit_within(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    None
}

#[test]
fn a_non_loopback_sandbox_needs_a_token_or_explicit_consent() {
    let dir = workdir();
    let sandbox = |extra: &[&str]| {
        Command::new(bosun_bin())
            .args(["sandbox", "--listen", "0.0.0.0:0", "--data"])
            .arg(dir.path().join("data"))
            .args(extra)
            .env("LOG_LEVEL", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn bosun sandbox")
    };
    // Without a token, and with an empty one (which is no token).
    for extra in [&[][..], &["--token", ""][..]] {
        let mut refused = Killed(sandbox(extra));
        let status = exit_within(&mut refused.0, Duration::from_secs(30));
        assert!(
            status.is_some_and(|s| !s.success()),
            "a sandbox on 0.0.0.0 with {extra:?} kept running"
        );
        let mut stderr = String::new();
        if let Some(mut e) = refused.0.stderr.take() {
            std::io::Read::read_to_string(&mut e, &mut stderr).expect("stderr");
        }
        assert!(
            stderr.contains("--allow-unauthenticated") && stderr.contains("--token"),
            "{stderr}"
        );
    }

    // Told so, it serves, and any Host (it is meant to be reached by other names).
    let mut allowed = Killed(sandbox(&["--allow-unauthenticated"]));
    let seen = capture(&mut allowed.0);
    let printed = || seen.lock().map(|s| s.clone()).unwrap_or_default();
    wait_for("the sandbox to listen", Duration::from_secs(30), || {
        printed().contains("listening on http://")
    });
    let port = printed()
        .lines()
        .find_map(|l| l.strip_prefix("listening on http://"))
        .and_then(|a| a.rsplit(':').next().map(str::to_string))
        .expect("port");
    let (code, body) = get_as(
        &format!("127.0.0.1:{port}"),
        &format!("sandbox.example:{port}"),
        "/api/v1/namespaces/default",
    );
    assert_eq!(code, 200, "{body}");
}

#[test]
fn the_debug_tcp_listener_refuses_cross_origin_config_posts() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = common::global_hooks_dir(work.path());
    let socket = work.path().join("debug.socket");
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[("DEBUG_HTTP_SERVER_ADDR", "127.0.0.1:0")],
    );
    op.wait("the debug TCP address", Duration::from_secs(60), || {
        common::debug_tcp(&op.logs()).is_some()
    });
    let (debug_addr, token) = common::debug_tcp(&op.logs()).unwrap_or_default();
    let bearer = format!("Bearer {token}");
    let level = || {
        let text = run_ok(&mut common::debug_cli(
            &socket,
            &["config", "list", "-o", "json"],
        ));
        let list: Value = serde_json::from_str(&text).expect("config list");
        list.as_array()
            .and_then(|l| l.iter().find(|p| p["name"] == "log.level").cloned())
            .map(|p| p["value"].clone())
            .unwrap_or(Value::Null)
    };
    op.wait("the debug socket", Duration::from_secs(60), || {
        socket.exists()
    });
    assert_eq!(level(), "debug");
    for ct in [
        "application/x-www-form-urlencoded",
        "text/plain",
        "multipart/form-data; boundary=x",
    ] {
        let (code, body) = http_full(
            &debug_addr,
            "POST",
            "/config/set",
            &[("Content-Type", ct), ("Authorization", &bearer)],
            b"name=log.level&value=error",
        );
        let text = String::from_utf8_lossy(&body);
        assert_eq!(code, 415, "{ct}: {text}");
        assert!(
            text.contains(ct) && text.contains("bosun config set"),
            "{text}"
        );
    }
    assert_eq!(level(), "debug", "a refused POST changed nothing");
    // bosun's own client is accepted on TCP too, and `bosun config set` keeps working.
    let (code, body) = http_full(
        &debug_addr,
        "POST",
        "/config/set",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("X-Bosun-Client", "cli"),
            ("Authorization", &bearer),
        ],
        b"name=log.level&value=warn",
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(level(), "warn");
    run_ok(&mut common::debug_cli(
        &socket,
        &["config", "set", "log.level", "info"],
    ));
    assert_eq!(level(), "info");
}

/// A request with two `Host` headers (one loopback, one not) is refused: the sandbox does
/// not pick one.
#[test]
fn two_host_headers_are_refused() {
    use std::io::{Read, Write};
    let sb = Sandbox::start();
    let port = sb.addr().rsplit(':').next().expect("port").to_string();
    let mut stream = std::net::TcpStream::connect(sb.addr()).expect("connect");
    write!(
        stream,
        "GET /api/v1/namespaces HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: rebound.example\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let code = answer.split_whitespace().nth(1).unwrap_or_default();
    assert!(code == "403" || code == "400", "{answer}");
}

/// Connections that never finish a request head (a slow-headers attack) are closed after
/// the header read timeout, on their first request or any later one; a client's
/// kept-alive connection that went idle after a request stays usable, as pooled clients
/// expect.
#[test]
fn connections_that_never_send_a_whole_request_head_are_closed() {
    use std::io::{Read, Write};
    let sb = Sandbox::start_with(&["--header-read-timeout", "1s"]);
    let addr = sb.addr().to_string();
    let partial: Vec<std::net::TcpStream> = (0..50)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(&addr).expect("connect");
            s.write_all(b"GET /api HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .expect("partial head");
            s
        })
        .collect();
    // A kept-alive connection: one request, then idle past the timeout, then another.
    let mut kept = std::net::TcpStream::connect(&addr).expect("connect");
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let ask = |s: &mut std::net::TcpStream| {
        s.write_all(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .expect("request");
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).expect("answer");
        String::from_utf8_lossy(&buf[..n]).to_string()
    };
    assert!(ask(&mut kept).starts_with("HTTP/1.1 200"));
    for mut s in partial {
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let started = Instant::now();
        let mut buf = [0u8; 64];
        // Closed by the server: end of stream (or a reset), not our read timeout.
        let closed = matches!(s.read(&mut buf), Ok(0) | Err(_))
            && started.elapsed() < Duration::from_secs(20);
        assert!(closed, "a connection with a partial head stays open");
    }
    assert!(
        ask(&mut kept).starts_with("HTTP/1.1 200"),
        "an idle kept-alive connection still serves"
    );
    // After whole requests, half of another: closed too (kube-apiserver's limit covers
    // every request of a connection).
    kept.write_all(b"GET /api HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .expect("half of a third request");
    kept.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let closed = matches!(kept.read(&mut buf), Ok(0) | Err(_))
        && started.elapsed() < Duration::from_secs(20);
    assert!(closed, "a half-sent later request head stays open");
}
