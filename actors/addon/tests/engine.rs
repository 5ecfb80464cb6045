//! The addon engine in-process, every port faked: converge order, a ConfigMap change
//! during a converge, a restart from a journal written mid-way, parking, and kubernetes
//! bindings from Synchronization to events. No process,
//! no API server, no Helm: each test runs in milliseconds (waits have deadlines).

mod world;

use std::sync::Arc;

use bosun_addon::global_hooks::GlobalHook;
use bosun_addon::modules::{ConfigSections, ModuleDef};
use bosun_addon::ports::{HookResult, PortError};
use bosun_addon::{Event, ModulePhase, State, TaskEvent};
use serde_json::{Value, json};
use world::{Options, World, global_hook, module, values_patch, wait_for};

/// A hook answer that adds `value` at `path` of its values (a memory patch).
fn memory_patch(
    path: &str,
    value: Value,
) -> impl Fn(&bosun_addon::ports::HookRun) -> Result<HookResult, PortError> {
    values_patch(json!([{"op": "add", "path": path, "value": value}]))
}

fn converges_finished(world: &World) -> usize {
    world.converges_finished()
}

fn standard_hooks(world: &World) -> (Vec<GlobalHook>, Vec<ModuleDef>) {
    world
        .hooks
        .config(
            "alpha/hooks/a",
            "configVersion: v1\nonStartup: 1\nbeforeHelm: 1\nafterHelm: 1",
        )
        .config("beta/hooks/b", "configVersion: v1\nbeforeHelm: 1");
    (
        vec![
            global_hook("g-startup", "configVersion: v1\nonStartup: 1"),
            global_hook("g-around", "configVersion: v1\nbeforeAll: 1\nafterAll: 1"),
        ],
        vec![
            module("beta", 20, &["beta/hooks/b"]),
            module("alpha", 10, &["alpha/hooks/a"]),
        ],
    )
}

#[tokio::test(start_paused = true)]
async fn the_startup_converge_runs_hooks_and_releases_in_the_reference_order() {
    let world = World::default();
    let (global, modules) = standard_hooks(&world);
    let engine = world.engine(global, modules).await;
    wait_for("the first converge", || async { engine.converged() }).await;

    assert_eq!(
        world.runs(),
        [
            "onStartup:g-startup",
            "beforeAll:g-around",
            "onStartup:alpha/hooks/a",
            "beforeHelm:alpha/hooks/a",
            "afterHelm:alpha/hooks/a",
            "beforeHelm:beta/hooks/b",
            "afterAll:g-around",
        ],
        "global onStartup, beforeAll, modules by order (onStartup, beforeHelm, Helm, afterHelm), afterAll"
    );
    assert_eq!(world.releases.log(), ["upgrade alpha", "upgrade beta"]);
    let mut state = State::default();
    state.apply_all(&world.journal.events());
    for m in ["alpha", "beta"] {
        assert!(state.modules[m].enabled, "{m} is enabled");
        assert_eq!(
            state.modules[m].phase,
            ModulePhase::Ready,
            "{m} ran to the end"
        );
        assert_eq!(state.modules[m].revision, 1, "{m}'s release is recorded");
    }
    assert_eq!(state.converge.completed, 1);
}

