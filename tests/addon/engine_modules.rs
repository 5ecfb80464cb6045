//! Modules end to end: real hooks, real Helm and the sandbox. The startup order, enabled
//! state (the seed's examples), ConfigMap-driven enable/disable and values changes, skipped
//! upgrades, auto-healing of deleted or edited objects, purging of releases nobody owns,
//! and failing modules that do not stop the others. The cases that involve Helm run under
//! both engines (`library::…` with libhelm_c.so, `cli::…` with the helm binary).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{HelmEngine, Operator, Sandbox, journal_state, read_json, workdir};
use bosun_addon::{Event, TaskEvent};
use serde_json::json;

const CM: &str = "/api/v1/namespaces/default/configmaps";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Copies a modules fixture into the work folder (so tests can change it).
fn copy_modules(name: &str, work: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", fixture("modules").join(name).display()))
        .arg(work.join("modules"))
        .status()
        .expect("cp");
    assert!(status.success());
}

/// Deployed releases: name → revision, from Helm's release Secrets.
fn releases(sb: &Sandbox) -> BTreeMap<String, u64> {
    let (code, list) = sb.get("/api/v1/namespaces/default/secrets?labelSelector=owner%3Dhelm");
    assert_eq!(code, 200, "{list}");
    let mut out = BTreeMap::new();
    for s in list["items"].as_array().cloned().unwrap_or_default() {
        let labels = &s["metadata"]["labels"];
        if labels["status"] == "deployed" {
            let name = labels["name"].as_str().unwrap_or_default().to_string();
            let rev = labels["version"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            out.insert(name, rev);
        }
    }
    out
}

/// Sets keys of the operator's ConfigMap (creating it when needed).
fn set_config(sb: &Sandbox, data: &[(&str, &str)]) {
    edit_config(sb, data, &[]);
}

/// Sets `data` and removes `remove` in the operator's ConfigMap.
fn edit_config(sb: &Sandbox, data: &[(&str, &str)], remove: &[&str]) {
    for _ in 0..10 {
        let (code, mut cm) = sb.get(&format!("{CM}/addon-operator"));
        if code == 404 {
            cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "addon-operator"}, "data": {}});
        }
        if !cm["data"].is_object() {
            cm["data"] = json!({});
        }
        for (k, v) in data {
            cm["data"][*k] = json!(v);
        }
        if let Some(d) = cm["data"].as_object_mut() {
            for k in remove {
                d.remove(*k);
            }
        }
        let (code, body) = if code == 404 {
            sb.post(CM, &cm)
        } else {
            sb.put(&format!("{CM}/addon-operator"), &cm)
        };
        if code == 200 || code == 201 {
            return;
        }
        assert_eq!(code, 409, "{body}");
    }
    panic!("cannot update the ConfigMap");
}

