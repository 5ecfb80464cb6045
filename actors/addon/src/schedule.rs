//! Crontab expressions as shell-operator accepts them, and Go durations.
//!
//! Five fields are `min hour dom month dow` (second 0); six fields put seconds first.
//! Descriptors `@yearly @annually @monthly @weekly @daily @midnight @hourly` and
//! `@every <go duration>` are accepted, optionally after a `TZ=Zone ` prefix; `?` means `*`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bosun_runtime::clock::parse_go_duration;

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

/// What is wrong with one field of a crontab.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
enum FieldError {
    /// A value that is neither a number nor a name.
    #[error("{0:?} is not a number")]
    NotANumber(String),
    /// A step after `/` that is not a number.
    #[error("step {0:?} is not a number")]
    StepNotANumber(String),
    /// `/0`.
    #[error("step must be at least 1")]
    ZeroStep,
    /// A value or range outside the field's limits.
    #[error("{range:?} is outside {min}-{max}")]
    OutOfRange {
        /// The range as written.
        range: String,
        /// The field's lowest value.
        min: u32,
        /// The field's highest value.
        max: u32,
    },
}

fn parse_field(
    field: &str,
    min: u32,
    max: u32,
    names: &[&str],
    name_base: u32,
) -> Result<u64, FieldError> {
    let mut bits = 0u64;
    let value = |s: &str| {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(i as u32 + name_base);
        }
        s.parse::<u32>()
            .map_err(|_| FieldError::NotANumber(s.to_string()))
    };
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .map_err(|_| FieldError::StepNotANumber(s.to_string()))?,
            ),
            None => (part, 1),
        };
        if step == 0 {
            return Err(FieldError::ZeroStep);
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
            return Err(FieldError::OutOfRange {
                range: range.to_string(),
                min,
                max,
            });
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
            let d = parse_go_duration(spec).map_err(|e| err(e.to_string()))?;
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

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's days_from_civil).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (Hinnant's civil_from_days).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // Both in range by construction: d in 1..=31, m in 1..=12.
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Lowest set bit of `bits` at or above `from`.
fn next_bit(bits: u64, from: u32) -> Option<u32> {
    let rest = bits.checked_shr(from)?;
    (rest != 0).then(|| from + rest.trailing_zeros())
}

/// UTC offset in seconds of the zones that need no tz database: UTC aliases and `Etc/GMT±N`
/// (POSIX sign: `Etc/GMT+5` is five hours behind UTC). Anything else evaluates as UTC.
fn fixed_offset(zone: &str) -> i64 {
    let Some(n) = zone.strip_prefix("Etc/GMT") else {
        return 0;
    };
    let hours = match n.strip_prefix('+') {
        Some(h) => h.parse::<i64>().map(|h| -h),
        None => n.strip_prefix('-').unwrap_or("x").parse::<i64>(),
    };
    match hours {
        Ok(h) if (-12..=14).contains(&h) => h * 3600,
        _ => 0,
    }
}

/// Whole seconds since the epoch, rounded down (times before 1970 included).
fn epoch_floor(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            let s = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            -s - i64::from(d.subsec_nanos() > 0)
        }
    }
}

fn from_epoch(secs: i64) -> Option<SystemTime> {
    if secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(secs.unsigned_abs()))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))
    }
}

/// How far ahead [`Crontab::next_after`] looks before giving up (cron.v2 does the same).
const YEARS_AHEAD: i64 = 5;

