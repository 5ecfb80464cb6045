//! High availability end to end: two `bosun run` replicas with leader election against the
//! sandbox API server, each with its own journal folder and its own loopback address
//! (127.0.0.2 and 127.0.0.3 share the ports, as two pods would).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Operator, Sandbox, workdir};
use serde_json::{Value, json};

/// A GET that tolerates a replica that is not (or no longer) there.
fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// Two ports free on both replica addresses.
fn free_ports() -> (u16, u16) {
    let pick = || {
        let l = std::net::TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
        let port = l.local_addr().expect("addr").port();
        std::net::TcpListener::bind(("127.0.0.3", port))
            .ok()
            .map(|_| (port, l))
    };
    loop {
        if let (Some((a, _la)), Some((b, _lb))) = (pick(), pick())
            && a != b
        {
            return (a, b);
        }
    }
}

struct Replica {
    name: &'static str,
    op: Operator,
    ha: String,
    http: String,
    journal: PathBuf,
    socket: PathBuf,
}

impl Replica {
    fn status(&self) -> Option<Value> {
        let (code, body) = get(&self.ha, "/ha/status")?;
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }

    fn role(&self) -> Option<String> {
        Some(self.status()?["role"].as_str()?.to_string())
    }

    fn following(&self) -> bool {
        self.status().is_some_and(|s| {
            s["following"]
                .as_array()
                .is_some_and(|f| !f.is_empty() && f.iter().all(|j| j["leader"].is_string()))
        })
    }

    fn ready(&self) -> bool {
        get(&self.http, "/readyz").is_some_and(|(code, _)| code == 200)
    }

