//! Starting a journal over (a standby's Reset to its leader's journal) without ever leaving
//! a half-replaced journal behind.
//!
//! The new journal is built beside the old one, then put in place in steps that each
//! survive a crash, named by the folders beside the journal `<dir>`:
//!
//! ```text
//!   <dir>.incoming.tmp   the new journal being built  (a crash: removed, the old one stands)
//!   <dir>.incoming       built: the old files move to <dir>.replaced.tmp, one by one
//!   <dir>.installing     the old files are aside: the new ones move into <dir>
//!   <dir>.replaced.tmp   done: becomes <dir>.replaced, the copy kept for inspection
//! ```
//!
//! Opening the journal for writing finishes a reset a crash interrupted. Only the
//! journal's own files move: the journals of other subsystems in its folder (`lambda/`,
//! `deployer/`) and their own reset folders are not touched, so that resets of nested
//! journals can run at the same time.

use std::path::{Path, PathBuf};

use crate::{JournalError, SUBSYSTEM_DIRS};

const INCOMING_TMP: &str = ".incoming.tmp";
const INCOMING: &str = ".incoming";
const INSTALLING: &str = ".installing";
const REPLACED_TMP: &str = ".replaced.tmp";
/// Beside a journal `<dir>`: its contents before the last reset.
pub(crate) const REPLACED: &str = ".replaced";

/// `<dir><suffix>`.
pub(crate) fn beside(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Whether `name`, inside a journal's folder, belongs to another subsystem's journal: its
/// folder, or one of the folders of its resets.
pub(crate) fn is_neighbour(name: &str) -> bool {
    SUBSYSTEM_DIRS.iter().any(|sub| {
        name.strip_prefix(sub).is_some_and(|rest| {
            rest.is_empty()
                || [INCOMING_TMP, INCOMING, INSTALLING, REPLACED_TMP, REPLACED].contains(&rest)
        })
    })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn sync_dir(dir: &Path) -> Result<(), JournalError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

fn parent_of(dir: &Path) -> PathBuf {
    match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The journal's own entries in `dir` (other subsystems' journals left out).
fn own_entries(dir: &Path) -> Result<Vec<(std::ffi::OsString, PathBuf)>, JournalError> {
    let mut own = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        if !is_neighbour(&entry.file_name().to_string_lossy()) {
            own.push((entry.file_name(), entry.path()));
        }
    }
    Ok(own)
}

fn remove(path: &Path) -> Result<(), JournalError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(path)(e)),
    };
    if meta.is_dir() {
        std::fs::remove_dir_all(path).map_err(io(path))
    } else {
        std::fs::remove_file(path).map_err(io(path))
    }
}

/// The folder a new journal for `dir` is built in (emptied first).
pub(crate) fn staging(dir: &Path) -> Result<PathBuf, JournalError> {
    finish(dir)?;
    let tmp = beside(dir, INCOMING_TMP);
    remove(&tmp)?;
    Ok(tmp)
}

/// Puts the journal built in [`staging`] in place of `dir`'s; returns where the old
/// contents went, if there were any.
pub(crate) fn install(dir: &Path) -> Result<Option<PathBuf>, JournalError> {
    let (tmp, incoming) = (beside(dir, INCOMING_TMP), beside(dir, INCOMING));
    sync_dir(&tmp)?;
    std::fs::rename(&tmp, &incoming).map_err(io(&incoming))?;
    sync_dir(&parent_of(dir))?;
    finish(dir)
}

