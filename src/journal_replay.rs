//! `bosun journal replay` and `bosun journal diff --journal`: the state of any of the
//! three journals at a point. Each state is its subsystem's own fold: the modules'
//! [`bosun_addon::State`], the lambda controllers' [`bosun_lambda::journal_state::fold`]
//! and the deployer's [`bosun_deployer::journal_state::fold`]; this file reads a journal
//! up to the point and feeds the fold.

use bosun_journal::{Journal, Record};
use serde::Serialize;

/// Folds `journal` up to `until` (the end when `None`) with `fold`.
pub fn replay<E, S: Default>(
    journal: &Journal<E>,
    until: Option<u64>,
    mut fold: impl FnMut(&mut S, &Record<E>),
) -> Result<S, bosun_journal::JournalError>
where
    E: Serialize + serde::de::DeserializeOwned + bosun_journal::Versioned,
{
    let mut state = S::default();
    for r in journal.read_from(1) {
        let r = r?;
        if until.is_some_and(|u| r.seq > u) {
            break;
        }
        fold(&mut state, &r);
    }
    Ok(state)
}
