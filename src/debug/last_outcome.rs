//! The last outcome of a reconciled key (a lambda parent, a DeployItem) as the text views
//! show it: the subsystem's view says what it keeps of it, this adds what every subsystem
//! has — the error, how long ago, the failures in a row and when the key comes back.

use std::fmt::Display;

use bosun_runtime::last_outcome::LastOutcome;
use bosun_runtime::queue::go_duration;

use crate::debug::views::age;

/// `{indent}{key}: {detail}[: error]; {age} ago[; N failures in a row][; next in D]`.
pub fn line<D>(
    indent: &str,
    key: &dyn Display,
    detail: &str,
    last: &LastOutcome<D>,
    now_ms: u64,
) -> String {
    let mut line = format!("{indent}{key}: {detail}");
    if let Some(e) = &last.error {
        line.push_str(&format!(": {e}"));
    }
    line.push_str(&format!("; {} ago", age(last.at_ms, now_ms)));
    if last.failures > 1 {
        line.push_str(&format!("; {} failures in a row", last.failures));
    }
    if let Some(d) = last.retry_in {
        line.push_str(&format!("; next in {}", go_duration(d)));
    }
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn outcome(error: Option<&str>, failures: u32, retry_in: Option<Duration>) -> LastOutcome<()> {
        LastOutcome {
            at_ms: 1_000,
            ok: error.is_none(),
            error: error.map(str::to_string),
            failures,
            retry_in,
            detail: (),
        }
    }

    #[test]
    fn a_line_says_the_shared_parts_after_the_detail() {
        assert_eq!(
            line("  ", &"ns/a", "Succeeded", &outcome(None, 0, None), 3_500),
            "  ns/a: Succeeded; 2.5s ago\n"
        );
        assert_eq!(
            line(
                "    ",
                &"ns/b",
                "failed",
                &outcome(Some("boom"), 3, Some(Duration::from_millis(40))),
                1_000
            ),
            "    ns/b: failed: boom; 0s ago; 3 failures in a row; next in 40ms\n"
        );
    }
}
