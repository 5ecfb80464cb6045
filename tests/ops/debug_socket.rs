//! The debug socket of a real `bosun run` against the sandbox, read with the `bosun queue |
//! global | module | actors | graph` commands: a failing hook in the queue dump, values a
//! hook wrote, an actor busy with a running hook and its mailbox draining afterwards, hand
//! edits of a module's objects in `module render --diff`, the module graph, and the
//! socket's permissions.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{Operator, Sandbox, bosun_bin, run_err, run_ok, workdir};
use serde_json::{Value, json};

use crate::common::debug_cli as cli;

/// Runs a debug command; `None` when it fails (the socket may not be there yet).
fn try_cli(socket: &Path, args: &[&str]) -> Option<String> {
    let out = cli(socket, args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn cli_json(socket: &Path, args: &[&str]) -> Value {
    let text = run_ok(&mut cli(socket, args));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn http_address(op: &Operator) -> String {
    op.http_address().expect("the HTTP address is printed")
}

#[test]
fn a_failing_hook_shows_in_the_queue_dump_and_values_in_global_values() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = common::global_hooks_dir(work.path());
    common::config_hook(
        &hooks.join("001-writer.sh"),
        r#"{"configVersion":"v1","onStartup":1}"#,
        r#"echo '[{"op":"add","path":"/global/debugProbe","value":"written-by-hook"}]' > "$VALUES_JSON_PATCH_PATH""#,
    );
    common::config_hook(
        &hooks.join("002-broken.sh"),
        r#"{"configVersion":"v1","onStartup":2}"#,
        r#"echo "the probe is broken" >&2
exit 1"#,
    );
    // A folder bosun has to create: it must be private.
    let socket = work.path().join("run/debug.socket");
    let socket_env = socket.display().to_string();
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[("DEBUG_UNIX_SOCKET", socket_env.as_str())],
    );

    let mut text = String::new();
    op.wait(
        "the broken hook's failure in `bosun queue list`",
        Duration::from_secs(60),
        || {
            text = try_cli(&socket, &["queue", "list"]).unwrap_or_default();
            text.contains("failures ")
        },
    );
    let header = text.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("Queue 'main': length ") && header.contains(", status: '"),
        "{text}"
    );
    let first = text
        .lines()
        .find(|l| l.starts_with(" 1. "))
        .unwrap_or_default();
    assert!(
        first.starts_with(" 1. GlobalHookRun:main:onStartup:")
            && first.contains("002-broken.sh:failures ")
            && first.contains("exit status 1: the probe is broken"),
        "{text}"
    );
    assert!(text.contains("\nSummary:\n- 'main' queue: "), "{text}");
    assert!(text.contains(" tasks to handle.\n"), "{text}");

    let list = cli_json(&socket, &["queue", "list", "-o", "json"]);
    let main = &list["active"][0];
    assert_eq!(main["name"], "main", "{list}");
    assert_eq!(
        list["summary"]["mainQueueTasks"], main["tasksCount"],
        "{list}"
    );
    assert_eq!(main["tasks"][0]["index"], 1, "{list}");
    assert!(
        main["tasks"][0]["description"]
            .as_str()
            .is_some_and(|d| d.contains(":failures ")),
        "{list}"
    );
    assert!(list["summary"]["otherQueues"]["tasks"].is_u64(), "{list}");
    assert!(list["summary"]["totalTasks"].is_u64(), "{list}");
    let yaml = run_ok(&mut cli(&socket, &["queue", "main", "-o", "yaml"]));
    assert!(yaml.contains("name: main"), "{yaml}");

    // Values the first hook wrote; the hooks; no module is enabled yet.
    let values = cli_json(&socket, &["global", "values", "-o", "json"]);
    assert_eq!(values["debugProbe"], "written-by-hook", "{values}");
    let yaml = run_ok(&mut cli(&socket, &["global", "values"]));
    assert!(yaml.contains("debugProbe: written-by-hook"), "{yaml}");
    let config = cli_json(&socket, &["global", "config", "-o", "json"]);
    assert!(config.is_object(), "{config}");
    // The memory patch that wrote it, from the journal.
    let patches = cli_json(&socket, &["global", "patches"]);
    let ops = patches[0]["Operations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        ops.iter()
            .any(|op| op["path"] == "/global/debugProbe" && op["value"] == "written-by-hook"),
        "{patches}"
    );
    let hooks_list = cli_json(&socket, &["global", "list", "-o", "json"]);
    let names = hooks_list["globalHooks"].to_string();
    assert!(
        names.contains("001-writer.sh") && names.contains("002-broken.sh"),
        "{hooks_list}"
    );
    assert_eq!(
        cli_json(&socket, &["module", "list", "-o", "json"]),
        json!({"enabledModules": [], "modules": []})
    );
    let err = run_err(&mut cli(&socket, &["module", "values", "nope"]));
    assert!(err.contains("module nope is not loaded"), "{err}");
    let raw = run_ok(&mut cli(&socket, &["raw", "/discovery"]));
    assert!(raw.contains("GET /queue/list."), "{raw}");

    // Private: the folder bosun created is 0700, the socket 0600; the public listener
    // serves no values.
    assert_eq!(mode(socket.parent().expect("parent")), 0o700);
    assert_eq!(mode(&socket), 0o600);
    let public = http_address(&op);
    assert_eq!(common::http_raw(&public, "GET", "/healthz", "", b"").0, 200);
    for path in ["/global/values.json", "/queue/list.json", "/actors.json"] {
        let (code, body) = common::http_raw(&public, "GET", path, "", b"");
        assert_eq!(
            code,
            404,
            "{path} on the public port: {}",
            String::from_utf8_lossy(&body)
        );
    }

    // Without a socket the commands say what to do.
    let missing = work.path().join("missing.socket");
    let err = run_err(&mut cli(&missing, &["queue", "list"]));
    assert!(
        err.contains(&format!(
            "cannot connect to the debug socket {}",
            missing.display()
        )) && err.contains("(is bosun running? set --debug-unix-socket)"),
        "{err}"
    );
}

