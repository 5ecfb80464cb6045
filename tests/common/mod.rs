//! Test harness: a real `bosun sandbox` process on a free loopback port, HTTP requests
//! through bosun's debug client, kubectl, and waiting for conditions with a deadline.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod controlplane;
pub mod tls;
pub mod webhooks;

use controlplane::{ControlPlane, Server};

/// The bosun binary under test.
pub fn bosun_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bosun"))
}

/// The set-up's tools folder: `BOSUN_TOOLS_DIR`, else `.tools` in the repository.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("BOSUN_TOOLS_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools"))
}

/// The Python of the project's virtual environment (`scripts/setup.sh`), which has the
/// `kubernetes` package; the system `python3` when there is none.
pub fn python() -> PathBuf {
    let venv = tools_dir().join("venv/bin/python3");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// The two Helm engines bosun can run, for tests that run under both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelmEngine {
    /// `libhelm_c.so`, in-process.
    Library,
    /// The `helm` binary.
    Cli,
}

impl HelmEngine {
    /// The environment of a `bosun run` that uses this engine.
    pub fn env(self) -> Vec<(String, String)> {
        let tools = tools_dir();
        match self {
            HelmEngine::Library => vec![
                ("BOSUN_HELM_ENGINE".into(), "library".into()),
                (
                    "HELM_LIB_PATH".into(),
                    tools.join("helm/libhelm_c.so").display().to_string(),
                ),
            ],
            HelmEngine::Cli => vec![
                ("BOSUN_HELM_ENGINE".into(), "cli".into()),
                ("HELM_BIN_PATH".into(), helm_bin().display().to_string()),
            ],
        }
    }

    /// The engine itself, for tests that drive Helm directly.
    pub async fn open(self) -> bosun::helm::HelmEngine {
        let tools = tools_dir();
        let settings = bosun::helm::EngineSettings {
            choice: match self {
                HelmEngine::Library => bosun::helm::EngineChoice::Library,
                HelmEngine::Cli => bosun::helm::EngineChoice::Cli,
            },
            binary: Some(helm_bin()),
            library: Some(tools.join("helm/libhelm_c.so")),
            // A private folder: bosun writes values files only into one.
            tmp_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("helm-values"),
        };
        bosun::helm::HelmEngine::select(&settings)
            .await
            .unwrap_or_else(|e| panic!("{self:?} engine (scripts/setup-helm.sh): {e}"))
    }
}

/// The `helm` binary of the set-up.
pub fn helm_bin() -> PathBuf {
    tools_dir().join("helm/helm")
}

/// The API server of a test: a sandbox child process or, with `BOSUN_TEST_SERVER=real`,
/// the real control plane ([`controlplane`]). Its request helpers work alike on both (the
/// control plane's through its plain-HTTP admin proxy).
pub struct Sandbox {
    /// `http://127.0.0.1:PORT` (the real control plane's `https://127.0.0.1:PORT`).
    pub url: String,
    /// A kubeconfig pointing at it.
    pub kubeconfig: PathBuf,
    /// Its storage folder.
    pub data: PathBuf,
    dir: tempfile::TempDir,
    child: Option<Child>,
    listen: String,
    /// Extra arguments of `bosun sandbox`.
    pub args: Vec<String>,
    /// The real control plane, when this is one.
    real: Option<ControlPlane>,
}

impl Sandbox {
    /// Starts the test's API server: a sandbox on a free port, or the real control plane
    /// with `BOSUN_TEST_SERVER=real`.
    pub fn start() -> Sandbox {
        match controlplane::server() {
            Server::Sandbox => Self::start_with(&[]),
            Server::Real => Self::real(),
        }
    }

    /// Starts the real control plane, whatever `BOSUN_TEST_SERVER` says.
    pub fn real() -> Sandbox {
        let dir = tempfile::tempdir().expect("temp dir");
        let cp = ControlPlane::start(dir.path());
        Sandbox {
            url: cp.server.clone(),
            kubeconfig: cp.kubeconfig.clone(),
            data: cp.data.clone(),
            dir,
            child: None,
            listen: cp.proxy.clone(),
            args: Vec::new(),
            real: Some(cp),
        }
    }

