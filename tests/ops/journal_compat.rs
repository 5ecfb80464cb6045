//! A journal written by an earlier bosun replays unchanged.
//!
//! `tests/fixtures/journal-v1/journal` was written by bosun before its runtime and addon
//! subsystem became separate crates (commit be2d308): `bosun run --sandbox` on the
//! embedded default, then `greeter: "replicas: 2"` and `optionalEnabled: "false"` in the
//! ConfigMap. `state.json` and `log.txt` are what that bosun's `journal state -o json`
//! and `journal log` printed for it. Today's bosun must print the same.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/journal-v1")
}

/// A writable copy of the fixture journal (opening a journal may tidy its files).
fn journal_copy(dir: &Path) -> PathBuf {
    let to = dir.join("journal");
    std::fs::create_dir_all(to.join("blobs")).expect("journal folder");
    for file in ["conf", "db"] {
        std::fs::copy(fixture().join("journal").join(file), to.join(file)).expect("fixture file");
    }
    to
}

fn journal_cli(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(common::bosun_bin())
        .arg("journal")
        .arg("--journal-dir")
        .arg(dir)
        .args(args)
        .output()
        .expect("bosun runs");
    assert!(
        out.status.success(),
        "bosun journal {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_journal_written_before_the_restructure_replays_to_the_same_state_and_log() {
    let work = tempfile::tempdir().expect("temp dir");
    let journal = journal_copy(work.path());

    let state: serde_json::Value =
        serde_json::from_str(&journal_cli(&journal, &["state", "-o", "json"]))
            .expect("state is JSON");
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture().join("state.json")).expect("fixture state"),
    )
    .expect("fixture state is JSON");
    assert_eq!(
        state, expected,
        "modules, phases, releases, values and queues as the earlier bosun folded them"
    );
    assert_eq!(state["modules"]["greeter"]["phase"], "Ready");
    assert_eq!(state["modules"]["optional"]["enabled"], false);
    assert_eq!(state["converge"]["completed"], 2);

    let log = journal_cli(&journal, &["log"]);
    let expected = std::fs::read_to_string(fixture().join("log.txt")).expect("fixture log");
    assert_eq!(log, expected, "every event reads as it did");

    let verify = journal_cli(&journal, &["verify"]);
    assert!(verify.contains("104"), "all 104 records verify: {verify}");
}

#[test]
fn a_journal_written_before_the_restructure_folds_in_process_as_its_state_says() {
    let work = tempfile::tempdir().expect("temp dir");
    let journal = journal_copy(work.path());
    let (state, events) = common::journal_state(&journal);
    assert_eq!(events.len(), 104);
    assert_eq!(
        state.tasks.last_task_id, 20,
        "new tasks get ids above the old ones"
    );
    assert!(state.tasks.queues.is_empty(), "nothing was pending");
    let typed: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            bosun_addon::Event::Task(bosun_addon::TaskEvent::TaskEnqueued { task, .. }) => {
                Some(task.kind.task_type().as_str())
            }
            _ => None,
        })
        .collect();
    for kind in [
        "GlobalHookRun",
        "ConvergeModules",
        "ModuleRun",
        "ModuleDelete",
    ] {
        assert!(
            typed.contains(&kind),
            "{kind} tasks decode into typed kinds: {typed:?}"
        );
    }
}
