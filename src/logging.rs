//! Logging set-up from the addon-operator environment: `LOG_TYPE` (text|json|color),
//! `LOG_LEVEL` (debug|info|error…) and `LOG_NO_TIME`.

use tracing_subscriber::EnvFilter;

/// Installs the global `tracing` subscriber. Safe to call more than once.
pub fn init() {
    // LOG_LEVEL is bosun's own level; libraries log warnings and errors only (RUST_LOG,
    // when set, is a full tracing filter and wins).
    let level = std::env::var("LOG_LEVEL")
        .unwrap_or_else(|_| "info".to_string())
        .to_ascii_lowercase();
    let directives = std::env::var("RUST_LOG").unwrap_or_else(|_| {
        format!("warn,bosun={level},bosun_actors={level},bosun_journal={level}")
    });
    let filter = EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new("info"));
    let no_time = std::env::var("LOG_NO_TIME").is_ok_and(|v| v == "true" || v == "1");
    let log_type = std::env::var("LOG_TYPE").unwrap_or_else(|_| "text".to_string());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match (log_type.as_str(), no_time) {
        ("json", true) => builder.json().without_time().try_init(),
        ("json", false) => builder.json().try_init(),
        ("color", true) => builder.with_ansi(true).without_time().try_init(),
        ("color", false) => builder.with_ansi(true).try_init(),
        (_, true) => builder.with_ansi(false).without_time().try_init(),
        (_, false) => builder.with_ansi(false).try_init(),
    };
    let _ = result;
}
