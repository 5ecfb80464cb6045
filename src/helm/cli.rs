//! Real Helm through the `helm` binary (`HELM_BIN_PATH`, as addon-operator runs it).
//!
//! ```text
//!   render           helm template <release> <chart> -f <values> [--is-upgrade]
//!                      stdout: "---\n# Source: <path>\n<doc>" … → path → documents
//!   install/upgrade  helm install|upgrade <release> <chart> -f <values> -o json …
//!   status/history   helm status|history <release> -o json
//!   list             helm list --deployed --failed --pending … -o json (every state)
//!   uninstall        helm uninstall <release>
//! ```
//!
//! Values go through a private temporary file. Each call is a child process in a process
//! group of its own; the group is killed when the call times out or its future is
//! dropped, and Linux kills the child if bosun dies, so no Helm outlives the operator
//! that started it (a half-done upgrade is then a `pending-*` release, which the next
//! upgrade recovers, as after a crash with the library).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{Action, ClusterOptions, HELM_BURST, HELM_QPS, HelmError, InstallOptions, Release};

/// How long a call that changes nothing in the cluster (render, status, list) may run.
const READ_DEADLINE: Duration = Duration::from_secs(120);
/// How long an install, upgrade or uninstall may run beyond Helm's own `--timeout`.
const GRACE: Duration = Duration::from_secs(60);
/// Helm's `--timeout` when none is given (bosun's `HELM_TIMEOUT` default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// The `helm` binary, its version checked.
#[derive(Clone, Debug)]
pub struct HelmCli {
    inner: Arc<Binary>,
}

#[derive(Debug)]
struct Binary {
    path: PathBuf,
    version: String,
    major: u32,
    tmp_dir: PathBuf,
}

/// `helm` on `PATH`, then `helm/helm` in the tools folder (`BOSUN_TOOLS_DIR`, `.tools` in
/// the current directory and in the ancestors of the executable).
pub fn find_binary() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("helm")));
    }
    if let Ok(dir) = std::env::var("BOSUN_TOOLS_DIR") {
        candidates.push(Path::new(&dir).join("helm/helm"));
    }
    if let Ok(cwd) = std::env::current_dir() {
        candidates.push(cwd.join(".tools/helm/helm"));
    }
    if let Ok(exe) = std::env::current_exe() {
        candidates.extend(exe.ancestors().skip(1).map(|d| d.join(".tools/helm/helm")));
    }
    candidates.into_iter().find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A bare name (`helm`) is looked up on `PATH`, as a shell would.
