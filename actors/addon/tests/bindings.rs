//! Kubernetes and schedule bindings in-process: the scenarios of `tests/addon/bindings.rs`
//! with the bindings faked (`MemoryBindings` keeps the real subscriber's rules: filters,
//! selectors, Modified only on a changed filter result, events held until Synchronization).
//! Each asserts what a hook receives: its binding contexts, their order, their queue.

mod world;

use bosun_addon::ModulePhase;
use bosun_addon::ports::{HookResult, PortError};
use serde_json::{Value, json};
use world::{World, global_hook, module, object, object_names, values_patch, wait_for};

/// The seed's hook with four kubernetes bindings (the end-to-end bindings tests use it too).
const SEED_CONFIG: &str = include_str!("../../../tests/fixtures/seed-bindings.yaml");

fn pod(name: &str, labels: Value) -> Value {
    object("Pod", "default", name, labels)
}

#[tokio::test(start_paused = true)]
async fn global_hook_synchronization_events_and_snapshots_follow_the_seed() {
    let world = World::default();
    let p1 = pod("p1", json!({"app": "one"}));
    world.bindings.put("Pod", p1.clone());
    world.bindings.put(
        "Node",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "a"}}}),
    );
    world.bindings.put(
        "ConfigMap",
        object("ConfigMap", "default", "c1", json!({"watched": "yes"})),
    );
    world.bindings.put(
        "ConfigMap",
        object("ConfigMap", "default", "unwatched", json!({})),
    );
    let engine = world
        .engine(vec![global_hook("monitor", SEED_CONFIG)], Vec::new())
        .await;
    wait_for(
        "the first converge and monitor-cms' Synchronization",
        || async {
            engine.converged()
                && world
                    .contexts("monitor")
                    .iter()
                    .any(|c| c["binding"] == "monitor-cms")
        },
    )
    .await;

    let main: Vec<Value> = world
        .runs_of("monitor")
        .into_iter()
        .filter(|r| r.queue.as_deref() == Some("main"))
        .map(|r| r.contexts[0].clone())
        .collect();
    // monitor-pods: main queue, before beforeAll.
    assert_eq!(
        main[0],
        json!({"binding": "monitor-pods", "type": "Synchronization",
               "objects": [{"object": p1, "filterResult": {"app": "one"}}]})
    );
    assert_eq!(main[1]["binding"], "beforeAll");
    // beforeAll carries every binding's snapshot.
    assert_eq!(
        main[1]["snapshots"]["monitor-pods"],
        json!([{"object": p1, "filterResult": {"app": "one"}}])
    );
    assert_eq!(
        main[1]["snapshots"]["monitor-nodes"][0]["filterResult"],
        json!({"zone": "a"})
    );
    assert_eq!(main[1]["snapshots"]["monitor-secrets"], json!([]));
    // monitor-nodes and monitor-secrets: snapshot only, no Synchronization run.
    assert!(
        !world
            .contexts("monitor")
            .iter()
            .any(|c| c["binding"] == "monitor-nodes" || c["binding"] == "monitor-secrets")
    );
    let cms = world
        .runs_of("monitor")
        .into_iter()
        .find(|r| r.binding == "monitor-cms")
        .expect("monitor-cms ran");
    assert_eq!(cms.queue.as_deref(), Some("config-map-handling"));
    assert_eq!(cms.contexts[0]["type"], "Synchronization");
    assert_eq!(
        cms.contexts[0]["objects"],
        json!([{"object": object("ConfigMap", "default", "c1", json!({"watched": "yes"})),
                "filterResult": {"watched": "yes"}}]),
        "the label selector leaves the unwatched ConfigMap out"
    );

    // Events: Added, Modified only when the filter result changes, Deleted.
    let seen = world.contexts("monitor").len();
    world.bindings.put("Pod", pod("p2", json!({"app": "two"})));
    let mut annotated = pod("p2", json!({"app": "two"}));
    annotated["metadata"]["annotations"] = json!({"ignored": "by the filter"});
    world.bindings.put("Pod", annotated);
    world
        .bindings
        .put("Pod", pod("p2", json!({"app": "three"})));
    world.bindings.delete("Pod", "default", "p2");
    wait_for("the pod's events", || async {
        world.contexts("monitor").len() >= seen + 3
    })
    .await;
    let events: Vec<(String, Value)> = world.contexts("monitor")[seen..]
        .iter()
        .map(|c| {
            assert_eq!(c["type"], "Event", "{c}");
            assert_eq!(c["binding"], "monitor-pods", "{c}");
            assert_eq!(c["object"]["metadata"]["name"], "p2", "{c}");
            (
                c["watchEvent"].as_str().unwrap_or_default().to_string(),
                c["filterResult"].clone(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("Added".to_string(), json!({"app": "two"})),
            ("Modified".to_string(), json!({"app": "three"})),
            ("Deleted".to_string(), json!({"app": "three"})),
        ]
    );

    // Bindings with executeHookOnSynchronization: false still run on events, in their queue.
    world.bindings.put(
        "Secret",
        object("Secret", "default", "s1", json!({"watched": "yes"})),
    );
    wait_for("the secret's event", || async {
        world
            .runs_of("monitor")
            .iter()
            .any(|r| r.binding == "monitor-secrets")
    })
    .await;
    let s = world
        .runs_of("monitor")
        .into_iter()
        .find(|r| r.binding == "monitor-secrets")
        .expect("secret event");
    assert_eq!(s.queue.as_deref(), Some("secrets-handling"));
    assert_eq!(s.contexts[0]["watchEvent"], "Added");
    assert_eq!(s.contexts[0]["filterResult"], json!({"watched": "yes"}));

    // The snapshots as `bosun global snapshots` shows them.
    let dump = engine.snapshots(None);
    let filter_results = |binding: &str| -> Vec<Value> {
        dump["monitor"][binding]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| o["filterResult"].clone())
            .collect()
    };
    assert_eq!(filter_results("monitor-pods"), [json!({"app": "one"})]);
    assert_eq!(
        filter_results("monitor-secrets"),
        [json!({"watched": "yes"})]
    );
    assert_eq!(filter_results("monitor-nodes"), [json!({"zone": "a"})]);
}

