//! A sampling heap profiler, as Go's runtime keeps one: the global allocator counts the
//! bytes each thread allocates and, about once every [`RATE`] bytes (a random, exponential
//! distance, so that every size is sampled in proportion), records the allocation's stack.
//! A sampled block is remembered until it is freed, so the profile says what is held now
//! (`inuse_*`) and what was allocated since sampling began (`alloc_*`).
//!
//! Sampling is off until [`enable`] (bosun turns it on when `--pprof-address` is set); off,
//! the allocator costs one relaxed atomic load per call. On, a free looks at a table of
//! counters first and takes the lock only when the block may be a sampled one.
//!
//! Everything the profiler allocates for itself is allocated with sampling suspended on
//! that thread, and nothing here allocates while it is suspended elsewhere, so the lock is
//! never taken twice by one thread.

// A global allocator and an unwinder: unsafe by nature, kept to this file.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};

use crate::memory::Allocator;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};

/// The mean distance, in bytes, between two sampled allocations (Go's `MemProfileRate`).
pub const RATE: u64 = 512 * 1024;

/// The deepest stack recorded.
const DEPTH: usize = 64;

/// Slots of the "may be sampled" counters a free checks before taking the lock.
const SLOTS: usize = 1 << 16;

// The global allocator's sampler: an allocator is process-wide and has no host to ask.
static ENABLED: AtomicBool = AtomicBool::new(false);

static MAYBE: [AtomicU16; SLOTS] = [const { AtomicU16::new(0) }; SLOTS];

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

thread_local! {
    /// Bytes this thread may still allocate before the next sample (below zero: sample).
    static UNTIL: Cell<i64> = const { Cell::new(i64::MIN) };
    /// Set while this thread is inside the profiler: its own allocations are not sampled.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// The state of this thread's random distances (0: not seeded yet).
    static SEED: Cell<u64> = const { Cell::new(0) };
}

/// Turns sampling on (for good; it is not turned off).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether sampling is on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The global allocator: the system's, with sampling.
pub struct Sampling;

