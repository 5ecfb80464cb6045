//! The addon engine when its ports fail, in-process: hooks that exit non-zero, Helm
//! operations that fail, ConfigMap writes that conflict, patches the API server refuses,
//! bindings that cannot start, watches that break. Each test says what an addon-operator
//! user sees: the task's error naming what failed, the retry, and the outcome once the
//! fault passes. A retry comes after the queue's backoff (5 s, then 6 s, by the wall
//! clock), so a test fails a port once or twice at most.

mod world;

use bosun_addon::ModulePhase;
use bosun_addon::fakes::ALWAYS;
use bosun_addon::ports::{HookResult, PortError};
use serde_json::json;
use world::{Options, World, config_patch, global_hook, module, object, object_names, wait_for};

#[tokio::test(start_paused = true)]
async fn a_global_hook_that_fails_twice_is_retried_until_it_succeeds_and_the_converge_finishes() {
    let world = World::default();
    world
        .hooks
        .fail("g-flaky", 2, PortError::transient("exit status 1"));
    let engine = world
        .engine(
            vec![
                global_hook("g-flaky", "configVersion: v1\nonStartup: 1"),
                global_hook("g-after", "configVersion: v1\nonStartup: 2"),
            ],
            Vec::new(),
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;

    assert_eq!(
        world.runs(),
        [
            "onStartup:g-flaky",
            "onStartup:g-flaky",
            "onStartup:g-flaky",
            "onStartup:g-after"
        ],
        "the failing task holds the head of the queue until it succeeds"
    );
    assert_eq!(world.task_errors(), ["exit status 1", "exit status 1"]);
    let state = world.state();
    assert!(
        state.tasks.parked.values().all(Vec::is_empty),
        "nothing is parked"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_before_helm_hook_names_module_and_binding_and_helm_waits_for_the_retry() {
    let world = World::default();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1")
        .fail("alpha/hooks/a", 1, PortError::transient("exit status 2"));
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &["alpha/hooks/a"])])
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;

    let errors = world.task_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("module alpha")
            && errors[0].contains("beforeHelm")
            && errors[0].contains("exit status 2"),
        "{}",
        errors[0]
    );
    assert_eq!(
        world.releases.log(),
        ["upgrade alpha"],
        "no upgrade before beforeHelm succeeded"
    );
    assert_eq!(world.state().modules["alpha"].phase, ModulePhase::Ready);
}

#[tokio::test(start_paused = true)]
async fn a_helm_upgrade_that_fails_is_retried_and_the_release_ends_deployed() {
    let world = World::default();
    world.releases.fail_upgrades(
        "alpha",
        1,
        PortError::transient("UPGRADE FAILED: context deadline exceeded"),
    );
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &[])])
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;

    let errors = world.task_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("alpha") && errors[0].contains("UPGRADE FAILED"),
        "{}",
        errors[0]
    );
    assert_eq!(world.releases.log(), ["upgrade alpha", "upgrade alpha"]);
    // The failed upgrade counted a revision, as Helm records a failed one.
    assert_eq!(world.releases.revisions()["alpha"], 2);
    let state = world.state();
    assert_eq!(state.modules["alpha"].revision, 2);
    assert_eq!(state.modules["alpha"].phase, ModulePhase::Ready);
}

#[tokio::test(start_paused = true)]
async fn a_chart_that_does_not_render_fails_the_run_without_touching_the_release() {
    let world = World::default();
    world.releases.fail_renders(
        "alpha",
        1,
        PortError::permanent("template: alpha/templates/cm.yaml:3: nil pointer"),
    );
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &[])])
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;

    let errors = world.task_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("alpha") && e.contains("nil pointer")),
        "{errors:?}"
    );
    assert_eq!(
        world.releases.log(),
        ["upgrade alpha"],
        "only the run that rendered upgraded"
    );
}