fn events_log(work: &Path) -> Vec<String> {
    std::fs::read_to_string(work.join("out/events.log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// `Type:description` of every task in the order its first attempt started.
fn started_tasks(journal: &Path) -> Vec<String> {
    let (_, events) = journal_state(journal);
    let mut specs = BTreeMap::new();
    let mut out = Vec::new();
    for e in &events {
        match e {
            Event::Task(TaskEvent::TaskEnqueued { task, .. }) => {
                specs.insert(task.id, task.clone());
            }
            Event::Task(TaskEvent::TaskStarted { id, attempt: 1 }) => {
                if let Some(t) = specs.get(id) {
                    out.push(format!("{}:{}", t.kind.task_type().as_str(), t.description));
                }
            }
            _ => {}
        }
    }
    out
}

fn module_env(work: &Path, engine: HelmEngine) -> Vec<(String, String)> {
    let mut env = vec![
        ("BOSUN_RESOURCE_MONITOR_INTERVAL".into(), "1s".into()),
        (
            "BOSUN_TOOLS_DIR".into(),
            common::tools_dir().display().to_string(),
        ),
        ("WORK".into(), work.display().to_string()),
    ];
    env.extend(engine.env());
    env
}

fn start(sb: &Sandbox, work: &Path, engine: HelmEngine, extra: &[(&str, &str)]) -> Operator {
    start_with_hooks(sb, work, &fixture("global-hooks/basic"), engine, extra)
}

fn start_with_hooks(
    sb: &Sandbox,
    work: &Path,
    hooks: &Path,
    engine: HelmEngine,
    extra: &[(&str, &str)],
) -> Operator {
    let mut env: Vec<(String, String)> = module_env(work, engine);
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Operator::start_with(sb, hooks, work, &env)
}

/// Checks from the start-up log that the `nth` start of bosun (from 1; the log of every
/// start is appended) runs the engine under test.
fn assert_engine(op: &Operator, engine: HelmEngine, nth: usize) {
    // The library reports its own version (helm-python-sdk's), the binary Helm's.
    let (kind, version) = match engine {
        HelmEngine::Library => ("library", "version="),
        HelmEngine::Cli => ("cli", "version=v4."),
    };
    let lines = || {
        op.logs()
            .lines()
            .filter(|l| l.contains("Helm engine chosen"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    op.wait("the Helm engine chosen", Duration::from_secs(60), || {
        lines().len() >= nth
    });
    let line = lines().get(nth - 1).cloned().unwrap_or_default();
    assert!(
        line.contains(&format!("engine=\"{kind}\"")) && line.contains(version),
        "{line}"
    );
}

fn journal_converges(work: &Path) -> u64 {
    common::converges(&work.join("journal"))
}

/// Runs each case under both Helm engines.
macro_rules! for_each_engine {
    ($($case:ident),* $(,)?) => {
        mod library {
            $(
                #[test]
                fn $case() {
                    super::$case(super::HelmEngine::Library)
                }
            )*
        }
        mod cli {
            $(
                #[test]
                fn $case() {
                    super::$case(super::HelmEngine::Cli)
                }
            )*
        }
    };
}

for_each_engine!(
    modules_converge_in_the_reference_order_and_follow_the_config_map,
    failing_modules_name_their_cause_and_the_others_still_converge,
    kill_9_at_random_points_of_the_first_converge_changes_no_outcome,
    a_missing_namespace_fails_the_module_run_with_the_cause_and_retries,
    a_config_map_change_during_a_converge_restarts_it,
    a_rejected_manifest_is_not_installed_again_at_once,
    kube_context_chooses_the_cluster_of_bosun_and_helm,
);

/// `KUBE_CONTEXT` names the kubeconfig context bosun and Helm use: here the current
/// context points at a server that is not there, and the one named is the sandbox.
fn kube_context_chooses_the_cluster_of_bosun_and_helm(engine: HelmEngine) {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    common::configmap_module(&w.join("modules/010-ctx"), "ctx", "made-in-context");
    let text = std::fs::read_to_string(&sb.kubeconfig).expect("the sandbox's kubeconfig");
    let mut kc: serde_json::Value = serde_saphyr::from_str(&text).expect("kubeconfig YAML");
    let named = kc["current-context"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let user = kc["contexts"][0]["context"]["user"].clone();
    let push = |kc: &mut serde_json::Value, list: &str, item: serde_json::Value| {
        if let Some(items) = kc[list].as_array_mut() {
            items.push(item);
        }
    };
    push(
        &mut kc,
        "clusters",
        json!({"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}}),
    );
    push(
        &mut kc,
        "contexts",
        json!({"name": "nowhere", "context": {"cluster": "nowhere", "user": user}}),
    );
    kc["current-context"] = json!("nowhere");
    let two = w.join("two-contexts.kubeconfig");
    std::fs::write(&two, kc.to_string()).expect("kubeconfig");
    let two = two.display().to_string();
    let op = start(
        &sb,
        w,
        engine,
        &[("KUBE_CONFIG", &two), ("KUBE_CONTEXT", &named)],
    );
    op.wait("the first converge", Duration::from_secs(90), || {
        journal_converges(w) >= 1
    });
    assert_eq!(releases(&sb).get("ctx"), Some(&1), "{}", op.logs());
    assert_eq!(sb.get(&format!("{CM}/made-in-context")).0, 200);
}

fn modules_converge_in_the_reference_order_and_follow_the_config_map(engine: HelmEngine) {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    copy_modules("lifecycle", w);
    // A release nobody owns any more: purged after the first converge.
    configmap_chart(&w.join("orphan"), "orphan", "orphan");
    install_release(&sb, &w.join("orphan"), "orphan", engine);
    assert_eq!(releases(&sb).get("orphan"), Some(&1));
    // One HELM_IGNORE_RELEASE names: never purged.
    configmap_chart(&w.join("ignored"), "ignored", "ignored-by-bosun");
    install_release(&sb, &w.join("ignored"), "ignored", engine);

    set_config(
        &sb,
        &[("global", "param1: 200\n"), ("someModuleEnabled", "true")],
    );
    let op = start(&sb, w, engine, &[("HELM_IGNORE_RELEASE", "ignored")]);
    assert_engine(&op, engine, 1);
    let journal = w.join("journal");
    op.wait("the first converge", Duration::from_secs(90), || {
        journal_converges(w) >= 1
    });
    op.wait("the orphan release purged", Duration::from_secs(30), || {
        !releases(&sb).contains_key("orphan")
    });
    assert_eq!(
        releases(&sb).get("ignored"),
        Some(&1),
        "HELM_IGNORE_RELEASE keeps it"
    );

    // Enabled state: the seed's two examples, and the modules enabled by values.yaml.
    let (state, _) = journal_state(&journal);
    let enabled: Vec<&str> = state
        .modules
        .iter()
        .filter(|(_, m)| m.enabled)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(enabled, ["echo", "hooks-only", "toggled"], "{}", op.logs());
    let rel = releases(&sb);
    assert_eq!(
        rel,
        BTreeMap::from([
            ("echo".into(), 1),
            ("ignored".into(), 1),
            ("toggled".into(), 1)
        ]),
        "nginx-ingress (disabled by its values.yaml) and some-module (ConfigMap true, enabled script false) get no release"
    );

    // The reference's startup order, from the journal.
    let order = started_tasks(&journal);
    let expected = [
        "GlobalHookRun:onStartup:001-first.sh",
        "GlobalHookRun:onStartup:002-second.py",
        "GlobalHookWaitKubernetesSynchronization:",
        "ConvergeModules:OperatorStartup",
        "GlobalHookRun:beforeAll:002-second.py",
        "ConvergeModules:OperatorStartup:WaitBeforeAll",
        "ModuleEnsureCRDs:echo:OperatorStartup",
        "ModuleRun:echo:doStartup:OperatorStartup",
        "ModuleRun:toggled:doStartup:OperatorStartup",
        "ModuleRun:hooks-only:doStartup:OperatorStartup",
        "ConvergeModules:OperatorStartup:WaitDeleteAndRunModules",
        "GlobalHookRun:afterAll:002-second.py",
        "ConvergeModules:OperatorStartup:WaitAfterAll",
        "DiscoverHelmReleases:",
        "ModulePurge:orphan:DiscoverHelmReleases",
    ];
    assert_eq!(order[..expected.len()], expected, "{order:#?}");

    // The module's CRDs were applied before its chart, with the extra label; doc- files
    // were skipped.
    let (code, crd) =
        sb.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/echoes.example.com");
    assert_eq!(code, 200, "{crd}");
    assert_eq!(crd["metadata"]["labels"]["heritage"], "addon-operator");
    assert!(
        order
            .iter()
            .position(|t| t.starts_with("ModuleEnsureCRDs:echo"))
            < order.iter().position(|t| t.starts_with("ModuleRun:echo")),
        "{order:#?}"
    );

    // Module hooks: bindings in lifecycle order; values patched in beforeHelm reach Helm.
    let log = events_log(w);
    assert_eq!(
        log,
        [
            "echo onStartup",
            "echo beforeHelm",
            "echo afterHelm",
            "toggled onStartup",
            "hooks-only onStartup",
            "hooks-only beforeHelm"
        ]
    );
    let values = read_json(&w.join("out/echo.afterHelm.values.json"));
    assert_eq!(
        values["echo"],
        json!({"replicas": 1, "message": "hello", "fromHook": "patched"})
    );
    assert_eq!(values["global"]["param1"], 200, "{values}");
    assert_eq!(
        values["global"]["fromFirst"], "memory",
        "global memory values reach module hooks: {values}"
    );
    let (_, cm) = sb.get(&format!("{CM}/echo-message"));
    assert_eq!(
        cm["data"],
        json!({"message": "hello", "fromHook": "patched"})
    );
    let (code, dep) = sb.get("/apis/apps/v1/namespaces/default/deployments/echo");
    assert_eq!(code, 200);
    assert_eq!(dep["metadata"]["labels"]["param1"], "200");

    // A module section change upgrades only that release.
    set_config(&sb, &[("echo", "message: bye\n")]);
    op.wait("echo upgraded", Duration::from_secs(60), || {
        releases(&sb).get("echo") == Some(&2)
    });
    let (_, cm) = sb.get(&format!("{CM}/echo-message"));
    assert_eq!(cm["data"]["message"], "bye");
    assert_eq!(releases(&sb).get("toggled"), Some(&1));

    // `module render` shows what a run would install, and installs nothing.
    let render = std::process::Command::new(common::bosun_bin())
        .args(["module", "render", "echo", "--debug-unix-socket"])
        .arg(w.join("debug.socket"))
        .output()
        .expect("bosun module render");
    let text = String::from_utf8_lossy(&render.stdout);
    assert!(
        render.status.success(),
        "{}",
        String::from_utf8_lossy(&render.stderr)
    );
    assert!(
        text.contains("kind: ConfigMap")
            && text.contains("name: echo-message")
            && text.contains("bye"),
        "{text}"
    );
    assert_eq!(
        releases(&sb).get("echo"),
        Some(&2),
        "rendering installs nothing"
    );
    let monitors = std::process::Command::new(common::bosun_bin())
        .args([
            "module",
            "resource-monitor",
            "-o",
            "json",
            "--debug-unix-socket",
        ])
        .arg(w.join("debug.socket"))
        .output()
        .expect("bosun module resource-monitor");
    let monitors: serde_json::Value =
        serde_json::from_slice(&monitors.stdout).expect("resource-monitor json");
    assert!(
        monitors["echo"]
            .as_array()
            .is_some_and(|ids| ids.iter().any(|i| i == "ConfigMap/echo-message")),
        "{monitors}"
    );

    // A global change reloads all modules; only the release whose manifests change moves.
    set_config(&sb, &[("global", "param1: 300\n")]);
    op.wait("the reload converge", Duration::from_secs(60), || {
        journal_converges(w) >= 2
    });
    assert_eq!(
        releases(&sb),
        BTreeMap::from([
            ("echo".into(), 3),
            ("ignored".into(), 1),
            ("toggled".into(), 1)
        ]),
        "an unchanged release gets no new revision; {}",
        op.logs()
            .lines()
            .filter(|l| l.contains("upgrading release"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Disabling through the ConfigMap deletes the release and runs the delete hooks;
    // enabling again installs it and runs onStartup again.
    set_config(&sb, &[("toggledEnabled", "false")]);
    op.wait("toggled uninstalled", Duration::from_secs(60), || {
        !releases(&sb).contains_key("toggled") && sb.get(&format!("{CM}/toggled")).0 == 404
    });
    op.wait("afterDeleteHelm ran", Duration::from_secs(30), || {
        events_log(w).contains(&"toggled afterDeleteHelm".to_string())
    });
    // Helm's results are logged at INFO: install and upgrade with their revision, and the
    // uninstall.
    let logs = op.logs();
    let info_line = |what: &str, release: &str| {
        logs.lines()
            .find(|l| {
                l.contains("INFO") && l.contains(what) && l.contains(&format!("release={release}"))
            })
            .map(str::to_string)
    };
    let installed = info_line("release installed", "toggled").unwrap_or_default();
    assert!(
        installed.contains("revision=1") && installed.contains("duration="),
        "{logs}"
    );
    let upgraded = info_line("release upgraded", "echo").unwrap_or_default();
    assert!(
        upgraded.contains("revision=") && upgraded.contains("duration="),
        "{logs}"
    );
    assert!(
        info_line("release uninstalled", "toggled").is_some(),
        "{logs}"
    );
    set_config(&sb, &[("toggledEnabled", "true")]);
    op.wait("toggled installed again", Duration::from_secs(60), || {
        releases(&sb).contains_key("toggled") && sb.get(&format!("{CM}/toggled")).0 == 200
    });
    assert_eq!(
        events_log(w)
            .iter()
            .filter(|l| *l == "toggled onStartup")
            .count(),
        2
    );
    // Module hooks see every enabled module in run order as `global.enabledModules`.
    let seen = std::fs::read_to_string(w.join("out/enabled-modules.log")).unwrap_or_default();
    assert_eq!(
        seen.lines().next(),
        Some(r#"["echo", "toggled", "hooks-only"]"#),
        "{seen}"
    );

    // The seed's own form: a module section of "false" disables the module; removing it
    // enables the module again.
    edit_config(&sb, &[("toggled", "false")], &["toggledEnabled"]);
    op.wait(
        "toggled uninstalled by its section",
        Duration::from_secs(60),
        || !releases(&sb).contains_key("toggled"),
    );
    edit_config(&sb, &[], &["toggled"]);
    op.wait(
        "toggled back once the section is gone",
        Duration::from_secs(60),
        || releases(&sb).contains_key("toggled"),
    );

    // Auto-healing: a deleted Deployment and an edited ConfigMap come back.
    let (code, _) = sb.request(
        "DELETE",
        "/apis/apps/v1/namespaces/default/deployments/echo",
        "",
        "",
    );
    assert_eq!(code, 200);
    op.wait("the Deployment restored", Duration::from_secs(60), || {
        sb.get("/apis/apps/v1/namespaces/default/deployments/echo")
            .0
            == 200
    });
    let (_, mut cm) = sb.get(&format!("{CM}/echo-message"));
    cm["data"]["message"] = json!("edited by hand");
    let (code, body) = sb.put(&format!("{CM}/echo-message"), &cm);
    assert_eq!(code, 200, "{body}");
    op.wait("the edit reverted", Duration::from_secs(60), || {
        sb.get(&format!("{CM}/echo-message")).1["data"]["message"] == "bye"
    });
    drop(op);
}

#[test]
fn switching_the_helm_engine_redoes_no_release() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    copy_modules("lifecycle", w);
    let installed = BTreeMap::from([("echo".into(), 1), ("toggled".into(), 1)]);
    let mut op = start(&sb, w, HelmEngine::Library, &[]);
    assert_engine(&op, HelmEngine::Library, 1);
    op.wait("the first converge", Duration::from_secs(90), || {
        journal_converges(w) >= 1 && releases(&sb) == installed
    });
    op.kill9();
    drop(op);
    // The binary renders these charts as the library did: same checksums, nothing redone.
    let op = start(&sb, w, HelmEngine::Cli, &[]);
    assert_engine(&op, HelmEngine::Cli, 2);
    op.wait(
        "the converge after the restart",
        Duration::from_secs(90),
        || journal_converges(w) >= 2,
    );
    assert_eq!(releases(&sb), installed, "{}", op.logs());
    let skipped = op
        .logs()
        .lines()
        .skip_while(|l| !l.contains("engine=\"cli\""))
        .filter(|l| l.contains("release is up to date, upgrade skipped"))
        .count();
    assert!(skipped >= 2, "{}", op.logs());
}

/// A first start (an empty journal) in a namespace where one module's release exists
/// already, as after addon-operator: that release is upgraded, and the others, absent,
/// are installed (their first status comes from one list of the release Secrets).
#[test]
fn a_release_that_exists_before_the_first_start_is_upgraded_not_installed_again() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    copy_modules("lifecycle", w);
    let prior = w.join("prior");
    configmap_chart(&prior, "echo", "echo-prior");
    install_release(&sb, &prior, "echo", HelmEngine::Library);
    assert_eq!(releases(&sb).get("echo"), Some(&1));
    let op = start(&sb, w, HelmEngine::Library, &[]);
    op.wait("the first converge", Duration::from_secs(90), || {
        journal_converges(w) >= 1
    });
    assert_eq!(
        releases(&sb),
        BTreeMap::from([("echo".into(), 2), ("toggled".into(), 1)]),
        "{}",
        op.logs()
    );
    assert_eq!(sb.get(&format!("{CM}/echo-message")).0, 200);
    assert_eq!(
        sb.get(&format!("{CM}/echo-prior")).0,
        404,
        "the upgrade replaced the prior revision's objects"
    );
}

#[test]
fn a_helm_process_does_not_outlive_a_killed_bosun() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let m = w.join("modules");
    write(&m.join("values.yaml"), "waitsEnabled: true\n");
    // A pre-install hook Job: nothing runs Jobs in the sandbox, so Helm waits for it.
    write(
        &m.join("010-waits/templates/job.yaml"),
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: waits\n  annotations:\n    helm.sh/hook: pre-install\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: c\n          image: busybox\n",
    );
    let mut op = start_with_hooks(&sb, w, &w.join("no-global-hooks"), HelmEngine::Cli, &[]);
    op.wait(
        "helm waiting for the hook Job",
        Duration::from_secs(60),
        || sb.get("/apis/batch/v1/namespaces/default/jobs/waits").0 == 200,
    );
    // The values file of the call lives in the work folder: it names this test's helm.
    let needle = w.display().to_string();
    let helm = || {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains("helm install waits") && c.contains(&needle))
            .count()
    };
    assert_eq!(helm(), 1, "{}", op.logs());
    op.kill9();
    common::wait_for(
        "the helm process gone with bosun",
        Duration::from_secs(30),
        || helm() == 0,
    );
}

#[test]
fn without_the_library_a_helm_binary_found_is_used() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    copy_modules("lifecycle", w);
    // A tools folder with the binary only, and a working directory without `.tools`.
    let tools = w.join("tools");
    std::fs::create_dir_all(tools.join("helm")).expect("tools dir");
    std::os::unix::fs::symlink(common::helm_bin(), tools.join("helm/helm")).expect("symlink");
    let tools = tools.display().to_string();
    let op = Operator::start_in(
        &sb,
        &fixture("global-hooks/basic"),
        w,
        &[
            ("BOSUN_TOOLS_DIR", tools.as_str()),
            ("WORK", &w.display().to_string()),
            ("BOSUN_HELM_ENGINE", ""),
            ("HELM_BIN_PATH", ""),
            ("HELM_LIB_PATH", ""),
            ("BOSUN_HELM_LIBRARY", ""),
        ],
        Some(w),
    );
    assert_engine(&op, HelmEngine::Cli, 1);
    op.wait("the first converge", Duration::from_secs(90), || {
        journal_converges(w) >= 1
    });
    assert_eq!(
        releases(&sb),
        BTreeMap::from([("echo".into(), 1), ("toggled".into(), 1)])
    );
}

/// A chart named `chart` in `dir` whose one template is the ConfigMap `configmap`.
fn configmap_chart(dir: &Path, chart: &str, configmap: &str) {
    write(
        &dir.join("Chart.yaml"),
        &format!("apiVersion: v2\nname: {chart}\nversion: 0.1.0\n"),
    );
    write(
        &dir.join("templates/cm.yaml"),
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {configmap}\n"),
    );
}

/// Installs a release with the engine under test, as another tool would.
fn install_release(sb: &Sandbox, chart: &Path, name: &str, engine: HelmEngine) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = engine
            .open()
            .await
            .client(&bosun::helm::ClusterOptions {
                kubeconfig: Some(sb.kubeconfig.clone()),
                context: None,
                namespace: "default".into(),
                ..Default::default()
            })
            .expect("helm client");
        client
            .deploy(
                bosun::helm::Action::Install,
                chart,
                name,
                &json!({}),
                &Default::default(),
            )
            .await
            .expect("install");
    });
}

fn failing_modules_name_their_cause_and_the_others_still_converge(engine: HelmEngine) {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let m = w.join("modules");
    std::fs::write(
        m.join("values.yaml"),
        "goodEnabled: true\nbrokenChartEnabled: true\nbadScriptEnabled: true\n",
    )
    .expect("values.yaml");
    for (dir, template) in [
        (
            "010-good",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: good\n",
        ),
        ("900-broken-chart", "{{ .Values.nope.missing.field }}\n"),
        (
            "901-bad-script",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n",
        ),
    ] {
        std::fs::create_dir_all(m.join(dir).join("templates")).expect("module dir");
        std::fs::write(m.join(dir).join("templates/t.yaml"), template).expect("template");
    }
    let script = m.join("901-bad-script/enabled");
    std::fs::write(&script, "#!/bin/bash\necho 'cannot decide' >&2\nexit 3\n").expect("script");
    let status = std::process::Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .expect("chmod");
    assert!(status.success());

    let op = start(&sb, w, engine, &[("BOSUN_TASK_MAX_ATTEMPTS", "2")]);
    let journal = w.join("journal");
    op.wait("the good module installed", Duration::from_secs(60), || {
        releases(&sb).contains_key("good")
    });
    let failure = |module: &str| module_failure(&journal, module, 2);
    op.wait(
        "the broken chart failed twice (retried with backoff)",
        Duration::from_secs(60),
        || failure("broken-chart").is_some(),
    );
    let err = failure("broken-chart").unwrap_or_default();
    assert!(
        err.contains("module broken-chart") && err.contains("does not render"),
        "{err}"
    );
    op.wait(
        "the enabled script failed twice",
        Duration::from_secs(60),
        || failure("bad-script").is_some(),
    );
    let err = failure("bad-script").unwrap_or_default();
    assert!(
        err.contains("module bad-script")
            && err.contains("enabled script")
            && err.contains("cannot decide"),
        "{err}"
    );
    assert!(!releases(&sb).contains_key("bad-script"));
    let (state, _) = journal_state(&journal);
    assert_eq!(
        state.tasks.parked.get("main").map(Vec::len),
        Some(2),
        "both failing runs parked, the queue went on"
    );
    drop(op);
}

fn kill_9_at_random_points_of_the_first_converge_changes_no_outcome(engine: HelmEngine) {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    copy_modules("lifecycle", w);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7);
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut op = start(&sb, w, engine, &[]);
    let mut delays = Vec::new();
    for _ in 0..20 {
        let delay = Duration::from_millis(100 + next() % 2500);
        delays.push(delay.as_millis());
        std::thread::sleep(delay);
        op.kill9();
        op.spawn();
    }
    let settled = || {
        let (state, _) = journal_state(&w.join("journal"));
        !state.converge.in_progress && state.converge.completed >= 1 && releases(&sb).len() == 2
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !settled() {
        if std::time::Instant::now() > deadline {
            let out = std::process::Command::new(common::bosun_bin())
                .args(["journal", "log", "--journal-dir"])
                .arg(w.join("journal"))
                .output()
                .expect("bosun journal log");
            let log = String::from_utf8_lossy(&out.stdout).to_string();
            let last = |text: &str, n: usize| {
                let v: Vec<&str> = text.lines().collect();
                v[v.len().saturating_sub(n)..].join("\n")
            };
            panic!(
                "no settled converge after the last restart (seed {seed}, delays {delays:?}); journal ends with:\n{}\n\noperator log ends with:\n{}",
                last(&log, 40),
                last(&op.logs(), 30)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        releases(&sb),
        BTreeMap::from([("echo".into(), 1), ("toggled".into(), 1)]),
        "no release gets an extra revision (seed {seed}, delays {delays:?})"
    );
    let (_, cm) = sb.get(&format!("{CM}/echo-message"));
    assert_eq!(
        cm["data"],
        json!({"message": "hello", "fromHook": "patched"})
    );
    assert_eq!(sb.get(&format!("{CM}/toggled")).0, 200);
    let (state, _) = journal_state(&w.join("journal"));
    let enabled: Vec<&str> = state
        .modules
        .iter()
        .filter(|(_, m)| m.enabled)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(enabled, ["echo", "hooks-only", "toggled"]);
    assert_eq!(state.modules["echo"].phase, bosun_addon::ModulePhase::Ready);
    assert!(state.anomalies.is_empty(), "{:?}", state.anomalies);
}

fn write(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(path, text).expect("write");
}

/// The first failure message of a module's ModuleRun once it failed `times` times.
fn module_failure(journal: &Path, module: &str, times: u32) -> Option<String> {
    let (_, events) = common::try_journal_state(journal)?;
    let ids: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Task(TaskEvent::TaskEnqueued { task, .. })
                if task.kind.module() == Some(module) =>
            {
                Some(task.id)
            }
            _ => None,
        })
        .collect();
    events.iter().find_map(|e| match e {
        Event::Task(TaskEvent::TaskFailed {
            id,
            error,
            failures,
            ..
        }) if ids.contains(id) && *failures >= times => Some(error.clone()),
        _ => None,
    })
}

#[test]
fn the_seed_values_example_and_openapi_schemas() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let m = w.join("modules");
    write(
        &m.join("values.yaml"),
        "global:\n  param1: 100\n  param2: \"Yes\"\nsomeModuleEnabled: true\nbadPatchEnabled: true\nstrictEnabled: true\n",
    );
    // The seed's "Using values in the hook" example.
    write(
        &m.join("001-some-module/values.yaml"),
        "someModule:\n  param1: \"String\"\n",
    );
    common::write_exec(
        &m.join("001-some-module/hooks/hook.sh"),
        r#"#!/bin/bash
if [[ "$1" == "--config" ]]; then echo '{"configVersion":"v1","beforeHelm":1,"afterHelm":1}'; exit 0; fi
binding=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["binding"])' "$BINDING_CONTEXT_PATH")
cp "$CONFIG_VALUES_PATH" "$OUT_DIR/some.$binding.config-values.json"
cp "$VALUES_PATH" "$OUT_DIR/some.$binding.values.json"
if [[ "$binding" == "beforeHelm" ]]; then
  echo '[{"op":"add", "path":"/someModule/param3", "value":"newValue"}]' > "$CONFIG_VALUES_JSON_PATCH_PATH"
fi
"#,
    );
    // A config patch the module's schema rejects.
    write(
        &m.join("002-bad-patch/openapi/config-values.yaml"),
        "type: object\nproperties:\n  replicas: {type: integer}\n",
    );
    common::write_exec(
        &m.join("002-bad-patch/hooks/hook.sh"),
        r#"#!/bin/bash
if [[ "$1" == "--config" ]]; then echo '{"configVersion":"v1","beforeHelm":1}'; exit 0; fi
echo '[{"op":"add", "path":"/badPatch/replicas", "value":"many"}]' > "$CONFIG_VALUES_JSON_PATCH_PATH"
"#,
    );
    // Values that miss what Helm needs (x-required-for-helm).
    write(
        &m.join("003-strict/openapi/values.yaml"),
        "type: object\nx-required-for-helm: [token]\nproperties:\n  token: {type: string}\n",
    );
    write(
        &m.join("003-strict/templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: strict\ndata:\n  token: {{ .Values.strict.token | quote }}\n",
    );
    set_config(
        &sb,
        &[
            ("global", "param1: 200\n"),
            ("someModule", "param1: \"Long string\"\nparam2: \"FOO\"\n"),
        ],
    );
    let op = start_with_hooks(
        &sb,
        w,
        &w.join("no-global-hooks"),
        HelmEngine::Library,
        &[("BOSUN_TASK_MAX_ATTEMPTS", "2")],
    );
    let out = w.join("out");
    op.wait(
        "the some-module afterHelm run",
        Duration::from_secs(60),
        || out.join("some.afterHelm.values.json").exists(),
    );
    assert_eq!(
        read_json(&out.join("some.beforeHelm.config-values.json")),
        json!({"global": {"param1": 200}, "someModule": {"param1": "Long string", "param2": "FOO"}})
    );
    let values = read_json(&out.join("some.beforeHelm.values.json"));
    assert_eq!(
        values["someModule"],
        json!({"param1": "Long string", "param2": "FOO"})
    );
    assert_eq!(values["global"]["param1"], 200);
    assert_eq!(values["global"]["param2"], "Yes");
    // The config patch landed in the ConfigMap and the next run sees it.
    let (_, cm) = sb.get(&format!("{CM}/addon-operator"));
    let section: serde_json::Value =
        serde_saphyr::from_str(cm["data"]["someModule"].as_str().unwrap_or_default())
            .expect("someModule section is YAML");
    assert_eq!(
        section,
        json!({"param1": "Long string", "param2": "FOO", "param3": "newValue"})
    );
    assert_eq!(
        read_json(&out.join("some.afterHelm.config-values.json"))["someModule"]["param3"],
        "newValue"
    );

    let journal = w.join("journal");
    op.wait(
        "the rejected config patch retried",
        Duration::from_secs(60),
        || module_failure(&journal, "bad-patch", 2).is_some(),
    );
    let err = module_failure(&journal, "bad-patch", 2).unwrap_or_default();
    assert!(
        err.contains("module bad-patch")
            && err.contains("config values patch rejected")
            && err.contains("/replicas"),
        "{err}"
    );
    assert!(
        !sb.get(&format!("{CM}/addon-operator")).1["data"]
            .as_object()
            .is_some_and(|d| d.contains_key("badPatch")),
        "a rejected patch is not written"
    );
    op.wait(
        "the strict module failing before Helm",
        Duration::from_secs(60),
        || module_failure(&journal, "strict", 2).is_some(),
    );
    let err = module_failure(&journal, "strict", 2).unwrap_or_default();
    assert!(
        err.contains("module strict") && err.contains("for Helm") && err.contains("token"),
        "{err}"
    );
    assert_eq!(sb.get(&format!("{CM}/strict")).0, 404);
}

fn a_missing_namespace_fails_the_module_run_with_the_cause_and_retries(engine: HelmEngine) {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let m = w.join("modules");
    write(&m.join("values.yaml"), "lonelyEnabled: true\n");
    write(
        &m.join("010-lonely/templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lonely\n",
    );
    let op = start_with_hooks(
        &sb,
        w,
        &w.join("no-global-hooks"),
        engine,
        &[("ADDON_OPERATOR_NAMESPACE", "absent")],
    );
    let journal = w.join("journal");
    op.wait(
        "the module run failing twice",
        Duration::from_secs(60),
        || module_failure(&journal, "lonely", 2).is_some(),
    );
    let err = module_failure(&journal, "lonely", 2).unwrap_or_default();
    assert!(
        err.contains("module lonely") && err.contains("\"absent\" not found"),
        "{err}"
    );
    // Once the namespace exists, the retry succeeds.
    let (code, body) = sb.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "absent"}}),
    );
    assert_eq!(code, 201, "{body}");
    op.wait("the release installed", Duration::from_secs(120), || {
        sb.get("/api/v1/namespaces/absent/configmaps/lonely").0 == 200
    });
}

fn a_config_map_change_during_a_converge_restarts_it(engine: HelmEngine) {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let m = w.join("modules");
    write(
        &m.join("values.yaml"),
        "slowEnabled: true\nfastEnabled: true\n",
    );
    common::write_exec(
        &m.join("010-slow/hooks/slow.sh"),
        "#!/bin/bash\nif [[ \"$1\" == \"--config\" ]]; then echo '{\"configVersion\":\"v1\",\"beforeHelm\":1}'; exit 0; fi\ntouch \"$OUT_DIR/slow.started\"\nfor _ in $(seq 600); do [ -f \"$OUT_DIR/slow.go\" ] && break; sleep 0.1; done\n",
    );
    write(
        &m.join("020-fast/templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fast\ndata:\n  param: {{ .Values.global.param | default \"none\" | quote }}\n",
    );
    let op = start_with_hooks(&sb, w, &w.join("no-global-hooks"), engine, &[]);
    let out = w.join("out");
    op.wait("the slow module running", Duration::from_secs(60), || {
        out.join("slow.started").exists()
    });
    set_config(&sb, &[("global", "param: new\n")]);
    // The slow hook holds the first converge until bosun has taken the change in.
    op.wait(
        "bosun restarting the converge in progress",
        Duration::from_secs(60),
        || {
            op.logs()
                .contains("config values changed during a converge: restarting it")
        },
    );
    std::fs::write(out.join("slow.go"), "").expect("release the slow hook");
    op.wait(
        "the restarted converge finished",
        Duration::from_secs(60),
        || {
            common::try_journal_state(&w.join("journal")).is_some_and(|(s, events)| {
                s.converge.completed >= 1
                    && !s.converge.in_progress
                    && events.iter().any(|e| {
                        matches!(e, Event::ConvergeStarted { reason } if reason == "ReloadAllModules")
                    })
            })
        },
    );
    let (_, events) = journal_state(&w.join("journal"));
    let dropped: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Task(TaskEvent::TaskDropped { reason, .. }) => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        !dropped.is_empty() && dropped.iter().all(|r| r.contains("ReloadAllModules")),
        "the pending steps of the first converge were dropped: {dropped:?}"
    );
    let reasons: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::ConvergeStarted { reason } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, ["OperatorStartup", "ReloadAllModules"]);
    let (_, cm) = sb.get(&format!("{CM}/fast"));
    assert_eq!(cm["data"]["param"], "new");
    assert_eq!(
        releases(&sb).get("fast"),
        Some(&1),
        "the fast module was installed once, with the new values"
    );
}

