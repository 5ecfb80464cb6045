#![allow(dead_code)] // shared by several benches, each using a part
//! What the benches against a sandbox share: a counting allocator (the heap a subsystem
//! holds), a sandbox API server in its own process, dynamic objects, waiting with a
//! deadline.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bosun::memory::Allocator;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::Value;

/// bosun's allocator, counting the bytes live.
///
/// Each thread counts in a shard of its own, so that counting does not make the threads
/// of an allocation-heavy path contend for one cache line (which would slow bosun's paths
/// here beyond what they cost in production, where nothing counts).
pub struct Counting;

const SHARDS: usize = 64;

/// One thread's count, on a cache line of its own.
#[repr(align(128))]
struct Shard(AtomicIsize);

/// Bytes allocated minus bytes freed, by shard (a block may be freed by another thread
/// than the one that allocated it: only the sum means something).
static COUNTS: [Shard; SHARDS] = [const { Shard(AtomicIsize::new(0)) }; SHARDS];

/// The shard the next thread takes.
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn count(delta: isize) {
    let shard = SHARD
        .try_with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS);
            }
            s.get()
        })
        // A thread's last frees, after its locals are gone.
        .unwrap_or(0);
    COUNTS[shard].0.fetch_add(delta, Ordering::Relaxed);
}

/// Bytes allocated and not freed, every thread's.
pub fn live() -> isize {
    COUNTS.iter().map(|s| s.0.load(Ordering::SeqCst)).sum()
}

/// The heap held once what is in flight settles: the least of 20 readings of [`live`]
/// 25 ms apart (one reading can catch a response or a batch on its way, and moved the
/// deployer's heap per further item from 1.2× to 2.1× and to −1.2× in single runs).
pub async fn settled_live() -> isize {
    let mut least = live();
    for _ in 0..19 {
        tokio::time::sleep(Duration::from_millis(25)).await;
        least = least.min(live());
    }
    least
}

// SAFETY: delegates to bosun's allocator and only counts sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size() as isize);
        // SAFETY: same layout contract as the caller's.
        unsafe { Allocator.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        count(-(l.size() as isize));
        // SAFETY: p was allocated by Allocator with l.
        unsafe { Allocator.dealloc(p, l) }
    }
}

/// A sandbox API server in its own process (as in a cluster: the heap the bench measures
/// is bosun's alone), or the real control plane, and a client of it. The process is killed
/// when the guard drops.
pub struct SandboxProcess {
    child: std::process::Child,
    /// The real control plane's standard input: it stops when this closes.
    _stdin: Option<std::process::ChildStdin>,
    pub kubeconfig: std::path::PathBuf,
    pub client: kube::Client,
}

impl Drop for SandboxProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the bench runs against the real control plane: `BENCH_SERVER=real` (kube-apiserver,
/// etcd and kube-controller-manager of `tests/controlplane`, built by
/// `scripts/build-controlplane.sh`), else the sandbox.
pub fn real_server() -> bool {
    std::env::var("BENCH_SERVER").is_ok_and(|s| s == "real")
}

/// The API server the bench runs against, as it prints it beside its figures.
pub fn server_name() -> &'static str {
    if real_server() {
        "kube-apiserver (the real control plane)"
    } else {
        "the sandbox"
    }
}

/// Starts the real control plane with its data under `dir` and a client of it.
async fn control_plane(dir: &Path) -> anyhow::Result<SandboxProcess> {
    use std::io::BufRead as _;
    let bin = std::env::var_os("BOSUN_CONTROLPLANE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/controlplane/controlplane")
        });
    anyhow::ensure!(
        bin.exists(),
        "{} is missing: run scripts/build-controlplane.sh (needs Go)",
        bin.display()
    );
    let data = dir.join("controlplane");
    let mut child = std::process::Command::new(&bin)
        .args(["serve", "--stop-on-stdin-eof", "--data"])
        .arg(&data)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let stdin = child.stdin.take();
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let ready = tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        let ready = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.starts_with("ready "));
        std::thread::spawn(move || for _ in lines {});
        ready
    })
    .await?;
    anyhow::ensure!(
        ready,
        "the control plane did not start (logs in {})",
        data.display()
    );
    let kubeconfig = data.join("kubeconfig");
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(SandboxProcess {
        child,
        _stdin: stdin,
        kubeconfig,
        client: kube::Client::try_from(config)?,
    })
}

/// Starts `bosun sandbox` with its data and kubeconfig under `dir` (the real control plane
/// with `BENCH_SERVER=real`); it logs at `BENCH_SANDBOX_LOG_LEVEL` (default `warn`; `trace`
/// logs every request it answers).
pub async fn sandbox(dir: &Path) -> anyhow::Result<SandboxProcess> {
    if real_server() {
        return control_plane(dir).await;
    }
    let kubeconfig = dir.join("kubeconfig");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_bosun"))
        .args(["sandbox", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.join("sandbox"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env(
            "LOG_LEVEL",
            std::env::var("BENCH_SANDBOX_LOG_LEVEL").unwrap_or("warn".into()),
        )
        .stdout(std::process::Stdio::null())
        .spawn()?;
    let mut sb = SandboxProcess {
        child,
        _stdin: None,
        kubeconfig: kubeconfig.clone(),
        client: kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse()?))?,
    };
    wait(
        "the sandbox's kubeconfig",
        Duration::from_secs(60),
        async || kubeconfig.exists(),
    )
    .await?;
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    sb.client = kube::Client::try_from(config)?;
    Ok(sb)
}

/// An API resource by its parts.
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// POSTs `v`.
pub async fn create(api: &Api<DynamicObject>, v: Value) -> anyhow::Result<()> {
    let o: DynamicObject = serde_json::from_value(v)?;
    api.create(&PostParams::default(), &o).await?;
    Ok(())
}

/// Polls `cond` every 20 ms until it holds, or fails after `limit`.
pub async fn wait(
    what: &str,
    limit: Duration,
    mut cond: impl AsyncFnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!("timed out waiting for {what}")
}