#[tokio::test(start_paused = true)]
async fn groups_included_snapshots_and_objects_left_out_of_memory() {
    let world = World::default();
    world.bindings.put(
        "ConfigMap",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "1"}}),
    );
    let config = "configVersion: v1
kubernetes:
- name: cms
  kind: configmap
  nameSelector: {matchNames: [a, b]}
  jqFilter: '.data'
  keepFullObjectsInMemory: false
  group: g
- name: secrets
  kind: secret
  executeHookOnEvent: []
  group: g
- name: pods
  kind: po
  jqFilter: '.metadata.name'
  keepFullObjectsInMemory: false
  includeSnapshotsFrom: [cms]";
    let engine = world
        .engine(vec![global_hook("grouped", config)], Vec::new())
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let first = world.contexts("grouped");
    assert_eq!(
        first[0],
        json!({"binding": "secrets", "type": "Group", "groupName": "g",
               "snapshots": {"cms": [{"filterResult": {"k": "1"}}], "secrets": []}}),
        "one Group context for the group's Synchronization: {first:#?}"
    );
    // nameSelector: a ConfigMap with another name is not seen.
    world.bindings.put(
        "ConfigMap",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "default"}, "data": {"k": "x"}}),
    );
    world.bindings.put("Pod", pod("p", json!({})));
    wait_for("the pod event", || async {
        world
            .contexts("grouped")
            .iter()
            .any(|c| c["binding"] == "pods" && c["type"] == "Event")
    })
    .await;
    let ev = world
        .contexts("grouped")
        .into_iter()
        .find(|c| c["binding"] == "pods" && c["type"] == "Event")
        .expect("event");
    assert_eq!(
        ev,
        json!({"binding": "pods", "type": "Event", "watchEvent": "Added", "filterResult": "p",
               "snapshots": {"cms": [{"filterResult": {"k": "1"}}]}})
    );
    assert!(
        !world
            .contexts("grouped")
            .iter()
            .any(|c| c.to_string().contains("\"x\"")),
        "the ConfigMap outside nameSelector never reaches the hook"
    );
}

