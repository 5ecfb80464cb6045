//! resourceVersions: the one rule for comparing them, and the writes a controller waits
//! to see come back through its watch.

use std::collections::{BTreeMap, VecDeque};

/// The one rule of the own-writes bookkeeping (the informers' overlay, the deployer's
/// [`OwnWrites`]): whether an object at resourceVersion `seen` already includes this
/// process's write that returned `written`. The same version does; where both read as
/// numbers (every API server in practice, though Kubernetes calls them opaque), a later
/// one does. Versions that cannot be ordered are taken to include it: the watch is
/// trusted, and a read falls back to what the API server sent last.
pub fn supersedes(seen: &str, written: &str) -> bool {
    if seen == written {
        return true;
    }
    match (seen.parse::<u64>(), written.parse::<u64>()) {
        (Ok(a), Ok(b)) => a >= b,
        _ => true,
    }
}

/// How many writes of one object may wait for their watch events (a relist skips the
/// events of versions that are gone; those entries leave when a later event comes).
const PENDING_PER_KEY: usize = 8;

/// The writes this process made whose watch events have not come back yet, by object.
/// A run writes an object several times in a row (a finalizer, then each step's status),
/// and the watch brings each version some time later: every one of them is the
/// process's own and wakes nothing, not only the last. An event that comes while a
/// write of its object is on its way may be that write's (the watch can be quicker than
/// the response): it is held until the write's answer tells.
#[derive(Debug)]
pub struct OwnWrites<K> {
    pending: BTreeMap<K, Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    /// Versions our writes gave the object, oldest first.
    written: VecDeque<String>,
    /// Writes sent and not answered yet.
    in_flight: usize,
    /// Versions seen by the watch meanwhile, not known to be ours.
    held: Vec<String>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.written.is_empty() && self.in_flight == 0 && self.held.is_empty()
    }

    /// Whether `version` is ours; forgets the writes it includes.
    fn take(&mut self, version: &str) -> bool {
        let own = self.written.iter().any(|w| w == version);
        self.written.retain(|w| !supersedes(version, w));
        own
    }
}

/// What a watch event is to the process that wrote the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The version one of our writes made: nothing new.
    Own,
    /// Someone else's change (or a deletion).
    Other,
    /// Not known yet: a write of the object is on its way, and its answer tells
    /// ([`OwnWrites::finish`]).
    Held,
}

impl<K> Default for OwnWrites<K> {
    fn default() -> Self {
        OwnWrites {
            pending: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone> OwnWrites<K> {
    /// A write of `key` is sent.
    pub fn begin(&mut self, key: &K) {
        self.pending.entry(key.clone()).or_default().in_flight += 1;
    }

    /// The write of `key` sent last was answered: it gave the object `version` (`None`:
    /// it failed). Returns whether an event held meanwhile turned out to be someone
    /// else's change, so the object is to be looked at again.
    pub fn finish(&mut self, key: &K, version: Option<&str>) -> bool {
        let Some(pending) = self.pending.get_mut(key) else {
            return false;
        };
        pending.in_flight = pending.in_flight.saturating_sub(1);
        if let Some(v) = version {
            if pending.written.len() == PENDING_PER_KEY {
                pending.written.pop_front();
            }
            pending.written.push_back(v.to_string());
        }
        let mut wake = false;
        if pending.in_flight == 0 {
            for held in std::mem::take(&mut pending.held) {
                wake |= !pending.take(&held);
            }
        }
        if pending.is_empty() {
            self.pending.remove(key);
        }
        wake
    }

    /// What a watch event of `key` at `version` is. The writes that version includes are
    /// forgotten (events of one object come in order); an event without a version (a
    /// deletion) forgets the object.
    pub fn seen(&mut self, key: &K, version: &str) -> Seen {
        if version.is_empty() {
            self.pending.remove(key);
            return Seen::Other;
        }
        let Some(pending) = self.pending.get_mut(key) else {
            return Seen::Other;
        };
        let seen = if pending.in_flight > 0 && !pending.written.iter().any(|w| w == version) {
            pending.held.push(version.to_string());
            Seen::Held
        } else if pending.take(version) {
            Seen::Own
        } else {
            Seen::Other
        };
        if pending.is_empty() {
            self.pending.remove(key);
        }
        seen
    }

    /// Whether no object has writes waiting for their events.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_included_by_its_own_version_and_later_ones() {
        assert!(supersedes("7", "7"), "the same version");
        assert!(supersedes("8", "7"), "a later one");
        assert!(!supersedes("6", "7"), "an earlier one");
        assert!(!supersedes("9", "10"), "compared as numbers, not text");
        assert!(supersedes("abc", "7"), "unordered: the watch is trusted");
    }

    /// A write answered with `version`.
    fn write(own: &mut OwnWrites<&'static str>, key: &'static str, version: &str) -> bool {
        own.begin(&key);
        own.finish(&key, Some(version))
    }

    #[test]
    fn every_write_of_a_run_is_its_own_when_its_event_comes_late() {
        let mut own = OwnWrites::default();
        for v in ["10", "11", "12"] {
            assert!(!write(&mut own, "a", v));
        }
        // The events come after all three writes: none of them wakes the item.
        assert_eq!(own.seen(&"a", "10"), Seen::Own);
        assert_eq!(own.seen(&"a", "11"), Seen::Own);
        assert_eq!(own.seen(&"a", "12"), Seen::Own);
        assert!(own.is_empty(), "nothing left to wait for");
        // Someone else's change does.
        assert_eq!(own.seen(&"a", "13"), Seen::Other);
    }

    #[test]
    fn an_event_quicker_than_its_write_s_answer_waits_for_it() {
        let mut own = OwnWrites::default();
        own.begin(&"a");
        assert_eq!(own.seen(&"a", "10"), Seen::Held);
        assert!(
            !own.finish(&"a", Some("10")),
            "it was ours: nothing to wake"
        );
        assert!(own.is_empty());
        // Someone else's change seen while our write was on its way wakes the object
        // once the write is answered; so does any event while a write failed.
        own.begin(&"a");
        assert_eq!(own.seen(&"a", "11"), Seen::Held);
        assert!(own.finish(&"a", Some("12")));
        assert_eq!(own.seen(&"a", "12"), Seen::Own);
        own.begin(&"a");
        assert_eq!(own.seen(&"a", "13"), Seen::Held);
        assert!(own.finish(&"a", None));
        assert!(own.is_empty());
    }

    #[test]
    fn someone_else_s_version_is_not_ours_and_forgets_what_it_includes() {
        let mut own = OwnWrites::default();
        write(&mut own, "a", "10");
        write(&mut own, "a", "20");
        // A relist skipped 10's event and shows someone else's 15.
        assert_eq!(own.seen(&"a", "15"), Seen::Other);
        assert_eq!(own.seen(&"a", "10"), Seen::Other, "15 includes 10");
        assert_eq!(own.seen(&"a", "20"), Seen::Own, "our later write");
        assert_eq!(own.seen(&"b", "20"), Seen::Other, "by object");
        // A deletion forgets the object.
        write(&mut own, "a", "30");
        assert_eq!(own.seen(&"a", ""), Seen::Other);
        assert!(own.is_empty());
    }

    #[test]
    fn the_writes_kept_per_object_are_bounded() {
        let mut own = OwnWrites::default();
        for v in 0..100 {
            write(&mut own, "a", &v.to_string());
        }
        assert_eq!(own.seen(&"a", "0"), Seen::Other, "the oldest were dropped");
        assert_eq!(own.seen(&"a", "99"), Seen::Own);
        assert!(own.is_empty());
    }
}