/// Actors that are busy (a message in progress or background work running).
fn busy_with(actors: &Value, needle: &str) -> Vec<String> {
    actors["actors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| {
            a["jobs"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(a["inProgress"].as_object().map(|_| &a["inProgress"]))
                .any(|j| j["summary"].as_str().is_some_and(|s| s.contains(needle)))
        })
        .filter_map(|a| a["name"].as_str().map(String::from))
        .collect()
}

#[test]
fn actors_show_a_running_hook_and_drain_after_it() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = common::global_hooks_dir(work.path());
    common::config_hook(
        &hooks.join("001-slow.sh"),
        r#"{"configVersion":"v1","onStartup":1}"#,
        r#"touch "$OUT_DIR/slow.started"
for _ in $(seq 1200); do [[ -f "$OUT_DIR/slow.release" ]] && exit 0; sleep 0.05; done"#,
    );
    std::fs::create_dir_all(work.path().join("modules/001-demo")).expect("module dir");
    std::fs::write(
        work.path().join("modules/values.yaml"),
        "demoEnabled: true\ndemo:\n  replicas: 2\n",
    )
    .expect("values.yaml");
    let op = Operator::start(&sb, &hooks, work.path());
    let socket = work.path().join("debug.socket");
    let out = work.path().join("out");

    op.wait("the slow hook to start", Duration::from_secs(60), || {
        out.join("slow.started").exists()
    });
    let mut actors = Value::Null;
    op.wait(
        "an actor busy with the slow hook in `bosun actors`",
        Duration::from_secs(30),
        || {
            actors = try_cli(&socket, &["actors", "-o", "json"])
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or(Value::Null);
            !busy_with(&actors, "001-slow.sh").is_empty()
        },
    );
    let busy = busy_with(&actors, "001-slow.sh");
    assert!(
        busy.iter()
            .any(|n| n == "queue/main" || n == "global-hooks"),
        "{busy:?}: {actors}"
    );
    assert!(
        actors["summary"]["jobs"].as_u64().unwrap_or(0) >= 1,
        "{actors}"
    );
    let main_queue = run_ok(&mut cli(&socket, &["queue", "main"]));
    assert!(
        main_queue.starts_with("Queue 'main': length ")
            && main_queue.contains("status: 'run first task'"),
        "{main_queue}"
    );
    let one = run_ok(&mut cli(&socket, &["actors", "queue/main"]));
    assert!(
        one.starts_with("Actor 'queue/main' (queue): ") && one.contains("  job: task "),
        "{one}"
    );

    std::fs::write(out.join("slow.release"), "").expect("release");
    op.wait(
        "the mailboxes to drain after the converge",
        Duration::from_secs(60),
        || {
            let Some(a) = try_cli(&socket, &["actors", "-o", "json"])
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            else {
                return false;
            };
            let s = &a["summary"];
            let idle = s["pending"] == 0 && s["jobs"] == 0 && s["busy"] == 0;
            let main = try_cli(&socket, &["queue", "main", "-o", "json"])
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .unwrap_or(Value::Null);
            let modules = try_cli(&socket, &["module", "list", "-o", "json"]).unwrap_or_default();
            idle && main["tasksCount"] == 0 && modules.contains("\"demo\"")
        },
    );
    let global = cli_json(&socket, &["actors", "global-hooks", "-o", "json"]);
    let recent = global["recent"].as_array().cloned().unwrap_or_default();
    let run = recent
        .iter()
        .find(|r| r["summary"] == "hook onStartup:001-slow.sh")
        .unwrap_or_else(|| panic!("the finished hook run is in the history: {global}"));
    assert_eq!(run["outcome"], "exited 0", "{global}");
    assert!(run["durationMs"].is_u64(), "{global}");

    // addon-operator's answer, and every module with its state, as the seed says.
    assert_eq!(
        cli_json(&socket, &["module", "list", "-o", "json"]),
        json!({"enabledModules": ["demo"], "modules": [{"name": "demo", "enabled": true}]})
    );
    // Runbooks written for addon-operator work: the binary answers to that name.
    let bin = work.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin folder");
    std::os::unix::fs::symlink(bosun_bin(), bin.join("addon-operator")).expect("symlink");
    let out = run_ok(
        Command::new(bin.join("addon-operator"))
            .args(["module", "list", "-o", "json", "--debug-unix-socket"])
            .arg(&socket),
    );
    let listed: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    assert_eq!(listed["enabledModules"], json!(["demo"]), "{out}");
    let help = run_ok(Command::new(bin.join("addon-operator")).arg("--help"));
    assert!(help.contains("Usage: addon-operator"), "{help}");
    let help = run_ok(Command::new(bin.join("addon-operator")).args(["start", "--help"]));
    assert!(
        help.contains("--leader-election"),
        "`start` is `run`: {help}"
    );
    let values = cli_json(&socket, &["module", "values", "demo", "-o", "json"]);
    assert_eq!(values, json!({"replicas": 2}));
    let with_global = cli_json(&socket, &["module", "values", "demo", "-g", "-o", "json"]);
    assert_eq!(with_global["demo"], json!({"replicas": 2}), "{with_global}");
    assert!(with_global["global"].is_object(), "{with_global}");
    let config = cli_json(&socket, &["module", "config", "demo", "-o", "json"]);
    assert_eq!(config, json!({}));
    let text = run_ok(&mut cli(&socket, &["queue", "list", "-e"]));
    assert!(
        text.contains("Summary:\n- 'main' queue: empty.\n"),
        "{text}"
    );
}

