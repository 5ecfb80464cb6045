//! The lambda journal's records as readable lines (`bosun journal lambda`, `bosun explain`).

use bosun_lambda::events::LambdaEvent;

/// One readable line for a lambda journal event.
pub fn line(event: &LambdaEvent) -> String {
    match event {
        LambdaEvent::ControllerStarted {
            kind,
            name,
            generation,
            ..
        } => {
            format!("{kind} {name} started (generation {generation})")
        }
        LambdaEvent::ControllerStopped { kind, name, reason } => {
            format!("{kind} {name} stopped: {reason}")
        }
        LambdaEvent::ControllerRefused { kind, name, error } => {
            format!("{kind} {name} refused: {error}")
        }
        LambdaEvent::Synced {
            controller,
            key,
            hook,
            answer,
            created,
            updated,
            deleted,
            status_written,
            finalized,
        } => {
            let mut parts = Vec::new();
            for (what, list) in [
                ("created", created),
                ("updated", updated),
                ("deleted", deleted),
            ] {
                if !list.is_empty() {
                    parts.push(format!("{what} {}", list.join(", ")));
                }
            }
            if *status_written {
                parts.push("status written".into());
            }
            if *finalized {
                parts.push("finalized".into());
            }
            format!(
                "{controller} {key}: {hook} hook answer {answer} applied: {}",
                if parts.is_empty() {
                    "no change".to_string()
                } else {
                    parts.join("; ")
                }
            )
        }
        LambdaEvent::SyncFailed {
            controller,
            key,
            error,
            retry_in_ms,
            failures,
        } => {
            let nth = if *failures > 1 {
                format!(" (failure {failures} in a row)")
            } else {
                String::new()
            };
            format!("{controller} {key}: sync failed{nth}: {error} (retry in {retry_in_ms} ms)")
        }
    }
}
