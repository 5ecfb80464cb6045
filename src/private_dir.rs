//! The folders bosun writes values, rendered charts and hook files into
//! (`ADDON_OPERATOR_TMP_DIR` and, inside it, `charts/`, `helm/` and `deployer/`). Whoever
//! can write there can change what bosun installs (swap a chart between its copy and
//! `helm upgrade`, or a hook's values patch), so bosun uses only a folder of its own user:
//!
//! ```text
//!   missing                                     → created 0700 (missing parents too)
//!   bosun's user's, 0700                        → used
//!   bosun's user's, readable by others (0755)   → tightened: 0700 folders, 0600 files, logged
//!   writable by group or others, another user's,
//!   a symbolic link, not a folder               → refused
//!   inside a parent another user (not root) owns,
//!   or others may write in without the sticky bit → refused (the folder could be swapped)
//! ```
//!
//! A folder writable by others is refused even when bosun's user owns it: another user may
//! already have put something in it. Files bosun writes inside are `0600`, folders `0700`.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a folder is not bosun's private folder.
#[derive(Debug, thiserror::Error)]
pub enum UnsafeDir {
    /// The path is a symbolic link.
    #[error(
        "{} is a symbolic link; bosun writes values and charts only into a real folder of its \
         own user (remove the link)",
        dir.display()
    )]
    Symlink {
        /// The folder.
        dir: PathBuf,
    },
    /// The path exists and is not a folder.
    #[error("{} is not a folder", dir.display())]
    NotADir {
        /// The path.
        dir: PathBuf,
    },
    /// Another user owns the folder.
    #[error(
        "{} belongs to {owner} (mode {mode:04o}), not to bosun's user {me}: another user could \
         change the charts and values bosun installs; bosun uses only a folder its own user \
         owns (remove it and bosun creates its own, 0700)",
        dir.display()
    )]
    Foreign {
        /// The folder.
        dir: PathBuf,
        /// Its owner, as `uid 65534 (nobody)`.
        owner: String,
        /// Its permission bits.
        mode: u32,
        /// bosun's effective user, likewise.
        me: String,
    },
    /// Group or others may write in the folder.
    #[error(
        "{} is writable by {who} (owner {owner}, mode {mode:04o}): anyone who can write there \
         could change the charts and values bosun installs, and may have already; bosun \
         expects 0700 (check what is in it, then remove it or chmod 700 it)",
        dir.display()
    )]
    Writable {
        /// The folder.
        dir: PathBuf,
        /// `group`, `others`, or `group and others`.
        who: &'static str,
        /// Its owner, as `uid 0 (root)`.
        owner: String,
        /// Its permission bits.
        mode: u32,
    },
    /// A parent folder lets another user replace the folder.
    #[error(
        "{} is inside {}, which {why} (owner {owner}, mode {mode:04o}): another user could \
         replace the folder; choose one whose parents only root and bosun's user can change",
        dir.display(),
        parent.display()
    )]
    Parent {
        /// The folder.
        dir: PathBuf,
        /// The parent at fault.
        parent: PathBuf,
        /// What is wrong with it.
        why: &'static str,
        /// Its owner.
        owner: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The folder could not be inspected, created or tightened.
    #[error("cannot {what} {}: {source}", dir.display())]
    Io {
        /// What bosun was doing.
        what: &'static str,
        /// The path.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl UnsafeDir {
    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            UnsafeDir::Symlink { .. } => "symlink",
            UnsafeDir::NotADir { .. } => "not_a_dir",
            UnsafeDir::Foreign { .. } => "foreign_owner",
            UnsafeDir::Writable { .. } => "writable_by_others",
            UnsafeDir::Parent { .. } => "unsafe_parent",
            UnsafeDir::Io { .. } => "io",
        }
    }

    /// Whether the folder does not exist.
    pub fn is_missing(&self) -> bool {
        matches!(self, UnsafeDir::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// bosun's effective user id.
fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// `uid 65534 (nobody)`, or `uid 1234` when the name is not known.
fn user(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => format!("uid {uid} ({})", u.name),
        _ => format!("uid {uid}"),
    }
}

/// Checks the folder itself (one `lstat`): bosun's user's, not a link, not writable by group
/// or others. Hook runs call it before writing their files.
pub fn check(dir: &Path) -> Result<(), UnsafeDir> {
    let meta = std::fs::symlink_metadata(dir).map_err(|source| UnsafeDir::Io {
        what: "inspect",
        dir: dir.to_path_buf(),
        source,
    })?;
    let dir = dir.to_path_buf();
    let mode = meta.permissions().mode() & 0o7777;
    if meta.file_type().is_symlink() {
        return Err(UnsafeDir::Symlink { dir });
    }
    if !meta.is_dir() {
        return Err(UnsafeDir::NotADir { dir });
    }
    if meta.uid() != euid() {
        return Err(UnsafeDir::Foreign {
            dir,
            owner: user(meta.uid()),
            mode,
            me: user(euid()),
        });
    }
    let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => "group and others",
        (true, false) => "group",
        (false, true) => "others",
        (false, false) => return Ok(()),
    };
    Err(UnsafeDir::Writable {
        dir,
        who,
        owner: user(meta.uid()),
        mode,
    })
}

