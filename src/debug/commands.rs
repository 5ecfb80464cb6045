//! The debug commands: `bosun queue|global|module|actors|graph|raw`, addon-operator's debug
//! CLI plus bosun's actor view, reading a running bosun's debug socket.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

/// The socket flag shared by the debug commands.
#[derive(Debug, Args)]
pub struct SocketArg {
    /// The debug socket of the running bosun [default: $ADDON_OPERATOR_DEBUG_UNIX_SOCKET,
    /// else /var/run/addon-operator/debug.socket].
    #[arg(long = "debug-unix-socket", env = "DEBUG_UNIX_SOCKET", global = true)]
    pub debug_unix_socket: Option<PathBuf>,
}

impl SocketArg {
    fn path(&self) -> PathBuf {
        self.debug_unix_socket
            .clone()
            .unwrap_or_else(|| super::socket_from_env(std::path::Path::new(super::DEFAULT_SOCKET)))
    }
}

/// Output formats of the debug commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Readable text (data without a text form comes as JSON).
    Text,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

impl Output {
    fn ext(self) -> &'static str {
        match self {
            Output::Text => "text",
            Output::Json => "json",
            Output::Yaml => "yaml",
        }
    }
}

/// `bosun queue`.
#[derive(Debug, Args)]
pub struct QueueArgs {
    #[command(flatten)]
    socket: SocketArg,
    #[command(subcommand)]
    command: QueueCommand,
}

/// `bosun queue` subcommands.
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Dump tasks in all queues.
    List {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
        /// Show empty queues.
        #[arg(short = 'e', long)]
        show_empty: bool,
        /// Keep watching: print again every second.
        #[arg(short, long)]
        watch: bool,
    },
    /// Dump tasks in the main queue.
    Main {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
    },
}

/// `bosun global`.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    #[command(flatten)]
    socket: SocketArg,
    #[command(subcommand)]
    command: GlobalCommand,
}

/// `bosun global` subcommands.
#[derive(Debug, Subcommand)]
pub enum GlobalCommand {
    /// List global hooks.
    List {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Output,
    },
    /// Dump current global values.
    Values {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Output,
    },
    /// Dump global config values.
    Config {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Output,
    },
    /// Dump the global memory values patches.
    Patches {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "json")]
        output: Output,
    },
    /// Dump the snapshots of the global hooks' kubernetes bindings.
    Snapshots {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Output,
    },
}

/// `bosun module`.
#[derive(Debug, Args)]
pub struct ModuleArgs {
    #[command(flatten)]
    socket: SocketArg,
    #[command(subcommand)]
    command: ModuleCommand,
}

/// `bosun module` subcommands.
#[derive(Debug, Subcommand)]
pub enum ModuleCommand {
    /// List enabled modules.
    List {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Output,
    },
    /// Dump module values by name.
    Values {
        /// The module.
        name: String,
        /// Include the global values.
        #[arg(short, long)]
        global: bool,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Output,
    },
    /// Dump module config values by name.
    Config {
        /// The module.
        name: String,
        /// Include the global config values.
        #[arg(short, long)]
        global: bool,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Output,
    },
    /// The objects each enabled module's resource monitor checks.
    ResourceMonitor {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Output,
    },
    /// Render a module's chart with its current values (nothing is installed).
    Render {
        /// The module.
        name: String,
        /// Print the module's objects that drifted from the chart instead: a unified diff of
        /// each object as it is live against what applying the chart would make of it (a
        /// server-side dry run), or "No diff found".
        #[arg(long)]
        diff: bool,
        /// Accepted for addon-operator compatibility (bosun renders the same either way).
        #[arg(long)]
        debug: bool,
        /// Output format (text: multi-document YAML, or the diff).
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Dump a module's memory values patches.
    Patches {
        /// The module.
        name: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "json")]
        output: Output,
    },
    /// Dump the snapshots of a module's kubernetes bindings.
    Snapshots {
        /// The module.
        name: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Output,
    },
}

/// `bosun actors`.
#[derive(Debug, Args)]
pub struct ActorsArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// One actor (`global-hooks`, `queue/main`, `module/<name>`); all when absent.
    name: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "text")]
    output: Output,
}

/// `bosun config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(flatten)]
    socket: SocketArg,
    #[command(subcommand)]
    command: ConfigCommand,
}

/// `bosun config` subcommands: runtime parameters such as `log.level`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// List runtime parameters with their values.
    List {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Set a runtime parameter, for DURATION (e.g. 30s, 15m, 1h) when given.
    Set {
        /// The parameter, e.g. `log.level`.
        name: String,
        /// Its new value.
        value: String,
        /// How long the value lasts; then the previous one comes back.
        duration: Option<String>,
    },
}

/// Formats of `bosun graph`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GraphFormat {
    /// The DOT description.
    Text,
    /// A PNG drawn by graphviz (`dot`) on the machine bosun runs on.
    Png,
}

/// `bosun graph`.
#[derive(Debug, Args)]
pub struct GraphArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// What to print: the DOT text, or the PNG graphviz draws from it.
    #[arg(long, value_enum, default_value = "text")]
    format: GraphFormat,
    /// Write to this file instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// `bosun raw`.
#[derive(Debug, Args)]
pub struct RawArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// The path to request, e.g. `/queue/list.json`.
    path: String,
}

fn print(body: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(body.as_bytes())?;
    if !body.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

fn run_get(socket: &SocketArg, path: &str) -> anyhow::Result<()> {
    let body = runtime()?.block_on(super::client::get(&socket.path(), path))?;
    print(&body)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))
}