/// Finishes a reset of `dir` a crash interrupted (nothing when none was under way);
/// returns where the old contents went, if they went anywhere.
pub(crate) fn finish(dir: &Path) -> Result<Option<PathBuf>, JournalError> {
    let parent = parent_of(dir);
    let tmp = beside(dir, INCOMING_TMP);
    if tmp.exists() {
        // Never finished building: the old journal stands.
        remove(&tmp)?;
    }
    let incoming = beside(dir, INCOMING);
    let installing = beside(dir, INSTALLING);
    let replaced_tmp = beside(dir, REPLACED_TMP);
    if incoming.exists() {
        bosun_platform::create_private_dir(&replaced_tmp).map_err(io(&replaced_tmp))?;
        for (name, path) in own_entries(dir)? {
            let to = replaced_tmp.join(&name);
            remove(&to)?;
            std::fs::rename(&path, &to).map_err(io(&path))?;
        }
        sync_dir(&replaced_tmp)?;
        sync_dir(dir)?;
        std::fs::rename(&incoming, &installing).map_err(io(&installing))?;
        sync_dir(&parent)?;
    }
    if installing.exists() {
        for entry in std::fs::read_dir(&installing).map_err(io(&installing))? {
            let entry = entry.map_err(io(&installing))?;
            let to = dir.join(entry.file_name());
            std::fs::rename(entry.path(), &to).map_err(io(&to))?;
        }
        sync_dir(dir)?;
        std::fs::remove_dir(&installing).map_err(io(&installing))?;
        sync_dir(&parent)?;
    }
    if !replaced_tmp.exists() {
        return Ok(None);
    }
    let empty = std::fs::read_dir(&replaced_tmp)
        .map_err(io(&replaced_tmp))?
        .next()
        .is_none();
    if empty {
        // Nothing was replaced: an older copy stays.
        std::fs::remove_dir(&replaced_tmp).map_err(io(&replaced_tmp))?;
        return Ok(None);
    }
    let replaced = beside(dir, REPLACED);
    remove(&replaced)?;
    std::fs::rename(&replaced_tmp, &replaced).map_err(io(&replaced))?;
    sync_dir(&parent)?;
    Ok(Some(replaced))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folders_of_other_subsystems_and_their_resets_are_neighbours() {
        for name in [
            "lambda",
            "deployer",
            "lambda.replaced",
            "deployer.incoming",
            "lambda.incoming.tmp",
            "deployer.installing",
            "lambda.replaced.tmp",
        ] {
            assert!(is_neighbour(name), "{name}");
        }
        for name in ["segments", "lambdas", "lambda.old", "db", "replaced"] {
            assert!(!is_neighbour(name), "{name}");
        }
    }

    fn tree(dir: &Path) -> Vec<String> {
        let mut all: Vec<String> = walk(dir)
            .into_iter()
            .map(|p| {
                p.strip_prefix(dir)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            })
            .collect();
        all.sort();
        all
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            out.push(e.path());
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            }
        }
        out
    }

    /// A crash after any step of a reset: opening finishes it, and the end state is the
    /// same as after a reset never interrupted, nested journals untouched.
    #[test]
    fn a_reset_interrupted_after_any_step_is_finished_the_same_way() {
        let setup = |top: &Path| {
            let dir = top.join("journal");
            std::fs::create_dir_all(dir.join("segments")).expect("segments");
            std::fs::write(dir.join("segments/old.log"), b"old").expect("old");
            std::fs::write(dir.join("meta"), b"old meta").expect("meta");
            std::fs::create_dir_all(dir.join("lambda/segments")).expect("lambda");
            std::fs::write(dir.join("lambda/meta"), b"lambda").expect("lambda meta");
            let tmp = staging(&dir).expect("staging");
            std::fs::create_dir_all(tmp.join("segments")).expect("new segments");
            std::fs::write(tmp.join("meta"), b"new meta").expect("new meta");
            dir
        };
        let whole = tempfile::tempdir().expect("tempdir");
        let dir = setup(whole.path());
        assert_eq!(
            install(&dir).expect("install"),
            Some(beside(&dir, REPLACED))
        );
        let want = tree(whole.path());
        assert!(want.contains(&"journal.replaced/segments/old.log".to_string()));
        assert!(want.contains(&"journal/lambda/meta".to_string()));
        assert_eq!(std::fs::read(dir.join("meta")).expect("meta"), b"new meta");

        // The states a crash can leave, each made by hand from the steps above.
        type Step = fn(&Path);
        let crashes: [(&str, Step); 4] = [
            ("while building", |dir| {
                std::fs::write(beside(dir, INCOMING_TMP).join("half"), b"x").expect("half");
            }),
            ("built", |dir| {
                std::fs::rename(beside(dir, INCOMING_TMP), beside(dir, INCOMING)).expect("mv");
            }),
            ("half aside", |dir| {
                std::fs::rename(beside(dir, INCOMING_TMP), beside(dir, INCOMING)).expect("mv");
                std::fs::create_dir(beside(dir, REPLACED_TMP)).expect("aside");
                std::fs::rename(dir.join("meta"), beside(dir, REPLACED_TMP).join("meta"))
                    .expect("mv meta");
            }),
            ("half installed", |dir| {
                let aside = beside(dir, REPLACED_TMP);
                std::fs::create_dir(&aside).expect("aside");
                std::fs::rename(dir.join("meta"), aside.join("meta")).expect("mv");
                std::fs::rename(dir.join("segments"), aside.join("segments")).expect("mv");
                let installing = beside(dir, INSTALLING);
                std::fs::rename(beside(dir, INCOMING_TMP), &installing).expect("mv");
                std::fs::rename(installing.join("meta"), dir.join("meta")).expect("mv");
            }),
        ];
        for (case, crash) in crashes {
            let top = tempfile::tempdir().expect("tempdir");
            let dir = setup(top.path());
            crash(&dir);
            finish(&dir).expect(case);
            if case == "while building" {
                // Nothing was replaced: the old journal stands.
                assert_eq!(std::fs::read(dir.join("meta")).expect(case), b"old meta");
                assert!(!beside(&dir, INCOMING_TMP).exists(), "{case}");
                continue;
            }
            assert_eq!(tree(top.path()), want, "{case}");
        }
    }
}