impl Crontab {
    /// The first fire time strictly after `after`, at a whole second; `None` if nothing matches
    /// within five years (`0 0 30 2 *`).
    ///
    /// Fields are evaluated in UTC, the usual zone of an operator pod, where cron.v2 uses the
    /// process's local zone. A `TZ=` prefix is honoured only for zones with a fixed offset
    /// (UTC aliases, `Etc/GMT±N`); any other zone, e.g. `Europe/Berlin`, is evaluated as UTC
    /// because bosun carries no tz database.
    ///
    /// `@every d` fires at `after + d` minus the sub-second part of `after`, with `d` truncated
    /// to whole seconds and at least one second (cron.v2's rule).
    pub fn next_after(&self, after: SystemTime) -> Option<SystemTime> {
        let base = epoch_floor(after);
        let (seconds, minutes, hours, doms, months, dows, day_or) = match self.spec {
            CronSpec::Every(d) => {
                let step = i64::try_from(d.as_secs().max(1)).ok()?;
                return from_epoch(base.checked_add(step)?);
            }
            CronSpec::Fields {
                seconds,
                minutes,
                hours,
                days_of_month,
                months,
                days_of_week,
                day_or,
            } => (
                seconds,
                minutes,
                hours,
                days_of_month,
                months,
                days_of_week,
                day_or,
            ),
        };
        let offset = self.time_zone.as_deref().map_or(0, fixed_offset);
        let start = base.checked_add(1)?.checked_add(offset)?;
        let (mut y, mut mo, mut d) = civil_from_days(start.div_euclid(86_400));
        let tod = start.rem_euclid(86_400) as u32;
        let (mut h, mut mi, mut s) = (tod / 3600, tod / 60 % 60, tod % 60);
        let limit = y + YEARS_AHEAD;

        // Each step either accepts a field or moves to the start of the next candidate of that
        // field (clearing the smaller ones), so whole months, days and hours are skipped at once.
        macro_rules! carry {
            () => {{
                if s > 59 {
                    s = 0;
                    mi += 1;
                }
                if mi > 59 {
                    mi = 0;
                    h += 1;
                }
                if h > 23 {
                    h = 0;
                    d += 1;
                }
                if d > days_in_month(y, mo) {
                    d = 1;
                    mo += 1;
                }
                if mo > 12 {
                    mo = 1;
                    y += 1;
                }
                continue;
            }};
        }
        loop {
            if y > limit {
                return None;
            }
            if months & (1 << mo) == 0 {
                (d, h, mi, s) = (1, 0, 0, 0);
                match next_bit(months, mo) {
                    Some(m) if m <= 12 => mo = m,
                    _ => mo = 13,
                }
                carry!();
            }
            let weekday = (days_from_civil(y, mo, d) + 4).rem_euclid(7);
            let dom_ok = doms & (1 << d) != 0;
            let dow_ok = dows & (1 << weekday) != 0;
            let day_ok = if day_or {
                dom_ok || dow_ok
            } else {
                dom_ok && dow_ok
            };
            if !day_ok {
                (h, mi, s) = (0, 0, 0);
                d += 1;
                carry!();
            }
            if hours & (1 << h) == 0 {
                (mi, s) = (0, 0);
                h = next_bit(hours, h).unwrap_or(24);
                carry!();
            }
            if minutes & (1 << mi) == 0 {
                s = 0;
                mi = next_bit(minutes, mi).unwrap_or(60);
                carry!();
            }
            if seconds & (1 << s) == 0 {
                s = next_bit(seconds, s).unwrap_or(60);
                carry!();
            }
            let days = days_from_civil(y, mo, d);
            let local = days * 86_400 + i64::from(h * 3600 + mi * 60 + s);
            return from_epoch(local - offset);
        }
    }
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

    /// `YYYY-MM-DD hh:mm:ss` in UTC.
    fn utc(t: SystemTime) -> String {
        let secs = epoch_floor(t);
        let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
        let tod = secs.rem_euclid(86_400);
        format!(
            "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
            tod / 3600,
            tod / 60 % 60,
            tod % 60
        )
    }

    /// The next fire time after `epoch` seconds (plus `millis`), in UTC.
    fn next(crontab: &str, epoch: u64, millis: u64) -> Option<String> {
        let c = Crontab::parse(crontab).expect("valid crontab");
        let after = UNIX_EPOCH + Duration::from_secs(epoch) + Duration::from_millis(millis);
        let t = c.next_after(after)?;
        assert!(t > after, "{crontab}: not strictly after");
        assert_eq!(
            t.duration_since(UNIX_EPOCH).ok().map(|d| d.subsec_nanos()),
            Some(0)
        );
        Some(utc(t))
    }

