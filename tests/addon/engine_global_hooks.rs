//! The engine with real hook processes against the sandbox: the startup sequence, the file
//! contract, values and config patches, the ConfigMap, and resuming after `kill -9`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{
    Operator, Sandbox, bosun_bin, converges, journal_state, read_json, wait_for, workdir,
};
use bosun_addon::{Event, TaskEvent, TaskType};
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/global-hooks")
        .join(name)
}

#[test]
fn global_hooks_run_in_order_with_the_file_contract_and_patches_flow() {
    let sb = Sandbox::start();
    let work = workdir();
    std::fs::write(
        work.path().join("modules/values.yaml"),
        "global:\n  param1: 100\n  param2: \"Yes\"\n",
    )
    .expect("values.yaml");
    // The ConfigMap overrides param1, as in the documentation's example.
    let (code, body) = sb.post(
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "addon-operator"}, "data": {"global": "param1: 200\n"}}),
    );
    assert_eq!(code, 201, "{body}");
    let op = Operator::start(&sb, &fixture("basic"), work.path());
    let out = work.path().join("out");
    wait_for(
        "the afterAll run of the second hook",
        Duration::from_secs(60),
        || out.join("second.afterAll.values.json").exists(),
    );

    // The HTTP endpoints: healthy, and ready once the first converge is done.
    let http_addr = op
        .logs()
        .lines()
        .find_map(|l| {
            l.split("bosun HTTP endpoints listening on http://")
                .nth(1)
                .map(|a| a.trim().to_string())
        })
        .expect("the HTTP address is printed");
    assert_eq!(
        common::http_raw(&http_addr, "GET", "/healthz", "", b"").0,
        200
    );
    wait_for(
        "/readyz after the first converge",
        Duration::from_secs(30),
        || common::http_raw(&http_addr, "GET", "/readyz", "", b"").0 == 200,
    );

    assert_eq!(
        read_json(&out.join("first.binding-context.json")),
        json!([{"binding": "onStartup"}])
    );
    assert_eq!(
        read_json(&out.join("first.values.json")),
        json!({"global": {"param1": 200, "param2": "Yes"}})
    );
    assert_eq!(
        read_json(&out.join("first.config-values.json")),
        json!({"global": {"param1": 200}})
    );
    let env = std::fs::read_to_string(out.join("first.env")).unwrap_or_default();
    assert_eq!(
        env.lines().collect::<Vec<_>>(),
        [
            "BINDING_CONTEXT_PATH",
            "CONFIG_VALUES_JSON_PATCH_PATH",
            "CONFIG_VALUES_PATH",
            "KUBERNETES_PATCH_PATH",
            "METRICS_PATH",
            "VALUES_JSON_PATCH_PATH",
            "VALUES_PATH"
        ]
    );
    // The second hook sees the first hook's memory and config patches.
    let second = read_json(&out.join("second.onStartup.values.json"));
    assert_eq!(
        second,
        json!({"global": {"param1": 200, "param2": "Yes", "param3": "newValue", "fromFirst": "memory"}})
    );
    assert_eq!(
        read_json(&out.join("second.beforeAll.binding-context.json")),
        json!([{"binding": "beforeAll", "snapshots": {}}])
    );
    // The config patch landed in the ConfigMap, as YAML.
    let (_, cm) = sb.get("/api/v1/namespaces/default/configmaps/addon-operator");
    let global: Value = serde_saphyr::from_str(cm["data"]["global"].as_str().unwrap_or_default())
        .unwrap_or_default();
    assert_eq!(global, json!({"param1": 200, "param3": "newValue"}));
    // Hook output is logged as it is read: waited for, not assumed written by now.
    op.wait("hook stdout logged", Duration::from_secs(60), || {
        op.logs().contains("first hook done")
    });
    // Temp files are removed after each run.
    let tmp = work.path().join("tmp");
    wait_for(
        "the hook temp files to be removed",
        Duration::from_secs(30),
        || std::fs::read_dir(&tmp).map(|d| d.count()).unwrap_or(0) == 0,
    );

    // Editing the ConfigMap reloads: beforeAll hooks run again with the new config values.
    let mut edited = cm.clone();
    edited["data"]["global"] = json!("param1: 300\nparam3: newValue\n");
    let (code, body) = sb.put(
        "/api/v1/namespaces/default/configmaps/addon-operator",
        &edited,
    );
    assert_eq!(code, 200, "{body}");
    wait_for(
        "a reload with the edited config values",
        Duration::from_secs(60),
        || {
            std::fs::read_to_string(out.join("second.beforeAll.values.json"))
                .is_ok_and(|t| t.contains("\"param1\":300"))
        },
    );
    let reasons: Vec<String> = journal_state(&work.path().join("journal"))
        .1
        .iter()
        .filter_map(|e| match e {
            Event::ConvergeStarted { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        ["OperatorStartup", "ReloadAllModules"],
        "our own ConfigMap write triggers no reload"
    );
}

#[test]
fn after_kill_9_values_and_failing_tasks_resume_from_the_journal() {
    let sb = Sandbox::start();
    let work = workdir();
    let out = work.path().join("out");
    let mut op = Operator::start(&sb, &fixture("restart"), work.path());
    let attempts = || {
        std::fs::read_to_string(out.join("flaky.log"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    // Two runs, and the second failure journaled (the hook's log line comes before it).
    let journaled_failures = || {
        common::try_journal_state(&work.path().join("journal"))
            .and_then(|(state, _)| {
                state
                    .tasks
                    .queues
                    .get("main")?
                    .iter()
                    .find(|t| t.spec.kind.hook() == Some("002-flaky.sh"))
                    .map(|t| t.failures)
            })
            .unwrap_or(0)
    };
    wait_for(
        "two failed attempts of the flaky hook",
        Duration::from_secs(60),
        || attempts() >= 2 && journaled_failures() >= 2,
    );
    // The retry's log lines name the task without repeating the previous error in it; the
    // error has its own field on the failure line.
    let logs = op.logs();
    let task_lines: Vec<&str> = logs
        .lines()
        .filter(|l| {
            l.contains("002-flaky.sh")
                && (l.contains("task started") || l.contains("task finished"))
        })
        .collect();
    assert!(task_lines.len() >= 3, "{logs}");
    for line in &task_lines {
        assert!(!line.contains("failures 1:"), "{line}");
    }
    assert!(
        logs.lines()
            .any(|l| l.contains("task failed") && l.contains("not allowed yet")),
        "{logs}"
    );
    op.kill9();

    let (state, _) = journal_state(&work.path().join("journal"));
    let flaky = state
        .tasks
        .queues
        .get("main")
        .and_then(|q| {
            q.iter()
                .find(|t| t.spec.kind.hook() == Some("002-flaky.sh"))
        })
        .cloned();
    let flaky = flaky.expect("the failing task is pending in the journal");
    assert!(flaky.failures >= 2, "{flaky:?}");
    assert!(flaky.last_error.contains("not allowed yet"), "{flaky:?}");

    std::fs::write(out.join("allow"), "").expect("allow");
    op.spawn();
    wait_for(
        "the flaky hook to succeed after the restart",
        Duration::from_secs(90),
        || {
            let (state, _) = journal_state(&work.path().join("journal"));
            state.converge.completed >= 1
        },
    );
    op.kill9();

    // The first hook run after the restart already saw the memory patch from before.
    let log = std::fs::read_to_string(out.join("remember.log")).unwrap_or_default();
    let runs: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_default())
        .collect();
    assert_eq!(runs.len(), 2, "onStartup runs once per start: {log}");
    assert_eq!(runs[0], json!({"global": {}}));
    assert_eq!(runs[1], json!({"global": {"remembered": "from-before"}}));

    // The same task resumed with its attempt count, and nothing else re-ran it.
    let (_, events) = journal_state(&work.path().join("journal"));
    let starts: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::Task(TaskEvent::TaskStarted { id, attempt }) if *id == flaky.spec.id => {
                Some(*attempt)
            }
            _ => None,
        })
        .collect();
    assert!(
        starts.len() >= 3 && starts.windows(2).all(|w| w[1] == w[0] + 1),
        "attempts continue across the restart: {starts:?}"
    );
    let flaky_tasks = events
        .iter()
        .filter(|e| matches!(e, Event::Task(TaskEvent::TaskEnqueued { task, .. }) if task.kind.hook() == Some("002-flaky.sh") && task.kind.task_type() == TaskType::GlobalHookRun))
        .count();
    assert_eq!(
        flaky_tasks, 1,
        "the pending task was reused, not duplicated"
    );
}

fn journal_cmd(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(bosun_bin())
        .arg("journal")
        .arg("--journal-dir")
        .arg(dir)
        .args(args)
        .output()
        .expect("bosun journal")
}

fn journal_ok(dir: &Path, args: &[&str]) -> String {
    let out = journal_cmd(dir, args);
    assert!(
        out.status.success(),
        "bosun journal {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn journal_cli_explains_a_real_run_while_bosun_holds_the_journal() {
    let sb = Sandbox::start();
    let work = workdir();
    let journal = work.path().join("journal");
    let _op = Operator::start(&sb, &fixture("basic"), work.path());
    wait_for("the first converge", Duration::from_secs(60), || {
        journal_cmd(&journal, &["state", "-o", "json"])
            .status
            .success()
            .then(|| journal_ok(&journal, &["state", "-o", "json"]))
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .is_some_and(|s| s["converge"]["completed"].as_u64() >= Some(1))
    });

    let log = journal_ok(&journal, &["log"]);
    assert!(
        log.contains("t1 GlobalHookRun:main:onStartup:001-first.sh queued"),
        "{log}"
    );
    assert!(
        log.contains(
            "global Memory values patched by 001-first.sh: add /global/fromFirst = \"memory\""
        ),
        "{log}"
    );
    assert!(log.contains("converge finished"), "{log}");
    let json_lines = journal_ok(&journal, &["log", "--queue", "main", "-o", "json"]);
    assert!(
        json_lines
            .lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["seq"].is_u64())),
        "{json_lines}"
    );

    let state: Value =
        serde_json::from_str(&journal_ok(&journal, &["state", "-o", "json"])).expect("state json");
    assert_eq!(
        state["values"]["global"]["config"],
        json!({"param3": "newValue"})
    );
    assert_eq!(
        state["values"]["global"]["memory"][0]["path"],
        "/global/fromFirst"
    );
    assert!(
        state["queues"].as_object().is_some_and(|q| q.is_empty()),
        "{state}"
    );
    let yaml = journal_ok(&journal, &["state", "--at", "1"]);
    assert!(
        yaml.contains("t1") || yaml.contains("id: 1"),
        "state at seq 1 has the first task queued: {yaml}"
    );

    let diff = journal_ok(&journal, &["diff", "0", "1000000"]);
    assert!(diff.contains("/values/global"), "{diff}");

    let why = journal_ok(&journal, &["why", "t1"]);
    let lines: Vec<&str> = why.lines().collect();
    assert!(
        lines.len() >= 3
            && lines[1].contains("t1 started (attempt 1)")
            && lines.last().is_some_and(|l| l.contains("t1 succeeded")),
        "{why}"
    );

    let stats = journal_ok(&journal, &["stats"]);
    assert!(
        stats.contains("taskEnqueued") && stats.contains("convergeFinished"),
        "{stats}"
    );
    let verify = journal_ok(&journal, &["verify"]);
    assert!(verify.contains("all checksums valid"), "{verify}");

    // Bad input: clear errors, non-zero exit.
    let missing = journal_cmd(&work.path().join("nope"), &["log"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));
    let not_journal = work.path().join("out");
    let wrong = journal_cmd(&not_journal, &["stats"]);
    assert!(!wrong.status.success());
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("not a bosun journal"),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
    let bad_task = journal_cmd(&journal, &["why", "banana"]);
    assert!(String::from_utf8_lossy(&bad_task.stderr).contains("invalid task id"));
}