/// How many revisions Helm stored for `release`, whatever their status.
fn release_records(sb: &Sandbox, release: &str) -> usize {
    let (code, list) = sb.get(&format!(
        "/api/v1/namespaces/default/secrets?labelSelector=owner%3Dhelm%2Cname%3D{release}"
    ));
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().map(Vec::len).unwrap_or(0)
}

fn a_rejected_manifest_is_not_installed_again_at_once(engine: HelmEngine) {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let m = w.join("modules");
    std::fs::write(m.join("values.yaml"), "rejectedEnabled: true\n").expect("values.yaml");
    std::fs::create_dir_all(m.join("010-rejected/templates")).expect("module dir");
    // The API server refuses the name: every attempt fails the same way.
    std::fs::write(
        m.join("010-rejected/templates/t.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n",
    )
    .expect("template");
    let op = start(&sb, w, engine, &[("BOSUN_TASK_MAX_ATTEMPTS", "1")]);
    assert_engine(&op, engine, 1);
    let journal = w.join("journal");
    op.wait("the module run failed", Duration::from_secs(60), || {
        module_failure(&journal, "rejected", 1).is_some()
    });
    let err = module_failure(&journal, "rejected", 1).unwrap_or_default();
    assert!(err.contains("Bad_Name"), "{err}");
    // One Helm attempt in the failed task: one stored revision, and no immediate retry.
    assert_eq!(release_records(&sb, "rejected"), 1, "{}", op.logs());
    assert!(
        !op.logs().contains("retrying once"),
        "a rejected manifest is not retried at once: {}",
        op.logs()
    );
    drop(op);
}

/// A module's own hook deletes one of its release's objects: the resource monitor waits
/// while the module's hook runs (it may be recreating objects), as addon-operator's pauses
/// it, and once the hook is done it finds the object absent and re-runs the module, which
/// puts it back. The order comes from the journal's sequence.
#[test]
fn an_object_a_module_s_hook_deleted_is_healed_once_the_hook_is_done() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let m = w.join("modules");
    std::fs::create_dir_all(m.join("050-healed/templates")).expect("module");
    std::fs::write(m.join("values.yaml"), "healedEnabled: true\n").expect("values.yaml");
    std::fs::write(
        m.join("050-healed/templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: healed-object\ndata:\n  state: rendered\n",
    )
    .expect("template");
    // On a ConfigMap labelled prune: delete the release's object, then work on a while
    // (the monitor ticks every second meanwhile).
    common::config_hook(
        &m.join("050-healed/hooks/prune.sh"),
        r#"{"configVersion":"v1","kubernetes":[{"name":"prune","kind":"ConfigMap","labelSelector":{"matchLabels":{"trigger":"prune"}},"executeHookOnSynchronization":false}]}"#,
        r#"echo '{"operation":"Delete","kind":"ConfigMap","namespace":"default","name":"healed-object"}' > "$KUBERNETES_PATCH_PATH"
sleep 3"#,
    );
    let hooks = w.join("no-global-hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    let op = start_with_hooks(&sb, w, &hooks, HelmEngine::Library, &[]);
    op.wait("the first converge", Duration::from_secs(90), || {
        journal_converges(w) >= 1 && sb.get(&format!("{CM}/healed-object")).0 == 200
    });
    let (code, body) = sb.post(
        CM,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "go", "labels": {"trigger": "prune"}}}),
    );
    assert_eq!(code, 201, "{body}");
    // Healed: the hook ran, then a ModuleRun of the monitor's put the object back.
    op.wait("the heal after the hook", Duration::from_secs(90), || {
        started_tasks(&w.join("journal"))
            .iter()
            .any(|t| t.starts_with("ModuleRun:healed:HelmResourcesDrifted"))
            && sb.get(&format!("{CM}/healed-object")).0 == 200
    });
    let tasks = started_tasks(&w.join("journal"));
    let hook = tasks
        .iter()
        .position(|t| t.starts_with("ModuleHookRun:") && t.contains("prune"))
        .unwrap_or_else(|| panic!("the hook ran: {tasks:?}"));
    let heal = tasks
        .iter()
        .position(|t| t.starts_with("ModuleRun:healed:HelmResourcesDrifted"))
        .unwrap_or_else(|| panic!("a heal: {tasks:?}"));
    assert!(hook < heal, "the heal came after the hook: {tasks:?}");
    // The heal was not started while the hook still ran: its task was enqueued after the
    // hook's task ended.
    let (_, events) = journal_state(&w.join("journal"));
    let mut hook_id = None;
    let (mut hook_done, mut heal_queued) = (None, None);
    for (seq, e) in events.iter().enumerate() {
        match e {
            Event::Task(TaskEvent::TaskEnqueued { task, .. }) => {
                if task.description.contains("prune") {
                    hook_id = Some(task.id);
                }
                if task.description.starts_with("healed:HelmResourcesDrifted") {
                    heal_queued.get_or_insert(seq);
                }
            }
            Event::Task(TaskEvent::TaskSucceeded { id, .. }) if Some(*id) == hook_id => {
                hook_done.get_or_insert(seq);
            }
            _ => {}
        }
    }
    assert!(
        hook_done.is_some_and(|d| heal_queued.is_some_and(|q| d < q)),
        "hook done at {hook_done:?}, heal queued at {heal_queued:?}"
    );
}