#[tokio::test(start_paused = true)]
async fn module_hook_bindings_start_with_the_module_and_stop_when_it_is_disabled() {
    let world = World::default();
    let watch = "configVersion: v1
kubernetes:
- name: pods
  kind: Pod
  namespace: {nameSelector: {matchNames: [default]}}
  jqFilter: '.metadata.name'";
    world
        .hooks
        .config("watcher/hooks/pods", &format!("{watch}\nbeforeHelm: 1"));
    world.bindings.put("Pod", pod("before", json!({})));
    world
        .bindings
        .put("Pod", object("Pod", "elsewhere", "not-watched", json!({})));
    let modules = vec![module("watcher", 10, &["watcher/hooks/pods"])];
    // A global hook on the same watch, later in the same queue: the canary for absence.
    let engine = world
        .engine(vec![global_hook("canary", watch)], modules.clone())
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let c = world.contexts("watcher/hooks/pods");
    assert_eq!(c[0]["type"], "Synchronization");
    assert_eq!(
        c[0]["objects"],
        json!([{"object": pod("before", json!({})), "filterResult": "before"}]),
        "only the pods of the namespace it names"
    );
    assert_eq!(c[1]["binding"], "beforeHelm");
    assert_eq!(c[1]["snapshots"]["pods"][0]["filterResult"], "before");
    assert_eq!(
        world.bindings.started(),
        ["global/canary", "module/watcher/watcher/hooks/pods"]
    );

    world.bindings.put("Pod", pod("after", json!({})));
    wait_for("the module hook's event", || async {
        world
            .contexts("watcher/hooks/pods")
            .iter()
            .any(|c| c["type"] == "Event" && c["filterResult"] == "after")
    })
    .await;
    // Disable the module: its bindings stop.
    world
        .edit_config_map(&engine, &modules, &[("watcherEnabled", "false")])
        .await;
    wait_for("the module is disabled", || async {
        world
            .state()
            .modules
            .get("watcher")
            .is_some_and(|m| !m.enabled && m.phase == ModulePhase::Disabled)
    })
    .await;
    let seen = world.contexts("watcher/hooks/pods").len();
    world.bindings.put("Pod", pod("ignored", json!({})));
    wait_for("the canary saw the pod", || async {
        world
            .contexts("canary")
            .iter()
            .any(|c| c["filterResult"] == "ignored")
    })
    .await;
    assert_eq!(
        world.contexts("watcher/hooks/pods").len(),
        seen,
        "a disabled module's hook gets no events"
    );
    assert_eq!(world.bindings.started(), ["global/canary"]);
}

