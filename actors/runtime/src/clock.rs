//! Time as bosun reads and writes it: wall-clock unix milliseconds, a cheap jitter, and
//! Go's duration strings (`300ms`, `1m30s`, `1.5h`), which every reference's
//! configuration uses: the one parser of the workspace.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in unix milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A jitter in `0..1000` ms from the clock's sub-second nanoseconds (enough to spread
/// retries; not random in any stronger sense).
pub fn jitter() -> Duration {
    jitter_up_to(Duration::from_secs(1))
}

/// A jitter in `0..cap`, in thousandths of `cap`, from the clock's sub-second
/// nanoseconds (as [`jitter`]).
pub fn jitter_up_to(cap: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    cap.mul_f64(f64::from(nanos % 1000) / 1000.0)
}

/// A string that is not a Go duration, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} is not a duration ({why}): expected e.g. 30s, 1m30s, 1.5h (units ns, us, ms, s, m, h)"
)]
pub struct DurationError {
    /// What was given.
    pub text: String,
    /// What is wrong with it.
    pub why: String,
}

/// Parses a duration as Go's `time.ParseDuration` reads it:
/// `[+]?([0-9]*(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+`, or `0`. Negative durations are refused
/// (callers for which a negative value means something strip the sign first).
pub fn parse_go_duration(text: &str) -> Result<Duration, DurationError> {
    let bad = |why: &str| DurationError {
        text: text.to_string(),
        why: why.to_string(),
    };
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return Err(bad("negative"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("missing unit"))?;
        let (num, tail) = rest.split_at(num_len);
        if num.is_empty() || num == "." {
            return Err(bad("missing number"));
        }
        let value: f64 = num.parse().map_err(|_| bad("bad number"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let nanos = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad(&format!("unknown unit {unit:?}"))),
        };
        total += value * nanos;
        rest = next;
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(bad("too large"));
    }
    Ok(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let ok: &[(&str, Duration)] = &[
            ("1m30s", Duration::from_secs(90)),
            ("1.5h", Duration::from_secs(5400)),
            ("250ms", Duration::from_millis(250)),
            ("+10s", Duration::from_secs(10)),
            ("1h2m3s4ms5us6ns", Duration::new(3723, 4_005_006)),
            ("2µs", Duration::from_micros(2)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
        ];
        for (text, want) in ok {
            assert_eq!(parse_go_duration(text), Ok(*want), "{text}");
        }
        for (text, why) in [
            ("10", "missing unit"),
            ("1d", "unknown unit \"d\""),
            ("-5m", "negative"),
            ("", "empty"),
            ("ms", "missing number"),
            (".s", "missing number"),
        ] {
            let e = parse_go_duration(text).expect_err(text);
            assert_eq!(e.why, why, "{text}");
            assert!(e.to_string().contains("is not a duration"), "{e}");
        }
    }

    #[test]
    fn jitter_stays_below_its_cap() {
        for cap in [
            Duration::ZERO,
            Duration::from_millis(3),
            Duration::from_secs(59),
        ] {
            assert!(jitter_up_to(cap) <= cap);
        }
        assert!(jitter() < Duration::from_secs(1));
    }
}
