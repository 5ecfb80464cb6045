//! A burst of changes through one kubernetes binding of a running `bosun run` (this
//! benchmark's own build of it, optimised): 20,000 changes of 50 ConfigMaps, written as
//! fast as 16 clients can, to a global hook that does nothing. Prints the resident size
//! (RSS) of the bosun process before the burst, at its peak and once the burst is handled
//! and bosun idle again, each against the size before the burst; and at the peak, the
//! tasks queued then. What users expect: memory during a burst bounded by what is queued,
//! not by how many changes came; back near the start once it is handled.
//!
//! Run: `cargo bench --bench burst` (`BURST_CHANGES`, `BURST_OBJECTS`, `BURST_SETTLE`
//! seconds idle before the settled figure, default 20; `BENCH_SERVER=real` on the real
//! control plane).

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/http.rs"]
mod http;
#[path = "support/env.rs"]
mod support_env;
use support_env::env;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// The resident size of process `pid` in bytes (`VmRSS`).
fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Tasks in bosun's queues, from its metrics.
async fn queued(addr: &str) -> Option<u64> {
    let (ok, text) = http::get(addr, "/metrics").await?;
    let mut total = 0.0;
    let mut seen = false;
    for line in text.lines() {
        if line.contains("tasks_queue_length{") {
            total += line.rsplit(' ').next()?.parse::<f64>().ok()?;
            seen = true;
        }
    }
    (ok && seen).then_some(total as u64)
}

