//! The journal holds values, secrets included: its folder is created `0700`, its files are
//! made `0600`, and a journal left readable by an older bosun is tightened when it is opened
//! for writing.

use std::fs::Permissions;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Creates `dir` and its missing parents `0700` (existing folders are left as they are).
pub fn create_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Removes group and other access from `path` and everything under it (symbolic links are
/// not followed); appends what was changed to `changed`.
pub fn tighten(path: &Path, changed: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = meta.permissions().mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, Permissions::from_mode(mode & 0o700))?;
        changed.push(path.to_path_buf());
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            tighten(&entry?.path(), changed)?;
        }
    }
    Ok(())
}

/// Logs, at INFO, what [`tighten`] changed in the journal `dir`.
pub fn log_tightened(dir: &Path, changed: &[PathBuf]) {
    if changed.is_empty() {
        return;
    }
    let shown: Vec<String> = changed
        .iter()
        .take(8)
        .map(|p| p.display().to_string())
        .collect();
    let more = changed.len().saturating_sub(shown.len());
    tracing::info!(
        dir = %dir.display(),
        count = changed.len(),
        "made the journal private (0700 folders, 0600 files): it was readable by other users; tightened {}{}",
        shown.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    );
}
