//! Command line: `bosun run`, `bosun sandbox`, `bosun journal …`, and the debug commands
//! that read a running bosun's debug socket (`bosun queue|global|module|actors|graph|raw`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::host::ProcessConfig;

/// bosun: addon-operator modules, metacontroller lambda controllers and a DeployItem
/// deployer on one journaled actor runtime.
#[derive(Debug, Parser)]
#[command(name = "bosun", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses the process's command line. Invoked as `addon-operator` (the image links
    /// that name to bosun), `start` or flags alone run the modules alone with
    /// addon-operator's flags, other commands are bosun's (runbooks' `queue list`), and
    /// help and errors use that name; invoked as `metacontroller`, see
    /// [`METACONTROLLER_DEFAULTS`].
    pub fn from_process() -> Cli {
        use clap::FromArgMatches as _;
        let invoked = std::env::args_os()
            .next()
            .and_then(|a| {
                std::path::Path::new(&a)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_default();
        let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let args = match invoked.as_str() {
            "metacontroller" => as_metacontroller(args),
            "addon-operator" => as_addon_operator(args),
            _ if is_landscaper_deployer(&args) => as_landscaper_deployer(args),
            _ => args,
        };
        let matches = Self::command_named(&invoked).get_matches_from(args);
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }

    /// The command line's grammar as `invoked` (the program's name) answers it. A flag
    /// given twice takes the last value, as Go's `flag` package does: metacontroller's
    /// and addon-operator's manifests and charts append user arguments to their own.
    pub fn command_named(invoked: &str) -> clap::Command {
        use clap::CommandFactory as _;
        let mut command = Cli::command().args_override_self(true);
        let names: Vec<String> = command
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        for name in names {
            command = command.mut_subcommand(name, |c| c.args_override_self(true));
        }
        if invoked == "addon-operator" {
            command = command.name("addon-operator").bin_name("addon-operator");
        }
        command
    }
}

/// metacontroller's defaults, as bosun takes them when invoked as `metacontroller` (the
/// image links that name to bosun: metacontroller's manifests run `/usr/bin/metacontroller`
/// with its flags and no subcommand): the lambda controllers alone, `/metrics` on `:9999`,
/// `/healthz` and `/readyz` on `:8081`, the Lease `metacontroller`. The arguments given
/// come after them, and a flag given twice takes its last value.
const METACONTROLLER_DEFAULTS: &[&str] = &[
    "run",
    "--modules=false",
    "--deployer=false",
    "--metrics-address=:9999",
    "--health-probe-bind-address=:8081",
    "--leader-election-id=metacontroller",
];

/// The command line of a bosun invoked as `metacontroller`: `run` with metacontroller's
/// defaults, then the arguments given (`--help` and `--version` as they are).
fn as_metacontroller(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args = args.into_iter();
    let program = args.next().unwrap_or_else(|| "metacontroller".into());
    let rest: Vec<std::ffi::OsString> = args.collect();
    if rest
        .first()
        .is_some_and(|a| a == "--version" || a == "-V" || a == "help")
    {
        return std::iter::once(program).chain(rest).collect();
    }
    std::iter::once(program)
        .chain(METACONTROLLER_DEFAULTS.iter().map(std::ffi::OsString::from))
        .chain(go_flags(rest))
        .collect()
}

/// metacontroller's flags as Go's `flag` package reads them, in bosun's words: `-name` is
/// `--name`; the klog flags of metacontroller's older manifests (`--logtostderr -v=4`,
/// before its `--zap-*` flags) are taken too: `-v` is `--zap-log-level` (both are
/// verbosity numbers), `--logtostderr` and `--alsologtostderr` say what bosun always does.
fn go_flags(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        let long = match text.strip_prefix("--") {
            Some(rest) => rest,
            None => match text.strip_prefix('-') {
                Some(rest) if !rest.is_empty() => rest,
                _ => {
                    out.push(arg);
                    continue;
                }
            },
        };
        let (name, value) = match long.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (long, None),
        };
        match name {
            "logtostderr" | "alsologtostderr" => {}
            "v" => {
                let value = value
                    .map(str::to_string)
                    .or_else(|| args.next().map(|next| next.to_string_lossy().into_owned()));
                out.push(format!("--zap-log-level={}", value.unwrap_or_default()).into());
            }
            _ => out.push(format!("--{long}").into()),
        }
    }
    out
}

/// addon-operator's defaults, as bosun takes them when invoked as `addon-operator` with
/// `start` or with no command (addon-operator's images run `/addon-operator`, its default
/// command being `start`): the modules alone — no lambda controllers, no deployer, so none
/// of their CRDs is installed in a cluster whose owner only swapped addon-operator's image.
const ADDON_OPERATOR_DEFAULTS: &[&str] = &["run", "--lambda-controllers=false", "--deployer=false"];

/// The command line of a bosun invoked as `addon-operator`: `start` (or flags alone) is
/// `run` with addon-operator's defaults, then the arguments given; another command
/// (`queue list`, `module values …`, `--help`) is bosun's own, as runbooks use them;
/// `version` is `--version`.
fn as_addon_operator(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args = args.into_iter();
    let program = args.next().unwrap_or_else(|| "addon-operator".into());
    let mut rest: Vec<std::ffi::OsString> = args.collect();
    let first = rest.first().and_then(|a| a.to_str()).map(str::to_string);
    match first.as_deref() {
        Some("start") => {
            rest.remove(0);
        }
        Some("version") => return vec![program, "--version".into()],
        Some("--help" | "-h" | "--version" | "-V") => {
            return std::iter::once(program).chain(rest).collect();
        }
        Some(command) if !command.starts_with('-') => {
            return std::iter::once(program).chain(rest).collect();
        }
        _ => {}
    }
    std::iter::once(program)
        .chain(ADDON_OPERATOR_DEFAULTS.iter().map(std::ffi::OsString::from))
        .chain(rest)
        .collect()
}

/// landscaper's deployer charts start the image with `--config=<file>` (and optionally
/// `--landscaper-kubeconfig`, `-v`) and no command: the deployer alone, of the type the
/// file's apiVersion names, with the jobID contract of current landscaper releases, and
/// no CRDs installed (landscaper installs its own; the charts' ClusterRole cannot).
const LANDSCAPER_DEPLOYER_DEFAULTS: &[&str] = &[
    "run",
    "--modules=false",
    "--lambda-controllers=false",
    "--install-crds=false",
    "--deployer-contract=jobid",
];

