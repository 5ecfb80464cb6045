//! Profiles in the format `go tool pprof` reads, at metacontroller's `/debug/pprof/` paths
//! on `--pprof-address`: a CPU profile over a number of seconds (`profile?seconds=N`,
//! sampled 100 times a second), the heap held now (`heap`), what was allocated since start
//! (`allocs`), and the command line (`cmdline`). The answers are gzipped `profile.proto`,
//! as Go's; `heap?debug=1` and `allocs?debug=1` are text.
//!
//! Go's goroutine, thread, block, mutex and trace profiles have no counterpart in a Rust
//! process; they answer 404 naming what is served.

pub mod heap;
pub mod profile;

use std::io::Write as _;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use pprof::protos::Message as _;

/// The longest CPU profile asked for (Go's server has no limit of its own but its write
/// timeout; an hour keeps a mistaken `seconds` from holding the profiler for good).
const MAX_SECONDS: u64 = 3600;

/// The profiles Go serves that are served here, for the index and the 404s.
const SERVED: [(&str, &str); 4] = [
    (
        "allocs",
        "a sampling of all past memory allocations (heap samples, alloc_space first)",
    ),
    ("cmdline", "the command line of this process"),
    (
        "heap",
        "a sampling of the memory held by live objects (one sample per 512 KiB on average)",
    ),
    (
        "profile",
        "a CPU profile; `seconds` (30 unless given) says for how long",
    ),
];

/// The `/debug/pprof/` routes.
pub fn routes() -> Router {
    Router::new()
        .route("/debug/pprof", get(index))
        .route("/debug/pprof/", get(index))
        .route("/debug/pprof/{name}", get(named))
}

async fn index() -> Response {
    let mut html = String::from(
        "<html><head><title>/debug/pprof/</title></head><body>\n<p>/debug/pprof/</p>\n\
         <p>Profiles in the format <code>go tool pprof</code> reads:</p>\n<table>\n",
    );
    for (name, about) in SERVED {
        html.push_str(&format!(
            "<tr><td><a href=\"{name}{}\">{name}</a></td><td>{about}</td></tr>\n",
            if name == "heap" || name == "allocs" {
                "?debug=1"
            } else {
                ""
            }
        ));
    }
    html.push_str("</table>\n</body></html>\n");
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

#[derive(serde::Deserialize, Default)]
struct Params {
    seconds: Option<String>,
    debug: Option<String>,
}

async fn named(Path(name): Path<String>, Query(params): Query<Params>) -> Response {
    match name.as_str() {
        "profile" => cpu(params).await,
        "heap" => heap_answer(params, profile::Default::InuseSpace).await,
        "allocs" => heap_answer(params, profile::Default::AllocSpace).await,
        "cmdline" => {
            let args: Vec<String> = std::env::args().collect();
            (
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                args.join("\0"),
            )
                .into_response()
        }
        other => {
            let names: Vec<&str> = SERVED.iter().map(|(n, _)| *n).collect();
            (
                StatusCode::NOT_FOUND,
                format!(
                    "Unknown profile {other:?}: bosun serves {}\n",
                    names.join(", ")
                ),
            )
                .into_response()
        }
    }
}

fn bad(message: String) -> Response {
    (StatusCode::BAD_REQUEST, message + "\n").into_response()
}

fn failed(message: String) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, message + "\n").into_response()
}

/// `seconds`: whole seconds, 30 unless given (as Go's handler).
fn seconds(given: Option<&str>) -> Result<Duration, String> {
    let Some(v) = given.filter(|v| !v.is_empty()) else {
        return Ok(Duration::from_secs(30));
    };
    match v.parse::<u64>() {
        Ok(n) if (1..=MAX_SECONDS).contains(&n) => Ok(Duration::from_secs(n)),
        _ => Err(format!(
            "seconds={v:?}: expected a whole number of seconds from 1 to {MAX_SECONDS}"
        )),
    }
}

