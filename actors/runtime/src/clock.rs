//! Wall-clock time as bosun records it (unix milliseconds) and a cheap jitter.

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
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    Duration::from_millis(u64::from(nanos % 1000))
}