    #[test]
    fn civil_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2028, 2, 29), 1_835_395_200 / 86_400);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(civil_from_days(1_773_532_800 / 86_400), (2026, 3, 15));
        for z in -800_000..800_000 {
            let (y, m, d) = civil_from_days(z);
            assert!(d <= days_in_month(y, m));
            assert_eq!(days_from_civil(y, m, d), z);
        }
        assert_eq!(fixed_offset("Etc/GMT+5"), -5 * 3600);
        assert_eq!(fixed_offset("Etc/GMT-14"), 14 * 3600);
        assert_eq!(fixed_offset("Etc/GMT+15"), 0);
        assert_eq!(fixed_offset("Europe/Berlin"), 0);
    }

    #[test]
    fn next_every_second_and_minutes() {
        // 1773482850 = 2026-03-14 10:07:30 (Saturday).
        let t = 1_773_482_850;
        let n = |c: &str, e: u64| next(c, e, 0);
        assert_eq!(
            n("*/1 * * * * *", t).as_deref(),
            Some("2026-03-14 10:07:31")
        );
        assert_eq!(
            next("*/1 * * * * *", t, 999).as_deref(),
            Some("2026-03-14 10:07:31")
        );
        assert_eq!(n("*/5 * * * *", t).as_deref(), Some("2026-03-14 10:10:00"));
        // 1773483000 = 10:10:00 itself: strictly after.
        assert_eq!(
            n("*/5 * * * *", 1_773_483_000).as_deref(),
            Some("2026-03-14 10:15:00")
        );
        assert_eq!(n("@hourly", t).as_deref(), Some("2026-03-14 11:00:00"));
        assert_eq!(
            n("30 59 23 * * *", t).as_deref(),
            Some("2026-03-14 23:59:30")
        );
    }

    #[test]
    fn next_daily_across_month_and_leap_day() {
        let n = |e: u64| next("0 0 * * *", e, 0);
        // 2024-01-31 23:59:59
        assert_eq!(n(1_706_745_599).as_deref(), Some("2024-02-01 00:00:00"));
        // 2028-02-28 12:00:00, 2028-02-29 00:00:00
        assert_eq!(n(1_835_352_000).as_deref(), Some("2028-02-29 00:00:00"));
        assert_eq!(n(1_835_395_200).as_deref(), Some("2028-03-01 00:00:00"));
        // 2026-12-31 18:00:00
        assert_eq!(n(1_798_740_000).as_deref(), Some("2027-01-01 00:00:00"));
        assert_eq!(
            next("@yearly", 1_798_740_000, 0).as_deref(),
            Some("2027-01-01 00:00:00")
        );
        // Feb 29 only: from 2026-03-14 the next one is two years on.
        assert_eq!(
            next("0 0 29 2 *", 1_773_482_850, 0).as_deref(),
            Some("2028-02-29 00:00:00")
        );
    }

    #[test]
    fn next_day_of_week_rules() {
        let sat = 1_773_482_850; // 2026-03-14 10:07:30, Saturday
        assert_eq!(
            next("@weekly", sat, 0).as_deref(),
            Some("2026-03-15 00:00:00")
        );
        assert_eq!(
            next("0 9 * * 1-5", sat, 0).as_deref(),
            Some("2026-03-16 09:00:00")
        );
        // Friday 2026-03-20 09:00:00 -> Monday.
        assert_eq!(
            next("0 9 * * 1-5", 1_773_997_200, 0).as_deref(),
            Some("2026-03-23 09:00:00")
        );
        assert_eq!(
            next("0 9 * * mon-fri", sat, 0).as_deref(),
            Some("2026-03-16 09:00:00")
        );
        // Both day fields restricted: the 13th or any Friday.
        let fri13 = |e: u64| next("0 0 13 * 5", e, 0);
        // 2026-03-01 (Sunday) -> Friday 03-06.
        assert_eq!(fri13(1_772_323_200).as_deref(), Some("2026-03-06 00:00:00"));
        // 2026-03-06 -> Friday the 13th.
        assert_eq!(fri13(1_772_755_200).as_deref(), Some("2026-03-13 00:00:00"));
        // 2026-04-10 (Friday) -> Monday the 13th.
        assert_eq!(fri13(1_775_779_200).as_deref(), Some("2026-04-13 00:00:00"));
        // Day of month restricted, day of week `*`: both must match, i.e. just the 13th.
        assert_eq!(
            next("0 0 13 * *", 1_772_323_200, 0).as_deref(),
            Some("2026-03-13 00:00:00")
        );
    }

    #[test]
    fn next_every_and_impossible() {
        let t = 1_773_482_850; // 2026-03-14 10:07:30
        assert_eq!(
            next("@every 1m30s", t, 700).as_deref(),
            Some("2026-03-14 10:09:00")
        );
        assert_eq!(
            next("@every 1500ms", t, 700).as_deref(),
            Some("2026-03-14 10:07:31")
        );
        assert_eq!(
            next("@every 10ms", t, 0).as_deref(),
            Some("2026-03-14 10:07:31")
        );
        assert_eq!(next("0 0 30 2 *", t, 0), None);
        assert_eq!(next("0 0 31 4,6,9,11 *", t, 0), None);
    }

    #[test]
    fn next_time_zones() {
        let t = 1_773_482_850; // 2026-03-14 10:07:30 UTC
        assert_eq!(
            next("TZ=UTC 0 9 * * *", t, 0).as_deref(),
            Some("2026-03-15 09:00:00")
        );
        // 09:00 at UTC+2 is 07:00 UTC; at UTC-5 it is 14:00 UTC.
        assert_eq!(
            next("TZ=Etc/GMT-2 0 9 * * *", t, 0).as_deref(),
            Some("2026-03-15 07:00:00")
        );
        assert_eq!(
            next("CRON_TZ=Etc/GMT+5 0 9 * * *", t, 0).as_deref(),
            Some("2026-03-14 14:00:00")
        );
        // Zones needing a tz database are evaluated as UTC.
        assert_eq!(
            next("TZ=Europe/Berlin 0 9 * * *", t, 0).as_deref(),
            Some("2026-03-15 09:00:00")
        );
    }

    /// Field-skipping agrees with trying every minute.
    #[test]
    fn next_matches_brute_force() {
        let matches = |c: &CronSpec, t: i64| {
            let CronSpec::Fields {
                seconds,
                minutes,
                hours,
                days_of_month,
                months,
                days_of_week,
                day_or,
            } = *c
            else {
                unreachable!()
            };
            let (_, mo, d) = civil_from_days(t.div_euclid(86_400));
            let tod = t.rem_euclid(86_400);
            let wd = (t.div_euclid(86_400) + 4).rem_euclid(7);
            let bit = |bits: u64, v: i64| bits & (1 << v) != 0;
            let (dom, dow) = (bit(days_of_month, d.into()), bit(days_of_week, wd));
            bit(seconds, tod % 60)
                && bit(minutes, tod / 60 % 60)
                && bit(hours, tod / 3600)
                && bit(months, mo.into())
                && if day_or { dom || dow } else { dom && dow }
        };
        for crontab in [
            "*/7 * * * *",
            "5 */5 * * *",
            "0 22-23 * * 0",
            "30 4 1,15 * 3",
            "0 0 31 * *",
            "0 12 29 2 *",
        ] {
            let c = Crontab::parse(crontab).expect("valid crontab");
            for start in [
                1_706_745_599_i64,
                1_835_352_000,
                1_798_740_000,
                1_773_482_850,
            ] {
                let mut t = (start / 60 + 1) * 60;
                while !matches(&c.spec, t) {
                    t += 60;
                }
                let after = UNIX_EPOCH + Duration::from_secs(start.unsigned_abs());
                assert_eq!(
                    c.next_after(after),
                    from_epoch(t),
                    "{crontab} after {start}"
                );
            }
        }
    }
}
