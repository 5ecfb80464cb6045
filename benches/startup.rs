//! Startup of a big installation: `bosun run` with 300 modules (a chart each) and 50
//! global hooks against the sandbox in its own process (kube-apiserver with
//! `BENCH_SERVER=real`).
//! - **cold** (empty journal): time to ready (`/readyz` 200) against the intrinsic work of
//!   the converge — the time the hooks ran plus the time Helm worked, summed from bosun's
//!   own metrics (`global_hook_run_seconds`, `helm_operation_seconds`);
//! - **warm** (a restart with a journal of 1M events appended after the cold run): time to
//!   ready against the start's intrinsic work: the journal replay, measured alone in the
//!   same run on a copy, plus the hooks' and Helm's time of the warm start from the same
//!   metrics;
//! - the resident memory of bosun once ready, in all and per module.
//!
//! Run: `cargo bench --bench startup` (`BENCH_MODULES`, `BENCH_GLOBAL_HOOKS`,
//! `BENCH_EVENTS` scale it); `BENCH_PERF_WARM=FILE` records a `perf` profile of the whole
//! machine during the warm start into FILE.

#[path = "support/http.rs"]
mod http;
#[path = "support/env.rs"]
mod support_env;
use support_env::env;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bosun_addon::{Event, State};
use bosun_journal::Journal;

#[path = "support/journal_events.rs"]
mod journal_events;

#[path = "support/cluster.rs"]
mod cluster;

#[path = "support/perf.rs"]
mod perf;

fn write_exec(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

fn installation(dir: &Path, modules: usize, hooks: usize) -> std::io::Result<()> {
    let m = dir.join("modules");
    let g = dir.join("global-hooks");
    std::fs::create_dir_all(&m)?;
    std::fs::create_dir_all(&g)?;
    let mut values = String::new();
    for i in 0..modules {
        let name = format!("mod{i:03}");
        let t = m.join(format!("{:03}-{name}", i + 1)).join("templates");
        std::fs::create_dir_all(&t)?;
        std::fs::write(
            t.join("cm.yaml"),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  index: \"{i}\"\n"
            ),
        )?;
        values.push_str(&format!("{name}Enabled: true\n"));
    }
    std::fs::write(m.join("values.yaml"), values)?;
    for i in 0..hooks {
        write_exec(
            &g.join(format!("{i:03}-hook.sh")),
            &format!(
                "#!/bin/sh\nif [ \"$1\" = \"--config\" ]; then echo '{{\"configVersion\":\"v1\",\"onStartup\":{i}}}'; exit 0; fi\nexit 0\n"
            ),
        )?;
    }
    Ok(())
}

fn start(dir: &Path, kubeconfig: &Path, log: &str) -> std::io::Result<Child> {
    let log = std::fs::File::create(dir.join(log))?;
    Command::new(env!("CARGO_BIN_EXE_bosun"))
        .arg("run")
        .env("KUBE_CONFIG", kubeconfig)
        .env("GLOBAL_HOOKS_DIR", dir.join("global-hooks"))
        .env("MODULES_DIR", dir.join("modules"))
        .env("ADDON_OPERATOR_NAMESPACE", "default")
        .env("BOSUN_JOURNAL_DIR", dir.join("journal"))
        .env("ADDON_OPERATOR_TMP_DIR", dir.join("tmp"))
        .env("ADDON_OPERATOR_LISTEN_ADDRESS", "127.0.0.1")
        .env("ADDON_OPERATOR_LISTEN_PORT", "0")
        .env("DEBUG_UNIX_SOCKET", dir.join("debug.socket"))
        .env("BOSUN_LAMBDA", "false")
        .env("BOSUN_DEPLOYER", "false")
        .env("LOG_LEVEL", "warn")
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
}