/// Runs `bosun queue …`.
pub fn queue(args: QueueArgs) -> anyhow::Result<()> {
    match args.command {
        QueueCommand::List {
            output,
            show_empty,
            watch,
        } => {
            let path = format!("/queue/list.{}?showEmpty={show_empty}", output.ext());
            if !watch {
                return run_get(&args.socket, &path);
            }
            let socket = args.socket.path();
            let rt = runtime()?;
            let terminal = std::io::stdout().is_terminal();
            loop {
                let body = rt.block_on(super::client::get(&socket, &path))?;
                let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
                if terminal {
                    print(&format!("\x1b[2J\x1b[H{now}\n\n{body}"))?;
                } else {
                    print(&format!("--- {now}\n{body}"))?;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        QueueCommand::Main { output } => {
            run_get(&args.socket, &format!("/queue/main.{}", output.ext()))
        }
    }
}

/// Runs `bosun global …`.
pub fn global(args: GlobalArgs) -> anyhow::Result<()> {
    let (what, output) = match args.command {
        GlobalCommand::List { output } => ("list", output),
        GlobalCommand::Values { output } => ("values", output),
        GlobalCommand::Config { output } => ("config", output),
        GlobalCommand::Snapshots { output } => ("snapshots", output),
        GlobalCommand::Patches { output } => ("patches", output),
    };
    run_get(&args.socket, &format!("/global/{what}.{}", output.ext()))
}

fn module_path(name: &str) -> anyhow::Result<&str> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        anyhow::bail!("{name:?} is not a module name");
    }
    Ok(name)
}

/// Runs `bosun module …`.
pub fn module(args: ModuleArgs) -> anyhow::Result<()> {
    let path = match args.command {
        ModuleCommand::List { output } => format!("/module/list.{}", output.ext()),
        ModuleCommand::Values {
            name,
            global,
            output,
        } => format!(
            "/module/{}/values.{}?global={global}",
            module_path(&name)?,
            output.ext()
        ),
        ModuleCommand::Config {
            name,
            global,
            output,
        } => format!(
            "/module/{}/config.{}?global={global}",
            module_path(&name)?,
            output.ext()
        ),
        ModuleCommand::ResourceMonitor { output } => {
            format!("/module/resource-monitor.{}", output.ext())
        }
        ModuleCommand::Render {
            name,
            diff,
            debug,
            output,
        } => format!(
            "/module/{}/render.{}?diff={diff}&debug={debug}",
            module_path(&name)?,
            output.ext()
        ),
        ModuleCommand::Patches { name, output } => {
            format!("/module/{}/patches.{}", module_path(&name)?, output.ext())
        }
        ModuleCommand::Snapshots { name, output } => {
            format!("/module/{}/snapshots.{}", module_path(&name)?, output.ext())
        }
    };
    run_get(&args.socket, &path)
}

/// Runs `bosun actors [NAME]`.
pub fn actors(args: ActorsArgs) -> anyhow::Result<()> {
    let path = match &args.name {
        Some(name) => {
            if name
                .chars()
                .any(|c| c.is_whitespace() || c == '?' || c == '#')
            {
                anyhow::bail!("{name:?} is not an actor name");
            }
            format!("/actors/{}.{}", name.trim_matches('/'), args.output.ext())
        }
        None => format!("/actors.{}", args.output.ext()),
    };
    run_get(&args.socket, &path)
}

/// Runs `bosun config list|set`.
pub fn config(args: ConfigArgs) -> anyhow::Result<()> {
    match args.command {
        ConfigCommand::List { output } => {
            run_get(&args.socket, &format!("/config/list.{}", output.ext()))
        }
        ConfigCommand::Set {
            name,
            value,
            duration,
        } => {
            let duration = duration.unwrap_or_default();
            if !duration.is_empty() {
                crate::runtime_config::parse_duration(&duration)
                    .map_err(|e| anyhow::anyhow!("invalid duration: {e}"))?;
            }
            let form = [
                ("name", name.as_str()),
                ("value", value.as_str()),
                ("duration", duration.as_str()),
            ];
            let body = runtime()?.block_on(super::client::post_form(
                &args.socket.path(),
                "/config/set",
                &form,
            ))?;
            if !body.trim().is_empty() {
                print(&body)?;
            }
            Ok(())
        }
    }
}

/// Runs `bosun graph`: the module graph of `/graph`, as DOT text or PNG.
pub fn graph(args: GraphArgs) -> anyhow::Result<()> {
    let format = match args.format {
        GraphFormat::Text => "text",
        GraphFormat::Png => "png",
    };
    if args.format == GraphFormat::Png && args.output.is_none() && std::io::stdout().is_terminal() {
        anyhow::bail!("not writing a PNG to the terminal: add -o FILE (or redirect the output)");
    }
    let path = format!("/graph?format={format}");
    let body = runtime()?.block_on(super::client::get_bytes(&args.socket.path(), &path))?;
    match &args.output {
        Some(file) => std::fs::write(file, &body)
            .map_err(|e| anyhow::anyhow!("cannot write the graph to {}: {e}", file.display())),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&body)?;
            out.flush()?;
            Ok(())
        }
    }
}

/// Runs `bosun raw PATH`.
pub fn raw(args: RawArgs) -> anyhow::Result<()> {
    if args.path.chars().any(|c| c.is_whitespace()) {
        anyhow::bail!("{:?}: a path has no spaces (encode them as %20)", args.path);
    }
    let path = if args.path.starts_with('/') {
        args.path.clone()
    } else {
        format!("/{}", args.path)
    };
    run_get(&args.socket, &path)
}
