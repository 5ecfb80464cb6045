//! The allocator, and giving freed memory back to the system.
//!
//! bosun allocates with mimalloc ([`Allocator`], the global allocator of the binary under
//! the heap profiler's sampling, and of the benchmarks under their counting): every hot
//! path builds and drops JSON trees of many small blocks (a watch event, a hook's request
//! and answer, a sync's parent and children), and with glibc's allocator about a third of
//! such a path's CPU was `malloc` and `free` (their fastbins consolidated at every larger
//! allocation). A lambda controller's first syncs after a restart measured 271–336 µs of
//! CPU per sync with glibc's allocator and 183–236 µs with mimalloc (`cargo bench --bench
//! lambda`, docs/performance.md); after a burst of events the process settled at 135.5 MiB
//! (1.32× its 102.4 MiB before) with glibc's and at 98.8 MiB (1.23× its 80.1 MiB before)
//! with this build (`cargo bench --bench burst`, docs/reliability.md).
//!
//! mimalloc returns the pages it freed to the system on its own, shortly after (its purge
//! delay); every [`EVERY`], [`give_back`] also collects what threads that went quiet left.
//! It is built without transparent huge pages (`no_thp`): with them, a purged page that is
//! touched again is faulted in as a 2 MiB huge page and zeroed whole (the journal's
//! committer spent a sixth of its CPU in `clear_page_erms`), and the process started 22 MiB
//! larger (102 MiB against 80 MiB before a burst).

use std::time::Duration;

/// How often free memory is returned.
pub const EVERY: Duration = Duration::from_secs(10);

/// The global allocator.
pub use mimalloc::MiMalloc as Allocator;

/// Returns the allocator's free pages to the system.
pub fn give_back() {
    // SAFETY: mi_collect only walks the allocator's own free pages; it takes no pointer.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(true);
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
