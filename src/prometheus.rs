//! The Prometheus side of the operator's metrics: the recorder behind the `metrics` facade
//! (actors, bindings and the journal record through it), the name prefix, and what
//! `/metrics` renders.
//!
//! ```text
//!   metrics::counter!("live_ticks") ──► Prefixed ("addon_operator_live_ticks") ──► PrometheusRecorder
//!   metrics::gauge!("bosun_…")      ──► Prefixed (kept as is)                  ──┘        │
//!   GET /metrics ──► mailbox depths sampled ──► PrometheusHandle::render ◄─────────────────┘
//! ```

use std::time::Duration;

use bosun_addon::telemetry as names;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The default of `ADDON_OPERATOR_PROMETHEUS_METRICS_PREFIX`.
pub const DEFAULT_PREFIX: &str = "addon_operator_";

/// A recorder that puts `prefix` before every metric name except bosun's own (`bosun_…`)
/// and the lambda controllers' (`metacontroller_…`, named as metacontroller names them).
#[derive(Debug)]
pub struct Prefixed<R> {
    inner: R,
    prefix: String,
}

impl<R> Prefixed<R> {
    /// Wraps `inner`.
    pub fn new(inner: R, prefix: &str) -> Prefixed<R> {
        Prefixed {
            inner,
            prefix: prefix.to_string(),
        }
    }

    fn renamed(&self, name: &str) -> Option<String> {
        (!self.prefix.is_empty()
            && !name.starts_with("bosun_")
            && !name.starts_with("metacontroller_"))
        .then(|| format!("{}{name}", self.prefix))
    }

    fn key_name(&self, name: KeyName) -> KeyName {
        match self.renamed(name.as_str()) {
            Some(n) => KeyName::from(n),
            None => name,
        }
    }

    fn key(&self, key: &Key) -> Option<Key> {
        self.renamed(key.name())
            .map(|n| Key::from_parts(n, key.labels().cloned().collect::<Vec<_>>()))
    }
}

impl<R: Recorder> Recorder for Prefixed<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner
            .describe_counter(self.key_name(key), unit, description)
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner
            .describe_gauge(self.key_name(key), unit, description)
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner
            .describe_histogram(self.key_name(key), unit, description)
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        match self.key(key) {
            Some(k) => self.inner.register_counter(&k, metadata),
            None => self.inner.register_counter(key, metadata),
        }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        match self.key(key) {
            Some(k) => self.inner.register_gauge(&k, metadata),
            None => self.inner.register_gauge(key, metadata),
        }
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        match self.key(key) {
            Some(k) => self.inner.register_histogram(&k, metadata),
            None => self.inner.register_histogram(key, metadata),
        }
    }
}

/// Hook and module run times, in seconds.
const RUN_BUCKETS: [f64; 15] = [
    0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0, 300.0, 900.0,
];
/// jq filters, watch event handling and queue operations: microseconds to tens of
/// milliseconds.
const FAST_BUCKETS: [f64; 12] = [
    0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
];

/// The histogram buckets of the lambda controllers' webhook metrics, by name suffix, as metacontroller's
/// (Prometheus' Go defaults for the request duration).
pub const WEBHOOK_BUCKETS: [(&str, &[f64]); 3] = [
    (
        "_request_duration_histogram_seconds",
        &[
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ],
    ),
    (
        "_dns_duration_histogram_seconds",
        &[0.005, 0.01, 0.025, 0.05],
    ),
    ("_tls_duration_histogram_seconds", &[0.05, 0.1, 0.25, 0.5]),
];

/// A Prometheus recorder whose names get `prefix`, and the handle that renders it.
pub fn recorder(
    prefix: &str,
) -> (
    Prefixed<metrics_exporter_prometheus::PrometheusRecorder>,
    PrometheusHandle,
) {
    let mut builder = PrometheusBuilder::new()
        .set_buckets(&RUN_BUCKETS)
        .expect("bucket lists are not empty");
    for name in [
        names::KUBE_JQ_FILTER_DURATION_SECONDS,
        names::KUBE_EVENT_DURATION_SECONDS,
        names::TASKS_QUEUE_ACTION_DURATION_SECONDS,
    ] {
        builder = builder
            .set_buckets_for_metric(Matcher::Suffix(name.to_string()), &FAST_BUCKETS)
            .expect("bucket lists are not empty");
    }
    for (suffix, buckets) in WEBHOOK_BUCKETS {
        builder = builder
            .set_buckets_for_metric(Matcher::Suffix(suffix.to_string()), buckets)
            .expect("bucket lists are not empty");
    }
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    (Prefixed::new(recorder, prefix), handle)
}