/// Whether the command line is a landscaper deployer's: flags first, one of them `--config`.
fn is_landscaper_deployer(args: &[std::ffi::OsString]) -> bool {
    let flag = |a: &std::ffi::OsString| a.to_str().map(str::to_string).unwrap_or_default();
    let Some(first) = args.get(1).map(flag) else {
        return false;
    };
    first.starts_with('-')
        && !matches!(first.as_str(), "--help" | "-h" | "--version" | "-V")
        && args
            .iter()
            .skip(1)
            .map(flag)
            .any(|a| a == "--config" || a.starts_with("--config="))
}

/// The command line of a landscaper deployer, in bosun's words: `--config` is
/// `--deployer-config`, `--landscaper-kubeconfig` (the cluster of the DeployItems) is
/// `--kubeconfig`, landscaper's logging flags (`-v`/`--verbosity`, `-f`/`--format`,
/// `--dev`, `--disable-timestamp`) are their metacontroller equivalents; `--cli`,
/// `--disable-caller` and `--disable-stacktrace` only shape log lines and are dropped.
fn as_landscaper_deployer(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args = args.into_iter();
    let program = args.next().unwrap_or_else(|| "bosun".into());
    let mut out: Vec<std::ffi::OsString> = std::iter::once(program)
        .chain(
            LANDSCAPER_DEPLOYER_DEFAULTS
                .iter()
                .map(std::ffi::OsString::from),
        )
        .collect();
    let rest: Vec<std::ffi::OsString> = args.collect();
    let mut i = 0;
    while i < rest.len() {
        let arg = rest[i].to_string_lossy().into_owned();
        i += 1;
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let renamed = match name.as_str() {
            "--config" => Some("--deployer-config"),
            "--landscaper-kubeconfig" => Some("--kubeconfig"),
            "-v" | "--verbosity" => Some("--zap-log-level"),
            "-f" | "--format" => Some("--zap-encoder"),
            _ => None,
        };
        if let Some(to) = renamed {
            let value = match inline {
                Some(v) => v,
                None if i < rest.len() => {
                    i += 1;
                    rest[i - 1].to_string_lossy().into_owned()
                }
                None => String::new(),
            };
            let value = if to == "--zap-encoder" && value == "text" {
                "console".to_string()
            } else {
                value
            };
            out.push(format!("{to}={value}").into());
            continue;
        }
        match name.as_str() {
            "--dev" => {
                out.push(format!("--zap-devel={}", inline.as_deref().unwrap_or("true")).into())
            }
            "--disable-timestamp" => {
                out.push(format!("--log-no-time={}", inline.as_deref().unwrap_or("true")).into())
            }
            "--cli" | "--disable-caller" | "--disable-stacktrace" => {}
            _ => out.push(rest[i - 1].clone()),
        }
    }
    out
}

#[cfg(test)]
mod command_line_tests {
    use super::*;
    use clap::FromArgMatches as _;

    #[test]
    fn a_flag_given_twice_takes_the_last_value_as_go_flags_do() {
        let matches = Cli::command_named("bosun")
            .try_get_matches_from([
                "bosun",
                "run",
                "--discovery-interval=20s",
                "--cache-flush-interval=30m",
                "--discovery-interval=45s",
            ])
            .expect("a repeated flag is taken");
        let cli = Cli::from_arg_matches(&matches).expect("parsed");
        let Command::Run(run) = cli.command else {
            panic!("not run");
        };
        assert_eq!(run.lambda.discovery_interval, "45s");
    }

    fn run_of(args: &[&str]) -> RunArgs {
        let args = as_metacontroller(args.iter().map(std::ffi::OsString::from).collect());
        let matches = Cli::command_named("metacontroller")
            .try_get_matches_from(args)
            .expect("metacontroller's arguments are taken");
        match Cli::from_arg_matches(&matches).expect("parsed").command {
            Command::Run(run) => *run,
            other => panic!("not run: {other:?}"),
        }
    }

    fn addon_operator(args: &[&str]) -> Command {
        let args = as_addon_operator(args.iter().map(std::ffi::OsString::from).collect());
        let matches = Cli::command_named("addon-operator")
            .try_get_matches_from(args)
            .expect("addon-operator's arguments are taken");
        Cli::from_arg_matches(&matches).expect("parsed").command
    }

    #[test]
    fn invoked_as_addon_operator_start_runs_the_modules_alone_with_its_flags() {
        for args in [
            &[
                "/addon-operator",
                "start",
                "--modules-dir=/m1:/m2",
                "--log-level=debug",
            ][..],
            &[
                "/addon-operator",
                "--modules-dir=/m1:/m2",
                "--log-level=debug",
            ][..],
            &[
                "addon-operator",
                "start",
                "--modules-dir",
                "/m1:/m2",
                "--log-level",
                "debug",
            ][..],
        ] {
            let Command::Run(run) = addon_operator(args) else {
                panic!("{args:?} is not run");
            };
            assert!(!run.lambda.lambda_controllers, "{args:?}");
            assert!(!run.deployer.deployer, "{args:?}");
            assert_eq!(
                run.modules, None,
                "{args:?}: the modules as BOSUN_MODULES says"
            );
            let given = run.addon_operator.given().expect("taken");
            assert_eq!(given.var(&["MODULES_DIR"]).as_deref(), Some("/m1:/m2"));
            assert_eq!(
                run.addon_operator
                    .logging(Default::default())
                    .level
                    .as_deref(),
                Some("debug")
            );
        }
        // With no argument at all: start, addon-operator's default command.
        let Command::Run(run) = addon_operator(&["/addon-operator"]) else {
            panic!("not run");
        };
        assert!(!run.lambda.lambda_controllers && !run.deployer.deployer);
        // The user's flags after the defaults win.
        let Command::Run(run) = addon_operator(&["addon-operator", "start", "--deployer=true"])
        else {
            panic!("not run");
        };
        assert!(run.deployer.deployer);
        // Runbooks' debug commands stay bosun's.
        assert!(matches!(
            addon_operator(&["addon-operator", "queue", "list"]),
            Command::Queue(_)
        ));
        assert_eq!(
            as_addon_operator(vec!["addon-operator".into(), "version".into()]),
            vec![
                std::ffi::OsString::from("addon-operator"),
                "--version".into()
            ]
        );
    }

