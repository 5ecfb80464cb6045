//! Finding hooks: executable regular files under a directory, recursively, skipping hidden
//! directories and `lib` (and `venv` for module hooks).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A hook found on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveredHook {
    /// Name: the path relative to the searched directory; when that path contains a
    /// `hooks/` directory, the name starts there (`hooks/…`), as the reference does.
    pub name: String,
    /// Absolute path of the executable.
    pub path: PathBuf,
}

/// Walks `dir` and returns its hooks sorted by name, and warnings about files skipped.
pub fn discover(
    dir: &Path,
    skip_venv: bool,
) -> std::io::Result<(Vec<DiscoveredHook>, Vec<String>)> {
    let mut hooks = Vec::new();
    let mut warnings = Vec::new();
    let mut seen = std::collections::HashSet::new();
    seen.insert(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()));
    let mut walk = Walk {
        root: dir,
        skip_venv,
        seen,
        hooks: &mut hooks,
        warnings: &mut warnings,
    };
    walk.dir(dir)?;
    hooks.sort_by(|a: &DiscoveredHook, b| a.name.cmp(&b.name));
    Ok((hooks, warnings))
}

/// One walk: the directories entered so far (by their real path, so a symlink loop or a
/// link to a directory already walked adds nothing), and what was found.
struct Walk<'a> {
    root: &'a Path,
    skip_venv: bool,
    seen: std::collections::HashSet<PathBuf>,
    hooks: &'a mut Vec<DiscoveredHook>,
    warnings: &'a mut Vec<String>,
}

impl Walk<'_> {
    fn dir(&mut self, dir: &Path) -> std::io::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let file_name = entry.file_name().to_string_lossy().to_string();
            // Follow symlinks: a linked hook or directory counts as what it points at.
            let meta = match std::fs::metadata(&path) {
                Ok(m) => m,
                Err(e) => {
                    self.warnings
                        .push(format!("{}: skipped, cannot be read: {e}", path.display()));
                    continue;
                }
            };
            if meta.is_dir() {
                if file_name.starts_with('.')
                    || file_name == "lib"
                    || (self.skip_venv && file_name == "venv")
                {
                    continue;
                }
                let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
                if !self.seen.insert(real.clone()) {
                    self.warnings.push(format!(
                        "{}: skipped, it leads to {}, which is already searched (a symlink loop?)",
                        path.display(),
                        real.display()
                    ));
                    continue;
                }
                self.dir(&path)?;
            } else if meta.is_file() {
                if file_name.starts_with('.') {
                    continue;
                }
                if meta.permissions().mode() & 0o111 == 0 {
                    self.warnings.push(format!(
                        "{}: skipped, not executable (chmod +x to make it a hook)",
                        path.display()
                    ));
                    continue;
                }
                let relative = path
                    .strip_prefix(self.root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .to_string();
                let name = match relative.find("hooks/") {
                    Some(i) if i == 0 || relative[..i].ends_with('/') => relative[i..].to_string(),
                    _ => relative,
                };
                let path = std::fs::canonicalize(&path).unwrap_or(path);
                self.hooks.push(DiscoveredHook { name, path });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, rel: &str, mode: u32) {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn finds_executables_and_skips_lib_hidden_and_plain_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        file(d, "hooks/a.sh", 0o755);
        file(d, "hooks/sub/b.py", 0o755);
        file(d, "hooks/lib/helper.sh", 0o755);
        file(d, "hooks/.hidden/c.sh", 0o755);
        file(d, "hooks/venv/bin/python3", 0o755);
        file(d, "hooks/readme.md", 0o644);
        let (hooks, warnings) = discover(d, true).expect("discover");
        let names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["hooks/a.sh", "hooks/sub/b.py"]);
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("readme.md") && w.contains("not executable")),
            "{warnings:?}"
        );
        let (with_venv, _) = discover(d, false).expect("discover");
        assert_eq!(with_venv.len(), 3);
    }

    #[test]
    fn a_symlink_loop_registers_each_hook_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        file(d, "hooks/a.sh", 0o755);
        file(d, "hooks/sub/b.sh", 0o755);
        std::os::unix::fs::symlink(d.join("hooks"), d.join("hooks/sub/loop")).expect("symlink");
        let (hooks, warnings) = discover(d, true).expect("discover");
        let names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["hooks/a.sh", "hooks/sub/b.sh"]);
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("hooks/sub/loop") && w.contains("symlink loop")),
            "{warnings:?}"
        );
    }
}
