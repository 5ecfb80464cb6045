//! Runtime parameters and hook log lines on a real `bosun run` against the sandbox:
//! `bosun config list|set` changes the log level while bosun runs (debug lines appear, a
//! temporary level expires back), bad input is refused with what was expected, and with
//! `LOG_PROXY_HOOK_JSON=true` a hook's JSON log lines come through as JSON with bosun's
//! fields added; and `/status/converge` follows the first converge as addon-operator's.

use crate::common;

use std::path::Path;
use std::time::Duration;

use crate::common::{Operator, Sandbox, run_err, run_ok, workdir};
use serde_json::Value;

use crate::common::debug_cli as cli;

fn params(socket: &Path) -> Vec<Value> {
    let text = run_ok(&mut cli(socket, &["config", "list", "-o", "json"]));
    match serde_json::from_str(&text) {
        Ok(Value::Array(list)) => list,
        other => panic!("config list: {other:?}: {text}"),
    }
}

fn param(socket: &Path, name: &str) -> Value {
    params(socket)
        .into_iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no parameter {name}"))
}

/// The JSON log lines bosun printed whose `msg` is `msg`.
fn json_lines(op: &Operator, msg: &str) -> Vec<Value> {
    op.logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["msg"] == msg)
        .collect()
}

#[test]
fn the_log_level_changes_at_runtime_and_hook_json_logs_pass_through() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = common::global_hooks_dir(work.path());
    common::config_hook(
        &hooks.join("001-talker.sh"),
        r#"{"configVersion":"v1","schedule":[{"name":"every-second","crontab":"*/1 * * * * *"}]}"#,
        r#"echo '{"msg":"json from hook","level":"info","source":"talker","time":"2026-01-01T00:00:00Z"}'
echo '{"msg":"debug from hook",'
echo ' "level":"debug"}'
echo 'plain line from hook'
"#,
    );
    let socket = work.path().join("debug.socket");
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[
            ("LOG_LEVEL", "info"),
            ("LOG_TYPE", "text"),
            ("LOG_PROXY_HOOK_JSON", "true"),
        ],
    );

    // A hook's JSON line comes through as JSON, its fields kept, bosun's added.
    op.wait("the hook's JSON log line", Duration::from_secs(60), || {
        !json_lines(&op, "json from hook").is_empty()
    });
    let line = json_lines(&op, "json from hook").remove(0);
    assert_eq!(line["hook"], "001-talker.sh", "{line}");
    assert_eq!(line["binding"], "every-second", "{line}");
    assert_eq!(line["queue"], "main", "{line}");
    assert_eq!(line["output"], "stdout", "{line}");
    assert_eq!(line["proxyJsonLog"], true, "{line}");
    assert_eq!(line["source"], "talker", "{line}");
    assert_eq!(line["time"], "2026-01-01T00:00:00Z", "{line}");
    // A line that is not JSON is logged as text, with the hook named (the hook's output is
    // logged as it is read: wait for it, it may come a little after the JSON line).
    op.wait("the hook's plain line", Duration::from_secs(60), || {
        op.logs()
            .lines()
            .any(|l| l.contains("plain line from hook") && l.contains("001-talker.sh"))
    });
    // At info, the hook's debug line (written before the plain one) is not shown.
    assert!(json_lines(&op, "debug from hook").is_empty());

    // The parameters, in the reference's shape.
    let level = param(&socket, "log.level");
    assert_eq!(level["value"], "info", "{level}");
    assert_eq!(level["default"], "info", "{level}");
    assert!(level.get("expireAt").is_none(), "{level}");
    assert_eq!(param(&socket, "log.configmap.events")["value"], "false");
    let table = run_ok(&mut cli(&socket, &["config", "list"]));
    assert!(table.starts_with("NAME "), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("log.level ") && l.contains(" info ")),
        "{table}"
    );

    // debug: temporary by default, and debug lines appear, the hook's multi-line one too.
    run_ok(&mut cli(&socket, &["config", "set", "log.level", "debug"]));
    let level = param(&socket, "log.level");
    assert_eq!(level["value"], "debug", "{level}");
    assert!(level["expireAt"].is_string(), "{level}");
    op.wait(
        "the hook's debug line after `config set log.level debug`",
        Duration::from_secs(60),
        || !json_lines(&op, "debug from hook").is_empty(),
    );
    assert_eq!(json_lines(&op, "debug from hook")[0]["level"], "debug");

    // A value with a duration expires back to the level that was set without one.
    run_ok(&mut cli(
        &socket,
        &["config", "set", "log.level", "error", "1s"],
    ));
    op.wait(
        "log.level to expire back to info",
        Duration::from_secs(60),
        || {
            let level = param(&socket, "log.level");
            level["value"] == "info" && level.get("expireAt").is_none()
        },
    );

    // Bad input is refused with what was expected; nothing changes.
    let err = run_err(&mut cli(&socket, &["config", "set", "log.level", "loud"]));
    assert!(
        err.contains("is not a log level") && err.contains("debug"),
        "{err}"
    );
    let err = run_err(&mut cli(&socket, &["config", "set", "log.levle", "debug"]));
    assert!(err.contains("unknown runtime parameter"), "{err}");
    let err = run_err(&mut cli(
        &socket,
        &["config", "set", "log.level", "debug", "5 minutes"],
    ));
    assert!(err.contains("invalid duration"), "{err}");
    assert_eq!(param(&socket, "log.level")["value"], "info");
}

