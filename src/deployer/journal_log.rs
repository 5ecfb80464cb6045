//! `bosun journal deployer`: the deployer's journal as text or JSON lines; with `--item`,
//! why that item is (not) `Succeeded`: its phase now, its last error with codes, then
//! its history.

use std::io::Write;

use anyhow::Context as _;
use bosun_deployer::events::DeployerEvent;
use bosun_journal::Journal;

/// A record's time as RFC 3339 with milliseconds, as `bosun journal log` prints it.
fn format_ms(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

pub(crate) fn item_of(e: &DeployerEvent) -> &str {
    match e {
        DeployerEvent::DeployItemPhase { item, .. }
        | DeployerEvent::DeployItemError { item, .. }
        | DeployerEvent::DeployItemFinalized { item } => item,
    }
}

/// Accepts `deployitem/ns/name`, `ns/name` or `name` (namespace `default`).
pub(crate) fn normalize(item: &str) -> String {
    let rest = item.strip_prefix("deployitem/").unwrap_or(item);
    if rest.contains('/') {
        format!("deployitem/{rest}")
    } else {
        format!("deployitem/default/{rest}")
    }
}

pub(crate) fn line(e: &DeployerEvent) -> String {
    match e {
        DeployerEvent::DeployItemPhase {
            item,
            from,
            to,
            generation,
            job_id,
            managed,
        } => {
            let from = from.map_or("-", |p| p.as_str());
            let job = job_id
                .as_deref()
                .map(|j| format!(", job {j}"))
                .unwrap_or_default();
            let managed = match managed.as_deref() {
                None => String::new(),
                Some([]) => "; manages nothing now".into(),
                Some(list) => format!("; manages {}", list.join(", ")),
            };
            format!("{item}: {from} → {to} (generation {generation}{job}){managed}")
        }
        DeployerEvent::DeployItemError {
            item,
            operation,
            reason,
            message,
            codes,
            retry_in_ms,
        } => {
            let codes: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
            let codes = if codes.is_empty() {
                String::new()
            } else {
                format!(" [{}]", codes.join(", "))
            };
            let retry = retry_in_ms.map_or(String::new(), |ms| format!(" (retry in {ms} ms)"));
            format!("{item}: error in {operation}: {reason}: {message}{codes}{retry}")
        }
        DeployerEvent::DeployItemFinalized { item } => {
            format!("{item}: cleaned up, finalizer removed")
        }
    }
}

/// Prints the deployer journal under `dir`.
pub fn print(
    dir: &std::path::Path,
    item: Option<&str>,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let journal = Journal::<DeployerEvent>::open_read_only(dir)
        .with_context(|| format!("cannot open the deployer journal {}", dir.display()))?;
    let item = item.map(normalize);
    let mut records = Vec::new();
    for r in journal.read_from(1) {
        let r = r?;
        if item.as_deref().is_some_and(|i| item_of(&r.event) != i) {
            continue;
        }
        records.push(r);
    }
    if json {
        for r in &records {
            let mut v = serde_json::to_value(&r.event)?;
            v["seq"] = serde_json::json!(r.seq);
            v["time"] = serde_json::json!(format_ms(r.time_ms));
            writeln!(out, "{v}")?;
        }
        return Ok(());
    }
    if let Some(i) = &item {
        let phase = records.iter().rev().find_map(|r| match &r.event {
            DeployerEvent::DeployItemPhase { to, .. } => Some(*to),
            _ => None,
        });
        let error = records
            .iter()
            .rev()
            .find(|r| matches!(r.event, DeployerEvent::DeployItemError { .. }));
        let finalized = records
            .iter()
            .any(|r| matches!(r.event, DeployerEvent::DeployItemFinalized { .. }));
        match (phase, finalized) {
            (_, true) => writeln!(out, "{i}: deleted (cleaned up, finalizer removed)")?,
            (None, _) => writeln!(
                out,
                "{i}: nothing journaled (never picked up: another type or target?)"
            )?,
            (Some(bosun_deployer::item::Phase::Succeeded), _) => writeln!(out, "{i}: Succeeded")?,
            (Some(p), _) => {
                writeln!(out, "{i}: NOT Succeeded: phase {p}")?;
                if let Some(e) = error {
                    writeln!(out, "  last error: {}", line(&e.event))?;
                }
            }
        }
    }
    for r in &records {
        writeln!(
            out,
            "#{} {} {}",
            r.seq,
            format_ms(r.time_ms),
            line(&r.event)
        )?;
    }
    Ok(())
}
