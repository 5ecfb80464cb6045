//! Running a hook executable: `--config`, and runs with temp files named by environment
//! variables (`BINDING_CONTEXT_PATH`, `VALUES_PATH`, `CONFIG_VALUES_PATH`,
//! `VALUES_JSON_PATCH_PATH`, `CONFIG_VALUES_JSON_PATCH_PATH`, `METRICS_PATH`,
//! `KUBERNETES_PATCH_PATH`). No shell in between; the hook runs in its own process group so
//! a timeout kills it and everything it started. The process is reaped with `wait4`, which
//! gives its CPU time and peak memory.

use std::ffi::OsStr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use bosun_addon::ports::{LogFields, ResourceUsage};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::spawn::{self, Spawn};
use crate::logging::HookLog;

/// A hook run that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum HookRunError {
    /// The executable could not be started.
    #[error("hook {hook:?}: cannot start {path}: {source}")]
    Spawn {
        /// Hook name.
        hook: String,
        /// Executable.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It exited unsuccessfully.
    #[error("hook {hook:?}: {status}{}", if stderr.is_empty() { String::new() } else { format!(": {stderr}") })]
    Exit {
        /// Hook name.
        hook: String,
        /// `exit status 1`, `killed by signal 9`, …
        status: String,
        /// The last lines of its stderr.
        stderr: String,
    },
    /// It ran longer than its timeout and was killed.
    #[error(
        "hook {hook:?}: line {line} of its --config output is not UTF-8 (byte {offset} of the line); a configuration is YAML or JSON text"
    )]
    NotUtf8 {
        hook: String,
        /// The first such line, from 1.
        line: usize,
        /// Where in it the bytes stop being UTF-8.
        offset: usize,
    },
    #[error("hook {hook:?}: timed out after {after:?} and was killed")]
    Timeout {
        /// Hook name.
        hook: String,
        /// The timeout.
        after: Duration,
    },
    /// An `enabled` script wrote something other than `true` or `false`.
    #[error("{hook:?} wrote {got:?} to MODULE_ENABLED_RESULT; expected true or false")]
    EnabledResult {
        /// Script name.
        hook: String,
        /// What it wrote.
        got: String,
    },
    /// The temp folder is not bosun's private folder (another user's, writable by others,
    /// a link): the hook is not run.
    #[error("hook {hook:?}: not writing its files: {source}")]
    UnsafeTmpDir {
        /// Hook name.
        hook: String,
        /// What is wrong with the folder.
        source: crate::private_dir::UnsafeDir,
    },
    /// A temp file could not be written or read.
    #[error("hook {hook:?}: temp file {file}: {source}")]
    TempFile {
        /// Hook name.
        hook: String,
        /// Which file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl HookRunError {
    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            HookRunError::Spawn { .. } => "spawn",
            HookRunError::Exit { .. } => "exit",
            HookRunError::Timeout { .. } => "timeout",
            HookRunError::EnabledResult { .. } => "enabled_result",
            HookRunError::NotUtf8 { .. } => "not_utf8",
            HookRunError::TempFile { .. } => "temp_file",
            HookRunError::UnsafeTmpDir { .. } => "unsafe_tmp_dir",
        }
    }
}

/// How hooks are run.
#[derive(Clone, Debug)]
pub struct HookProcess {
    /// Folder for temp files.
    pub tmp_dir: PathBuf,
    /// Keep temp files after the run (`DEBUG_KEEP_TMP_FILES`).
    pub keep_tmp_files: bool,
    /// Kill the hook after this long.
    pub timeout: Duration,
    /// Working directory (default: the operator's).
    pub working_dir: Option<PathBuf>,
    /// How its output is logged.
    pub logging: crate::logging::HookLogging,
}

/// What a run gets.
#[derive(Clone, Debug)]
pub struct HookInput<'a> {
    /// Hook name (for logs and errors).
    pub name: &'a str,
    /// Executable.
    pub path: &'a Path,
    /// The binding context array.
    pub binding_context: &'a Value,
    /// `VALUES_PATH` content, if the hook gets values.
    pub values: Option<&'a Value>,
    /// `CONFIG_VALUES_PATH` content.
    pub config_values: Option<&'a Value>,
    /// Extra environment (e.g. `PYTHONHOME`).
    pub env: Vec<(String, String)>,
    /// Where the run comes from, for the log lines of its output.
    pub log_fields: LogFields,
}