    #[test]
    fn landscaper_s_deployer_chart_arguments_run_the_deployer_alone_from_its_file() {
        // charts/helm-deployer/templates/deployment.yaml's args, with every value set.
        let args: Vec<std::ffi::OsString> = [
            "/usr/local/bin/bosun",
            "--config=/app/ls/config/config.yaml",
            "--landscaper-kubeconfig=/app/ls/landscaper-cluster-kubeconfig/kubeconfig",
            "-v=debug",
        ]
        .iter()
        .map(std::ffi::OsString::from)
        .collect();
        assert!(is_landscaper_deployer(&args));
        let matches = Cli::command_named("bosun")
            .try_get_matches_from(as_landscaper_deployer(args))
            .expect("landscaper's arguments are taken");
        let Command::Run(run) = Cli::from_arg_matches(&matches).expect("parsed").command else {
            panic!("not run");
        };
        assert_eq!(run.modules, Some(false));
        assert!(!run.lambda.lambda_controllers);
        assert!(!run.lambda.install_crds);
        assert!(run.deployer.deployer);
        assert_eq!(run.deployer.deployer_contract, "jobid");
        assert_eq!(
            run.deployer.deployer_config.as_deref(),
            Some(std::path::Path::new("/app/ls/config/config.yaml"))
        );
        assert_eq!(
            run.metacontroller.kubeconfig.as_deref(),
            Some(std::path::Path::new(
                "/app/ls/landscaper-cluster-kubeconfig/kubeconfig"
            ))
        );
        assert_eq!(
            run.metacontroller
                .logging()
                .expect("level")
                .level
                .as_deref(),
            Some("debug")
        );
        // The space-separated forms, and bosun's own commands are left alone.
        let spaced = as_landscaper_deployer(
            [
                "bosun", "--config", "/c.yaml", "-v", "error", "--format", "text", "--cli",
            ]
            .iter()
            .map(std::ffi::OsString::from)
            .collect(),
        );
        assert!(spaced.ends_with(&[
            "--deployer-config=/c.yaml".into(),
            "--zap-log-level=error".into(),
            "--zap-encoder=console".into(),
        ]));
        let own: Vec<std::ffi::OsString> = ["bosun", "run", "--deployer-config=/c.yaml"]
            .iter()
            .map(std::ffi::OsString::from)
            .collect();
        assert!(!is_landscaper_deployer(&own));
    }

    #[test]
    fn invoked_as_metacontroller_its_manifest_s_arguments_run_the_lambda_controllers_alone() {
        // manifests/production/metacontroller.yaml's args.
        let run = run_of(&[
            "/usr/bin/metacontroller",
            "--zap-log-level=4",
            "--discovery-interval=20s",
        ]);
        assert_eq!(run.modules, Some(false));
        assert!(!run.deployer.deployer);
        assert!(run.lambda.lambda_controllers);
        assert_eq!(run.lambda.discovery_interval, "20s");
        assert_eq!(run.metacontroller.zap_log_level.as_deref(), Some("4"));
        assert_eq!(run.metacontroller.metrics_address.as_deref(), Some(":9999"));
        assert_eq!(
            run.metacontroller.health_probe_bind_address.as_deref(),
            Some(":8081")
        );
        assert_eq!(run.ha.leader_election_id, "metacontroller");
        // The user's flags win over the defaults.
        let run = run_of(&[
            "metacontroller",
            "--health-probe-bind-address=:9440",
            "--leader-election-id=mine",
        ]);
        assert_eq!(
            run.metacontroller.health_probe_bind_address.as_deref(),
            Some(":9440")
        );
        assert_eq!(run.ha.leader_election_id, "mine");
    }

    #[test]
    fn invoked_as_metacontroller_go_s_single_dash_flags_and_the_older_klog_flags_are_taken() {
        // metacontroller v1's manifest: `--logtostderr -v=4 --discovery-interval=20s`.
        let run = run_of(&[
            "metacontroller",
            "--logtostderr",
            "-v=4",
            "--discovery-interval=20s",
        ]);
        assert_eq!(run.metacontroller.zap_log_level.as_deref(), Some("4"));
        assert_eq!(run.lambda.discovery_interval, "20s");
        // Go's flag reads `-name` as `--name`, and `-v 5` as `-v=5`.
        let run = run_of(&[
            "metacontroller",
            "-discovery-interval=25s",
            "-cache-flush-interval",
            "10m",
            "-v",
            "5",
            "-alsologtostderr=true",
        ]);
        assert_eq!(run.lambda.discovery_interval, "25s");
        assert_eq!(run.lambda.cache_flush_interval, "10m");
        assert_eq!(run.metacontroller.zap_log_level.as_deref(), Some("5"));
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator (with `--sandbox`, against an embedded API server). `start` is
    /// addon-operator's name for it.
    #[command(alias = "start")]
    Run(Box<RunArgs>),
    /// Run the sandbox Kubernetes API server alone.
    Sandbox(crate::sandbox_cli::SandboxArgs),
    /// Inspect a journal: log, state, diff, why, stats, verify, repair.
    Journal(crate::journal_cli::JournalArgs),
    /// Why an object looks the way it does: who made it, each change bosun made and why,
    /// what bosun waits for (from the journals, or `--live` from a running bosun).
    Explain(crate::explain_cli::ExplainArgs),
    /// Dump the queues of a running bosun (debug socket).
    Queue(crate::debug::commands::QueueArgs),
    /// Global hooks, values and config values of a running bosun (debug socket).
    Global(crate::debug::commands::GlobalArgs),
    /// Modules, their values and config values in a running bosun (debug socket).
    Module(crate::debug::commands::ModuleArgs),
    /// Actor mailboxes of a running bosun: pending, in progress, jobs, history.
    Actors(crate::debug::commands::ActorsArgs),
    /// The module graph of a running bosun (debug socket): DOT text, or PNG via graphviz.
    Graph(crate::debug::commands::GraphArgs),
    /// A raw request to the debug socket, e.g. `bosun raw /queue/list.json`.
    Raw(crate::debug::commands::RawArgs),
    /// Runtime parameters of a running bosun, e.g. `log.level` (debug socket).
    Config(crate::debug::commands::ConfigArgs),
}

/// Arguments of `bosun run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Start the embedded sandbox API server and run against it.
    #[arg(long)]
    pub sandbox: bool,
    /// Where the sandbox listens.
    #[arg(long, default_value = "127.0.0.1:6445")]
    pub sandbox_listen: SocketAddr,
    /// Data folder (sandbox storage, journal) for the embedded default; created `0700`.
    #[arg(long, env = "BOSUN_DATA_DIR", default_value = ".data")]
    pub data: PathBuf,
    /// Let the embedded sandbox serve a non-loopback `--sandbox-listen` address (it has no
    /// token: anyone who can reach it reads and changes every object).
    #[arg(long)]
    pub allow_unauthenticated: bool,
    #[command(flatten)]
    pub lambda: LambdaArgs,
    #[command(flatten)]
    pub metacontroller: crate::lambda::flags::MetacontrollerFlags,
    #[command(flatten)]
    pub deployer: DeployerArgs,
    #[command(flatten)]
    pub ha: crate::ha::HaArgs,
    #[command(flatten)]
    pub addon_operator: crate::addon::start_flags::StartFlags,
    /// The modules (as `BOSUN_MODULES`, which this wins over); `false` when invoked as
    /// `metacontroller`.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub modules: Option<bool>,
}

