//! bosun on a journal whose filesystem fills up: it stops being ready and says why, stays
//! alive for a grace period, and once there is room again it goes on by itself. The
//! filesystem is a real 8 MiB tmpfs (mounting it needs root, as the test command runs;
//! where it is not permitted the test says so and does nothing).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod common;

use common::{Operator, Sandbox, workdir};

/// A mounted tmpfs, unmounted on drop.
struct SmallFs(PathBuf);

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn small_fs(dir: &Path) -> Option<SmallFs> {
    std::fs::create_dir_all(dir).ok()?;
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success())
        .then(|| SmallFs(dir.to_path_buf()))
}

fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).expect("filler file");
    let chunk = vec![7u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

fn successes(journal: &Path) -> usize {
    common::try_journal_state(journal)
        .map(|(_, events)| {
            events
                .iter()
                .filter(|e| {
                    matches!(
                        e,
                        bosun_addon::Event::Task(bosun_addon::TaskEvent::TaskSucceeded { .. })
                    )
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_full_journal_disk_fails_readiness_and_room_again_resumes_without_a_restart() {
    let work = workdir();
    let Some(fs) = small_fs(&work.path().join("journal-fs")) else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let sb = Sandbox::start();
    let hooks = work.path().join("global-hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    // A hook every second: its tasks keep the journal busy.
    common::config_hook(
        &hooks.join("001-tick.sh"),
        r#"{"configVersion":"v1","schedule":[{"name":"tick","crontab":"*/1 * * * * *"}]}"#,
        "true",
    );
    let journal = fs.0.join("journal");
    let journal_dir = journal.display().to_string();
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[("BOSUN_JOURNAL_DIR", journal_dir.as_str())],
    );
    let mut addr = String::new();
    op.wait("the HTTP address", Duration::from_secs(60), || {
        addr = op.http_address().unwrap_or_default();
        !addr.is_empty()
    });
    let get = |path: &str| {
        let (code, body) = common::http_raw(&addr, "GET", path, "", b"");
        (code, String::from_utf8_lossy(&body).into_owned())
    };
    op.wait("ready", Duration::from_secs(60), || get("/readyz").0 == 200);

    fill(&fs.0.join("filler"));
    let mut why = String::new();
    op.wait("readiness to fail", Duration::from_secs(60), || {
        let (code, body) = get("/readyz");
        why = body;
        code == 503 && why.contains("journal cannot write")
    });
    assert!(
        why.contains("No space left") || why.contains("os error 28"),
        "/readyz says why: {why}"
    );
    assert_eq!(get("/healthz").0, 200, "alive during the grace period");

    std::fs::remove_file(fs.0.join("filler")).expect("room again");
    op.wait("ready again", Duration::from_secs(60), || {
        get("/readyz").0 == 200
    });
    let before = successes(&journal);
    op.wait(
        "tasks to be journaled again",
        Duration::from_secs(60),
        || successes(&journal) > before,
    );
    assert!(
        op.logs().contains("journal storage reopened"),
        "the storage was reopened, not the process restarted"
    );
}