/// The installed recorder: its handle and prefix.
#[derive(Clone, Debug)]
pub struct Metrics {
    handle: PrometheusHandle,
    prefix: String,
}

/// Installs the process-wide recorder, once per process (`bosun run` does it once, before
/// its subsystems; the handle reaches code through the host). The `metrics` facade takes
/// one recorder per process: a second install leaves the first in place and warns, and
/// the handle it returns renders nothing.
pub fn install(prefix: &str) -> Metrics {
    let (recorder, handle) = recorder(prefix);
    if metrics::set_global_recorder(recorder).is_err() {
        tracing::warn!("another metrics recorder is installed; /metrics stays empty");
    }
    describe();
    Metrics {
        handle,
        prefix: prefix.to_string(),
    }
}

impl Metrics {
    /// The Prometheus text of every metric, mailbox depths sampled now.
    pub fn render(&self, mailboxes: &bosun_addon::mailbox::Mailboxes) -> String {
        for (actor, depth) in mailboxes.depths() {
            metrics::gauge!(names::MAILBOX_DEPTH, "actor" => actor).set(depth as f64);
        }
        let mut text = self.handle.render();
        for name in names::FLOAT_COUNTERS {
            let full = format!("{}{name}", self.prefix);
            text = text.replace(
                &format!("# TYPE {full} gauge\n"),
                &format!("# TYPE {full} counter\n"),
            );
        }
        text
    }

    /// `live_ticks` every 10 s (the first now) and the exporter's upkeep, until dropped.
    pub fn tick(&self) -> tokio::task::JoinHandle<()> {
        let handle = self.handle.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(10));
            loop {
                every.tick().await;
                metrics::counter!(names::LIVE_TICKS).increment(1);
                handle.run_upkeep();
            }
        })
    }
}