#[test]
fn an_unusable_socket_does_not_stop_bosun_and_tcp_is_loopback_only() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = common::global_hooks_dir(work.path());
    // The socket's folder would have to be a regular file.
    let blocker = work.path().join("not-a-folder");
    std::fs::write(&blocker, "").expect("blocker");
    let socket = blocker.join("debug.socket").display().to_string();
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[
            ("DEBUG_UNIX_SOCKET", socket.as_str()),
            ("DEBUG_HTTP_SERVER_ADDR", "127.0.0.1:0"),
        ],
    );
    op.wait("the debug TCP address", Duration::from_secs(60), || {
        common::debug_tcp(&op.logs()).is_some()
    });
    let logs = op.logs();
    assert!(
        logs.contains("debug endpoints not served") && logs.contains("debug.socket"),
        "{logs}"
    );
    // No folder for the token file either: the printed address carries the token.
    assert!(
        logs.contains("bosun debug token not written; it is in the web view's address"),
        "{logs}"
    );
    let (debug_addr, token) = common::debug_tcp(&logs).unwrap_or_default();
    let bearer = format!("Bearer {token}");
    let public = http_address(&op);
    op.wait(
        "/readyz without a debug socket",
        Duration::from_secs(30),
        || common::http_raw(&public, "GET", "/readyz", "", b"").0 == 200,
    );
    let (code, body) = common::http(
        &debug_addr,
        "GET",
        &format!("/queue/list.json?token={token}"),
        "",
        "",
    );
    assert_eq!(code, 200, "{body}");
    assert!(body["summary"]["totalTasks"].is_u64(), "{body}");
    let (code, _) = common::http_full(
        &debug_addr,
        "POST",
        "/queue/list.json",
        &[("Authorization", &bearer)],
        b"",
    );
    assert_eq!(code, 405);
    // A web page whose own name was made to point at 127.0.0.1 gets nothing.
    let mut stream = std::net::TcpStream::connect(&debug_addr).expect("connect");
    stream
        .write_all(
            b"GET /global/values.json HTTP/1.1\r\nHost: rebound.example:9652\r\nConnection: close\r\n\r\n",
        )
        .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    assert!(
        answer.starts_with("HTTP/1.1 421") && answer.contains("is not a loopback name"),
        "{answer}"
    );

    // A non-loopback address is refused with the way out in the message.
    let out = Command::new(bosun_bin())
        .arg("run")
        .envs(op.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("DEBUG_HTTP_SERVER_ADDR", "0.0.0.0:0")
        .output()
        .expect("bosun run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("DEBUG_HTTP_SERVER_ADDR: 0.0.0.0:0 is not a loopback address")
            && err.contains("BOSUN_DEBUG_ALLOW_REMOTE=true"),
        "{err}"
    );
}

