//! `spec.timeout`: a Go duration (`10m`, `1h30m`, `90s`, `1.5h`) or `none`.

use std::time::Duration;

use bosun_runtime::clock::{DurationError, parse_go_duration};

/// How long an item may progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// `none` (or a zero duration): never times out.
    None,
    After(Duration),
}

/// The default of `spec.timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

impl Default for Timeout {
    fn default() -> Self {
        Timeout::After(DEFAULT_TIMEOUT)
    }
}

/// A timeout that is neither a Go duration nor `none`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}, or \"none\"")]
pub struct TimeoutError(#[from] DurationError);

impl Timeout {
    /// Parses `none` or a Go duration.
    pub fn parse(s: &str) -> Result<Timeout, TimeoutError> {
        let s = s.trim();
        if s == "none" {
            return Ok(Timeout::None);
        }
        let d = parse_go_duration(s)?;
        Ok(if d.is_zero() {
            Timeout::None
        } else {
            Timeout::After(d)
        })
    }

    /// The time left after `elapsed` (`None`: no timeout).
    pub fn remaining(self, elapsed: Duration) -> Option<Duration> {
        match self {
            Timeout::None => None,
            Timeout::After(d) => Some(d.saturating_sub(elapsed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations_and_none() {
        let cases: &[(&str, Result<Timeout, ()>)] = &[
            ("10m", Ok(Timeout::After(Duration::from_secs(600)))),
            ("1h30m", Ok(Timeout::After(Duration::from_secs(5400)))),
            ("1.5h", Ok(Timeout::After(Duration::from_secs(5400)))),
            ("90s", Ok(Timeout::After(Duration::from_secs(90)))),
            ("250ms", Ok(Timeout::After(Duration::from_millis(250)))),
            ("none", Ok(Timeout::None)),
            ("0s", Ok(Timeout::None)),
            ("0", Ok(Timeout::None)),
            ("ten minutes", Err(())),
            ("10", Err(())),
            ("-5m", Err(())),
            ("5d", Err(())),
            ("", Err(())),
        ];
        for (input, want) in cases {
            let got = Timeout::parse(input).map_err(|_| ());
            assert_eq!(&got, want, "{input:?}");
        }
    }

    #[test]
    fn the_error_names_the_value() {
        let e = Timeout::parse("5d").unwrap_err().to_string();
        assert!(e.contains("\"5d\"") && e.contains("unknown unit"), "{e}");
    }

    #[test]
    fn remaining_saturates() {
        let t = Timeout::After(Duration::from_secs(10));
        assert_eq!(
            t.remaining(Duration::from_secs(4)),
            Some(Duration::from_secs(6))
        );
        assert_eq!(t.remaining(Duration::from_secs(40)), Some(Duration::ZERO));
        assert_eq!(Timeout::None.remaining(Duration::from_secs(40)), None);
    }
}
