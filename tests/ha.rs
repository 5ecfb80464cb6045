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

/// The tests of this file run one at a time: each runs two replicas and a sandbox, and
/// lease timings of a few seconds should not compete with three more such clusters on a
/// 2-core machine.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
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

    /// `/ha.json` of the debug server: this replica's role and its journals' standbys.
    fn ha_view(&self) -> Value {
        let text = common::run_ok(&mut common::debug_cli(&self.socket, &["raw", "/ha.json"]));
        serde_json::from_str(&text).unwrap_or(Value::Null)
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
        std::fs::write(
            shared.join("modules/values.yaml"),
            "global:\n  seen: {}\nappEnabled: true\n",
        )
        .expect("values.yaml");
        // A module with a chart: a failover must not add a Helm revision to it.
        std::fs::create_dir_all(shared.join("modules/010-app/templates")).expect("module");
        std::fs::write(
            shared.join("modules/010-app/templates/cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ha-app\n",
        )
        .expect("template");
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

    /// Helm revisions of the `app` module's release.
    fn app_revisions(&self) -> usize {
        let (code, list) = self.sb.get("/api/v1/namespaces/default/secrets");
        assert_eq!(code, 200, "{list}");
        list["items"].as_array().map_or(0, |items| {
            items
                .iter()
                .filter(|s| {
                    s["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("sh.helm.release.v1.app."))
                })
                .count()
        })
    }

    /// Notes in the hook log that `who` died with its hooks (a pod killed).
    fn note_killed(&self, who: &str) {
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.shared.join("hooks.log"))
            .expect("hook log");
        writeln!(log, "killed {who}").expect("hook log");
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
                Some(("end", _)) | Some(("killed", _)) => inside = None,
                _ => panic!("unexpected hook log line {line:?}"),
            }
        }
    }
}

/// Kills a replica as a node failure kills a pod: the process and its hooks, with no
/// chance to clean up (stopped first, so it starts no hook in between).
fn kill_pod(r: &mut Replica) {
    let Some(pid) = r.op.pid() else { return };
    let signal = |sig: &str, target: &str| {
        let _ = std::process::Command::new("kill")
            .args([sig, "--", target])
            .status();
    };
    signal("-STOP", &pid.to_string());
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp …
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
        if fields.get(1) == Some(&pid.to_string().as_str())
            && let Some(pgrp) = fields.get(2)
        {
            signal("-KILL", &format!("-{pgrp}"));
        }
    }
    r.op.kill9();
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
    let _serial = serial();
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
    // Ready while following every journal; a journal the leader opens after its modules
    // converged (lambda's, the deployer's) is followed a moment later.
    b.op.wait(
        "bravo, a following standby, is ready",
        Duration::from_secs(60),
        || b.ready(),
    );
    assert_eq!(cluster.app_revisions(), 1);

    for i in 0..8 {
        cluster.mark(&format!("mark-{i}"));
    }
    a.op.wait(
        "alpha's memory values hold every mark",
        Duration::from_secs(60),
        || seen(&a.values()) == 8,
    );
    // The leader's debug view (and its web view) shows its role and who streams its
    // journals; in the ack mode, how far a standby holds them (the marks were
    // acknowledged).
    let modules = |ha: &Value| {
        ha["journals"]
            .as_array()
            .and_then(|js| js.iter().find(|j| j["journal"] == "modules"))
            .cloned()
            .unwrap_or_default()
    };
    a.op.wait(
        "alpha's /ha names a standby holding its modules journal",
        Duration::from_secs(30),
        || {
            let m = modules(&a.ha_view());
            m["standbys"].as_u64().is_some_and(|n| n >= 1)
                && m["acked"].as_u64().is_some_and(|seq| seq > 0)
        },
    );
    let ha = a.ha_view();
    assert_eq!(ha["role"], "leader", "{ha}");
    assert!(
        ha["identity"]
            .as_str()
            .is_some_and(|i| i.starts_with("alpha.")),
        "{ha}"
    );
    // Quiet: no hook runs while the leader dies (a pod's hooks die with it).
    a.op.wait("the hooks finished", Duration::from_secs(30), || {
        let log = cluster.hook_log();
        log.lines().last().is_some_and(|l| l.starts_with("end"))
    });
    let mut a = a;
    kill_pod(&mut a);
    cluster.note_killed("alpha");
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
    assert_eq!(
        cluster.app_revisions(),
        1,
        "no Helm revision for an unchanged module"
    );
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
    let _serial = serial();
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
    // The lease was released, not left to expire: once alpha has exited, no Lease names it
    // as its holder (unreleased, it would for the 6 s of the lease).
    let (code, leases) = cluster.sb.get("/apis/coordination.k8s.io/v1/leases");
    assert_eq!(code, 200, "{leases}");
    let holders: Vec<&Value> = leases["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| &l["spec"]["holderIdentity"])
        .collect();
    assert!(
        !holders.is_empty()
            && holders
                .iter()
                .all(|h| !h.as_str().is_some_and(|h| h.starts_with("alpha."))),
        "alpha exited and still holds a lease: {leases}"
    );
    assert!(
        a.op.logs().contains("lease released"),
        "alpha says it released the lease:\n{}",
        tail(&a.op.logs())
    );
    assert!(
        cluster.hook_log().contains("end alpha"),
        "the running hook finished:\n{}",
        cluster.hook_log()
    );
    let leader = wait_leader(&[&b], Duration::from_secs(30));
    assert_eq!(leader.name, "bravo");
    println!("takeover after SIGTERM: {:?}", stopped.elapsed());
    journal_ok(&a.journal);
    cluster.assert_one_at_a_time();
}