#[tokio::test(start_paused = true)]
async fn a_release_left_failed_is_upgraded_again_after_a_restart_though_its_values_did_not_change()
{
    let world = World::default();
    let modules = vec![module("alpha", 10, &[]), module("beta", 20, &[])];
    let first = world.engine(Vec::new(), modules.clone()).await;
    wait_for("the first converge", || async { first.converged() }).await;
    drop(first);

    // Someone's failed `helm upgrade` left alpha failed; beta is untouched.
    world.releases.set_status("alpha", "failed");
    let second = world.engine(Vec::new(), modules).await;
    wait_for("the converge after the restart", || async {
        second.converged() && world.converges_finished() == 2
    })
    .await;
    assert_eq!(
        world.releases.log(),
        ["upgrade alpha", "upgrade beta", "upgrade alpha"],
        "only the failed release is upgraded again"
    );
    assert_eq!(
        world.releases.revisions(),
        [("alpha".into(), 2), ("beta".into(), 1)].into()
    );
}

#[tokio::test(start_paused = true)]
async fn a_config_map_write_that_conflicts_is_retried_and_the_config_map_gets_the_values() {
    let world = World::default();
    world.config_map.fail_saves(
        1,
        PortError::conflict(
            "Operation cannot be fulfilled on configmaps \"addon-operator\": the object has been modified",
        ),
    );
    world.hooks.answer(
        "g-config",
        config_patch(json!([{"op": "add", "path": "/global/replicas", "value": 3}])),
    );
    let engine = world
        .engine(
            vec![global_hook("g-config", "configVersion: v1\nonStartup: 1")],
            Vec::new(),
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;

    let errors = world.task_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("g-config") && errors[0].contains("the object has been modified"),
        "{}",
        errors[0]
    );
    let data = world.config_map.data().unwrap_or_default();
    assert_eq!(
        data.get("global").map(|s| s.trim()),
        Some("replicas: 3"),
        "the retried run's write went through: {:?}",
        world.config_map.writes()
    );
    assert_eq!(
        engine.global_config().await.expect("global config")["global"]["replicas"],
        3
    );
}