/// The DeployItem deployer's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct DeployerArgs {
    /// Run the DeployItem deployer (`landscaper.gardener.cloud` DeployItems of bosun's types).
    #[arg(long = "deployer", env = "BOSUN_DEPLOYER", default_value_t = true, action = clap::ArgAction::Set)]
    pub deployer: bool,
    /// Deploy items reconciled at once.
    #[arg(long, env = "BOSUN_DEPLOYER_WORKERS", default_value_t = 5)]
    pub deployer_workers: usize,
    /// Which of landscaper's deployer contracts runs an item: `annotations` (the seed's:
    /// an item without a jobID runs on its reconcile annotation and generation) or `jobid`
    /// (current landscaper releases: only a jobID runs an item; use it beside one).
    #[arg(long, env = "BOSUN_DEPLOYER_CONTRACT", default_value = "annotations")]
    pub deployer_contract: String,
    /// `status.deployer.identity` (default `bosun-<hostname>-<unix seconds>`).
    #[arg(long, env = "BOSUN_DEPLOYER_IDENTITY")]
    pub deployer_identity: Option<String>,
    /// Serve only items whose Target matches one of these selectors: a JSON list of
    /// `{targets: [{name, namespace}], annotations: [{key, operator, values}], labels: […]}`
    /// (landscaper's `targetSelector`). Empty: every target.
    #[arg(long, env = "BOSUN_DEPLOYER_TARGET_SELECTOR", default_value = "")]
    pub deployer_target_selector: String,
    /// landscaper's `deployItemTimeouts.pickup`: an item whose job (or `reconcile-time`
    /// marker) was not picked up within it fails with `PickupTimeout` (`none`: never).
    #[arg(long, env = "BOSUN_DEPLOYER_PICKUP_TIMEOUT", default_value = "5m")]
    pub deployer_pickup_timeout: String,
    /// landscaper's `deployItemTimeouts.abort`: an `abort` whose `abort-time` is older
    /// fails with `AbortingTimeout` (`none`: never).
    #[arg(long, env = "BOSUN_DEPLOYER_ABORT_TIMEOUT", default_value = "5m")]
    pub deployer_abort_timeout: String,
    /// landscaper's `deployItemTimeouts.progressingDefault`: the timeout of an item without
    /// `spec.timeout` (`none`: never).
    #[arg(
        long,
        env = "BOSUN_DEPLOYER_PROGRESSING_TIMEOUT",
        default_value = "10m"
    )]
    pub deployer_progressing_timeout: String,
    /// Lock each item with a SyncObject while it is in flight, as landscaper's deployers
    /// do when several replicas serve the same targets. The holder is this pod
    /// (`ADDON_OPERATOR_POD`, else the host name); a lock whose pod is gone from
    /// `ADDON_OPERATOR_NAMESPACE` is taken over.
    #[arg(long, env = "BOSUN_DEPLOYER_SYNC_OBJECTS", default_value_t = false, action = clap::ArgAction::Set)]
    pub deployer_sync_objects: bool,
    /// A landscaper deployer Configuration file (its charts' `--config`): its apiVersion
    /// chooses the one type served; `identity`, `targetSelector`, `controller.workers` and
    /// `hpa.maxReplicas` (above 1: SyncObject locks) are read over the flags above.
    #[arg(long, env = "BOSUN_DEPLOYER_CONFIG", value_name = "FILE")]
    pub deployer_config: Option<PathBuf>,
}

/// A landscaper timeout flag: a Go duration, or `none`/`0` for none.
fn landscaper_timeout(flag: &str, value: &str) -> anyhow::Result<Option<std::time::Duration>> {
    match value.trim() {
        "none" | "0" | "" => Ok(None),
        v => bosun_runtime::clock::parse_go_duration(v)
            .map(|d| (!d.is_zero()).then_some(d))
            .map_err(|e| anyhow::anyhow!("{flag}: {e} (expected a duration such as 5m, or none)")),
    }
}

impl DeployerArgs {
    /// `--deployer-contract`.
    fn contract(&self) -> anyhow::Result<bosun_deployer::decide::Contract> {
        self.deployer_contract
            .parse()
            .map_err(|e| anyhow::anyhow!("--deployer-contract {e}"))
    }

