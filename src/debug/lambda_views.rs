//! `/lambda/controllers` and the lambda part of `/actors`: each running lambda controller's
//! work queue and the last sync of each parent.

use crate::debug::views::View;

/// Each running lambda controller: its work queue (waiting, delayed with backoff, in
/// flight) and the last sync of each parent.
pub fn lambda_controllers(running: Option<&bosun_lambda::registry::Controllers>) -> View {
    let controllers = running.map(|c| c.views()).unwrap_or_default();
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
        for (key, last) in &c.last_syncs {
            match &last.error {
                Some(e) => text.push_str(&format!("    {key}: failed: {e}\n")),
                None => text.push_str(&format!(
                    "    {key}: {} hook asked {} answered {}: {} planned ({} created, {} updated, {} deleted)\n",
                    last.hook.unwrap_or("no"),
                    last.request.as_deref().unwrap_or("-"),
                    last.answer.as_deref().unwrap_or("-"),
                    last.planned.len(),
                    last.created.len(),
                    last.updated.len(),
                    last.deleted.len()
                )),
            }
        }
    }
    View {
        data: serde_json::json!({"controllers": controllers}),
        text: Some(text),
    }
}
