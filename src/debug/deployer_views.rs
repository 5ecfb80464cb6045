//! `/deployer/items` and the deployer part of `/actors` and `/explain`: the deployer's
//! work queue (waiting, delayed until a retry or a timeout, in flight) and the last run of
//! each item; [`DeployItemsView`], what the deployer shows on the endpoints.

use std::sync::Arc;

use bosun_deployer::controller::DeployerView;
use bosun_deployer::events::DeployerEvent;
use bosun_journal::Journal;
use serde_json::json;

use crate::debug::last_outcome;
use crate::debug::views::View;
use crate::explanation::{Explanation, Subject};
use crate::host::{ActorsPart, SubsystemView};
use bosun_runtime::clock::now_ms;

/// The deployer as the endpoints read it (both `None` while it does not run).
#[derive(Clone, Default)]
pub struct DeployItemsView {
    /// The running deployer.
    pub deployer: Option<DeployerView>,
    /// Its journal (`/explain` reads it).
    pub journal: Option<Arc<Journal<DeployerEvent>>>,
}

impl SubsystemView for DeployItemsView {
    fn page(&self) -> Option<&'static str> {
        Some("/deployer/items")
    }

    fn actor_kinds(&self) -> &'static [(&'static str, &'static str)] {
        &[("deployer", "deployer")]
    }

    fn actors(&self) -> Option<ActorsPart> {
        let view = deployer_items(self.deployer.as_ref());
        Some(ActorsPart {
            key: "deployer",
            data: view.data["deployer"].clone(),
            text: view.text.unwrap_or_default(),
        })
    }

    fn explain(&self, subject: &Subject, e: &mut Explanation) -> Result<(), String> {
        match &self.journal {
            Some(j) => crate::debug::explain::deployer::explain(j, subject, e)
                .map_err(|err| format!("deployer journal: {err}")),
            None => Ok(()),
        }
    }

    fn now(&self, subject: &Subject, e: &mut Explanation) {
        if let Some(d) = &self.deployer {
            crate::debug::explain::deployer::live(d, subject, e);
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The running deployer: its types, its work queue and the last run of each item.
pub fn deployer_items(running: Option<&DeployerView>) -> View {
    let Some(d) = running else {
        return View {
            data: json!({"deployer": null}),
            text: Some(String::new()),
        };
    };
    let q = d.queue();
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let queue = json!({
        "waiting": q.waiting.iter().map(|w| json!({"key": w.key.to_string(), "failures": w.failures})).collect::<Vec<_>>(),
        "delayed": q.delayed.iter().map(|k| json!({"key": k.key.to_string(), "dueInMs": ms(k.due_in), "failures": k.failures})).collect::<Vec<_>>(),
        "inFlight": q.in_flight.iter().map(|f| json!({"key": f.key.to_string(), "runningForMs": ms(f.running_for), "dirty": f.dirty})).collect::<Vec<_>>(),
    });
    let last = d.last_runs();
    let mut text = format!(
        "\nDeployer ({}): {} waiting, {} delayed, {} in flight\n",
        d.types().join(", "),
        q.waiting.len(),
        q.delayed.len(),
        q.in_flight.len()
    );
    for f in &q.in_flight {
        text.push_str(&format!(
            "  reconciling {} for {} ms\n",
            f.key,
            ms(f.running_for)
        ));
    }
    for k in &q.delayed {
        text.push_str(&format!(
            "  {} due in {} ms (failures: {})\n",
            k.key,
            ms(k.due_in),
            k.failures
        ));
    }
    let now = now_ms();
    for (key, run) in last.iter() {
        let phase = run.detail.phase.map_or("-", |p| p.as_str());
        let detail = match (&run.error, &run.detail.waiting_for) {
            (None, Some(w)) => format!("{phase}, waiting for {w}"),
            _ => phase.to_string(),
        };
        text.push_str(&last_outcome::line("  ", key, &detail, run, now));
    }
    let items: serde_json::Map<String, serde_json::Value> = last
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::to_value(v).unwrap_or_default()))
        .collect();
    View {
        data: json!({"deployer": {"types": d.types(), "queue": queue, "items": items}}),
        text: Some(text),
    }
}