/// A replica that is not bosun, at the address a Lease names: it answers the challenge
/// with a proof it cannot make, and records every byte it is sent.
fn impostor(addr: &str) -> std::sync::Arc<std::sync::Mutex<Vec<u8>>> {
    let listener = std::net::TcpListener::bind(addr).expect("bind the impostor");
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = received.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap_or(0);
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(&buf[..n]);
            let body = r#"{"proof":"00","nonce":"0123456789abcdef0123456789abcdef"}"#;
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    received
}

/// Writes a Lease naming `holder`, renewed now and valid for a day, as someone who may
/// edit Leases could.
fn forge_lease(cluster: &Cluster, holder: &str) {
    let renew = {
        // The Lease is renewed "now" by the sandbox's clock: its creation time.
        let (code, ns) = cluster.sb.get("/api/v1/namespaces/default");
        assert_eq!(code, 200, "{ns}");
        ns["metadata"]["creationTimestamp"]
            .as_str()
            .map(|t| t.replace('Z', ".000000Z"))
            .expect("a creation time")
    };
    let (code, body) = cluster.sb.post(
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        &json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "addon-operator-leader-election"},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": 86400,
                "acquireTime": renew,
                "renewTime": renew,
            }
        }),
    );
    assert_eq!(code, 201, "{body}");
}

/// Someone who may edit Leases names another address as the holder: the standby asks that
/// replica to prove it holds the journal token, and sends it nothing derived from the
/// token when it cannot.
#[test]
fn a_forged_lease_holder_never_receives_the_journal_token() {
    let _serial = serial();
    let cluster = Cluster::new(&[]);
    let received = impostor(&format!("127.0.0.4:{}", cluster.ports.1));
    forge_lease(&cluster, "mallory.127-0-0-4.default.pod");
    let b = cluster.replica("bravo", "127.0.0.3");
    b.op.wait(
        "bravo refuses to follow the impostor",
        Duration::from_secs(60),
        || {
            b.status().is_some_and(|s| {
                s["following"].as_array().is_some_and(|f| {
                    f.iter().any(|j| {
                        j["error"]
                            .as_str()
                            .is_some_and(|e| e.contains("did not prove it holds the journal token"))
                    })
                })
            })
        },
    );
    b.op.wait(
        "bravo asked the impostor to prove itself",
        Duration::from_secs(60),
        || {
            let bytes = received.lock().unwrap_or_else(|p| p.into_inner());
            String::from_utf8_lossy(&bytes)
                .matches("GET /replication/challenge")
                .count()
                >= 3
        },
    );
    assert_eq!(b.role().as_deref(), Some("standby"), "the Lease is held");
    let bytes = received.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        !text.contains("journal-secret"),
        "the token was sent:\n{text}"
    );
    assert!(
        !text.to_ascii_lowercase().contains("authorization"),
        "nothing derived from the token was sent:\n{text}"
    );
}

/// Relays every connection to `addr` on to `target`, byte for byte; counts them.
fn tcp_relay(addr: &str, target: String) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    let listener = std::net::TcpListener::bind(addr).expect("bind the relay");
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let Ok(upstream) = TcpStream::connect(&target) else {
                continue;
            };
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let pipe = |mut from: TcpStream, mut to: TcpStream| {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            };
            if let (Ok(c), Ok(u)) = (conn.try_clone(), upstream.try_clone()) {
                pipe(c, u);
                pipe(upstream, conn);
            }
        }
    });
    count
}

