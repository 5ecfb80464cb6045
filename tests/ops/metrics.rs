//! Prometheus metrics of a running `bosun run` against the sandbox: `/metrics` (the
//! operator's: hook runs, queues and their operations, converges, modules and their Helm
//! steps, discovery and ConfigMap errors, the Kubernetes client, bindings, journal,
//! mailboxes, the prefix) and `/metrics/hooks` (what hooks write to `METRICS_PATH`, with
//! the documented grouped-metrics example reproduced step by step).

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{Operator, Sandbox, workdir};
use serde_json::json;

/// The address of the public HTTP endpoints, from the log.
fn http_addr(op: &Operator) -> String {
    let mut addr = None;
    op.wait(
        "the HTTP address in the log",
        Duration::from_secs(60),
        || {
            addr = op.logs().lines().find_map(|l| {
                l.split("bosun HTTP endpoints listening on http://")
                    .nth(1)
                    .map(|a| a.trim().to_string())
            });
            addr.is_some()
        },
    );
    addr.unwrap_or_default()
}

fn get(addr: &str, path: &str) -> String {
    let (code, body) = common::http_raw(addr, "GET", path, "", b"");
    assert_eq!(code, 200, "GET {path}");
    String::from_utf8(body).expect("UTF-8")
}

/// One sample: name and labels.
type Series = (String, BTreeMap<String, String>);

/// Parses the Prometheus text format (no escapes in label values needed here).
fn samples(text: &str) -> BTreeMap<Series, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("value");
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => {
                let body = rest.trim_end_matches('}');
                let labels = body
                    .split("\",")
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (k, v) = p.split_once("=\"").expect("label");
                        (k.to_string(), v.trim_end_matches('"').to_string())
                    })
                    .collect();
                (n.to_string(), labels)
            }
            None => (series.to_string(), BTreeMap::new()),
        };
        out.insert((name, labels), value.parse().expect("number"));
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn value(text: &str, name: &str, pairs: &[(&str, &str)]) -> Option<f64> {
    samples(text)
        .get(&(name.to_string(), labels(pairs)))
        .copied()
}

/// Every sample of `name` whose labels include `pairs`.
fn matching(
    text: &str,
    name: &str,
    pairs: &[(&str, &str)],
) -> Vec<(BTreeMap<String, String>, f64)> {
    samples(text)
        .into_iter()
        .filter(|((n, l), _)| {
            n == name
                && pairs
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|((_, l), v)| (l, v))
        .collect()
}

const CM: &str = "/api/v1/namespaces/default/configmaps";

fn create_cm(sb: &Sandbox, name: &str, labels: serde_json::Value) {
    let (code, body) = sb.post(
        CM,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {}}),
    );
    assert_eq!(code, 201, "{body}");
}