    fn values(&self) -> Value {
        let text = common::run_ok(&mut common::debug_cli(
            &self.socket,
            &["global", "values", "-o", "json"],
        ));
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}

struct Cluster {
    sb: Sandbox,
    _work: tempfile::TempDir,
    shared: PathBuf,
    ports: (u16, u16),
    extra: Vec<(String, String)>,
}

impl Cluster {
    fn new(extra: &[(&str, &str)]) -> Cluster {
        let sb = Sandbox::start();
        let work = workdir();
        let shared = work.path().join("shared");
        let hooks = shared.join("global-hooks");
        std::fs::create_dir_all(&hooks).expect("hooks");
        std::fs::create_dir_all(shared.join("modules")).expect("modules");
        std::fs::write(shared.join("modules/values.yaml"), "global:\n  seen: {}\n")
            .expect("values.yaml");
        // Every run: a line when it starts and when it ends in a log both replicas share,
        // and a memory values patch per ConfigMap it was told about.
        common::config_hook(
            &hooks.join("watch.sh"),
            "configVersion: v1\nkubernetes:\n- name: marks\n  kind: ConfigMap\n  labelSelector: {matchLabels: {ha: mark}}\n  executeHookOnSynchronization: false",
            r#"echo "start $ADDON_OPERATOR_POD" >> "$HOOK_LOG"
jq -c '[.[] | select(.type == "Event") | .object.metadata.name | {op: "add", path: ("/global/seen/" + .), value: true}]' "$BINDING_CONTEXT_PATH" > "$VALUES_JSON_PATCH_PATH"
if [ -n "$HOOK_SLEEP" ]; then sleep "$HOOK_SLEEP"; fi
echo "end $ADDON_OPERATOR_POD" >> "$HOOK_LOG""#,
        );
        Cluster {
            sb,
            shared,
            _work: work,
            ports: free_ports(),
            extra: extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn replica(&self, name: &'static str, ip: &str) -> Replica {
        let work = self.shared.parent().expect("work").join(name);
        std::fs::create_dir_all(&work).expect("replica dir");
        let http = format!("{ip}:{}", self.ports.0);
        let ha = format!("{ip}:{}", self.ports.1);
        let env: Vec<(String, String)> = [
            (
                "GLOBAL_HOOKS_DIR",
                self.shared.join("global-hooks").display().to_string(),
            ),
            (
                "MODULES_DIR",
                self.shared.join("modules").display().to_string(),
            ),
            (
                "HOOK_LOG",
                self.shared.join("hooks.log").display().to_string(),
            ),
            ("ADDON_OPERATOR_LISTEN_ADDRESS", ip.to_string()),
            ("ADDON_OPERATOR_LISTEN_PORT", self.ports.0.to_string()),
            ("ADDON_OPERATOR_HA", "true".into()),
            ("ADDON_OPERATOR_POD", name.to_string()),
            ("BOSUN_HA_LISTEN", ha.clone()),
            ("BOSUN_HA_TOKEN", "journal-secret".into()),
            ("BOSUN_HA_LEASE_DURATION", "6s".into()),
            ("BOSUN_HA_RENEW_DEADLINE", "4s".into()),
            ("BOSUN_HA_RETRY_PERIOD", "1s".into()),
            ("BOSUN_SHUTDOWN_GRACE", "20s".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(self.extra.iter().cloned())
        .collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let op = Operator::start_with(&self.sb, &self.shared.join("global-hooks"), &work, &env);
        Replica {
            name,
            op,
            ha,
            http,
            journal: work.join("journal"),
            socket: work.join("debug.socket"),
        }
    }

    fn mark(&self, name: &str) {
        let (code, body) = self.sb.post(
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "labels": {"ha": "mark"}}}),
        );
        assert_eq!(code, 201, "{body}");
    }

    fn hook_log(&self) -> String {
        std::fs::read_to_string(self.shared.join("hooks.log")).unwrap_or_default()
    }

    /// Panics if two replicas were ever inside a hook at once.
    fn assert_one_at_a_time(&self) {
        let log = self.hook_log();
        let mut inside: Option<&str> = None;
        for (n, line) in log.lines().enumerate() {
            match line.split_once(' ') {
                Some(("start", who)) => {
                    assert!(
                        inside.is_none_or(|w| w == who),
                        "line {}: {who} started a hook while {inside:?} ran one:\n{log}",
                        n + 1
                    );
                    inside = Some(who);
                }
                Some(("end", _)) => inside = None,
                _ => panic!("unexpected hook log line {line:?}"),
            }
        }
    }
}

fn wait_leader<'a>(replicas: &[&'a Replica], timeout: Duration) -> &'a Replica {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let leaders: Vec<&&Replica> = replicas
            .iter()
            .filter(|r| r.role().as_deref() == Some("leader"))
            .collect();
        assert!(leaders.len() <= 1, "two leaders at once");
        if let Some(l) = leaders.first() {
            return l;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let logs: Vec<String> = replicas
        .iter()
        .map(|r| format!("--- {}:\n{}", r.name, tail(&r.op.logs())))
        .collect();
    panic!("no leader after {timeout:?}\n{}", logs.join("\n"));
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

fn seen(values: &Value) -> usize {
    values["global"]["seen"]
        .as_object()
        .or_else(|| values["seen"].as_object())
        .map_or(0, |o| o.len())
}

fn journal_ok(dir: &Path) {
    let out = common::run_ok(
        std::process::Command::new(common::bosun_bin())
            .args(["journal", "verify", "--journal-dir"])
            .arg(dir),
    );
    assert!(!out.contains("corrupt"), "{out}");
}

#[test]
fn a_standby_takes_over_with_every_acknowledged_values_patch() {
    let cluster = Cluster::new(&[("BOSUN_HA_SYNC_ACK", "true")]);
    let a = cluster.replica("alpha", "127.0.0.2");
    let leader = wait_leader(&[&a], Duration::from_secs(60));
    assert_eq!(leader.name, "alpha");
    let b = cluster.replica("bravo", "127.0.0.3");
    b.op.wait(
        "bravo follows alpha's journals",
        Duration::from_secs(60),
        || b.following() && b.role().as_deref() == Some("standby"),
    );
    a.op.wait("alpha converged", Duration::from_secs(60), || a.ready());
    assert!(b.ready(), "a following standby is ready");

    for i in 0..8 {
        cluster.mark(&format!("mark-{i}"));
    }
    a.op.wait(
        "alpha's memory values hold every mark",
        Duration::from_secs(60),
        || seen(&a.values()) == 8,
    );
    // Quiet: no hook runs while the leader dies (a pod's hooks die with it).
    a.op.wait("the hooks finished", Duration::from_secs(30), || {
        let log = cluster.hook_log();
        log.lines().last().is_some_and(|l| l.starts_with("end"))
    });
    let mut a = a;
    a.op.kill9();
    let killed = Instant::now();
    let leader = wait_leader(&[&b], Duration::from_secs(60));
    assert_eq!(leader.name, "bravo");
    println!(
        "takeover after kill -9: {:?} (lease duration 6s)",
        killed.elapsed()
    );
    b.op.wait("bravo converged", Duration::from_secs(60), || b.ready());
    assert_eq!(
        seen(&b.values()),
        8,
        "the values patches made before the kill survive"
    );

    // More work on the new leader, then the old one comes back as a standby.
    cluster.mark("mark-after");
    b.op.wait("bravo saw the new mark", Duration::from_secs(60), || {
        seen(&b.values()) == 9
    });
    a.op.spawn();
    a.op.wait(
        "alpha, restarted, follows bravo",
        Duration::from_secs(60),
        || a.role().as_deref() == Some("standby") && a.following(),
    );
    cluster.assert_one_at_a_time();
    journal_ok(&b.journal);
}

#[test]
fn sigterm_lets_the_running_hook_finish_and_hands_over_at_once() {
    let cluster = Cluster::new(&[("HOOK_SLEEP", "2")]);
    let a = cluster.replica("alpha", "127.0.0.2");
    wait_leader(&[&a], Duration::from_secs(60));
    let b = cluster.replica("bravo", "127.0.0.3");
    b.op.wait("bravo follows", Duration::from_secs(60), || b.following());
    a.op.wait("alpha converged", Duration::from_secs(60), || a.ready());
    cluster.mark("slow");
    a.op.wait("the hook runs", Duration::from_secs(60), || {
        cluster
            .hook_log()
            .lines()
            .last()
            .is_some_and(|l| l == "start alpha")
    });
    let pid = a.op.pid().expect("alpha runs");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let mut a = a;
    let exited = a.op.wait_exit(Duration::from_secs(30));
    assert_eq!(
        exited,
        Some(true),
        "alpha exits cleanly:\n{}",
        tail(&a.op.logs())
    );
    let stopped = Instant::now();
    assert!(
        cluster.hook_log().contains("end alpha"),
        "the running hook finished:\n{}",
        cluster.hook_log()
    );
    let leader = wait_leader(&[&b], Duration::from_secs(30));
    assert_eq!(leader.name, "bravo");
    let took = stopped.elapsed();
    println!("takeover after SIGTERM: {took:?}");
    // Well inside the 6 s lease: the lease was released, not left to expire.
    assert!(took < Duration::from_secs(5), "takeover took {took:?}");
    journal_ok(&a.journal);
    cluster.assert_one_at_a_time();
}

#[test]
fn a_leader_cut_off_from_the_api_stops_working_before_its_lease_expires() {
    let mut cluster = Cluster::new(&[]);
    let a = cluster.replica("alpha", "127.0.0.2");
    wait_leader(&[&a], Duration::from_secs(60));
    a.op.wait("alpha converged", Duration::from_secs(60), || a.ready());
    cluster.sb.stop();
    let cut = Instant::now();
    let mut a = a;
    let exited = a.op.wait_exit(Duration::from_secs(30));
    println!(
        "fenced {:?} after the API went away (renew deadline 4s, lease 6s)",
        cut.elapsed()
    );
    assert!(
        exited.is_some(),
        "the leader exits:\n{}",
        tail(&a.op.logs())
    );
    assert!(
        a.op.logs().contains("leadership lost"),
        "it says why:\n{}",
        tail(&a.op.logs())
    );
}
