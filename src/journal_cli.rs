//! `bosun journal …`: inspect a journal offline (works while a bosun holds it, by reading a
//! private copy) or, with `--live`, through a running bosun's debug socket: the timeline,
//! the state at any point, differences, one task's history, figures, verification and
//! repair.
//!
//! The views (`log`, `state`, `why`, `stats`) are computed by
//! [`crate::debug::journal_views`], for this command and for the debug server's
//! `/journal/…` endpoints alike.
//!
//! ```text
//!   bosun journal log            ──► Journal::open_read_only(dir) ──► log_view ──► stdout
//!   bosun journal log --live     ──► GET /journal/log.text ──► debug server ──► log_view
//! ```

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use bosun_addon::{Event, TaskId};
use bosun_journal::Journal;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;

use crate::debug::client::encode;
use crate::debug::journal_views::{
    LogQuery, ViewError, describe_op, log_view, state_view, stats_view, why_view,
};
use crate::debug::views::View;
use crate::journal_kinds::JournalKind;

/// Arguments of `bosun journal`.
#[derive(Debug, Args)]
pub struct JournalArgs {
    /// The journal directory.
    #[arg(
        long,
        global = true,
        env = "BOSUN_JOURNAL_DIR",
        default_value = "/var/lib/bosun/journal"
    )]
    pub journal_dir: PathBuf,
    #[command(subcommand)]
    pub command: JournalCommand,
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One readable line per item.
    Text,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// One of bosun's journals, or all of them.
