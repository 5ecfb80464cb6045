//! Event → hook process started. A `bosun run` process with 100 global hooks, each bound
//! to one ConfigMap by name, all on one shared watch; the benchmark writes the ConfigMaps one
//! at a time and measures, per write, the time from sending the write to the first
//! instruction of the hook it triggers (the hook records bash's `$EPOCHREALTIME` before it
//! does anything else). The limit, in the same run: a raw kube-rs watcher on the same
//! resource receiving the same write.
//!
//! Run: `cargo bench --bench event_to_hook` (`BENCH_WRITES`, default 300). Goal: p99 < 50 ms.

/// bosun's allocator, as in the binary.
#[global_allocator]
static ALLOCATOR: bosun::memory::Allocator = bosun::memory::Allocator;

#[path = "support/env.rs"]
mod support_env;
use support_env::env;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const HOOKS: usize = 100;

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn write_hook(dir: &Path, i: usize, out: &Path) -> std::io::Result<()> {
    let path = dir.join(format!("hook-{i:03}.sh"));
    let text = format!(
        "#!/bin/bash\nif [ \"$1\" = \"--config\" ]; then\ncat <<'EOF'\nconfigVersion: v1\nkubernetes:\n- name: cm\n  kind: ConfigMap\n  namespace: {{nameSelector: {{matchNames: [default]}}}}\n  nameSelector: {{matchNames: [cm-{i}]}}\n  executeHookOnSynchronization: false\nEOF\nexit 0\nfi\necho \"$EPOCHREALTIME\" >> {}\n",
        out.join(format!("hook-{i}")).display()
    );
    std::fs::write(&path, text)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
}

/// The last `$EPOCHREALTIME` a hook recorded, in µs, and how many lines it has.
fn last_start(file: &Path) -> Option<(usize, u128)> {
    let text = std::fs::read_to_string(file).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let last = lines.last()?.trim().replace(',', ".");
    let (s, us) = last.split_once('.')?;
    let us = format!("{us:0<6}");
    Some((
        lines.len(),
        s.parse::<u128>().ok()? * 1_000_000 + us[..6].parse::<u128>().ok()?,
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let writes: usize = env("BENCH_WRITES", 300);
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    let sandbox = bosun_sandbox::start(bosun_sandbox::SandboxConfig {
        kubeconfig: Some(kubeconfig.clone()),
        ..bosun_sandbox::SandboxConfig::loopback(dir.path().join("data"))
    })
    .await?;
    let client = kube::Client::try_from(kube::Config::new(sandbox.url.parse()?))?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..HOOKS {
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": format!("cm-{i}")}, "data": {"n": "0"}}),
        )?;
        api.create(&PostParams::default(), &cm).await?;
    }

    let hooks = dir.path().join("hooks");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&hooks)?;
    std::fs::create_dir_all(&out)?;
    std::fs::create_dir_all(dir.path().join("modules"))?;
    for i in 0..HOOKS {
        write_hook(&hooks, i, &out)?;
    }
    let log = std::fs::File::create(dir.path().join("bosun.log"))?;
    let mut bosun = Command::new(env!("CARGO_BIN_EXE_bosun"))
        .arg("run")
        .env("KUBE_CONFIG", &kubeconfig)
        .env("GLOBAL_HOOKS_DIR", &hooks)
        .env("MODULES_DIR", dir.path().join("modules"))
        .env("ADDON_OPERATOR_NAMESPACE", "default")
        .env("BOSUN_JOURNAL_DIR", dir.path().join("journal"))
        .env("ADDON_OPERATOR_TMP_DIR", dir.path().join("tmp"))
        .env("ADDON_OPERATOR_LISTEN_ADDRESS", "127.0.0.1")
        .env("ADDON_OPERATOR_LISTEN_PORT", "0")
        .env("DEBUG_UNIX_SOCKET", dir.path().join("debug.socket"))
        .env("BOSUN_LAMBDA", "false")
        .env("BOSUN_DEPLOYER", "false")
        .env("LOG_LEVEL", "warn")
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()?;
    let result = run(&api, &out, writes, dir.path()).await;
    let _ = bosun.kill();
    let _ = bosun.wait();
    sandbox.shutdown().await?;
    result
}

async fn run(api: &Api<ConfigMap>, out: &Path, writes: usize, dir: &Path) -> anyhow::Result<()> {
    // Ready: every hook's bindings are watching (the first converge is done).
    let log = dir.join("bosun.log");
    let deadline = Instant::now() + Duration::from_secs(120);
    let address = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(a) = text.lines().find_map(|l| {
            l.split("bosun HTTP endpoints listening on http://")
                .nth(1)
                .map(|a| a.trim().to_string())
        }) {
            break a;
        }
        anyhow::ensure!(Instant::now() < deadline, "bosun did not start:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    loop {
        let ready = tokio::net::TcpStream::connect(&address).await.ok();
        if let Some(mut s) = ready {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await?;
            let mut buf = String::new();
            s.read_to_string(&mut buf).await?;
            if buf.starts_with("HTTP/1.1 200") {
                break;
            }
        }
        anyhow::ensure!(Instant::now() < deadline, "bosun did not converge");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The limit: a raw watcher of the same resource.
    let (tx, mut raw_rx) = tokio::sync::mpsc::unbounded_channel::<(String, u128)>();
    let watch_api = api.clone();
    let version = api
        .list(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    tokio::spawn(async move {
        let Ok(stream) = watch_api.watch(&WatchParams::default(), &version).await else {
            return;
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(ev)) = stream.next().await {
            if let WatchEvent::Modified(cm) = ev {
                let _ = tx.send((cm.metadata.name.unwrap_or_default(), now_us()));
            }
        }
    });

    let (mut hook_ms, mut raw_ms) = (Vec::new(), Vec::new());
    for n in 0..writes {
        let i = n % HOOKS;
        let file = out.join(format!("hook-{i}"));
        let before = last_start(&file).map_or(0, |(lines, _)| lines);
        let sent = now_us();
        api.patch(
            &format!("cm-{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"n": (n + 1).to_string()}})),
        )
        .await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let started = loop {
            if let Some((lines, at)) = last_start(&file)
                && lines > before
            {
                break at;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "hook {i} did not start for write {n}"
            );
            tokio::time::sleep(Duration::from_micros(500)).await;
        };
        hook_ms.push(started.saturating_sub(sent) as f64 / 1000.0);
        while let Ok((name, at)) = raw_rx.try_recv() {
            if name == format!("cm-{i}") {
                raw_ms.push(at.saturating_sub(sent) as f64 / 1000.0);
            }
        }
    }
    hook_ms.sort_by(f64::total_cmp);
    raw_ms.sort_by(f64::total_cmp);
    let (h50, h99) = (percentile(&hook_ms, 0.5), percentile(&hook_ms, 0.99));
    let (r50, r99) = (percentile(&raw_ms, 0.5), percentile(&raw_ms, 0.99));
    println!("{writes} writes, {HOOKS} bindings on one shared watch, one hook started per write");
    println!("raw kube-rs watcher: event received p50 {r50:.2} ms, p99 {r99:.2} ms");
    println!(
        "bosun: hook's first instruction p50 {h50:.2} ms, p99 {h99:.2} ms; over the raw watcher p50 +{:.2} ms",
        h50 - r50
    );
    println!(
        "event to hook p99 {h99:.2} ms: ratio {:.2} of the 50 ms goal (goal <= 1.00)",
        h99 / 50.0
    );
    Ok(())
}