#[tokio::test(start_paused = true)]
async fn a_module_flag_write_that_fails_fails_the_hook_and_the_retry_disables_the_module() {
    let world = World::default();
    world
        .config_map
        .fail_saves(1, PortError::transient("connection refused"));
    world.hooks.answer(
        "g-switch",
        config_patch(json!([{"op": "add", "path": "/betaEnabled", "value": false}])),
    );
    let engine = world
        .engine(
            vec![global_hook("g-switch", "configVersion: v1\nonStartup: 1")],
            vec![module("beta", 20, &[])],
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    assert!(
        world.task_errors()[0].contains("connection refused"),
        "{:?}",
        world.task_errors()
    );
    assert_eq!(
        world
            .config_map
            .data()
            .unwrap_or_default()
            .get("betaEnabled")
            .map(String::as_str),
        Some("false")
    );
    assert_eq!(world.runs_of("g-switch").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_patch_the_api_server_refuses_fails_the_hook_naming_it_and_the_retry_applies_it() {
    let world = World::default();
    let patch = r#"{"operation":"MergePatch","kind":"ConfigMap","namespace":"default","name":"x","mergePatch":{"data":{"a":"1"}}}"#;
    world.patcher.refuse(
        1,
        PortError::permanent(
            "operation 0 (MergePatch ConfigMap default/x): configmaps \"x\" is forbidden",
        ),
    );
    world.hooks.answer("g-patch", move |_run| {
        Ok(HookResult {
            kubernetes_patch: patch.into(),
            ..HookResult::default()
        })
    });
    let engine = world
        .engine(
            vec![global_hook("g-patch", "configVersion: v1\nonStartup: 1")],
            Vec::new(),
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;

    let errors = world.task_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("g-patch") && errors[0].contains("forbidden"),
        "{}",
        errors[0]
    );
    assert_eq!(world.patcher.refused().len(), 1);
    assert_eq!(
        world.patcher.seen(),
        [("g-patch".to_string(), patch.to_string())]
    );
}

#[tokio::test(start_paused = true)]
async fn an_enabled_script_that_errors_is_checked_again_after_the_other_modules_run() {
    let world = World::default();
    world
        .hooks
        .fail_enabled("alpha", 1, PortError::transient("enabled: exit status 1"));
    let mut alpha = module("alpha", 10, &[]);
    alpha.enabled_script = Some("alpha/enabled".into());
    let engine = world
        .engine(Vec::new(), vec![alpha, module("beta", 20, &[])])
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;

    assert_eq!(
        world.releases.log(),
        ["upgrade beta", "upgrade alpha"],
        "alpha, unsure, runs after beta once its script answers"
    );
    assert_eq!(
        world
            .hooks
            .enabled_runs()
            .iter()
            .map(|r| r.module.as_str())
            .collect::<Vec<_>>(),
        ["alpha", "alpha"]
    );
    assert!(engine.modules().iter().all(|(_, on)| *on));
}

#[tokio::test(start_paused = true)]
async fn a_binding_whose_watch_cannot_start_fails_its_task_naming_hook_and_binding_and_others_run()
{
    let world = World::default();
    world.bindings.fail_start(
        "Widget",
        ALWAYS,
        PortError::permanent("the server doesn't have a resource type \"Widget\""),
    );
    let engine = world
        .engine_with(
            vec![
                global_hook(
                    "unknown-kind",
                    "configVersion: v1\nkubernetes:\n- name: widgets\n  kind: Widget",
                ),
                global_hook(
                    "ticks",
                    "configVersion: v1\nkubernetes:\n- name: cms\n  kind: ConfigMap\n  queue: ticks\n  executeHookOnSynchronization: false",
                ),
            ],
            Vec::new(),
            Options {
                max_attempts: None,
                ..Options::default()
            },
        )
        .await;
    wait_for("the failure with its cause", || async {
        world.task_errors().iter().any(|e| {
            e.contains("unknown-kind") && e.contains("\"widgets\"") && e.contains("Widget")
        })
    })
    .await;
    // The operator keeps going: a hook whose bindings did start still runs on its events.
    wait_for("the other hook's bindings", || async {
        world
            .bindings
            .started()
            .contains(&"global/ticks".to_string())
    })
    .await;
    world
        .bindings
        .put("ConfigMap", object("ConfigMap", "default", "c1", json!({})));
    wait_for("the other hook's event run", || async {
        world
            .runs_of("ticks")
            .iter()
            .any(|r| object_names(r) == ["c1"])
    })
    .await;
    assert!(
        !engine.converged(),
        "the startup waits for the failing task"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_uninstall_keeps_the_module_s_bindings_for_the_retry_of_its_delete_hooks() {
    let world = World::default();
    world.hooks.config(
        "gamma/hooks/c",
        "configVersion: v1\nafterDeleteHelm: 1\nkubernetes:\n- name: secrets\n  kind: Secret\n  executeHookOnEvent: []\n  executeHookOnSynchronization: false",
    );
    let modules = vec![module("gamma", 10, &["gamma/hooks/c"])];
    let engine = world.engine(Vec::new(), modules.clone()).await;
    wait_for("the first converge", || async { engine.converged() }).await;
    world.releases.fail_uninstalls(
        "gamma",
        1,
        PortError::transient("uninstall: timed out waiting for the condition"),
    );
    world
        .edit_config_map(&engine, &modules, &[("gammaEnabled", "false")])
        .await;
    wait_for("gamma deleted", || async {
        world
            .runs()
            .contains(&"afterDeleteHelm:gamma/hooks/c".to_string())
            && world.bindings.started().is_empty()
    })
    .await;
    let errors = world.task_errors();
    assert!(
        errors.len() == 1 && errors[0].contains("gamma") && errors[0].contains("timed out"),
        "{errors:?}"
    );
    assert_eq!(
        world.releases.log(),
        ["upgrade gamma", "uninstall gamma", "uninstall gamma"]
    );
    assert!(world.releases.revisions().is_empty());
    assert_eq!(world.state().modules["gamma"].phase, ModulePhase::Disabled);
}

#[tokio::test(start_paused = true)]
async fn crds_that_fail_to_apply_are_applied_again_before_the_module_runs() {
    let world = World::default();
    world
        .releases
        .fail_apply(1, PortError::transient("etcdserver: request timed out"));
    let mut alpha = module("alpha", 10, &[]);
    alpha.crds = vec![
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                             "metadata": {"name": "widgets.example.com"}}),
    ];
    let engine = world.engine(Vec::new(), vec![alpha]).await;
    wait_for("the first converge", || async { engine.converged() }).await;
    assert_eq!(
        world.releases.log(),
        ["apply 1 objects", "apply 1 objects", "upgrade alpha"]
    );
    assert!(
        world.task_errors()[0].contains("cannot apply CRDs"),
        "{:?}",
        world.task_errors()
    );
}

#[tokio::test(start_paused = true)]
async fn an_orphan_release_is_purged_once_listing_releases_works_again() {
    let world = World::default();
    world
        .releases
        .existing("left-behind")
        .existing("kept-by-flag")
        .fail_list(1, PortError::transient("list releases: connection reset"));
    let engine = world
        .engine_with(
            Vec::new(),
            vec![module("alpha", 10, &[])],
            Options {
                ignore_releases: vec!["kept-by-flag".into()],
                ..Options::default()
            },
        )
        .await;
    wait_for("the orphan purged", || async {
        world
            .releases
            .log()
            .contains(&"uninstall left-behind".to_string())
    })
    .await;
    assert!(engine.converged());
    let errors = world.task_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("cannot list Helm releases"))
    );
    assert_eq!(
        world
            .releases
            .revisions()
            .keys()
            .cloned()
            .collect::<Vec<_>>(),
        ["alpha", "kept-by-flag"],
        "HELM_IGNORE_RELEASE keeps its release"
    );
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_breaks_and_resumes_delivers_what_changed_meanwhile_without_phantoms() {
    let world = World::default();
    for name in ["stays", "changes", "goes"] {
        world.bindings.put(
            "ConfigMap",
            json!({"metadata": {"namespace": "default", "name": name}, "data": {"v": "1"}}),
        );
    }
    let engine = world
        .engine(
            vec![global_hook(
                "mirror",
                "configVersion: v1\nkubernetes:\n- name: cms\n  kind: ConfigMap\n  jqFilter: .data",
            )],
            Vec::new(),
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;

    world.bindings.break_watch("ConfigMap");
    world.bindings.put(
        "ConfigMap",
        json!({"metadata": {"namespace": "default", "name": "changes"}, "data": {"v": "2"}}),
    );
    world.bindings.delete("ConfigMap", "default", "goes");
    world.bindings.put(
        "ConfigMap",
        json!({"metadata": {"namespace": "default", "name": "new"}, "data": {"v": "1"}}),
    );
    // Created and deleted while the watch was down: never seen at all.
    world.bindings.put(
        "ConfigMap",
        json!({"metadata": {"namespace": "default", "name": "phantom"}}),
    );
    world.bindings.delete("ConfigMap", "default", "phantom");
    assert_eq!(
        world.contexts("mirror").len(),
        1,
        "nothing arrives while the watch is down"
    );

    world.bindings.resume_watch("ConfigMap");
    wait_for("the relist's events", || async {
        world.contexts("mirror").len() >= 4
    })
    .await;
    let mut events: Vec<String> = world.contexts("mirror")[1..]
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["watchEvent"].as_str().unwrap_or_default(),
                c["object"]["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    events.sort();
    assert_eq!(events, ["Added new", "Deleted goes", "Modified changes"]);
    let snapshot = engine.snapshots(None);
    let names: Vec<&str> = snapshot["mirror"]["cms"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["object"]["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["changes", "new", "stays"],
        "no lost or phantom object"
    );
}

#[tokio::test(start_paused = true)]
async fn a_relist_after_an_api_server_restart_that_lost_objects_delivers_their_deletion() {
    let world = World::default();
    for name in ["a", "b"] {
        world
            .bindings
            .put("Pod", object("Pod", "default", name, json!({})));
    }
    let engine = world
        .engine(
            vec![global_hook(
                "pods",
                "configVersion: v1\nkubernetes:\n- name: pods\n  kind: Pod\n  jqFilter: .metadata.name",
            )],
            Vec::new(),
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    // The API server came back from a backup: b is gone, c exists, a is unchanged.
    world.bindings.replace_all(
        "Pod",
        vec![
            object("Pod", "default", "a", json!({})),
            object("Pod", "default", "c", json!({})),
        ],
    );
    wait_for("the relist's events", || async {
        world.contexts("pods").len() >= 3
    })
    .await;
    let events: Vec<(String, String)> = world.contexts("pods")[1..]
        .iter()
        .map(|c| {
            (
                c["watchEvent"].as_str().unwrap_or_default().to_string(),
                c["filterResult"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("Deleted".to_string(), "b".to_string()),
            ("Added".to_string(), "c".to_string())
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_module_hook_that_keeps_failing_shows_its_error_and_attempts_until_it_is_fixed() {
    let world = World::default();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1")
        .fail(
            "alpha/hooks/a",
            ALWAYS,
            PortError::transient("exit status 1: not ready"),
        );
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &["alpha/hooks/a"])])
        .await;
    wait_for("the second failure", || async {
        world.task_errors().len() >= 2
    })
    .await;

    // What `bosun queue list` shows: the ModuleRun at the head with its failures and cause.
    let dump = engine.queues().await;
    let head = &dump[0].tasks[0];
    assert_eq!(dump[0].name, "main");
    assert_eq!(head.spec.kind.module(), Some("alpha"));
    assert!(head.failures >= 2, "{head:?}");
    assert!(
        head.last_error.contains("module alpha")
            && head.last_error.contains("beforeHelm")
            && head.last_error.contains("not ready"),
        "{}",
        head.last_error
    );
    let state = world.state();
    assert_eq!(
        state.modules["alpha"].phase,
        ModulePhase::CanRunHelm,
        "the module waits before Helm"
    );
    assert!(world.releases.log().is_empty());
    assert!(!engine.converged());

    world
        .hooks
        .fail("alpha/hooks/a", 0, PortError::transient(""));
    wait_for("the first converge", || async { engine.converged() }).await;
    assert_eq!(world.state().modules["alpha"].phase, ModulePhase::Ready);
    assert_eq!(world.releases.log(), ["upgrade alpha"]);
}

#[tokio::test(start_paused = true)]
async fn a_module_synchronization_that_fails_stops_its_bindings_and_the_retry_starts_them_again() {
    let world = World::default();
    world
        .bindings
        .put("Pod", object("Pod", "default", "p1", json!({})));
    world
        .hooks
        .config(
            "watcher/hooks/pods",
            "configVersion: v1\nkubernetes:\n- name: pods\n  kind: Pod",
        )
        .fail(
            "watcher/hooks/pods",
            1,
            PortError::transient("exit status 1"),
        );
    let engine = world
        .engine(
            Vec::new(),
            vec![module("watcher", 10, &["watcher/hooks/pods"])],
        )
        .await;
    wait_for("the failure", || async { !world.task_errors().is_empty() }).await;
    let error = &world.task_errors()[0];
    assert!(
        error.contains("module watcher")
            && error.contains("Synchronization of binding \"pods\"")
            && error.contains("watcher/hooks/pods"),
        "{error}"
    );
    assert!(
        world.bindings.started().is_empty(),
        "a failed Synchronization leaves no watch behind"
    );
    wait_for("the first converge", || async { engine.converged() }).await;
    let runs = world.runs_of("watcher/hooks/pods");
    assert_eq!(runs.len(), 2, "Synchronization again in the retry");
    assert_eq!(runs[1].contexts[0]["type"], "Synchronization");
    assert_eq!(
        world.bindings.started(),
        ["module/watcher/watcher/hooks/pods"]
    );
    assert_eq!(world.releases.log(), ["upgrade watcher"]);
}

#[tokio::test(start_paused = true)]
async fn a_module_whose_watch_cannot_start_names_module_and_hook_and_runs_once_it_can() {
    let world = World::default();
    world.hooks.config(
        "crds/hooks/widgets",
        "configVersion: v1\nkubernetes:\n- name: widgets\n  kind: Widget",
    );
    world.bindings.fail_start(
        "Widget",
        1,
        PortError::transient("the server could not find the requested resource (Widget)"),
    );
    let engine = world
        .engine(
            Vec::new(),
            vec![module("crds", 10, &["crds/hooks/widgets"])],
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let errors = world.task_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("module crds")
            && errors[0].contains("crds/hooks/widgets")
            && errors[0].contains("\"widgets\"")
            && errors[0].contains("could not find"),
        "{}",
        errors[0]
    );
    assert_eq!(world.bindings.started(), ["module/crds/crds/hooks/widgets"]);
    assert_eq!(world.releases.log(), ["upgrade crds"]);
}

#[tokio::test(start_paused = true)]
async fn a_hook_whose_config_cannot_be_read_fails_the_module_run_naming_it_then_loads() {
    let world = World::default();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1")
        .fail_config(
            "alpha/hooks/a",
            1,
            PortError::transient("exit status 126: permission denied"),
        );
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &["alpha/hooks/a"])])
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let errors = world.task_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("module alpha")
            && errors[0].contains("alpha/hooks/a")
            && errors[0].contains("permission denied"),
        "{}",
        errors[0]
    );
    assert_eq!(world.runs(), ["beforeHelm:alpha/hooks/a"]);
}

#[tokio::test(start_paused = true)]
async fn disabling_a_module_whose_run_keeps_failing_ends_its_retries_and_the_converge() {
    let world = World::default();
    world
        .hooks
        .config("alpha/hooks/a", "configVersion: v1\nbeforeHelm: 1")
        .fail(
            "alpha/hooks/a",
            ALWAYS,
            PortError::transient("exit status 1"),
        );
    let modules = vec![
        module("alpha", 10, &["alpha/hooks/a"]),
        module("beta", 20, &[]),
    ];
    let engine = world.engine(Vec::new(), modules.clone()).await;
    wait_for("alpha's run failing", || async {
        !world.task_errors().is_empty()
    })
    .await;

    world
        .edit_config_map(&engine, &modules, &[("alphaEnabled", "false")])
        .await;
    wait_for("the converge without alpha", || async {
        engine.converged()
    })
    .await;
    let runs = world.runs_of("alpha/hooks/a").len();
    assert_eq!(
        world.releases.log(),
        ["uninstall alpha", "upgrade beta"],
        "alpha is deleted (it has no release) before beta runs"
    );
    assert!(!world.releases.revisions().contains_key("alpha"));
    let state = world.state();
    assert!(!state.modules["alpha"].enabled);
    assert_eq!(state.modules["alpha"].phase, ModulePhase::Disabled);
    assert!(
        engine.queues().await.iter().all(|q| q
            .tasks
            .iter()
            .all(|t| t.spec.kind.module() != Some("alpha"))),
        "no task of alpha is left to retry"
    );
    assert_eq!(
        world.runs_of("alpha/hooks/a").len(),
        runs,
        "alpha's hook does not run again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hook_removing_a_module_flag_is_retried_when_the_removal_fails_and_the_module_comes_back()
{
    let world = World::default();
    world.config_map.put("betaEnabled", "false");
    world
        .config_map
        .fail_removes(1, PortError::transient("etcdserver: leader changed"));
    world.hooks.answer(
        "g-unflag",
        config_patch(json!([{"op": "remove", "path": "/betaEnabled"}])),
    );
    let modules = vec![module("beta", 20, &[])];
    let engine = world
        .engine(
            vec![global_hook("g-unflag", "configVersion: v1\nonStartup: 1")],
            modules.clone(),
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    assert!(
        world.task_errors()[0].contains("leader changed"),
        "{:?}",
        world.task_errors()
    );
    assert_eq!(world.config_map.writes(), ["remove betaEnabled"]);
    assert!(world.releases.log().is_empty(), "beta is still off");

    // The ConfigMap watch brings the removal: beta falls back to its values.yaml flag.
    world.edit_config_map(&engine, &modules, &[]).await;
    wait_for("beta installed", || async {
        world.releases.revisions().contains_key("beta")
    })
    .await;
    assert!(engine.modules().contains(&("beta".to_string(), true)));
}

#[tokio::test(start_paused = true)]
async fn a_parked_module_run_comes_back_with_the_next_change_once_helm_works_again() {
    let world = World::default();
    world.releases.fail_upgrades(
        "alpha",
        ALWAYS,
        PortError::permanent("UPGRADE FAILED: admission webhook denied the request"),
    );
    let modules = vec![module("alpha", 10, &[])];
    let engine = world
        .engine_with(
            Vec::new(),
            modules.clone(),
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
    let state = world.state();
    assert_eq!(state.tasks.parked["main"].len(), 1);
    assert!(
        state.tasks.parked["main"][0]
            .last_error
            .contains("admission webhook denied"),
        "{:?}",
        state.tasks.parked["main"][0]
    );
    assert_ne!(state.modules["alpha"].phase, ModulePhase::Ready);

    // The webhook is fixed; the user changes the module's section.
    world
        .releases
        .fail_upgrades("alpha", 0, PortError::permanent(""));
    world
        .edit_config_map(&engine, &modules, &[("alpha", "fixed: true\n")])
        .await;
    wait_for("alpha ready", || async {
        world.state().modules["alpha"].phase == ModulePhase::Ready
    })
    .await;
    assert_eq!(world.releases.log(), ["upgrade alpha", "upgrade alpha"]);
    assert_eq!(
        world.releases.values("alpha").expect("values")["alpha"]["fixed"],
        true
    );
}

#[tokio::test] // the schedules fire by the wall clock
async fn a_scheduled_run_allowed_to_fail_is_not_retried_and_the_next_firing_runs() {
    let world = World::default();
    world
        .hooks
        .fail("cleanup", ALWAYS, PortError::transient("exit status 1"));
    let engine = world
        .engine(
            vec![global_hook(
                "cleanup",
                "configVersion: v1\nschedule:\n- name: every-second\n  crontab: '*/1 * * * * *'\n  allowFailure: true",
            )],
            Vec::new(),
        )
        .await;
    wait_for("two failed scheduled runs", || async {
        world.runs_of("cleanup").len() >= 2
    })
    .await;
    assert!(engine.converged());
    assert!(
        world.task_errors().is_empty(),
        "allowed failures fail no task: {:?}",
        world.task_errors()
    );
    assert!(
        engine.queues().await.iter().all(|q| q.parked.is_empty()),
        "nothing parked"
    );
}

#[tokio::test(start_paused = true)]
async fn events_during_a_failing_synchronization_are_delivered_after_its_retry_succeeds() {
    let world = World::default();
    world.bindings.put(
        "ConfigMap",
        object("ConfigMap", "default", "before", json!({})),
    );
    world
        .hooks
        .fail("watch", 1, PortError::transient("exit status 1"));
    let engine = world
        .engine(
            vec![global_hook(
                "watch",
                "configVersion: v1\nkubernetes:\n- name: cms\n  kind: ConfigMap",
            )],
            Vec::new(),
        )
        .await;
    wait_for("the failed Synchronization", || async {
        !world.task_errors().is_empty()
    })
    .await;
    world.bindings.put(
        "ConfigMap",
        object("ConfigMap", "default", "during", json!({})),
    );
    wait_for("the first converge", || async { engine.converged() }).await;
    wait_for("the event from during the failure", || async {
        world.runs_of("watch").len() >= 3
    })
    .await;
    let runs = world.runs_of("watch");
    let kinds: Vec<String> = runs
        .iter()
        .map(|r| {
            r.contexts[0]["type"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(kinds, ["Synchronization", "Synchronization", "Event"]);
    let synced: Vec<&str> = runs[1].contexts[0]["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["object"]["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        synced,
        ["before", "during"],
        "the retry sees the current objects"
    );
    // The event held since the failure follows, as shell-operator delivers the events it
    // held once the Synchronization ran, though that run already showed the object.
    assert_eq!(object_names(&runs[2]), ["during"]);
}

#[tokio::test(start_paused = true)]
async fn a_release_status_that_cannot_be_read_fails_the_run_before_any_upgrade() {
    let world = World::default();
    world.releases.existing("alpha").fail_status(
        "alpha",
        1,
        PortError::transient("list: secrets is forbidden: User cannot list resource"),
    );
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &[])])
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let errors = world.task_errors();
    assert!(
        errors.len() == 1 && errors[0].contains("alpha") && errors[0].contains("forbidden"),
        "{errors:?}"
    );
    assert_eq!(
        world.releases.log(),
        ["upgrade alpha"],
        "no upgrade without the release's status; one after it was read"
    );
    assert_eq!(world.releases.revisions()["alpha"], 2);
}

#[tokio::test(start_paused = true)]
async fn a_refused_object_patch_leaves_the_values_as_they_were_until_the_retry() {
    let world = World::default();
    world.patcher.refuse(
        1,
        PortError::conflict("operation 0: the object has been modified"),
    );
    world.hooks.answer("g-both", |_run| {
        Ok(HookResult {
            kubernetes_patch:
                r#"{"operation":"Delete","kind":"ConfigMap","namespace":"default","name":"old"}"#
                    .into(),
            values_patch: json!([{"op": "add", "path": "/global/cleaned", "value": true}])
                .to_string(),
            ..HookResult::default()
        })
    });
    let engine = world
        .engine(
            vec![
                global_hook("g-both", "configVersion: v1\nonStartup: 1"),
                global_hook("g-next", "configVersion: v1\nonStartup: 2"),
            ],
            Vec::new(),
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let runs = world.runs_of("g-both");
    assert_eq!(runs.len(), 2);
    assert_eq!(
        runs[1].values,
        json!({"global": {}}),
        "the failed run's values patch was not taken"
    );
    assert_eq!(world.runs_of("g-next")[0].values["global"]["cleaned"], true);
    assert_eq!(world.patcher.seen().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_orphan_release_that_cannot_be_uninstalled_is_left_and_the_operator_goes_on() {
    let world = World::default();
    world.releases.existing("left-behind").fail_uninstalls(
        "left-behind",
        ALWAYS,
        PortError::permanent("uninstall: release has resources with finalizers"),
    );
    let engine = world
        .engine(Vec::new(), vec![module("alpha", 10, &[])])
        .await;
    wait_for("the purge attempted", || async {
        world
            .releases
            .log()
            .contains(&"uninstall left-behind".to_string())
    })
    .await;
    wait_for("the queues idle", || async {
        engine.queues().await.iter().all(|q| q.tasks.is_empty())
    })
    .await;
    assert!(
        world.task_errors().is_empty(),
        "a failed purge is logged, as in the reference, not retried: {:?}",
        world.task_errors()
    );
    assert!(world.releases.revisions().contains_key("left-behind"));
    assert_eq!(
        world
            .releases
            .log()
            .iter()
            .filter(|l| *l == "uninstall left-behind")
            .count(),
        1
    );
}