unsafe impl GlobalAlloc for Sampling {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { Allocator.alloc(layout) };
        if enabled() && !p.is_null() {
            allocated(p, layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { Allocator.alloc_zeroed(layout) };
        if enabled() && !p.is_null() {
            allocated(p, layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if enabled() {
            freed(ptr);
        }
        unsafe { Allocator.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if enabled() {
            freed(ptr);
        }
        let p = unsafe { Allocator.realloc(ptr, layout, new_size) };
        if enabled() && !p.is_null() {
            allocated(p, new_size);
        }
        p
    }
}

/// Runs `f` with this thread's allocations left out of the profile: the profiler's own
/// work (resolving stacks keeps the binary's debug information, many megabytes) is not what
/// a profile of bosun should show. Frees of sampled blocks on this thread meanwhile are not
/// seen either, so only the profiler's own code runs here.
pub fn unsampled<T>(f: impl FnOnce() -> T) -> T {
    let entered = INSIDE.try_with(|i| !i.replace(true)).unwrap_or(false);
    let out = f();
    if entered {
        let _ = INSIDE.try_with(|i| i.set(false));
    }
    out
}

/// Runs `f` with this thread's sampling suspended; `None` if it already is (the caller is
/// the profiler itself).
fn inside<T>(f: impl FnOnce() -> T) -> Option<T> {
    let entered = INSIDE.try_with(|i| !i.replace(true)).unwrap_or(false);
    if !entered {
        return None;
    }
    let out = f();
    let _ = INSIDE.try_with(|i| i.set(false));
    Some(out)
}

fn allocated(p: *mut u8, size: usize) {
    let due = UNTIL
        .try_with(|u| {
            // A thread's first allocation draws its first distance.
            let before = match u.get() {
                i64::MIN => next_distance(),
                left => left,
            };
            let left = before - size as i64;
            u.set(left);
            left < 0
        })
        .unwrap_or(false);
    if !due {
        return;
    }
    inside(|| {
        let _ = UNTIL.try_with(|u| u.set(next_distance()));
        let mut frames = [0usize; DEPTH];
        let mut depth = 0;
        // SAFETY: the unsynchronized variant only skips a lock that guards Windows'
        // dbghelp; on Linux the unwinder is thread-safe.
        unsafe {
            backtrace::trace_unsynchronized(|frame| {
                let ip = frame.ip() as usize;
                if ip == 0 {
                    return false;
                }
                frames[depth] = ip;
                depth += 1;
                depth < DEPTH
            });
        }
        let mut table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
        table
            .get_or_insert_with(Table::default)
            .record(p as usize, size, &frames[..depth]);
        MAYBE[slot(p as usize)].fetch_add(1, Ordering::Relaxed);
    });
}

fn freed(p: *mut u8) {
    if MAYBE[slot(p as usize)].load(Ordering::Relaxed) == 0 {
        return;
    }
    inside(|| {
        let mut table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = table.as_mut()
            && t.live.remove(&(p as usize)).is_some()
        {
            MAYBE[slot(p as usize)].fetch_sub(1, Ordering::Relaxed);
        }
    });
}

fn slot(p: usize) -> usize {
    // Blocks are at least 16-byte aligned; mix the rest.
    ((p >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) % SLOTS
}

/// An exponential distance with mean [`RATE`] (xorshift; a thread's first draw is seeded
/// from its stack address).
fn next_distance() -> i64 {
    let mut x = SEED.try_with(Cell::get).unwrap_or(0);
    if x == 0 {
        let local = 0u8;
        x = (&local as *const u8 as u64) | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    let _ = SEED.try_with(|s| s.set(x));
    // A uniform draw in (0, 1].
    let u = ((x >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    (-u.ln() * RATE as f64) as i64
}

/// What has been sampled.
#[derive(Default)]
struct Table {
    /// Sampled blocks not freed yet: address → (size, stack).
    live: HashMap<usize, (usize, u32)>,
    /// Each stack once, with what it allocated in all.
    stacks: Vec<StackStats>,
    index: HashMap<Box<[usize]>, u32>,
}

struct StackStats {
    frames: Box<[usize]>,
    /// Estimated allocations and bytes since sampling began (unsampled, as Go does).
    alloc_objects: f64,
    alloc_bytes: f64,
}

impl Table {
    fn record(&mut self, p: usize, size: usize, frames: &[usize]) {
        let id = match self.index.get(frames) {
            Some(id) => *id,
            None => {
                let id = self.stacks.len() as u32;
                self.stacks.push(StackStats {
                    frames: frames.into(),
                    alloc_objects: 0.0,
                    alloc_bytes: 0.0,
                });
                self.index.insert(frames.into(), id);
                id
            }
        };
        let w = weight(size);
        let s = &mut self.stacks[id as usize];
        s.alloc_objects += w;
        s.alloc_bytes += w * size as f64;
        self.live.insert(p, (size, id));
    }
}

/// How many allocations of `size` one sample stands for: a block of `size` bytes is
/// sampled with probability `1 - exp(-size / RATE)`.
pub fn weight(size: usize) -> f64 {
    let p = 1.0 - (-(size as f64) / RATE as f64).exp();
    if p > 0.0 { 1.0 / p } else { 1.0 }
}

/// One stack's figures, unsampled.
#[derive(Debug, Clone, PartialEq)]
pub struct StackFigures {
    /// Return addresses, innermost first (the sampler's own frames included).
    pub frames: Vec<usize>,
    pub alloc_objects: i64,
    pub alloc_bytes: i64,
    pub inuse_objects: i64,
    pub inuse_bytes: i64,
}

/// What the profiler holds now, per stack (empty while sampling is off).
pub fn snapshot() -> Vec<StackFigures> {
    unsampled(|| {
        let table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
        let Some(t) = table.as_ref() else {
            return Vec::new();
        };
        let mut inuse = vec![(0.0f64, 0.0f64); t.stacks.len()];
        for (size, id) in t.live.values() {
            let w = weight(*size);
            let e = &mut inuse[*id as usize];
            e.0 += w;
            e.1 += w * *size as f64;
        }
        t.stacks
            .iter()
            .zip(inuse)
            .map(|(s, (n, b))| StackFigures {
                frames: s.frames.to_vec(),
                alloc_objects: s.alloc_objects.round() as i64,
                alloc_bytes: s.alloc_bytes.round() as i64,
                inuse_objects: n.round() as i64,
                inuse_bytes: b.round() as i64,
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_stands_for_the_allocations_it_was_drawn_from() {
        // A block far larger than the rate is always sampled: it stands for itself.
        assert!((weight(64 * RATE as usize) - 1.0).abs() < 1e-9);
        // A small block is sampled rarely and stands for many.
        let w = weight(64);
        assert!((w - RATE as f64 / 64.0).abs() / w < 0.01, "{w}");
    }

    #[test]
    fn distances_average_the_rate() {
        let n = 20_000;
        let sum: f64 = (0..n).map(|_| next_distance() as f64).sum();
        let mean = sum / n as f64;
        assert!(
            (mean - RATE as f64).abs() / (RATE as f64) < 0.05,
            "mean distance {mean}"
        );
    }

    #[test]
    fn the_table_keeps_each_stack_once_and_forgets_freed_blocks() {
        let mut t = Table::default();
        t.record(0x1000, 1024, &[1, 2, 3]);
        t.record(0x2000, 1024, &[1, 2, 3]);
        t.record(0x3000, 16, &[4, 5]);
        assert_eq!(t.stacks.len(), 2);
        t.live.remove(&0x1000);
        assert_eq!(t.live.len(), 2);
        assert!((t.stacks[0].alloc_objects - 2.0 * weight(1024)).abs() < 1e-6);
    }
}