/// What a successful run produced: the raw contents of its output files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HookOutput {
    /// `VALUES_JSON_PATCH_PATH`.
    pub values_patch: String,
    /// `CONFIG_VALUES_JSON_PATCH_PATH`.
    pub config_values_patch: String,
    /// `METRICS_PATH`.
    pub metrics: String,
    /// `KUBERNETES_PATCH_PATH`.
    pub kubernetes_patch: String,
    /// How long it ran.
    pub duration: Duration,
    /// Its CPU time and peak memory.
    pub usage: Option<ResourceUsage>,
}

/// The temp files of one run; removed on drop unless kept.
struct TempFiles {
    paths: Vec<(&'static str, PathBuf)>,
    keep: bool,
}

impl Drop for TempFiles {
    fn drop(&mut self) {
        if !self.keep {
            remove_in_background(self.paths.drain(..).map(|(_, p)| p).collect());
        }
    }
}

/// Removes a run's temp files on a thread of their own: seven unlinks are tens of
/// microseconds of filesystem work that the queue's next task need not wait for (it runs
/// on the core the finished hook left idle). Removed inline if that thread cannot start.
fn remove_in_background(paths: Vec<PathBuf>) {
    use std::sync::mpsc::{Sender, channel};
    // One thread for the process, started at the first removal: it carries no wiring.
    static REMOVER: std::sync::OnceLock<Option<Sender<Vec<PathBuf>>>> = std::sync::OnceLock::new();
    let remover = REMOVER.get_or_init(|| {
        let (tx, rx) = channel::<Vec<PathBuf>>();
        std::thread::Builder::new()
            .name("hook-tmp-remover".into())
            .spawn(move || {
                for paths in rx {
                    for p in paths {
                        let _ = std::fs::remove_file(p);
                    }
                }
            })
            .ok()
            .map(|_| tx)
    });
    let paths = match remover {
        Some(tx) => match tx.send(paths) {
            Ok(()) => return,
            Err(unsent) => unsent.0,
        },
        None => paths,
    };
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}

impl TempFiles {
    fn path(&self, var: &str) -> Option<&Path> {
        self.paths
            .iter()
            .find(|(v, _)| *v == var)
            .map(|(_, p)| p.as_path())
    }
}

const STDERR_TAIL_LINES: usize = 10;

impl HookProcess {
    /// Runs `hook --config` and returns its stdout.
    pub async fn config(&self, name: &str, path: &Path) -> Result<String, HookRunError> {
        let spec = self.spawn_spec(path, &["--config"], Vec::new());
        let (stdout, ..) = self
            .execute(name, &spec, &LogFields::default(), true)
            .await?;
        Ok(stdout)
    }

    /// Runs the hook with its input files and returns its output files.
    pub async fn run(&self, input: &HookInput<'_>) -> Result<HookOutput, HookRunError> {
        self.start(input)?.finish().await
    }

    /// Starts a run: writes its input files and starts its process before returning, so
    /// the process starts now, from the caller's thread; [`StartedRun::finish`] waits for
    /// its end and reads its output files, and borrows nothing (it may go to a task of its
    /// own).
    pub fn start(&self, input: &HookInput<'_>) -> Result<StartedRun, HookRunError> {
        let files = self.prepare(input)?;
        let spec = self.run_spec(input, &files.paths);
        let process = self.launch(input.name, &spec, &input.log_fields, false)?;
        Ok(StartedRun { files, process })
    }