#[tokio::test(start_paused = true)]
async fn a_config_map_change_during_a_converge_restarts_it_with_the_new_values() {
    let world = World::default();
    let (global, modules) = standard_hooks(&world);
    let gate = world.hooks.gate("beta/hooks/b");
    let engine = world.engine(global, modules).await;
    wait_for("beta's beforeHelm to be held", || async {
        world
            .runs()
            .contains(&"beforeHelm:beta/hooks/b".to_string())
    })
    .await;

    // The change arrives while beta's hook runs: the converge is restarted at once, and
    // beta's actor gets its section after the run it is busy with.
    let engine = Arc::new(engine);
    let change = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .config_changed(ConfigSections {
                    global: json!({"greeting": "changed"}),
                    ..ConfigSections::default()
                })
                .await
        }
    });
    wait_for("beta's actor to hold the new section", || async {
        engine.mailboxes.snapshot()["module/beta"]
            .pending
            .iter()
            .any(|m| m.summary == "ConfigChanged")
    })
    .await;
    gate.open();
    let queued = change
        .await
        .expect("the change task ends")
        .expect("the change is accepted");
    assert_eq!(
        queued,
        ["ConvergeModules:ReloadAllModules (restarting the converge in progress)"]
    );
    wait_for("the restarted converge to finish", || async {
        converges_finished(&world) == 1 && engine.converged()
    })
    .await;

    let started: Vec<String> = world
        .journal
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::ConvergeStarted { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        ["OperatorStartup", "ReloadAllModules"],
        "the startup converge was replaced, not finished and then repeated"
    );
    assert!(
        world.count(
            |e| matches!(e, Event::Task(TaskEvent::TaskDropped { reason, .. })
            if reason.contains("superseded by ReloadAllModules"))
        ) > 0,
        "its pending steps were dropped"
    );
    // The restarted converge's hooks see the new global values.
    let last_after_all = world
        .hooks
        .runs()
        .into_iter()
        .rfind(|r| r.binding == "afterAll")
        .expect("afterAll ran");
    assert_eq!(last_after_all.values["global"]["greeting"], "changed");
}

#[tokio::test(start_paused = true)]
async fn a_restart_keeps_memory_values_and_does_not_redo_recorded_releases() {
    let world = World::default();
    let (global, modules) = standard_hooks(&world);
    world.hooks.answer(
        "alpha/hooks/a",
        memory_patch("/alpha/remembered", json!("from-before")),
    );
    let first = world.engine(global.clone(), modules.clone()).await;
    wait_for("the first converge", || async { first.converged() }).await;
    let runs_before = world.hooks.runs().len();

    // Restart on the same journal and cluster (the first engine's work is all journaled).
    world
        .hooks
        .answer("alpha/hooks/a", |_run| Ok(HookResult::default()));
    let second = world.engine(global, modules).await;
    wait_for("the converge after the restart", || async {
        second.converged() && converges_finished(&world) == 2
    })
    .await;

    let after: Vec<_> = world.hooks.runs().split_off(runs_before);
    let alpha = after
        .iter()
        .find(|r| r.hook == "alpha/hooks/a")
        .expect("alpha's hooks ran again after the restart");
    assert_eq!(
        alpha.values["alpha"]["remembered"], "from-before",
        "a memory values patch survives the restart (addon-operator loses it)"
    );
    assert_eq!(
        world.releases.log(),
        ["upgrade alpha", "upgrade beta"],
        "releases whose checksum is recorded and unchanged are not upgraded again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_that_keeps_failing_is_parked_and_its_queue_goes_on() {
    let world = World::default();
    world
        .hooks
        .config("g-broken", "configVersion: v1\nonStartup: 1")
        .config("g-fine", "configVersion: v1\nonStartup: 2")
        .answer("g-broken", |_run| {
            Err(PortError::transient("exit status 1"))
        });
    let global = vec![
        global_hook("g-broken", "configVersion: v1\nonStartup: 1"),
        global_hook("g-fine", "configVersion: v1\nonStartup: 2"),
    ];
    let engine = world
        .engine_with(
            global,
            Vec::new(),
            Options {
                max_attempts: Some(1),
                ..Options::default()
            },
        )
        .await;
    wait_for("the converge past the parked task", || async {
        engine.converged()
    })
    .await;

    assert_eq!(
        world.runs()[..2],
        ["onStartup:g-broken", "onStartup:g-fine"]
    );
    let mut state = State::default();
    state.apply_all(&world.journal.events());
    let parked = &state.tasks.parked["main"];
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].spec.kind.hook(), Some("g-broken"));
    assert_eq!(parked[0].last_error, "exit status 1");
    let dump = engine.queues().await;
    assert_eq!(
        dump[0].parked.len(),
        1,
        "the queue dump shows the parked task"
    );
}