/// `# HELP` lines.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(names::LIVE_TICKS, "Increases every 10 seconds.");
    describe_gauge!(
        names::TASKS_QUEUE_LENGTH,
        "Tasks in a queue, the running one included."
    );
    describe_gauge!(
        names::TASK_WAIT_IN_QUEUE_SECONDS_TOTAL,
        "Seconds tasks waited in their queue before their first start."
    );
    for (name, what) in [
        (names::GLOBAL_HOOK_RUN_SECONDS, "Global hook run time."),
        (
            names::GLOBAL_HOOK_RUN_SYS_CPU_SECONDS,
            "System CPU seconds of global hook runs.",
        ),
        (
            names::GLOBAL_HOOK_RUN_USER_CPU_SECONDS,
            "User CPU seconds of global hook runs.",
        ),
        (names::MODULE_HOOK_RUN_SECONDS, "Module hook run time."),
        (
            names::MODULE_HOOK_RUN_SYS_CPU_SECONDS,
            "System CPU seconds of module hook runs.",
        ),
        (
            names::MODULE_HOOK_RUN_USER_CPU_SECONDS,
            "User CPU seconds of module hook runs.",
        ),
        (names::MODULE_RUN_SECONDS, "ModuleRun task time."),
        (
            names::MODULE_HELM_SECONDS,
            "Time of a module's Helm step (render, status, upgrade).",
        ),
        (
            names::HELM_OPERATION_SECONDS,
            "Time of one Helm step of a module: template, check-upgrade, upgrade, uninstall.",
        ),
        (
            bosun_kube::metrics::KUBERNETES_CLIENT_REQUEST_LATENCY_SECONDS,
            "Time to the response headers of the operator's Kubernetes API requests.",
        ),
        (
            names::TASKS_QUEUE_ACTION_DURATION_SECONDS,
            "Time of one low-level operation on a queue's contents.",
        ),
        (
            names::KUBE_JQ_FILTER_DURATION_SECONDS,
            "jqFilter run time per object.",
        ),
        (
            names::KUBE_EVENT_DURATION_SECONDS,
            "Time a binding takes to handle one watch event.",
        ),
    ] {
        describe_histogram!(name, Unit::Seconds, what);
    }
    for (name, what) in [
        (
            names::GLOBAL_HOOK_RUN_SUCCESS_TOTAL,
            "Successful global hook runs.",
        ),
        (
            names::GLOBAL_HOOK_RUN_ERRORS_TOTAL,
            "Failed global hook runs without allowFailure.",
        ),
        (
            names::GLOBAL_HOOK_RUN_ALLOWED_ERRORS_TOTAL,
            "Failed global hook runs with allowFailure.",
        ),
        (
            names::MODULE_HOOK_RUN_SUCCESS_TOTAL,
            "Successful module hook runs.",
        ),
        (
            names::MODULE_HOOK_RUN_ERRORS_TOTAL,
            "Failed module hook runs without allowFailure.",
        ),
        (
            names::MODULE_HOOK_RUN_ALLOWED_ERRORS_TOTAL,
            "Failed module hook runs with allowFailure.",
        ),
        (
            names::MODULE_RUN_ERRORS_TOTAL,
            "Failed ModuleRun tasks, by the step that failed.",
        ),
        (
            names::MODULE_DELETE_ERRORS_TOTAL,
            "Failed ModuleDelete tasks.",
        ),
        (names::CONVERGENCE_TOTAL, "Converges finished."),
        (
            names::CONFIG_VALUES_ERRORS_TOTAL,
            "ConfigMap changes rejected (invalid YAML, flags or values).",
        ),
        (
            names::MODULE_DISCOVER_ERRORS_TOTAL,
            "Failed enabled scripts, module hook configurations and API calls while discovering modules.",
        ),
        (
            bosun_kube::metrics::KUBERNETES_CLIENT_REQUEST_RESULT_TOTAL,
            "The operator's Kubernetes API requests by status code (<error>: no response).",
        ),
        (
            names::JOURNAL_APPENDS_TOTAL,
            "Journal append calls (one batch of events each).",
        ),
        (
            names::JOURNAL_APPEND_BYTES_TOTAL,
            "Encoded event bytes appended to the journal.",
        ),
    ] {
        describe_counter!(name, what);
    }
    for (name, what) in [
        (
            names::GLOBAL_HOOK_RUN_MAX_RSS_BYTES,
            "Peak resident memory of the last global hook run.",
        ),
        (
            names::MODULE_HOOK_RUN_MAX_RSS_BYTES,
            "Peak resident memory of the last module hook run.",
        ),
        (names::CONVERGENCE_SECONDS, "Seconds spent converging."),
        (names::BINDING_COUNT, "Bindings of a hook."),
        (
            names::KUBE_SNAPSHOT_OBJECTS,
            "Objects in a kubernetes binding's snapshot.",
        ),
        (
            names::KUBE_SNAPSHOT_BYTES,
            "JSON bytes kept for a kubernetes binding's snapshot.",
        ),
        (
            names::JOURNAL_REPLAY_SECONDS,
            "How long the journal replay at start took.",
        ),
        (
            names::MAILBOX_DEPTH,
            "Messages sent to an actor and not handled yet.",
        ),
        (
            names::PARKED_TASKS,
            "Tasks parked after BOSUN_TASK_MAX_ATTEMPTS failures.",
        ),
    ] {
        describe_gauge!(name, what);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_goes_on_operator_metrics_only() {
        let (prefixed, handle) = recorder("addon_operator_");
        metrics::with_local_recorder(&prefixed, || {
            metrics::counter!("live_ticks").increment(2);
            metrics::gauge!("tasks_queue_length", "queue" => "main").set(3.0);
            metrics::counter!("bosun_journal_appends_total").increment(1);
            metrics::histogram!("global_hook_run_seconds", "hook" => "a.sh").record(0.3);
            metrics::counter!("metacontroller_sync_requests_total").increment(1);
        });
        let text = handle.render();
        assert!(text.contains("addon_operator_live_ticks 2"), "{text}");
        assert!(
            text.contains("addon_operator_tasks_queue_length{queue=\"main\"} 3"),
            "{text}"
        );
        assert!(text.contains("\nbosun_journal_appends_total 1"), "{text}");
        assert!(
            text.contains("\nmetacontroller_sync_requests_total 1"),
            "metacontroller's names are kept: {text}"
        );
        assert!(
            text.contains(
                "addon_operator_global_hook_run_seconds_bucket{hook=\"a.sh\",le=\"0.5\"} 1"
            ),
            "histograms have buckets: {text}"
        );
        let (plain, handle) = recorder("");
        metrics::with_local_recorder(&plain, || {
            metrics::counter!("live_ticks").increment(1);
        });
        assert!(
            handle.render().lines().any(|l| l == "live_ticks 1"),
            "no prefix: {}",
            handle.render()
        );
    }
}
