//! Append-only segment files: the journal's default backend, in files bosun owns and checks
//! byte for byte.
//!
//! ```text
//!   <journal>/lock                      held (flock) by the one writer
//!   <journal>/segments/<first seq>.log  frames, appended; a new file past the size limit
//!   <journal>/low-water                 events below it were compacted away
//!   <journal>/snapshots/<seq>.snap      one frame per file  } written to a temporary file,
//!   <journal>/meta/<key>                one frame per file  } fsync'd, renamed, dir fsync'd
//!
//!   frame = len u32 | seq u64 | crc32 u32 (of len, seq and record) | record     (LE)
//! ```
//!
//! Opening scans every segment. Bad bytes at the end of the newest segment with no valid
//! frame after them are a torn tail (a write cut short by a crash): truncated, with a
//! warning naming the file and offset. Bad bytes with valid frames after them, or at the end
//! of an older segment, are damage: kept and reported ([`Storage::damage`]), so a writer
//! refuses to start and readers get an error when they reach them, until
//! [`Storage::repair_damage`] rewrites the file without them (found again by scanning for the
//! next frame with a good checksum). Reads follow a sparse in-memory index (every
//! [`MARK_EVERY`]th frame of each segment) and check every checksum again.
//!
//! The newest segment's file is extended ahead of its last frame, [`EXTEND_BY`] at a time
//! (sparse: nothing is written or allocated): an `fdatasync` after an append that leaves
//! the file's size alone has no size to record and is a fifth to a third faster. Zeros
//! after the last frame, to the end of the file, are that room, not a torn tail; a segment
//! is cut back to its frames when a newer one starts.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::JournalError;
use crate::storage::{Damage, RecordIter, Storage};

/// Bytes before a frame's record.
const FRAME_HEADER: usize = 16;
/// A larger length field is damage, not a record.
const MAX_RECORD: u32 = 1 << 30;
/// One index mark per this many frames of a segment.
pub(crate) const MARK_EVERY: usize = 64;
/// How far ahead of its frames the newest segment's file is extended.
pub const EXTEND_BY: u64 = 1 << 20;
/// Bytes read at a time while scanning.
const WINDOW: usize = 1 << 20;
/// After compaction moved the low-water mark into the newest segment, the next append starts
/// a new segment once that one holds this much, so the next compaction can delete it whole.
const ROLL_AFTER_COMPACTION: u64 = 1 << 20;

/// Tunables of [`SegmentStorage`].
#[derive(Clone, Debug)]
pub struct SegmentOptions {
    /// A segment past this size is closed and appends go to a new one.
    pub segment_bytes: u64,
}

impl Default for SegmentOptions {
    fn default() -> Self {
        SegmentOptions {
            segment_bytes: 64 * 1024 * 1024,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Encodes one frame.
fn frame(seq: u64, record: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&(record.len() as u32).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(record);
    let mut h = crc32fast::Hasher::new();
    h.update(&out[start..start + 12]);
    h.update(&out[start + FRAME_HEADER..]);
    let crc = h.finalize();
    out[start + 12..start + 16].copy_from_slice(&crc.to_le_bytes());
}

/// Reads a file through a window, for sequential scans with short jumps.
struct Window {
    file: Arc<File>,
    len: u64,
    buf: Vec<u8>,
    at: u64,
}

impl Window {
    fn new(file: Arc<File>, len: u64) -> Window {
        Window {
            file,
            len,
            buf: Vec::new(),
            at: 0,
        }
    }

    /// `n` bytes at `off`, or `None` when the file ends first.
    fn get(&mut self, off: u64, n: usize) -> std::io::Result<Option<&[u8]>> {
        let end = off.saturating_add(n as u64);
        if end > self.len {
            return Ok(None);
        }
        if off < self.at || end > self.at + self.buf.len() as u64 {
            let want = (n.max(WINDOW) as u64).min(self.len - off) as usize;
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, off)?;
            self.at = off;
        }
        let s = (off - self.at) as usize;
        Ok(Some(&self.buf[s..s + n]))
    }
}

/// What is at an offset of a segment.
enum Frame<'a> {
    Good { seq: u64, record: &'a [u8] },
    Bad(String),
}

impl Frame<'_> {
    fn size(record: &[u8]) -> u64 {
        (FRAME_HEADER + record.len()) as u64
    }
}

fn frame_at(w: &mut Window, off: u64) -> std::io::Result<Frame<'_>> {
    let left = w.len.saturating_sub(off);
    let Some(h) = w.get(off, FRAME_HEADER)? else {
        return Ok(Frame::Bad(format!(
            "incomplete frame header ({left} bytes before the end of the file)"
        )));
    };
    let mut header = [0u8; FRAME_HEADER];
    header.copy_from_slice(h);
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let mut s = [0u8; 8];
    s.copy_from_slice(&header[4..12]);
    let seq = u64::from_le_bytes(s);
    let crc = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
    if len > MAX_RECORD {
        return Ok(Frame::Bad(format!("frame length {len} is out of range")));
    }
    let Some(all) = w.get(off, FRAME_HEADER + len as usize)? else {
        return Ok(Frame::Bad(format!(
            "frame of {len} bytes runs past the end of the file ({left} bytes left)"
        )));
    };
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&all[..12]);
    hasher.update(&all[FRAME_HEADER..]);
    if hasher.finalize() != crc {
        return Ok(Frame::Bad("checksum mismatch".into()));
    }
    Ok(Frame::Good {
        seq,
        record: &all[FRAME_HEADER..],
    })
}

/// The next offset after `from` holding a good frame with a sequence above `after`.
fn resync(w: &mut Window, from: u64, after: Option<u64>) -> std::io::Result<Option<(u64, u64)>> {
    let mut off = from;
    while off + FRAME_HEADER as u64 <= w.len {
        // Cheap test first: a plausible sequence number (damage rarely swallows a million
        // records), so garbage lengths do not make every offset read megabytes.
        if let (Some(a), Some(h)) = (after, w.get(off, FRAME_HEADER)?) {
            let mut s = [0u8; 8];
            s.copy_from_slice(&h[4..12]);
            let seq = u64::from_le_bytes(s);
            if seq <= a || seq - a > 1 << 20 {
                off += 1;
                continue;
            }
        }
        if let Frame::Good { seq, .. } = frame_at(w, off)?
            && after.is_none_or(|a| seq > a)
        {
            return Ok(Some((off, seq)));
        }
        off += 1;
    }
    Ok(None)
}

