//! Logging set-up from the addon-operator environment: `LOG_TYPE` (text|json|color),
//! `LOG_LEVEL` (debug|info|warn|error), `LOG_NO_TIME` and `LOG_PROXY_HOOK_JSON`.
//!
//! The level can change while bosun runs: `bosun config set log.level debug` (the runtime
//! parameter `log.level`, see [`crate::runtime_config`]).

use std::io::Write;

use serde_json::{Map, Value};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, reload};

use crate::runtime_config::{DEBUG_LEVEL_DURATION, Param};

/// The level names `LOG_LEVEL` and `log.level` accept.
const LEVELS: &[&str] = &[
    "trace", "debug", "info", "warn", "warning", "error", "fatal",
];

/// How hooks' output is logged: read once at start (`LOG_NO_TIME`, `LOG_PROXY_HOOK_JSON`,
/// `BOSUN_HOOK_LOG_LIMIT`, the command line's over them), part of the process's
/// configuration (`ProcessConfig::hook_logging`) and handed to each hook run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookLogging {
    /// `LOG_NO_TIME`: no `time` added to a proxied line.
    pub no_time: bool,
    /// `LOG_PROXY_HOOK_JSON`: a line that is a JSON object is passed through as one.
    pub proxy_hook_json: bool,
    /// `BOSUN_HOOK_LOG_LIMIT`: bytes one output stream of one hook run may log (0: no limit).
    pub limit: usize,
}

impl Default for HookLogging {
    fn default() -> Self {
        HookLogging {
            no_time: false,
            proxy_hook_json: false,
            limit: DEFAULT_HOOK_LOG_LIMIT,
        }
    }
}

impl HookLogging {
    /// The command line's settings over the environment's.
    pub fn from_env_and(overrides: &Overrides) -> HookLogging {
        HookLogging {
            no_time: overrides.no_time.unwrap_or_else(|| env_true("LOG_NO_TIME")),
            proxy_hook_json: overrides
                .proxy_hook_json
                .unwrap_or_else(|| env_true("LOG_PROXY_HOOK_JSON")),
            limit: std::env::var("BOSUN_HOOK_LOG_LIMIT")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(DEFAULT_HOOK_LOG_LIMIT),
        }
    }
}

/// What one output stream of one hook run may log by default: a hook printing megabytes
/// (a dump, a loop gone wrong) would otherwise flood the log and its shipping.
pub const DEFAULT_HOOK_LOG_LIMIT: usize = 1024 * 1024;

/// The longest single hook line logged; the rest of a longer one is cut.
const MAX_HOOK_LINE: usize = 64 * 1024;

fn env_true(name: &str) -> bool {
    std::env::var(name)
        .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes"))
}

/// A level name as a number: 0 trace, 1 debug, 2 info, 3 warn, 4 error.
fn rank(level: &str) -> Option<u8> {
    match level.to_ascii_lowercase().as_str() {
        "trace" => Some(0),
        "debug" => Some(1),
        "info" | "" => Some(2),
        "warn" | "warning" => Some(3),
        "error" | "fatal" | "panic" => Some(4),
        _ => None,
    }
}

/// bosun's own crates at `level`; libraries log warnings and errors only.
fn directives(level: &str) -> String {
    let level = match level.to_ascii_lowercase().as_str() {
        "warning" => "warn".to_string(),
        "fatal" => "error".to_string(),
        other => other.to_string(),
    };
    [
        "bosun",
        "bosun_addon",
        "bosun_journal",
        "bosun_runtime",
        "bosun_lambda",
        "bosun_deployer",
        "bosun_sandbox",
        "bosun_platform",
    ]
    .iter()
    .fold("warn".to_string(), |d, c| format!("{d},{c}={level}"))
}

/// What the command line says of logging, over the environment (metacontroller's
/// `--zap-*` flags).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// A level name (`trace` … `error`).
    pub level: Option<String>,
    /// JSON lines (`true`) or text (`false`).
    pub json: Option<bool>,
    /// `LOG_TYPE`'s value (`text`, `json`, `color`), when `json` is not set.
    pub log_type: Option<String>,
    /// `LOG_NO_TIME`.
    pub no_time: Option<bool>,
    /// `LOG_PROXY_HOOK_JSON`.
    pub proxy_hook_json: Option<bool>,
}

