//! `bosun explain`: the command line of [`crate::debug::explain`], offline from the
//! journal folder or live through a running bosun's debug socket (`/explain`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::Value;

use crate::debug::explain::{Explanation, Step, Subject};
use crate::journal_cli::{Format, LiveArgs};
use crate::journal_kinds::JournalKind;

/// Arguments of `bosun explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// `KIND/NAME` (`ConfigMap/web`, `DeployItem/app`, `Module/echo`), `KIND NAME`, or
    /// `values PATH` (`values global.foo`, `values echo.replicas`).
    #[arg(required = true, num_args = 1..=2)]
    pub what: Vec<String>,
    /// The object's namespace (any namespace when left out).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "text")]
    pub output: Format,
    /// The journal directory (its `lambda` and `deployer` folders are read too).
    #[arg(
        long,
        env = "BOSUN_JOURNAL_DIR",
        default_value = "/var/lib/bosun/journal"
    )]
    pub journal_dir: PathBuf,
    #[command(flatten)]
    pub live: LiveArgs,
}

/// Runs `bosun explain` over the registered subsystems' journals `kinds`.
pub fn run(args: ExplainArgs, kinds: &[&'static dyn JournalKind]) -> anyhow::Result<()> {
    let subject = Subject::parse(&args.what, args.namespace.as_deref())
        .map_err(|e| anyhow::anyhow!("bosun explain: {e}"))?;
    let explanation = match args.live.socket() {
        Some(socket) => {
            let mut path = format!(
                "/explain.json?subject={}",
                crate::debug::client::encode(&args.what.join(" "))
            );
            if let Some(ns) = &args.namespace {
                path.push_str(&format!("&namespace={}", crate::debug::client::encode(ns)));
            }
            let body = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?
                .block_on(crate::debug::client::get(&socket, &path))?;
            serde_json::from_str::<Value>(&body)
                .with_context(|| format!("{path}: the debug socket did not answer JSON"))?
        }
        None => serde_json::to_value(offline(&subject, &args.journal_dir, kinds)?)?,
    };
    let mut out = std::io::stdout().lock();
    match args.output {
        Format::Text => {
            let e: Explanation = from_value(&explanation, kinds)?;
            write!(out, "{}", e.text())?;
        }
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&explanation)?)?,
        Format::Yaml => write!(
            out,
            "{}",
            serde_saphyr::to_string(&explanation).context("cannot render YAML")?
        )?,
    }
    Ok(())
}

/// Explains from the journals `kinds` under `dir` (each read from a private copy while
/// bosun holds it), in the order the subsystems are registered. A journal that is not
/// there is left out; none there at all is an error.
fn offline(
    subject: &Subject,
    dir: &std::path::Path,
    kinds: &[&'static dyn JournalKind],
) -> anyhow::Result<Explanation> {
    let mut e = Explanation::new(subject);
    let mut present = false;
    for journal in kinds {
        present |= journal.present(dir);
        if let Err(err) = journal.explain(dir, subject, &mut e) {
            e.unreadable.push(err);
        }
    }
    if !present && e.unreadable.is_empty() {
        anyhow::bail!(
            "{}: no journal there (expected bosun's journal folder: --journal-dir or BOSUN_JOURNAL_DIR)",
            dir.display()
        );
    }
    Ok(e)
}

/// An explanation as the debug socket answered it (JSON), for the text form.
fn from_value(v: &Value, kinds: &[&'static dyn JournalKind]) -> anyhow::Result<Explanation> {
    let steps = v["history"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| Step {
            journal: s["journal"]
                .as_str()
                .and_then(|name| crate::journal_kinds::named(kinds, name))
                .map_or("?", |j| j.name()),
            seq: s["seq"].as_u64().unwrap_or_default(),
            time: s["time"].as_str().unwrap_or_default().to_string(),
            what: s["what"].as_str().unwrap_or_default().to_string(),
        })
        .collect();
    let strings = |k: &str| -> Vec<String> {
        v[k].as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    anyhow::ensure!(
        v["subject"].is_string(),
        "the debug socket's answer is not an explanation: {v}"
    );
    Ok(Explanation {
        subject: v["subject"].as_str().unwrap_or_default().to_string(),
        made_by: strings("madeBy"),
        history: steps,
        now: strings("now"),
        unreadable: strings("unreadable"),
        drift: v["drift"].as_str().map(str::to_string),
    })
}
