//! Modules and global hooks in-process: the scenarios of `tests/addon/engine_modules.rs`
//! and `engine_global_hooks.rs` with every port faked. What an addon-operator user sees:
//! hook order and what each hook receives (values, config values, binding contexts),
//! releases and their values, module state, the ConfigMap, hook metrics.

mod world;

use std::sync::Arc;
use std::time::Duration;

use bosun_addon::ModulePhase;
use bosun_addon::fakes::ALWAYS;
use bosun_addon::modules::ConfigSections;
use bosun_addon::ports::{HookResult, PortError};
use bosun_addon::schema::ValuesSchemas;
use bosun_addon::{Event, TaskEvent};
use serde_json::{Value, json};
use world::{Options, World, global_hook, module, values_patch, wait_for};

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("YAML")
}

#[tokio::test(start_paused = true)]
async fn global_hooks_run_in_order_with_the_file_contract_and_patches_flow() {
    let world = World::default();
    world.config_map.put("global", "param1: 200\n");
    world.hooks.answer("first", |_run| {
        Ok(HookResult {
            values_patch: json!([{"op": "add", "path": "/global/fromFirst", "value": "memory"}])
                .to_string(),
            config_values_patch:
                json!([{"op": "add", "path": "/global/param3", "value": "newValue"}]).to_string(),
            ..HookResult::default()
        })
    });
    let engine = world
        .engine_with(
            vec![
                global_hook("first", "configVersion: v1\nonStartup: 1"),
                global_hook(
                    "second",
                    "configVersion: v1\nonStartup: 2\nbeforeAll: 1\nafterAll: 1",
                ),
            ],
            Vec::new(),
            Options {
                static_global: json!({"param1": 100, "param2": "Yes"}),
                ..Options::default()
            },
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;

    assert_eq!(
        world.runs(),
        [
            "onStartup:first",
            "onStartup:second",
            "beforeAll:second",
            "afterAll:second"
        ]
    );
    let first = &world.runs_of("first")[0];
    assert_eq!(first.contexts, json!([{"binding": "onStartup"}]));
    assert_eq!(
        first.values,
        json!({"global": {"param1": 200, "param2": "Yes"}}),
        "static values under the ConfigMap's"
    );
    assert_eq!(first.config_values, json!({"global": {"param1": 200}}));
    // The second hook sees the first hook's memory and config patches.
    let second = world.runs_of("second");
    assert_eq!(
        second[0].values,
        json!({"global": {"param1": 200, "param2": "Yes", "param3": "newValue", "fromFirst": "memory"}})
    );
    assert_eq!(
        second[1].contexts,
        json!([{"binding": "beforeAll", "snapshots": {}}])
    );
    // The config patch landed in the ConfigMap, as YAML.
    let data = world.config_map.data().unwrap_or_default();
    assert_eq!(
        yaml(&data["global"]),
        json!({"param1": 200, "param3": "newValue"})
    );

    // Editing the ConfigMap reloads: beforeAll hooks run again with the new config values.
    let queued = world
        .edit_config_map(
            &engine,
            &[],
            &[("global", "param1: 300\nparam3: newValue\n")],
        )
        .await;
    assert_eq!(queued, ["ConvergeModules:ReloadAllModules"]);
    wait_for("a reload with the edited config values", || async {
        world.converges_finished() == 2
    })
    .await;
    assert_eq!(
        world.converge_reasons(),
        ["OperatorStartup", "ReloadAllModules"]
    );
    let reload = world
        .runs_of("second")
        .into_iter()
        .rfind(|r| r.binding == "beforeAll")
        .expect("beforeAll ran again");
    assert_eq!(reload.values["global"]["param1"], 300);
    assert_eq!(
        world.runs_of("first").len(),
        1,
        "onStartup hooks run once, not on a reload"
    );
}

#[tokio::test(start_paused = true)]
async fn a_module_section_change_runs_only_that_module_with_the_new_config_values() {
    let world = World::default();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1")
        .config("beta/hooks/b", "configVersion: v1\nbeforeHelm: 1");
    let modules = vec![
        module("alpha", 10, &["alpha/hooks/a"]),
        module("beta", 20, &["beta/hooks/b"]),
    ];
    let engine = world.engine(Vec::new(), modules.clone()).await;
    wait_for("the first converge", || async { engine.converged() }).await;

    let queued = world
        .edit_config_map(&engine, &modules, &[("alpha", "replicas: 2\n")])
        .await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert!(queued[0].starts_with("ModuleRun:"), "{queued:?}");
    wait_for("alpha's second release", || async {
        world.releases.revisions().get("alpha") == Some(&2)
    })
    .await;
    let last = world.runs_of("alpha/hooks/a").pop().expect("alpha ran");
    assert_eq!(last.values["alpha"]["replicas"], 2);
    assert_eq!(last.config_values["alpha"], json!({"replicas": 2}));
    assert_eq!(
        world.releases.values("alpha").expect("values")["alpha"]["replicas"],
        2,
        "Helm gets the new values"
    );
    assert_eq!(
        world.runs_of("beta/hooks/b").len(),
        1,
        "beta is not run again"
    );
    assert_eq!(world.releases.revisions()["beta"], 1);
    assert_eq!(
        world.converges_finished(),
        1,
        "no converge for a module section"
    );
    assert_eq!(
        engine.module_config("alpha").await.expect("config"),
        json!({"global": {}, "alpha": {"replicas": 2}})
    );
}

#[tokio::test(start_paused = true)]
async fn failing_modules_name_their_cause_and_the_others_still_converge() {
    let world = World::default();
    world.releases.fail_renders(
        "broken-chart",
        ALWAYS,
        PortError::permanent(
            "template: broken-chart/templates/t.yaml:1: nil pointer evaluating .nope.missing",
        ),
    );
    world.hooks.fail_enabled(
        "bad-script",
        ALWAYS,
        PortError::permanent("exit status 3: cannot decide"),
    );
    let mut bad = module("bad-script", 901, &[]);
    bad.enabled_script = Some("bad-script/enabled".into());
    let engine = world
        .engine_with(
            Vec::new(),
            vec![
                module("good", 10, &[]),
                module("broken-chart", 900, &[]),
                bad,
            ],
            Options {
                max_attempts: Some(2),
                ..Options::default()
            },
        )
        .await;
    wait_for("the converge past both parked runs", || async {
        engine.converged()
    })
    .await;

    assert_eq!(world.releases.log(), ["upgrade good"]);
    let state = world.state();
    let parked = &state.tasks.parked["main"];
    assert_eq!(
        parked.len(),
        2,
        "both failing runs parked, the queue went on"
    );
    let error_of = |module: &str| {
        parked
            .iter()
            .find(|t| t.spec.kind.module() == Some(module))
            .map(|t| t.last_error.clone())
            .unwrap_or_default()
    };
    let broken = error_of("broken-chart");
    assert!(
        broken.contains("module broken-chart") && broken.contains("nil pointer"),
        "{broken}"
    );
    let script = error_of("bad-script");
    assert!(
        script.contains("module bad-script")
            && script.contains("enabled")
            && script.contains("cannot decide"),
        "{script}"
    );
    assert_eq!(state.modules["good"].phase, ModulePhase::Ready);
    assert_ne!(state.modules["broken-chart"].phase, ModulePhase::Ready);
}

#[tokio::test(start_paused = true)]
async fn an_enabled_script_sees_the_modules_enabled_before_it() {
    let world = World::default();
    let enabled_modules = |run: &bosun_addon::ports::EnabledRun| -> Vec<String> {
        run.values["global"]["enabledModules"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m.as_str().map(String::from))
            .collect()
    };
    world
        .hooks
        .enabled("skipped", false)
        .enabled_by("third", move |run| enabled_modules(run) == ["first"]);
    let scripted = |name: &str, order: u32| {
        let mut m = module(name, order, &[]);
        m.enabled_script = Some(format!("{name}/enabled").into());
        m
    };
    let engine = world
        .engine(
            Vec::new(),
            vec![
                module("first", 10, &[]),
                scripted("skipped", 15),
                scripted("third", 30),
            ],
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;

    let seen: Vec<(String, Vec<String>)> = world
        .hooks
        .enabled_runs()
        .into_iter()
        .map(|r| (r.module, r.enabled_modules))
        .collect();
    assert_eq!(
        seen,
        [
            ("skipped".to_string(), vec!["first".to_string()]),
            ("third".to_string(), vec!["first".to_string()]),
        ],
        "a module its script disabled is not among the enabled ones"
    );
    assert_eq!(world.releases.log(), ["upgrade first", "upgrade third"]);
    assert_eq!(
        engine.modules(),
        [
            ("first".to_string(), true),
            ("skipped".to_string(), false),
            ("third".to_string(), true)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_module_disabled_by_its_script_is_left_out_of_the_enabled_modules_hooks_see() {
    let world = World::default();
    world
        .hooks
        .config("second/hooks/h", "configVersion: v1\nbeforeHelm: 1")
        .enabled_by("second", |run| {
            !run.values["global"]["enabledModules"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m == "first")
        });
    let mut second = module("second", 20, &["second/hooks/h"]);
    second.enabled_script = Some("second/enabled".into());
    let mut first = module("first", 10, &[]);
    first.static_enabled = Some(false);
    let modules = vec![first, second];
    let engine = world.engine(Vec::new(), modules.clone()).await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let run = &world.runs_of("second/hooks/h")[0];
    assert_eq!(run.values["global"]["enabledModules"], json!(["second"]));

    // first is enabled in the ConfigMap: second's script now says no, and second goes.
    world
        .edit_config_map(&engine, &modules, &[("firstEnabled", "true")])
        .await;
    wait_for("second uninstalled", || async {
        world
            .releases
            .log()
            .contains(&"uninstall second".to_string())
    })
    .await;
    assert_eq!(
        world.count(|e| matches!(e, Event::ModuleDisabled { module, reason }
            if module == "second" && reason == "script")),
        1
    );
    wait_for("the reload converge", || async {
        world.converges_finished() == 2
    })
    .await;
    assert_eq!(
        world.releases.log(),
        ["upgrade second", "uninstall second", "upgrade first"],
        "a converge deletes before it runs"
    );
}

#[tokio::test(start_paused = true)]
async fn a_values_change_in_after_helm_runs_the_module_again_once() {
    let world = World::default();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nafterHelm: 1")
        .answer(
            "alpha/hooks/a",
            values_patch(json!([{"op": "add", "path": "/alpha/deployed", "value": true}])),
        );
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &["alpha/hooks/a"])])
        .await;
    wait_for("the run after afterHelm changed the values", || async {
        engine.converged() && world.runs_of("alpha/hooks/a").len() == 2
    })
    .await;
    wait_for("the queue to be empty", || async {
        engine.queues().await.iter().all(|q| q.tasks.is_empty())
    })
    .await;
    assert!(
        world
            .enqueued()
            .iter()
            .any(|d| d.contains("AfterHelmValuesChanged")),
        "{:?}",
        world.enqueued()
    );
    assert_eq!(
        world.runs_of("alpha/hooks/a").len(),
        2,
        "the second afterHelm changes nothing: no third run"
    );
    assert_eq!(world.releases.log(), ["upgrade alpha", "upgrade alpha"]);
    assert_eq!(
        world.releases.values("alpha").expect("values")["alpha"]["deployed"],
        true,
        "the second release has the value afterHelm set"
    );
}

#[tokio::test(start_paused = true)]
async fn invalid_config_values_are_refused_naming_the_module_and_field() {
    let world = World::default();
    let mut alpha = module("alpha", 10, &[]);
    alpha.schemas = Arc::new(
        ValuesSchemas::new(
            "alpha",
            Some(yaml(
                "type: object\nadditionalProperties: false\nproperties:\n  replicas: {type: integer}\n",
            )),
            None,
        )
        .expect("schema"),
    );
    let modules = vec![alpha];
    let engine = world.engine(Vec::new(), modules.clone()).await;
    wait_for("the first converge", || async { engine.converged() }).await;

    let err = engine
        .config_changed(ConfigSections {
            global: json!({}),
            modules: [("alpha".to_string(), json!({"replicas": "three"}))].into(),
            flags: Default::default(),
        })
        .await
        .expect_err("refused")
        .to_string();
    assert!(err.contains("alpha") && err.contains("replicas"), "{err}");
    assert_eq!(
        engine.module_config("alpha").await.expect("config")["alpha"],
        json!({}),
        "the module keeps its values"
    );
    assert_eq!(world.releases.revisions()["alpha"], 1, "nothing was run");
}

#[tokio::test(start_paused = true)]
async fn a_values_patch_that_breaks_the_schema_fails_the_hook_naming_it_and_keeps_the_values() {
    let world = World::default();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1")
        .answer(
            "alpha/hooks/a",
            values_patch(json!([{"op": "add", "path": "/alpha/replicas", "value": "many"}])),
        );
    let mut alpha = module("alpha", 10, &["alpha/hooks/a"]);
    alpha.schemas = Arc::new(
        ValuesSchemas::new(
            "alpha",
            None,
            Some(yaml(
                "type: object\nproperties:\n  replicas: {type: integer}\n",
            )),
        )
        .expect("schema"),
    );
    let engine = world
        .engine_with(
            Vec::new(),
            vec![alpha],
            Options {
                max_attempts: Some(1),
                ..Options::default()
            },
        )
        .await;
    wait_for("the converge past the parked run", || async {
        engine.converged()
    })
    .await;
    let errors = world.task_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("module alpha")
            && errors[0].contains("alpha/hooks/a")
            && errors[0].contains("replicas"),
        "{}",
        errors[0]
    );
    assert!(
        world.releases.log().is_empty(),
        "no release with bad values"
    );
    assert_eq!(
        engine.module_values("alpha").await.expect("values")["alpha"],
        json!({}),
        "the rejected patch left the values as they were"
    );
}

#[tokio::test(start_paused = true)]
async fn bad_hook_output_fails_the_task_with_a_named_error_and_parking_keeps_the_queue_going() {
    let world = World::default();
    world.hooks.answer("g-bad", |_run| {
        Ok(HookResult {
            values_patch: "this is not a JSON patch".into(),
            ..HookResult::default()
        })
    });
    world.hooks.answer("g-metrics", |_run| {
        Ok(HookResult {
            metrics: r#"{"name":"g_runs","action":"add","value":1,"labels":{"kind":"startup"}}"#
                .into(),
            ..HookResult::default()
        })
    });
    let engine = world
        .engine_with(
            vec![
                global_hook("g-bad", "configVersion: v1\nonStartup: 1"),
                global_hook("g-metrics", "configVersion: v1\nonStartup: 2"),
            ],
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
    let errors = world.task_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("g-bad") && errors[0].contains("VALUES_JSON_PATCH_PATH"),
        "{}",
        errors[0]
    );
    assert_eq!(world.state().tasks.parked["main"].len(), 1);
    // The next hook ran, and its metrics are served.
    let metrics = engine.hook_metrics.render();
    assert!(
        metrics.contains("g_runs") && metrics.contains("kind=\"startup\""),
        "{metrics}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_disabled_module_runs_its_delete_hooks_around_the_uninstall() {
    let world = World::default();
    let releases = world.releases.clone();
    world
        .hooks
        .config(
            "gamma/hooks/c",
            "configVersion: v1\nbeforeDeleteHelm: 1\nafterDeleteHelm: 1",
        )
        .answer("gamma/hooks/c", move |run| {
            // What Helm had done when the hook ran: written where the test reads it.
            let uninstalled = releases.log().contains(&"uninstall gamma".to_string());
            let expected = run.binding_context[0]["binding"] == "afterDeleteHelm";
            if uninstalled == expected {
                Ok(HookResult::default())
            } else {
                Err(PortError::permanent(format!(
                    "{} ran with the release uninstalled: {uninstalled}",
                    run.binding_context[0]["binding"]
                )))
            }
        });
    let modules = vec![module("gamma", 10, &["gamma/hooks/c"])];
    let engine = world.engine(Vec::new(), modules.clone()).await;
    wait_for("the first converge", || async { engine.converged() }).await;
    world
        .edit_config_map(&engine, &modules, &[("gammaEnabled", "false")])
        .await;
    wait_for("gamma disabled", || async {
        world
            .state()
            .modules
            .get("gamma")
            .is_some_and(|m| m.phase == ModulePhase::Disabled)
    })
    .await;
    assert_eq!(
        world.runs(),
        [
            "beforeDeleteHelm:gamma/hooks/c",
            "afterDeleteHelm:gamma/hooks/c"
        ]
    );
    assert!(world.task_errors().is_empty(), "{:?}", world.task_errors());
    assert!(world.releases.revisions().is_empty());
    let state = world.state();
    assert!(!state.modules["gamma"].enabled);
    assert_eq!(
        world.count(|e| matches!(e, Event::ReleaseDeleted { module } if module == "gamma")),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_module_enabled_again_runs_its_on_startup_hooks_again_and_is_installed_anew() {
    let world = World::default();
    world.hooks.config(
        "alpha/hooks/a",
        "configVersion: v1\nonStartup: 1\nbeforeHelm: 1",
    );
    let modules = vec![module("alpha", 10, &["alpha/hooks/a"])];
    let engine = world.engine(Vec::new(), modules.clone()).await;
    wait_for("the first converge", || async { engine.converged() }).await;
    world
        .edit_config_map(&engine, &modules, &[("alphaEnabled", "false")])
        .await;
    wait_for("alpha uninstalled", || async {
        world.releases.revisions().is_empty() && world.converges_finished() == 2
    })
    .await;
    world
        .edit_config_map(&engine, &modules, &[("alphaEnabled", "true")])
        .await;
    wait_for("alpha installed again", || async {
        world.releases.revisions().get("alpha") == Some(&1) && world.converges_finished() == 3
    })
    .await;
    assert_eq!(
        world.runs(),
        [
            "onStartup:alpha/hooks/a",
            "beforeHelm:alpha/hooks/a",
            "onStartup:alpha/hooks/a",
            "beforeHelm:alpha/hooks/a"
        ]
    );
    assert_eq!(
        world.releases.log(),
        ["upgrade alpha", "uninstall alpha", "upgrade alpha"]
    );
    let reasons: Vec<String> = world
        .journal
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ModuleEnabled { module, reason } | Event::ModuleDisabled { module, reason }
                if module == "alpha" =>
            {
                Some(reason)
            }
            _ => None,
        })
        .collect();
    assert_eq!(reasons, ["static", "configmap", "configmap"]);
}

#[tokio::test(start_paused = true)]
async fn a_global_hook_s_values_patch_of_a_module_flag_enables_it_dynamically() {
    let world = World::default();
    world.hooks.answer(
        "g-enable",
        values_patch(json!([{"op": "add", "path": "/optionalEnabled", "value": true}])),
    );
    let mut optional = module("optional", 10, &[]);
    optional.static_enabled = Some(false);
    let engine = world
        .engine(
            vec![global_hook("g-enable", "configVersion: v1\nonStartup: 1")],
            vec![optional],
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    assert_eq!(world.releases.log(), ["upgrade optional"]);
    assert_eq!(
        world.count(|e| matches!(e, Event::ModuleEnabled { module, reason }
            if module == "optional" && reason == "dynamic")),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn an_object_deleted_from_a_release_is_healed_by_the_resource_monitor() {
    let world = World::default();
    world.releases.renders(
        "alpha",
        vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "alpha-settings", "namespace": "default"}})],
    );
    let engine = world
        .engine_with(
            Vec::new(),
            vec![module("alpha", 10, &[])],
            Options {
                monitor_interval: Duration::from_millis(20),
                ..Options::default()
            },
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    assert_eq!(
        engine.resource_monitors(),
        json!({"alpha": ["ConfigMap/default/alpha-settings"]})
    );
    world
        .releases
        .delete_object("ConfigMap/default/alpha-settings");
    wait_for("the release upgraded again", || async {
        world.releases.revisions().get("alpha") == Some(&2)
    })
    .await;
    assert!(
        world
            .journal
            .events()
            .iter()
            .any(|e| matches!(e, Event::Task(TaskEvent::TaskEnqueued { task, .. })
                if task.kind.module() == Some("alpha") && task.description.contains("HelmResourcesDrifted"))),
        "the repair says why: {:?}",
        world.enqueued()
    );
    assert_eq!(world.releases.log(), ["upgrade alpha", "upgrade alpha"]);
}

#[tokio::test(start_paused = true)]
async fn a_release_someone_left_failed_is_repaired_by_the_resource_monitor() {
    let world = World::default();
    let engine = world
        .engine_with(
            Vec::new(),
            vec![module("alpha", 10, &[])],
            Options {
                monitor_interval: Duration::from_millis(20),
                ..Options::default()
            },
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    world.releases.set_status("alpha", "failed");
    wait_for("the release upgraded again", || async {
        world.releases.revisions().get("alpha") == Some(&2)
    })
    .await;
    assert!(
        world
            .enqueued()
            .iter()
            .any(|d| d.contains("HelmReleaseUnexpectedStatus")),
        "{:?}",
        world.enqueued()
    );
    assert_eq!(world.state().modules["alpha"].revision, 2);
}

#[tokio::test(start_paused = true)]
async fn after_a_kill_values_and_a_failing_task_resume_from_the_journal() {
    let world = World::default();
    world
        .hooks
        .answer(
            "g-remember",
            values_patch(
                json!([{"op": "add", "path": "/global/remembered", "value": "from-before"}]),
            ),
        )
        .fail("g-flaky", ALWAYS, PortError::transient("not allowed yet"));
    let global = vec![
        global_hook("g-remember", "configVersion: v1\nonStartup: 1"),
        global_hook("g-flaky", "configVersion: v1\nonStartup: 2"),
    ];
    let _killed = world.engine(global.clone(), Vec::new()).await;
    wait_for("the flaky hook's failure journaled", || async {
        !world.task_errors().is_empty()
    })
    .await;
    let pending = world
        .state()
        .tasks
        .queues
        .get("main")
        .and_then(|q| {
            q.iter()
                .find(|t| t.spec.kind.hook() == Some("g-flaky"))
                .cloned()
        })
        .expect("the failing task is pending in the journal");
    assert_eq!(pending.last_error, "not allowed yet");

    // Killed; the hook is fixed; bosun starts again on what its journal holds.
    let world = world.after_kill();
    world.hooks.answer(
        "g-remember",
        values_patch(json!([{"op": "add", "path": "/global/remembered", "value": "from-before"}])),
    );
    let second = world.engine(global, Vec::new()).await;
    wait_for("the converge after the restart", || async {
        second.converged()
    })
    .await;

    // onStartup runs once per start, and the first run after the restart already saw the
    // memory patch from before.
    let remember = world.runs_of("g-remember");
    assert_eq!(remember.len(), 1);
    assert_eq!(
        remember[0].values,
        json!({"global": {"remembered": "from-before"}})
    );
    // The same task resumed with its attempt count, and nothing else re-ran it.
    let events = world.journal.events();
    let attempts: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::Task(TaskEvent::TaskStarted { id, attempt }) if *id == pending.spec.id => {
                Some(*attempt)
            }
            _ => None,
        })
        .collect();
    assert!(
        attempts.len() >= 2 && attempts.windows(2).all(|w| w[1] == w[0] + 1),
        "attempts continue across the restart: {attempts:?}"
    );
    let flaky_tasks = events
        .iter()
        .filter(|e| matches!(e, Event::Task(TaskEvent::TaskEnqueued { task, .. }) if task.kind.hook() == Some("g-flaky")))
        .count();
    assert_eq!(
        flaky_tasks, 1,
        "the pending task was reused, not duplicated"
    );
    assert_eq!(world.runs_of("g-flaky").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn hooks_of_one_binding_run_by_their_order_then_by_name() {
    let world = World::default();
    world
        .hooks
        .config(
            "alpha/hooks/b-second",
            "configVersion: v1\nbeforeHelm: 5\nafterHelm: 1",
        )
        .config("alpha/hooks/a-third", "configVersion: v1\nbeforeHelm: 10")
        .config(
            "alpha/hooks/z-first",
            "configVersion: v1\nbeforeHelm: 1\nafterHelm: 1",
        );
    let engine = world
        .engine(
            vec![
                global_hook("g-late", "configVersion: v1\nbeforeAll: 20\nafterAll: 1"),
                global_hook("g-b", "configVersion: v1\nbeforeAll: 5"),
                global_hook("g-a", "configVersion: v1\nbeforeAll: 5\nafterAll: 1"),
            ],
            vec![module(
                "alpha",
                10,
                &[
                    "alpha/hooks/a-third",
                    "alpha/hooks/b-second",
                    "alpha/hooks/z-first",
                ],
            )],
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    assert_eq!(
        world.runs(),
        [
            "beforeAll:g-a",
            "beforeAll:g-b",
            "beforeAll:g-late",
            "beforeHelm:alpha/hooks/z-first",
            "beforeHelm:alpha/hooks/b-second",
            "beforeHelm:alpha/hooks/a-third",
            "afterHelm:alpha/hooks/b-second",
            "afterHelm:alpha/hooks/z-first",
            "afterAll:g-a",
            "afterAll:g-late",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn static_config_and_memory_values_layer_for_hooks_and_helm() {
    let world = World::default();
    world
        .config_map
        .put("alpha", "replicas: 2\nimage: from-config\n");
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1")
        .answer(
            "alpha/hooks/a",
            values_patch(json!([{"op": "add", "path": "/alpha/image", "value": "from-memory"}])),
        );
    let mut alpha = module("alpha", 10, &["alpha/hooks/a"]);
    alpha.static_values = json!({"replicas": 1, "image": "from-static", "port": 80});
    let engine = world
        .engine_with(
            Vec::new(),
            vec![alpha],
            Options {
                static_global: json!({"clusterName": "test"}),
                ..Options::default()
            },
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let run = &world.runs_of("alpha/hooks/a")[0];
    assert_eq!(
        run.values,
        json!({"global": {"clusterName": "test", "enabledModules": ["alpha"]},
               "alpha": {"replicas": 2, "image": "from-config", "port": 80}}),
        "the hook sees static values under the ConfigMap's"
    );
    assert_eq!(
        run.config_values,
        json!({"global": {}, "alpha": {"replicas": 2, "image": "from-config"}})
    );
    assert_eq!(
        world.releases.values("alpha").expect("values"),
        json!({"global": {"clusterName": "test"},
               "alpha": {"replicas": 2, "image": "from-memory", "port": 80}}),
        "Helm gets the memory patch on top"
    );
    assert_eq!(
        engine.module_values("alpha").await.expect("values")["alpha"]["image"],
        "from-memory"
    );
}

#[tokio::test(start_paused = true)]
async fn a_module_hook_s_config_patch_is_written_to_its_config_map_key() {
    let world = World::default();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1")
        .answer(
            "alpha/hooks/a",
            world::config_patch(
                json!([{"op": "add", "path": "/alpha/password", "value": "generated"}]),
            ),
        );
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &["alpha/hooks/a"])])
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let data = world.config_map.data().unwrap_or_default();
    assert_eq!(yaml(&data["alpha"]), json!({"password": "generated"}));
    assert_eq!(
        world.releases.values("alpha").expect("values")["alpha"]["password"],
        "generated"
    );
    assert_eq!(
        engine.module_config("alpha").await.expect("config")["alpha"],
        json!({"password": "generated"})
    );
    // The ConfigMap's echo of the write changes nothing: no second run.
    let queued = world
        .edit_config_map(&engine, &[module("alpha", 10, &["alpha/hooks/a"])], &[])
        .await;
    assert!(queued.is_empty(), "{queued:?}");
}

#[tokio::test(start_paused = true)]
async fn module_hook_metrics_are_served_with_the_module_s_label() {
    let world = World::default();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nafterHelm: 1")
        .answer("alpha/hooks/a", |_run| {
            Ok(HookResult {
                metrics: "{\"name\":\"alpha_objects\",\"action\":\"set\",\"value\":7}\n".into(),
                ..HookResult::default()
            })
        });
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &["alpha/hooks/a"])])
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let metrics = engine.hook_metrics.render();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("alpha_objects"))
        .unwrap_or_else(|| panic!("no alpha_objects in {metrics}"));
    assert!(
        line.contains("module=\"alpha\"")
            && line.contains("hook=\"alpha/hooks/a\"")
            && line.ends_with(" 7"),
        "{line}"
    );
}

#[tokio::test(start_paused = true)]
async fn module_render_shows_the_chart_with_the_current_values_and_names_a_render_error() {
    let world = World::default();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "alpha", "namespace": "default"}});
    world.releases.renders("alpha", vec![cm.clone()]);
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &[])])
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    assert_eq!(engine.module_render("alpha").await.expect("rendered"), [cm]);
    world.releases.fail_renders(
        "alpha",
        1,
        PortError::permanent("parse error at (alpha/templates/cm.yaml:3): unexpected \"}\""),
    );
    let err = engine
        .module_render("alpha")
        .await
        .expect_err("render error")
        .to_string();
    assert!(err.contains("alpha") && err.contains("cm.yaml:3"), "{err}");
    assert_eq!(
        world.releases.log(),
        ["upgrade alpha"],
        "render installs nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_field_the_api_server_rewrites_is_not_drift_but_a_deleted_object_still_is() {
    let world = World::default();
    let object = |name: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "namespace": "default"}})
    };
    world
        .releases
        .renders("alpha", vec![object("defaulted"), object("plain")])
        .rewrite_object("Deployment/default/defaulted");
    let engine = world
        .engine_with(
            Vec::new(),
            vec![module("alpha", 10, &[])],
            Options {
                monitor_interval: Duration::from_millis(20),
                ..Options::default()
            },
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let checks = world.releases.drift_checks();
    wait_for("ten checks of the resource monitor", || async {
        world.releases.drift_checks() >= checks + 10
    })
    .await;
    assert_eq!(
        world.releases.log(),
        ["upgrade alpha"],
        "a difference the upgrade left is settled, not upgraded in a loop"
    );

    world.releases.delete_object("Deployment/default/plain");
    wait_for("the deleted object healed", || async {
        world.releases.revisions().get("alpha") == Some(&2)
    })
    .await;
    let checks = world.releases.drift_checks();
    wait_for("ten more checks", || async {
        world.releases.drift_checks() >= checks + 10
    })
    .await;
    assert_eq!(world.releases.log(), ["upgrade alpha", "upgrade alpha"]);
}

