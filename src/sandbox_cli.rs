//! The sandbox's two commands, the one file of the binary that uses the sandbox crate
//! outside tests (`scripts/check-layering.py` allows no other): `bosun sandbox`, the
//! embedded API server alone, and the API server `bosun run --sandbox` starts in-process
//! (the rest of `run --sandbox` is `cli.rs`'s, on the same start path as a cluster's).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Arguments of `bosun sandbox`.
#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    /// Address to listen on (loopback unless you really mean otherwise).
    #[arg(long, default_value = "127.0.0.1:6445")]
    pub listen: SocketAddr,
    /// Folder for the sled store; the state survives restarts.
    #[arg(long, default_value = ".data/sandbox")]
    pub data: PathBuf,
    /// Where to write a kubeconfig that points at this server.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Require this bearer token on every request.
    #[arg(long, env = "BOSUN_SANDBOX_TOKEN")]
    pub token: Option<String>,
    /// How many changes are kept for watches to resume from; older ones answer 410 Gone.
    #[arg(long, default_value_t = bosun_sandbox::store::DEFAULT_HISTORY)]
    pub watch_history: usize,
    /// Serve a non-loopback `--listen` address without `--token` (refused otherwise:
    /// anyone who can reach it reads and changes every object, Secrets included).
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// Serve HTTPS with a certificate authority made at start: its certificate is written
    /// to `<data>/ca.crt` and into the kubeconfig.
    #[arg(long)]
    pub tls: bool,
    /// How long to wait for the storage lock a sandbox that is still stopping holds.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub lock_wait: std::time::Duration,
    /// A connection that has not sent a whole request head this long after it was opened
    /// is closed (kube-apiserver's `ReadHeaderTimeout` is 32 s).
    #[arg(long, default_value = "32s", value_parser = humantime::parse_duration)]
    pub header_read_timeout: std::time::Duration,
    /// Fault injection for reliability tests: wait this long before every request.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub fault_delay: std::time::Duration,
    /// Fault injection for reliability tests: refuse this share of requests (0 to 1) with
    /// 429 or 500, before doing anything.
    #[arg(long, default_value_t = 0.0)]
    pub fault_rate: f64,
    /// The seed of the refusals drawn (default: the clock).
    #[arg(long)]
    pub fault_seed: Option<u64>,
}

/// `bosun sandbox`: the sandbox alone, until SIGINT or SIGTERM.
pub async fn serve(args: SandboxArgs) -> anyhow::Result<()> {
    let seed = args.fault_seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let faults = bosun_sandbox::faults::Faults::new(args.fault_delay, args.fault_rate, seed)?;
    if faults.active() {
        tracing::warn!(delay = ?args.fault_delay, rate = args.fault_rate, seed, "the sandbox injects faults");
    }
    bosun_sandbox::serve_forever_with(
        bosun_sandbox::SandboxConfig {
            listen: args.listen,
            data: args.data,
            kubeconfig: args.kubeconfig,
            token: args.token,
            watch_history: args.watch_history,
            allow_unauthenticated: args.allow_unauthenticated,
        },
        bosun_sandbox::ServeOptions {
            tls: args.tls,
            lock_wait: args.lock_wait,
            header_read_timeout: args.header_read_timeout,
            faults: std::sync::Arc::new(faults),
        },
    )
    .await
}

/// The API server of `bosun run --sandbox`, in-process, with its kubeconfig.
pub struct Embedded {
    running: bosun_sandbox::RunningSandbox,
    /// The kubeconfig written for it (`<data>/kubeconfig`).
    pub kubeconfig: PathBuf,
}

impl Embedded {
    /// Makes the data folder private, starts the API server on its `sandbox` folder, writes
    /// the kubeconfig and says where both are.
    pub async fn start(
        data: &Path,
        listen: SocketAddr,
        allow_unauthenticated: bool,
    ) -> anyhow::Result<Embedded> {
        private_data_dir(data)?;
        let kubeconfig = data.join("kubeconfig");
        let running = bosun_sandbox::start(bosun_sandbox::SandboxConfig {
            listen,
            data: data.join("sandbox"),
            kubeconfig: Some(kubeconfig.clone()),
            token: None,
            watch_history: bosun_sandbox::store::DEFAULT_HISTORY,
            allow_unauthenticated,
        })
        .await?;
        println!("sandbox API server listening on {}", running.url);
        println!("kubeconfig written to {}", kubeconfig.display());
        println!(
            "try: kubectl --kubeconfig {} get configmaps -A",
            kubeconfig.display()
        );
        Ok(Embedded {
            running,
            kubeconfig,
        })
    }

    /// Stops the API server (after the subsystems that talk to it).
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.running.shutdown().await
    }
}

/// What `bosun run --sandbox` keeps in its data folder.
const DATA_ENTRIES: &[&str] = &[
    "sandbox",
    "journal",
    "tmp",
    "kubeconfig",
    "kubeconfig.tmp",
    "debug.socket",
    "debug.token",
];

/// Creates the data folder of `bosun run --sandbox` `0700`. One left readable by an older
/// bosun is tightened, when it holds only what bosun puts there (a shared folder given as
/// `--data` keeps its mode; the store, journal and kubeconfig in it are private anyway).
fn private_data_dir(dir: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    bosun_platform::create_private_dir(dir)
        .with_context(|| format!("creating the data folder {}", dir.display()))?;
    let ours = std::fs::read_dir(dir)
        .with_context(|| format!("reading the data folder {}", dir.display()))?
        .filter_map(Result::ok)
        .all(|e| DATA_ENTRIES.contains(&e.file_name().to_string_lossy().as_ref()));
    if ours {
        let mut changed = Vec::new();
        bosun_platform::tighten_one(dir, &mut changed)
            .with_context(|| format!("making the data folder {} private", dir.display()))?;
        bosun_platform::log_tightened("data folder", dir, &changed);
    }
    Ok(())
}