/// `bosun journal <args> --journal-dir <dir>`: the offline reader.
fn journal_offline(dir: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new(bosun_bin());
    cmd.arg("journal")
        .args(args)
        .arg("--journal-dir")
        .arg(dir)
        .env("LOG_LEVEL", "error");
    run_ok(&mut cmd)
}

#[test]
fn journal_views_over_the_socket_match_the_offline_ones() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = common::global_hooks_dir(work.path());
    common::config_hook(
        &hooks.join("001-broken.sh"),
        r#"{"configVersion":"v1","onStartup":1}"#,
        r#"echo "the probe is broken" >&2
exit 1"#,
    );
    // Holds the converge, so the journal stands still while both readers look.
    common::config_hook(
        &hooks.join("002-held.sh"),
        r#"{"configVersion":"v1","afterAll":1}"#,
        r#"touch "$OUT_DIR/held.started"
for _ in $(seq 1200); do [[ -f "$OUT_DIR/held.release" ]] && exit 0; sleep 0.1; done"#,
    );
    let out = work.path().join("out");
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[("BOSUN_TASK_MAX_ATTEMPTS", "1")],
    );
    let socket = work.path().join("debug.socket");
    let journal = work.path().join("journal");
    op.wait(
        "the afterAll hook to start",
        Duration::from_secs(60),
        || out.join("held.started").exists(),
    );

    // The same views, live and offline.
    let mut pair = (String::new(), String::new());
    op.wait(
        "`bosun journal log --live` to match the offline log",
        Duration::from_secs(30),
        || {
            pair = (
                try_cli(&socket, &["journal", "log", "--live"]).unwrap_or_default(),
                journal_offline(&journal, &["log"]),
            );
            !pair.0.is_empty() && pair.0 == pair.1
        },
    );
    let log = pair.0;
    assert!(log.contains("converge started (OperatorStartup)"), "{log}");
    assert!(
        log.lines()
            .all(|l| l.len() > 6 && l[..6].trim().parse::<u64>().is_ok()),
        "each line starts with its right-aligned sequence number: {log}"
    );
    let state = |live: bool| -> Value {
        let text = if live {
            run_ok(&mut cli(&socket, &["journal", "state", "-o", "json"]))
        } else {
            journal_offline(&journal, &["state", "-o", "json"])
        };
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    let live_state = state(true);
    assert_eq!(live_state, state(false));
    assert_eq!(live_state["converge"]["inProgress"], true, "{live_state}");
    let lines = run_ok(&mut cli(
        &socket,
        &[
            "journal", "log", "--queue", "main", "--limit", "3", "-o", "json",
        ],
    ));
    let entries: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(entries.len(), 3, "{lines}");
    assert!(entries.iter().all(|e| e["queue"] == "main"), "{lines}");
    assert!(
        entries
            .windows(2)
            .all(|w| w[0]["seq"].as_u64() < w[1]["seq"].as_u64()),
        "newest last: {lines}"
    );

    // The failed task's history, found through its parking.
    let all: Vec<Value> = serde_json::from_str(&run_ok(&mut cli(
        &socket,
        &["raw", "/journal/log.json?limit=0"],
    )))
    .expect("log json");
    let parked = all
        .iter()
        .find(|e| e["type"] == "taskParked")
        .and_then(|e| e["task"].as_str())
        .unwrap_or_else(|| panic!("a parked task in {all:?}"))
        .to_string();
    let why = run_ok(&mut cli(&socket, &["journal", "why", &parked, "--live"]));
    assert_eq!(why, journal_offline(&journal, &["why", &parked]));
    assert!(
        why.contains("failed (failures 1)")
            && why.contains("exit status 1: the probe is broken")
            && why.contains("parked after too many attempts"),
        "{why}"
    );
    let stats: Value = serde_json::from_str(&run_ok(&mut cli(
        &socket,
        &["journal", "stats", "--live", "-o", "json"],
    )))
    .expect("stats json");
    assert_eq!(stats["events"].as_u64(), Some(all.len() as u64), "{stats}");
    let text = run_ok(&mut cli(&socket, &["journal", "stats", "--live"]));
    assert!(
        text.starts_with(&format!("events:    {} (seq ", all.len())) && text.contains("taskParked"),
        "{text}"
    );

    // The endpoints: the newest 200 by default, clear errors.
    let default: Vec<Value> =
        serde_json::from_str(&run_ok(&mut cli(&socket, &["raw", "/journal/log.json"])))
            .expect("log json");
    assert_eq!(default.len(), all.len().min(200));
    assert_eq!(default.last(), all.last());
    for (path, message) in [
        ("/journal/why/banana.json", "invalid task id"),
        (
            "/journal/why/t999999.text",
            "task t999999 does not appear in the journal (its events may have been compacted into a snapshot) (HTTP 404)",
        ),
        (
            "/journal/log.json?limit=many",
            "is not a whole number (0: every event) (HTTP 400)",
        ),
        (
            "/journal/state.json?at=yesterday-ish",
            "is not a point in the journal",
        ),
        ("/journal/nope.json", "no debug endpoint /journal/nope"),
    ] {
        let err = run_err(&mut cli(&socket, &["raw", path]));
        assert!(err.contains(message), "{path}: {err}");
    }
    let discovery = run_ok(&mut cli(&socket, &["raw", "/discovery"]));
    assert!(
        discovery.contains("GET /journal/log.") && discovery.contains("GET /ui\n"),
        "{discovery}"
    );
    let page = run_ok(&mut cli(&socket, &["raw", "/ui"]));
    assert!(page.contains("<title>bosun</title>"), "{page}");
    let missing = work.path().join("missing.socket");
    let err = run_err(&mut cli(&missing, &["journal", "log"]));
    assert!(err.contains("cannot connect to the debug socket"), "{err}");
    std::fs::write(out.join("held.release"), "").expect("release");
}