    /// The deployer configuration, with the journal under the process's journal folder
    /// and the modules' Helm engine settings.
    pub fn config(
        &self,
        process: &crate::host::ProcessConfig,
        operator: &crate::addon::OperatorConfig,
        install_crds: bool,
    ) -> anyhow::Result<crate::deployer::DeployerConfig> {
        let journal_dir = &process.journal_dir;
        let file = self
            .deployer_config
            .as_deref()
            .map(crate::deployer::landscaper_config::LandscaperConfiguration::read)
            .transpose()?;
        let target_selectors = match &file {
            Some(f) => f.target_selectors.clone(),
            None => bosun_deployer::target::parse_selectors(&self.deployer_target_selector)
                .map_err(|e| anyhow::anyhow!("--deployer-target-selector: {e}"))?,
        };
        let locking = self.deployer_sync_objects || file.as_ref().is_some_and(|f| f.locking);
        Ok(crate::deployer::DeployerConfig {
            workers: file
                .as_ref()
                .and_then(|f| f.workers)
                .unwrap_or(self.deployer_workers)
                .max(1),
            identity: file
                .as_ref()
                .and_then(|f| f.identity.clone())
                .or_else(|| self.deployer_identity.clone())
                .unwrap_or_else(crate::deployer::default_identity),
            target_selectors,
            install_crds,
            only_type: file.as_ref().map(|f| f.deployer_type),
            registry_configs: file
                .as_ref()
                .map(|f| f.registry_configs.clone())
                .unwrap_or_default(),
            lock_holder: locking.then(|| {
                std::env::var("ADDON_OPERATOR_POD")
                    .or_else(|_| std::env::var("HOSTNAME"))
                    .unwrap_or_else(|_| "bosun".into())
            }),
            pod_namespace: process.namespace.clone(),
            timeouts: bosun_deployer::decide::LandscaperTimeouts {
                pickup: landscaper_timeout(
                    "--deployer-pickup-timeout",
                    &self.deployer_pickup_timeout,
                )?,
                abort: landscaper_timeout(
                    "--deployer-abort-timeout",
                    &self.deployer_abort_timeout,
                )?,
                progressing: bosun_deployer::timeout::Timeout::parse(
                    &self.deployer_progressing_timeout,
                )
                .map_err(|e| {
                    anyhow::anyhow!(
                        "--deployer-progressing-timeout {:?}: {e}",
                        self.deployer_progressing_timeout
                    )
                })?,
            },
            journal_dir: journal_dir.join("deployer"),
            // Known once the operator has connected (`DeployItems::start`).
            resource_cluster: None,
            helm: operator.helm_settings(&process.tmp_dir),
            work_dir: process.tmp_dir.join("deployer"),
            contract: self.contract()?,
        })
    }
}

/// The lambda controllers' flags (metacontroller's names).
#[derive(Debug, Clone, clap::Args)]
pub struct LambdaArgs {
    /// Run the lambda controllers (CompositeController and DecoratorController objects).
    #[arg(long, env = "BOSUN_LAMBDA", default_value_t = true, action = clap::ArgAction::Set)]
    pub lambda_controllers: bool,
    /// Create the `metacontroller.k8s.io` and `landscaper.gardener.cloud` CRDs when the
    /// cluster lacks them.
    #[arg(long, env = "BOSUN_INSTALL_CRDS", default_value_t = true, action = clap::ArgAction::Set)]
    pub install_crds: bool,
    /// Workers per controller: parents synced at once.
    #[arg(long, env = "BOSUN_WORKERS", default_value_t = 5)]
    pub workers: usize,
    /// How children are written: `dynamic-apply` (3-way merge with the last-applied
    /// annotation) or `server-side-apply`.
    #[arg(long, env = "BOSUN_APPLY_STRATEGY", default_value = "dynamic-apply")]
    pub apply_strategy: String,
    /// Field manager of server-side apply.
    #[arg(
        long,
        env = "BOSUN_APPLY_STRATEGY_SSA_FIELD_MANAGER",
        default_value = "metacontroller"
    )]
    pub apply_strategy_ssa_field_manager: String,
    /// Only run the controller objects whose labels match (e.g. `shard=a`).
    #[arg(long, env = "BOSUN_TARGET_LABEL_SELECTOR", default_value = "")]
    pub target_label_selector: String,
    /// Events per second and object (after the burst).
    #[arg(long, env = "BOSUN_EVENTS_QPS", default_value_t = 1.0 / 300.0)]
    pub events_qps: f64,
    /// Events an object may get at once.
    #[arg(long, env = "BOSUN_EVENTS_BURST", default_value_t = 25)]
    pub events_burst: u32,
    /// Requests per second the lambda controllers' client may make after its burst
    /// (client-go's meaning: 0 is client-go's default, 5; negative is no limit). Unset:
    /// no limit.
    #[arg(long, env = "BOSUN_CLIENT_GO_QPS", allow_negative_numbers = true)]
    pub client_go_qps: Option<f64>,
    /// Requests the lambda controllers' client may make at once (0: the default, 10).
    #[arg(long, env = "BOSUN_CLIENT_GO_BURST")]
    pub client_go_burst: Option<u32>,
    /// How often discovery is fetched again (besides whenever a resource is not found,
    /// so a new CRD is seen at once); `0`: never. A Go duration.
    #[arg(long, env = "BOSUN_DISCOVERY_INTERVAL", default_value = "30s")]
    pub discovery_interval: String,
    /// How often the lambda controllers' informers list again (besides after every watch
    /// error and `410 Gone`); a relist reports only what changed. `0`: never.
    #[arg(long, env = "BOSUN_CACHE_FLUSH_INTERVAL", default_value = "30m")]
    pub cache_flush_interval: String,
}

impl LambdaArgs {
    /// The lambda configuration, with the journal under `journal_dir`.
    pub fn config(
        &self,
        journal_dir: &std::path::Path,
    ) -> anyhow::Result<crate::lambda::LambdaConfig> {
        use bosun_lambda::children::ApplyStrategy;
        let apply_strategy = match self.apply_strategy.as_str() {
            "dynamic-apply" => ApplyStrategy::DynamicApply,
            "server-side-apply" => ApplyStrategy::ServerSideApply,
            other => anyhow::bail!(
                "--apply-strategy {other:?}: expected \"dynamic-apply\" or \"server-side-apply\""
            ),
        };
        let interval = |flag: &str, v: &str| {
            bosun_runtime::clock::parse_go_duration(v)
                .map(|d| (!d.is_zero()).then_some(d))
                .map_err(|e| {
                    anyhow::anyhow!("{flag} {v:?}: {e} (expected a duration such as 30s, or 0)")
                })
        };
        let discovery_interval = interval("--discovery-interval", &self.discovery_interval)?;
        let cache_flush_interval = interval("--cache-flush-interval", &self.cache_flush_interval)?;
        if let Some(qps) = self.client_go_qps.filter(|q| !q.is_finite()) {
            anyhow::bail!(
                "--client-go-qps {qps}: expected a number of requests per second (negative: no limit)"
            );
        }
        if self.events_qps.is_nan() || self.events_qps <= 0.0 {
            anyhow::bail!(
                "--events-qps {}: expected a positive number",
                self.events_qps
            );
        }
        Ok(crate::lambda::LambdaConfig {
            workers: self.workers.max(1),
            apply_strategy,
            field_manager: self.apply_strategy_ssa_field_manager.clone(),
            target_label_selector: self.target_label_selector.clone(),
            events: bosun_kube::EventLimits {
                qps: self.events_qps,
                burst: self.events_burst,
            },
            install_crds: self.install_crds,
            journal_dir: journal_dir.join("lambda"),
            client_limits: if self.client_go_qps.is_none() && self.client_go_burst.is_none() {
                bosun_kube::ClientLimits::UNLIMITED
            } else {
                bosun_kube::ClientLimits::from_client_go(
                    self.client_go_qps.unwrap_or(0.0),
                    self.client_go_burst.unwrap_or(0),
                )
            },
            discovery_interval,
            cache_flush_interval,
        })
    }
}

