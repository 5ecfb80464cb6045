//! What touching memory left idle costs on this machine: some VMs' hosts take back or
//! track guest memory that stays untouched for a second or more, and touching it again
//! then costs microseconds per page, with no page fault the guest can count. A bench
//! whose phases follow idle waits (a resync period) prints this beside its ratios.

use std::time::{Duration, Instant};

/// Microseconds per 4 KiB page to write one byte of each page of a 16 MiB buffer: warm
/// (right after a pass over it), then after `idle` untouched.
pub fn page_touch_cost(idle: Duration) -> (f64, f64) {
    const PAGE: usize = 4096;
    let mut buffer = vec![1u8; 16 << 20];
    let pass = |buffer: &mut [u8]| {
        let started = Instant::now();
        for i in (0..buffer.len()).step_by(PAGE) {
            buffer[i] = buffer[i].wrapping_add(1);
        }
        std::hint::black_box(&*buffer);
        started.elapsed().as_secs_f64() * 1e6 / (buffer.len() / PAGE) as f64
    };
    pass(&mut buffer);
    let warm = pass(&mut buffer);
    std::thread::sleep(idle);
    (warm, pass(&mut buffer))
}
