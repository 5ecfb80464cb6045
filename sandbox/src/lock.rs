//! Waiting for the store's lock. sled holds an exclusive `flock` on `<data>/db` while a
//! sandbox has the store open; a sandbox restarted right after the previous one was told
//! to stop would otherwise fail while that one is still flushing. It waits a little,
//! polling, and then fails naming the folder and, from `/proc/locks`, who holds it.

use std::fs::TryLockError;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a starting sandbox waits for its storage lock by default.
pub(crate) const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(10);

/// How often the lock is tried while waiting.
const POLL: Duration = Duration::from_millis(100);

/// Why the store's lock could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    /// Someone else still holds it after the wait.
    #[error(
        "the sandbox storage {} is in use by {holder}: its lock on {} was still held after \
         {}s; stop that process or give this sandbox another data folder",
        dir.display(), file.display(), waited.as_secs()
    )]
    Held {
        /// The storage folder.
        dir: PathBuf,
        /// The locked file.
        file: PathBuf,
        /// Who holds it, as far as `/proc/locks` tells.
        holder: String,
        /// How long this sandbox waited.
        waited: Duration,
    },
    /// The lock file could not be opened or tried.
    #[error("cannot check the lock of the sandbox storage {}: {source}", file.display())]
    Io {
        /// The lock file.
        file: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// Returns once nobody holds the lock of the store in `dir` (or there is no store yet), or
/// fails after `wait`.
pub(crate) async fn wait_for_store(dir: &Path, wait: Duration) -> Result<(), LockError> {
    let file = dir.join("db");
    let started = Instant::now();
    let mut logged = false;
    loop {
        let handle = match std::fs::File::open(&file) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(LockError::Io { file, source }),
        };
        match handle.try_lock() {
            // Released when `handle` is dropped, before sled takes it.
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(source)) => return Err(LockError::Io { file, source }),
        }
        drop(handle);
        let waited = started.elapsed();
        if waited >= wait {
            let holder = holder(&file).unwrap_or_else(|| "another process".to_string());
            return Err(LockError::Held {
                dir: dir.to_path_buf(),
                file,
                holder,
                waited,
            });
        }
        if !logged {
            logged = true;
            tracing::info!(
                dir = %dir.display(),
                holder = %holder(&file).unwrap_or_else(|| "another process".into()),
                "the sandbox storage is locked; waiting up to {}s for it", wait.as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `pid N (command line)` of the process holding a `flock` on `file`, from `/proc/locks`.
pub fn holder(file: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(file).ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = holder_pid(&locks, inode)?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    Some(if cmdline.is_empty() {
        format!("pid {pid}")
    } else {
        format!("pid {pid} ({})", cmdline.join(" "))
    })
}

/// The pid of the `FLOCK` on `inode` in the text of `/proc/locks`
/// (`1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF`).
fn holder_pid(locks: &str, inode: u64) -> Option<u32> {
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Waiting requests are listed as `1: -> FLOCK …`.
        if fields.get(1) != Some(&"FLOCK") {
            return None;
        }
        let ino = fields.get(5)?.rsplit(':').next()?.parse::<u64>().ok()?;
        (ino == inode)
            .then(|| fields.get(4)?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_read_from_proc_locks() {
        let locks = "1: POSIX  ADVISORY  WRITE 11 fd:01:77 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 5151 fd:01:1234 0 EOF\n";
        assert_eq!(holder_pid(locks, 1234), Some(4242));
        assert_eq!(holder_pid(locks, 77), None);
        assert_eq!(holder_pid(locks, 9), None);
    }

    #[tokio::test]
    async fn a_held_lock_is_waited_for_then_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("db");
        std::fs::write(&file, b"").expect("db");
        let held = std::fs::File::open(&file).expect("open");
        held.lock().expect("lock");
        let err = wait_for_store(dir.path(), Duration::from_millis(300))
            .await
            .expect_err("held");
        let text = err.to_string();
        assert!(text.contains(&dir.path().display().to_string()), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        // Released: the next wait returns at once.
        drop(held);
        wait_for_store(dir.path(), Duration::ZERO)
            .await
            .expect("free");
    }
}