/// Waits for `/readyz` 200; returns the HTTP address.
async fn ready(dir: &Path, log: &str, deadline: Duration) -> anyhow::Result<String> {
    let until = Instant::now() + deadline;
    loop {
        let text = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
        let address = http::address_in(&text);
        if let Some(a) = address
            && http::get(&a, "/readyz").await.is_some_and(|(ok, _)| ok)
        {
            return Ok(a);
        }
        anyhow::ensure!(Instant::now() < until, "bosun not ready:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sum of the `_sum` samples of a histogram in Prometheus text.
fn histogram_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.split(['{', ' '])
                .next()
                .is_some_and(|n| n.ends_with(&format!("{name}_sum")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The hooks' and Helm's time bosun reports on `/metrics` at `address`, in seconds.
async fn work_reported(address: &str) -> (f64, f64) {
    let metrics = http::get(address, "/metrics")
        .await
        .map(|(_, t)| t)
        .unwrap_or_default();
    (
        histogram_sum(&metrics, "global_hook_run_seconds")
            + histogram_sum(&metrics, "module_hook_run_seconds"),
        histogram_sum(&metrics, "helm_operation_seconds"),
    )
}

/// The resident set of process `pid` in MiB (`VmRSS` of `/proc/<pid>/status`).
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let modules = env("BENCH_MODULES", 300);
    let hooks = env("BENCH_GLOBAL_HOOKS", 50);
    let events = env("BENCH_EVENTS", 1_000_000) as u64;
    let dir = tempfile::tempdir()?;
    // The API server in its own process, as in a cluster.
    let server = cluster::sandbox(dir.path()).await?;
    let kubeconfig = server.kubeconfig.clone();
    println!("API server: {}", cluster::server_name());
    installation(dir.path(), modules, hooks)?;

    // Cold.
    let started = Instant::now();
    let mut bosun = start(dir.path(), &kubeconfig, "cold.log")?;
    let address = ready(dir.path(), "cold.log", Duration::from_secs(900)).await?;
    let cold = started.elapsed();
    let (hook_s, helm_s) = work_reported(&address).await;
    let cold_rss = rss_mib(bosun.id());
    stop(&mut bosun);
    let intrinsic = hook_s + helm_s;
    println!("{modules} modules with charts, {hooks} global hooks");
    println!(
        "cold start: ready in {:.2} s; intrinsic work {:.2} s (hooks {hook_s:.2} s, Helm {helm_s:.2} s): ratio {:.2} (intrinsic / time to ready; goal ≥ 0.8)",
        cold.as_secs_f64(),
        intrinsic,
        intrinsic / cold.as_secs_f64()
    );
    println!(
        "memory: {cold_rss:.1} MiB resident once ready after the cold start, {:.0} KiB per module",
        cold_rss * 1024.0 / modules.max(1) as f64
    );

    // Warm: the journal grows to `events` more records.
    let journal_dir = dir.path().join("journal");
    {
        let j = Journal::<Event>::open(&journal_dir)?;
        let batch = 10_000u64;
        let mut i = 0;
        while i < events {
            let list: Vec<Event> = (i..(i + batch).min(events))
                .map(|k| journal_events::event(k + 1_000_000_000))
                .collect();
            j.append_batch(&list).await?;
            i += batch;
        }
        j.close();
    }
    let copy = dir.path().join("journal-copy");
    let status = Command::new("cp")
        .arg("-a")
        .arg(&journal_dir)
        .arg(&copy)
        .status()?;
    anyhow::ensure!(status.success(), "cannot copy the journal");
    let replay = {
        let t = Instant::now();
        let j = Journal::<Event>::open(&copy)?;
        let (_state, last) = j.replay::<State, _>(None, true, |s, r| s.apply(&r.event))?;
        let took = t.elapsed();
        j.close();
        println!("journal: {last} records");
        took
    };
    let perf = perf::perf_start("BENCH_PERF_WARM", true);
    let started = Instant::now();
    let mut bosun = start(dir.path(), &kubeconfig, "warm.log")?;
    let address = ready(dir.path(), "warm.log", Duration::from_secs(900)).await?;
    let warm = started.elapsed();
    perf::perf_stop(perf);
    let (hook_s, helm_s) = work_reported(&address).await;
    let warm_rss = rss_mib(bosun.id());
    stop(&mut bosun);
    let intrinsic = replay.as_secs_f64() + hook_s + helm_s;
    println!(
        "warm start: ready in {:.2} s; intrinsic work {intrinsic:.2} s (the replay alone {:.2} s, hooks {hook_s:.2} s, Helm {helm_s:.2} s): ratio {:.2} (intrinsic / time to ready; goal ≥ 0.8)",
        warm.as_secs_f64(),
        replay.as_secs_f64(),
        intrinsic / warm.as_secs_f64()
    );
    println!(
        "memory: {warm_rss:.1} MiB resident once ready after the warm start ({events} more journal events)"
    );
    drop(server);
    Ok(())
}