impl RunArgs {
    /// What the command line says of logging: addon-operator's `--log-*` flags, with
    /// metacontroller's `--zap-*` flags over them.
    fn logging(&self) -> anyhow::Result<crate::logging::Overrides> {
        Ok(self.addon_operator.logging(self.metacontroller.logging()?))
    }
}

/// Runs the parsed command line and maps the outcome to an exit code.
pub fn main(cli: Cli) -> ExitCode {
    let logging = match &cli.command {
        Command::Run(args) => match args.logging() {
            Ok(o) => {
                // Heap samples from the start, as Go's runtime keeps them.
                if matches!(args.metacontroller.pprof(), Ok(Some(_))) {
                    crate::profiling::heap::enable();
                }
                o
            }
            Err(e) => {
                eprintln!("bosun: {e}");
                return ExitCode::FAILURE;
            }
        },
        _ => Default::default(),
    };
    let log_level = crate::logging::init_with(&logging);
    let result = match cli.command {
        Command::Run(args) => run(*args, log_level),
        Command::Sandbox(args) => {
            runtime().and_then(|rt| rt.block_on(crate::sandbox_cli::serve(args)))
        }
        Command::Journal(args) => crate::journal_cli::run(args, &journal_kinds()),
        Command::Explain(args) => crate::explain_cli::run(args, &journal_kinds()),
        Command::Queue(args) => crate::debug::commands::queue(args),
        Command::Global(args) => crate::debug::commands::global(args),
        Command::Module(args) => crate::debug::commands::module(args),
        Command::Actors(args) => crate::debug::commands::actors(args),
        Command::Graph(args) => crate::debug::commands::graph(args),
        Command::Raw(args) => crate::debug::commands::raw(args),
        Command::Config(args) => crate::debug::commands::config(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bosun: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// A subsystem as bosun registers it: its journal, read by the commands that run without
/// it, and how a run builds it from the command line and the configuration.
pub struct Registered {
    /// Its journal.
    pub journal: &'static dyn crate::journal_kinds::JournalKind,
    /// It, for this run.
    pub configure: for<'a> fn(
        &'a RunArgs,
        &ProcessConfig,
        &'a crate::addon::OperatorConfig,
    ) -> Box<dyn crate::host::Subsystem + 'a>,
}

/// Every subsystem bosun hosts, in start order: the one list of them. A subsystem is one
/// [`Subsystem`](crate::host::Subsystem) and its [`JournalKind`](crate::journal_kinds::JournalKind)
/// (docs/architecture.md, "Where a new subsystem goes").
pub static SUBSYSTEMS: &[Registered] = &[
    Registered {
        journal: &crate::addon::JOURNAL,
        configure: |_, process, cfg| {
            Box::new(crate::addon::Modules {
                on: process.modules,
                journal_dir: process.journal_dir.clone(),
                cfg,
            })
        },
    },
    Registered {
        journal: &crate::lambda::JOURNAL,
        configure: |args, process, _| {
            Box::new(crate::lambda::LambdaControllers {
                on: args.lambda.lambda_controllers,
                journal_dir: process.journal_dir.join(crate::lambda::JOURNAL.name),
                config: args.lambda.config(&process.journal_dir),
            })
        },
    },
    Registered {
        journal: &crate::deployer::JOURNAL,
        configure: |args, process, cfg| {
            Box::new(crate::deployer::DeployItems {
                on: args.deployer.deployer,
                journal_dir: process.journal_dir.join(crate::deployer::JOURNAL.name),
                config: args.deployer.config(process, cfg, args.lambda.install_crds),
            })
        },
    },
];

/// Every registered subsystem's journal, in start order.
fn journal_kinds() -> Vec<&'static dyn crate::journal_kinds::JournalKind> {
    SUBSYSTEMS.iter().map(|s| s.journal).collect()
}

/// This run's subsystems, in start order.
fn subsystems<'a>(
    args: &'a RunArgs,
    process: &ProcessConfig,
    cfg: &'a crate::addon::OperatorConfig,
) -> Vec<Box<dyn crate::host::Subsystem + 'a>> {
    SUBSYSTEMS
        .iter()
        .map(|s| (s.configure)(args, process, cfg))
        .collect()
}

/// The process's configuration and the modules', from addon-operator's `start` flags
/// and the environment over `defaults`; `--modules` (BOSUN_MODULES) and metacontroller's
/// `--kubeconfig` (`KUBE_CONFIG` wins) applied.
fn configs(
    args: &RunArgs,
    defaults: (&ProcessConfig, &crate::addon::OperatorConfig),
) -> anyhow::Result<(ProcessConfig, crate::addon::OperatorConfig)> {
    let given = args.addon_operator.given()?;
    let cfg = crate::addon::OperatorConfig::from_env_and(defaults.1, &given)?;
    let mut process = ProcessConfig::from_env_and(defaults.0, &given)?;
    process.hook_logging = crate::logging::HookLogging::from_env_and(&args.logging()?);
    if let Some(modules) = args.modules {
        process.modules = modules;
    }
    if process.kubeconfig.is_none() {
        process.kubeconfig = args.metacontroller.kubeconfig.clone();
    }
    Ok((process, cfg))
}

/// What one run of bosun hands to the host it makes (a standby makes its host when it
/// comes to lead): the runtime parameters (`bosun config list|set`) and the work gate that
/// a graceful stop or a fence closes.
#[derive(Clone, Default)]
struct RunShared {
    config: std::sync::Arc<crate::runtime_config::RuntimeConfig>,
    gate: bosun_runtime::lifecycle::WorkGate,
    /// The metrics recorder, installed once the process's configuration (its prefix) is
    /// known, before the first start.
    metrics: Option<crate::prometheus::Metrics>,
}