/// A module folder with one ConfigMap template.
fn chart_module(modules: &Path, folder: &str, template: &str) {
    let dir = modules.join(folder).join("templates");
    std::fs::create_dir_all(&dir).expect("module dir");
    std::fs::write(dir.join("configmap.yaml"), template).expect("template");
}

/// GETs `path` from the debug socket: status, content type and the raw body.
fn socket_get(socket: &Path, path: &str) -> (u16, String, Vec<u8>) {
    let mut stream = std::os::unix::net::UnixStream::connect(socket).expect("connect");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: unix\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read");
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type:"))
        .unwrap_or_default()
        .trim()
        .to_string();
    let (status, body) = bosun::debug::client::parse_response_bytes(&raw).expect("an HTTP answer");
    (status, content_type, body)
}

/// The nodes and edges of the DOT text `/graph?format=text` answers (quoted ids only).
fn parse_dot(text: &str) -> (Vec<String>, Vec<(String, String)>) {
    let unquote = |s: &str| -> Option<String> {
        let s = s.trim();
        s.strip_prefix('"')?.strip_suffix('"').map(String::from)
    };
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for line in text.lines().map(str::trim) {
        let stmt = line.trim_end_matches(';');
        if let Some((from, to)) = stmt.split_once(" -> ") {
            let to = to.split(" [").next().unwrap_or(to);
            if let (Some(f), Some(t)) = (unquote(from), unquote(to)) {
                edges.push((f, t));
            }
        } else if let Some((id, _)) = stmt.split_once(" [")
            && let Some(id) = unquote(id)
        {
            nodes.push(id);
        }
    }
    (nodes, edges)
}

