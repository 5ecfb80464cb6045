//! Private files. The store holds every object, Secrets included, and the kubeconfig may
//! carry the bearer token: folders are created `0700` and files `0600`, and a store left
//! readable by an older bosun is tightened when it is opened.

use std::fs::Permissions;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Creates `dir` and its missing parents `0700` (existing folders are left as they are).
pub fn create_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `path` as a `0600` file (through a temporary file renamed over it).
pub fn write_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    // A temporary file left by an older bosun keeps its mode when opened: set it.
    file.set_permissions(Permissions::from_mode(0o600))?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}

/// Whether `name` is one of sled's own files.
pub fn sled_file(name: &str) -> bool {
    name == "db" || name == "conf" || name == "blobs" || name.starts_with("snap.")
}

/// Removes group and other access from sled's files in `dir` (recursively; symbolic links
/// are not followed), and from `dir` itself when sled's files are all it holds (a shared
/// folder someone pointed the store at is left as it is). Returns what was changed.
pub fn tighten_store(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut changed = Vec::new();
    let mut only_sled = true;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // sled's files, and the CA certificate a TLS sandbox writes beside them.
        if sled_file(&name) || name == "ca.crt" || name == "ca.tmp" {
            tighten_tree(&entry.path(), &mut changed)?;
        } else {
            only_sled = false;
        }
    }
    if only_sled {
        tighten_one(dir, &mut changed)?;
    }
    Ok(changed)
}

/// Removes group and other access from `path` and, for a folder, everything under it.
pub fn tighten_tree(path: &Path, changed: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if tighten_one(path, changed)? {
        for entry in std::fs::read_dir(path)? {
            tighten_tree(&entry?.path(), changed)?;
        }
    }
    Ok(())
}

/// Removes group and other access from one file or folder; returns whether it is a folder.
pub fn tighten_one(path: &Path, changed: &mut Vec<PathBuf>) -> std::io::Result<bool> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(false);
    }
    let mode = meta.permissions().mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, Permissions::from_mode(mode & 0o700))?;
        changed.push(path.to_path_buf());
    }
    Ok(meta.is_dir())
}

/// Logs once, at INFO, what [`tighten_store`] changed in `what`.
pub fn log_tightened(what: &str, dir: &Path, changed: &[PathBuf]) {
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
        "made the {what} private (0700 folders, 0600 files): it was readable by other users; tightened {}{}",
        shown.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    }

    #[test]
    fn a_shared_folder_keeps_its_mode_but_sled_files_are_tightened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(shared.join("notes.txt"), "x").expect("write");
        std::fs::write(shared.join("db"), "x").expect("write");
        std::fs::set_permissions(shared.join("db"), Permissions::from_mode(0o644)).expect("chmod");
        let changed = tighten_store(&shared).expect("tighten");
        assert_eq!(changed, vec![shared.join("db")]);
        assert_eq!(mode(&shared), 0o755);
        assert_eq!(mode(&shared.join("db")), 0o600);
    }
}
