//! Runtime parameters, as shell-operator's and addon-operator's: settings that can change
//! while bosun runs, listed by `bosun config list` (`GET /config/list.<fmt>`) and changed by
//! `bosun config set NAME VALUE [DURATION]` (`POST /config/set`, form fields `name`, `value`,
//! `duration`).
//!
//! A value set with a duration is temporary: when it expires the parameter returns to its
//! previous value. Some values are always temporary — `log.level=debug` reverts after 30
//! minutes unless a duration is given — so a forgotten debug level does not flood the logs.
//!
//! One registry for a run of bosun, made where the run starts (`cli::run`, with the log
//! level's parameter when bosun installed the subscriber) and reached through the host:
//! the subsystems register their parameters on it, the debug endpoints list and set them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

/// How long `log.level=debug` lasts when no duration is given.
pub const DEBUG_LEVEL_DURATION: Duration = Duration::from_secs(30 * 60);

/// Applies a new value; an error is kept as the parameter's `lastError`.
pub type OnChange = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// One runtime parameter.
pub struct Param {
    /// Its name, e.g. `log.level`.
    pub name: &'static str,
    /// What it does.
    pub description: String,
    /// Its value when nothing is set.
    pub default: String,
    /// Checks a value before it is set.
    pub validate: fn(&str) -> Result<(), String>,
    /// How long a value lasts when set without a duration (`None`: until changed).
    pub forced_duration: fn(&str) -> Option<Duration>,
    /// Applies a value.
    pub on_change: OnChange,
}

/// Why a set was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SetError {
    /// No such parameter.
    #[error("unknown runtime parameter {0:?}; see `bosun config list`")]
    Unknown(String),
    /// The value does not fit the parameter.
    #[error("'value' parameter is invalid for {name}: {reason}")]
    Invalid {
        /// The parameter.
        name: String,
        /// What was expected.
        reason: String,
    },
    /// The value was accepted but applying it failed.
    #[error("{name}: {reason}")]
    Apply {
        /// The parameter.
        name: String,
        /// What went wrong.
        reason: String,
    },
}

struct Temporary {
    value: String,
    expires: SystemTime,
}

struct Entry {
    param: Param,
    value: Option<String>,
    temporary: Option<Temporary>,
    last_error: Option<String>,
}

impl Entry {
    fn current(&self) -> &str {
        self.temporary
            .as_ref()
            .map(|t| t.value.as_str())
            .or(self.value.as_deref())
            .unwrap_or(&self.param.default)
    }
}

/// The registry of runtime parameters.
#[derive(Default)]
pub struct RuntimeConfig {
    entries: Mutex<BTreeMap<&'static str, Entry>>,
    /// Wakes the expiry task when a temporary value is set.
    changed: tokio::sync::Notify,
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("params", &self.lock().keys().collect::<Vec<_>>())
            .finish()
    }
}

impl RuntimeConfig {
    /// Adds a parameter; a second registration of the same name is ignored.
    pub fn register(&self, param: Param) {
        let mut entries = self.lock();
        entries.entry(param.name).or_insert(Entry {
            param,
            value: None,
            temporary: None,
            last_error: None,
        });
    }

    /// The current value of a parameter.
    pub fn value(&self, name: &str) -> Option<String> {
        self.lock().get(name).map(|e| e.current().to_string())
    }

    /// Sets a parameter, for `duration` or (when `None` and the value is not forced to be
    /// temporary) until changed again.
    pub fn set(&self, name: &str, value: &str, duration: Option<Duration>) -> Result<(), SetError> {
        let mut entries = self.lock();
        let entry = entries
            .get_mut(name)
            .ok_or_else(|| SetError::Unknown(name.to_string()))?;
        (entry.param.validate)(value).map_err(|reason| SetError::Invalid {
            name: name.to_string(),
            reason,
        })?;
        let duration = duration
            .filter(|d| !d.is_zero())
            .or_else(|| (entry.param.forced_duration)(value));
        match duration {
            Some(d) => {
                entry.temporary = Some(Temporary {
                    value: value.to_string(),
                    expires: SystemTime::now() + d,
                });
                self.changed.notify_one();
            }
            None => {
                entry.temporary = None;
                entry.value = Some(value.to_string());
            }
        }
        tracing::info!(parameter = name, value, expires_in = ?duration, "runtime parameter set");
        let result = (entry.param.on_change)(value);
        entry.last_error = result.as_ref().err().cloned();
        result.map_err(|reason| SetError::Apply {
            name: name.to_string(),
            reason,
        })
    }

    /// Drops temporary values whose time has come and applies what is left; returns when
    /// the next one expires.
    pub fn expire(&self, now: SystemTime) -> Option<SystemTime> {
        let mut entries = self.lock();
        let mut next: Option<SystemTime> = None;
        for (name, entry) in entries.iter_mut() {
            let Some(t) = &entry.temporary else { continue };
            if t.expires > now {
                next = Some(next.map_or(t.expires, |n| n.min(t.expires)));
                continue;
            }
            entry.temporary = None;
            let value = entry.current().to_string();
            tracing::info!(
                parameter = name,
                value,
                "temporary runtime parameter expired"
            );
            entry.last_error = (entry.param.on_change)(&value).err();
        }
        next
    }

