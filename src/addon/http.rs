//! The modules' routes on the host's HTTP listener
//! (`ADDON_OPERATOR_LISTEN_ADDRESS:ADDON_OPERATOR_LISTEN_PORT`, beside `/healthz`, `/readyz`
//! and `/metrics`): `/metrics/hooks` (what hooks wrote to `METRICS_PATH`) and
//! `/status/converge` (addon-operator's converge status, text or `?output=json`). Nothing
//! here shows values or configuration.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::debug::ModulesView;

/// The content type of the Prometheus text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The modules' routes on the host's HTTP listener: `/status/converge` and
/// `/metrics/hooks`.
pub fn routes(modules: ModulesView) -> Router {
    let status = modules.engine.clone();
    let hooks = modules.engine;
    Router::new()
        .route(
            "/status/converge",
            get(
                move |query: axum::extract::Query<std::collections::HashMap<String, String>>| {
                    let engine = status.clone();
                    async move {
                        let dumps = engine.queues().await;
                        let main = dumps.iter().find(|q| q.name == "main");
                        let tasks = main.map_or(0, |q| {
                            q.tasks.iter().filter(|t| is_converge_task(t)).count()
                        });
                        let status = ConvergeStatus::new(engine.converged(), tasks);
                        if query.get("output").map(String::as_str) == Some("json") {
                            axum::Json(status.json()).into_response()
                        } else {
                            status.lines().into_response()
                        }
                    }
                },
            ),
        )
        .route(
            "/metrics/hooks",
            get(move || {
                let text = hooks.hook_metrics.render();
                async move { ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text).into_response() }
            }),
        )
}

/// Tasks the reference counts as converge work: a converge, the module tasks and the
/// beforeAll/afterAll runs it queues, and the start-up tasks of the first one.
fn is_converge_task(task: &bosun_addon::state::QueuedTask) -> bool {
    use bosun_addon::TaskType as T;
    match task.spec.kind.task_type() {
        T::ConvergeModules
        | T::ModuleRun
        | T::ParallelModuleRun
        | T::ModuleDelete
        | T::ModuleEnsureCRDs
        | T::ModulePurge
        | T::DiscoverHelmReleases
        | T::GlobalHookEnableKubernetesBindings
        | T::GlobalHookEnableScheduleBindings => true,
        T::GlobalHookRun => matches!(
            bosun_addon::telemetry::binding_of(task).as_str(),
            "beforeAll" | "afterAll"
        ),
        _ => false,
    }
}

/// `/status/converge`: where the first converge is, and how much converge work is queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConvergeStatus {
    /// Start-up tasks are still ahead of the first converge.
    FirstNotStarted,
    /// The first converge runs, with this many tasks left.
    FirstInProgress(usize),
    /// The first converge is done; this many converge tasks are queued (0: waiting).
    Done(usize),
}

impl ConvergeStatus {
    fn new(converged: bool, tasks: usize) -> Self {
        match (converged, tasks) {
            (true, n) => ConvergeStatus::Done(n),
            (false, 0) => ConvergeStatus::FirstNotStarted,
            (false, n) => ConvergeStatus::FirstInProgress(n),
        }
    }

    /// The reference's lines.
    fn lines(self) -> String {
        match self {
            ConvergeStatus::FirstNotStarted => "STARTUP_CONVERGE_NOT_STARTED\n".into(),
            ConvergeStatus::FirstInProgress(n) => {
                format!("STARTUP_CONVERGE_IN_PROGRESS: {n} tasks\n")
            }
            ConvergeStatus::Done(0) => "STARTUP_CONVERGE_DONE\nCONVERGE_WAIT_TASK\n".into(),
            ConvergeStatus::Done(n) => {
                format!("STARTUP_CONVERGE_DONE\nCONVERGE_IN_PROGRESS: {n} tasks\n")
            }
        }
    }

    /// The reference's JSON (every field, zero values included).
    fn json(self) -> serde_json::Value {
        let (not_started, startup_in_progress, startup_done, in_progress, wait) = match self {
            ConvergeStatus::FirstNotStarted => (true, 0, false, 0, false),
            ConvergeStatus::FirstInProgress(n) => (false, n, false, 0, false),
            ConvergeStatus::Done(n) => (false, 0, true, n, n == 0),
        };
        serde_json::json!({
            "CONVERGE_IN_PROGRESS": in_progress,
            "CONVERGE_WAIT_TASK": wait,
            "STARTUP_CONVERGE_DONE": startup_done,
            "STARTUP_CONVERGE_IN_PROGRESS": startup_in_progress,
            "STARTUP_CONVERGE_NOT_STARTED": not_started,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converge_status_reads_like_the_reference() {
        let s = ConvergeStatus::new(false, 0);
        assert_eq!(s.lines(), "STARTUP_CONVERGE_NOT_STARTED\n");
        assert_eq!(s.json()["STARTUP_CONVERGE_NOT_STARTED"], true);
        let s = ConvergeStatus::new(false, 3);
        assert_eq!(s.lines(), "STARTUP_CONVERGE_IN_PROGRESS: 3 tasks\n");
        assert_eq!(s.json()["STARTUP_CONVERGE_IN_PROGRESS"], 3);
        let s = ConvergeStatus::new(true, 0);
        assert_eq!(s.lines(), "STARTUP_CONVERGE_DONE\nCONVERGE_WAIT_TASK\n");
        assert_eq!(s.json()["CONVERGE_WAIT_TASK"], true);
        assert_eq!(s.json()["STARTUP_CONVERGE_DONE"], true);
        let s = ConvergeStatus::new(true, 2);
        assert_eq!(
            s.lines(),
            "STARTUP_CONVERGE_DONE\nCONVERGE_IN_PROGRESS: 2 tasks\n"
        );
        assert_eq!(s.json()["CONVERGE_IN_PROGRESS"], 2);
    }
}
