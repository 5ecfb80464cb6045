//! Giving freed memory back to the system. glibc's allocator keeps what a burst of work
//! freed (in each thread's arena, above its trim threshold only at the top of the heap),
//! so a process that handled 20,000 events in a minute would stay at its peak resident
//! size for good. Every [`EVERY`], the allocator is asked to return its free pages
//! (`malloc_trim`): a few milliseconds on one thread, nothing when nothing is free.

use std::time::Duration;

/// How often free memory is returned.
pub const EVERY: Duration = Duration::from_secs(10);

/// Returns the allocator's free pages to the system (glibc); elsewhere, nothing.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointer.
    #[allow(unsafe_code)]
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// Runs [`give_back`] every [`EVERY`] on a blocking thread, for as long as the runtime.
pub fn spawn_trimmer() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if tokio::task::spawn_blocking(give_back).await.is_err() {
                return;
            }
        }
    })
}
