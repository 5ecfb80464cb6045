//! `bosun journal deployer`: the deployer's journal as text or JSON lines; with `--item`,
//! why that item is (not) `Succeeded`: its phase now, its last error with codes, then
//! its history.

use std::io::Write;

use anyhow::Context as _;
use bosun_deployer::events::DeployerEvent;
use bosun_journal::Journal;

/// Accepts `deployitem/ns/name`, `ns/name` or `name` (namespace `default`).
pub(crate) fn normalize(item: &str) -> String {
    let rest = item.strip_prefix("deployitem/").unwrap_or(item);
    if rest.contains('/') {
        format!("deployitem/{rest}")
    } else {
        format!("deployitem/default/{rest}")
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
        if item.as_deref().is_some_and(|i| r.event.item() != i) {
            continue;
        }
        records.push(r);
    }
    if json {
        for r in &records {
            let mut v = serde_json::to_value(&r.event)?;
            v["seq"] = serde_json::json!(r.seq);
            v["time"] = serde_json::json!(r.time_text());
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
                    writeln!(out, "  last error: {}", e.event.line())?;
                }
            }
        }
    }
    for r in &records {
        writeln!(out, "#{} {} {}", r.seq, r.time_text(), r.event.line())?;
    }
    Ok(())
}