/// Invoked as `addon-operator` (addon-operator's images run `/addon-operator`, its manifests
/// `addon-operator start`) with addon-operator's own `start` flags, bosun runs the modules
/// alone: the module's chart is installed, while no lambda controller or deployer runs and
/// none of their CRDs is created in a cluster whose owner only swapped the image.
#[test]
fn invoked_as_addon_operator_start_bosun_runs_the_modules_alone() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    common::configmap_module(
        &w.join("flagged-modules/010-swapped"),
        "swapped",
        "made-by-addon-operator",
    );
    std::fs::create_dir_all(w.join("global-hooks")).expect("global hooks");
    let link = w.join("addon-operator");
    std::os::unix::fs::symlink(common::bosun_bin(), &link).expect("link");
    let log_path = w.join("addon-operator.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let mut cmd = std::process::Command::new(&link);
    cmd.arg("start")
        // addon-operator's flags, each over its variable (MODULES_DIR points elsewhere).
        .arg(format!(
            "--modules-dir={}",
            w.join("flagged-modules").display()
        ))
        .arg(format!(
            "--global-hooks-dir={}",
            w.join("global-hooks").display()
        ))
        .arg(format!("--kube-config={}", sb.kubeconfig.display()))
        .args([
            "--namespace=default",
            "--log-level=debug",
            "--log-type=json",
        ])
        .args([
            "--prometheus-listen-address=127.0.0.1",
            "--prometheus-listen-port=0",
        ])
        .arg(format!("--tmp-dir={}", w.join("tmp").display()))
        .arg(format!(
            "--debug-unix-socket={}",
            w.join("debug.socket").display()
        ))
        .env("MODULES_DIR", w.join("nowhere"))
        .env("BOSUN_JOURNAL_DIR", w.join("journal"));
    for (k, v) in HelmEngine::Library.env() {
        cmd.env(k, v);
    }
    let child = cmd
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start bosun as addon-operator");
    let _child = common::Killed(child);
    let logs = || std::fs::read_to_string(&log_path).unwrap_or_default();
    common::wait_for("the module's release", Duration::from_secs(90), || {
        releases(&sb).get("swapped") == Some(&1)
    });
    let (code, cm) = sb.get(&format!("{CM}/made-by-addon-operator"));
    assert_eq!(code, 200, "{cm}");
    assert!(
        w.join("debug.socket").exists(),
        "--debug-unix-socket is taken"
    );
    let logs_now = logs();
    assert!(
        logs_now.lines().any(|l| l.starts_with('{')),
        "--log-type=json: {logs_now}"
    );
    assert!(
        !logs_now.contains("lambda controllers running") && !logs_now.contains("deployer running"),
        "{logs_now}"
    );
    for crd in [
        "compositecontrollers.metacontroller.k8s.io",
        "decoratorcontrollers.metacontroller.k8s.io",
        "controllerrevisions.metacontroller.k8s.io",
        "deployitems.landscaper.gardener.cloud",
        "targets.landscaper.gardener.cloud",
        "contexts.landscaper.gardener.cloud",
        "syncobjects.landscaper.gardener.cloud",
    ] {
        let (code, _) = sb.get(&format!(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}"
        ));
        assert_eq!(code, 404, "{crd} is not installed: {logs_now}");
    }
    // A flag asking for what bosun lacks stops the start, naming it.
    let out = std::process::Command::new(&link)
        .args(["start", "--admission-server-enabled=true"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--admission-server-enabled"), "{err}");
}

/// Values in the ConfigMap that a module's schema refuses, there when bosun starts: bosun
/// stops with an error naming the module and the field (the seed: "If validation fails on
/// startup, the addon-operator stops"), and installs nothing.
#[test]
fn invalid_config_values_at_start_stop_bosun_naming_the_module_and_field() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let m = w.join("modules");
    write(&m.join("values.yaml"), "webEnabled: true\n");
    write(
        &m.join("001-web/openapi/config-values.yaml"),
        "type: object\nproperties:\n  replicas: {type: integer}\n",
    );
    write(
        &m.join("001-web/templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-installed\n",
    );
    set_config(&sb, &[("web", "replicas: many\n")]);
    let mut op = start_with_hooks(&sb, w, &w.join("no-global-hooks"), HelmEngine::Library, &[]);
    let exited = op.wait_exit(Duration::from_secs(60));
    let logs = op.logs();
    assert_eq!(exited, Some(false), "bosun kept running: {logs}");
    assert!(
        logs.contains("web") && logs.contains("replicas"),
        "the error names the module and the field: {logs}"
    );
    assert_eq!(
        sb.get(&format!("{CM}/web-installed")).0,
        404,
        "nothing was installed"
    );
}

/// An `enabled` script reads `global.enabledModules` in its values: the modules enabled
/// before it, in order. Here `c` enables itself only when `a` is enabled before it, and
/// sees `b`, disabled by its own script, left out.
#[test]
fn an_enabled_script_sees_the_modules_enabled_before_it() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let m = w.join("modules");
    write(
        &m.join("values.yaml"),
        "aEnabled: true\nbEnabled: true\ncEnabled: true\n",
    );
    for (dir, name) in [("010-a", "a"), ("030-c", "c")] {
        write(
            &m.join(format!("{dir}/templates/cm.yaml")),
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: module-{name}\n"),
        );
    }
    common::write_exec(
        &m.join("020-b/enabled"),
        "#!/bin/bash\necho false > \"$MODULE_ENABLED_RESULT\"\n",
    );
    common::write_exec(
        &m.join("030-c/enabled"),
        r#"#!/bin/bash
cp "$VALUES_PATH" "$OUT_DIR/c.enabled.values.json"
if python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["global"]["enabledModules"] == ["a"] else 1)' "$VALUES_PATH"; then
  echo true > "$MODULE_ENABLED_RESULT"
else
  echo false > "$MODULE_ENABLED_RESULT"
fi
"#,
    );
    let op = start_with_hooks(&sb, w, &w.join("no-global-hooks"), HelmEngine::Library, &[]);
    op.wait("module c installed", Duration::from_secs(60), || {
        sb.get(&format!("{CM}/module-c")).0 == 200
    });
    let values = read_json(&w.join("out/c.enabled.values.json"));
    assert_eq!(values["global"]["enabledModules"], json!(["a"]), "{values}");
}