/// Checks `root` and every folder from it down to `path` (each one `lstat`, as [`check`]):
/// a folder swapped since the start for another user's, or for a link, anywhere on the way
/// is refused. `path` outside `root` is checked alone. The Helm path calls it before Helm
/// reads a module's chart from its copy in the temp folder.
pub fn check_within(root: &Path, path: &Path) -> Result<(), UnsafeDir> {
    let Ok(below) = path.strip_prefix(root) else {
        return check(path);
    };
    check(root)?;
    let mut at = root.to_path_buf();
    for part in below.components() {
        at.push(part);
        check(&at)?;
    }
    Ok(())
}

/// A volume as the kubelet makes it for a pod with an `fsGroup` (an emptyDir at `/tmp`,
/// say): root's, in one of bosun's groups, setgid, world-writable and never sticky
/// (kubernetes#110835). Only the pod's containers see it.
fn is_pod_volume(meta: &std::fs::Metadata) -> bool {
    let in_my_groups = |gid: u32| {
        nix::unistd::getegid().as_raw() == gid
            || nix::unistd::getgroups().is_ok_and(|groups| groups.iter().any(|g| g.as_raw() == gid))
    };
    pod_volume_shape(meta.uid(), meta.gid(), meta.mode(), in_my_groups)
}

fn pod_volume_shape(uid: u32, gid: u32, mode: u32, in_my_groups: impl Fn(u32) -> bool) -> bool {
    uid == 0 && mode & 0o2000 != 0 && mode & 0o1000 == 0 && gid != 0 && in_my_groups(gid)
}

