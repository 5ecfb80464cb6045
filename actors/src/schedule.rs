//! Crontab expressions as shell-operator accepts them, and Go durations.
//!
//! Five fields are `min hour dom month dow` (second 0); six fields put seconds first.
//! Descriptors `@yearly @annually @monthly @weekly @daily @midnight @hourly` and
//! `@every <go duration>` are accepted, optionally after a `TZ=Zone ` prefix; `?` means `*`.

use std::time::Duration;

/// A crontab that could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid crontab {crontab:?}: {message}")]
pub struct CrontabError {
    /// The expression.
    pub crontab: String,
    /// What was wrong.
    pub message: String,
}

/// A parsed crontab: a set of allowed values per field, or a fixed interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crontab {
    /// The expression as written (shared schedules are keyed by it).
    pub source: String,
    /// `TZ=` zone, if given.
    pub time_zone: Option<String>,
    /// The schedule.
    pub spec: CronSpec,
}

/// The schedule of a crontab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CronSpec {
    /// Fire when every field matches (bit i set = value i allowed).
    Fields {
        /// Seconds 0–59.
        seconds: u64,
        /// Minutes 0–59.
        minutes: u64,
        /// Hours 0–23.
        hours: u64,
        /// Days of month 1–31.
        days_of_month: u64,
        /// Months 1–12.
        months: u64,
        /// Days of week 0–6 (Sunday = 0).
        days_of_week: u64,
        /// Both day fields restricted: either may match (cron's rule).
        day_or: bool,
    },
    /// `@every <duration>`.
    Every(Duration),
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn parse_field(
    field: &str,
    min: u32,
    max: u32,
    names: &[&str],
    name_base: u32,
) -> Result<u64, String> {
    let mut bits = 0u64;
    let value = |s: &str| -> Result<u32, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(i as u32 + name_base);
        }
        s.parse::<u32>()
            .map_err(|_| format!("{s:?} is not a number"))
    };
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .map_err(|_| format!("step {s:?} is not a number"))?,
            ),
            None => (part, 1),
        };
        if step == 0 {
            return Err("step must be at least 1".into());
        }
        let (lo, hi) = match range {
            "*" | "?" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                None => {
                    let v = value(r)?;
                    (v, if part.contains('/') { max } else { v })
                }
            },
        };
        // Sunday may be written 7.
        let (lo, hi) = if max == 6 && hi == 7 {
            (lo.min(6), 6)
        } else {
            (lo, hi)
        };
        if lo < min || hi > max || lo > hi {
            return Err(format!("{range:?} is outside {min}-{max}"));
        }
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
        if max == 6 && range.split('-').any(|x| x == "7") {
            bits |= 1;
        }
    }
    Ok(bits)
}

impl Crontab {
    /// Parses a crontab.
    pub fn parse(source: &str) -> Result<Crontab, CrontabError> {
        let err = |message: String| CrontabError {
            crontab: source.to_string(),
            message,
        };
        let mut rest = source.trim();
        let mut time_zone = None;
        if let Some(tz) = rest
            .strip_prefix("TZ=")
            .or_else(|| rest.strip_prefix("CRON_TZ="))
        {
            let (zone, after) = tz
                .split_once(' ')
                .ok_or_else(|| err("expected a schedule after the TZ= prefix".into()))?;
            time_zone = Some(zone.to_string());
            rest = after.trim();
        }
        let every = |spec: &str| -> Result<CronSpec, CrontabError> {
            let d = parse_go_duration(spec).map_err(&err)?;
            if d.is_zero() {
                return Err(err("@every needs a positive duration".into()));
            }
            Ok(CronSpec::Every(d))
        };
        let fields: Vec<&str> = match rest {
            "@yearly" | "@annually" => vec!["0", "0", "0", "1", "1", "*"],
            "@monthly" => vec!["0", "0", "0", "1", "*", "*"],
            "@weekly" => vec!["0", "0", "0", "*", "*", "0"],
            "@daily" | "@midnight" => vec!["0", "0", "0", "*", "*", "*"],
            "@hourly" => vec!["0", "0", "*", "*", "*", "*"],
            r if r.starts_with("@every ") => {
                let spec = every(r.trim_start_matches("@every ").trim())?;
                return Ok(Crontab {
                    source: source.to_string(),
                    time_zone,
                    spec,
                });
            }
            r if r.starts_with('@') => return Err(err(format!("unknown descriptor {r:?}"))),
            r => {
                let f: Vec<&str> = r.split_whitespace().collect();
                match f.len() {
                    5 => std::iter::once("0").chain(f).collect(),
                    6 => f,
                    n => {
                        return Err(err(format!(
                            "expected 5 fields (min hour dom month dow) or 6 (sec first), got {n}"
                        )));
                    }
                }
            }
        };
        let names = [
            "second",
            "minute",
            "hour",
            "day of month",
            "month",
            "day of week",
        ];
        let limits: [(u32, u32, &[&str], u32); 6] = [
            (0, 59, &[], 0),
            (0, 59, &[], 0),
            (0, 23, &[], 0),
            (1, 31, &[], 0),
            (1, 12, &MONTHS, 1),
            (0, 6, &DAYS, 0),
        ];
        let mut bits = [0u64; 6];
        for (i, ((f, (lo, hi, n, base)), name)) in fields.iter().zip(limits).zip(names).enumerate()
        {
            bits[i] =
                parse_field(f, lo, hi, n, base).map_err(|m| err(format!("{name} field: {m}")))?;
        }
        let day_or = !fields[3].starts_with('*')
            && !fields[3].starts_with('?')
            && !fields[5].starts_with('*')
            && !fields[5].starts_with('?');
        Ok(Crontab {
            source: source.to_string(),
            time_zone,
            spec: CronSpec::Fields {
                seconds: bits[0],
                minutes: bits[1],
                hours: bits[2],
                days_of_month: bits[3],
                months: bits[4],
                days_of_week: bits[5],
                day_or,
            },
        })
    }
}

/// Parses a Go duration string (`300ms`, `1.5h`, `2h45m`, `10s`).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "{s:?} is not a duration: expected e.g. 30s, 1m30s, 1.5h (units ns, us, ms, s, m, h)"
        )
    };
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return Err(bad());
    }
    let mut total = 0f64;
    let mut rest = s.trim_start_matches('+');
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(bad());
        }
        let n: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += n * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crontabs() {
        for ok in [
            "*/5 * * * *",
            "0 */2 * * * *",
            "0 0 1 jan-mar mon-fri",
            "@daily",
            "@every 1m30s",
            "TZ=UTC 0 0 * * ?",
            "0 0 * * 7",
        ] {
            assert!(Crontab::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "* * * *",
            "61 * * * *",
            "* * * * * * *",
            "@often",
            "@every x",
            "*/0 * * * *",
            "TZ=UTC",
        ] {
            let e = Crontab::parse(bad).unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
        let Ok(Crontab {
            spec: CronSpec::Fields {
                seconds, minutes, ..
            },
            ..
        }) = Crontab::parse("*/20 * * * *")
        else {
            panic!("parse")
        };
        assert_eq!((seconds, minutes), (1, 1 | 1 << 20 | 1 << 40));
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_go_duration("10").is_err());
        assert!(parse_go_duration("1d").is_err());
    }
}
