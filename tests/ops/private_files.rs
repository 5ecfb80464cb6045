//! Who can read bosun's files, end to end: the sandbox's store and kubeconfig (which
//! carries the token) and the data folder of `bosun run --sandbox` are private (`0700`
//! folders, `0600` files), and ones an older bosun left readable are tightened at start.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Killed, Sandbox, bosun_bin, capture, http_full, wait_for, workdir};
use serde_json::{Value, json};

/// Permission bits of `path` (not following symbolic links).
fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// `path` and everything under it.
fn tree(path: &Path) -> Vec<PathBuf> {
    let mut all = vec![path.to_path_buf()];
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("read_dir") {
            all.extend(tree(&entry.expect("entry").path()));
        }
    }
    all
}

/// Asserts nothing under `dir` is open to group or others, and `dir` itself is `0700`.
fn assert_private(dir: &Path) {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    for p in tree(dir) {
        assert_eq!(mode(&p) & 0o077, 0, "{} is {:o}", p.display(), mode(&p));
    }
}

/// Makes `dir` and everything under it readable by all, as an older bosun left it.
fn loosen(dir: &Path) {
    for p in tree(dir) {
        let m = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).expect("chmod");
    }
}

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

#[test]
fn the_sandbox_store_and_kubeconfig_are_private_and_older_ones_are_tightened() {
    let mut sb = Sandbox::start_with(&["--token", "s3cret-token"]);
    let auth = [
        ("Content-Type", "application/json"),
        ("Authorization", "Bearer s3cret-token"),
    ];
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "keep"}, "data": {"password": "hunter2"}});
    let (code, body) = request(
        sb.addr(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &auth,
        &cm.to_string(),
    );
    assert_eq!(code, 201, "{body}");
    assert_private(&sb.data);
    assert_eq!(mode(&sb.kubeconfig), 0o600);
    let text = std::fs::read_to_string(&sb.kubeconfig).expect("kubeconfig");
    assert!(text.contains("s3cret-token"), "{text}");

    // As an older bosun left them: readable by everyone. A restart tightens them.
    sb.stop();
    loosen(&sb.data);
    std::fs::set_permissions(&sb.kubeconfig, std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    assert_eq!(mode(&sb.data), 0o755);
    sb.restart();
    assert_private(&sb.data);
    assert_eq!(mode(&sb.kubeconfig), 0o600);
    let (code, body) = request(
        sb.addr(),
        "GET",
        "/api/v1/namespaces/default/configmaps/keep",
        &auth,
        "",
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"]["password"], "hunter2");
}

#[test]
fn run_with_the_sandbox_keeps_its_data_folder_private() {
    let work = workdir();
    let data = work.path().join(".data");
    // An empty data folder an older bosun created readable by everyone.
    std::fs::create_dir(&data).expect("mkdir");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut child = Command::new(bosun_bin())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "run",
            "--sandbox",
            "--sandbox-listen",
            "127.0.0.1:0",
            "--data",
        ])
        .arg(&data)
        .env("ADDON_OPERATOR_LISTEN_ADDRESS", "127.0.0.1")
        .env("ADDON_OPERATOR_LISTEN_PORT", "0")
        .env("LOG_LEVEL", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start bosun run --sandbox");
    let seen = capture(&mut child);
    let _child = Killed(child);
    let printed = || seen.lock().map(|s| s.clone()).unwrap_or_default();
    wait_for(
        "bosun run --sandbox to start its operator",
        Duration::from_secs(60),
        || printed().contains("bosun is running") || data.join("journal").exists(),
    );
    assert_eq!(mode(&data), 0o700, "{}", printed());
    assert_private(&data.join("sandbox"));
    assert_eq!(mode(&data.join("kubeconfig")), 0o600);
    wait_for("the journal", Duration::from_secs(60), || {
        data.join("journal").join("segments").exists()
    });
    assert_eq!(mode(&data.join("journal")), 0o700);
}