    /// Starts a sandbox on a free port, whatever `BOSUN_TEST_SERVER` says.
    #[allow(clippy::self_named_constructors)] // `Sandbox::sandbox()` beside `Sandbox::real()`
    pub fn sandbox() -> Sandbox {
        Self::start_with(&[])
    }

    /// Whether this is the real control plane.
    pub fn is_real(&self) -> bool {
        self.real.is_some()
    }

    /// The real control plane, when this is one.
    pub fn control_plane(&self) -> Option<&ControlPlane> {
        self.real.as_ref()
    }

    /// Starts a sandbox on a free port with extra arguments (always a sandbox: the
    /// arguments are the sandbox's).
    pub fn start_with(args: &[&str]) -> Sandbox {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        let kubeconfig = dir.path().join("kubeconfig");
        let mut sb = Sandbox {
            url: String::new(),
            kubeconfig,
            data,
            dir,
            child: None,
            listen: "127.0.0.1:0".into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            real: None,
        };
        sb.spawn();
        sb
    }

    fn spawn(&mut self) {
        let mut child = Command::new(bosun_bin())
            .args(["sandbox", "--listen", &self.listen, "--data"])
            .arg(&self.data)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(&self.args)
            .env(
                "LOG_LEVEL",
                std::env::var("SANDBOX_LOG_LEVEL").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn bosun sandbox");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = lines
            .next()
            .expect("sandbox exited before listening")
            .expect("read stdout");
        let url = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_string();
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        self.listen = url
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .to_string();
        self.url = url;
        self.child = Some(child);
    }

    /// Stops the server gracefully (SIGTERM) and waits for it.
    pub fn stop(&mut self) {
        if let Some(cp) = self.real.as_mut() {
            cp.stop();
        }
        if let Some(child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            wait_or_kill(child, Duration::from_secs(20));
        }
    }

    /// Kills the server with SIGKILL (the real control plane: all of it at once).
    pub fn kill9(&mut self) {
        if let Some(cp) = self.real.as_mut() {
            cp.kill9();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Restarts on the same port and storage. The real control plane restarts its API
    /// server with etcd's history compacted (watches resuming from before get 410 Gone).
    pub fn restart(&mut self) {
        if let Some(cp) = self.real.as_mut() {
            cp.restart_api_server();
            return;
        }
        self.stop();
        self.spawn();
    }

    /// kubectl (the default one) with this sandbox's kubeconfig.
    pub fn kubectl(&self) -> Command {
        self.kubectl_at(Path::new("kubectl"))
    }

    /// A given kubectl binary with this sandbox's kubeconfig.
    pub fn kubectl_at(&self, bin: &Path) -> Command {
        let mut cmd = Command::new(bin);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd.env("KUBECACHEDIR", self.dir.path().join("kubecache"));
        cmd.env("HOME", self.dir.path());
        cmd
    }

    /// The temp folder of this sandbox (for scratch files).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// host:port.
    pub fn addr(&self) -> &str {
        &self.listen
    }

    /// Sends a request; returns status and the decoded JSON body (Null when not JSON).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &str,
    ) -> (u16, Value) {
        // A sandbox started with `--token` is asked with it.
        let token = self
            .args
            .iter()
            .position(|a| a == "--token")
            .and_then(|i| self.args.get(i + 1))
            .map(|t| format!("Bearer {t}"))
            .unwrap_or_default();
        let headers = [
            ("Content-Type", content_type),
            ("Authorization", token.as_str()),
        ];
        let (status, bytes) = http_full(&self.listen, method, path, &headers, body.as_bytes());
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// GET returning JSON.
    pub fn get(&self, path: &str) -> (u16, Value) {
        self.request("GET", path, "", "")
    }

    /// POST JSON.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.request("POST", path, "application/json", &body.to_string())
    }

    /// PUT JSON.
    pub fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.request("PUT", path, "application/json", &body.to_string())
    }

    /// Creates a CRD and waits until its resource is served (kube-apiserver serves a new
    /// CRD a moment after the create; the sandbox at once).
    pub fn create_crd(&self, crd: &Value) {
        let (code, body) = self.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd,
        );
        assert_eq!(code, 201, "create CRD: {body}");
        let spec = &crd["spec"];
        let version = spec["versions"][0]["name"].as_str().unwrap_or("v1");
        let path = format!(
            "/apis/{}/{version}/{}",
            spec["group"].as_str().unwrap_or_default(),
            spec["names"]["plural"].as_str().unwrap_or_default()
        );
        wait_for(&format!("{path} served"), Duration::from_secs(60), || {
            self.get(&path).0 == 200
        });
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Waits for a child asked to stop to end, and kills it once `within` has passed.
pub fn wait_or_kill(mut child: Child, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A minimal HTTP/1.1 client (one request per connection).
pub fn http(addr: &str, method: &str, path: &str, content_type: &str, body: &str) -> (u16, Value) {
    let (status, bytes) = http_raw(addr, method, path, content_type, body.as_bytes());
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Like [`http`], returning the raw body.
pub fn http_raw(
    addr: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, Vec<u8>) {
    http_full(addr, method, path, &[("Content-Type", content_type)], body)
}

/// A request with arbitrary headers (empty values are skipped), returning the raw body.
/// It goes through the debug commands' client on a runtime of its own, so that both plain
/// and `#[tokio::test]` tests can call it.
pub fn http_full(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("HTTP client runtime")
    });
    let length = body.len().to_string();
    let all: Vec<(String, String)> = [
        ("Host", addr),
        ("Connection", "close"),
        ("Content-Length", length.as_str()),
    ]
    .into_iter()
    .chain(headers.iter().copied().filter(|(_, v)| !v.is_empty()))
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect();
    let (addr, method, path, body) = (
        addr.to_string(),
        method.to_string(),
        path.to_string(),
        body.to_vec(),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        let headers: Vec<(&str, &str)> =
            all.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let answer = tokio::time::timeout(
            Duration::from_secs(60),
            bosun::debug::client::tcp(&addr, &method, &path, &headers, body),
        )
        .await;
        let _ = tx.send(answer);
    });
    rx.recv()
        .expect("the HTTP client task")
        .expect("an answer within 60s")
        .expect("an HTTP exchange")
}

/// The debug TCP address and its token, from the web view's address bosun printed
/// (`… web view: http://127.0.0.1:PORT/ui?token=TOKEN`).
pub fn debug_tcp(printed: &str) -> Option<(String, String)> {
    printed.lines().find_map(|l| {
        let url = l.split("web view: http://").nth(1)?.trim();
        let (addr, token) = url.split_once("/ui?token=")?;
        Some((addr.to_string(), token.to_string()))
    })
}

/// Polls `cond` until it holds or `timeout` passes; panics with `what` on timeout.
pub fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

/// `bosun <args> --debug-unix-socket <socket>`: a debug command against a running bosun.
pub fn debug_cli(socket: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bosun_bin());
    cmd.args(args)
        .arg("--debug-unix-socket")
        .arg(socket)
        .env("LOG_LEVEL", "error");
    cmd
}

