//! The CPU time this process has used, for the benches' CPU per call or per task.

use std::time::Duration;

/// User and system CPU of every thread of this process so far, the threads that ended
/// included (`getrusage(RUSAGE_SELF)`; child processes are not counted).
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage writes the struct it is handed and reads nothing else.
    #[allow(unsafe_code)]
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    let of = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    of(usage.ru_utime) + of(usage.ru_stime)
}