#[test]
fn operator_metrics_show_hook_runs_queues_converges_and_bindings() {
    let sb = Sandbox::start();
    let work = workdir();
    // A config value that must not show up in any metric.
    let (code, body) = sb.post(
        CM,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "addon-operator"},
                "data": {"global": "password: s3cr3t-value\n"}}),
    );
    assert_eq!(code, 201, "{body}");
    create_cm(&sb, "watched-1", json!({"watched": "yes"}));
    let hooks = work.path().join("global");
    common::config_hook(
        &hooks.join("ok.sh"),
        "configVersion: v1
onStartup: 1
kubernetes:
- name: cms
  kind: ConfigMap
  labelSelector: {matchLabels: {watched: \"yes\"}}
  jqFilter: .metadata.name
  queue: watch",
        "echo ok",
    );
    // Runs, but writes a malformed metric: the task fails before its object patch, and
    // stays at the head of its queue.
    common::config_hook(
        &hooks.join("broken.sh"),
        "configVersion: v1
kubernetes:
- name: trigger
  kind: ConfigMap
  nameSelector: {matchNames: [break-me]}
  executeHookOnSynchronization: false
  queue: failing",
        r#"echo '{"name":"fine","add":1}' >> "$METRICS_PATH"
echo '{"name":"broken","action":"inc","value":1}' >> "$METRICS_PATH"
echo '{"operation":"Create","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"must-not-exist","namespace":"default"}}}' >> "$KUBERNETES_PATCH_PATH""#,
    );
    common::config_hook(
        &hooks.join("tolerated.sh"),
        "configVersion: v1
kubernetes:
- name: tolerated
  kind: ConfigMap
  nameSelector: {matchNames: [nothing]}
  allowFailure: true",
        "exit 3",
    );
    std::fs::write(
        work.path().join("modules/values.yaml"),
        "alphaEnabled: true\n",
    )
    .expect("values.yaml");
    common::config_hook(
        &work.path().join("modules/001-alpha/hooks/run.sh"),
        "configVersion: v1\nbeforeHelm: 1",
        "echo alpha",
    );
    let op = Operator::start(&sb, &hooks, work.path());
    let addr = http_addr(&op);
    op.wait("the first converge", Duration::from_secs(60), || {
        common::http_raw(&addr, "GET", "/readyz", "", b"").0 == 200
    });
    create_cm(&sb, "break-me", json!({}));
    op.wait(
        "two failed attempts of broken.sh",
        Duration::from_secs(60),
        || {
            let text = get(&addr, "/metrics");
            matching(
                &text,
                "addon_operator_global_hook_run_errors_total",
                &[("hook", "broken.sh")],
            )
            .iter()
            .any(|(_, v)| *v >= 2.0)
        },
    );
    let text = get(&addr, "/metrics");
    let hooks_text = get(&addr, "/metrics/hooks");
    assert!(
        !text.contains("s3cr3t-value") && !hooks_text.contains("s3cr3t-value"),
        "no values in metrics"
    );

    // Hook runs: success, errors without allowFailure, allowed errors.
    let startup = [
        ("hook", "ok.sh"),
        ("binding", "onStartup"),
        ("queue", "main"),
        ("activation", "OnStartup"),
    ];
    assert_eq!(
        value(
            &text,
            "addon_operator_global_hook_run_success_total",
            &startup
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "addon_operator_global_hook_run_seconds_count",
            &startup
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "addon_operator_global_hook_run_user_cpu_seconds_count",
            &startup
        ),
        Some(1.0)
    );
    assert!(
        value(
            &text,
            "addon_operator_global_hook_run_max_rss_bytes",
            &startup
        )
        .is_some_and(|v| v > 100_000.0),
        "peak memory of the hook process"
    );
    assert_eq!(
        value(
            &text,
            "addon_operator_global_hook_run_success_total",
            &[
                ("hook", "ok.sh"),
                ("binding", "cms"),
                ("queue", "watch"),
                ("activation", "Kubernetes")
            ]
        ),
        Some(1.0),
        "the Synchronization run"
    );
    let errors = matching(
        &text,
        "addon_operator_global_hook_run_errors_total",
        &[("hook", "broken.sh")],
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].0,
        labels(&[
            ("hook", "broken.sh"),
            ("binding", "trigger"),
            ("queue", "failing"),
            ("activation", "Kubernetes")
        ])
    );
    assert!(
        matching(
            &text,
            "addon_operator_global_hook_run_success_total",
            &[("hook", "broken.sh")]
        )
        .is_empty()
    );
    assert_eq!(
        value(
            &text,
            "addon_operator_global_hook_run_allowed_errors_total",
            &[
                ("hook", "tolerated.sh"),
                ("binding", "tolerated"),
                ("queue", "main"),
                ("activation", "Kubernetes")
            ]
        ),
        Some(1.0)
    );
    // The malformed metric failed the task, named the hook, the line and the problem, and
    // nothing after it ran: no metric of the batch, no object.
    op.wait("the failure logged", Duration::from_secs(60), || {
        let logs = op.logs();
        logs.contains(r#"hook \"broken.sh\": METRICS_PATH line 2: unknown action \"inc\""#)
            || logs.contains(r#"hook "broken.sh": METRICS_PATH line 2: unknown action "inc""#)
    });
    assert!(!hooks_text.contains("fine"), "{hooks_text}");
    assert_eq!(sb.get(&format!("{CM}/must-not-exist")).0, 404);

    // Queues: the failing task stays; main is done.
    assert_eq!(
        value(
            &text,
            "addon_operator_tasks_queue_length",
            &[("queue", "failing")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "addon_operator_tasks_queue_length",
            &[("queue", "main")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(&text, "bosun_parked_tasks", &[("queue", "failing")]),
        Some(0.0)
    );
    assert!(
        !matching(
            &text,
            "addon_operator_task_wait_in_queue_seconds_total",
            &[
                ("hook", "ok.sh"),
                ("binding", "onStartup"),
                ("queue", "main")
            ]
        )
        .is_empty()
    );
    assert!(text.contains("# TYPE addon_operator_task_wait_in_queue_seconds_total counter"));

    // Converges and modules.
    assert_eq!(
        value(
            &text,
            "addon_operator_convergence_total",
            &[("activation", "OperatorStartup")]
        ),
        Some(1.0)
    );
    assert!(
        value(
            &text,
            "addon_operator_convergence_seconds",
            &[("activation", "OperatorStartup")]
        )
        .is_some_and(|v| v > 0.0)
    );
    assert!(text.contains("# TYPE addon_operator_convergence_seconds counter"));
    assert_eq!(
        value(
            &text,
            "addon_operator_module_run_seconds_count",
            &[("module", "alpha"), ("activation", "OperatorStartup")]
        ),
        Some(1.0)
    );
    let module_hook = matching(
        &text,
        "addon_operator_module_hook_run_success_total",
        &[
            ("module", "alpha"),
            ("binding", "beforeHelm"),
            ("queue", "main"),
            ("activation", "OperatorStartup"),
        ],
    );
    assert_eq!(module_hook.len(), 1, "{text}");
    assert_eq!(module_hook[0].1, 1.0);
    let module_hook_name = module_hook[0].0["hook"].clone();
    assert!(module_hook_name.ends_with("run.sh"), "{module_hook_name}");
    assert_eq!(
        value(
            &text,
            "addon_operator_binding_count",
            &[("module", "alpha"), ("hook", &module_hook_name)]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "addon_operator_binding_count",
            &[("module", ""), ("hook", "ok.sh")]
        ),
        Some(2.0)
    );

    // Bindings: snapshot size and jq time.
    let cms = [
        ("module", ""),
        ("hook", "ok.sh"),
        ("binding", "cms"),
        ("queue", "watch"),
    ];
    assert_eq!(
        value(&text, "addon_operator_kube_snapshot_objects", &cms),
        Some(1.0)
    );
    // The object (kept in memory by default) and its filter result, as JSON.
    assert!(
        value(&text, "addon_operator_kube_snapshot_bytes", &cms)
            .is_some_and(|v| v > "\"watched-1\"".len() as f64 + 100.0),
        "{text}"
    );
    let with_kind = [
        ("module", ""),
        ("hook", "ok.sh"),
        ("binding", "cms"),
        ("queue", "watch"),
        ("kind", "ConfigMap"),
    ];
    assert!(
        value(
            &text,
            "addon_operator_kube_jq_filter_duration_seconds_count",
            &with_kind
        )
        .is_some_and(|v| v >= 1.0)
    );
    create_cm(&sb, "watched-2", json!({"watched": "yes"}));
    op.wait("the second watched object", Duration::from_secs(30), || {
        let text = get(&addr, "/metrics");
        value(&text, "addon_operator_kube_snapshot_objects", &cms) == Some(2.0)
            && value(
                &text,
                "addon_operator_kube_event_duration_seconds_count",
                &with_kind,
            )
            .is_some_and(|v| v >= 1.0)
    });

    // bosun's own, without the prefix.
    let text = get(&addr, "/metrics");
    assert!(value(&text, "addon_operator_live_ticks", &[]).is_some_and(|v| v >= 1.0));
    assert!(value(&text, "bosun_journal_appends_total", &[]).is_some_and(|v| v > 0.0));
    assert!(value(&text, "bosun_journal_append_bytes_total", &[]).is_some_and(|v| v > 0.0));
    assert!(value(&text, "bosun_journal_replay_seconds", &[]).is_some());
    assert!(value(&text, "bosun_mailbox_depth", &[("actor", "queue/main")]).is_some());
    assert!(value(&text, "bosun_mailbox_depth", &[("actor", "global-hooks")]).is_some());
}

/// The example scrapes of the documentation, as written there (labels separated by ", ",
/// the drawing beside them left out).
const STEP_1: &str = r#"# HELP hook_metric hook_metric
# TYPE hook_metric counter
hook_metric{hook="hook1.sh", kind="pod"} 1
hook_metric{hook="hook1.sh", kind="replicaset"} 1
hook_metric{hook="hook1.sh", kind="deployment"} 1
hook_metric{hook="hook2.sh", kind="configmap"} 1
hook_metric{hook="hook2.sh", kind="secret"} 1
# HELP hook1_special_metric hook1_special_metric
# TYPE hook1_special_metric gauge
hook1_special_metric{hook="hook1.sh", label1="value1"} 12
# HELP hook2_special_metric hook2_special_metric
# TYPE hook2_special_metric gauge
hook2_special_metric{hook="hook2.sh"} 42
# HELP common_metric common_metric
# TYPE common_metric gauge
common_metric{hook="hook1.sh", source="source3"} 300
common_metric{hook="hook1.sh", source="source1"} 100
common_metric{hook="hook2.sh", source="source2"} 200
"#;

const STEP_2: &str = r#"# HELP hook_metric hook_metric
# TYPE hook_metric counter
hook_metric{hook="hook1.sh", kind="pod"} 2
hook_metric{hook="hook2.sh", kind="configmap"} 1
hook_metric{hook="hook2.sh", kind="secret"} 1
# HELP hook2_special_metric hook2_special_metric
# TYPE hook2_special_metric gauge
hook2_special_metric{hook="hook2.sh"} 42
# HELP common_metric common_metric
# TYPE common_metric gauge
common_metric{hook="hook1.sh", source="source1"} 100
common_metric{hook="hook2.sh", source="source2"} 200
"#;

const STEP_3: &str = r#"# HELP hook_metric hook_metric
# TYPE hook_metric counter
hook_metric{hook="hook1.sh", kind="pod"} 2
# HELP common_metric common_metric
# TYPE common_metric gauge
common_metric{hook="hook1.sh", source="source1"} 100
common_metric{hook="hook2.sh", source="source2"} 200
"#;

/// Waits until `/metrics/hooks` is `want` (in the exposition format: labels joined by ",").
fn scrape_is(op: &Operator, addr: &str, what: &str, want: &str) {
    let want = want.replace("\", ", "\",");
    let mut last = String::new();
    op.wait(what, Duration::from_secs(60), || {
        last = get(addr, "/metrics/hooks");
        last == want
    });
    assert_eq!(last, want);
}

#[test]
fn hook_metrics_follow_the_documented_grouped_example() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = work.path().join("global");
    // Each hook counts its runs in $OUT_DIR and writes the example's lines for that run.
    let config = |order: u32, trigger: &str| {
        format!(
            "configVersion: v1
onStartup: {order}
kubernetes:
- name: trigger
  kind: ConfigMap
  nameSelector: {{matchNames: [{trigger}]}}
  executeHookOnSynchronization: false"
        )
    };
    let counted = |name: &str, first: &str, second: &str| {
        format!(
            "n=$(( $(cat \"$OUT_DIR/{name}.runs\" 2>/dev/null || echo 0) + 1 ))
if [ \"$n\" = 1 ]; then
cat >> \"$METRICS_PATH\" <<'EOF'
{first}
EOF
else
cat >> \"$METRICS_PATH\" <<'EOF'
{second}
EOF
fi
echo \"$n\" > \"$OUT_DIR/{name}.runs\""
        )
    };
    common::config_hook(
        &hooks.join("hook1.sh"),
        &config(1, "trigger-hook1"),
        &counted(
            "hook1",
            r#"{"group":"hook1", "name":"hook_metric", "action":"add", "value":1, "labels":{"kind":"pod"}}
{"group":"hook1", "name":"hook_metric", "action":"add", "value":1, "labels":{"kind":"replicaset"}}
{"group":"hook1", "name":"hook_metric", "action":"add", "value":1, "labels":{"kind":"deployment"}}
{"group":"hook1", "name":"hook1_special_metric", "action":"set", "value":12, "labels":{"label1":"value1"}}
{"group":"hook1", "name":"common_metric", "action":"set", "value":300, "labels":{"source":"source3"}}
{"name":"common_metric", "action":"set", "value":100, "labels":{"source":"source1"}}"#,
            r#"{"group":"hook1", "name":"hook_metric", "action":"add", "value":1, "labels":{"kind":"pod"}}"#,
        ),
    );
    common::config_hook(
        &hooks.join("hook2.sh"),
        &config(2, "trigger-hook2"),
        &counted(
            "hook2",
            r#"{"group":"hook2", "name":"hook_metric","action":"add", "value":1, "labels":{"kind":"configmap"}}
{"group":"hook2", "name":"hook_metric","action":"add", "value":1, "labels":{"kind":"secret"}}
{"group":"hook2", "name":"hook2_special_metric", "action":"set", "value":42}
{"name":"common_metric", "action":"set", "value":200, "labels":{"source":"source2"}}"#,
            r#"{"group":"hook2", "action":"expire"}"#,
        ),
    );
    // A prefix of our own: operator metrics get it, the hooks' and bosun's do not. Queue
    // operations are not timed.
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[
            ("ADDON_OPERATOR_PROMETHEUS_METRICS_PREFIX", "acme_"),
            ("QUEUE_ACTIONS_METRICS", "no"),
        ],
    );
    let addr = http_addr(&op);
    scrape_is(
        &op,
        &addr,
        "the first runs of hook1.sh and hook2.sh",
        STEP_1,
    );
    // The watches are up once the first converge is done: a new object is an event then.
    op.wait("the first converge", Duration::from_secs(60), || {
        common::http_raw(&addr, "GET", "/readyz", "", b"").0 == 200
    });
    create_cm(&sb, "trigger-hook1", json!({}));
    scrape_is(&op, &addr, "the second run of hook1.sh", STEP_2);
    create_cm(&sb, "trigger-hook2", json!({}));
    scrape_is(&op, &addr, "the second run of hook2.sh", STEP_3);

    let text = get(&addr, "/metrics");
    assert!(value(&text, "acme_live_ticks", &[]).is_some(), "{text}");
    assert!(value(&text, "bosun_journal_appends_total", &[]).is_some());
    assert!(!text.contains("addon_operator_"), "{text}");
    assert!(
        !text.contains("hook_metric"),
        "hook metrics are served apart"
    );
    assert!(
        !text.contains("tasks_queue_action_duration_seconds"),
        "QUEUE_ACTIONS_METRICS=no: {text}"
    );
    assert!(
        value(&text, "acme_tasks_queue_length", &[("queue", "main")]).is_some(),
        "the other queue metrics stay"
    );
    assert_eq!(
        value(
            &text,
            "acme_global_hook_run_success_total",
            &[
                ("hook", "hook1.sh"),
                ("binding", "trigger"),
                ("queue", "main"),
                ("activation", "Kubernetes")
            ]
        ),
        Some(1.0)
    );
}

/// Replaces keys of the operator's ConfigMap (read, change, write back; retried on a
/// conflict with bosun's own writes).
fn set_config(sb: &Sandbox, data: &[(&str, &str)]) {
    let path = format!("{CM}/addon-operator");
    for _ in 0..10 {
        let (code, mut cm) = sb.get(&path);
        assert_eq!(code, 200, "{cm}");
        if !cm["data"].is_object() {
            cm["data"] = json!({});
        }
        for (k, v) in data {
            cm["data"][*k] = json!(v);
        }
        let (code, body) = sb.put(&path, &cm);
        if code == 200 {
            return;
        }
        assert_eq!(code, 409, "{body}");
    }
    panic!("cannot update the ConfigMap");
}

/// The sum of `name` over the series whose labels include `pairs`.
fn total(text: &str, name: &str, pairs: &[(&str, &str)]) -> f64 {
    matching(text, name, pairs).iter().map(|(_, v)| v).sum()
}

#[test]
fn helm_steps_discovery_and_config_errors_client_requests_and_queue_actions() {
    let sb = Sandbox::start();
    let work = workdir();
    let m = work.path().join("modules");
    let (code, body) = sb.post(
        CM,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "addon-operator"},
                "data": {"alpha": "replicas: 1\n"}}),
    );
    assert_eq!(code, 201, "{body}");
    std::fs::write(
        m.join("values.yaml"),
        "alphaEnabled: true\nbadScriptEnabled: true\nbadHookEnabled: true\n",
    )
    .expect("values.yaml");
    // A module with a chart and a schema for its config values.
    std::fs::create_dir_all(m.join("001-alpha/templates")).expect("chart dir");
    std::fs::write(
        m.join("001-alpha/templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: alpha-settings\ndata:\n  replicas: {{ .Values.alpha.replicas | quote }}\n",
    )
    .expect("template");
    std::fs::create_dir_all(m.join("001-alpha/openapi")).expect("openapi dir");
    std::fs::write(
        m.join("001-alpha/openapi/config-values.yaml"),
        "type: object\nproperties:\n  replicas: {type: integer}\n",
    )
    .expect("schema");
    // Module discovery errors: an enabled script that fails, a hook whose --config is not
    // a configuration.
    common::write_exec(
        &m.join("002-bad-script/enabled"),
        "#!/bin/bash\necho 'cannot decide' >&2\nexit 3\n",
    );
    common::write_exec(
        &m.join("003-bad-hook/hooks/hook.sh"),
        "#!/bin/bash\necho '{ not a configuration'\n",
    );
    // Failing module tasks are parked at once, so the converge goes on without them.
    let op = Operator::start_with(
        &sb,
        &work.path().join("no-global-hooks"),
        work.path(),
        &[("BOSUN_TASK_MAX_ATTEMPTS", "1")],
    );
    let addr = http_addr(&op);
    op.wait(
        "the first converge, the failing modules parked",
        Duration::from_secs(60),
        || {
            let text = get(&addr, "/metrics");
            value(
                &text,
                "addon_operator_convergence_total",
                &[("activation", "OperatorStartup")],
            ) == Some(1.0)
                && value(&text, "bosun_parked_tasks", &[("queue", "main")]) == Some(2.0)
        },
    );
    let text = get(&addr, "/metrics");

    // Each Helm step of alpha's run, timed once.
    for operation in ["template", "check-upgrade", "upgrade"] {
        assert_eq!(
            value(
                &text,
                "addon_operator_helm_operation_seconds_count",
                &[
                    ("module", "alpha"),
                    ("activation", "OperatorStartup"),
                    ("operation", operation)
                ]
            ),
            Some(1.0),
            "{operation}: {text}"
        );
    }
    assert_eq!(
        value(
            &text,
            "addon_operator_module_helm_seconds_count",
            &[("module", "alpha"), ("activation", "OperatorStartup")]
        ),
        Some(1.0)
    );

    // The enabled script failed when the converge planned the modules and when its run
    // checked again; the hook's --config failed once.
    assert_eq!(
        value(&text, "addon_operator_module_discover_errors_total", &[]),
        Some(3.0),
        "{}",
        op.logs()
    );

    // The operator's own API requests: by status, method and API server; timed by a URL
    // template that names resources, never objects.
    assert!(
        value(
            &text,
            "addon_operator_kubernetes_client_request_result_total",
            &[("code", "200"), ("method", "GET"), ("host", sb.addr())]
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
    let latency = matching(
        &text,
        "addon_operator_kubernetes_client_request_latency_seconds_count",
        &[],
    );
    let urls: Vec<String> = latency
        .iter()
        .filter(|(l, _)| l["verb"] == "GET")
        .map(|(l, _)| l["url"].clone())
        .collect();
    assert!(
        urls.iter()
            .any(|u| u == "/api/v1/namespaces/{namespace}/configmaps"),
        "the ConfigMap watch: {urls:?}"
    );
    assert!(
        urls.iter()
            .any(|u| u == "/api/v1/namespaces/{namespace}/configmaps/{name}"),
        "alpha's object read back after its upgrade: {urls:?}"
    );
    for (labels, _) in &latency {
        let url = &labels["url"];
        for name in ["default", "addon-operator", "alpha-settings", "?", "watch="] {
            assert!(!url.contains(name), "{name} in a url label: {latency:?}");
        }
    }

    // Queue operations of the main queue.
    for action in ["AddLast", "GetFirst", "Remove"] {
        assert!(
            value(
                &text,
                "addon_operator_tasks_queue_action_duration_seconds_count",
                &[("queue_name", "main"), ("queue_action", action)]
            )
            .is_some_and(|v| v >= 1.0),
            "{action}: {text}"
        );
    }

    // ConfigMap edits bosun rejects are counted, and it carries on: a value the module's
    // schema refuses, then a flag that is not a boolean.
    set_config(&sb, &[("alpha", "replicas: many\n")]);
    op.wait(
        "the schema violation counted",
        Duration::from_secs(30),
        || {
            value(
                &get(&addr, "/metrics"),
                "addon_operator_config_values_errors_total",
                &[],
            ) == Some(1.0)
        },
    );
    set_config(
        &sb,
        &[("alpha", "replicas: 2\n"), ("alphaEnabled", "maybe")],
    );
    op.wait("the bad flag counted", Duration::from_secs(30), || {
        value(
            &get(&addr, "/metrics"),
            "addon_operator_config_values_errors_total",
            &[],
        ) == Some(2.0)
    });
    assert_eq!(common::http_raw(&addr, "GET", "/healthz", "", b"").0, 200);
    op.wait(
        "the rejected ConfigMap logged",
        Duration::from_secs(60),
        || op.logs().contains("keeping the last good config values"),
    );

    // A valid edit that disables alpha: its release is uninstalled, and timed.
    set_config(&sb, &[("alphaEnabled", "false")]);
    op.wait(
        "alpha's release uninstalled",
        Duration::from_secs(60),
        || {
            total(
                &get(&addr, "/metrics"),
                "addon_operator_helm_operation_seconds_count",
                &[("module", "alpha"), ("operation", "uninstall")],
            ) == 1.0
        },
    );
    assert_eq!(
        value(
            &get(&addr, "/metrics"),
            "addon_operator_config_values_errors_total",
            &[]
        ),
        Some(2.0),
        "a valid edit is no error"
    );
}

/// `KUBE_CLIENT_QPS`/`_BURST` and `--client-go-qps`/`-burst` limit bosun's requests as
/// client-go's do: at the default rate (`0`: five a second) with a burst of two, the start
/// still finishes, and each client's waits show in the limiter's histogram.
#[test]
fn the_clients_keep_to_their_limits_and_say_when_they_waited() {
    let sb = Sandbox::start();
    let work = workdir();
    let op = Operator::start_with(
        &sb,
        &work.path().join("no-global-hooks"),
        work.path(),
        &[
            ("KUBE_CLIENT_QPS", "0"),
            ("KUBE_CLIENT_BURST", "2"),
            ("BOSUN_CLIENT_GO_QPS", "0"),
            ("BOSUN_CLIENT_GO_BURST", "2"),
        ],
    );
    let addr = http_addr(&op);
    op.wait("ready under the limit", Duration::from_secs(60), || {
        common::http_raw(&addr, "GET", "/readyz", "", b"").0 == 200
    });
    let waited = |client: &str| {
        let text = get(&addr, "/metrics");
        value(
            &text,
            "bosun_kubernetes_client_rate_limiter_duration_seconds_count",
            &[("client", client)],
        )
        .unwrap_or(0.0)
    };
    assert!(
        waited("shared") >= 1.0,
        "the shared client's start (ConfigMap, watches, CRDs) is more than one request"
    );
    // The lambda controllers installed their CRDs with their own client: more than one.
    assert!(waited("lambda") >= 1.0, "{}", get(&addr, "/metrics"));
}

/// `HELM_MONITOR_KUBE_CLIENT_QPS`/`_BURST` limit the client that reads the releases'
/// records and checks their objects, as addon-operator's helm monitor client: a module's
/// chart still installs under a limit of five a second with a burst of one, and that
/// client's requests show in the limiter's histogram under `client="helmMonitor"`. A burst
/// that is not a number stops the start, naming the variable.
#[test]
fn the_helm_monitor_client_keeps_to_its_own_limit() {
    let sb = Sandbox::start();
    let work = workdir();
    common::configmap_module(&work.path().join("modules/010-web"), "web", "web-config");
    let op = Operator::start_with(
        &sb,
        &work.path().join("no-global-hooks"),
        work.path(),
        &[
            ("HELM_MONITOR_KUBE_CLIENT_QPS", "0"),
            ("HELM_MONITOR_KUBE_CLIENT_BURST", "1"),
        ],
    );
    let addr = http_addr(&op);
    op.wait(
        "the module's chart installed",
        Duration::from_secs(90),
        || sb.get("/api/v1/namespaces/default/configmaps/web-config").0 == 200,
    );
    op.wait(
        "the helm monitor's requests in the limiter's histogram",
        Duration::from_secs(60),
        || {
            value(
                &get(&addr, "/metrics"),
                "bosun_kubernetes_client_rate_limiter_duration_seconds_count",
                &[("client", "helmMonitor")],
            )
            .is_some_and(|n| n >= 1.0)
        },
    );
    let logs = op.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("helmMonitor") && l.contains("5 requests/s, burst 1")),
        "the helm monitor's client is built with the limit given: {logs}"
    );
    drop(op);
    let mut bad = Operator::start_with(
        &sb,
        &work.path().join("no-global-hooks"),
        work.path(),
        &[("HELM_MONITOR_KUBE_CLIENT_BURST", "many")],
    );
    assert_eq!(bad.wait_exit(Duration::from_secs(60)), Some(false));
    let logs = bad.logs();
    assert!(
        logs.contains("HELM_MONITOR_KUBE_CLIENT_BURST=\"many\""),
        "{logs}"
    );
}

/// A limit that is not a number stops the start, naming the setting.
#[test]
fn a_client_limit_that_is_not_a_number_is_named() {
    let sb = Sandbox::start();
    let work = workdir();
    let mut op = Operator::start_with(
        &sb,
        &work.path().join("no-global-hooks"),
        work.path(),
        &[("KUBE_CLIENT_QPS", "fast")],
    );
    assert_eq!(op.wait_exit(Duration::from_secs(60)), Some(false));
    let logs = op.logs();
    assert!(
        logs.contains("KUBE_CLIENT_QPS=\"fast\": expected a number of requests per second"),
        "{logs}"
    );
}

/// A module whose run fails counts in `module_run_errors_total` by the step that failed,
/// and one whose deletion fails in `module_delete_errors_total`, as addon-operator's.
#[test]
fn failed_module_runs_and_deletions_are_counted() {
    let sb = Sandbox::start();
    let work = workdir();
    let m = work.path().join("modules");
    std::fs::write(
        m.join("values.yaml"),
        "runFailsEnabled: true\ndeleteFailsEnabled: true\n",
    )
    .expect("values.yaml");
    common::config_hook(
        &m.join("010-run-fails/hooks/before.sh"),
        r#"{"configVersion":"v1","beforeHelm":1}"#,
        "echo 'cannot prepare' >&2; exit 1",
    );
    common::config_hook(
        &m.join("020-delete-fails/hooks/after-delete.sh"),
        r#"{"configVersion":"v1","afterDeleteHelm":1}"#,
        "echo 'cannot clean up' >&2; exit 1",
    );
    let op = Operator::start_with(
        &sb,
        &work.path().join("no-global-hooks"),
        work.path(),
        &[("BOSUN_TASK_MAX_ATTEMPTS", "1")],
    );
    let addr = http_addr(&op);
    op.wait("the failed run counted", Duration::from_secs(60), || {
        value(
            &get(&addr, "/metrics"),
            "addon_operator_module_run_errors_total",
            &[("module", "run-fails"), ("error_type", "beforeHelm")],
        ) == Some(1.0)
    });
    // Disabling the other module runs its deletion, whose afterDeleteHelm hook fails.
    let (code, body) = sb.post(
        CM,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "addon-operator"},
                "data": {"deleteFailsEnabled": "false"}}),
    );
    assert_eq!(code, 201, "{body}");
    op.wait(
        "the failed deletion counted",
        Duration::from_secs(60),
        || {
            value(
                &get(&addr, "/metrics"),
                "addon_operator_module_delete_errors_total",
                &[("module", "delete-fails")],
            ) == Some(1.0)
        },
    );
    let text = get(&addr, "/metrics");
    assert_eq!(
        value(
            &text,
            "addon_operator_module_delete_errors_total",
            &[("module", "run-fails")]
        ),
        None,
        "{text}"
    );
}