    /// Runs a module's `enabled` script: `VALUES_PATH`, `CONFIG_VALUES_PATH` and
    /// `MODULE_ENABLED_RESULT`, where it writes `true` or `false`.
    pub async fn enabled(&self, input: &HookInput<'_>) -> Result<bool, HookRunError> {
        let files = self.prepare(input)?;
        let result = self.tmp_dir.join(format!(
            "{}-module-enabled-result",
            uuid::Uuid::new_v4().simple()
        ));
        let cleanup = TempFiles {
            paths: vec![("MODULE_ENABLED_RESULT", result.clone())],
            keep: self.keep_tmp_files,
        };
        write_private(&result, b"").map_err(|source| HookRunError::TempFile {
            hook: input.name.to_string(),
            file: result.clone(),
            source,
        })?;
        let spec = self.run_spec(input, files.paths.iter().chain(&cleanup.paths));
        self.execute(input.name, &spec, &input.log_fields, false)
            .await?;
        let text = std::fs::read_to_string(&result).map_err(|source| HookRunError::TempFile {
            hook: input.name.to_string(),
            file: result.clone(),
            source,
        })?;
        match text.trim() {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(HookRunError::EnabledResult {
                hook: input.name.to_string(),
                got: other.to_string(),
            }),
        }
    }

    /// Checks the temp folder before a run writes into it (one `lstat`): the files hold
    /// values, secrets included, and the hook's patches come back through them, so the folder
    /// must stay bosun's own and private (`0700`, files `0600`). One removed since the start
    /// is created again `0700`; one another user put in its place is refused.
    fn private_folder(&self, hook: &str) -> Result<(), HookRunError> {
        let unsafe_dir = |source| HookRunError::UnsafeTmpDir {
            hook: hook.to_string(),
            source,
        };
        match crate::private_dir::check(&self.tmp_dir) {
            Err(e) if e.is_missing() => {
                bosun_platform::create_private_dir(&self.tmp_dir).map_err(|source| {
                    HookRunError::TempFile {
                        hook: hook.to_string(),
                        file: self.tmp_dir.clone(),
                        source,
                    }
                })?;
                crate::private_dir::check(&self.tmp_dir).map_err(unsafe_dir)
            }
            other => other.map_err(unsafe_dir),
        }
    }

    fn prepare(&self, input: &HookInput<'_>) -> Result<TempFiles, HookRunError> {
        self.private_folder(input.name)?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut files = TempFiles {
            paths: Vec::new(),
            keep: self.keep_tmp_files,
        };
        let mut write =
            |var: &'static str, suffix: &str, content: String| -> Result<(), HookRunError> {
                let p = self.tmp_dir.join(format!("{id}-{suffix}"));
                write_private(&p, content.as_bytes()).map_err(|source| HookRunError::TempFile {
                    hook: input.name.to_string(),
                    file: p.clone(),
                    source,
                })?;
                files.paths.push((var, p));
                Ok(())
            };
        write(
            "BINDING_CONTEXT_PATH",
            "binding-context.json",
            input.binding_context.to_string(),
        )?;
        if let Some(v) = input.values {
            write("VALUES_PATH", "values.json", v.to_string())?;
        }
        if let Some(v) = input.config_values {
            write("CONFIG_VALUES_PATH", "config-values.json", v.to_string())?;
        }
        write("VALUES_JSON_PATCH_PATH", "values-patch.json", String::new())?;
        write(
            "CONFIG_VALUES_JSON_PATCH_PATH",
            "config-values-patch.json",
            String::new(),
        )?;
        write("METRICS_PATH", "metrics.json", String::new())?;
        write(
            "KUBERNETES_PATCH_PATH",
            "kubernetes-patch.json",
            String::new(),
        )?;
        Ok(files)
    }