#[derive(Clone, Copy)]
enum Which {
    /// That one.
    One(&'static dyn JournalKind),
    /// Every journal there.
    All,
}

/// `--journal`'s value: one of `kinds` by its name, or `all`.
fn which(name: &str, kinds: &[&'static dyn JournalKind]) -> anyhow::Result<Which> {
    if name == "all" {
        return Ok(Which::All);
    }
    crate::journal_kinds::named(kinds, name)
        .map(Which::One)
        .ok_or_else(|| {
            let names: Vec<&str> = kinds.iter().map(|j| j.name()).collect();
            anyhow::anyhow!(
                "--journal {name}: no such journal; one of {}, or all",
                names.join(", ")
            )
        })
}

/// Where a view is read: the journal directory (the default) or a running bosun.
#[derive(Debug, Default, Args)]
pub struct LiveArgs {
    /// Read the journal of the running bosun through its debug socket instead of the
    /// directory.
    #[arg(long)]
    pub live: bool,
    /// The debug socket to read through (implies `--live`) [default:
    /// $ADDON_OPERATOR_DEBUG_UNIX_SOCKET, $DEBUG_UNIX_SOCKET, else
    /// /var/run/addon-operator/debug.socket].
    #[arg(long = "debug-unix-socket", value_name = "PATH")]
    pub debug_unix_socket: Option<PathBuf>,
}

impl LiveArgs {
    /// The socket to read through, when live.
    pub(crate) fn socket(&self) -> Option<PathBuf> {
        if let Some(path) = &self.debug_unix_socket {
            return Some(path.clone());
        }
        self.live.then(|| {
            crate::debug::socket_from_env(std::path::Path::new(crate::debug::DEFAULT_SOCKET))
        })
    }
}

/// `bosun journal` subcommands.
#[derive(Debug, Subcommand)]
pub enum JournalCommand {
    /// The timeline, one line per event (oldest first).
    Log {
        /// From this sequence number, RFC 3339 time, or age (`10m` = ten minutes ago).
        #[arg(long)]
        since: Option<String>,
        /// Up to this sequence number, time or age.
        #[arg(long)]
        until: Option<String>,
        /// Only events of this module.
        #[arg(long)]
        module: Option<String>,
        /// Only events of tasks in this queue.
        #[arg(long)]
        queue: Option<String>,
        /// Only the last N matching events (all when absent or 0).
        #[arg(long)]
        limit: Option<usize>,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Format,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// The state rebuilt at a point: values per scope, modules, queues.
    State {
        /// Sequence number, time or age (default: the end).
        #[arg(long)]
        at: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Format,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// What changed in the state between two points.
    Diff {
        /// First point (sequence number, time or age).
        a: String,
        /// Second point.
        b: String,
        /// Which journal: a subsystem's name (the modules' by default).
        #[arg(long, default_value = "modules")]
        journal: String,
    },
    /// The state at a point of every journal (or one): the modules' values, modules and
    /// queues; each lambda controller and its parents' last outcomes; each DeployItem's
    /// phase, last error and managed objects.
    Replay {
        /// Up to this sequence number (of the one journal chosen), time or age (default:
        /// the end).
        #[arg(long)]
        until: Option<String>,
        /// Which journal: a subsystem's name, or `all` (the default).
        #[arg(long, default_value = "all")]
        journal: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Format,
    },
    /// The history of one task: attempts, errors, retry times.
    Why {
        /// Task id, e.g. `t42`.
        task: String,
        /// Output format (`json`: one object per line, as `log`).
        #[arg(short, long, value_enum, default_value = "text")]
        output: Format,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// Counts per event type, size, oldest/newest, snapshots.
    Stats {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Format,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// The lambda controllers' journal: controllers started and stopped, syncs that
    /// changed something or failed. With `--parent`, why that parent is (not) converged.
    Lambda {
        /// Only this controller's events.
        #[arg(long)]
        controller: Option<String>,
        /// Only this parent (`namespace/name`, `name`, or a decorator's
        /// `apiVersion:kind:namespace:name`); prints its last outcome first.
        #[arg(long)]
        parent: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Format,
    },
    /// The deployer's journal: each DeployItem's phases and errors. With `--item`, why
    /// that item is (not) `Succeeded`.
    Deployer {
        /// Only this item (`deployitem/<ns>/<name>`, `<ns>/<name>` or `<name>`).
        #[arg(long)]
        item: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Checks every record's checksum and the numbering.
    Verify,
    /// Drops corrupt records so the journal opens again (stop bosun first).
    Repair,
}

/// Runs `bosun journal …` over the registered subsystems' journals `kinds`.
pub fn run(args: JournalArgs, kinds: &[&'static dyn JournalKind]) -> anyhow::Result<()> {
    let dir = &args.journal_dir;
    let mut out = std::io::stdout().lock();
    match args.command {
        JournalCommand::Lambda {
            controller,
            parent,
            output,
        } => lambda_log(
            &crate::lambda::JOURNAL.dir(dir),
            controller.as_deref(),
            parent.as_deref(),
            output,
            &mut out,
        ),
        JournalCommand::Deployer { item, output } => crate::deployer::journal_log::print(
            &crate::deployer::JOURNAL.dir(dir),
            item.as_deref(),
            output != Format::Text,
            &mut out,
        ),
        JournalCommand::Repair => {
            let dropped = bosun_journal::repair(dir)?;
            if dropped.is_empty() {
                println!("{}: no corrupt records", dir.display());
            } else {
                println!("{}: dropped corrupt records {:?}", dir.display(), dropped);
            }
            Ok(())
        }
        JournalCommand::Log {
            since,
            until,
            module,
            queue,
            limit,
            output,
            live,
        } => {
            let query = LogQuery {
                since,
                until,
                module,
                queue,
                limit: Some(limit.unwrap_or(0)),
            };
            let view = read(dir, &live, &log_endpoint(&query), output, |j| {
                log_view(j, &query)
            })?;
            print_lines(&view, output, &mut out)
        }
        JournalCommand::State { at, output, live } => {
            let endpoint = match &at {
                Some(at) => format!("/journal/state.?at={}", encode(at)),
                None => "/journal/state.".into(),
            };
            let view = read(dir, &live, &endpoint, Format::Json, |j| {
                state_view(j, at.as_deref())
            })?;
            let output = if output == Format::Text {
                Format::Yaml
            } else {
                output
            };
            print_value(&view.data, output, &mut out)
        }
        JournalCommand::Why { task, output, live } => {
            let id = parse_task(&task)?;
            let view = read(dir, &live, &format!("/journal/why/{id}."), output, |j| {
                why_view(j, id)
            })?;
            print_lines(&view, output, &mut out)
        }
        JournalCommand::Stats { output, live } => {
            let view = read(dir, &live, "/journal/stats.", output, stats_view)?;
            match (output, &view.text) {
                (Format::Text, Some(text)) => Ok(write!(out, "{text}")?),
                _ => print_value(&view.data, output, &mut out),
            }
        }
        JournalCommand::Replay {
            until,
            journal,
            output,
        } => {
            let state = replayed(dir, which(&journal, kinds)?, until.as_deref(), kinds)?;
            let output = if output == Format::Text {
                Format::Yaml
            } else {
                output
            };
            print_value(&state, output, &mut out)
        }
        JournalCommand::Diff { a, b, journal } => {
            let journal = which(&journal, kinds)?;
            if matches!(journal, Which::All) {
                bail!("journal diff compares one journal: choose it with --journal");
            }
            let (sa, sb) = (
                replayed(dir, journal, Some(&a), kinds)?,
                replayed(dir, journal, Some(&b), kinds)?,
            );
            let patch = json_patch::diff(&sa, &sb);
            if patch.0.is_empty() {
                writeln!(out, "no differences")?;
            }
            for op in patch.0 {
                writeln!(out, "{}", describe_op(&op))?;
            }
            Ok(())
        }
        JournalCommand::Verify => {
            let report = open(dir)?.verify()?;
            for (a, b) in &report.lost {
                writeln!(
                    out,
                    "lost: records {a}..={b}, declared lost by `bosun journal repair`"
                )?;
            }
            if report.ok() {
                writeln!(
                    out,
                    "{}: {} records, all checksums valid, no gaps",
                    dir.display(),
                    report.checked
                )?;
                Ok(())
            } else {
                for (seq, reason) in &report.corrupt {
                    writeln!(out, "record {seq}: {reason}")?;
                }
                for (a, b) in &report.gaps {
                    writeln!(
                        out,
                        "gap: records {}..{} missing",
                        a + 1,
                        b.saturating_sub(1)
                    )?;
                }
                bail!(
                    "{}: {} corrupt record(s), {} gap(s); `bosun journal repair` drops corrupt records",
                    dir.display(),
                    report.corrupt.len(),
                    report.gaps.len()
                )
            }
        }
    }
}

/// A view, computed on the directory's journal, or (live) asked of the running bosun:
/// `endpoint` is its path with the extension left out after the dot (`/journal/stats.`,
/// `/journal/log.?limit=0`); text comes as the server renders it, the rest as JSON.
fn read(
    dir: &std::path::Path,
    live: &LiveArgs,
    endpoint: &str,
    output: Format,
    offline: impl FnOnce(&Journal<Event>) -> Result<View, ViewError>,
) -> anyhow::Result<View> {
    let Some(socket) = live.socket() else {
        return Ok(offline(&open(dir)?)?);
    };
    let ext = if output == Format::Text {
        "text"
    } else {
        "json"
    };
    let path = match endpoint.split_once('?') {
        Some((route, query)) => format!("{route}{ext}?{query}"),
        None => format!("{endpoint}{ext}"),
    };
    let body = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(crate::debug::client::get(&socket, &path))?;
    if output == Format::Text {
        return Ok(View {
            data: Value::Null,
            text: Some(body),
        });
    }
    let data: Value = serde_json::from_str(&body)
        .with_context(|| format!("{path}: the debug socket did not answer JSON"))?;
    Ok(View::data(data))
}

/// The state of `which` journal under `dir` at `until` (the end when `None`), as JSON:
/// one journal's state, or an object of the states of those present by their names.
fn replayed(
    dir: &std::path::Path,
    which: Which,
    until: Option<&str>,
    kinds: &[&'static dyn JournalKind],
) -> anyhow::Result<Value> {
    match which {
        Which::One(journal) => journal.replay(dir, until),
        Which::All => {
            if let Some(u) = until
                && u.parse::<u64>().is_ok()
            {
                bail!(
                    "--until {u}: a sequence number belongs to one journal; choose it with --journal, or give a time or an age"
                );
            }
            let mut all = serde_json::Map::new();
            for journal in kinds.iter().filter(|j| j.present(dir)) {
                all.insert(journal.name().into(), journal.replay(dir, until)?);
            }
            if all.is_empty() {
                bail!("{}: no journal there", dir.display());
            }
            Ok(Value::Object(all))
        }
    }
}

fn open(dir: &std::path::Path) -> anyhow::Result<Journal<Event>> {
    Journal::open_read_only(dir).with_context(|| format!("cannot open journal {}", dir.display()))
}

fn parse_task(s: &str) -> Result<TaskId, ViewError> {
    s.parse()
        .map_err(|e: bosun_runtime::task::InvalidTaskId| ViewError::BadRequest(e.to_string()))
}

/// The endpoint of a `log` query (extension left out, as [`read`] takes it).
fn log_endpoint(query: &LogQuery) -> String {
    let mut params = vec![format!("limit={}", query.limit.unwrap_or(0))];
    for (name, value) in [
        ("since", &query.since),
        ("until", &query.until),
        ("module", &query.module),
        ("queue", &query.queue),
    ] {
        if let Some(v) = value {
            params.push(format!("{name}={}", encode(v)));
        }
    }
    format!("/journal/log.?{}", params.join("&"))
}

/// Prints a list view: its text, or one JSON object per line.
/// `bosun journal lambda`.
fn lambda_log(
    dir: &std::path::Path,
    controller: Option<&str>,
    parent: Option<&str>,
    output: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    use bosun_lambda::events::LambdaEvent;
    let journal = Journal::<LambdaEvent>::open_read_only(dir)
        .with_context(|| format!("cannot open the lambda journal {}", dir.display()))?;
    let mut records = Vec::new();
    for r in journal.read_from(1) {
        let r = r?;
        let of_controller = match &r.event {
            LambdaEvent::ControllerStarted { name, .. }
            | LambdaEvent::ControllerStopped { name, .. }
            | LambdaEvent::ControllerRefused { name, .. } => Some(name.as_str()),
            LambdaEvent::Synced { controller, .. } | LambdaEvent::SyncFailed { controller, .. } => {
                Some(controller.as_str())
            }
        };
        if controller.is_some_and(|c| of_controller != Some(c)) {
            continue;
        }
        if parent.is_some_and(|p| r.event.key() != Some(p)) {
            continue;
        }
        records.push(r);
    }
    if output != Format::Text {
        for r in &records {
            let mut v = serde_json::to_value(&r.event)?;
            v["seq"] = serde_json::json!(r.seq);
            v["time"] = serde_json::json!(r.time_text());
            writeln!(out, "{v}")?;
        }
        return Ok(());
    }
    if let Some(p) = parent {
        match records.last().map(|r| &r.event) {
            None => writeln!(
                out,
                "{p}: nothing journaled (never failed, never changed anything)"
            )?,
            Some(LambdaEvent::SyncFailed {
                error,
                retry_in_ms,
                failures,
                ..
            }) => {
                let count = match failures {
                    0 => String::new(),
                    1 => "1 failure; ".to_string(),
                    n => format!("{n} failures in a row; "),
                };
                writeln!(
                    out,
                    "{p}: NOT converged: the last sync failed: {error} ({count}the next retry {retry_in_ms} ms after it)"
                )?
            }
            Some(LambdaEvent::Synced { hook, answer, .. }) => writeln!(
                out,
                "{p}: converged: the last {hook} hook answer ({answer}) was applied"
            )?,
            Some(_) => {}
        }
    }
    for r in &records {
        let time = r.time_text();
        writeln!(out, "#{} {time} {}", r.seq, r.event.line())?;
    }
    Ok(())
}

fn print_lines(view: &View, output: Format, out: &mut impl Write) -> anyhow::Result<()> {
    if output == Format::Text {
        write!(out, "{}", view.text.as_deref().unwrap_or_default())?;
        return Ok(());
    }
    for e in view.data.as_array().into_iter().flatten() {
        writeln!(out, "{e}")?;
    }
    Ok(())
}

fn print_value(v: &Value, output: Format, out: &mut impl Write) -> anyhow::Result<()> {
    match output {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(v)?)?,
        Format::Yaml | Format::Text => write!(
            out,
            "{}",
            serde_saphyr::to_string(v).context("cannot render YAML")?
        )?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_queries_are_encoded() {
        let q = LogQuery {
            since: Some("2026-11-22T10:00:00+01:00".into()),
            module: Some("a b".into()),
            limit: Some(0),
            ..LogQuery::default()
        };
        assert_eq!(
            log_endpoint(&q),
            "/journal/log.?limit=0&since=2026-11-22T10%3A00%3A00%2B01%3A00&module=a%20b"
        );
    }
}