impl RunShared {
    /// With the metrics recorder installed (once per run: every start of an HA replica's
    /// terms records into it), its prefix from `process`.
    fn with_metrics(self, process: &ProcessConfig) -> RunShared {
        RunShared {
            metrics: Some(crate::prometheus::install(&process.metrics_prefix)),
            ..self
        }
    }
}

/// Every subsystem switched on, started on one host, and the endpoints that show them.
pub struct Running {
    /// Where `/healthz`, `/readyz` and `/metrics` are served, and the debug endpoints.
    pub served: crate::endpoints::Served,
    /// The started subsystems with their journals' names, last started first: they stop
    /// in that order, before the host.
    subsystems: Vec<(&'static str, Box<dyn crate::host::Handle>)>,
    _host: crate::host::Host,
}

impl Running {
    /// Stops the subsystems and the shared watches now, not when their last task ends.
    pub fn stop(self) {
        let watches = self._host.watches.clone();
        drop(self);
        watches.stop_all();
    }

    /// The host's Kubernetes client.
    pub fn client(&self) -> kube::Client {
        self._host.client.clone()
    }

    /// The journals of the running subsystems, by their names on the HA stream, in start
    /// order.
    pub fn journals(
        &self,
    ) -> Vec<(
        &'static str,
        std::sync::Arc<dyn crate::ha::replication::Source>,
    )> {
        self.subsystems
            .iter()
            .rev()
            .map(|(name, s)| (*name, s.journal()))
            .collect()
    }
}

/// Starts every subsystem switched on on one host, then serves the endpoints: essential
/// ones (the modules) before the endpoints, a failure stopping the start; the others
/// (lambda controllers, the deployer) after them, a failure logged and named by
/// `/readyz`, and the rest runs on.
async fn start_all(
    args: &RunArgs,
    process: &ProcessConfig,
    cfg: &crate::addon::OperatorConfig,
    stream: Option<crate::ha::JournalStream>,
    shared: &RunShared,
) -> anyhow::Result<Running> {
    // Installed before the first start, so that everything started below records into it.
    let metrics = shared.metrics.clone().ok_or_else(|| {
        anyhow::anyhow!("the metrics recorder is installed before the subsystems start")
    })?;
    let ha = stream.as_ref().map(crate::ha::JournalStream::status);
    let host_config = crate::host::HostConfig {
        process: process.clone(),
        runtime_config: shared.config.clone(),
        gate: shared.gate.clone(),
    };
    let host = crate::host::Host::connect(&host_config, stream, metrics).await?;
    let views = crate::host::Views::default();
    let (essential, others): (Vec<_>, Vec<_>) = subsystems(args, process, cfg)
        .into_iter()
        .partition(|s| s.essential());
    views.update(|v| {
        v.ha = ha;
        for s in essential.iter().chain(&others) {
            v.show(s.name(), s.idle_view());
        }
        v.starting = others
            .iter()
            .filter(|s| s.switched_on())
            .map(|s| s.name())
            .collect();
    });
    let mut started = Vec::new();
    for subsystem in essential {
        if !subsystem.switched_on() {
            subsystem.switched_off();
            continue;
        }
        let (name, journal) = (subsystem.name(), subsystem.journal().name);
        let handle = subsystem.start(&host).await?;
        views.update(|v| {
            handle.register(v);
            v.show(name, Some(handle.view()));
        });
        started.insert(0, (journal, handle));
    }
    let served = crate::endpoints::serve(
        &host,
        process.listen,
        &crate::debug::DebugConfig::of(process),
        &views,
        &crate::endpoints::Listeners {
            metrics: args.metacontroller.metrics()?,
            probes: args.metacontroller.probes()?,
            pprof: args.metacontroller.pprof()?,
        },
    )
    .await?;
    for subsystem in others {
        if !subsystem.switched_on() {
            subsystem.switched_off();
            continue;
        }
        let (name, journal) = (subsystem.name(), subsystem.journal().name);
        let outcome = subsystem.start(&host).await;
        match &outcome {
            Ok(handle) => views.update(|v| {
                handle.register(v);
                v.show(name, Some(handle.view()));
            }),
            Err(e) => tracing::error!("the {name} did not start: {e:#}"),
        }
        views.started(
            name,
            outcome.as_ref().map(|_| ()).map_err(|e| format!("{e:#}")),
        );
        if let Ok(handle) = outcome {
            started.insert(0, (journal, handle));
        }
    }
    Ok(Running {
        served,
        subsystems: started,
        _host: host,
    })
}

/// In-cluster (or kubeconfig) run: one replica, or with leader election one of several.
async fn run_cluster(args: RunArgs, shared: RunShared) -> anyhow::Result<()> {
    let (process, cfg) = configs(
        &args,
        (
            &ProcessConfig::in_cluster(),
            &crate::addon::OperatorConfig::in_cluster(),
        ),
    )?;
    let shared = shared.with_metrics(&process);
    args.metacontroller.check()?;
    // Bad lambda, deployer or HA settings stop the start before anything runs, and so
    // does a temp folder another user could write in.
    args.lambda.config(&process.journal_dir)?;
    args.deployer.config(&process, &cfg, false)?;
    private_tmp_dir(&process.tmp_dir)?;
    // Without ADDON_OPERATOR_NAMESPACE the Lease and the identity are in the client's
    // namespace (in a pod: its service account's), as the modules' ConfigMap is; "default"
    // would ask for rights bosun's Role does not give there.
    let namespace = if process.namespace.is_empty() {
        bosun_kube::in_cluster::client_config(
            process.kubeconfig.as_deref(),
            process.kube_context.as_deref(),
        )
        .await?
        .0
        .default_namespace
    } else {
        process.namespace.clone()
    };
    let grace = args.ha.shutdown_grace;
    let Some(ha) = args.ha.config(&namespace, process.listen)? else {
        let running = start_all(&args, &process, &cfg, None, &shared).await?;
        bosun_platform::shutdown_signal().await;
        tracing::info!("shutting down");
        crate::ha::graceful_stop(grace, &shared.gate, &running.journals()).await;
        return Ok(());
    };
    // The lease's own client: renewals never wait behind the subsystems' requests.
    let client = bosun_kube::measured_client(
        crate::host::kube_config(
            process.kubeconfig.as_deref(),
            process.kube_context.as_deref(),
        )
        .await?
        .0,
        "leaderElection",
        bosun_kube::ClientLimits::UNLIMITED,
    )
    .map_err(|e| anyhow::anyhow!("cannot build a Kubernetes client: {e}"))?;
    let journals = subsystems(&args, &process, &cfg)
        .iter()
        .filter(|s| s.switched_on())
        .map(|s| s.journal())
        .collect();
    let ending = crate::ha::run(
        ha,
        client,
        process.listen,
        journals,
        grace,
        shared.gate.clone(),
        |stream| async {
            let running = start_all(&args, &process, &cfg, Some(stream), &shared).await?;
            Ok(crate::ha::Started {
                journals: running.journals(),
                keep: Box::new(running),
            })
        },
    )
    .await?;
    tracing::info!(?ending, "shutting down");
    Ok(())
}

fn run(args: RunArgs, log_level: Option<crate::logging::LogLevel>) -> anyhow::Result<()> {
    // The run's runtime parameters, reached through the host; the log level's first.
    let shared = RunShared::default();
    if let Some(level) = &log_level {
        shared.config.register(level.param());
    }
    let rt = runtime()?;
    let result = rt.block_on(run_inner(args, shared));
    // Whatever still runs (a hook past the grace period, a fenced leader's work) is dropped
    // now: hook processes are killed with their process groups.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

async fn run_inner(args: RunArgs, shared: RunShared) -> anyhow::Result<()> {
    let _trimmer = crate::memory::spawn_trimmer();
    {
        if !args.sandbox {
            return run_cluster(args, shared).await;
        }
        // The embedded default: the sandbox API server in-process, the sample hooks and
        // modules from `examples/`, state under the data folder.
        let sandbox = crate::sandbox_cli::Embedded::start(
            &args.data,
            args.sandbox_listen,
            args.allow_unauthenticated,
        )
        .await?;
        let kubeconfig = sandbox.kubeconfig.clone();
        let operator_defaults = crate::addon::OperatorConfig {
            global_hooks_dir: PathBuf::from("examples/global-hooks"),
            modules_dirs: vec![PathBuf::from("examples/modules")],
            ..crate::addon::OperatorConfig::in_cluster()
        };
        let defaults = ProcessConfig {
            namespace: "default".into(),
            tmp_dir: args.data.join("tmp"),
            journal_dir: args.data.join("journal"),
            debug_socket: args.data.join("debug.socket"),
            kubeconfig: Some(kubeconfig),
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 9650)),
            // The debug endpoints and the web view on loopback too (DEBUG_HTTP_SERVER_ADDR).
            debug_http: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 9652))),
            ..ProcessConfig::in_cluster()
        };
        let (process, cfg) = configs(&args, (&defaults, &operator_defaults))?;
        let shared = shared.with_metrics(&process);
        private_tmp_dir(&process.tmp_dir)?;
        let running = start_all(&args, &process, &cfg, None, &shared).await;
        let mut examples = None;
        match &running {
            Err(e) => tracing::error!("bosun did not start: {e:#}"),
            Ok(r) => {
                let kubeconfig = process.kubeconfig.clone().unwrap_or_default();
                let lambda = args.lambda.lambda_controllers;
                let deployer = args.deployer.deployer;
                match crate::examples::apply(
                    r.client(),
                    &crate::examples::Applied {
                        root: std::path::Path::new("examples"),
                        kubeconfig: &kubeconfig,
                        lambda,
                        deployer,
                    },
                )
                .await
                {
                    Ok(e) => examples = Some(e),
                    Err(e) => {
                        tracing::error!("the lambda and deployer examples were not applied: {e:#}")
                    }
                }
                let kc = kubeconfig.display();
                // The binary as it was started: the commands work as printed.
                let bosun = std::env::current_exe()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| "bosun".into());
                println!(
                    "bosun is running; journal in {}",
                    process.journal_dir.display()
                );
                if let Some(url) = r.served.debug.ui_url() {
                    println!("web view: {url}");
                }
                println!("look around:");
                if process.modules {
                    println!("  modules:  kubectl --kubeconfig {kc} get cm,deploy,secrets -A");
                    println!(
                        "            {bosun} journal log --journal-dir {}",
                        process.journal_dir.display()
                    );
                    println!(
                        "            {bosun} queue list --debug-unix-socket {}",
                        process.debug_socket.display()
                    );
                }
                if lambda {
                    println!(
                        "  lambda:   kubectl --kubeconfig {kc} get hellos,configmaps -n default"
                    );
                    println!("            kubectl --kubeconfig {kc} get hello world -o yaml");
                    println!(
                        "            {bosun} journal --journal-dir {} lambda --parent default/world",
                        process.journal_dir.display()
                    );
                }
                if deployer {
                    println!("  deployer: kubectl --kubeconfig {kc} get deployitems,targets -A");
                    println!(
                        "            {bosun} journal --journal-dir {} deployer --item default/helm-chart",
                        process.journal_dir.display()
                    );
                }
                println!(
                    "  actors:   {bosun} actors --debug-unix-socket {}",
                    process.debug_socket.display()
                );
            }
        }
        bosun_platform::shutdown_signal().await;
        tracing::info!("shutting down");
        if let Ok(r) = &running {
            crate::ha::graceful_stop(args.ha.shutdown_grace, &shared.gate, &r.journals()).await;
        }
        drop(examples);
        // The subsystems and their watches stop before the API server they talk to.
        if let Ok(r) = running {
            r.stop();
        }
        sandbox.shutdown().await?;
        Ok(())
    }
}

/// Prepares `ADDON_OPERATOR_TMP_DIR`, where hooks' files, rendered charts, Helm values and
/// the deployer's kubeconfigs go: refuses one another user could write in (it could change
/// what bosun installs), creates a missing one `0700`, and makes one an older bosun left
/// readable private (see [`crate::private_dir`]).
fn private_tmp_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    let changed = crate::private_dir::prepare(dir).map_err(|e| {
        anyhow::anyhow!(
            "ADDON_OPERATOR_TMP_DIR {}: not starting: {e}; or set ADDON_OPERATOR_TMP_DIR to \
             another folder",
            dir.display()
        )
    })?;
    bosun_platform::log_tightened("temp folder", dir, &changed);
    Ok(())
}