    /// Reverts temporary values when they expire, for as long as the process runs.
    pub async fn expire_forever(self: Arc<Self>) {
        loop {
            let notified = self.changed.notified();
            let wait = self
                .expire(SystemTime::now())
                .map(|at| at.duration_since(SystemTime::now()).unwrap_or_default());
            match wait {
                Some(d) => {
                    tokio::select! {
                        _ = tokio::time::sleep(d) => {}
                        _ = notified => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// The `config list` data: every parameter sorted by name, with `name`, `description`,
    /// `default`, `value`, and `expireAt` (RFC 3339) and `lastError` when there are any.
    pub fn list(&self) -> Value {
        let entries = self.lock();
        Value::Array(
            entries
                .values()
                .map(|e| {
                    let mut item = json!({
                        "name": e.param.name,
                        "description": e.param.description,
                        "default": e.param.default,
                        "value": e.current(),
                    });
                    if let Some(t) = &e.temporary {
                        item["expireAt"] =
                            json!(humantime::format_rfc3339_seconds(t.expires).to_string());
                    }
                    if let Some(err) = &e.last_error {
                        item["lastError"] = json!(err);
                    }
                    item
                })
                .collect(),
        )
    }

    /// The `config list` text: the reference's table.
    pub fn text(&self) -> String {
        let mut out = format!(
            "{:<30} {:<20} {:<20} {:<40}\n",
            "NAME", "VALUE", "EXPIRE AT", "DESCRIPTION"
        );
        let list = self.list();
        for p in list.as_array().into_iter().flatten() {
            let field = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
            let description = match p.get("lastError").and_then(Value::as_str) {
                Some(e) => format!("Error: {e}"),
                None => field("description").to_string(),
            };
            out.push_str(&format!(
                "{:<30} {:<20} {:<20} {:<40}\n",
                field("name"),
                field("value"),
                field("expireAt"),
                description
            ));
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Parses a duration as Go's `time.ParseDuration` reads them (`30m`, `1h30m`, `1.5h`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    bosun_runtime::clock::parse_go_duration(text.trim()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn level_param(applied: Arc<Mutex<Vec<String>>>) -> Param {
        Param {
            name: "log.level",
            description: "Global log level".into(),
            default: "info".into(),
            validate: |v| match v {
                "debug" | "info" | "error" => Ok(()),
                _ => Err(format!("{v:?} is not debug, info or error")),
            },
            forced_duration: |v| (v == "debug").then_some(DEBUG_LEVEL_DURATION),
            on_change: Box::new(move |v| {
                applied.lock().map_err(|e| e.to_string())?.push(v.into());
                Ok(())
            }),
        }
    }

    #[test]
    fn set_validates_applies_and_lists() {
        let applied = Arc::new(Mutex::new(Vec::new()));
        let cfg = RuntimeConfig::default();
        cfg.register(level_param(applied.clone()));
        assert_eq!(
            cfg.set("log.levle", "info", None),
            Err(SetError::Unknown("log.levle".into()))
        );
        let err = cfg
            .set("log.level", "loud", None)
            .err()
            .map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains("not debug, info or error"));
        cfg.set("log.level", "error", None).expect("set");
        assert_eq!(cfg.value("log.level").as_deref(), Some("error"));
        let list = cfg.list();
        assert_eq!(list[0]["value"], "error");
        assert_eq!(list[0]["default"], "info");
        assert!(list[0].get("expireAt").is_none());
        assert!(cfg.text().starts_with("NAME "));
        assert!(cfg.text().contains("log.level"));
        assert_eq!(*applied.lock().expect("lock"), vec!["error".to_string()]);
    }

    #[test]
    fn temporary_values_expire_back_to_the_previous_one() {
        let applied = Arc::new(Mutex::new(Vec::new()));
        let cfg = RuntimeConfig::default();
        cfg.register(level_param(applied.clone()));
        cfg.set("log.level", "error", None).expect("set");
        // debug is always temporary.
        cfg.set("log.level", "debug", None).expect("set");
        assert!(cfg.list()[0].get("expireAt").is_some());
        let now = SystemTime::now();
        assert!(cfg.expire(now).is_some(), "not expired yet");
        assert_eq!(cfg.value("log.level").as_deref(), Some("debug"));
        assert_eq!(
            cfg.expire(now + DEBUG_LEVEL_DURATION + Duration::from_secs(1)),
            None
        );
        assert_eq!(cfg.value("log.level").as_deref(), Some("error"));
        assert_eq!(
            *applied.lock().expect("lock"),
            vec!["error".to_string(), "debug".into(), "error".into()]
        );
    }

    #[test]
    fn a_failing_change_is_kept_as_last_error() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let cfg = RuntimeConfig::default();
        cfg.register(Param {
            name: "x",
            description: "d".into(),
            default: "a".into(),
            validate: |_| Ok(()),
            forced_duration: |_| None,
            on_change: Box::new(move |_| {
                seen.fetch_add(1, Ordering::SeqCst);
                Err("cannot".into())
            }),
        });
        assert!(matches!(
            cfg.set("x", "b", None),
            Err(SetError::Apply { .. })
        ));
        assert_eq!(cfg.list()[0]["lastError"], "cannot");
        assert!(cfg.text().contains("Error: cannot"));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn durations_read_like_go() {
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "10", "m", "10 minutes", "-5s", "1x"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