#[test]
fn the_embedded_default_runs_the_samples_of_all_three_subsystems_against_its_own_sandbox() {
    let data = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(bosun_bin())
        .args([
            "run",
            "--sandbox",
            "--sandbox-listen",
            "127.0.0.1:0",
            "--data",
        ])
        .arg(data.path())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("GLOBAL_HOOKS_DIR")
        .env_remove("MODULES_DIR")
        .env_remove("KUBE_CONFIG")
        .env("ADDON_OPERATOR_LISTEN_PORT", "0")
        // The default is 127.0.0.1:9652; a free port keeps parallel runs apart.
        .env("DEBUG_HTTP_SERVER_ADDR", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(
            std::fs::File::create(data.path().join("..stderr"))
                .map_or_else(|_| Stdio::null(), Stdio::from),
        )
        .spawn()
        .expect("bosun run --sandbox");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let url = loop {
        match lines.next() {
            Some(Ok(l)) => {
                if let Some(u) = l.strip_prefix("sandbox API server listening on ") {
                    break u.trim().to_string();
                }
            }
            _ => {
                let _ = child.kill();
                panic!("bosun run --sandbox printed no address");
            }
        }
    };
    let addr = url.trim_start_matches("http://").to_string();
    let printed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = printed.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if let Ok(mut s) = sink.lock() {
                s.push_str(&line);
                s.push('\n');
            }
        }
    });
    let mut greeting = String::new();
    wait_for(
        "the sample hook's config value in the ConfigMap",
        Duration::from_secs(60),
        || {
            let (code, cm) = common::http(
                &addr,
                "GET",
                "/api/v1/namespaces/default/configmaps/addon-operator",
                "",
                "",
            );
            greeting = cm["data"]["global"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            code == 200 && greeting.contains("hello from bosun")
        },
    );
    // The sample modules: the greeter chart renders the global hook's value and its own
    // hook's; the optional module is enabled by its script; the audit module has no chart.
    let get = |path: &str| common::http(&addr, "GET", path, "", "");
    wait_for(
        "the greeter release rendered with the hooks' values",
        Duration::from_secs(60),
        || {
            let (code, cm) = get("/api/v1/namespaces/default/configmaps/greeter");
            code == 200
                && cm["data"]["greeting"] == "hello from bosun"
                && cm["data"]["setBy"] == "the beforeHelm hook"
        },
    );
    // Helm creates the release's objects one after another: the ConfigMap may come first.
    wait_for("the greeter Deployment", Duration::from_secs(60), || {
        get("/apis/apps/v1/namespaces/default/deployments/greeter").0 == 200
    });
    wait_for("the optional module", Duration::from_secs(60), || {
        get("/api/v1/namespaces/default/configmaps/optional").0 == 200
    });
    // The lambda examples: the CompositeController's child and status, the
    // DecoratorController's label and attachment.
    wait_for("the Hello's child", Duration::from_secs(60), || {
        let (code, cm) = get("/api/v1/namespaces/default/configmaps/world-greeting");
        code == 200 && cm["data"]["greeting"] == "hello, world!"
    });
    wait_for("the Hello's status", Duration::from_secs(60), || {
        let (_, hello) = get("/apis/examples.bosun.dev/v1/namespaces/default/hellos/world");
        hello["status"]["children"] == 1
            && hello["metadata"]["labels"]["examples.bosun.dev/decorated"] == "true"
    });
    wait_for(
        "the decorator's attachment",
        Duration::from_secs(60),
        || get("/api/v1/namespaces/default/configmaps/world-note").0 == 200,
    );
    // The deployer examples: both items Succeeded, their objects in the sandbox.
    for item in ["manifests", "helm-chart"] {
        wait_for(
            &format!("DeployItem {item} Succeeded"),
            Duration::from_secs(60),
            || {
                let (_, di) = get(&format!(
                    "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/deployitems/{item}"
                ));
                di["status"]["phase"] == "Succeeded"
            },
        );
    }
    assert_eq!(
        get("/api/v1/namespaces/default/configmaps/from-a-deploy-item").0,
        200
    );
    assert_eq!(
        get("/api/v1/namespaces/examples/configmaps/example-message").0,
        200
    );
    // The start-up output names a look-around command for each subsystem.
    wait_for("the look-around commands", Duration::from_secs(60), || {
        printed.lock().is_ok_and(|s| {
            ["  modules:", "  lambda:", "  deployer:", "  actors:"]
                .iter()
                .all(|l| s.contains(l))
        })
    });
    // The start-up output says where the web view is, and it is there.
    let web_view = || {
        printed.lock().ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("web view: http://"))
                .map(str::to_string)
        })
    };
    wait_for(
        "the web view's URL printed",
        Duration::from_secs(60),
        || web_view().is_some(),
    );
    let ui = web_view().unwrap_or_default();
    let (host, path) = ui.split_once('/').unwrap_or((&ui, ""));
    let (page_path, token) = path.split_once("?token=").unwrap_or((path, ""));
    assert!(
        host.starts_with("127.0.0.1:") && page_path == "ui" && token.len() == 64,
        "{ui}"
    );
    let (code, page) = common::http_raw(host, "GET", "/ui", "", b"");
    assert_eq!(code, 200);
    assert!(String::from_utf8_lossy(&page).contains("<html"), "{ui}");
    // The data answers on the TCP listener to the token only.
    let (code, _) = common::http_raw(host, "GET", "/lambda/controllers.json", "", b"");
    assert_eq!(code, 401);
    let bearer = format!("Bearer {token}");
    let get = |path: &str| {
        common::http_full(
            host,
            "GET",
            path,
            &[("Authorization", bearer.as_str())],
            b"",
        )
    };
    // The lambda and deployer views answer on the TCP listener too.
    let (code, body) = get("/lambda/controllers.json");
    let text = String::from_utf8_lossy(&body);
    assert!(
        code == 200 && text.contains("hello-labels"),
        "{code} {text}"
    );
    let (code, body) = get("/deployer/items.json");
    let text = String::from_utf8_lossy(&body);
    assert!(code == 200 && text.contains("helm-chart"), "{code} {text}");
    // `bosun explain`, live: a value names the hook that set it and what hooks see now; a
    // release object names the module whose chart renders it.
    let explain = |query: &str| -> Value {
        let (code, body) = get(&format!("/explain.json?{query}"));
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).expect("an explanation")
    };
    let greeting = explain("subject=values%20global.greeting");
    let lines = |v: &Value, key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| match l {
                Value::String(s) => s.clone(),
                other => other["what"].as_str().unwrap_or_default().to_string(),
            })
            .collect()
    };
    assert!(
        lines(&greeting, "history")
            .iter()
            .any(|l| l.starts_with("global config values patched by hook 001-cluster-info.sh"))
            && lines(&greeting, "now").iter().any(|l| l
                == "(live) the value hooks and Helm see: global.greeting = \"hello from bosun\""),
        "{greeting:#}"
    );
    let release_object = explain("subject=ConfigMap/greeter&namespace=default");
    assert!(
        release_object["madeBy"]
            .as_array()
            .is_some_and(|m| m.iter().any(|w| w
                .as_str()
                .is_some_and(|w| w.starts_with("module greeter: its Helm chart renders it")))),
        "{release_object:#}"
    );
    // As converged, the object is what the module's next upgrade would make of it; once
    // changed by hand, the explanation shows the drift.
    let now_says = |e: &Value, what: &str| {
        e["now"].as_array().is_some_and(|n| {
            n.iter()
                .any(|l| l.as_str().is_some_and(|l| l.contains(what)))
        })
    };
    assert!(
        now_says(&release_object, "no drift") && release_object["drift"].is_null(),
        "{release_object:#}"
    );
    let (code, patched) = common::http(
        &addr,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/greeter",
        "application/merge-patch+json",
        r#"{"data":{"greeting":"changed by hand"}}"#,
    );
    assert_eq!(code, 200, "{patched}");
    let drifted = explain("subject=ConfigMap/greeter&namespace=default");
    let drift = drifted["drift"].as_str().unwrap_or_default();
    assert!(
        now_says(
            &drifted,
            "drifted from what module greeter's next upgrade would make of it"
        ) && drift.contains("-  greeting: changed by hand")
            && drift.contains("+  greeting: hello from bosun"),
        "{drifted:#}"
    );
    // SIGTERM: the subsystems and their watches stop before the embedded API server, so
    // the shutdown logs no connection errors.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let exited = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => break None,
        }
    };
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let log = std::fs::read_to_string(data.path().join("..stderr")).unwrap_or_default();
    let after = log.split_once("shutting down").map_or("", |(_, rest)| rest);
    assert!(
        exited.is_some_and(|s| s.success())
            && log.contains("shutting down")
            && !after.contains("ERROR")
            && !after.contains("client error (Connect)"),
        "bosun run --sandbox stops cleanly on SIGTERM ({exited:?}); after \"shutting down\":\n{after}"
    );
    assert!(data.path().join("kubeconfig").exists());
    // Offline, from the journal folder: the module's runs and its state.
    let module = common::run_ok(
        Command::new(bosun_bin())
            .args(["explain", "Module/greeter", "--journal-dir"])
            .arg(data.path().join("journal"))
            .env("LOG_LEVEL", "error"),
    );
    assert!(
        module.contains("made by: the modules engine: module greeter (enabled")
            && module.contains("release greeter revision 1 applied")
            && module.contains("now: phase "),
        "{module}"
    );
    let (_, events) = journal_state(&data.path().join("journal"));
    assert!(events.iter().any(
        |e| matches!(e, Event::ValuesPatched { source, .. } if source == "001-cluster-info.sh")
    ));
}

