//! The sandbox's start and stop: a stop with watches open ends the watches and returns
//! without waiting for them; a sandbox started on storage a previous one still holds
//! waits for the lock, and after its wait names the folder and the holder.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{Killed, Sandbox, bosun_bin, wait_for};

/// Reads from `stream` until `needle` has been seen or the stream ends; returns all of it.
async fn read_until(stream: &mut tokio::net::TcpStream, seen: &mut Vec<u8>, needle: &[u8]) {
    let mut buf = [0u8; 4096];
    while !seen.windows(needle.len()).any(|w| w == needle) {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_with_an_open_watch_ends_the_watch_and_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = bosun_sandbox::start(bosun_sandbox::SandboxConfig::loopback(
        dir.path().join("data"),
    ))
    .await
    .expect("sandbox");
    let mut stream = tokio::net::TcpStream::connect(sandbox.addr)
        .await
        .expect("connect");
    let request = format!(
        "GET /api/v1/namespaces?watch=true HTTP/1.1\r\nHost: {}\r\n\r\n",
        sandbox.addr
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the watch");
    // The watch is open once the initial ADDED events arrive.
    let mut seen = Vec::new();
    read_until(&mut stream, &mut seen, b"\"kube-system\"").await;
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"type\":\"ADDED\""), "{text}");

    let started = Instant::now();
    // The test's own guard against a hang; the stop itself takes milliseconds.
    tokio::time::timeout(Duration::from_secs(60), sandbox.shutdown())
        .await
        .expect("the stop returned")
        .expect("a clean stop");
    println!("stopped with an open watch in {:?}", started.elapsed());

    // The watch's chunked body was finished (the last chunk), then the connection closed.
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut rest))
        .await
        .expect("the connection closed")
        .expect("read to the end");
    seen.extend_from_slice(&rest);
    assert!(
        seen.ends_with(b"0\r\n\r\n"),
        "the watch stream did not end cleanly: {:?}",
        String::from_utf8_lossy(&seen[seen.len().saturating_sub(200)..])
    );
}

/// `bosun sandbox` on `data`, its first stdout line read by a thread into a channel.
fn spawn_sandbox(
    data: &std::path::Path,
    extra: &[&str],
) -> (Killed, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(bosun_bin())
        .args(["sandbox", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .args(extra)
        .env("LOG_LEVEL", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bosun sandbox");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let out = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = out.send(format!("out: {line}"));
        }
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(format!("err: {line}"));
        }
    });
    (Killed(child), rx)
}

#[test]
fn a_second_sandbox_waits_for_the_storage_lock_of_one_still_running() {
    let mut first = Sandbox::start();
    let (code, _) = first.post(
        "/api/v1/namespaces/default/configmaps",
        &serde_json::json!({"metadata": {"name": "kept"}, "data": {"a": "1"}}),
    );
    assert_eq!(code, 201);
    let (mut second, lines) = spawn_sandbox(&first.data, &["--lock-wait", "120s"]);
    // It says it waits, and does not exit.
    let mut said = Vec::new();
    wait_for(
        "the second sandbox to say it waits for the lock",
        Duration::from_secs(60),
        || {
            said.extend(lines.try_iter());
            said.iter()
                .any(|l| l.contains("the sandbox storage is locked"))
        },
    );
    assert!(second.0.try_wait().expect("try_wait").is_none(), "{said:?}");
    // The first one stops; the second one takes the storage over and serves it.
    first.stop();
    let mut url = None;
    wait_for(
        "the second sandbox to listen",
        Duration::from_secs(60),
        || {
            said.extend(lines.try_iter());
            url = said
                .iter()
                .find_map(|l| l.strip_prefix("out: listening on ").map(String::from));
            url.is_some()
        },
    );
    let addr = url.expect("url").trim_start_matches("http://").to_string();
    let (code, cm) = common::http(
        &addr,
        "GET",
        "/api/v1/namespaces/default/configmaps/kept",
        "",
        "",
    );
    assert_eq!(code, 200, "{cm}");
    assert_eq!(cm["data"]["a"], "1");
}

#[test]
fn a_lock_held_too_long_fails_naming_the_folder_and_the_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data");
    let db = std::fs::File::create(data.join("db")).expect("db");
    db.lock().expect("hold the lock");
    let (mut sandbox, lines) = spawn_sandbox(&data, &["--lock-wait", "1s"]);
    let mut status = None;
    wait_for("the sandbox to give up", Duration::from_secs(60), || {
        status = sandbox.0.try_wait().expect("try_wait");
        status.is_some()
    });
    assert!(!status.expect("exited").success());
    // The output threads finish once the pipes close.
    let said: Vec<String> = lines.iter().collect();
    let all = said.join("\n");
    assert!(all.contains(&data.display().to_string()), "{all}");
    assert!(all.contains("is in use by"), "{all}");
    assert!(
        all.contains(&format!("pid {}", std::process::id())),
        "{all}"
    );
    drop(db);
}