fn write_exec(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Starts `bosun run` against the cluster with one global hook bound to the burst's
/// ConfigMaps; returns the child and its public address.
async fn start_bosun(
    dir: &Path,
    kubeconfig: &Path,
) -> anyhow::Result<(std::process::Child, String)> {
    let hooks = dir.join("global-hooks");
    std::fs::create_dir_all(&hooks)?;
    std::fs::create_dir_all(dir.join("modules"))?;
    write_exec(
        &hooks.join("burst.sh"),
        "#!/bin/sh\nif [ \"$1\" = \"--config\" ]; then\ncat <<'EOF'\nconfigVersion: v1\nkubernetes:\n- name: burst\n  kind: ConfigMap\n  labelSelector: {matchLabels: {burst: \"yes\"}}\n  executeHookOnSynchronization: false\nEOF\nexit 0\nfi\nif [ -n \"$BURST_HOOK_SLEEP\" ]; then sleep \"$BURST_HOOK_SLEEP\"; fi\nexit 0\n",
    )?;
    let log = std::fs::File::create(dir.join("bosun.log"))?;
    // BURST_ARGS: more arguments of `bosun run` (`--pprof-address=127.0.0.1:6060` to look
    // at the heap during the burst).
    let extra = std::env::var("BURST_ARGS").unwrap_or_default();
    // BURST_BOSUN: another build of bosun to run (to compare two builds' memory).
    let bosun =
        std::env::var_os("BURST_BOSUN").unwrap_or_else(|| env!("CARGO_BIN_EXE_bosun").into());
    let child = std::process::Command::new(bosun)
        .arg("run")
        .args(extra.split_whitespace())
        .env("KUBE_CONFIG", kubeconfig)
        .env("GLOBAL_HOOKS_DIR", &hooks)
        .env("MODULES_DIR", dir.join("modules"))
        .env("ADDON_OPERATOR_NAMESPACE", "default")
        .env("BOSUN_JOURNAL_DIR", dir.join("journal"))
        .env("ADDON_OPERATOR_TMP_DIR", dir.join("tmp"))
        .env("DEBUG_UNIX_SOCKET", dir.join("debug.socket"))
        .env("ADDON_OPERATOR_LISTEN_ADDRESS", "127.0.0.1")
        .env("ADDON_OPERATOR_LISTEN_PORT", "0")
        .env("BOSUN_LAMBDA", "false")
        .env("BOSUN_DEPLOYER", "false")
        .env("LOG_LEVEL", "info")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let log = dir.join("bosun.log");
    let mut addr = String::new();
    cluster::wait(
        "bosun's HTTP address",
        Duration::from_secs(120),
        async || match http::address_in(&std::fs::read_to_string(&log).unwrap_or_default()) {
            Some(a) => {
                addr = a;
                true
            }
            None => false,
        },
    )
    .await?;
    Ok((child, addr))
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let changes: usize = env("BURST_CHANGES", 20_000);
    let objects: usize = env("BURST_OBJECTS", 50);
    let settle = Duration::from_secs(env("BURST_SETTLE", 20) as u64);
    let dir = tempfile::tempdir()?;
    let sb = cluster::sandbox(dir.path()).await?;
    let (child, addr) = start_bosun(dir.path(), &sb.kubeconfig).await?;
    let bosun = Killed(child);
    let pid = bosun.0.id();
    cluster::wait("bosun ready", Duration::from_secs(120), async || {
        http::get(&addr, "/readyz").await.is_some_and(|(ok, _)| ok)
    })
    .await?;

    let api: Api<ConfigMap> = Api::namespaced(sb.client.clone(), "default");
    for i in 0..objects {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("burst-{i}"), "labels": {"burst": "yes"}},
            "data": {"n": "0", "payload": "x".repeat(512)},
        }))?;
        api.create(&PostParams::default(), &cm).await?;
    }
    let idle = async || {
        // Empty queues three samples in a row (a task may be between two queues).
        for _ in 0..3 {
            if queued(&addr).await != Some(0) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        true
    };
    cluster::wait(
        "the objects' events handled",
        Duration::from_secs(120),
        idle,
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss(pid).ok_or_else(|| anyhow::anyhow!("no RSS for bosun"))?;

    // The burst, with the peak RSS and the queue at that moment sampled beside it.
    let peak = Arc::new(AtomicU64::new(before));
    let queued_at_peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, queued_at_peak, done, addr) = (
            peak.clone(),
            queued_at_peak.clone(),
            done.clone(),
            addr.clone(),
        );
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                if let Some(now) = rss(pid)
                    && now > peak.load(Ordering::Relaxed)
                {
                    peak.store(now, Ordering::Relaxed);
                    if let Some(q) = queued(&addr).await {
                        queued_at_peak.store(q, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for _ in 0..16 {
        let (api, next) = (api.clone(), next.clone());
        writers.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                if n >= changes {
                    return Ok::<_, anyhow::Error>(());
                }
                let patch = json!({"data": {"n": n.to_string()}});
                api.patch(
                    &format!("burst-{}", n % objects),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
            }
        }));
    }
    for w in writers {
        w.await??;
    }
    let sent = started.elapsed();
    cluster::wait("the burst handled", Duration::from_secs(600), idle).await?;
    let handled = started.elapsed();
    tokio::time::sleep(settle).await;
    done.store(true, Ordering::Relaxed);
    sampler.await?;
    let settled = rss(pid).ok_or_else(|| anyhow::anyhow!("no RSS for bosun"))?;
    let peak = peak.load(Ordering::Relaxed);
    println!(
        "burst: {changes} changes of {objects} ConfigMaps on {}, sent in {:.1} s, handled in {:.1} s",
        cluster::server_name(),
        sent.as_secs_f64(),
        handled.as_secs_f64()
    );
    println!(
        "RSS before the burst {:.1} MiB; peak {:.1} MiB with {} tasks queued; settled after {} s idle {:.1} MiB",
        mib(before),
        mib(peak),
        queued_at_peak.load(Ordering::Relaxed),
        settle.as_secs(),
        mib(settled)
    );
    println!(
        "peak ÷ RSS before the burst: {:.2}× (goal ≤ 2×); settled ÷ before: {:.2}× (goal ≤ 1.25×)",
        peak as f64 / before as f64,
        settled as f64 / before as f64
    );
    Ok(())
}