/// Whether every byte from `off` to the end of the file is zero.
fn zeros_to_end(w: &mut Window, off: u64) -> std::io::Result<bool> {
    let mut at = off;
    while at < w.len {
        let n = (w.len - at).min(WINDOW as u64) as usize;
        match w.get(at, n)? {
            Some(bytes) if bytes.iter().all(|b| *b == 0) => at += n as u64,
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// One segment file as scanned.
struct Segment {
    /// The sequence of the first record written to it (its name).
    first: u64,
    path: PathBuf,
    file: Arc<File>,
    /// Bytes that belong to it (a torn tail excluded).
    len: u64,
    /// Bytes known to be on disk (the newest segment; older ones are all durable).
    durable: u64,
    /// The file's size: `len` plus room made ahead of the frames (zeros).
    size: u64,
    /// Good frames.
    count: usize,
    last_seq: Option<u64>,
    /// `(seq, offset)` of every [`MARK_EVERY`]th good frame, the first included.
    marks: Vec<(u64, u64)>,
    /// Damaged byte ranges, in file order.
    damage: Vec<Damage>,
}

/// What a scan found at the end of a segment with no good frame after it.
struct Tail {
    offset: u64,
    reason: String,
    /// It starts with a whole frame whose checksum holds but whose sequence does not follow:
    /// copied or misplaced records, never what a crash leaves.
    misplaced: bool,
}

/// Scans a segment; `prev` is the last good sequence before it.
fn scan(
    path: &Path,
    file: Arc<File>,
    first: u64,
    prev: Option<u64>,
) -> std::io::Result<(Segment, Option<Tail>)> {
    let len = file.metadata()?.len();
    let mut w = Window::new(file.clone(), len);
    let mut seg = Segment {
        first,
        path: path.to_path_buf(),
        file,
        len,
        durable: len,
        size: len,
        count: 0,
        last_seq: None,
        marks: Vec::new(),
        damage: Vec::new(),
    };
    let mut prev = prev;
    let mut off = 0u64;
    while off < len {
        let mut misplaced = false;
        let reason = match frame_at(&mut w, off)? {
            Frame::Good { seq, record } if prev.is_none_or(|p| seq > p) => {
                if seg.count.is_multiple_of(MARK_EVERY) {
                    seg.marks.push((seq, off));
                }
                seg.count += 1;
                seg.last_seq = Some(seq);
                prev = Some(seq);
                off += Frame::size(record);
                continue;
            }
            Frame::Good { seq, .. } => {
                misplaced = true;
                format!(
                    "record {seq} is out of order (after {})",
                    prev.unwrap_or_default()
                )
            }
            Frame::Bad(reason) => reason,
        };
        if zeros_to_end(&mut w, off)? {
            // The room made ahead of the frames: the clean end.
            seg.len = off;
            seg.durable = off;
            return Ok((seg, None));
        }
        let lost_from = seg
            .last_seq
            .map_or(first, |s| s + 1)
            .max(prev.map_or(0, |p| p + 1));
        match resync(&mut w, off + 1, prev)? {
            Some((next_off, next_seq)) => {
                seg.damage.push(Damage {
                    file: path.to_path_buf(),
                    offset: off,
                    end: next_off,
                    records: (lost_from < next_seq).then(|| (lost_from, next_seq - 1)),
                    reason,
                    next_seq: Some(next_seq),
                });
                off = next_off;
            }
            None => {
                seg.len = off;
                seg.durable = off;
                return Ok((
                    seg,
                    Some(Tail {
                        offset: off,
                        reason,
                        misplaced,
                    }),
                ));
            }
        }
    }
    Ok((seg, None))
}

impl Segment {
    /// Calls `f` with every good frame from `start` on (damaged ranges skipped), while it
    /// returns true.
    fn walk(
        &self,
        start: u64,
        mut f: impl FnMut(u64, u64, &[u8]) -> bool,
    ) -> Result<(), JournalError> {
        let mut w = Window::new(self.file.clone(), self.len);
        let mut off = start;
        while off < self.len {
            if let Some(d) = self.damage.iter().find(|d| d.offset == off) {
                off = d.end;
                continue;
            }
            match frame_at(&mut w, off).map_err(io_err(&self.path))? {
                Frame::Good { seq, record } => {
                    let size = Frame::size(record);
                    if !f(seq, off, record) {
                        return Ok(());
                    }
                    off += size;
                }
                Frame::Bad(reason) => {
                    return Err(JournalError::Damaged {
                        file: self.path.clone(),
                        offset: off,
                        records: None,
                        reason: format!("{reason} (changed since it was opened)"),
                    });
                }
            }
        }
        Ok(())
    }

    /// The offset of the mark at or before `seq`.
    fn mark_before(&self, seq: u64) -> u64 {
        let i = self.marks.partition_point(|(s, _)| *s <= seq);
        if i == 0 { 0 } else { self.marks[i - 1].1 }
    }

    /// Every good frame as `(seq, record)`.
    fn records(&self) -> Result<Vec<(u64, Vec<u8>)>, JournalError> {
        let mut all = Vec::with_capacity(self.count);
        self.walk(0, |seq, _, r| {
            all.push((seq, r.to_vec()));
            true
        })?;
        Ok(all)
    }
}

/// The file a journal that cannot write tries the disk with, and its size.
const PROBE_FILE: &str = "probe.tmp";
const PROBE_BYTES: usize = 256 * 1024;

/// Damage that matters: not among events compacted away (below the low-water mark).
fn live_damage(damage: &[Damage], low_water: u64) -> Vec<Damage> {
    damage
        .iter()
        .filter(|d| d.next_seq.is_none_or(|n| n > low_water))
        .cloned()
        .collect()
}

/// The file naming the sequence ranges `repair` declared lost (`[[first, last], …]`):
/// records there are known to be gone and do not stop the journal from opening.
const ACCEPTED_GAPS: &str = "gaps";

fn read_accepted_gaps(dir: &Path) -> Vec<(u64, u64)> {
    read_frame_file(&dir.join(ACCEPTED_GAPS))
        .ok()
        .and_then(|(_, bytes)| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// The first good record of the segments.
fn first_live_seq(segments: &[Segment]) -> Option<u64> {
    segments.iter().find_map(|s| {
        let mut first = None;
        let _ = s.walk(0, |seq, _, _| {
            first = Some(seq);
            false
        });
        first
    })
}

/// Records that no file holds, not declared lost by `repair`: before the first segment
/// (from the low-water mark, or from 1 in a journal never compacted), and between two
/// segments (a segment file deleted). Also events compacted into snapshots of which none
/// can be read: the state they made is gone.
fn missing_records(
    dir: &Path,
    segments: &[Segment],
    low_water: u64,
    accepted: &[(u64, u64)],
) -> Vec<Damage> {
    let accepted_covers = |a: u64, b: u64| accepted.iter().any(|(x, y)| *x <= a && b <= *y);
    let snapshots: Vec<(u64, bool)> = std::fs::read_dir(dir.join("snapshots"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let seq = parse_name(&e.file_name().to_string_lossy(), ".snap")?;
            let readable = matches!(read_frame_file(&e.path()), Ok((s, _)) if s == seq);
            Some((seq, readable))
        })
        .collect();
    let mut found = Vec::new();
    let firsts: Vec<(usize, u64)> = segments
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let mut first = None;
            let _ = s.walk(0, |seq, _, _| {
                first = Some(seq);
                false
            });
            first.map(|f| (i, f))
        })
        .collect();
    if let Some(&(i, first)) = firsts.first() {
        let expected = low_water.max(1);
        // A standby started over from its leader's snapshot: its events begin after it.
        let replaced = low_water == 0
            && snapshots
                .iter()
                .map(|(s, _)| *s)
                .min()
                .is_some_and(|s| s + 1 >= first);
        if first > expected && !replaced && !accepted_covers(expected, first - 1) {
            found.push(Damage {
                file: segments[i].path.clone(),
                offset: 0,
                end: 0,
                records: Some((expected, first - 1)),
                reason: "no segment file holds the records before this one (a segment was deleted or lost)".into(),
                next_seq: Some(first),
            });
        }
    }
    for pair in firsts.windows(2) {
        let (prev_i, _) = pair[0];
        let (i, first) = pair[1];
        // The last record before this segment, in-segment damage counted as held.
        let before = segments[prev_i..i]
            .iter()
            .filter_map(|s| {
                let lost = s
                    .damage
                    .iter()
                    .filter_map(|d| d.records.map(|(_, b)| b))
                    .max();
                s.last_seq.max(lost)
            })
            .max();
        let Some(before) = before else { continue };
        if before + 1 < first && !accepted_covers(before + 1, first - 1) {
            found.push(Damage {
                file: segments[i].path.clone(),
                offset: 0,
                end: 0,
                records: Some((before + 1, first - 1)),
                reason: "no segment file holds these records (a segment between two others was deleted or lost)".into(),
                next_seq: Some(first),
            });
        }
    }
    // Compacted events live on only in the snapshots.
    let covered = low_water.saturating_sub(1);
    if covered > 0
        && !snapshots.iter().any(|(s, ok)| *ok && *s >= covered)
        && !accepted_covers(1, covered)
    {
        found.push(Damage {
            file: dir.join("snapshots"),
            offset: 0,
            end: 0,
            records: Some((1, covered)),
            reason: format!(
                "records 1..={covered} were compacted into snapshots and no snapshot at or after {covered} can be read: the state they made would be lost"
            ),
            next_seq: Some(low_water),
        });
    }
    found
}

/// The first record not below the low-water mark.
fn first_live(st: &State) -> Result<Option<u64>, JournalError> {
    locate(st, st.low_water).map(|found| {
        found.and_then(|(i, off)| {
            let mut seq = None;
            let _ = st.segments[i].walk(off, |s, _, _| {
                seq = Some(s);
                false
            });
            seq
        })
    })
}

/// `(segment, offset)` of the first record at or above `seq`.
fn locate(st: &State, seq: u64) -> Result<Option<(usize, u64)>, JournalError> {
    let from = SegmentStorage::segment_for(st, seq);
    for (i, seg) in st.segments.iter().enumerate().skip(from) {
        if seg.last_seq.is_none_or(|l| l < seq) {
            continue;
        }
        let mut found = None;
        seg.walk(seg.mark_before(seq), |s, off, _| {
            if s >= seq {
                found = Some(off);
                false
            } else {
                true
            }
        })?;
        if let Some(off) = found {
            return Ok(Some((i, off)));
        }
    }
    Ok(None)
}

/// The writer's and readers' view of the files.
struct State {
    segments: Vec<Segment>,
    low_water: u64,
    roll_next: bool,
    /// The segments folder gained or lost a file since it was last fsync'd.
    dir_dirty: bool,
    /// What is wrong with the set of files rather than inside one: stray files, records
    /// no segment holds, an unreadable low-water mark or snapshots ([`missing_records`]).
    structure: Vec<Damage>,
}

impl State {
    fn last_seq(&self) -> Option<u64> {
        self.segments.iter().rev().find_map(|s| s.last_seq)
    }
}

/// Append-only segment-file storage (see the module docs).
pub struct SegmentStorage {
    dir: PathBuf,
    segments_dir: PathBuf,
    writable: bool,
    options: SegmentOptions,
    state: Mutex<State>,
    _lock: Option<File>,
}

/// A file among the segments that is not one of them (`repair` puts it aside).
fn stray(file: PathBuf, len: u64, reason: String) -> Damage {
    Damage {
        file,
        offset: 0,
        end: len,
        records: None,
        reason,
        next_seq: None,
    }
}

/// The sequence of a segment file's first frame, when that frame is whole.
fn first_frame_seq(path: &Path) -> std::io::Result<Option<u64>> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut w = Window::new(Arc::new(file), len);
    Ok(match frame_at(&mut w, 0)? {
        Frame::Good { seq, .. } => Some(seq),
        Frame::Bad(_) => None,
    })
}

/// The sequence of the newest snapshot file, by its name.
fn newest_snapshot_name(dir: &Path) -> Option<u64> {
    std::fs::read_dir(dir.join("snapshots"))
        .ok()?
        .flatten()
        .filter_map(|e| parse_name(&e.file_name().to_string_lossy(), ".snap"))
        .max()
}

fn segment_name(first: u64) -> String {
    format!("{first:020}.log")
}

fn parse_name(name: &str, ext: &str) -> Option<u64> {
    let stem = name.strip_suffix(ext)?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

fn sync_dir(dir: &Path) -> Result<(), JournalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Writes `bytes` as `dir/name`: a temporary file, fsync'd, renamed, the folder fsync'd.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), JournalError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let target = dir.join(name);
    let result = write_synced(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, &target));
    if let Err(source) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(JournalError::Io {
            path: target,
            source,
        });
    }
    sync_dir(dir)
}

