//! A running bosun keeps its journal compact: snapshots are taken and older events dropped
//! while it runs (not only at the next start), and what the journal rebuilds is the same.

use std::time::Duration;

use crate::common;

use crate::common::{Operator, Sandbox, workdir};

#[test]
fn a_running_bosun_snapshots_and_drops_old_events_and_replay_still_agrees() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = work.path().join("global-hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    // A hook every second writes a memory value: events keep coming, values must survive.
    common::config_hook(
        &hooks.join("001-tick.sh"),
        r#"{"configVersion":"v1","schedule":[{"name":"tick","crontab":"*/1 * * * * *"}]}"#,
        r#"echo '[{"op":"add","path":"/global/ticked","value":true}]' > "$VALUES_JSON_PATCH_PATH""#,
    );
    let journal = work.path().join("journal");
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[("BOSUN_JOURNAL_SNAPSHOT_EVERY", "20")],
    );
    let stats = || {
        bosun_journal::Journal::<bosun_addon::Event>::open_read_only(&journal)
            .ok()
            .and_then(|j| j.stats().ok())
    };
    op.wait(
        "two snapshots taken while running, and the events before the oldest dropped",
        Duration::from_secs(120),
        || {
            stats().is_some_and(|s| {
                s.snapshots.len() >= 2 && s.first_seq.is_some_and(|first| first > 1)
            })
        },
    );
    op.wait("the snapshot logged", Duration::from_secs(60), || {
        op.logs().contains("journal snapshot saved")
    });
    // The state rebuilt from the latest snapshot and the events after it has the hook's
    // memory value (journaled once: the same patch again is not journaled again), though
    // the event that set it may be among those dropped.
    let replayed = || {
        let j = bosun_journal::Journal::<bosun_addon::Event>::open_read_only(&journal).ok()?;
        let (state, _) = j
            .replay::<bosun_addon::State, _>(None, true, |s, r| s.apply(&r.event))
            .ok()?;
        Some(state.scope_document(&bosun_addon::Scope::Global)["global"]["ticked"].clone())
    };
    op.wait(
        "the hook's memory value in the replayed state",
        Duration::from_secs(60),
        || replayed() == Some(serde_json::json!(true)),
    );
    let after = stats().expect("stats");
    assert!(
        after.snapshots.len() <= 3,
        "old snapshots are dropped: {after:?}"
    );
}