    /// What [`spawn::spawn`] starts for a run of `program`.
    fn spawn_spec<'a>(
        &'a self,
        program: &'a Path,
        args: &'a [&'a str],
        env: Vec<(&'a OsStr, &'a OsStr)>,
    ) -> Spawn<'a> {
        Spawn {
            program,
            args,
            env,
            working_dir: self.working_dir.as_deref(),
        }
    }

    /// What a run of `input`'s hook starts: the variables naming its files, then its own.
    fn run_spec<'a>(
        &'a self,
        input: &'a HookInput<'_>,
        files: impl IntoIterator<Item = &'a (&'static str, PathBuf)>,
    ) -> Spawn<'a> {
        let env = files
            .into_iter()
            .map(|(var, p)| (OsStr::new(*var), p.as_os_str()))
            .chain(
                input
                    .env
                    .iter()
                    .map(|(k, v)| (OsStr::new(k), OsStr::new(v))),
            )
            .collect();
        self.spawn_spec(input.path, &[], env)
    }

    async fn execute(
        &self,
        name: &str,
        spec: &Spawn<'_>,
        fields: &LogFields,
        capture_stdout: bool,
    ) -> Result<(String, Duration, Option<ResourceUsage>), HookRunError> {
        self.launch(name, spec, fields, capture_stdout)?
            .wait()
            .await
    }

    /// Starts the process (no shell, its own process group) and sets up its output pipes.
    fn launch(
        &self,
        name: &str,
        spec: &Spawn<'_>,
        fields: &LogFields,
        capture_stdout: bool,
    ) -> Result<Launched, HookRunError> {
        let spawn_error = |source| HookRunError::Spawn {
            hook: name.to_string(),
            path: spec.program.to_path_buf(),
            source,
        };
        let started = Instant::now();
        // Not tokio's child: tokio would reap it itself, and its rusage with it.
        let child = spawn::spawn(spec).map_err(spawn_error)?;
        // Killed (with its process group) and reaped elsewhere if dropped before it is
        // reaped, so nothing is left running or as a zombie.
        let guard = KillOnDrop(Some(child.pid));
        let stdout =
            tokio::process::ChildStdout::from_std(std::process::ChildStdout::from(child.stdout))
                .map_err(spawn_error)?;
        let stderr =
            tokio::process::ChildStderr::from_std(std::process::ChildStderr::from(child.stderr))
                .map_err(spawn_error)?;
        let log = |output| {
            HookLog::new(
                name,
                fields.module.as_deref(),
                fields.binding.as_deref(),
                fields.queue.as_deref(),
                output,
                &self.logging,
            )
        };
        Ok(Launched {
            name: name.to_string(),
            program: spec.program.to_path_buf(),
            pid: child.pid,
            guard,
            stdout,
            stderr,
            out_log: log("stdout"),
            err_log: log("stderr"),
            capture_stdout,
            timeout: self.timeout,
            started,
        })
    }
}

/// A run whose process has started ([`HookProcess::start`]).
pub struct StartedRun {
    files: TempFiles,
    process: Launched,
}

impl StartedRun {
    /// Waits for the hook's end and reads its output files.
    pub async fn finish(self) -> Result<HookOutput, HookRunError> {
        let StartedRun { files, process } = self;
        let name = process.name.clone();
        let (_, duration, usage) = process.wait().await?;
        let read = |var: &str| -> Result<String, HookRunError> {
            let Some(p) = files.path(var) else {
                return Ok(String::new());
            };
            read_output(p).map_err(|source| HookRunError::TempFile {
                hook: name.clone(),
                file: p.to_path_buf(),
                source,
            })
        };
        Ok(HookOutput {
            values_patch: read("VALUES_JSON_PATCH_PATH")?,
            config_values_patch: read("CONFIG_VALUES_JSON_PATCH_PATH")?,
            metrics: read("METRICS_PATH")?,
            kubernetes_patch: read("KUBERNETES_PATCH_PATH")?,
            duration,
            usage,
        })
    }
}

/// A started hook process: its pipes, its log lines, its deadline.
struct Launched {
    name: String,
    program: PathBuf,
    pid: i32,
    guard: KillOnDrop,
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
    out_log: HookLog,
    err_log: HookLog,
    capture_stdout: bool,
    timeout: Duration,
    started: Instant,
}