#[tokio::test(start_paused = true)]
async fn a_config_map_conflict_on_a_module_hook_s_config_patch_is_written_by_the_retry() {
    let world = World::default();
    world.config_map.fail_saves(
        1,
        PortError::conflict(
            "the object has been modified; please apply your changes to the latest version",
        ),
    );
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1")
        .answer(
            "alpha/hooks/a",
            world::config_patch(json!([{"op": "add", "path": "/alpha/token", "value": "t-1"}])),
        );
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &["alpha/hooks/a"])])
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let errors = world.task_errors();
    assert!(
        errors.len() == 1
            && errors[0].contains("module alpha")
            && errors[0].contains("has been modified"),
        "{errors:?}"
    );
    let data = world.config_map.data().unwrap_or_default();
    assert_eq!(yaml(&data["alpha"]), json!({"token": "t-1"}));
    assert_eq!(
        world.releases.values("alpha").expect("values")["alpha"]["token"],
        "t-1"
    );
}

#[tokio::test(start_paused = true)]
async fn a_memory_patch_that_removes_a_value_stays_removed_after_a_kill() {
    let world = World::default();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1")
        .answer(
            "alpha/hooks/a",
            values_patch(json!([{"op": "remove", "path": "/alpha/debug"}])),
        );
    let mut alpha = module("alpha", 10, &["alpha/hooks/a"]);
    alpha.static_values = json!({"debug": true, "replicas": 1});
    let modules = vec![alpha];
    let killed = world.engine(Vec::new(), modules.clone()).await;
    wait_for("the first converge", || async { killed.converged() }).await;
    assert_eq!(
        world.releases.values("alpha").expect("values")["alpha"],
        json!({"replicas": 1})
    );

    let world = world.after_kill();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1");
    let engine = world.engine(Vec::new(), modules).await;
    wait_for("the converge after the restart", || async {
        engine.converged() && !world.runs_of("alpha/hooks/a").is_empty()
    })
    .await;
    assert_eq!(
        world.runs_of("alpha/hooks/a")[0].values["alpha"],
        json!({"replicas": 1}),
        "the removal survived the restart"
    );
    assert_eq!(
        world.releases.log(),
        ["upgrade alpha"],
        "the release rendered from the same values is not upgraded again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_module_disabled_before_a_kill_stays_deleted_without_its_delete_hooks_running_again() {
    let world = World::default();
    world.hooks.config(
        "gamma/hooks/c",
        "configVersion: v1\nbeforeHelm: 1\nafterDeleteHelm: 1",
    );
    let modules = vec![
        module("gamma", 10, &["gamma/hooks/c"]),
        module("delta", 20, &[]),
    ];
    let killed = world.engine(Vec::new(), modules.clone()).await;
    wait_for("the first converge", || async { killed.converged() }).await;
    world
        .edit_config_map(&killed, &modules, &[("gammaEnabled", "false")])
        .await;
    wait_for("gamma deleted", || async {
        world.converges_finished() == 2 && killed.converged()
    })
    .await;

    let world = world.after_kill();
    world.hooks.config(
        "gamma/hooks/c",
        "configVersion: v1\nbeforeHelm: 1\nafterDeleteHelm: 1",
    );
    let engine = world.engine(Vec::new(), modules).await;
    wait_for("the converge after the restart", || async {
        engine.converged() && world.converges_finished() == 3
    })
    .await;
    assert!(
        world.runs().is_empty(),
        "no hook of the disabled module runs again: {:?}",
        world.runs()
    );
    assert_eq!(
        world.releases.log(),
        ["upgrade gamma", "upgrade delta", "uninstall gamma"],
        "nothing installed or uninstalled again"
    );
    assert_eq!(
        engine.modules(),
        [("gamma".to_string(), false), ("delta".to_string(), true)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_module_disabled_while_its_run_is_in_progress_ends_uninstalled() {
    let world = World::default();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1");
    let gate = world.hooks.gate("alpha/hooks/a");
    let modules = vec![
        module("alpha", 10, &["alpha/hooks/a"]),
        module("beta", 20, &[]),
    ];
    let engine = Arc::new(world.engine(Vec::new(), modules.clone()).await);
    wait_for("alpha's beforeHelm held", || async {
        !world.runs_of("alpha/hooks/a").is_empty()
    })
    .await;
    let change = tokio::spawn({
        let (world, engine, modules) = (world.clone(), engine.clone(), modules.clone());
        async move {
            world
                .edit_config_map(&engine, &modules, &[("alphaEnabled", "false")])
                .await
        }
    });
    wait_for("alpha's actor to hold the new section", || async {
        engine.mailboxes.snapshot()["module/alpha"]
            .pending
            .iter()
            .any(|m| m.summary == "ConfigChanged")
    })
    .await;
    gate.open();
    let queued = change.await.expect("the change task ends");
    assert_eq!(
        queued,
        ["ConvergeModules:ReloadAllModules (restarting the converge in progress)"]
    );
    wait_for("the restarted converge", || async {
        engine.converged() && world.converges_finished() == 1
    })
    .await;
    let state = world.state();
    assert!(!state.modules["alpha"].enabled);
    assert_eq!(state.modules["alpha"].phase, ModulePhase::Disabled);
    assert!(
        !world.releases.revisions().contains_key("alpha"),
        "no release of the disabled module is left: {:?}",
        world.releases.log()
    );
    assert_eq!(world.releases.revisions().get("beta"), Some(&1));
}