/// `debug`: 0 (the protobuf, the default) or above (text).
fn text_wanted(given: Option<&str>) -> Result<bool, String> {
    match given.filter(|v| !v.is_empty()) {
        None => Ok(false),
        Some(v) => v
            .parse::<u32>()
            .map(|n| n > 0)
            .map_err(|_| format!("debug={v:?}: expected a whole number (0: the protobuf)")),
    }
}

async fn cpu(params: Params) -> Response {
    let duration = match seconds(params.seconds.as_deref()) {
        Ok(d) => d,
        Err(e) => return bad(e),
    };
    // The profiler is process-wide; it samples on a timer signal while this thread waits.
    let profiled = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(100)
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .map_err(|e| format!("could not enable CPU profiling: {e}"))?;
        std::thread::sleep(duration);
        heap::unsampled(|| cpu_body(&guard))
    })
    .await;
    match profiled {
        Ok(Ok(body)) => protobuf_answer("profile", body),
        Ok(Err(e)) => failed(e),
        Err(e) => failed(format!("the CPU profile's task failed: {e}")),
    }
}

/// The CPU profile's body: gzipped `profile.proto`.
fn cpu_body(guard: &pprof::ProfilerGuard<'_>) -> Result<Vec<u8>, String> {
    let report = guard
        .report()
        .build()
        .map_err(|e| format!("could not build the CPU profile: {e}"))?;
    let proto = report
        .pprof()
        .map_err(|e| format!("could not encode the CPU profile: {e}"))?;
    gzip(&proto.encode_to_vec())
}

async fn heap_answer(params: Params, default: profile::Default) -> Response {
    let text = match text_wanted(params.debug.as_deref()) {
        Ok(t) => t,
        Err(e) => return bad(e),
    };
    if !heap::enabled() {
        return failed("heap sampling is off (it starts with --pprof-address)".into());
    }
    // Resolving addresses reads the binary's debug information: not on the runtime's
    // threads, and not in the profile.
    let built = tokio::task::spawn_blocking(move || {
        let body = heap::unsampled(|| heap_body(text, default));
        // The debug information read to resolve the addresses is hundreds of megabytes;
        // kept, every later request would find it parsed, but the process would keep that
        // much more resident for good.
        backtrace::clear_symbol_cache();
        crate::memory::give_back();
        body
    })
    .await;
    let name = match default {
        profile::Default::InuseSpace => "heap",
        profile::Default::AllocSpace => "allocs",
    };
    match built {
        Ok(Ok(body)) if text => {
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
        }
        Ok(Ok(body)) => protobuf_answer(name, body),
        Ok(Err(e)) => failed(e),
        Err(e) => failed(format!("the {name} profile's task failed: {e}")),
    }
}

/// The heap profile's body: Go's text, or gzipped `profile.proto`.
fn heap_body(text: bool, default: profile::Default) -> Result<Vec<u8>, String> {
    let samples = heap::snapshot();
    if text {
        return Ok(profile::heap_text(&samples).into_bytes());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as i64;
    gzip(&profile::heap_profile(&samples, default, now).encode_to_vec())
}

fn protobuf_answer(name: &str, body: Vec<u8>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response()
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(bytes)
        .and_then(|_| z.finish())
        .map_err(|e| format!("could not compress the profile: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_debug_are_read_as_go_reads_them() {
        assert_eq!(seconds(None), Ok(Duration::from_secs(30)));
        assert_eq!(seconds(Some("5")), Ok(Duration::from_secs(5)));
        assert!(seconds(Some("0")).is_err());
        assert!(
            seconds(Some("abc"))
                .unwrap_err()
                .contains("seconds=\"abc\"")
        );
        assert_eq!(text_wanted(None), Ok(false));
        assert_eq!(text_wanted(Some("0")), Ok(false));
        assert_eq!(text_wanted(Some("1")), Ok(true));
        assert!(text_wanted(Some("x")).is_err());
    }
}