impl Launched {
    /// Waits for the process to exit (killing its group at the timeout) while draining and
    /// logging its output; returns what it printed when stdout is captured, how long it
    /// ran and what it used.
    async fn wait(self) -> Result<(String, Duration, Option<ResourceUsage>), HookRunError> {
        let Launched {
            name,
            program,
            pid,
            mut guard,
            stdout,
            stderr,
            mut out_log,
            mut err_log,
            capture_stdout,
            timeout,
            started,
        } = self;
        let spawn_error = |source| HookRunError::Spawn {
            hook: name.clone(),
            path: program.clone(),
            source,
        };
        let out = async move {
            let mut captured = String::new();
            // The first line that is not UTF-8: (line number, where in it).
            let mut not_utf8 = None;
            let mut reader = BufReader::new(stdout);
            let mut raw = Vec::new();
            let mut number = 0usize;
            loop {
                raw.clear();
                match reader.read_until(b'\n', &mut raw).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                number += 1;
                if raw.last() == Some(&b'\n') {
                    raw.pop();
                    if raw.last() == Some(&b'\r') {
                        raw.pop();
                    }
                }
                let line = match std::str::from_utf8(&raw) {
                    Ok(text) => text.to_string(),
                    Err(e) => {
                        not_utf8.get_or_insert((number, e.valid_up_to()));
                        String::from_utf8_lossy(&raw).into_owned()
                    }
                };
                if capture_stdout {
                    captured.push_str(&line);
                    captured.push('\n');
                } else {
                    out_log.line(line);
                }
            }
            out_log.finish();
            (captured, not_utf8)
        };
        let err = async move {
            let mut tail: std::collections::VecDeque<String> = Default::default();
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tail.len() == STDERR_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line.clone());
                err_log.line(line);
            }
            err_log.finish();
            tail.into_iter().collect::<Vec<_>>().join("\n")
        };
        // The exit and both outputs are driven by this one future (no task per pipe: each
        // spawn is a wake-up on another worker, and a hook run is on a queue's critical
        // path).
        let mut out = std::pin::pin!(out);
        let mut err = std::pin::pin!(err);
        let (mut captured, mut stderr) = (None, None);
        let exit = tokio::time::timeout(timeout, reap_async(pid));
        let mut exit = std::pin::pin!(exit);
        let reaped = loop {
            tokio::select! {
                biased;
                reaped = &mut exit => break reaped,
                c = &mut out, if captured.is_none() => captured = Some(c),
                e = &mut err, if stderr.is_none() => stderr = Some(e),
            }
        };
        let Ok(reaped) = reaped else {
            // The timeout: the group is killed, the process reaped.
            kill_group(u32::try_from(pid).ok());
            guard.0 = None;
            let _ = reap_async(pid).await;
            return Err(HookRunError::Timeout {
                hook: name,
                after: timeout,
            });
        };
        guard.0 = None;
        let (status, usage) = reaped.map_err(spawn_error)?;
        // Output pipes may be held open by grandchildren; do not wait for them forever.
        let drained = Instant::now() + Duration::from_secs(2);
        let captured = match captured {
            Some(c) => c,
            None => tokio::time::timeout_at(drained.into(), out)
                .await
                .unwrap_or_default(),
        };
        let stderr = match stderr {
            Some(e) => e,
            None => tokio::time::timeout_at(drained.into(), err)
                .await
                .unwrap_or_default(),
        };
        let (captured, not_utf8) = captured;
        if !status.success() {
            let status = match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(code), _) => format!("exit status {code}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                _ => status.to_string(),
            };
            return Err(HookRunError::Exit {
                hook: name,
                status,
                stderr,
            });
        }
        if capture_stdout && let Some((line, offset)) = not_utf8 {
            return Err(HookRunError::NotUtf8 {
                hook: name,
                line,
                offset,
            });
        }
        Ok((captured, started.elapsed(), Some(usage)))
    }
}

/// Kills a hook's process group, and reaps the hook, when dropped while armed.
struct KillOnDrop(Option<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            kill_group(u32::try_from(pid).ok());
            // Reaped off this (dropped) future, so it does not stay a zombie.
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn(reap_async(pid))),
                Err(_) => drop(std::thread::spawn(move || reap(pid))),
            }
        }
    }
}

/// Waits for process `pid` (blocking) and returns how it ended and what it used.
fn reap(pid: i32) -> std::io::Result<(ExitStatus, ResourceUsage)> {
    let (raw, usage) = rusage::wait4(pid)?;
    Ok((std::os::unix::process::ExitStatusExt::from_raw(raw), usage))
}

/// [`reap`] without holding a thread: the child's pidfd becomes readable when it exits
/// (Linux 5.3 and later), then `wait4` returns at once. Where pidfds are missing, a
/// blocking thread waits.
async fn reap_async(pid: i32) -> std::io::Result<(ExitStatus, ResourceUsage)> {
    let exited = rusage::exit_of(pid).await.is_ok();
    if exited {
        reap(pid)
    } else {
        tokio::task::spawn_blocking(move || reap(pid))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?
    }
}