#[test]
fn bad_hook_output_fails_the_task_with_a_named_error_and_parking_keeps_the_queue_going() {
    let sb = Sandbox::start();
    let work = workdir();
    let mut op = Operator::start_with(
        &sb,
        &fixture("bad-output"),
        work.path(),
        &[
            ("BOSUN_TASK_MAX_ATTEMPTS", "1"),
            ("BOSUN_HOOK_TIMEOUT", "1s"),
        ],
    );
    let journal = work.path().join("journal");
    wait_for(
        "the first converge despite the broken hooks",
        Duration::from_secs(60),
        || converges(&journal) >= 1,
    );
    op.kill9();
    let (state, _) = journal_state(&journal);
    let parked: Vec<(String, String)> = state
        .tasks
        .parked
        .get("main")
        .map(|p| {
            p.iter()
                .map(|t| {
                    (
                        t.spec.kind.hook().unwrap_or_default().to_string(),
                        t.last_error.clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let reason = |hook: &str| {
        parked
            .iter()
            .find(|(h, _)| h == hook)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("{hook} not parked: {parked:?}"))
    };
    let garbage = reason("001-garbage.sh");
    assert!(
        garbage.contains("001-garbage.sh")
            && garbage.contains("VALUES_JSON_PATCH_PATH")
            && garbage.contains("not a JSON patch stream"),
        "{garbage}"
    );
    let trespass = reason("002-trespass.sh");
    assert!(
        trespass.contains("/someModule/x") && trespass.contains("outside this hook's values"),
        "{trespass}"
    );
    let sleepy = reason("003-sleepy.sh");
    assert!(sleepy.contains("timed out after 1s"), "{sleepy}");
    let replace = reason("004-replace.py");
    assert!(
        replace.contains("replace") && replace.contains("only use add and remove"),
        "{replace}"
    );
    assert_eq!(
        state.scope_document(&bosun_addon::Scope::Global)["global"]["reached"],
        json!(true),
        "the queue went on to the good hook"
    );
}

#[test]
fn an_invalid_global_hook_config_stops_the_start_with_a_named_error() {
    let sb = Sandbox::start();
    let work = workdir();
    let out = Command::new(bosun_bin())
        .arg("run")
        .env("KUBE_CONFIG", &sb.kubeconfig)
        .env("GLOBAL_HOOKS_DIR", fixture("bad-config"))
        .env("BOSUN_JOURNAL_DIR", work.path().join("journal"))
        .env("ADDON_OPERATOR_TMP_DIR", work.path().join("tmp"))
        .env("ADDON_OPERATOR_LISTEN_PORT", "0")
        .output()
        .expect("bosun run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("001-bad.sh") && err.contains("onStartup") && err.contains("integer"),
        "{err}"
    );
}

#[test]
fn a_single_replica_with_addon_operator_ha_leads_and_says_standbys_would_not_follow() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = work.path().join("no-hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[
            ("ADDON_OPERATOR_HA", "true"),
            ("ADDON_OPERATOR_POD", "solo"),
            ("BOSUN_HA_LISTEN", "127.0.0.1:0"),
        ],
    );
    let journal = work.path().join("journal");
    op.wait(
        "a converge with ADDON_OPERATOR_HA=true",
        Duration::from_secs(60),
        || converges(&journal) >= 1,
    );
    let logs = op.logs();
    assert!(
        logs.contains("this replica is the leader") && logs.contains("solo.127-0-0-1.default.pod"),
        "{logs}"
    );
    let warning = logs
        .lines()
        .find(|l| l.contains("BOSUN_HA_TOKEN is not set"))
        .unwrap_or_else(|| panic!("no warning about the missing journal token: {logs}"));
    assert!(warning.contains("WARN"), "{warning}");
}

#[test]
fn a_flooding_hook_is_capped_in_the_log_and_a_background_child_does_not_hold_the_queue() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = common::global_hooks_dir(work.path());
    // 10 MB of output in 100-byte lines.
    common::config_hook(
        &hooks.join("001-flood.sh"),
        r#"{"configVersion":"v1","onStartup":1}"#,
        "head -c 10000000 /dev/zero | tr '\\0' 'x' | fold -w 100",
    );
    // A daemon started in the background keeps the hook's stdout open after it exits.
    let pid_file = work.path().join("daemon.pid");
    common::config_hook(
        &hooks.join("002-daemon.sh"),
        r#"{"configVersion":"v1","onStartup":2}"#,
        &format!(
            "sleep 300 &\necho $! > {}\necho started",
            pid_file.display()
        ),
    );
    let marker = work.path().join("after.done");
    common::config_hook(
        &hooks.join("003-after.sh"),
        r#"{"configVersion":"v1","onStartup":3}"#,
        &format!("touch {}", marker.display()),
    );
    let op = Operator::start(&sb, &hooks, work.path());
    // The queue goes on once the daemon's hook exits (after a short drain), long before
    // the daemon does.
    op.wait(
        "the hook after the daemon's ran",
        Duration::from_secs(90),
        || marker.exists(),
    );
    // The daemon's hook ran before the hook after it: its pid file is there.
    let pid = std::fs::read_to_string(&pid_file).unwrap_or_else(|e| {
        panic!(
            "{}: the daemon's hook wrote no pid ({e}):\n{}",
            pid_file.display(),
            op.logs()
        )
    });
    let pid = pid.trim();
    assert!(
        !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()),
        "pid file: {pid:?}"
    );
    let alive = Path::new("/proc").join(pid).exists();
    let _ = Command::new("kill").arg(pid).status();
    assert!(alive, "the daemon still ran while the queue went on");
    let logs = op.logs();
    assert!(
        logs.len() < 4_000_000,
        "10 MB of hook output made {} bytes of log",
        logs.len()
    );
    assert!(
        logs.contains("001-flood.sh")
            && logs.contains("not logged")
            && logs.contains("BOSUN_HOOK_LOG_LIMIT"),
        "the log says how much was dropped"
    );
}