#[tokio::test(start_paused = true)]
async fn a_global_hooks_config_patch_of_a_module_flag_reaches_the_config_map_and_disables_it() {
    let world = World::default();
    let (mut global, modules) = standard_hooks(&world);
    global.push(global_hook("g-switch", "configVersion: v1\nonStartup: 2"));
    world.hooks.answer("g-switch", |_run| {
        Ok(HookResult {
            config_values_patch: r#"{"op": "add", "path": "/betaEnabled", "value": false}"#.into(),
            ..HookResult::default()
        })
    });
    let engine = world.engine(global, modules.clone()).await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let data = world.config_map.data().unwrap_or_default();
    assert_eq!(
        data.get("betaEnabled").map(String::as_str),
        Some("false"),
        "the flag is a ConfigMap key of its own"
    );
    assert!(
        world.count(|e| matches!(e, Event::ValuesPatched { source, .. } if source == "g-switch"))
            == 0,
        "it is not journaled as a global config value"
    );

    // The ConfigMap watch hands the new data to the engine, as for a user's edit.
    let (sections, _) =
        bosun_addon::modules::parse_config_map(&data, &modules, "addon-operator").expect("valid");
    engine.config_changed(sections).await.expect("accepted");
    wait_for("beta to be disabled and deleted", || async {
        world.releases.log().contains(&"uninstall beta".to_string())
    })
    .await;
    assert!(
        world.count(|e| matches!(e, Event::ModuleDisabled { module, .. } if module == "beta")) == 1
    );
}