mod rusage {
    //! `wait4(2)`, which nix does not wrap: the exit status and the rusage of one child.
    #![allow(unsafe_code)]

    use std::time::Duration;

    use bosun_addon::ports::ResourceUsage;

    fn duration(t: libc::timeval) -> Duration {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    }

    /// Waits, without a thread, until child `pid` has exited (its pidfd turns readable).
    pub(super) async fn exit_of(pid: i32) -> std::io::Result<()> {
        let fd = pidfd_open(pid)?;
        // SAFETY: the AsyncFd owns the descriptor, so it stays open while registered.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }?;
        fd.readable().await.map(|_| ())
    }

    /// A pidfd for child `pid` (not yet reaped, so the pid cannot have been reused).
    fn pidfd_open(pid: i32) -> std::io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = i32::try_from(fd).map_err(|_| std::io::Error::other("descriptor out of range"))?;
        // SAFETY: the descriptor was just returned to us and is owned by nobody else.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    /// Blocks until `pid` exits and reaps it; retries on EINTR.
    pub(super) fn wait4(pid: i32) -> std::io::Result<(i32, ResourceUsage)> {
        let mut status: libc::c_int = 0;
        // SAFETY: rusage is plain old data (integers and timevals); all zeroes is valid.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: both pointers are to live, writable locals of the right types.
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            if r >= 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        // Linux reports ru_maxrss in kilobytes.
        let max_rss = u64::try_from(usage.ru_maxrss).unwrap_or(0);
        Ok((
            status,
            ResourceUsage {
                user_cpu: duration(usage.ru_utime),
                sys_cpu: duration(usage.ru_stime),
                max_rss_bytes: if cfg!(target_os = "macos") {
                    max_rss
                } else {
                    max_rss * 1024
                },
            },
        ))
    }
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The text a hook left in one of its output files. Read without asking the file's size
/// first (`std::fs::read_to_string` does: two more system calls per file, four files per
/// run, and these files are nearly always empty).
fn read_output(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(u64::MAX).read_to_string(&mut text)?;
    Ok(text)
}

/// Writes a hook's temporary file, readable by its owner only (`0600`).
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    // A new file (the names are random): never one planted beforehand, nor a link.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/bash\n{body}\n")).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    /// A run of `path` with no values.
    fn input<'a>(name: &'a str, path: &'a Path, ctx: &'a Value) -> HookInput<'a> {
        HookInput {
            name,
            path,
            binding_context: ctx,
            values: None,
            config_values: None,
            env: vec![],
            log_fields: Default::default(),
        }
    }

    fn runner(dir: &Path, timeout: Duration) -> HookProcess {
        HookProcess {
            tmp_dir: dir.join("tmp"),
            keep_tmp_files: false,
            timeout,
            working_dir: None,
            logging: Default::default(),
        }
    }

    #[tokio::test]
    async fn files_and_env_follow_the_contract() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hook = script(
            dir.path(),
            "h.sh",
            r#"cat "$BINDING_CONTEXT_PATH" > "$METRICS_PATH"
grep -q '"param":1' "$VALUES_PATH" && echo '[{"op":"add","path":"/global/seen","value":1}]' > "$VALUES_JSON_PATCH_PATH"
echo "$CONFIG_VALUES_PATH" | grep -q config-values && echo ok > "$KUBERNETES_PATCH_PATH"
echo to-stdout; echo to-stderr >&2"#,
        );
        let ctx = json!([{"binding": "onStartup"}]);
        let values = json!({"global": {"param": 1}});
        let input = HookInput {
            values: Some(&values),
            config_values: Some(&values),
            ..input("h.sh", &hook, &ctx)
        };
        let out = runner(dir.path(), Duration::from_secs(30))
            .run(&input)
            .await
            .expect("run");
        assert_eq!(out.metrics.trim(), ctx.to_string());
        assert!(
            out.values_patch.contains("/global/seen"),
            "{}",
            out.values_patch
        );
        assert_eq!(out.kubernetes_patch.trim(), "ok");
        // Removed right after the run, off the run's path.
        let deadline = Instant::now() + Duration::from_secs(20);
        let left = || {
            std::fs::read_dir(dir.path().join("tmp"))
                .map(|d| d.count())
                .unwrap_or(0)
        };
        while left() > 0 {
            assert!(Instant::now() < deadline, "temp files are removed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn config_output_that_is_not_utf8_is_named_with_its_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hook = script(
            dir.path(),
            "latin1.sh",
            r#"printf 'configVersion: v1\nonStartup: 1\n# caf\xe9\n'"#,
        );
        let e = runner(dir.path(), Duration::from_secs(30))
            .config("latin1.sh", &hook)
            .await
            .expect_err("not UTF-8");
        assert!(
            matches!(
                e,
                HookRunError::NotUtf8 {
                    line: 3,
                    offset: 5,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("line 3 of its --config output is not UTF-8"),
            "{e}"
        );
        // Valid output is taken whole.
        let good = script(
            dir.path(),
            "good.sh",
            "printf 'configVersion: v1\r\nonStartup: 1\n'",
        );
        let out = runner(dir.path(), Duration::from_secs(30))
            .config("good.sh", &good)
            .await
            .expect("config");
        assert_eq!(out, "configVersion: v1\nonStartup: 1\n");
    }

    #[tokio::test]
    async fn a_started_run_runs_before_it_is_awaited() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("started");
        let hook = script(
            dir.path(),
            "early.sh",
            r#"echo started > "$MARKER"; echo '[]' > "$VALUES_JSON_PATCH_PATH""#,
        );
        let ctx = json!([]);
        let input = HookInput {
            env: vec![("MARKER".into(), marker.display().to_string())],
            ..input("early.sh", &hook, &ctx)
        };
        let run = runner(dir.path(), Duration::from_secs(30))
            .start(&input)
            .expect("start");
        // Nothing polls the run yet: the process is already on its way.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !marker.exists() {
            assert!(
                Instant::now() < deadline,
                "the hook ran only once its run was awaited"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let out = run.finish().await.expect("run");
        assert_eq!(out.values_patch.trim(), "[]");
    }

    #[tokio::test]
    async fn temp_files_are_readable_by_their_owner_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hook = script(
            dir.path(),
            "modes.sh",
            r#"stat -c '%a' "$(dirname "$VALUES_PATH")" "$VALUES_PATH" "$CONFIG_VALUES_PATH" "$BINDING_CONTEXT_PATH" "$VALUES_JSON_PATCH_PATH" > "$METRICS_PATH""#,
        );
        let ctx = json!([]);
        let values = json!({"global": {"password": "s3cret"}});
        let input = HookInput {
            values: Some(&values),
            config_values: Some(&values),
            ..input("modes.sh", &hook, &ctx)
        };
        let out = runner(dir.path(), Duration::from_secs(30))
            .run(&input)
            .await
            .expect("run");
        let modes: Vec<&str> = out.metrics.split_whitespace().collect();
        assert_eq!(
            modes,
            ["700", "600", "600", "600", "600"],
            "{}",
            out.metrics
        );
    }

    #[tokio::test]
    async fn a_removed_temp_folder_is_created_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hook = script(
            dir.path(),
            "patch.sh",
            r#"echo '[]' > "$VALUES_JSON_PATCH_PATH""#,
        );
        let ctx = json!([]);
        let runner = runner(dir.path(), Duration::from_secs(30));
        for _ in 0..2 {
            let out = runner
                .run(&input("patch.sh", &hook, &ctx))
                .await
                .expect("run");
            assert_eq!(out.values_patch, "[]\n");
            // Gone between runs (a cleanup of /tmp, an operator's rm -rf); retried while
            // the runner's own removals of the run's files race with it.
            let deadline = Instant::now() + Duration::from_secs(10);
            while let Err(e) = std::fs::remove_dir_all(&runner.tmp_dir) {
                assert!(
                    Instant::now() < deadline,
                    "cannot remove the temp folder: {e}"
                );
                tokio::task::yield_now().await;
            }
        }
    }

    #[tokio::test]
    async fn a_temp_folder_others_can_write_in_is_refused_before_the_hook_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ran = dir.path().join("ran");
        let hook = script(dir.path(), "touch.sh", &format!("touch {}", ran.display()));
        let ctx = json!([]);
        let runner = runner(dir.path(), Duration::from_secs(30));
        // Put back open to all since the start (someone removed it and made their own).
        std::fs::create_dir(&runner.tmp_dir).expect("mkdir");
        std::fs::set_permissions(&runner.tmp_dir, std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        let err = runner
            .run(&input("touch.sh", &hook, &ctx))
            .await
            .expect_err("refused");
        assert_eq!(err.metric_label(), "unsafe_tmp_dir");
        assert!(
            err.to_string().contains("is writable by group and others"),
            "{err}"
        );
        assert!(!ran.exists(), "the hook did not run");
        assert_eq!(
            std::fs::read_dir(&runner.tmp_dir).map(|d| d.count()).ok(),
            Some(0)
        );
    }

    #[tokio::test]
    async fn cpu_time_and_peak_memory_come_from_the_hook_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Busy for a while, holding a string of about 20 MB.
        let hook = script(
            dir.path(),
            "busy.sh",
            r#"x=$(head -c 20000000 /dev/zero | tr '\0' a); i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; echo ${#x} >&2"#,
        );
        let ctx = json!([]);
        let input = input("busy.sh", &hook, &ctx);
        let out = runner(dir.path(), Duration::from_secs(60))
            .run(&input)
            .await
            .expect("run");
        let usage = out.usage.expect("usage");
        assert!(usage.user_cpu > Duration::from_millis(20), "{usage:?}");
        assert!(usage.max_rss_bytes > 20_000_000, "{usage:?}");
        assert!(
            usage.user_cpu + usage.sys_cpu <= out.duration * 2,
            "{usage:?} {out:?}"
        );
    }

    #[tokio::test]
    async fn a_dropped_run_kills_and_reaps_the_hook() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("still-running");
        let pid_file = dir.path().join("pid");
        let hook = script(
            dir.path(),
            "slow.sh",
            &format!(
                "echo $$ > {}.tmp; mv {0}.tmp {0}; sleep 2; touch {}",
                pid_file.display(),
                marker.display()
            ),
        );
        let ctx = json!([]);
        let input = input("slow.sh", &hook, &ctx);
        let r = runner(dir.path(), Duration::from_secs(60));
        let mut run = Box::pin(r.run(&input));
        let deadline = Instant::now() + Duration::from_secs(20);
        let pid = loop {
            if let Ok(pid) = std::fs::read_to_string(&pid_file) {
                break pid.trim().to_string();
            }
            assert!(Instant::now() < deadline, "the hook never started");
            assert!(
                tokio::time::timeout(Duration::from_millis(20), &mut run)
                    .await
                    .is_err(),
                "the run ended early"
            );
        };
        drop(run);
        // Killed, and reaped (a zombie keeps its /proc entry) without anyone waiting.
        let proc = PathBuf::from("/proc").join(&pid);
        while proc.exists() {
            assert!(Instant::now() < deadline, "hook {pid} was not reaped");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!marker.exists(), "the hook was killed with the run");
    }

    #[tokio::test]
    async fn failures_and_timeouts_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let failing = script(dir.path(), "fail.sh", "echo 'something broke' >&2; exit 3");
        let slow = script(dir.path(), "slow.sh", "sleep 30 & sleep 30");
        let missing = dir.path().join("missing.sh");
        let ctx = json!([]);
        let r = runner(dir.path(), Duration::from_millis(500));
        let err = r
            .run(&input("fail.sh", &failing, &ctx))
            .await
            .expect_err("fails");
        assert_eq!(
            err.to_string(),
            "hook \"fail.sh\": exit status 3: something broke"
        );
        let started = Instant::now();
        let err = r
            .run(&input("slow.sh", &slow, &ctx))
            .await
            .expect_err("times out");
        assert!(matches!(err, HookRunError::Timeout { .. }), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the process group was killed"
        );
        let err = r
            .run(&input("missing.sh", &missing, &ctx))
            .await
            .expect_err("spawn");
        assert!(err.to_string().contains("cannot start"), "{err}");
    }
}
