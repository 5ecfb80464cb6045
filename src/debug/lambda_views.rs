//! `/lambda/controllers` and the lambda part of `/actors` and `/explain`: each running
//! lambda controller's work queue and the last sync of each parent; [`LambdaView`], what
//! the lambda controllers show on the endpoints.

use std::sync::Arc;

use bosun_journal::Journal;
use bosun_lambda::events::LambdaEvent;
use bosun_lambda::registry::Controllers;
use bosun_runtime::clock::now_ms;

use crate::debug::last_outcome;
use crate::debug::views::View;
use crate::explanation::{Explanation, Subject};
use crate::host::{ActorsPart, SubsystemView};

/// The lambda controllers as the endpoints read them (both `None` while they do not run).
#[derive(Clone, Default)]
pub struct LambdaView {
    /// The running controllers.
    pub controllers: Option<Controllers>,
    /// Their journal (`/explain` reads it).
    pub journal: Option<Arc<Journal<LambdaEvent>>>,
}

impl SubsystemView for LambdaView {
    fn page(&self) -> Option<&'static str> {
        Some("/lambda/controllers")
    }

    fn actor_kinds(&self) -> &'static [(&'static str, &'static str)] {
        &[("lambda", "lambda-controller")]
    }

    fn actors(&self) -> Option<ActorsPart> {
        let view = lambda_controllers(self.controllers.as_ref());
        Some(ActorsPart {
            key: "controllers",
            data: view.data["controllers"].clone(),
            text: view.text.unwrap_or_default(),
        })
    }

    fn explain(&self, subject: &Subject, e: &mut Explanation) -> Result<(), String> {
        match &self.journal {
            Some(j) => crate::debug::explain::lambda::explain(j, subject, e)
                .map_err(|err| format!("lambda journal: {err}")),
            None => Ok(()),
        }
    }

    fn now(&self, subject: &Subject, e: &mut Explanation) {
        if let Some(c) = &self.controllers {
            crate::debug::explain::lambda::live(&c.views(), subject, e);
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Each running lambda controller: its work queue (waiting, delayed with backoff, in
/// flight) and the last sync of each parent.
pub fn lambda_controllers(running: Option<&Controllers>) -> View {
    let controllers = running.map(|c| c.views()).unwrap_or_default();
    let now = now_ms();
    let mut text = String::new();
    if !controllers.is_empty() {
        text.push_str("\nLambda controllers:\n");
    }
    for c in &controllers {
        if let Some(why) = &c.refused {
            text.push_str(&format!(
                "  {} {}: refused (retried with backoff): {why}\n",
                c.kind, c.name
            ));
            continue;
        }
        let q = &c.queue;
        let count = |k: &str| q[k].as_array().map_or(0, Vec::len);
        text.push_str(&format!(
            "  {} {}: {} waiting, {} delayed, {} in flight\n",
            c.kind,
            c.name,
            count("waiting"),
            count("delayed"),
            count("inFlight")
        ));
        for f in q["inFlight"].as_array().into_iter().flatten() {
            text.push_str(&format!(
                "    syncing {} for {} ms\n",
                f["key"].as_str().unwrap_or_default(),
                f["runningForMs"]
            ));
        }
        for d in q["delayed"].as_array().into_iter().flatten() {
            text.push_str(&format!(
                "    {} due in {} ms (failures: {})\n",
                d["key"].as_str().unwrap_or_default(),
                d["dueInMs"],
                d["failures"]
            ));
        }
        for (key, last) in c.last_syncs.iter() {
            let d = &last.detail;
            let detail = match &last.error {
                Some(_) => "failed".to_string(),
                None => format!(
                    "{} hook asked {} answered {}: {} planned ({} created, {} updated, {} deleted)",
                    d.hook.unwrap_or("no"),
                    d.request.as_deref().unwrap_or("-"),
                    d.answer.as_deref().unwrap_or("-"),
                    d.planned.len(),
                    d.created.len(),
                    d.updated.len(),
                    d.deleted.len()
                ),
            };
            text.push_str(&last_outcome::line("    ", key, &detail, last, now));
        }
    }
    View {
        data: serde_json::json!({"controllers": controllers}),
        text: Some(text),
    }
}