#[tokio::test(start_paused = true)]
async fn namespaces_chosen_by_labels_are_followed_as_they_start_and_stop_matching() {
    let world = World::default();
    let ns = |name: &str, watched: bool| {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": if watched { json!({"watch": "yes"}) } else { json!({}) }}})
    };
    world.bindings.put("Namespace", ns("alpha", true));
    world.bindings.put("Namespace", ns("beta", false));
    world.bindings.put(
        "ConfigMap",
        object("ConfigMap", "alpha", "in-alpha", json!({})),
    );
    world.bindings.put(
        "ConfigMap",
        object("ConfigMap", "beta", "in-beta", json!({})),
    );
    let program = ".metadata.namespace + \"/\" + .metadata.name";
    world.bindings.filter(program, |o| {
        json!(format!(
            "{}/{}",
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default()
        ))
    });
    let config = format!(
        "configVersion: v1
kubernetes:
- name: cms
  kind: ConfigMap
  namespace: {{labelSelector: {{matchLabels: {{watch: \"yes\"}}}}}}
  jqFilter: '{program}'"
    );
    let engine = world
        .engine(vec![global_hook("ns", &config)], Vec::new())
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let sync = world.contexts("ns")[0].clone();
    assert_eq!(sync["type"], "Synchronization");
    assert_eq!(sync["objects"][0]["filterResult"], "alpha/in-alpha");
    assert_eq!(sync["objects"].as_array().map(Vec::len), Some(1));

    // beta starts matching: its ConfigMap arrives as Added.
    world.bindings.put("Namespace", ns("beta", true));
    wait_for("beta's ConfigMap added", || async {
        world
            .contexts("ns")
            .iter()
            .any(|c| c["watchEvent"] == "Added" && c["filterResult"] == "beta/in-beta")
    })
    .await;
    // alpha stops matching: its ConfigMap leaves the snapshot as Deleted.
    world.bindings.put("Namespace", ns("alpha", false));
    wait_for("alpha's ConfigMap deleted", || async {
        world
            .contexts("ns")
            .iter()
            .any(|c| c["watchEvent"] == "Deleted" && c["filterResult"] == "alpha/in-alpha")
    })
    .await;
    assert_eq!(
        engine.snapshots(None)["ns"]["cms"],
        json!([{"object": object("ConfigMap", "beta", "in-beta", json!({})), "filterResult": "beta/in-beta"}])
    );
}

#[tokio::test(start_paused = true)]
async fn values_changed_by_kubernetes_runs_converge_globally_and_rerun_their_module() {
    let world = World::default();
    let patch_on_event = |path: &'static str| {
        move |run: &bosun_addon::ports::HookRun| {
            if run.binding_context[0]["type"] == "Event" {
                values_patch(json!([{"op": "add", "path": path, "value": "yes"}]))(run)
            } else {
                Ok(HookResult::default())
            }
        }
    };
    world
        .hooks
        .answer("global-watch", patch_on_event("/global/triggered"))
        .config(
            "reactive/hooks/watch",
            "configVersion: v1\nkubernetes:\n- name: trigger\n  kind: ConfigMap\n  nameSelector: {matchNames: [module-trigger]}",
        )
        .answer("reactive/hooks/watch", patch_on_event("/reactive/triggered"));
    let engine = world
        .engine(
            vec![global_hook(
                "global-watch",
                "configVersion: v1\nkubernetes:\n- name: trigger\n  kind: ConfigMap\n  nameSelector: {matchNames: [global-trigger]}",
            )],
            vec![module("reactive", 10, &["reactive/hooks/watch"])],
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let module_runs = || {
        world
            .enqueued()
            .iter()
            .filter(|d| d.contains("ModuleValuesChanged"))
            .count()
    };
    assert_eq!(module_runs(), 0);

    world.bindings.put(
        "ConfigMap",
        object("ConfigMap", "default", "module-trigger", json!({})),
    );
    wait_for(
        "the module's second release with its changed values",
        || async { world.releases.revisions().get("reactive") == Some(&2) },
    )
    .await;
    assert_eq!(module_runs(), 1, "{:?}", world.enqueued());
    assert_eq!(
        world.releases.values("reactive").expect("values")["reactive"]["triggered"],
        "yes",
        "Helm got the values the hook patched"
    );
    assert_eq!(
        world.converges_finished(),
        1,
        "a module's values run only the module"
    );

    world.bindings.put(
        "ConfigMap",
        object("ConfigMap", "default", "global-trigger", json!({})),
    );
    wait_for("a converge for the changed global values", || async {
        world.converges_finished() == 2 && engine.converged()
    })
    .await;
    assert_eq!(
        world.converge_reasons(),
        ["OperatorStartup", "GlobalValuesChanged"]
    );
    assert_eq!(
        world.releases.values("reactive").expect("values")["global"]["triggered"],
        "yes"
    );
}

#[tokio::test] // the schedules fire by the wall clock
async fn a_six_field_schedule_fires_every_second_with_schedule_contexts() {
    let world = World::default();
    let engine = world
        .engine(
            vec![global_hook(
                "tick",
                "configVersion: v1\nschedule:\n- name: tick\n  crontab: '*/1 * * * * *'\n  queue: ticks",
            )],
            Vec::new(),
        )
        .await;
    let started = std::time::Instant::now();
    wait_for("two ticks", || async { world.runs_of("tick").len() >= 2 }).await;
    let elapsed = started.elapsed();
    assert!(engine.converged());
    let runs = world.runs_of("tick");
    assert!(
        runs.len() as u64 <= elapsed.as_secs() + 2,
        "{} runs in {elapsed:?}: no more than one a second",
        runs.len()
    );
    for r in &runs {
        assert_eq!(r.contexts, json!([{"binding": "tick", "type": "Schedule"}]));
        assert_eq!(r.queue.as_deref(), Some("ticks"));
    }
}

#[tokio::test] // the schedules fire by the wall clock
async fn a_module_s_schedule_fires_once_the_module_ran_and_stops_when_it_is_disabled() {
    let world = World::default();
    world.hooks.config(
        "cron/hooks/tick",
        "configVersion: v1\nschedule:\n- name: every-second\n  crontab: '*/1 * * * * *'",
    );
    let modules = vec![module("cron", 10, &["cron/hooks/tick"])];
    // A global hook on the same crontab (one timer fires both): the canary for absence.
    let engine = world
        .engine(
            vec![global_hook(
                "canary",
                "configVersion: v1\nschedule:\n- name: tick\n  crontab: '*/1 * * * * *'",
            )],
            modules.clone(),
        )
        .await;
    wait_for("a module schedule run", || async {
        !world.runs_of("cron/hooks/tick").is_empty()
    })
    .await;
    let run = &world.runs_of("cron/hooks/tick")[0];
    assert_eq!(
        run.contexts,
        json!([{"binding": "every-second", "type": "Schedule"}])
    );
    assert_eq!(run.module.as_deref(), Some("cron"));
    assert_eq!(run.values["global"]["enabledModules"], json!(["cron"]));

    world
        .edit_config_map(&engine, &modules, &[("cronEnabled", "false")])
        .await;
    wait_for("cron deleted", || async {
        world.releases.log().contains(&"uninstall cron".to_string())
            && world.state().modules["cron"].phase == ModulePhase::Disabled
    })
    .await;
    let seen = world.runs_of("cron/hooks/tick").len();
    let ticks = world.runs_of("canary").len();
    wait_for("two more firings of the crontab", || async {
        world.runs_of("canary").len() >= ticks + 2
    })
    .await;
    assert!(
        world.runs_of("cron/hooks/tick").len() <= seen + 1,
        "at most a firing already queued when the module went: {} then {}",
        seen,
        world.runs_of("cron/hooks/tick").len()
    );
}

#[tokio::test(start_paused = true)]
async fn an_invalid_jq_filter_fails_the_module_run_naming_the_hook_and_binding() {
    let world = World::default();
    world.hooks.config(
        "bad/hooks/jq",
        "configVersion: v1\nkubernetes:\n- name: pods\n  kind: Pod\n  jqFilter: '.metadata | {'",
    );
    let engine = world
        .engine_with(
            Vec::new(),
            vec![
                module("bad", 10, &["bad/hooks/jq"]),
                module("good", 20, &[]),
            ],
            world::Options {
                max_attempts: Some(1),
                ..world::Options::default()
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
        errors[0].contains("bad")
            && errors[0].contains("bad/hooks/jq")
            && errors[0].contains("kubernetes[0].jqFilter")
            && errors[0].contains(".metadata | {"),
        "{}",
        errors[0]
    );
    assert!(
        world.runs_of("bad/hooks/jq").is_empty(),
        "the hook never ran"
    );
    assert_eq!(world.releases.log(), ["upgrade good"]);
}

#[tokio::test(start_paused = true)]
async fn events_during_synchronization_are_held_and_follow_it() {
    let world = World::default();
    world.bindings.put(
        "ConfigMap",
        object("ConfigMap", "default", "first", json!({})),
    );
    let gate = world.hooks.gate("watch");
    let engine = world
        .engine(
            vec![global_hook(
                "watch",
                "configVersion: v1\nkubernetes:\n- name: cms\n  kind: ConfigMap\n  queue: watch",
            )],
            Vec::new(),
        )
        .await;
    wait_for("the Synchronization run to be held", || async {
        !world.runs_of("watch").is_empty()
    })
    .await;
    world.bindings.put(
        "ConfigMap",
        object("ConfigMap", "default", "second", json!({})),
    );
    assert_eq!(
        world.runs_of("watch").len(),
        1,
        "no event run before the Synchronization ran"
    );
    gate.open();
    wait_for("the held event", || async {
        world.runs_of("watch").len() >= 2
    })
    .await;
    let runs = world.runs_of("watch");
    assert_eq!(runs[0].contexts[0]["type"], "Synchronization");
    assert_eq!(
        runs[0].contexts[0]["objects"][0]["object"]["metadata"]["name"],
        "first"
    );
    assert_eq!(runs[1].contexts[0]["watchEvent"], "Added");
    assert_eq!(object_names(&runs[1]), ["second"]);
    wait_for("the first converge", || async { engine.converged() }).await;
}

const RATE_LIMITED_CONFIG: &str = "configVersion: v1
kubernetes:
- name: limited
  apiVersion: v1
  kind: ConfigMap
  labelSelector: {matchLabels: {rate: limited}}
settings:
  executionMinInterval: 10s
  executionBurst: 1";

fn limited(name: &str) -> Value {
    object("ConfigMap", "default", name, json!({"rate": "limited"}))
}

/// A run waiting for its hook's rate limit takes every event queued behind it until it
/// starts; an event queued after it started waits for the next run.
async fn rate_limited_runs_merge(world: &World, hook: &str) {
    world.bindings.put("ConfigMap", limited("a"));
    world.bindings.put("ConfigMap", limited("b"));
    wait_for("a run with a", || async {
        world
            .runs_of(hook)
            .iter()
            .any(|r| object_names(r).contains(&"a".to_string()))
    })
    .await;
    let runs = world.runs_of(hook);
    assert_eq!(
        object_names(runs.last().expect("a run")),
        ["a", "b"],
        "the waiting run carries both events"
    );
    world.bindings.put("ConfigMap", limited("c"));
    wait_for("a run with c", || async {
        world.runs_of(hook).iter().any(|r| object_names(r) == ["c"])
    })
    .await;
    world.bindings.put("ConfigMap", limited("d"));
    wait_for("a run with d", || async {
        world.runs_of(hook).iter().any(|r| object_names(r) == ["d"])
    })
    .await;
    let names: Vec<Vec<String>> = world.runs_of(hook)[1..].iter().map(object_names).collect();
    assert_eq!(
        names,
        [vec!["a", "b"], vec!["c"], vec!["d"]],
        "the run that started before d was queued lacks it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_hook_run_carries_every_event_up_to_the_moment_it_starts() {
    let world = World::default();
    let engine = world
        .engine(
            vec![global_hook("limited", RATE_LIMITED_CONFIG)],
            Vec::new(),
        )
        .await;
    // The Synchronization run takes the only token; the startup's converge is over.
    wait_for("the first converge", || async { engine.converged() }).await;
    assert_eq!(world.runs_of("limited").len(), 1);
    rate_limited_runs_merge(&world, "limited").await;
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_module_hook_run_carries_every_event_up_to_the_moment_it_starts() {
    let world = World::default();
    world
        .hooks
        .config("limited/hooks/watch", RATE_LIMITED_CONFIG);
    let engine = world
        .engine(
            Vec::new(),
            vec![module("limited", 10, &["limited/hooks/watch"])],
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    assert_eq!(world.runs_of("limited/hooks/watch").len(), 1);
    rate_limited_runs_merge(&world, "limited/hooks/watch").await;
}

#[tokio::test(start_paused = true)]
async fn an_event_in_a_named_queue_runs_while_the_main_queue_is_busy() {
    let world = World::default();
    world
        .hooks
        .config("slow/hooks/before", "configVersion: v1\nbeforeHelm: 1");
    let gate = world.hooks.gate("slow/hooks/before");
    let engine = world
        .engine(
            vec![global_hook(
                "side",
                "configVersion: v1\nkubernetes:\n- name: cms\n  kind: ConfigMap\n  queue: side\n  executeHookOnSynchronization: false",
            )],
            vec![module("slow", 10, &["slow/hooks/before"])],
        )
        .await;
    wait_for("the main queue held by beforeHelm", || async {
        !world.runs_of("slow/hooks/before").is_empty()
    })
    .await;
    world
        .bindings
        .put("ConfigMap", object("ConfigMap", "default", "x", json!({})));
    wait_for("the event run in its queue", || async {
        !world.runs_of("side").is_empty()
    })
    .await;
    assert_eq!(world.runs_of("side")[0].queue.as_deref(), Some("side"));
    assert!(!engine.converged(), "the main queue is still busy");
    gate.open();
    wait_for("the first converge", || async { engine.converged() }).await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_synchronization_allowed_to_fail_does_not_hold_the_startup_and_events_flow() {
    let world = World::default();
    world
        .hooks
        .fail("tolerant", 1, PortError::transient("exit status 1"));
    let engine = world
        .engine(
            vec![global_hook(
                "tolerant",
                "configVersion: v1\nkubernetes:\n- name: cms\n  kind: ConfigMap\n  allowFailure: true",
            )],
            Vec::new(),
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    assert!(world.task_errors().is_empty(), "{:?}", world.task_errors());
    world
        .bindings
        .put("ConfigMap", object("ConfigMap", "default", "x", json!({})));
    wait_for("the event run", || async {
        world.runs_of("tolerant").len() == 2
    })
    .await;
    assert_eq!(
        world.runs_of("tolerant")[1].contexts[0]["watchEvent"],
        "Added"
    );
}

#[tokio::test(start_paused = true)]
async fn events_queued_while_the_hook_runs_are_carried_together_by_its_next_run() {
    let world = World::default();
    let engine = world
        .engine(
            vec![global_hook(
                "busy",
                "configVersion: v1\nkubernetes:\n- name: cms\n  kind: ConfigMap\n  queue: busy\n  executeHookOnSynchronization: false",
            )],
            Vec::new(),
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let gate = world.hooks.gate("busy");
    world
        .bindings
        .put("ConfigMap", object("ConfigMap", "default", "a", json!({})));
    wait_for("the run with a to be held", || async {
        !world.runs_of("busy").is_empty()
    })
    .await;
    for name in ["b", "c"] {
        world
            .bindings
            .put("ConfigMap", object("ConfigMap", "default", name, json!({})));
    }
    wait_for("b and c queued behind the running task", || async {
        world
            .enqueued()
            .iter()
            .filter(|d| d.ends_with(":busy"))
            .count()
            == 3
    })
    .await;
    gate.open();
    wait_for("the run with b and c", || async {
        world.runs_of("busy").len() == 2
    })
    .await;
    let names: Vec<Vec<String>> = world.runs_of("busy").iter().map(object_names).collect();
    assert_eq!(
        names,
        [vec!["a"], vec!["b", "c"]],
        "one run for the events that waited"
    );
}

#[tokio::test(start_paused = true)]
async fn the_startup_waits_for_a_named_queue_s_synchronization_before_before_all() {
    let world = World::default();
    world
        .bindings
        .put("ConfigMap", object("ConfigMap", "default", "a", json!({})));
    let gate = world.hooks.gate("sync");
    let engine = world
        .engine(
            vec![
                global_hook(
                    "sync",
                    "configVersion: v1\nkubernetes:\n- name: cms\n  kind: ConfigMap\n  queue: sync-queue\n  waitForSynchronization: true",
                ),
                global_hook("around", "configVersion: v1\nbeforeAll: 1"),
            ],
            Vec::new(),
        )
        .await;
    wait_for("the Synchronization run held in its queue", || async {
        !world.runs_of("sync").is_empty()
    })
    .await;
    assert_eq!(
        world.runs_of("sync")[0].queue.as_deref(),
        Some("sync-queue")
    );
    // The main queue waits for it: nothing else runs, the startup is not over.
    wait_for("the main queue waiting", || async {
        engine.queues().await[0].running.is_some()
    })
    .await;
    assert!(world.runs_of("around").is_empty());
    assert!(!engine.converged());
    gate.open();
    wait_for("the first converge", || async { engine.converged() }).await;
    assert_eq!(world.runs(), ["cms:sync", "beforeAll:around"]);
}

#[tokio::test(start_paused = true)]
async fn a_binding_runs_only_on_the_events_it_names_and_objects_leave_by_their_labels() {
    let world = World::default();
    let engine = world
        .engine(
            vec![global_hook(
                "modified-only",
                "configVersion: v1
kubernetes:
- name: apps
  kind: Deployment
  executeHookOnEvent: [Modified, Deleted]
  executeHookOnSynchronization: false
  keepFullObjectsInMemory: false
  jqFilter: .spec
  labelSelector:
    matchExpressions:
    - {key: tier, operator: In, values: [web, api]}
  fieldSelector:
    matchExpressions:
    - {field: metadata.name, operator: NotEquals, value: ignored}",
            )],
            Vec::new(),
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    let deploy = |name: &str, tier: &str, replicas: u32| {
        let mut d = object("Deployment", "default", name, json!({"tier": tier}));
        d["spec"] = json!({"replicas": replicas});
        d
    };
    world.bindings.put("Deployment", deploy("web", "web", 1));
    world
        .bindings
        .put("Deployment", deploy("ignored", "web", 1));
    world
        .bindings
        .put("Deployment", deploy("worker", "batch", 1));
    world
        .bindings
        .put("Deployment", deploy("ignored", "web", 2));
    world
        .bindings
        .put("Deployment", deploy("worker", "batch", 2));
    world.bindings.put("Deployment", deploy("web", "web", 2));
    // Its labels take it out of the selection: the watch says Deleted.
    world.bindings.put("Deployment", deploy("web", "batch", 2));
    wait_for("the Modified and Deleted runs", || async {
        world.contexts("modified-only").len() >= 2
    })
    .await;
    assert_eq!(
        world.contexts("modified-only"),
        [
            json!({"binding": "apps", "type": "Event", "watchEvent": "Modified", "filterResult": {"replicas": 2}}),
            json!({"binding": "apps", "type": "Event", "watchEvent": "Deleted", "filterResult": {"replicas": 2}}),
        ],
        "no Added run, no object kept, nothing outside the selectors"
    );
    assert_eq!(engine.snapshots(None)["modified-only"]["apps"], json!([]));
}

#[tokio::test(start_paused = true)]
async fn module_snapshots_and_a_named_queue_s_synchronization_outside_the_module_run() {
    let world = World::default();
    world
        .bindings
        .put("Secret", object("Secret", "default", "s1", json!({})));
    world.hooks.config(
        "vault/hooks/secrets",
        "configVersion: v1
kubernetes:
- name: secrets
  kind: Secret
  jqFilter: .metadata.name
  queue: vault-secrets
  waitForSynchronization: false",
    );
    let engine = world
        .engine(
            Vec::new(),
            vec![module("vault", 10, &["vault/hooks/secrets"])],
        )
        .await;
    wait_for("the first converge and the Synchronization", || async {
        engine.converged() && !world.runs_of("vault/hooks/secrets").is_empty()
    })
    .await;
    let sync = &world.runs_of("vault/hooks/secrets")[0];
    assert_eq!(sync.queue.as_deref(), Some("vault-secrets"));
    assert_eq!(sync.contexts[0]["type"], "Synchronization");
    assert_eq!(sync.module.as_deref(), Some("vault"));
    // `module snapshots vault`
    assert_eq!(
        engine.snapshots(Some("vault")),
        json!({"vault/hooks/secrets": {"secrets": [
            {"object": object("Secret", "default", "s1", json!({})), "filterResult": "s1"}
        ]}})
    );
    assert_eq!(engine.snapshots(None), json!({}));
}

#[tokio::test] // the schedules fire by the wall clock
async fn a_schedule_in_a_group_sees_the_group_s_kubernetes_snapshots() {
    let world = World::default();
    world
        .bindings
        .put("Node", json!({"kind": "Node", "metadata": {"name": "n1"}}));
    let engine = world
        .engine(
            vec![global_hook(
                "report",
                "configVersion: v1
kubernetes:
- name: nodes
  kind: Node
  jqFilter: .metadata.name
  group: inventory
  executeHookOnSynchronization: false
schedule:
- name: every-second
  crontab: '*/1 * * * * *'
  group: inventory",
            )],
            Vec::new(),
        )
        .await;
    wait_for("a scheduled run", || async {
        !world.runs_of("report").is_empty()
    })
    .await;
    assert!(engine.converged());
    assert_eq!(
        world.runs_of("report")[0].contexts,
        json!([{"binding": "every-second", "type": "Group", "groupName": "inventory",
                "snapshots": {"nodes": [{"object": {"kind": "Node", "metadata": {"name": "n1"}}, "filterResult": "n1"}]}}])
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_kill_events_queued_before_it_give_way_to_a_new_synchronization() {
    let world = World::default();
    let config = "configVersion: v1\nkubernetes:\n- name: cms\n  kind: ConfigMap\n  queue: watch";
    world
        .bindings
        .put("ConfigMap", object("ConfigMap", "default", "a", json!({})));
    let killed = world
        .engine(vec![global_hook("watch", config)], Vec::new())
        .await;
    wait_for("the first converge", || async { killed.converged() }).await;
    let _held = world.hooks.gate("watch");
    world
        .bindings
        .put("ConfigMap", object("ConfigMap", "default", "b", json!({})));
    world
        .bindings
        .put("ConfigMap", object("ConfigMap", "default", "c", json!({})));
    wait_for("c's event queued behind the held run", || async {
        world
            .enqueued()
            .iter()
            .filter(|d| d.as_str() == "cms:watch")
            .count()
            >= 3
    })
    .await;

    // Killed with events pending; meanwhile a is deleted.
    let world = world.after_kill();
    world.bindings.delete("ConfigMap", "default", "a");
    let engine = world
        .engine(vec![global_hook("watch", config)], Vec::new())
        .await;
    wait_for("the converge after the restart", || async {
        engine.converged() && !world.runs_of("watch").is_empty()
    })
    .await;
    let runs = world.runs_of("watch");
    assert_eq!(runs.len(), 1, "no run for the events from before: {runs:?}");
    let names: Vec<&str> = runs[0].contexts[0]["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["object"]["metadata"]["name"].as_str())
        .collect();
    assert_eq!(runs[0].contexts[0]["type"], "Synchronization");
    assert_eq!(names, ["b", "c"], "the current state, not the stale events");
}

#[tokio::test(start_paused = true)]
async fn the_startup_runs_on_startup_then_synchronization_then_the_converge() {
    let world = World::default();
    world.bindings.put("Pod", pod("p1", json!({})));
    world.hooks.config(
        "alpha/hooks/a",
        "configVersion: v1\nonStartup: 1\nbeforeHelm: 1\nkubernetes:\n- name: pods\n  kind: Pod\n  executeHookOnEvent: []",
    );
    let engine = world
        .engine(
            vec![
                global_hook(
                    "g-watch",
                    "configVersion: v1\nkubernetes:\n- name: pods\n  kind: Pod\n  executeHookOnEvent: []",
                ),
                global_hook("g-start", "configVersion: v1\nonStartup: 1\nbeforeAll: 1"),
            ],
            vec![module("alpha", 10, &["alpha/hooks/a"])],
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    assert_eq!(
        world.runs(),
        [
            "onStartup:g-start",
            "pods:g-watch",
            "beforeAll:g-start",
            "onStartup:alpha/hooks/a",
            "pods:alpha/hooks/a",
            "beforeHelm:alpha/hooks/a",
        ],
        "global onStartup, global Synchronization, beforeAll; in the module: onStartup, \
         Synchronization, beforeHelm"
    );
}

#[tokio::test(start_paused = true)]
async fn a_config_patch_from_an_event_converges_once_and_its_config_map_echo_changes_nothing() {
    let world = World::default();
    world.hooks.answer("g-sync-config", |run| {
        if run.binding_context[0]["type"] != "Event" {
            return Ok(HookResult::default());
        }
        let name = run.binding_context[0]["object"]["metadata"]["name"].clone();
        Ok(HookResult {
            config_values_patch: json!([{"op": "add", "path": "/global/source", "value": name}])
                .to_string(),
            ..HookResult::default()
        })
    });
    let engine = world
        .engine(
            vec![global_hook(
                "g-sync-config",
                "configVersion: v1\nkubernetes:\n- name: cms\n  kind: ConfigMap\n  nameSelector: {matchNames: [settings]}",
            )],
            vec![module("alpha", 10, &[])],
        )
        .await;
    wait_for("the first converge", || async { engine.converged() }).await;
    world.bindings.put(
        "ConfigMap",
        object("ConfigMap", "default", "settings", json!({})),
    );
    wait_for("the converge for the changed global values", || async {
        world.converges_finished() == 2 && engine.converged()
    })
    .await;
    assert_eq!(
        world.converge_reasons(),
        ["OperatorStartup", "GlobalValuesChanged"]
    );
    assert_eq!(
        world.releases.values("alpha").expect("values")["global"]["source"],
        "settings"
    );
    assert_eq!(
        yaml(&world.config_map.data().unwrap_or_default()["global"]),
        json!({"source": "settings"})
    );
    // The ConfigMap watch brings bosun's own write back: nothing to do.
    let queued = world
        .edit_config_map(&engine, &[module("alpha", 10, &[])], &[])
        .await;
    assert!(queued.is_empty(), "{queued:?}");
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("YAML")
}
