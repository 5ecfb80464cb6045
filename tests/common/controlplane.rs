//! The real control plane (`tests/controlplane`: etcd, kube-apiserver and
//! kube-controller-manager built from the Kubernetes release its `go.mod` pins), started per
//! test like the sandbox.
//!
//! `BOSUN_TEST_SERVER=real` makes [`super::Sandbox::start`] give one of these instead of a
//! sandbox, so that the same test runs against both servers (`scripts/test.sh` runs the
//! tests named in `tests/real-server.txt` a second time that way).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

/// Which API server [`super::Sandbox::start`] starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// bosun's own (`bosun sandbox`): the default.
    Sandbox,
    /// kube-apiserver with etcd and kube-controller-manager (`BOSUN_TEST_SERVER=real`).
    Real,
}

/// The server this test process runs against: `BOSUN_TEST_SERVER` (`sandbox` or `real`).
pub fn server() -> Server {
    match std::env::var("BOSUN_TEST_SERVER").as_deref() {
        Ok("real") => Server::Real,
        Ok("sandbox") | Ok("") | Err(_) => Server::Sandbox,
        Ok(other) => panic!("BOSUN_TEST_SERVER={other:?}: expected `sandbox` or `real`"),
    }
}

/// The control plane's binary: `BOSUN_CONTROLPLANE`, else `controlplane` in the tools
/// folder, where `scripts/build-controlplane.sh` (run by the test command) puts it.
pub fn binary() -> PathBuf {
    std::env::var_os("BOSUN_CONTROLPLANE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| super::tools_dir().join("controlplane/controlplane"))
}

/// A running control plane. Dropping it stops it (its standard input closes, and it stops
/// its children and etcd); so does the end of the test process, however it ends.
pub struct ControlPlane {
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    /// `host:port` of its plain-HTTP proxy that adds the admin token.
    pub proxy: String,
    /// The admin kubeconfig (token, CA inline).
    pub kubeconfig: PathBuf,
    /// Its data folder (etcd, certificates, each component's log).
    pub data: PathBuf,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    /// The lines it prints after `ready`.
    lines: std::sync::Mutex<std::sync::mpsc::Receiver<String>>,
}

impl ControlPlane {
    /// Starts one in `dir` and waits until it is ready (the API server answers `/readyz`
    /// and the default ServiceAccount exists).
    pub fn start(dir: &Path) -> ControlPlane {
        // Its loopback ports are chosen free, then bound: a control plane starting beside
        // it may take one in between. Such a start fails at once and is tried again.
        let mut failures = Vec::new();
        for attempt in 1..=3 {
            match Self::try_start(&dir.join(format!("controlplane-{attempt}"))) {
                Ok(cp) => return cp,
                Err(e) => failures.push(format!("attempt {attempt}: {e}")),
            }
        }
        panic!(
            "the real control plane did not start:\n{}",
            failures.join("\n")
        );
    }

    fn try_start(data: &Path) -> Result<ControlPlane, String> {
        let bin = binary();
        assert!(
            bin.exists(),
            "the real control plane {} is missing: build it with scripts/build-controlplane.sh \
             (needs Go; the test command builds it)",
            bin.display()
        );
        let data = data.to_path_buf();
        let mut child = Command::new(&bin)
            // A group of its own, so that kill9 takes every component at once.
            .process_group(0)
            .args(["serve", "--stop-on-stdin-eof", "--data"])
            .arg(&data)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let said = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut text);
            text
        });
        let mut lines = BufReader::new(stdout).lines();
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) if line.starts_with("ready ") => break line,
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("reading its output: {e}"));
                }
                None => {
                    let status = child.wait().ok();
                    let said = said.join().unwrap_or_default();
                    return Err(format!(
                        "exited before it was ready ({status:?}), saying: {}; logs in {}",
                        said.trim(),
                        data.display()
                    ));
                }
            }
        };
        // Its later complaints go to the test's output.
        std::thread::spawn(move || {
            if let Ok(text) = said.join() {
                eprint!("{text}");
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut words = ready.split_whitespace().skip(1);
        let server = words.next().expect("the server's address").to_string();
        let proxy = words
            .next()
            .expect("the proxy's address")
            .trim_start_matches("http://")
            .to_string();
        Ok(ControlPlane {
            server,
            proxy,
            kubeconfig: data.join("kubeconfig"),
            data,
            child: Some(child),
            stdin,
            lines: std::sync::Mutex::new(rx),
        })
    }

    /// Restarts kube-apiserver on its port with etcd compacted in between: every watch
    /// breaks, and one resuming from an older resourceVersion is answered 410 Gone. Returns
    /// once the new API server is ready.
    pub fn restart_api_server(&mut self) {
        let pid = self.child.as_ref().expect("running").id();
        let sent = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("kill -HUP");
        assert!(sent.success(), "kill -HUP {pid}");
        let lines = self.lines.lock().expect("the control plane's output");
        loop {
            match lines.recv_timeout(Duration::from_secs(120)) {
                Ok(line) if line == "restarted" => return,
                Ok(_) => continue,
                Err(e) => panic!(
                    "the API server did not come back ({e}); its log ends with:\n{}",
                    self.log_tail("kube-apiserver", 30)
                ),
            }
        }
    }

    /// Stops it and waits (up to a minute) for it to end.
    pub fn stop(&mut self) {
        self.stdin.take();
        if let Some(child) = self.child.take() {
            super::wait_or_kill(child, Duration::from_secs(60));
        }
    }

    /// Kills it with SIGKILL, every component at once (its process group): connections
    /// are refused from then on, as of a server that is gone.
    pub fn kill9(&mut self) {
        self.stdin.take();
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The end of a component's log (`kube-apiserver`, `kube-controller-manager`, `etcd`).
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        let text =
            std::fs::read_to_string(self.data.join(format!("{component}.log"))).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}