/// The holder a forged Lease names relays the standby's challenge to a replica holding the
/// token, the standby itself (pod-IP mode, reproduced on 127.0.0.5): the standby does not
/// answer a challenge for a role it does not hold, so it does not take the relay for its
/// leader, and the relay never gets to send it a frame.
#[test]
fn a_forged_lease_holder_relaying_the_challenge_is_not_followed() {
    let _serial = serial();
    let cluster = Cluster::new(&[]);
    let relayed = tcp_relay(
        &format!("127.0.0.5:{}", cluster.ports.1),
        format!("127.0.0.3:{}", cluster.ports.1),
    );
    forge_lease(&cluster, "mallory.127-0-0-5.default.pod");
    let b = cluster.replica("bravo", "127.0.0.3");
    let error = || {
        b.status().and_then(|s| {
            s["following"].as_array().and_then(|f| {
                f.iter()
                    .find_map(|j| j["error"].as_str().map(str::to_string))
            })
        })
    };
    b.op.wait(
        "bravo's first attempt through the relay ends",
        Duration::from_secs(60),
        || relayed.load(std::sync::atomic::Ordering::SeqCst) > 0 && error().is_some(),
    );
    let error = error().unwrap_or_default();
    assert!(
        error.contains("did not prove it holds the journal token and leads as that holder")
            && error.contains("mallory.127-0-0-5.default.pod"),
        "{error}"
    );
    assert!(
        b.op.logs()
            .contains("this replica does not lead: not answered"),
        "bravo says it did not answer the relayed challenge:\n{}",
        tail(&b.op.logs())
    );
    assert_eq!(b.role().as_deref(), Some("standby"), "the Lease is held");
    assert!(!b.following(), "bravo follows no one");
}

#[test]
fn a_leader_cut_off_from_the_api_stops_working_before_its_lease_expires() {
    let _serial = serial();
    let mut cluster = Cluster::new(&[]);
    let a = cluster.replica("alpha", "127.0.0.2");
    wait_leader(&[&a], Duration::from_secs(60));
    a.op.wait("alpha converged", Duration::from_secs(60), || a.ready());
    cluster.sb.stop();
    // The API is gone from here on: the leader renewed its lease at the latest now, so the
    // lease (6 s) expires at the latest 6 s from now, when a standby could lead. Both
    // instants are read on this process's clock.
    let cut = Instant::now();
    let lease = Duration::from_secs(6);
    let mut a = a;
    let exited = a.op.wait_exit(lease);
    println!(
        "fenced {:?} after the API went away (renew deadline 4s, lease 6s)",
        cut.elapsed()
    );
    assert!(
        exited.is_some(),
        "the leader exits before its lease of {lease:?} can expire:\n{}",
        tail(&a.op.logs())
    );
    assert!(
        a.op.logs().contains("leadership lost"),
        "it says why:\n{}",
        tail(&a.op.logs())
    );
}