/// A module's afterHelm hook that changes the module's values: the module runs again
/// right after (addon-operator inserts a new ModuleRun), so Helm renders the new value.
#[test]
fn a_values_change_in_after_helm_runs_the_module_again() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let m = w.join("modules");
    write(&m.join("values.yaml"), "echoEnabled: true\n");
    write(&m.join("001-echo/values.yaml"), "echo:\n  stage: first\n");
    write(
        &m.join("001-echo/templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: echo-stage\ndata:\n  stage: {{ .Values.echo.stage | quote }}\n",
    );
    // Sets the stage once: a second afterHelm run finds it set and changes nothing.
    common::write_exec(
        &m.join("001-echo/hooks/after.sh"),
        r#"#!/bin/bash
if [[ "$1" == "--config" ]]; then echo '{"configVersion":"v1","afterHelm":1}'; exit 0; fi
if ! grep -q '"second"' "$VALUES_PATH"; then
  echo '[{"op":"add","path":"/echo/stage","value":"second"}]' > "$VALUES_JSON_PATCH_PATH"
fi
"#,
    );
    let op = start_with_hooks(&sb, w, &w.join("no-global-hooks"), HelmEngine::Library, &[]);
    op.wait(
        "the module run again with the value afterHelm set",
        Duration::from_secs(60),
        || {
            let (code, cm) = sb.get(&format!("{CM}/echo-stage"));
            code == 200 && cm["data"]["stage"] == "second"
        },
    );
    // `module patches` shows the memory values patch that did it (addon-operator's
    // `module patches <name>`).
    let patches = common::run_ok(&mut common::debug_cli(
        &w.join("debug.socket"),
        &["module", "patches", "echo"],
    ));
    assert!(
        patches.contains("/echo/stage") && patches.contains("second"),
        "{patches}"
    );
}