/// bosun with three chart modules: `drifty` (order 10) and `steady` (20) enabled and
/// installed, `off` (30) disabled. Returns the operator and its debug socket once both
/// releases are installed.
fn start_three_modules(
    sb: &Sandbox,
    work: &tempfile::TempDir,
    engine: common::HelmEngine,
) -> (Operator, std::path::PathBuf) {
    let hooks = common::global_hooks_dir(work.path());
    let modules = work.path().join("modules");
    chart_module(
        &modules,
        "010-drifty",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: drifty-settings\ndata:\n  color: {{ .Values.drifty.color | quote }}\n  size: L\n",
    );
    chart_module(
        &modules,
        "020-steady",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: steady-settings\ndata:\n  mood: calm\n",
    );
    chart_module(
        &modules,
        "030-off",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: off-settings\n",
    );
    std::fs::write(
        modules.join("values.yaml"),
        "driftyEnabled: true\ndrifty:\n  color: blue\nsteadyEnabled: true\noffEnabled: false\n",
    )
    .expect("values.yaml");
    let mut env = engine.env();
    env.push((
        "BOSUN_TOOLS_DIR".into(),
        common::tools_dir().display().to_string(),
    ));
    // The resource monitor would heal the hand edit: it does not look again within the test.
    env.push(("BOSUN_RESOURCE_MONITOR_INTERVAL".into(), "1h".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let op = Operator::start_with(sb, &hooks, work.path(), &env);
    let socket = work.path().join("debug.socket");
    op.wait(
        "both releases installed and monitored",
        Duration::from_secs(120),
        || {
            try_cli(&socket, &["module", "resource-monitor", "-o", "json"])
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|m| m["drifty"].is_array() && m["steady"].is_array())
        },
    );

    (op, socket)
}

/// The diff applies (dry run) as the field manager of the engine that installed the
/// objects: bosun for the library, `helm` for the binary.
mod render_diff {
    #[test]
    fn library() {
        super::render_diff_shows_hand_edits_of_a_module_s_objects(
            super::common::HelmEngine::Library,
        )
    }
    #[test]
    fn cli() {
        super::render_diff_shows_hand_edits_of_a_module_s_objects(super::common::HelmEngine::Cli)
    }
}

fn render_diff_shows_hand_edits_of_a_module_s_objects(engine: common::HelmEngine) {
    let sb = Sandbox::start();
    let work = workdir();
    let (_op, socket) = start_three_modules(&sb, &work, engine);

    // Untouched: no drift.
    for module in ["drifty", "steady"] {
        let text = run_ok(&mut cli(&socket, &["module", "render", module, "--diff"]));
        assert_eq!(text, "No diff found\n", "{module}");
    }

    // A hand edit of a field the chart sets shows as the live value against the chart's.
    let (code, body) = sb.request(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/drifty-settings",
        "application/merge-patch+json",
        r#"{"data":{"color":"green"}}"#,
    );
    assert_eq!(code, 200, "{body}");
    let text = run_ok(&mut cli(&socket, &["module", "render", "drifty", "--diff"]));
    assert!(
        text.starts_with(
            "--- LIVE v1/ConfigMap default/drifty-settings\n+++ MERGED v1/ConfigMap default/drifty-settings\n@@ "
        ),
        "{text}"
    );
    let changed: Vec<&str> = text
        .lines()
        .skip(2)
        .filter(|l| l.starts_with('-') || l.starts_with('+'))
        .collect();
    assert_eq!(changed, ["-  color: green", "+  color: blue"], "{text}");
    assert!(!text.contains("managedFields"), "{text}");
    let data = cli_json(
        &socket,
        &["module", "render", "drifty", "--diff", "-o", "json"],
    );
    assert_eq!(
        data[0]["object"], "v1/ConfigMap default/drifty-settings",
        "{data}"
    );
    // The other module, and the dry run itself, changed nothing.
    let text = run_ok(&mut cli(&socket, &["module", "render", "steady", "--diff"]));
    assert_eq!(text, "No diff found\n");
    let (_, live) = sb.get("/api/v1/namespaces/default/configmaps/drifty-settings");
    assert_eq!(live["data"]["color"], "green", "{live}");

    // A deleted object is all added.
    let (code, body) = sb.request(
        "DELETE",
        "/api/v1/namespaces/default/configmaps/steady-settings",
        "",
        "",
    );
    assert_eq!(code, 200, "{body}");
    let text = run_ok(&mut cli(&socket, &["module", "render", "steady", "--diff"]));
    assert!(text.contains("\n@@ -0,0 +1,"), "{text}");
    assert!(text.lines().skip(3).all(|l| l.starts_with('+')), "{text}");
    assert!(text.contains("+  mood: calm\n"), "{text}");
    let err = run_err(&mut cli(&socket, &["module", "render", "nope", "--diff"]));
    assert!(
        err.contains("module nope is not loaded") && err.contains("HTTP 404"),
        "{err}"
    );
}

#[test]
fn graph_shows_the_modules_in_run_order() {
    let sb = Sandbox::start();
    let work = workdir();
    let (_op, socket) = start_three_modules(&sb, &work, common::HelmEngine::Library);

    // The graph: orders chained upwards, each module under its order, disabled ones marked.
    let dot = run_ok(&mut cli(&socket, &["graph"]));
    assert_eq!(
        dot,
        run_ok(&mut cli(&socket, &["raw", "/graph?format=text"]))
    );
    assert!(dot.starts_with("strict digraph {\n"), "{dot}");
    assert!(dot.contains("label=\"Module Scheduler's Graph\""), "{dot}");
    let (nodes, edges) = parse_dot(&dot);
    let edge = |a: &str, b: &str| edges.contains(&(a.to_string(), b.to_string()));
    for (module, weight) in [("drifty", 10), ("steady", 20), ("off", 30)] {
        assert!(nodes.iter().any(|n| n == module), "{module}: {dot}");
        assert!(edge(&format!("weight {weight}"), module), "{module}: {dot}");
    }
    assert!(
        edge("weight 10", "weight 20") && edge("weight 20", "weight 30"),
        "{dot}"
    );
    assert!(
        !edge("weight 20", "weight 10") && !edge("weight 30", "weight 20"),
        "{dot}"
    );
    let off = dot
        .lines()
        .find(|l| l.trim_start().starts_with("\"off\" ["))
        .unwrap_or_default();
    assert!(off.contains("disabled"), "{dot}");
    let drifty = dot
        .lines()
        .find(|l| l.trim_start().starts_with("\"drifty\" ["))
        .unwrap_or_default();
    assert!(
        drifty.contains("enabled") && !drifty.contains("disabled"),
        "{dot}"
    );
    let discovery = run_ok(&mut cli(&socket, &["raw", "/discovery"]));
    assert!(discovery.contains("GET /graph?format=text"), "{discovery}");

    // The PNG needs graphviz where bosun runs (this test's environment, inherited).
    let program = std::env::var("GRAPHVIZ_DOT").unwrap_or_else(|_| "dot".into());
    let graphviz = Command::new(&program)
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    let (code, content_type, body) = socket_get(&socket, "/graph");
    let png = work.path().join("graph.png");
    let png_arg = png.display().to_string();
    let cli_png = cli(&socket, &["graph", "--format", "png", "-o", &png_arg])
        .output()
        .expect("bosun graph");
    if graphviz {
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(content_type, "image/png");
        assert!(body.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG signature");
        assert!(cli_png.status.success(), "{cli_png:?}");
        let file = std::fs::read(&png).expect("graph.png");
        assert!(file.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG in the file");
    } else {
        let message = String::from_utf8_lossy(&body);
        assert_eq!(code, 501, "{message}");
        assert!(
            message.contains("install graphviz") && message.contains("/graph?format=text"),
            "{message}"
        );
        let err = String::from_utf8_lossy(&cli_png.stderr);
        assert!(
            !cli_png.status.success() && err.contains("graphviz") && err.contains("HTTP 501"),
            "{err}"
        );
    }
}