#[test]
fn twenty_failovers_never_run_hooks_on_two_replicas_at_once() {
    let _serial = serial();
    let cluster = Cluster::new(&[
        ("BOSUN_HA_SYNC_ACK", "true"),
        ("BOSUN_HA_LEASE_DURATION", "4s"),
        ("BOSUN_HA_RENEW_DEADLINE", "3s"),
    ]);
    let mut replicas = [
        cluster.replica("alpha", "127.0.0.2"),
        cluster.replica("bravo", "127.0.0.3"),
    ];
    let started = Instant::now();
    let mut marks = 0;
    for round in 0..20 {
        // A replica that fenced itself (a lease renewal starved on a loaded machine) exits
        // as it should; like its pod, it comes back.
        for r in replicas.iter_mut() {
            if r.op.exited() {
                println!("round {round}: {} had exited; restarting it", r.name);
                r.op.spawn();
            }
        }
        let leader = {
            let [a, b] = &replicas;
            wait_leader(&[a, b], Duration::from_secs(60)).name
        };
        let (l, s) = if replicas[0].name == leader {
            (0, 1)
        } else {
            (1, 0)
        };
        replicas[s]
            .op
            .wait("the standby follows", Duration::from_secs(60), || {
                replicas[s].following()
            });
        // The leader's bindings watch before the mark is made: a ConfigMap already there at
        // its Synchronization is no Event (`executeHookOnSynchronization: false`).
        replicas[l]
            .op
            .wait("the leader converged", Duration::from_secs(60), || {
                replicas[l].ready()
            });
        let runs = cluster.hook_log().lines().count();
        cluster.mark(&format!("round-{round}"));
        marks += 1;
        // The mark's values patch is acknowledged (in the leader's values) and no hook
        // runs: what a failover must keep.
        replicas[l].op.wait(
            "the leader's hook ran for the mark",
            Duration::from_secs(60),
            || {
                let log = cluster.hook_log();
                log.lines().count() >= runs + 2
                    && log.lines().last().is_some_and(|l| l.starts_with("end"))
                    && seen(&replicas[l].values()) == marks
            },
        );
        if round % 4 == 3 {
            kill_pod(&mut replicas[l]);
            cluster.note_killed(leader);
            // The standby takes over when the lease expires (restarted at once, the
            // killed replica would take its own lease back).
            wait_leader(&[&replicas[s]], Duration::from_secs(60));
        } else {
            let pid = replicas[l].op.pid().expect("the leader runs");
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            let exited = replicas[l].op.wait_exit(Duration::from_secs(30));
            assert_eq!(exited, Some(true), "{leader} stops cleanly on SIGTERM");
        }
        replicas[l].op.spawn();
    }
    let [a, b] = &replicas;
    let last = wait_leader(&[a, b], Duration::from_secs(60));
    last.op
        .wait("the last leader converged", Duration::from_secs(60), || {
            last.ready()
        });
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen(&last.values()) != marks {
        assert!(
            Instant::now() < deadline,
            "not every mark in {}'s values: {}\nhook log:\n{}\n{}",
            last.name,
            last.values(),
            cluster.hook_log(),
            tail(&last.op.logs())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("20 failovers in {:?}", started.elapsed());
    cluster.assert_one_at_a_time();
    assert_eq!(
        cluster.app_revisions(),
        1,
        "no Helm revision for an unchanged module"
    );
    journal_ok(&last.journal);
}

/// Whether the server closed `s` (end of stream or a reset) before `s`'s read timeout.
fn closed_by_server(s: &mut impl Read) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

/// A slow-headers client on each of bosun's listeners (the public one, the HA one, the
/// debug TCP one and the debug socket): connections that never finish a request head are
/// closed after the header read timeout, and so is a kept-alive connection that sends a
/// whole request, then half of a second one; the listeners keep serving.
#[test]
fn slow_clients_are_closed_on_every_listener_at_every_request() {
    let _serial = serial();
    let debug = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    let debug_addr = debug.local_addr().expect("addr").to_string();
    drop(debug);
    let cluster = Cluster::new(&[
        ("BOSUN_HTTP_HEADER_READ_TIMEOUT", "1s"),
        ("DEBUG_HTTP_SERVER_ADDR", debug_addr.as_str()),
    ]);
    let a = cluster.replica("alpha", "127.0.0.2");
    a.op.wait("alpha leads", Duration::from_secs(60), || {
        a.role().as_deref() == Some("leader") && a.ready()
    });
    const PARTIAL: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    const WHOLE: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    let listeners = [
        ("public", a.http.clone()),
        ("HA", a.ha.clone()),
        ("debug TCP", debug_addr.clone()),
    ];
    for (name, addr) in &listeners {
        let mut slow: Vec<TcpStream> = (0..20)
            .map(|_| {
                let mut s = TcpStream::connect(addr).expect("connect");
                s.write_all(PARTIAL).expect("partial head");
                s
            })
            .collect();
        let mut kept = TcpStream::connect(addr).expect("connect");
        kept.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        kept.write_all(WHOLE).expect("request");
        let mut buf = [0u8; 4096];
        let n = kept.read(&mut buf).expect("answer");
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 "),
            "{name}: {}",
            String::from_utf8_lossy(&buf[..n])
        );
        kept.write_all(PARTIAL).expect("half of a second request");
        slow.push(kept);
        for (i, s) in slow.iter_mut().enumerate() {
            s.set_read_timeout(Some(Duration::from_secs(30)))
                .expect("timeout");
            assert!(
                closed_by_server(s),
                "{name}: connection {i} with a partial head stays open"
            );
        }
        assert!(
            get(addr, "/healthz").is_some(),
            "{name}: the listener still serves"
        );
    }
    let mut unix = std::os::unix::net::UnixStream::connect(&a.socket).expect("debug socket");
    unix.write_all(PARTIAL).expect("partial head");
    unix.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    assert!(
        closed_by_server(&mut unix),
        "debug socket: a partial head stays open"
    );
}