/// Checks the parents of `dir`: each one root's or bosun's user's, and none that others may
/// write in without the sticky bit (`/tmp`, `1777`, is fine; so is a pod volume the kubelet
/// made for the pod's fsGroup, see [`is_pod_volume`]).
fn check_parents(dir: &Path) -> Result<(), UnsafeDir> {
    let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    let real = std::fs::canonicalize(parent).map_err(|source| UnsafeDir::Io {
        what: "resolve the parent folder of",
        dir: dir.to_path_buf(),
        source,
    })?;
    let me = euid();
    for p in real.ancestors() {
        let meta = std::fs::metadata(p).map_err(|source| UnsafeDir::Io {
            what: "inspect",
            dir: p.to_path_buf(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o7777;
        let why = if meta.uid() != 0 && meta.uid() != me {
            "belongs to another user"
        } else if mode & 0o002 != 0 && mode & 0o1000 == 0 {
            if is_pod_volume(&meta) {
                tracing::info!(
                    folder = %p.display(),
                    mode = format!("{mode:04o}"),
                    "the temp folder is inside a pod volume the kubelet made for the pod's fsGroup (group-owned, setgid, without the sticky bit, kubernetes#110835): accepted, as only the pod's containers reach it"
                );
                continue;
            }
            "others may write in without the sticky bit"
        } else {
            continue;
        };
        return Err(UnsafeDir::Parent {
            dir: dir.to_path_buf(),
            parent: p.to_path_buf(),
            why,
            owner: user(meta.uid()),
            mode,
        });
    }
    Ok(())
}

/// Makes `dir` bosun's private folder: creates it `0700` when missing, refuses it when it
/// is not safe (see the module's table), and removes group and other access from it and
/// everything in it (links are not followed). Returns what was tightened.
pub fn prepare(dir: &Path) -> Result<Vec<PathBuf>, UnsafeDir> {
    match check(dir) {
        Err(e) if e.is_missing() => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| UnsafeDir::Io {
                    what: "create",
                    dir: dir.to_path_buf(),
                    source,
                })?;
            check(dir)?;
        }
        other => other?,
    }
    check_parents(dir)?;
    let mut changed = Vec::new();
    bosun_platform::tighten_tree(dir, &mut changed).map_err(|source| UnsafeDir::Io {
        what: "make private",
        dir: dir.to_path_buf(),
        source,
    })?;
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::Permissions;

    #[test]
    fn a_kubelet_volume_for_the_pod_s_fs_group_is_a_safe_parent_and_nothing_else_like_it() {
        let mine = |gid: u32| gid == 65532;
        // An emptyDir with fsGroup 65532: root:65532, 2777.
        assert!(pod_volume_shape(0, 65532, 0o42777, mine));
        // Not setgid, another group, root's group, not root's, or sticky (then it is
        // safe anyway and not this case).
        assert!(!pod_volume_shape(0, 65532, 0o40777, mine));
        assert!(!pod_volume_shape(0, 1000, 0o42777, mine));
        assert!(!pod_volume_shape(0, 0, 0o42777, |_| true));
        assert!(!pod_volume_shape(1000, 65532, 0o42777, mine));
        assert!(!pod_volume_shape(0, 65532, 0o43777, mine));
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    }

    #[test]
    fn a_missing_folder_is_created_private() {
        let base = tempfile::tempdir().expect("tempdir");
        let dir = base.path().join("a/b/tmp");
        assert_eq!(prepare(&dir).expect("prepare"), Vec::<PathBuf>::new());
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&base.path().join("a")), 0o700);
    }

    #[test]
    fn a_readable_folder_of_bosuns_user_is_tightened_and_a_writable_one_refused() {
        let base = tempfile::tempdir().expect("tempdir");
        let dir = base.path().join("tmp");
        std::fs::create_dir_all(dir.join("charts/demo")).expect("mkdir");
        std::fs::write(dir.join("charts/demo/Chart.yaml"), "name: demo\n").expect("write");
        for (p, m) in [
            (dir.clone(), 0o755),
            (dir.join("charts"), 0o755),
            (dir.join("charts/demo"), 0o755),
            (dir.join("charts/demo/Chart.yaml"), 0o644),
        ] {
            std::fs::set_permissions(&p, Permissions::from_mode(m)).expect("chmod");
        }
        let changed = prepare(&dir).expect("prepare");
        assert_eq!(changed.len(), 4, "{changed:?}");
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("charts/demo/Chart.yaml")), 0o600);

        std::fs::set_permissions(&dir, Permissions::from_mode(0o777)).expect("chmod");
        let err = prepare(&dir).expect_err("writable by others");
        assert_eq!(err.metric_label(), "writable_by_others");
        let text = err.to_string();
        assert!(
            text.contains("is writable by group and others") && text.contains("mode 0777"),
            "{text}"
        );
        assert_eq!(mode(&dir), 0o777, "a refused folder is left as it is");
    }

    #[test]
    fn links_files_and_open_parents_are_refused() {
        let base = tempfile::tempdir().expect("tempdir");
        let real = base.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        assert_eq!(prepare(&link).map_err(|e| e.metric_label()), Err("symlink"));
        let file = base.path().join("file");
        std::fs::write(&file, "").expect("write");
        assert_eq!(
            prepare(&file).map_err(|e| e.metric_label()),
            Err("not_a_dir")
        );
        let open = base.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, Permissions::from_mode(0o777)).expect("chmod");
        let err = prepare(&open.join("tmp")).expect_err("open parent");
        assert_eq!(err.metric_label(), "unsafe_parent");
        assert!(
            err.to_string()
                .contains("others may write in without the sticky bit"),
            "{err}"
        );
        // A shared parent with the sticky bit, as /tmp: fine.
        std::fs::set_permissions(&open, Permissions::from_mode(0o1777)).expect("chmod");
        assert!(prepare(&open.join("tmp")).is_ok());
    }
}
