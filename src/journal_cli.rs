//! `bosun journal …`: inspect a journal offline (works while a bosun holds it, by reading a
//! private copy): the timeline, the state at any point, differences, one task's history,
//! figures, verification and repair.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bosun_actors::{Event, State, TaskId};
use bosun_journal::{Journal, Record};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

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

/// `bosun journal` subcommands.
#[derive(Debug, Subcommand)]
pub enum JournalCommand {
    /// The timeline, one line per event.
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
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Format,
    },
    /// The state rebuilt at a point: values per scope, modules, queues.
    State {
        /// Sequence number, time or age (default: the end).
        #[arg(long)]
        at: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Format,
    },
    /// What changed in the state between two points.
    Diff {
        /// First point (sequence number, time or age).
        a: String,
        /// Second point.
        b: String,
    },
    /// The history of one task: attempts, errors, retry times.
    Why {
        /// Task id, e.g. `t42`.
        task: String,
    },
    /// Counts per event type, size, oldest/newest, snapshots.
    Stats {
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Checks every record's checksum and the numbering.
    Verify,
    /// Drops corrupt records so the journal opens again (stop bosun first).
    Repair,
}

/// Runs `bosun journal …`.
pub fn run(args: JournalArgs) -> anyhow::Result<()> {
    let dir = &args.journal_dir;
    if let JournalCommand::Repair = args.command {
        let dropped = bosun_journal::repair(dir)?;
        if dropped.is_empty() {
            println!("{}: no corrupt records", dir.display());
        } else {
            println!("{}: dropped corrupt records {:?}", dir.display(), dropped);
        }
        return Ok(());
    }
    let journal: Journal<Event> = Journal::open_read_only(dir)
        .with_context(|| format!("cannot open journal {}", dir.display()))?;
    let mut out = std::io::stdout().lock();
    match args.command {
        JournalCommand::Log {
            since,
            until,
            module,
            queue,
            output,
        } => {
            let from = point(&journal, since.as_deref())?;
            let to = point(&journal, until.as_deref())?;
            log(
                &journal,
                from,
                to,
                module.as_deref(),
                queue.as_deref(),
                output,
                &mut out,
            )
        }
        JournalCommand::State { at, output } => {
            let at = point(&journal, at.as_deref())?;
            let state = state_at(&journal, at)?;
            print_value(
                &serde_json::to_value(&state)?,
                if output == Format::Text {
                    Format::Yaml
                } else {
                    output
                },
                &mut out,
            )
        }
        JournalCommand::Diff { a, b } => {
            let (pa, pb) = (point(&journal, Some(&a))?, point(&journal, Some(&b))?);
            let (sa, sb) = (
                serde_json::to_value(state_at(&journal, pa)?)?,
                serde_json::to_value(state_at(&journal, pb)?)?,
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
        JournalCommand::Why { task } => {
            let id: TaskId = task.parse().map_err(|e: String| anyhow::anyhow!(e))?;
            why(&journal, id, &mut out)
        }
        JournalCommand::Stats { output } => stats(&journal, output, &mut out),
        JournalCommand::Verify => {
            let report = journal.verify()?;
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
        JournalCommand::Repair => Ok(()),
    }
}

use std::io::Write;

/// A point in the journal: a sequence number, an RFC 3339 time, or an age.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Point {
    Seq(u64),
    Time(u64),
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn parse_point(s: &str) -> anyhow::Result<Point> {
    if let Ok(seq) = s.parse::<u64>() {
        return Ok(Point::Seq(seq));
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(Point::Time(
            t.duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        ));
    }
    if let Ok(age) = humantime::parse_duration(s) {
        return Ok(Point::Time(now_ms().saturating_sub(age.as_millis() as u64)));
    }
    bail!(
        "{s:?} is not a point in the journal: expected a sequence number (42), a time (2026-11-22T10:00:00Z) or an age (10m)"
    )
}

/// Resolves a point to a sequence number (times: the last record at or before it).
fn point(journal: &Journal<Event>, s: Option<&str>) -> anyhow::Result<Option<u64>> {
    let Some(s) = s else { return Ok(None) };
    Ok(Some(match parse_point(s)? {
        Point::Seq(seq) => seq,
        Point::Time(t) => {
            let mut last = 0;
            for r in journal.raw_from(0) {
                let r = r?;
                if r.time_ms > t {
                    break;
                }
                last = r.seq;
            }
            last
        }
    }))
}

fn state_at(journal: &Journal<Event>, at: Option<u64>) -> anyhow::Result<State> {
    let (state, _) = journal.replay::<State, _>(at, true, |s, r| s.apply(&r.event))?;
    Ok(state)
}

fn time(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// One readable line describing an event.
pub fn summary(e: &Event) -> String {
    match e {
        Event::ValuesPatched {
            scope,
            layer,
            patch,
            source,
        } => {
            let ops: Vec<String> = patch.0.iter().map(describe_op).collect();
            format!(
                "{scope} {layer:?} values patched by {source}: {}",
                ops.join("; ")
            )
        }
        Event::ValuesSet {
            scope,
            layer,
            values,
            source,
        } => format!("{scope} {layer:?} values set by {source}: {values}"),
        Event::TaskEnqueued { task, position } => {
            let at = match position {
                bosun_actors::Position::Head => "at the head".to_string(),
                bosun_actors::Position::Tail => "at the tail".to_string(),
                bosun_actors::Position::After(t) => format!("after {t}"),
                bosun_actors::Position::Before(t) => format!("before {t}"),
            };
            format!(
                "{} {:?}:{}:{} queued {at}",
                task.id, task.task_type, task.queue, task.description
            )
        }
        Event::TaskStarted { id, attempt } => format!("{id} started (attempt {attempt})"),
        Event::TaskSucceeded { id } => format!("{id} succeeded"),
        Event::TaskFailed {
            id,
            error,
            failures,
            next_retry_at_ms,
        } => {
            format!(
                "{id} failed (failures {failures}), retry at {}: {error}",
                time(*next_retry_at_ms)
            )
        }
        Event::TaskMerged { id, into } => format!("{id} merged into {into}"),
        Event::TaskDropped { id, reason } => format!("{id} dropped: {reason}"),
        Event::TaskParked { id, reason } => {
            format!("{id} parked after too many attempts: {reason}")
        }
        Event::ModuleEnabled { module, reason } => format!("module {module} enabled ({reason})"),
        Event::ModuleDisabled { module, reason } => format!("module {module} disabled ({reason})"),
        Event::ModulePhase { module, phase, .. } => format!("module {module} phase {phase}"),
        Event::ReleaseApplied {
            module,
            revision,
            checksum,
        } => format!("release {module} revision {revision} applied (checksum {checksum})"),
        Event::ReleaseDeleted { module } => format!("release {module} deleted"),
        Event::ModuleFlagsSet { flags } => format!(
            "module flags from the ConfigMap: {}",
            flags
                .iter()
                .map(|(m, on)| format!("{m}={on}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Event::ConvergeStarted { reason } => format!("converge started ({reason})"),
        Event::ConvergeFinished => "converge finished".into(),
    }
}

fn describe_op(op: &json_patch::PatchOperation) -> String {
    let v = serde_json::to_value(op).unwrap_or(Value::Null);
    match v["value"] {
        Value::Null if v.get("value").is_none() => format!(
            "{} {}",
            v["op"].as_str().unwrap_or_default(),
            v["path"].as_str().unwrap_or_default()
        ),
        ref value => format!(
            "{} {} = {value}",
            v["op"].as_str().unwrap_or_default(),
            v["path"].as_str().unwrap_or_default()
        ),
    }
}

fn log(
    journal: &Journal<Event>,
    from: Option<u64>,
    to: Option<u64>,
    module: Option<&str>,
    queue: Option<&str>,
    output: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut task_queue: HashMap<TaskId, (String, Option<String>)> = HashMap::new();
    for r in journal.read_from(0) {
        let Record {
            seq,
            time_ms,
            event,
            ..
        } = r?;
        if let Event::TaskEnqueued { task, .. } = &event {
            task_queue.insert(task.id, (task.queue.clone(), task.module.clone()));
        }
        if from.is_some_and(|f| seq < f) {
            continue;
        }
        if to.is_some_and(|t| seq > t) {
            break;
        }
        let info = event.task().and_then(|id| task_queue.get(&id));
        if let Some(m) = module
            && event.module() != Some(m)
            && info.and_then(|(_, tm)| tm.as_deref()) != Some(m)
        {
            continue;
        }
        if let Some(q) = queue
            && info.map(|(tq, _)| tq.as_str()) != Some(q)
        {
            continue;
        }
        match output {
            Format::Text => writeln!(
                out,
                "{seq:>6} {} {:<16} {}",
                time(time_ms),
                event.type_name(),
                summary(&event)
            )?,
            Format::Json | Format::Yaml => writeln!(
                out,
                "{}",
                json!({"seq": seq, "time": time(time_ms), "event": event})
            )?,
        }
    }
    Ok(())
}

fn why(journal: &Journal<Event>, id: TaskId, out: &mut impl Write) -> anyhow::Result<()> {
    let mut found = false;
    for r in journal.read_from(0) {
        let Record {
            seq,
            time_ms,
            event,
            ..
        } = r?;
        let about = event.task() == Some(id)
            || matches!(&event, Event::TaskMerged { into, .. } if *into == id);
        if about {
            found = true;
            writeln!(out, "{seq:>6} {} {}", time(time_ms), summary(&event))?;
        }
    }
    if !found {
        bail!(
            "task {id} does not appear in the journal (its events may have been compacted into a snapshot)"
        );
    }
    Ok(())
}

fn stats(journal: &Journal<Event>, output: Format, out: &mut impl Write) -> anyhow::Result<()> {
    let s = journal.stats()?;
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for r in journal.raw_from(0) {
        let r = r?;
        *counts
            .entry(r.event["type"].as_str().unwrap_or("unknown").to_string())
            .or_default() += 1;
    }
    let value = json!({
        "events": s.events,
        "firstSeq": s.first_seq,
        "lastSeq": s.last_seq,
        "oldest": s.first_time_ms.map(time),
        "newest": s.last_time_ms.map(time),
        "recordBytes": s.record_bytes,
        "diskBytes": s.disk_bytes,
        "snapshots": s.snapshots,
        "byType": counts,
    });
    if output != Format::Text {
        return print_value(&value, output, out);
    }
    writeln!(
        out,
        "events:    {} (seq {} … {})",
        s.events,
        s.first_seq.unwrap_or(0),
        s.last_seq.unwrap_or(0)
    )?;
    writeln!(
        out,
        "oldest:    {}",
        s.first_time_ms.map(time).unwrap_or_else(|| "-".into())
    )?;
    writeln!(
        out,
        "newest:    {}",
        s.last_time_ms.map(time).unwrap_or_else(|| "-".into())
    )?;
    writeln!(
        out,
        "size:      {} bytes of records, {} bytes on disk",
        s.record_bytes, s.disk_bytes
    )?;
    writeln!(out, "snapshots: {:?}", s.snapshots)?;
    for (t, n) in counts {
        writeln!(out, "  {t:<18} {n}")?;
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
    fn points_parse() {
        assert_eq!(parse_point("42").ok(), Some(Point::Seq(42)));
        assert!(matches!(
            parse_point("2026-11-22T10:00:00Z"),
            Ok(Point::Time(_))
        ));
        assert!(matches!(parse_point("10m"), Ok(Point::Time(_))));
        let err = parse_point("yesterday-ish")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("sequence number"), "{err}");
    }
}