/// Runs a command, returning stdout; panics with stderr on failure.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run command");
    assert!(
        out.status.success(),
        "command {cmd:?} failed: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command expected to fail; returns stderr.
pub fn run_err(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run command");
    assert!(
        !out.status.success(),
        "command {cmd:?} unexpectedly succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A `bosun run` child process against a sandbox, logging to `operator.log` in its work
/// folder.
pub struct Operator {
    child: Option<Child>,
    /// Its environment.
    pub env: Vec<(String, String)>,
    /// Start with `env` alone (and `PATH`), not the test's environment.
    clear_env: bool,
    /// Arguments after `run`.
    args: Vec<String>,
    log: PathBuf,
    /// The working directory of the process (the test's when `None`).
    cwd: Option<PathBuf>,
}

impl Operator {
    /// Starts bosun with exactly `env` (plus `PATH`), logging to `work/operator.log`.
    pub fn start_with_only(env: &[(&str, &str)], work: &Path) -> Operator {
        let mut op = Operator {
            child: None,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            clear_env: true,
            args: Vec::new(),
            log: work.join("operator.log"),
            cwd: None,
        };
        op.spawn();
        op
    }

    /// Starts bosun with the global hooks in `hooks` and `work/modules` as MODULES_DIR.
    pub fn start(sb: &Sandbox, hooks: &Path, work: &Path) -> Operator {
        Operator::start_with(sb, hooks, work, &[])
    }

    /// Like [`Operator::start`], with extra environment.
    pub fn start_with(sb: &Sandbox, hooks: &Path, work: &Path, extra: &[(&str, &str)]) -> Operator {
        Operator::start_in(sb, hooks, work, extra, None)
    }

    /// Like [`Operator::start_with`], with command-line arguments after `run`.
    pub fn start_with_args(
        sb: &Sandbox,
        hooks: &Path,
        work: &Path,
        extra: &[(&str, &str)],
        args: &[&str],
    ) -> Operator {
        Operator::start_full(sb, hooks, work, extra, None, args)
    }

    /// Like [`Operator::start_with`], in working directory `dir` when given (the test's
    /// otherwise).
    pub fn start_in(
        sb: &Sandbox,
        hooks: &Path,
        work: &Path,
        extra: &[(&str, &str)],
        dir: Option<&Path>,
    ) -> Operator {
        Operator::start_full(sb, hooks, work, extra, dir, &[])
    }

    fn start_full(
        sb: &Sandbox,
        hooks: &Path,
        work: &Path,
        extra: &[(&str, &str)],
        dir: Option<&Path>,
        args: &[&str],
    ) -> Operator {
        let mut env = vec![
            (
                "KUBE_CONFIG".to_string(),
                sb.kubeconfig.display().to_string(),
            ),
            ("GLOBAL_HOOKS_DIR".into(), hooks.display().to_string()),
            (
                "MODULES_DIR".into(),
                work.join("modules").display().to_string(),
            ),
            ("ADDON_OPERATOR_NAMESPACE".into(), "default".into()),
            (
                "BOSUN_JOURNAL_DIR".into(),
                work.join("journal").display().to_string(),
            ),
            (
                "ADDON_OPERATOR_TMP_DIR".into(),
                work.join("tmp").display().to_string(),
            ),
            ("OUT_DIR".into(), work.join("out").display().to_string()),
            ("LOG_LEVEL".into(), "debug".into()),
            ("ADDON_OPERATOR_LISTEN_ADDRESS".into(), "127.0.0.1".into()),
            ("ADDON_OPERATOR_LISTEN_PORT".into(), "0".into()),
            (
                "DEBUG_UNIX_SOCKET".into(),
                work.join("debug.socket").display().to_string(),
            ),
        ];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let mut op = Operator {
            child: None,
            env,
            clear_env: false,
            args: args.iter().map(|a| a.to_string()).collect(),
            log: work.join("operator.log"),
            cwd: dir.map(Path::to_path_buf),
        };
        op.spawn();
        op
    }

    /// Starts (again) with the same environment.
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let err = log.try_clone().expect("log file");
        let mut cmd = Command::new(bosun_bin());
        if self.clear_env {
            cmd.env_clear();
            if let Ok(path) = std::env::var("PATH") {
                cmd.env("PATH", path);
            }
        }
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        let child = cmd
            .arg("run")
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("start bosun run");
        self.child = Some(child);
    }

    /// Whether the process has exited (it is reaped then).
    pub fn exited(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(Some(_))) => {
                self.child = None;
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for the process to exit on its own: `Some(success)`, or `None` at the deadline.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<bool> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status.success());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        None
    }

    /// The public HTTP address (`/metrics`, `/readyz`…), once bosun has printed it.
    pub fn http_address(&self) -> Option<String> {
        self.logs().lines().find_map(|l| {
            l.split("bosun HTTP endpoints listening on http://")
                .nth(1)
                .map(|a| a.trim().to_string())
        })
    }

    /// Everything it printed.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// [`wait_for`], showing the end of the operator's log on timeout.
    pub fn wait(&self, what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if cond() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let logs = self.logs();
        let tail: Vec<&str> = logs.lines().rev().take(80).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!(
            "timed out after {timeout:?} waiting for {what}; operator log ends with:\n{}",
            tail.join("\n")
        );
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Reads a JSON file, panicking with its content when it is not JSON.
pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

/// A work folder with `out/` and `modules/`.
pub fn workdir() -> tempfile::TempDir {
    let work = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(work.path().join("out")).expect("out dir");
    std::fs::create_dir_all(work.path().join("modules")).expect("modules dir");
    work
}

/// The converges completed so far, or 0 while the journal is not there yet.
pub fn converges(dir: &Path) -> u64 {
    try_journal_state(dir).map_or(0, |(state, _)| state.converge.completed)
}

/// The state a journal replays to, as bosun rebuilds it at start (the latest snapshot,
/// then the events after it: after a compaction the events before the snapshot are gone,
/// and folding the events alone would lose what they said), and the events it still
/// holds. Read-only, works while bosun runs.
pub fn journal_state(dir: &Path) -> (bosun_addon::State, Vec<bosun_addon::Event>) {
    let j: bosun_journal::Journal<bosun_addon::Event> =
        bosun_journal::Journal::open_read_only(dir).expect("journal");
    let (state, _) = j
        .replay::<bosun_addon::State, _>(None, true, |s, r| s.apply(&r.event))
        .expect("journal replay");
    let events: Vec<bosun_addon::Event> =
        j.read_from(0).map(|r| r.expect("record").event).collect();
    (state, events)
}

/// Like [`journal_state`], or `None` while the journal is not there or not readable yet.
pub fn try_journal_state(dir: &Path) -> Option<(bosun_addon::State, Vec<bosun_addon::Event>)> {
    let j = bosun_journal::Journal::<bosun_addon::Event>::open_read_only(dir).ok()?;
    let (state, _) = j
        .replay::<bosun_addon::State, _>(None, true, |s, r| s.apply(&r.event))
        .ok()?;
    let events: Vec<bosun_addon::Event> = j
        .read_from(0)
        .collect::<Result<Vec<_>, _>>()
        .ok()?
        .into_iter()
        .map(|r| r.event)
        .collect();
    Some((state, events))
}

/// Writes an executable file (a hook, a script), creating its folder.
pub fn write_exec(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A namespaced `widgets.example.com/v1` CRD (kind `Widget`, short name `wg`) that keeps
/// unknown fields and has a status subresource.
pub fn widget_crd() -> Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wg"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}}}]},
    })
}

/// Creates `work/global-hooks` for [`config_hook`]s and returns it.
pub fn global_hooks_dir(work: &Path) -> PathBuf {
    let dir = work.join("global-hooks");
    std::fs::create_dir_all(&dir).expect("hooks dir");
    dir
}

/// A module folder `dir` (under a modules folder) whose chart, named `name`, makes one
/// ConfigMap `configmap`, enabled by its own values.
pub fn configmap_module(dir: &Path, name: &str, configmap: &str) {
    std::fs::create_dir_all(dir.join("templates")).expect("chart folder");
    std::fs::write(
        dir.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
    )
    .expect("Chart.yaml");
    std::fs::write(
        dir.join("templates/cm.yaml"),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {configmap}\n"),
    )
    .expect("template");
    std::fs::write(dir.join("values.yaml"), format!("{name}Enabled: true\n")).expect("values.yaml");
}

/// Writes a bash hook: `--config` prints `config`, a run executes `body`.
pub fn config_hook(path: &Path, config: &str, body: &str) {
    write_exec(
        path,
        &format!(
            "#!/usr/bin/env bash\nif [ \"$1\" = \"--config\" ]; then\ncat <<'EOF'\n{config}\nEOF\nexit 0\nfi\n{body}\n"
        ),
    );
}

/// Reads lines a child prints into a shared string.
pub fn capture(child: &mut Child) -> std::sync::Arc<std::sync::Mutex<String>> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let stdout = child.stdout.take().expect("stdout");
    let sink = seen.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(mut s) = sink.lock() {
                s.push_str(&line);
                s.push('\n');
            }
        }
    });
    seen
}

/// A child process killed (and reaped) when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