/// Writes `bytes` to a new `0600` file at `path` (replacing one there) and fsyncs it.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Reads a file written by [`write_atomically`]: `(seq, record)`, or why it is unusable.
fn read_frame_file(path: &Path) -> Result<(u64, Vec<u8>), String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let file_len = bytes.len() as u64;
    let mut w = Window {
        file: Arc::new(File::open(path).map_err(|e| e.to_string())?),
        len: file_len,
        buf: bytes,
        at: 0,
    };
    match frame_at(&mut w, 0).map_err(|e| e.to_string())? {
        Frame::Good { seq, record } if Frame::size(record) == file_len => {
            Ok((seq, record.to_vec()))
        }
        Frame::Good { record, .. } => Err(format!(
            "{} bytes after the frame",
            file_len - Frame::size(record)
        )),
        Frame::Bad(reason) => Err(reason),
    }
}

impl SegmentStorage {
    /// Whether `dir` holds a segment journal.
    pub fn is_in(dir: &Path) -> bool {
        dir.join("segments").is_dir()
    }

    /// Opens (creating if needed) segment storage in `dir` for writing: takes the lock,
    /// truncates a torn tail.
    pub fn open(dir: &Path, options: SegmentOptions) -> Result<SegmentStorage, JournalError> {
        let segments_dir = dir.join("segments");
        let created = !segments_dir.exists();
        for sub in ["segments", "snapshots", "meta"] {
            bosun_platform::create_private_dir(&dir.join(sub)).map_err(io_err(dir))?;
        }
        if created {
            sync_dir(dir)?;
        }
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join("lock"))
            .map_err(io_err(dir))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(JournalError::Locked {
                    path: dir.to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(JournalError::Io {
                    path: dir.join("lock"),
                    source,
                });
            }
        }
        // Leftovers of a write a crash interrupted.
        for sub in ["segments", "snapshots", "meta"] {
            let d = dir.join(sub);
            for entry in std::fs::read_dir(&d).map_err(io_err(&d))?.flatten() {
                if entry.file_name().to_string_lossy().ends_with(".tmp") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let _ = std::fs::remove_file(dir.join("low-water.tmp"));
        Self::load(dir, options, true, Some(lock))
    }

    /// Like [`SegmentStorage::open`], retrying for a second while the lock is held: a
    /// handle closed a moment ago may still be shared with a child process this one is
    /// starting (between its fork and exec).
    pub fn open_for_writing(
        dir: &Path,
        options: SegmentOptions,
    ) -> Result<SegmentStorage, JournalError> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match Self::open(dir, options.clone()) {
                Err(JournalError::Locked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    /// Opens segment storage for reading only: no lock (a running bosun may hold it), no
    /// changes; a torn tail is skipped, not truncated.
    pub fn open_read_only(dir: &Path) -> Result<SegmentStorage, JournalError> {
        // A compaction may delete a segment between listing and opening it.
        let mut tries = 0;
        loop {
            match Self::load(dir, SegmentOptions::default(), false, None) {
                Err(JournalError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && tries < 3 =>
                {
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    fn load(
        dir: &Path,
        options: SegmentOptions,
        writable: bool,
        lock: Option<File>,
    ) -> Result<SegmentStorage, JournalError> {
        let segments_dir = dir.join("segments");
        let mut structure = Vec::new();
        let low_water = match read_frame_file(&dir.join("low-water")) {
            Ok((seq, _)) => seq,
            Err(_) if !dir.join("low-water").exists() => 0,
            Err(reason) => {
                // Only compacted events can come back; replay starts at a snapshot after them.
                tracing::warn!(
                    file = %dir.join("low-water").display(),
                    "journal low-water mark unreadable ({reason}); events compacted away may show again"
                );
                structure.push(Damage {
                    file: dir.join("low-water"),
                    offset: 0,
                    end: 0,
                    records: None,
                    reason: format!("the low-water mark is unreadable ({reason})"),
                    next_seq: None,
                });
                0
            }
        };
        let accepted = read_accepted_gaps(dir);
        let mut names: Vec<(u64, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(&segments_dir)
            .map_err(io_err(&segments_dir))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().to_string();
            let is_file = e.file_type().is_ok_and(|t| t.is_file());
            match parse_name(&name, ".log") {
                Some(first) if is_file => names.push((first, e.path())),
                _ => structure.push(stray(
                    e.path(),
                    e.metadata().map_or(0, |m| m.len()),
                    if is_file {
                        "not a segment file (segments are named <20-digit first sequence>.log)"
                            .into()
                    } else {
                        "not a segment file but a folder or a link (segments are regular files)"
                            .into()
                    },
                )),
            }
        }
        names.sort();
        // Files named like segments that hold other records than their names say: a copy
        // or a renamed file, never what the writer leaves. They are left out of the
        // journal (and `repair` puts them aside), so that they can neither be read as
        // records nor be deleted as compacted.
        let mut firsts = Vec::with_capacity(names.len());
        for (_, path) in &names {
            firsts.push(first_frame_seq(path).map_err(io_err(path))?);
        }
        let mut i = 0;
        while i < names.len() {
            let (named, next) = (names[i].0, names.get(i + 1).map(|n| n.0));
            let wrong = match firsts[i] {
                Some(seq) if next.is_some_and(|n| seq >= n) => Some(format!(
                    "it holds record {seq}, which belongs to a later segment (the next is named {:020}.log): a copy or a renamed file",
                    next.unwrap_or_default()
                )),
                Some(seq) if i > 0 && seq < named => Some(format!(
                    "it holds record {seq}, before the record {named} its name says it starts at: a copy or a renamed file"
                )),
                _ => None,
            };
            match wrong {
                Some(reason) => {
                    let (_, path) = names.remove(i);
                    firsts.remove(i);
                    let len = std::fs::metadata(&path).map_or(0, |m| m.len());
                    structure.push(stray(path, len, reason));
                }
                None => i += 1,
            }
        }
        let mut dir_dirty = false;
        if writable {
            // Segments wholly below the low-water mark: a compaction stopped before deleting them.
            while names.len() > 1 && names[1].0 <= low_water {
                let (_, path) = names.remove(0);
                std::fs::remove_file(&path).map_err(io_err(&path))?;
                dir_dirty = true;
            }
        }
        let mut segments: Vec<Segment> = Vec::with_capacity(names.len());
        let count = names.len();
        for (i, (first, path)) in names.iter().enumerate() {
            let file = OpenOptions::new()
                .read(true)
                .write(writable)
                .open(path)
                .map_err(io_err(path))?;
            let prev = segments.iter().rev().find_map(|s| s.last_seq);
            let (mut seg, tail) = scan(path, Arc::new(file), *first, prev).map_err(io_err(path))?;
            if i + 1 == count && seg.count == 0 {
                // The newest segment holds no record: the writer names a new segment after
                // the record before it, so a name further on is somebody else's file (cut as
                // a torn tail, it would be written into under the wrong name forever).
                let end = segments
                    .iter()
                    .flat_map(|s| {
                        s.damage
                            .iter()
                            .filter_map(|d| d.records.map(|(_, b)| b))
                            .chain(s.last_seq)
                    })
                    .chain([low_water])
                    .chain(newest_snapshot_name(dir))
                    .chain(accepted.iter().map(|(_, b)| *b))
                    .max()
                    .unwrap_or(0);
                if *first > end + 1 {
                    let len = seg.file.metadata().map_or(0, |m| m.len());
                    structure.push(stray(
                        path.clone(),
                        len,
                        format!(
                            "named for record {first}, but the journal's records end at {end} and this file holds none: not a segment the journal wrote"
                        ),
                    ));
                    continue;
                }
            }
            if let Some(tail) = tail {
                if i + 1 == count && !tail.misplaced {
                    if writable {
                        tracing::warn!(
                            file = %path.display(),
                            offset = tail.offset,
                            "journal tail is torn ({}); truncating {} byte(s) from byte {}; everything before it survives",
                            tail.reason,
                            seg.file.metadata().map(|m| m.len()).unwrap_or(0).saturating_sub(tail.offset),
                            tail.offset
                        );
                        seg.file.set_len(tail.offset).map_err(io_err(path))?;
                        seg.file.sync_all().map_err(io_err(path))?;
                        seg.size = tail.offset;
                    }
                } else {
                    // The end of an older segment: records up to the next segment's are
                    // lost. (In the newest, records out of order: copied, not torn.)
                    let next_first = names.get(i + 1).map(|n| n.0);
                    let lost_from = seg
                        .last_seq
                        .map_or(*first, |s| s + 1)
                        .max(prev.map_or(0, |p| p + 1));
                    let end = seg.file.metadata().map(|m| m.len()).map_err(io_err(path))?;
                    seg.damage.push(Damage {
                        file: path.clone(),
                        offset: tail.offset,
                        end,
                        records: next_first
                            .filter(|n| lost_from < *n)
                            .map(|n| (lost_from, n - 1)),
                        reason: tail.reason,
                        next_seq: next_first,
                    });
                    seg.len = end;
                    seg.durable = end;
                }
            }
            // Damage among compacted events does not matter any more ([`live_damage`]);
            // it stays listed so that readers step over it.
            segments.push(seg);
        }
        structure.extend(missing_records(dir, &segments, low_water, &accepted));
        Ok(SegmentStorage {
            dir: dir.to_path_buf(),
            segments_dir,
            writable,
            options,
            state: Mutex::new(State {
                segments,
                low_water,
                roll_next: false,
                dir_dirty,
                structure,
            }),
            _lock: lock,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read_only_error(&self) -> JournalError {
        JournalError::Storage {
            path: self.dir.clone(),
            message: "opened read-only".into(),
        }
    }

    /// Starts a new, empty segment for records from `first` on.
    fn new_segment(&self, st: &mut State, first: u64) -> Result<(), JournalError> {
        // The segment being closed must be durable before anything lands after it.
        if let Some(last) = st.segments.last_mut() {
            if last.size > last.len {
                // Its room ahead is not needed any more (zeros left by a crash before this
                // are read as room too).
                last.file.set_len(last.len).map_err(io_err(&last.path))?;
                last.size = last.len;
            }
            if last.durable < last.len {
                last.file.sync_data().map_err(io_err(&last.path))?;
                last.durable = last.len;
            }
        }
        let path = self.segments_dir.join(segment_name(first));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err(&path))?;
        st.segments.push(Segment {
            first,
            path,
            file: Arc::new(file),
            len: 0,
            durable: 0,
            size: 0,
            count: 0,
            last_seq: None,
            marks: Vec::new(),
            damage: Vec::new(),
        });
        st.dir_dirty = true;
        st.roll_next = false;
        Ok(())
    }

    /// Rescans segment `i` after its file changed.
    fn rescan(&self, st: &mut State, i: usize, file: Arc<File>) -> Result<(), JournalError> {
        let prev = st.segments[..i].iter().rev().find_map(|s| s.last_seq);
        let (first, path) = (st.segments[i].first, st.segments[i].path.clone());
        let (seg, _) = scan(&path, file, first, prev).map_err(io_err(&path))?;
        st.segments[i] = seg;
        Ok(())
    }

    /// Cuts segment `i` at `offset`, durably.
    fn truncate(&self, st: &mut State, i: usize, offset: u64) -> Result<(), JournalError> {
        let seg = &st.segments[i];
        seg.file.set_len(offset).map_err(io_err(&seg.path))?;
        seg.file.sync_all().map_err(io_err(&seg.path))?;
        let file = seg.file.clone();
        self.rescan(st, i, file)
    }

    /// Rewrites segment `i` as `records` (sorted), through a temporary file.
    fn rewrite(
        &self,
        st: &mut State,
        i: usize,
        records: &[(u64, Vec<u8>)],
    ) -> Result<(), JournalError> {
        let path = st.segments[i].path.clone();
        let mut bytes = Vec::new();
        for (seq, r) in records {
            frame(*seq, r, &mut bytes);
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        write_atomically(&self.segments_dir, &name, &bytes)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        self.rescan(st, i, Arc::new(file))
    }

    /// The segment a record `seq` belongs in.
    fn segment_for(st: &State, seq: u64) -> usize {
        st.segments
            .partition_point(|s| s.first <= seq)
            .saturating_sub(1)
    }

    /// Replaces or inserts records at or below the newest one (tools and tests; the journal
    /// only appends).
    fn put_old(&self, st: &mut State, records: &[(u64, Vec<u8>)]) -> Result<(), JournalError> {
        for (seq, rec) in records {
            let i = Self::segment_for(st, *seq);
            let mut all = st.segments[i].records()?;
            all.retain(|(s, _)| s != seq);
            let at = all.partition_point(|(s, _)| s < seq);
            all.insert(at, (*seq, rec.clone()));
            self.rewrite(st, i, &all)?;
        }
        Ok(())
    }

    /// Undoes a failed write: cuts the newest segment back to what is indexed.
    fn cut_unindexed(st: &mut State) {
        if let Some(last) = st.segments.last_mut()
            && last.file.metadata().is_ok_and(|m| m.len() > last.len)
            && last.file.set_len(last.len).is_ok()
        {
            last.size = last.len;
        }
    }
}

impl Storage for SegmentStorage {
    fn put_events(&self, records: &[(u64, Vec<u8>)]) -> Result<(), JournalError> {
        if !self.writable {
            return Err(self.read_only_error());
        }
        let Some((first, _)) = records.first() else {
            return Ok(());
        };
        let mut st = self.state();
        if st.last_seq().is_some_and(|last| *first <= last) {
            return self.put_old(&mut st, records);
        }
        let roll = match st.segments.last() {
            None => true,
            Some(s) => {
                s.len > 0
                    && (s.len >= self.options.segment_bytes
                        || (st.roll_next
                            && s.len >= ROLL_AFTER_COMPACTION.min(self.options.segment_bytes)))
            }
        };
        if roll {
            self.new_segment(&mut st, *first)?;
        }
        let mut bytes =
            Vec::with_capacity(records.iter().map(|(_, r)| r.len() + FRAME_HEADER).sum());
        for (seq, r) in records {
            frame(*seq, r, &mut bytes);
        }
        let Some(seg) = st.segments.last_mut() else {
            return Err(self.read_only_error());
        };
        let end = seg.len + bytes.len() as u64;
        if end > seg.size {
            let size = end.div_ceil(EXTEND_BY) * EXTEND_BY;
            seg.file.set_len(size).map_err(io_err(&seg.path))?;
            seg.size = size;
        }
        if let Err(source) = seg.file.write_all_at(&bytes, seg.len) {
            // A partly written batch must not stay behind the indexed end.
            if seg.file.set_len(seg.len).is_ok() {
                seg.size = seg.len;
            }
            return Err(JournalError::Io {
                path: seg.path.clone(),
                source,
            });
        }
        let mut off = seg.len;
        for (seq, r) in records {
            if seg.count.is_multiple_of(MARK_EVERY) {
                seg.marks.push((*seq, off));
            }
            seg.count += 1;
            seg.last_seq = Some(*seq);
            off += (FRAME_HEADER + r.len()) as u64;
        }
        seg.len = off;
        Ok(())
    }

    fn flush(&self) -> Result<(), JournalError> {
        if !self.writable {
            return Ok(());
        }
        let (file, path, len, dir_dirty) = {
            let mut st = self.state();
            let dirty = std::mem::take(&mut st.dir_dirty);
            match st.segments.last() {
                Some(s) => (Some(s.file.clone()), s.path.clone(), s.len, dirty),
                None => (None, PathBuf::new(), 0, dirty),
            }
        };
        // Outside the lock: readers and the index are not held up by the disk.
        let result = (|| {
            if let Some(file) = &file {
                file.sync_data().map_err(io_err(&path))?;
            }
            if dir_dirty {
                sync_dir(&self.segments_dir)?;
            }
            Ok(())
        })();
        let mut st = self.state();
        if result.is_err() {
            st.dir_dirty |= dir_dirty;
            return result;
        }
        if let (Some(file), Some(last)) = (&file, st.segments.last_mut())
            && Arc::ptr_eq(file, &last.file)
        {
            last.durable = last.durable.max(len.min(last.len));
        }
        Ok(())
    }

    fn events_from(&self, from: u64) -> RecordIter<'_> {
        let st = self.state();
        let skip = from.max(st.low_water);
        let n = st.segments.len();
        let mut parts = Vec::new();
        for (i, s) in st.segments.iter().enumerate() {
            if i + 1 < n && st.segments[i + 1].first <= skip {
                continue;
            }
            let start = if parts.is_empty() {
                s.mark_before(skip)
            } else {
                0
            };
            parts.push(Part {
                path: s.path.clone(),
                file: s.file.clone(),
                start,
                end: s.len,
                damage: s
                    .damage
                    .iter()
                    .filter(|d| d.offset >= start)
                    .cloned()
                    .collect(),
            });
        }
        Box::new(Cursor {
            parts,
            skip,
            part: 0,
            off: None,
            window: None,
            done: false,
        })
    }

    fn last_event(&self) -> Result<Option<(u64, Vec<u8>)>, JournalError> {
        Ok(self.last_events(1)?.pop())
    }

    fn last_events(&self, n: usize) -> Result<Vec<(u64, Vec<u8>)>, JournalError> {
        let st = self.state();
        let mut newest_first: Vec<(u64, Vec<u8>)> = Vec::new();
        for seg in st.segments.iter().rev() {
            let need = n.saturating_sub(newest_first.len());
            if need == 0 || seg.last_seq.is_some_and(|l| l < st.low_water) {
                break;
            }
            let mark = seg.count.saturating_sub(need) / MARK_EVERY;
            let start = seg.marks.get(mark).map_or(0, |(_, off)| *off);
            let mut got: Vec<(u64, Vec<u8>)> = Vec::new();
            seg.walk(start, |seq, _, r| {
                if seq >= st.low_water {
                    got.push((seq, r.to_vec()));
                }
                true
            })?;
            newest_first.extend(got.into_iter().rev().take(need));
        }
        newest_first.truncate(n);
        Ok(newest_first)
    }

    fn remove_events(&self, from: u64, to: u64) -> Result<(), JournalError> {
        if !self.writable {
            return Err(self.read_only_error());
        }
        let mut st = self.state();
        let low = st.low_water;
        let (Some(first_live), Some(last)) = (first_live(&st)?, st.last_seq()) else {
            Self::cut_unindexed(&mut st);
            return Ok(());
        };
        let lo = from.max(first_live);
        let Some((first_i, first_off)) = (lo <= to && lo <= last)
            .then(|| locate(&st, lo))
            .transpose()?
            .flatten()
            .filter(|(i, off)| {
                // The record found must be in the range.
                let mut seq = None;
                let _ = st.segments[*i].walk(*off, |s, _, _| {
                    seq = Some(s);
                    false
                });
                seq.is_some_and(|s| s <= to)
            })
        else {
            Self::cut_unindexed(&mut st);
            return Ok(());
        };
        let before = first_live < from;
        let after = last > to;
        // Written after the last flush (a failed commit): on disk as far as anyone knows
        // only up to there, so cut off.
        let last_i = st.segments.len() - 1;
        let unflushed = first_i == last_i && first_off >= st.segments[last_i].durable;
        if !after && (unflushed || before) {
            // The tail: cut the files back.
            while st.segments.len() > first_i + 1 {
                if let Some(seg) = st.segments.pop() {
                    std::fs::remove_file(&seg.path).map_err(io_err(&seg.path))?;
                    st.dir_dirty = true;
                }
            }
            self.truncate(&mut st, first_i, first_off)?;
            if st.dir_dirty {
                sync_dir(&self.segments_dir)?;
                st.dir_dirty = false;
            }
            return Ok(());
        }
        if !before {
            let new_low = to.saturating_add(1).max(low);
            let mut mark = Vec::new();
            frame(new_low, &[], &mut mark);
            write_atomically(&self.dir, "low-water", &mark)?;
            st.low_water = new_low;
            let mut deleted = false;
            while st.segments.len() > 1 && st.segments[1].first <= new_low {
                let seg = st.segments.remove(0);
                std::fs::remove_file(&seg.path).map_err(io_err(&seg.path))?;
                deleted = true;
            }
            if deleted {
                sync_dir(&self.segments_dir)?;
            }
            if st.segments.len() == 1 {
                st.roll_next = true;
            }
            return Ok(());
        }
        // The middle (repair of single records): rewrite the segments concerned.
        for i in first_i..=Self::segment_for(&st, to) {
            let mut all = st.segments[i].records()?;
            let before = all.len();
            all.retain(|(s, _)| *s < from || *s > to);
            if all.len() != before {
                self.rewrite(&mut st, i, &all)?;
            }
        }
        Ok(())
    }

    fn put_snapshot(&self, seq: u64, record: Vec<u8>) -> Result<(), JournalError> {
        if !self.writable {
            return Err(self.read_only_error());
        }
        let mut bytes = Vec::with_capacity(record.len() + FRAME_HEADER);
        frame(seq, &record, &mut bytes);
        write_atomically(
            &self.dir.join("snapshots"),
            &format!("{seq:020}.snap"),
            &bytes,
        )
    }

    fn snapshots(&self) -> Result<Vec<(u64, Vec<u8>)>, JournalError> {
        let mut all = Vec::new();
        for (seq, path) in self.snapshot_files()? {
            match read_frame_file(&path) {
                Ok((stored, record)) if stored == seq => all.push((seq, record)),
                Ok((stored, _)) => tracing::warn!(
                    file = %path.display(),
                    "journal snapshot file holds sequence {stored}, not {seq}; ignored"
                ),
                Err(reason) => tracing::warn!(
                    file = %path.display(),
                    "journal snapshot file is damaged ({reason}); ignored, replay uses an older snapshot or the events"
                ),
            }
        }
        Ok(all)
    }

    fn remove_snapshot(&self, seq: u64) -> Result<(), JournalError> {
        if !self.writable {
            return Err(self.read_only_error());
        }
        let d = self.dir.join("snapshots");
        let path = d.join(format!("{seq:020}.snap"));
        match std::fs::remove_file(&path) {
            Ok(()) => sync_dir(&d),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(JournalError::Io { path, source }),
        }
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, JournalError> {
        let path = self.dir.join("meta").join(key);
        if !path.exists() {
            return Ok(None);
        }
        read_frame_file(&path)
            .map(|(_, v)| Some(v))
            .map_err(|reason| JournalError::Damaged {
                file: path,
                offset: 0,
                records: None,
                reason,
            })
    }

    fn set_meta(&self, key: &str, value: &[u8]) -> Result<(), JournalError> {
        if !self.writable {
            return Err(self.read_only_error());
        }
        if key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(JournalError::Storage {
                path: self.dir.clone(),
                message: format!("invalid metadata key {key:?}"),
            });
        }
        let mut bytes = Vec::new();
        frame(0, value, &mut bytes);
        write_atomically(&self.dir.join("meta"), key, &bytes)
    }

    fn size_on_disk(&self) -> Result<u64, JournalError> {
        // Segments by their frames: the room ahead of the newest one is sparse.
        let mut total: u64 = self.state().segments.iter().map(|s| s.len).sum();
        for sub in ["snapshots", "meta"] {
            let d = self.dir.join(sub);
            for entry in std::fs::read_dir(&d).map_err(io_err(&d))?.flatten() {
                total += entry.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
        total += std::fs::metadata(self.dir.join("low-water")).map_or(0, |m| m.len());
        Ok(total)
    }

    fn recover(&self) -> Result<(), JournalError> {
        if !self.writable {
            return Ok(());
        }
        let mut st = self.state();
        let Some(i) = st.segments.len().checked_sub(1) else {
            return Ok(());
        };
        // Back to what was durable, on a fresh handle: whatever a failed write or fsync left
        // behind is not trusted.
        let (path, durable) = (st.segments[i].path.clone(), st.segments[i].durable);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        let on_disk = file.metadata().map(|m| m.len()).map_err(io_err(&path))?;
        if st.segments[i].len == durable && on_disk == durable {
            st.segments[i].file = Arc::new(file);
        } else {
            file.set_len(durable).map_err(io_err(&path))?;
            self.rescan(&mut st, i, Arc::new(file))?;
        }
        tracing::info!(
            file = %path.display(),
            offset = durable,
            "journal storage reopened after a write error (the newest segment ends at its last durable byte)"
        );
        Ok(())
    }

    fn damage(&self) -> Vec<Damage> {
        let st = self.state();
        st.segments
            .iter()
            .flat_map(|s| live_damage(&s.damage, st.low_water))
            .chain(st.structure.iter().cloned())
            .collect()
    }

    fn structure_problems(&self) -> Vec<Damage> {
        self.state().structure.clone()
    }

    fn probe(&self) -> Result<(), JournalError> {
        // Room for a batch, allocated for real (a segment's room ahead is sparse and
        // proves nothing), then given back.
        let path = self.dir.join(PROBE_FILE);
        let result = write_synced(&path, &vec![0u8; PROBE_BYTES]);
        let _ = std::fs::remove_file(&path);
        result.map_err(io_err(&path))
    }

    fn accepted_gaps(&self) -> Vec<(u64, u64)> {
        read_accepted_gaps(&self.dir)
    }

    fn accept_lost(&self, seqs: &[u64]) -> Result<(), JournalError> {
        let mut accepted = read_accepted_gaps(&self.dir);
        let before = accepted.clone();
        for seq in seqs {
            match accepted
                .iter_mut()
                .find(|(a, b)| *a <= *seq + 1 && *seq <= b + 1)
            {
                Some(range) => *range = (range.0.min(*seq), range.1.max(*seq)),
                None => accepted.push((*seq, *seq)),
            }
        }
        accepted.sort_unstable();
        // Ranges that touch after the merge are one.
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in accepted {
            match merged.last_mut() {
                Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        if merged == before {
            return Ok(());
        }
        let bytes = serde_json::to_vec(&merged).map_err(|e| JournalError::Storage {
            path: self.dir.clone(),
            message: e.to_string(),
        })?;
        let mut out = Vec::new();
        frame(0, &bytes, &mut out);
        write_atomically(&self.dir, ACCEPTED_GAPS, &out)
    }

    fn snapshot_problems(&self) -> Result<Vec<(u64, String)>, JournalError> {
        let mut bad = Vec::new();
        for (seq, path) in self.snapshot_files()? {
            match read_frame_file(&path) {
                Ok((stored, _)) if stored == seq => {}
                Ok((stored, _)) => bad.push((
                    seq,
                    format!("snapshot file {} holds sequence {stored}", path.display()),
                )),
                Err(reason) => bad.push((
                    seq,
                    format!("snapshot file {} is damaged: {reason}", path.display()),
                )),
            }
        }
        Ok(bad)
    }

    fn repair_damage(&self) -> Result<Vec<Damage>, JournalError> {
        if !self.writable {
            return Err(self.read_only_error());
        }
        let mut st = self.state();
        let mut dropped = Vec::new();
        for i in 0..st.segments.len() {
            if st.segments[i].damage.is_empty() {
                continue;
            }
            dropped.extend(live_damage(&st.segments[i].damage, st.low_water));
            let all = st.segments[i].records()?;
            self.rewrite(&mut st, i, &all)?;
        }
        for d in std::mem::take(&mut st.structure) {
            if d.file.parent() == Some(self.segments_dir.as_path()) && d.records.is_none() {
                // A stray file: kept for inspection, out of the segments.
                let aside = self.dir.join("stray");
                bosun_platform::create_private_dir(&aside).map_err(io_err(&aside))?;
                let name = d.file.file_name().map(PathBuf::from).unwrap_or_default();
                // An earlier repair's file of the same name stays too.
                let mut target = aside.join(&name);
                let mut n = 1;
                while target.exists() {
                    target = aside.join(format!("{}.{n}", name.display()));
                    n += 1;
                }
                std::fs::rename(&d.file, target).map_err(io_err(&d.file))?;
                st.dir_dirty = true;
            } else if d.file == self.dir.join("low-water") {
                // Compaction sets the mark after the oldest snapshot it keeps; without
                // one, the mark goes where the records start.
                let oldest_snapshot = self.snapshot_files()?.first().map(|(seq, _)| seq + 1);
                let first = oldest_snapshot
                    .or_else(|| first_live_seq(&st.segments))
                    .unwrap_or(st.low_water);
                let mut mark = Vec::new();
                frame(first, &[], &mut mark);
                write_atomically(&self.dir, "low-water", &mark)?;
                st.low_water = first;
            }
            dropped.push(d);
        }
        if st.dir_dirty {
            sync_dir(&self.segments_dir)?;
            st.dir_dirty = false;
        }
        Ok(dropped)
    }
}

impl SegmentStorage {
    fn snapshot_files(&self) -> Result<Vec<(u64, PathBuf)>, JournalError> {
        let d = self.dir.join("snapshots");
        let mut all: Vec<(u64, PathBuf)> = std::fs::read_dir(&d)
            .map_err(io_err(&d))?
            .flatten()
            .filter_map(|e| {
                parse_name(&e.file_name().to_string_lossy(), ".snap").map(|s| (s, e.path()))
            })
            .collect();
        all.sort();
        Ok(all)
    }
}

/// One segment as an iterator reads it.
struct Part {
    path: PathBuf,
    file: Arc<File>,
    start: u64,
    end: u64,
    damage: Vec<Damage>,
}

/// Reads records in order over segments fixed when it was made (the files it holds open stay
/// readable even if compaction deletes them meanwhile).
struct Cursor {
    parts: Vec<Part>,
    skip: u64,
    part: usize,
    off: Option<u64>,
    window: Option<Window>,
    done: bool,
}

impl Iterator for Cursor {
    type Item = Result<(u64, Vec<u8>), JournalError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let part = self.parts.get(self.part)?;
            let off = *self.off.get_or_insert(part.start);
            if off >= part.end {
                self.part += 1;
                self.off = None;
                self.window = None;
                continue;
            }
            if let Some(d) = part.damage.iter().find(|d| d.offset == off) {
                self.off = Some(d.end);
                if d.next_seq.is_none_or(|n| n > self.skip) {
                    return Some(Err(d.to_error()));
                }
                continue;
            }
            let w = self
                .window
                .get_or_insert_with(|| Window::new(part.file.clone(), part.end));
            match frame_at(w, off) {
                Err(source) => {
                    self.done = true;
                    return Some(Err(JournalError::Io {
                        path: part.path.clone(),
                        source,
                    }));
                }
                Ok(Frame::Bad(reason)) => {
                    self.done = true;
                    return Some(Err(JournalError::Damaged {
                        file: part.path.clone(),
                        offset: off,
                        records: None,
                        reason: format!("{reason} (changed since it was opened)"),
                    }));
                }
                Ok(Frame::Good { seq, record }) => {
                    self.off = Some(off + Frame::size(record));
                    if seq >= self.skip {
                        return Some(Ok((seq, record.to_vec())));
                    }
                }
            }
        }
        None
    }
}