/// The runs of `hook` whose first binding context is of `type` (`Synchronization`, `Event`).
fn contexts_of(world: &World, hook: &str, type_: &str) -> Vec<Value> {
    world
        .hooks
        .runs()
        .into_iter()
        .filter(|r| r.hook == hook && r.contexts[0]["type"] == type_)
        .map(|r| r.contexts)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_kubernetes_binding_runs_on_synchronization_with_its_snapshot_then_on_each_event() {
    let world = World::default();
    world.bindings.put(
        "ConfigMap",
        json!({"metadata": {"namespace": "default", "name": "first"}, "data": {"a": "1"}}),
    );
    let config = r#"configVersion: v1
kubernetes:
- name: cms
  kind: ConfigMap
  executeHookOnEvent: ["Added", "Deleted"]
"#;
    let engine = world
        .engine(vec![global_hook("watch", config)], Vec::new())
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    // Synchronization: every object the binding selects, as the snapshot holds them.
    let sync = contexts_of(&world, "watch", "Synchronization");
    assert_eq!(sync.len(), 1, "{sync:?}");
    assert_eq!(sync[0][0]["binding"], "cms");
    assert_eq!(
        sync[0][0]["objects"][0]["object"]["metadata"]["name"],
        "first"
    );

    // An Added object runs the hook with its event; a Modified one does not (not in
    // executeHookOnEvent); a Deleted one does.
    world.bindings.put(
        "ConfigMap",
        json!({"metadata": {"namespace": "default", "name": "second"}}),
    );
    wait_for("the Added event", || async {
        contexts_of(&world, "watch", "Event").iter().any(|c| {
            c[0]["watchEvent"] == "Added" && c[0]["object"]["metadata"]["name"] == "second"
        })
    })
    .await;
    world.bindings.put(
        "ConfigMap",
        json!({"metadata": {"namespace": "default", "name": "first"}, "data": {"a": "2"}}),
    );
    world.bindings.delete("ConfigMap", "default", "first");
    wait_for("the Deleted event", || async {
        contexts_of(&world, "watch", "Event")
            .iter()
            .any(|c| c[0]["watchEvent"] == "Deleted")
    })
    .await;
    let events: Vec<String> = contexts_of(&world, "watch", "Event")
        .iter()
        .flat_map(|c| c.as_array().cloned().unwrap_or_default())
        .map(|c| {
            format!(
                "{} {}",
                c["watchEvent"].as_str().unwrap_or_default(),
                c["object"]["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(events, ["Added second", "Deleted first"], "no Modified run");
    // The hook's bindings run until its owner stops them.
    assert_eq!(world.bindings.started(), ["global/watch"]);
}

#[tokio::test(start_paused = true)]
async fn delete_hooks_see_their_bindings_snapshots_and_the_bindings_stop_after() {
    let world = World::default();
    world.bindings.put(
        "Secret",
        json!({"metadata": {"namespace": "default", "name": "kept"}}),
    );
    world.hooks.config(
        "gamma/hooks/c",
        r#"configVersion: v1
beforeDeleteHelm: 1
afterDeleteHelm: 1
kubernetes:
- name: secrets
  kind: Secret
  executeHookOnEvent: []
  executeHookOnSynchronization: false
"#,
    );
    let modules = vec![module("gamma", 10, &["gamma/hooks/c"])];
    let engine = world.engine(Vec::new(), modules.clone()).await;
    wait_for("the first converge", || async { engine.converged() }).await;
    assert_eq!(world.bindings.started(), ["module/gamma/gamma/hooks/c"]);

    let data: std::collections::BTreeMap<String, String> =
        [("gammaEnabled".to_string(), "false".to_string())].into();
    let (sections, _) =
        bosun_addon::modules::parse_config_map(&data, &modules, "addon-operator").expect("valid");
    engine.config_changed(sections).await.expect("accepted");
    wait_for("gamma deleted", || async {
        world
            .releases
            .log()
            .contains(&"uninstall gamma".to_string())
            && !world
                .hooks
                .runs()
                .iter()
                .all(|r| r.binding != "afterDeleteHelm")
    })
    .await;
    for binding in ["beforeDeleteHelm", "afterDeleteHelm"] {
        let run = world
            .hooks
            .runs()
            .into_iter()
            .find(|r| r.binding == binding)
            .unwrap_or_else(|| panic!("{binding} ran"));
        assert_eq!(
            run.contexts[0]["snapshots"]["secrets"][0]["object"]["metadata"]["name"], "kept",
            "{binding}: {}",
            run.contexts
        );
    }
    wait_for("the bindings stopped", || async {
        world.bindings.started().is_empty()
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn global_values_changed_by_after_all_hooks_reload_all_modules_once() {
    let world = World::default();
    let (mut global, modules) = standard_hooks(&world);
    global.push(global_hook("g-last", "configVersion: v1\nafterAll: 10"));
    // The same value each time: the first afterAll changes the global values, the one of
    // the reload does not.
    world.hooks.answer(
        "g-last",
        memory_patch("/global/seenByAfterAll", json!(true)),
    );
    let engine = world.engine(global, modules).await;
    wait_for("the reload after afterAll", || async {
        converges_finished(&world) >= 2
    })
    .await;
    let reasons: Vec<String> = world
        .journal
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::ConvergeStarted { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        ["OperatorStartup", "AfterAll-Hooks-Change-GlobalValues"],
        "one reload, not a loop"
    );
    assert!(engine.converged());
    // Every module ran again in the reload.
    let a_runs = world
        .runs()
        .iter()
        .filter(|r| *r == "beforeHelm:alpha/hooks/a")
        .count();
    assert_eq!(a_runs, 2);
}

/// As addon-operator's ModuleRun: a run that fails after its onStartup hooks succeeded
/// is retried from where it failed; onStartup does not run again.
#[tokio::test(start_paused = true)]
async fn a_failed_module_run_is_retried_without_running_on_startup_again() {
    let world = World::default();
    world.hooks.config(
        "alpha/hooks/a",
        "configVersion: v1\nonStartup: 1\nbeforeHelm: 1",
    );
    let failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = Arc::clone(&failures);
    world.hooks.answer("alpha/hooks/a", move |run| {
        if run.binding_context[0]["binding"] == "beforeHelm"
            && seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0
        {
            return Err(PortError::transient("beforeHelm fails once"));
        }
        Ok(HookResult::default())
    });
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &["alpha/hooks/a"])])
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let runs = world.runs();
    let count = |what: &str| runs.iter().filter(|r| *r == what).count();
    assert_eq!(count("onStartup:alpha/hooks/a"), 1, "{runs:?}");
    assert_eq!(count("beforeHelm:alpha/hooks/a"), 2, "{runs:?}");
    assert_eq!(world.releases.log(), ["upgrade alpha"]);
}
