//! `bosun journal …`: offline inspection of a journal directory.

use clap::Args;

/// Arguments of `bosun journal`.
#[derive(Debug, Args)]
pub struct JournalArgs {}

/// Runs `bosun journal …`.
pub fn run(_args: JournalArgs) -> anyhow::Result<()> {
    anyhow::bail!("bosun journal is not available yet")
}
