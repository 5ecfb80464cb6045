//! Each subsystem's journal as the commands that read it without a running bosun see it:
//! `bosun journal replay` and `diff --journal` fold it, `bosun explain` asks it about an
//! object. A subsystem names its [`JournalKind`] where it is registered
//! (`cli::SUBSYSTEMS`); the command line hands that list to these commands, which loop
//! over it and name no subsystem.
//!
//! ```text
//!   cli::SUBSYSTEMS ──► JournalKind { name, dir(journal folder), replay(until), explain }
//!        │                 modules: the folder's top (State, with snapshots)
//!        │                 lambda, deployer: `<folder>/<name>` (Folded: their crate's fold)
//!        └─► bosun journal replay|diff --journal NAME, bosun explain (offline)
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use bosun_journal::{Journal, Record, Versioned};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::explanation::{Explanation, Subject};

/// A subsystem's journal, read from the journal folder.
pub trait JournalKind: Sync {
    /// Its name: on the HA stream, in `bosun journal --journal`, in an explanation's steps.
    fn name(&self) -> &'static str;

    /// Its folder under the journal folder `dir`: `dir/<name>`, or `dir` itself when `dir`
    /// is that folder.
    fn dir(&self, dir: &Path) -> PathBuf {
        crate::journal_dirs::subsystem_journal(dir, self.name())
    }

    /// Whether it is under the journal folder `dir` (`all` reads only those there).
    fn present(&self, dir: &Path) -> bool {
        holds_files(&self.dir(dir))
    }

    /// Its state up to `until` (a sequence number, time or age; the end when `None`), as
    /// JSON.
    fn replay(&self, dir: &Path, until: Option<&str>) -> anyhow::Result<Value>;

    /// Adds what it says of `subject` (nothing when it is not under `dir`); `Err`: why it
    /// could not be read.
    fn explain(&self, dir: &Path, subject: &Subject, e: &mut Explanation) -> Result<(), String>;
}

/// A journal folded by its crate's fold into a state `S` (the lambda controllers', the
/// deployer's), in its folder under the journal folder.
pub struct Folded<E: 'static, S: 'static> {
    /// Its name and folder.
    pub name: &'static str,
    /// Its crate's fold.
    pub fold: fn(&mut S, &Record<E>),
    /// What it says of a subject.
    pub explain:
        fn(&Journal<E>, &Subject, &mut Explanation) -> Result<(), bosun_journal::JournalError>,
}

impl<E, S> JournalKind for Folded<E, S>
where
    E: Serialize + DeserializeOwned + Versioned + Sync,
    S: Default + Serialize,
{
    fn name(&self) -> &'static str {
        self.name
    }

    fn replay(&self, dir: &Path, until: Option<&str>) -> anyhow::Result<Value> {
        let d = self.dir(dir);
        let journal = Journal::<E>::open_read_only(&d)
            .with_context(|| format!("cannot open the {} journal {}", self.name, d.display()))?;
        let at = crate::debug::journal_views::point(&journal, until)?;
        Ok(serde_json::to_value(crate::journal_replay::replay(
            &journal, at, self.fold,
        )?)?)
    }

    fn explain(&self, dir: &Path, subject: &Subject, e: &mut Explanation) -> Result<(), String> {
        match open_present::<E>(self.name, &self.dir(dir))? {
            Some(journal) => (self.explain)(&journal, subject, e)
                .map_err(|err| format!("{} journal: {err}", self.name)),
            None => Ok(()),
        }
    }
}

/// The `what` journal in `d`, read only (a private copy while bosun holds it); `None`
/// when `d` holds nothing, `Err` when it cannot be opened, with why.
pub fn open_present<E>(what: &str, d: &Path) -> Result<Option<Journal<E>>, String>
where
    E: Serialize + DeserializeOwned + Versioned,
{
    if !holds_files(d) {
        return Ok(None);
    }
    Journal::open_read_only(d)
        .map(Some)
        .map_err(|e| format!("{what} journal {}: {e}", d.display()))
}

/// Whether `d` is a folder with something in it.
fn holds_files(d: &Path) -> bool {
    std::fs::read_dir(d).is_ok_and(|mut r| r.next().is_some())
}

/// The journal of `kinds` named `name`.
pub fn named(kinds: &[&'static dyn JournalKind], name: &str) -> Option<&'static dyn JournalKind> {
    kinds.iter().copied().find(|j| j.name() == name)
}