/// Installs the global `tracing` subscriber. Safe to call more than once.
pub fn init() {
    init_with(&Overrides::default());
}

/// [`init`], with the command line's settings over `LOG_LEVEL` and `LOG_TYPE`; the
/// subscriber's level, to change while bosun runs (`None`: a subscriber was installed
/// before).
pub fn init_with(overrides: &Overrides) -> Option<LogLevel> {
    let level = overrides
        .level
        .clone()
        .or_else(|| std::env::var("LOG_LEVEL").ok())
        .filter(|l| rank(l).is_some())
        .unwrap_or_else(|| "info".to_string())
        .to_ascii_lowercase();
    // RUST_LOG, when set, is a full tracing filter and wins until log.level is changed.
    let initial = std::env::var("RUST_LOG").unwrap_or_else(|_| directives(&level));
    let filter = EnvFilter::try_new(initial).unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = reload::Layer::new(filter);
    let no_time = HookLogging::from_env_and(overrides).no_time;
    let log_type = match overrides.json {
        Some(true) => "json".to_string(),
        Some(false) => "text".to_string(),
        None => overrides
            .log_type
            .clone()
            .or_else(|| std::env::var("LOG_TYPE").ok())
            .unwrap_or_else(|| "text".to_string()),
    };
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match (log_type.as_str(), no_time) {
        ("json", true) => fmt.json().without_time().boxed(),
        ("json", false) => fmt.json().boxed(),
        ("color", true) => fmt.with_ansi(true).without_time().boxed(),
        ("color", false) => fmt.with_ansi(true).boxed(),
        (_, true) => fmt.with_ansi(false).without_time().boxed(),
        (_, false) => fmt.with_ansi(false).boxed(),
    };
    if tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init()
        .is_err()
    {
        return None;
    }
    Some(LogLevel {
        initial: level,
        handle,
    })
}

/// The installed subscriber's level, as the runtime parameter `log.level` changes it.
pub struct LogLevel {
    initial: String,
    handle: reload::Handle<EnvFilter, tracing_subscriber::Registry>,
}

impl LogLevel {
    /// The runtime parameter `log.level`: the level at start, debug reverting after
    /// [`DEBUG_LEVEL_DURATION`] unless a duration is given.
    pub fn param(&self) -> Param {
        let handle = self.handle.clone();
        Param {
            name: "log.level",
            description: format!(
                "Global log level. Default duration for debug level is {}m",
                DEBUG_LEVEL_DURATION.as_secs() / 60
            ),
            default: self.initial.clone(),
            validate: |v| {
                rank(v)
                    .filter(|_| !v.is_empty())
                    .map(|_| ())
                    .ok_or_else(|| {
                        format!(
                            "{v:?} is not a log level; expected one of {}",
                            LEVELS.join(", ")
                        )
                    })
            },
            forced_duration: |v| {
                v.eq_ignore_ascii_case("debug")
                    .then_some(DEBUG_LEVEL_DURATION)
            },
            on_change: Box::new(move |v| {
                handle
                    .reload(EnvFilter::new(directives(v)))
                    .map_err(|e| format!("cannot change the log level: {e}"))?;
                tracing::info!(value = v, "log level changed");
                Ok(())
            }),
        }
    }
}

/// Where a hook output line came from, for its log fields.
#[derive(Clone, Copy, Debug)]
pub struct HookLine<'a> {
    /// The hook.
    pub hook: &'a str,
    /// Its module, for module hooks.
    pub module: Option<&'a str>,
    /// The binding that ran it.
    pub binding: Option<&'a str>,
    /// The queue it ran in.
    pub queue: Option<&'a str>,
    /// `stdout` or `stderr`.
    pub output: &'static str,
}

/// Logs one line a hook printed. With `LOG_PROXY_HOOK_JSON=true`, a line that is a JSON
/// object is passed through as one JSON log line (whatever `LOG_TYPE` is), with bosun's
/// fields added; its `level` decides whether it is shown. Anything else is logged as text.
fn hook_line(from: HookLine<'_>, line: &str, settings: &HookLogging) {
    if settings.proxy_hook_json
        && let Some(object) = json_object(line)
    {
        proxy_json(from, object, settings);
        return;
    }
    text_line(from, line);
}

