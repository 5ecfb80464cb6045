//! `/lambda/controllers` and the lambda part of `/actors`: each running lambda controller's
//! work queue and the last sync of each parent.

use bosun_runtime::clock::now_ms;

use crate::debug::last_outcome;
use crate::debug::views::View;

/// Each running lambda controller: its work queue (waiting, delayed with backoff, in
/// flight) and the last sync of each parent.
pub fn lambda_controllers(running: Option<&bosun_lambda::registry::Controllers>) -> View {
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