#[test]
fn status_converge_follows_the_first_converge() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = work.path().join("global-hooks");
    let gate = work.path().join("gate");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    // The onStartup hook holds start-up until the test opens the gate.
    common::config_hook(
        &hooks.join("001-gate.sh"),
        r#"{"configVersion":"v1","onStartup":1}"#,
        // Bounded, so a failed test leaves no hook behind.
        &format!(
            "for _ in $(seq 1200); do [ -f '{}' ] && break; sleep 0.05; done",
            gate.display()
        ),
    );
    let op = Operator::start(&sb, &hooks, work.path());
    let mut addr = String::new();
    op.wait("the HTTP address", Duration::from_secs(60), || {
        addr = op.http_address().unwrap_or_default();
        !addr.is_empty()
    });
    let status = |json: bool| {
        let path = if json {
            "/status/converge?output=json"
        } else {
            "/status/converge"
        };
        let (code, body) = common::http_raw(&addr, "GET", path, "", b"");
        (code, String::from_utf8_lossy(&body).into_owned())
    };
    // Start-up holds: the first converge's tasks wait behind the onStartup hook.
    let mut text = String::new();
    op.wait(
        "the first converge's tasks",
        Duration::from_secs(60),
        || {
            let (code, body) = status(false);
            text = body;
            code == 200 && text.starts_with("STARTUP_CONVERGE_IN_PROGRESS: ")
        },
    );
    assert!(text.ends_with(" tasks\n"), "{text}");
    let (_, json) = status(true);
    let json: Value = serde_json::from_str(&json).expect("JSON");
    assert!(
        json["STARTUP_CONVERGE_IN_PROGRESS"].as_u64() > Some(0),
        "{json}"
    );
    assert_eq!(json["STARTUP_CONVERGE_DONE"], false, "{json}");
    std::fs::write(&gate, "").expect("open the gate");
    op.wait("the first converge", Duration::from_secs(60), || {
        status(false).1 == "STARTUP_CONVERGE_DONE\nCONVERGE_WAIT_TASK\n"
    });
    let (_, json) = status(true);
    let json: Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(
        json,
        serde_json::json!({
            "CONVERGE_IN_PROGRESS": 0,
            "CONVERGE_WAIT_TASK": true,
            "STARTUP_CONVERGE_DONE": true,
            "STARTUP_CONVERGE_IN_PROGRESS": 0,
            "STARTUP_CONVERGE_NOT_STARTED": false,
        })
    );
}

/// `LOG_TYPE=json` makes every log line a JSON object; `LOG_NO_TIME=true` leaves the time
/// out of each.
#[test]
fn json_logs_without_time_as_the_seed_describes() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = common::global_hooks_dir(work.path());
    common::config_hook(
        &hooks.join("001-hello.sh"),
        r#"{"configVersion":"v1","onStartup":1}"#,
        "echo 'hello from the hook'\n",
    );
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[
            ("LOG_LEVEL", "info"),
            ("LOG_TYPE", "json"),
            ("LOG_NO_TIME", "true"),
        ],
    );
    op.wait("the hook's line", Duration::from_secs(60), || {
        op.logs().contains("hello from the hook")
    });
    let logs = op.logs();
    // What bosun prints for people (the addresses) is plain; every log line is JSON.
    let log_lines: Vec<&str> = logs
        .lines()
        .filter(|l| !l.starts_with("bosun ") && !l.trim().is_empty())
        .collect();
    assert!(log_lines.len() > 3, "{logs}");
    for line in log_lines {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            v.get("timestamp").is_none() && v.get("time").is_none(),
            "{line}"
        );
        assert!(v["level"].is_string(), "{line}");
    }
}