/// Logs a hook line as text with the hook's fields.
fn text_line(from: HookLine<'_>, line: &str) {
    tracing::info!(
        hook = from.hook,
        module = from.module,
        binding = from.binding,
        queue = from.queue,
        output = from.output,
        "{line}"
    );
}

/// Most lines one JSON log record may span when a hook pretty-prints it.
const MAX_JSON_LINES: usize = 1000;

/// Logs the lines of one output stream of one hook run. With `LOG_PROXY_HOOK_JSON=true`
/// it joins a JSON object printed over several lines before passing it through.
#[derive(Debug)]
pub struct HookLog {
    hook: String,
    module: Option<String>,
    binding: Option<String>,
    queue: Option<String>,
    output: &'static str,
    pending: Vec<String>,
    /// Bytes logged so far, and what the limit made us drop.
    logged: usize,
    dropped_lines: u64,
    dropped_bytes: u64,
    settings: HookLogging,
}

impl HookLog {
    /// A logger for `output` (`stdout` or `stderr`) of a run of `hook`.
    pub fn new(
        hook: &str,
        module: Option<&str>,
        binding: Option<&str>,
        queue: Option<&str>,
        output: &'static str,
        settings: &HookLogging,
    ) -> Self {
        HookLog {
            hook: hook.to_string(),
            module: module.map(str::to_string),
            binding: binding.map(str::to_string),
            queue: queue.map(str::to_string),
            output,
            pending: Vec::new(),
            logged: 0,
            dropped_lines: 0,
            dropped_bytes: 0,
            settings: settings.clone(),
        }
    }

    /// Counts a line against the limit; `false` when it is dropped.
    fn within_limit(&mut self, line: &mut String) -> bool {
        if line.len() > MAX_HOOK_LINE {
            let mut cut = MAX_HOOK_LINE;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            let rest = line.len() - cut;
            line.truncate(cut);
            line.push_str(&format!(" … ({rest} more bytes of this line not logged)"));
        }
        let limit = self.settings.limit;
        if limit > 0 && self.logged + line.len() > limit {
            self.dropped_lines += 1;
            self.dropped_bytes += line.len() as u64;
            return false;
        }
        self.logged += line.len();
        true
    }

    fn from(&self) -> HookLine<'_> {
        HookLine {
            hook: &self.hook,
            module: self.module.as_deref(),
            binding: self.binding.as_deref(),
            queue: self.queue.as_deref(),
            output: self.output,
        }
    }

    /// Logs a line (or keeps it while a multi-line JSON object is incomplete).
    pub fn line(&mut self, mut line: String) {
        if !self.within_limit(&mut line) {
            return;
        }
        if !self.settings.proxy_hook_json {
            hook_line(self.from(), &line, &self.settings);
            return;
        }
        if self.pending.is_empty() && !line.trim_start().starts_with('{') {
            hook_line(self.from(), &line, &self.settings);
            return;
        }
        self.pending.push(line);
        let joined = self.pending.join("\n");
        match serde_json::from_str::<Value>(&joined) {
            Ok(Value::Object(object)) => {
                self.pending.clear();
                proxy_json(self.from(), object, &self.settings);
            }
            // Incomplete: wait for the rest, within reason.
            Err(e) if e.is_eof() && self.pending.len() < MAX_JSON_LINES => {}
            _ => self.finish(),
        }
    }

    /// Logs what is left as text lines (output ended inside something that is not JSON),
    /// and how much the limit dropped.
    pub fn finish(&mut self) {
        for line in std::mem::take(&mut self.pending) {
            text_line(self.from(), &line);
        }
        if self.dropped_lines > 0 {
            let from = self.from();
            tracing::warn!(
                hook = from.hook,
                module = from.module,
                output = from.output,
                dropped_lines = self.dropped_lines,
                dropped_bytes = self.dropped_bytes,
                limit = self.settings.limit,
                "hook output over the log limit (BOSUN_HOOK_LOG_LIMIT): {} lines ({} bytes) not logged",
                self.dropped_lines,
                self.dropped_bytes
            );
            self.dropped_lines = 0;
            self.dropped_bytes = 0;
        }
    }
}