fn resolve(bin: &Path) -> Option<PathBuf> {
    if bin.components().count() > 1 {
        return Some(bin.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(bin))
        .find(|p| is_executable(p))
}

/// The major version of `v4.1.4` (or `4.1.4`).
fn major_version(version: &str) -> Option<u32> {
    version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// A command line for messages: `helm upgrade demo /charts/demo --namespace default …`.
fn command_line(bin: &Path, args: &[OsString]) -> String {
    let name = bin
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| bin.display().to_string());
    std::iter::once(name)
        .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Helm's message on one line, without the `Error: ` it puts first and without its
/// warnings (a group-readable kubeconfig, …) when there is more to say.
fn helm_message(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with("WARNING: "))
        .collect();
    let chosen = if errors.is_empty() { lines } else { errors };
    chosen
        .iter()
        .map(|l| l.strip_prefix("Error: ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether Helm said that the release (not some object) does not exist.
fn release_not_found(message: &str) -> bool {
    message.contains("release: not found")
}

/// `helm template` output → template path → its documents, as the library's render
/// returns them. Helm prints one `---\n# Source: <path>` header per document, sorted by
/// kind; documents of one template are joined again in the order printed.
pub fn split_template_output(stdout: &str) -> BTreeMap<String, String> {
    let mut files: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut source: Option<String> = None;
    let mut doc = String::new();
    let mut flush = |source: &mut Option<String>, doc: &mut String| {
        if let Some(s) = source.take() {
            files.entry(s).or_default().push(std::mem::take(doc));
        } else if !doc.trim().is_empty() {
            files
                .entry(String::from("manifest"))
                .or_default()
                .push(std::mem::take(doc));
        }
        doc.clear();
    };
    let mut at_start = true;
    for line in stdout.lines() {
        if line == "---" {
            flush(&mut source, &mut doc);
            at_start = true;
            continue;
        }
        if at_start && let Some(path) = line.strip_prefix("# Source: ") {
            source = Some(path.trim().to_string());
            at_start = false;
            continue;
        }
        at_start = false;
        doc.push_str(line);
        doc.push('\n');
    }
    flush(&mut source, &mut doc);
    files
        .into_iter()
        .map(|(path, docs)| (path, docs.join("---\n")))
        .collect()
}

/// Kills a child's process group when dropped before it was disarmed.
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl HelmCli {
    /// The binary at `bin` (a bare name is looked up on `PATH`), with its version read
    /// by `helm version`; values files go to `tmp_dir`.
    pub async fn open(bin: &Path, tmp_dir: &Path) -> Result<HelmCli, HelmError> {
        let path = resolve(bin).ok_or_else(|| HelmError::Binary {
            path: bin.to_path_buf(),
            message: "not found on PATH".into(),
        })?;
        let mut cli = HelmCli {
            inner: Arc::new(Binary {
                path: path.clone(),
                version: String::new(),
                major: 0,
                tmp_dir: tmp_dir.to_path_buf(),
            }),
        };
        let out = cli
            .run(
                "",
                vec!["version".into(), "--template".into(), "{{.Version}}".into()],
                READ_DEADLINE,
            )
            .await?;
        let version = out.trim().to_string();
        let major = major_version(&version).ok_or_else(|| HelmError::Binary {
            path: path.clone(),
            message: format!("`helm version` printed {version:?}, not a version"),
        })?;
        if major < 4 {
            tracing::warn!(path = %path.display(), %version, "a Helm binary older than v4: no server-side apply with --force-conflicts, so hand edits of release objects may fail upgrades");
        }
        cli.inner = Arc::new(Binary {
            path,
            version,
            major,
            tmp_dir: tmp_dir.to_path_buf(),
        });
        Ok(cli)
    }

    /// Where the binary is.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// `helm version` (`v4.1.4`).
    pub fn version(&self) -> &str {
        &self.inner.version
    }

    /// The field manager of the objects this binary applies: its file name, as Helm
    /// names itself.
    pub fn field_manager(&self) -> String {
        self.inner
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "helm".into())
    }

    /// Runs helm with `args`; stdout on success. `release` names the release in errors.
    async fn run(
        &self,
        release: &str,
        args: Vec<OsString>,
        deadline: Duration,
    ) -> Result<String, HelmError> {
        let command = command_line(&self.inner.path, &args);
        tracing::debug!(release, command = %command, "running helm");
        let mut cmd = tokio::process::Command::new(&self.inner.path);
        cmd.args(&args)
            // Release records in Secrets, as the library keeps them: bosun reads their
            // labels and deletes a pending one itself.
            .env("HELM_DRIVER", "secret")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        crate::child_process::die_with_parent(&mut cmd);
        let child = cmd.spawn().map_err(|e| HelmError::Binary {
            path: self.inner.path.clone(),
            message: e.to_string(),
        })?;
        let mut guard = GroupGuard(child.id().and_then(|p| i32::try_from(p).ok()));
        let output = match tokio::time::timeout(deadline, child.wait_with_output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => {
                return Err(HelmError::Binary {
                    path: self.inner.path.clone(),
                    message: format!("{command}: {e}"),
                });
            }
            // The guard kills the group on the way out.
            Err(_) => {
                return Err(HelmError::TimedOut {
                    release: release.to_string(),
                    command,
                    after: deadline,
                });
            }
        };
        // Reaped: nothing of the group is left to kill (a daemon it started is not ours).
        guard.0 = None;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if output.status.success() {
            if !stderr.trim().is_empty() {
                tracing::debug!(release, command = %command, "helm said: {}", helm_message(&stderr));
            }
            return Ok(stdout);
        }
        let message = helm_message(&stderr);
        if release_not_found(&message) {
            return Err(HelmError::NotFound(format!("release {release}: {message}")));
        }
        Err(HelmError::Command {
            release: release.to_string(),
            command,
            status: output
                .status
                .code()
                .map_or_else(|| "killed by a signal".to_string(), |c| format!("exit {c}")),
            stderr: message,
        })
    }

    /// A private temporary file with the values (JSON is YAML to Helm).
    fn values_file(&self, values: &Value) -> Result<tempfile::NamedTempFile, HelmError> {
        use std::io::Write;
        use std::os::unix::fs::DirBuilderExt;
        let fail = |e: std::io::Error| {
            HelmError::InvalidInput(format!(
                "cannot write the values file in {}: {e}",
                self.inner.tmp_dir.display()
            ))
        };
        // Private, as the hooks' temporary files: created 0700, and never a folder another
        // user could swap the file in (theirs, writable by others, a link).
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.inner.tmp_dir)
            .map_err(fail)?;
        crate::private_dir::check(&self.inner.tmp_dir)
            .map_err(|e| HelmError::InvalidInput(format!("not writing the values file: {e}")))?;
        // tempfile creates it 0600: values may hold secrets.
        let mut file = tempfile::Builder::new()
            .prefix("helm-values-")
            .suffix(".json")
            .tempfile_in(&self.inner.tmp_dir)
            .map_err(fail)?;
        file.write_all(values.to_string().as_bytes())
            .map_err(fail)?;
        file.flush().map_err(fail)?;
        Ok(file)
    }

    /// Renders a chart offline (`helm template`, no cluster): template path → manifest.
    pub async fn render(
        &self,
        chart: &Path,
        values: &Value,
        release: &str,
        namespace: &str,
        is_upgrade: bool,
    ) -> Result<BTreeMap<String, String>, HelmError> {
        let file = self.values_file(values)?;
        let mut args: Vec<OsString> = vec![
            "template".into(),
            release.into(),
            chart.into(),
            "--namespace".into(),
            namespace.into(),
            "--values".into(),
            file.path().into(),
        ];
        if is_upgrade {
            args.push("--is-upgrade".into());
        }
        let out = self.run(release, args, READ_DEADLINE).await?;
        Ok(split_template_output(&out))
    }

    /// A client for releases in one namespace of one cluster.
    pub fn client(&self, options: &ClusterOptions) -> CliClient {
        CliClient {
            cli: self.clone(),
            cluster: options.clone(),
        }
    }
}

/// Releases in one namespace, through the binary.
#[derive(Clone, Debug)]
pub struct CliClient {
    cli: HelmCli,
    cluster: ClusterOptions,
}

fn parse(release: &str, action: &str, text: &str) -> Result<Value, HelmError> {
    serde_json::from_str(text).map_err(|e| HelmError::Output {
        action: format!("{action} of release {release}"),
        message: format!("{e}: {text}"),
    })
}

fn releases(v: Value) -> Vec<Release> {
    match v {
        Value::Array(items) => items.into_iter().map(Release).collect(),
        _ => Vec::new(),
    }
}

impl CliClient {
    /// The global flags that say which cluster and namespace.
    fn cluster_args(&self) -> Vec<OsString> {
        let c = &self.cluster;
        let mut args: Vec<OsString> = vec!["--namespace".into(), c.namespace.clone().into()];
        if let Some(k) = &c.kubeconfig {
            args.push("--kubeconfig".into());
            args.push(k.into());
        }
        if let Some(ctx) = &c.context {
            args.push("--kube-context".into());
            args.push(ctx.into());
        }
        args.push("--qps".into());
        args.push(c.qps.unwrap_or(HELM_QPS).to_string().into());
        args.push("--burst-limit".into());
        args.push(c.burst.unwrap_or(HELM_BURST).to_string().into());
        args
    }

    /// The flags of an install (`upgrade = false`) or upgrade.
    fn install_args(&self, o: &InstallOptions, upgrade: bool) -> Result<Vec<OsString>, HelmError> {
        let mut args: Vec<OsString> = Vec::new();
        for (k, v) in &o.labels {
            // Helm reads `--labels` as comma-separated `k=v` pairs.
            if k.contains([',', '=']) || v.contains(',') {
                return Err(HelmError::InvalidInput(format!(
                    "release label {k}={v}: the helm binary cannot take ',' in labels or '=' in their keys"
                )));
            }
            args.push("--labels".into());
            args.push(format!("{k}={v}").into());
        }
        let timeout = o
            .timeout_seconds
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        args.push("--timeout".into());
        args.push(format!("{}s", timeout.as_secs()).into());
        if let Some(m) = o.max_history.filter(|_| upgrade) {
            args.push("--history-max".into());
            args.push(m.to_string().into());
        }
        let v4 = self.cli.inner.major >= 4;
        if o.force_conflicts && upgrade && v4 {
            // Forcing conflicts needs server-side apply, which an upgrade otherwise takes
            // from how the last revision was applied.
            args.push("--server-side=true".into());
            args.push("--force-conflicts".into());
        }
        if o.take_ownership {
            args.push("--take-ownership".into());
        }
        if o.skip_crds {
            args.push("--skip-crds".into());
        }
        if o.create_namespace && !upgrade {
            args.push("--create-namespace".into());
        }
        if o.wait {
            args.push(if v4 { "--wait=watcher" } else { "--wait" }.into());
        }
        if o.rollback_on_failure {
            args.push(
                if v4 {
                    "--rollback-on-failure"
                } else {
                    "--atomic"
                }
                .into(),
            );
        }
        if o.force_replace {
            args.push(if v4 { "--force-replace" } else { "--force" }.into());
        }
        if o.skip_schema_validation {
            args.push("--skip-schema-validation".into());
        }
        Ok(args)
    }

    fn deadline(o: &InstallOptions) -> Duration {
        o.timeout_seconds
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs)
            + GRACE
    }

    /// Installs or upgrades `release` as `action` says.
    pub async fn deploy(
        &self,
        action: Action,
        chart: &Path,
        release: &str,
        values: &Value,
        o: &InstallOptions,
    ) -> Result<Release, HelmError> {
        let command = action.command();
        let file = self.cli.values_file(values)?;
        let mut args: Vec<OsString> = command.split(' ').map(OsString::from).collect();
        args.extend([release.into(), chart.into(), "--values".into()]);
        args.push(file.path().into());
        args.extend(self.install_args(o, action != Action::Install)?);
        args.extend(self.cluster_args());
        args.extend(["--output".into(), "json".into()]);
        let text = self.cli.run(release, args, Self::deadline(o)).await?;
        drop(file);
        parse(release, command, &text).map(Release)
    }

    /// `helm uninstall` (`--wait` when `wait`).
    pub async fn uninstall(
        &self,
        release: &str,
        wait: bool,
        timeout: Option<u64>,
    ) -> Result<(), HelmError> {
        let timeout = timeout.map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        let mut args: Vec<OsString> = vec![
            "uninstall".into(),
            release.into(),
            "--timeout".into(),
            format!("{}s", timeout.as_secs()).into(),
        ];
        if wait {
            let v4 = self.cli.inner.major >= 4;
            args.push(if v4 { "--wait=watcher" } else { "--wait" }.into());
        }
        args.extend(self.cluster_args());
        self.cli
            .run(release, args, timeout + GRACE)
            .await
            .map(|_| ())
    }

    /// `helm status`: the last revision.
    pub async fn status(&self, release: &str) -> Result<Release, HelmError> {
        let mut args: Vec<OsString> = vec!["status".into(), release.into()];
        args.extend(self.cluster_args());
        args.extend(["--output".into(), "json".into()]);
        let text = self.cli.run(release, args, READ_DEADLINE).await?;
        parse(release, "status", &text).map(Release)
    }

    /// `helm history`, oldest first.
    pub async fn history(&self, release: &str) -> Result<Vec<Release>, HelmError> {
        let mut args: Vec<OsString> = vec!["history".into(), release.into()];
        args.extend(self.cluster_args());
        args.extend(["--output".into(), "json".into()]);
        let text = self.cli.run(release, args, READ_DEADLINE).await?;
        let mut all = releases(parse(release, "history", &text)?);
        all.sort_by_key(Release::revision);
        Ok(all)
    }

    /// `helm list` of releases in every state.
    pub async fn list_all(&self) -> Result<Vec<Release>, HelmError> {
        // Every state by name (Helm v4 has no `--all`); `--max 0` lifts the limit of 256.
        let mut args: Vec<OsString> = [
            "list",
            "--deployed",
            "--failed",
            "--pending",
            "--superseded",
            "--uninstalled",
            "--uninstalling",
            "--max",
            "0",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        args.extend(self.cluster_args());
        args.extend(["--output".into(), "json".into()]);
        let text = self.cli.run("", args, READ_DEADLINE).await?;
        Ok(releases(parse("(all)", "list", &text)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_output_is_split_back_into_templates() {
        let out = "---\n# Source: c/templates/multi.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n# Source: c/templates/hook.yaml\nkind: Job\n---\n# Source: c/templates/multi.yaml\nkind: ConfigMap\nmetadata:\n  name: b\n";
        let files = split_template_output(out);
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["c/templates/hook.yaml", "c/templates/multi.yaml"]
        );
        assert_eq!(
            files["c/templates/multi.yaml"],
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\nkind: ConfigMap\nmetadata:\n  name: b\n"
        );
        assert_eq!(files["c/templates/hook.yaml"], "kind: Job\n");
        assert!(split_template_output("").is_empty());
    }

    #[test]
    fn a_comment_inside_a_document_is_content() {
        let out = "---\n# Source: c/templates/a.yaml\nkind: A\n# Source: not a header\n";
        assert_eq!(
            split_template_output(out)["c/templates/a.yaml"],
            "kind: A\n# Source: not a header\n"
        );
    }

    #[test]
    fn helm_messages_and_versions() {
        assert_eq!(
            helm_message("Error: uninstall: Release not loaded: x: release: not found\n"),
            "uninstall: Release not loaded: x: release: not found"
        );
        assert!(release_not_found(&helm_message(
            "Error: release: not found\n"
        )));
        assert_eq!(
            helm_message(
                "WARNING: Kubernetes configuration file is group-readable. This is insecure.\nError: UPGRADE FAILED: boom\n"
            ),
            "UPGRADE FAILED: boom"
        );
        assert_eq!(helm_message("WARNING: only this\n"), "WARNING: only this");
        assert!(!release_not_found(
            "INSTALLATION FAILED: create: failed to create: namespaces \"absent\" not found"
        ));
        assert_eq!(major_version("v4.1.4"), Some(4));
        assert_eq!(major_version("3.17.0"), Some(3));
        assert_eq!(major_version("dev"), None);
    }

    #[test]
    fn command_lines_name_the_binary_by_its_file_name() {
        let args: Vec<OsString> = vec!["status".into(), "demo".into()];
        assert_eq!(
            command_line(Path::new("/opt/helm/bin/helm"), &args),
            "helm status demo"
        );
    }
}
