//! Private files and folders, for everything bosun keeps that may hold a secret (the
//! journals hold values, the sandbox's store every Secret, a kubeconfig a bearer token,
//! the temp folder hook inputs): folders are created `0700` and files written `0600`, and
//! what an older bosun left readable is tightened, with one INFO line saying what.

use std::fs::Permissions;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Creates `dir` and its missing parents `0700` (existing folders are left as they are).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `path` as a `0600` file (through a temporary file renamed over it).
pub fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
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

/// Removes group and other access from `path` and, for a folder, everything under it
/// (symbolic links are not followed); appends what was changed to `changed`.
pub fn tighten_tree(path: &Path, changed: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if tighten_one(path, changed)? {
        for entry in std::fs::read_dir(path)? {
            tighten_tree(&entry?.path(), changed)?;
        }
    }
    Ok(())
}

/// Removes group and other access from one file or folder (a symbolic link is left as it
/// is); returns whether it is a folder.
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

/// Logs once, at INFO, what was tightened in `dir`, which holds `what` ("journal",
/// "sandbox store", …); nothing when nothing was.
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
    fn a_readable_tree_is_tightened_and_links_are_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let top = dir.path().join("top");
        create_private_dir(&top.join("sub")).expect("mkdir");
        assert_eq!(mode(&top), 0o700);
        std::fs::set_permissions(&top, Permissions::from_mode(0o755)).expect("chmod");
        let file = top.join("sub").join("f");
        std::fs::write(&file, "x").expect("write");
        std::fs::set_permissions(&file, Permissions::from_mode(0o644)).expect("chmod");
        std::os::unix::fs::symlink("/etc", top.join("link")).expect("symlink");
        let mut changed = Vec::new();
        tighten_tree(&top, &mut changed).expect("tighten");
        assert_eq!(mode(&top), 0o700);
        assert_eq!(mode(&file), 0o600);
        assert!(changed.contains(&top) && changed.contains(&file));
        assert!(!changed.contains(&top.join("link")));
    }

    #[test]
    fn written_files_are_private_even_over_an_old_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(path.with_extension("tmp"), "old").expect("write");
        std::fs::set_permissions(path.with_extension("tmp"), Permissions::from_mode(0o644))
            .expect("chmod");
        write_private_file(&path, b"new").expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"new");
        assert_eq!(mode(&path), 0o600);
    }
}