fn json_object(line: &str) -> Option<Map<String, Value>> {
    let trimmed = line.trim_start();
    if !trimmed.starts_with('{') {
        return None;
    }
    match serde_json::from_str(trimmed) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// The hook's object with bosun's fields: `hook`, `module`, `binding`, `queue`, `output`
/// and `proxyJsonLog: true`; a hook field of the same name is kept as `hook_<name>`.
fn proxied(
    from: HookLine<'_>,
    mut object: Map<String, Value>,
    no_time: bool,
) -> Map<String, Value> {
    let ours = [
        ("hook", Some(from.hook)),
        ("module", from.module),
        ("binding", from.binding),
        ("queue", from.queue),
        ("output", Some(from.output)),
    ];
    for (key, value) in ours {
        let Some(value) = value else { continue };
        if let Some(theirs) = object.insert(key.to_string(), Value::from(value))
            && theirs != value
        {
            object.insert(format!("hook_{key}"), theirs);
        }
    }
    object.insert("proxyJsonLog".into(), Value::Bool(true));
    if !object.contains_key("level") {
        object.insert("level".into(), Value::from("info"));
    }
    if !object.contains_key("time") && !no_time {
        let now = humantime::format_rfc3339_millis(std::time::SystemTime::now());
        object.insert("time".into(), Value::from(now.to_string()));
    }
    object
}

fn proxy_json(from: HookLine<'_>, object: Map<String, Value>, settings: &HookLogging) {
    let level = object
        .get("level")
        .and_then(Value::as_str)
        .unwrap_or("info");
    if !level_enabled(rank(level).unwrap_or(2)) {
        return;
    }
    let mut text = Value::Object(proxied(from, object, settings.no_time)).to_string();
    text.push('\n');
    // One write under the lock, so lines do not interleave with bosun's own.
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Whether bosun's subscriber logs a line of level `rank` (0 trace … 4 error) of bosun's
/// own: what `LOG_LEVEL` or `log.level` set last.
fn level_enabled(rank: u8) -> bool {
    use tracing::Level;
    match rank {
        0 => tracing::enabled!(Level::TRACE),
        1 => tracing::enabled!(Level::DEBUG),
        2 => tracing::enabled!(Level::INFO),
        3 => tracing::enabled!(Level::WARN),
        _ => tracing::enabled!(Level::ERROR),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from() -> HookLine<'static> {
        HookLine {
            hook: "hooks/a.sh",
            module: Some("echo"),
            binding: Some("beforeHelm"),
            queue: Some("main"),
            output: "stdout",
        }
    }

    #[test]
    fn a_proxied_line_keeps_the_hooks_fields_and_adds_bosuns() {
        let object = json_object(r#" {"msg":"hi","level":"warn","hook":"mine","extra":{"a":1}}"#)
            .expect("an object");
        let out = Value::Object(proxied(from(), object, false));
        assert_eq!(out["msg"], "hi");
        assert_eq!(out["level"], "warn");
        assert_eq!(out["extra"]["a"], 1);
        assert_eq!(out["hook"], "hooks/a.sh");
        assert_eq!(out["hook_hook"], "mine");
        assert_eq!(out["module"], "echo");
        assert_eq!(out["binding"], "beforeHelm");
        assert_eq!(out["queue"], "main");
        assert_eq!(out["output"], "stdout");
        assert_eq!(out["proxyJsonLog"], true);
    }

    #[test]
    fn only_json_objects_are_proxied() {
        assert!(json_object("plain text").is_none());
        assert!(json_object("[1,2]").is_none());
        assert!(json_object("{not json").is_none());
        assert!(json_object(r#"{"msg":"x"}"#).is_some());
    }

    #[test]
    fn levels_rank_like_the_reference() {
        assert_eq!(rank("DEBUG"), Some(1));
        assert_eq!(rank("warning"), rank("warn"));
        assert_eq!(rank("fatal"), rank("error"));
        assert_eq!(rank("loud"), None);
        assert_eq!(
            directives("warning"),
            "warn,bosun=warn,bosun_addon=warn,bosun_journal=warn,bosun_runtime=warn,bosun_lambda=warn,bosun_deployer=warn,bosun_sandbox=warn,bosun_platform=warn"
        );
    }
}
