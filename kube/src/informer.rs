//! The one informer of the lambda controllers and the deployer: a resource's objects as
//! the shared watch delivers them, as the watch's own compact JSON text (shared, parsed
//! when read), with this process's own writes visible at once (before their watch events
//! come back), an index of the caller's choice, and subscribers told of every change in
//! watch order.
//!
//! ```text
//!   shared watch ──init/on──► Informer ── cache: watch truth, overlaid by our writes
//!   our write ───remember───►    │        index (e.g. objects by their controller's uid)
//!   a refused write ─forget──►   └──► subscribers: Applied { old, new } | Deleted(old)
//! ```
//!
//! One resourceVersion rule decides between the watch and our writes
//! ([`crate::watch::supersedes`]): a write stays in the cache until the watch brings that version
//! or a later one; an event of an earlier version (delivered after our write returned) is
//! remembered as the state before our write, not shown. Subscribers see an object we
//! created as news when its event comes, and an update we wrote as a change from the
//! state before it. A write that returns after the watch showed its object deleted (a
//! graceful delete whose object another client removed at once, say) does not bring the
//! object back: the cache keeps the versions of recent deletions ([`TOMBSTONES_MAX`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use crate::watch::{
    Change as WatchChange, Listener, ObjectKey, SharedWatch, Stored, resource_version, supersedes,
};

/// What subscribers are told.
#[derive(Clone, Debug)]
pub enum Event {
    /// Added or modified: the state before (`None`: new to us), as stored (parsed by the
    /// subscribers that read it: [`Stored::shared`]), and the watch's object.
    Applied {
        old: Option<Stored>,
        new: Arc<Value>,
    },
    /// Deleted: the last state we held.
    Deleted(Arc<Value>),
}

/// An index kept beside the cache, changed with it. Each cached object keeps the few
/// fields the index needs ([`Index::Meta`], taken when the object comes), so that taking
/// an object out does not parse it again.
pub trait Index: Default + Send + 'static {
    /// What the index needs of one object.
    type Meta: Clone + Send + 'static;
    /// Whether [`Index::meta`] reads the object: a relist parses each object's text only
    /// for an index that does.
    const READS_OBJECT: bool = true;
    /// What the index needs of `object`.
    fn meta(object: &Value) -> Self::Meta;
    /// The object with `meta` is now cached under `key`.
    fn insert(&mut self, key: &ObjectKey, meta: &Self::Meta);
    /// The object with `meta` (cached under `key`) is no longer.
    fn remove(&mut self, key: &ObjectKey, meta: &Self::Meta);
}

/// No index.
impl Index for () {
    type Meta = ();
    const READS_OBJECT: bool = false;
    fn meta(_: &Value) {}
    fn insert(&mut self, _: &ObjectKey, _: &()) {}
    fn remove(&mut self, _: &ObjectKey, _: &()) {}
}

/// A subscriber: told of each change; answers `false` once it has gone.
pub type Subscriber = Box<dyn Fn(&Event) -> bool + Send>;

/// One cached object: its text (shared with the watch when it came from there) and what
/// the index needs of it.
#[derive(Clone)]
struct Entry<M> {
    stored: Stored,
    meta: M,
}

/// How many deletions the cache remembers (oldest out first): enough for the writes in
/// flight when their objects' DELETED events come.
pub(crate) const TOMBSTONES_MAX: usize = 4096;

/// The deletions the watch showed lately: each key's resourceVersion at its deletion.
#[derive(Default)]
struct Tombstones {
    by_key: HashMap<ObjectKey, (String, u64)>,
    /// Keys in the order they were deleted, with the sequence number of that deletion (a
    /// key deleted again is found by its newer number).
    order: VecDeque<(ObjectKey, u64)>,
    next: u64,
}

impl Tombstones {
    fn insert(&mut self, key: &ObjectKey, version: &str) {
        let seq = self.next;
        self.next += 1;
        self.by_key.insert(key.clone(), (version.to_string(), seq));
        self.order.push_back((key.clone(), seq));
        while self.order.len() > TOMBSTONES_MAX {
            if let Some((old, seq)) = self.order.pop_front()
                && self.by_key.get(&old).is_some_and(|(_, s)| *s == seq)
            {
                self.by_key.remove(&old);
            }
        }
    }

    /// Whether the watch showed `key` deleted at or after `version`.
    fn covers(&self, key: &ObjectKey, version: &str) -> bool {
        self.by_key
            .get(key)
            .is_some_and(|(deleted, _)| supersedes(deleted, version))
    }

    fn remove(&mut self, key: &ObjectKey) {
        self.by_key.remove(key);
    }

    fn clear(&mut self) {
        self.by_key.clear();
        self.order.clear();
    }
}

/// The cache of one informer, with its index. Objects are kept as text and parsed when
/// read ([`Stored`]).
pub struct Cache<I: Index> {
    objects: BTreeMap<ObjectKey, Entry<I::Meta>>,
    /// Objects our writes put into the cache before their watch events came, with the
    /// latest state the watch showed (`None`: none, we created it).
    unseen: HashMap<ObjectKey, Option<Entry<I::Meta>>>,
    /// Deletions the watch showed: a write of an older version returning late is not
    /// put back.
    tombstones: Tombstones,
    /// The caller's index.
    pub index: I,
    subscribers: Vec<Subscriber>,
}

impl<I: Index> Cache<I> {
    /// The newest copy of `key` this process knows.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        self.objects.get(key).map(|e| e.stored.shared())
    }

    /// The compact JSON text of `key`, shared.
    pub fn text(&self, key: &ObjectKey) -> Option<Arc<str>> {
        self.objects.get(key).map(|e| e.stored.text())
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Every cached object of `namespace` (all with `None`), by name.
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<Value>> {
        self.entries(namespace)
            .map(|(_, e)| e.stored.shared())
            .collect()
    }

    /// The keys of every cached object of `namespace` (all with `None`), in order.
    pub fn keys(&self, namespace: Option<&str>) -> Vec<ObjectKey> {
        self.entries(namespace).map(|(k, _)| k.clone()).collect()
    }

    /// The heads ([`crate::watch::Stored::head`]: `apiVersion`, `kind`, `metadata` without
    /// `managedFields`) of every cached object of `namespace` (all with `None`), by name:
    /// what enqueuing them by key and selector needs, without parsing them whole.
    pub fn list_heads(&self, namespace: Option<&str>) -> Vec<Arc<Value>> {
        self.entries(namespace)
            .map(|(_, e)| Arc::new(e.stored.head()))
            .collect()
    }

    /// The entries of `namespace` (all with `None`), by name.
    fn entries<'a>(
        &'a self,
        namespace: Option<&'a str>,
    ) -> Box<dyn Iterator<Item = (&'a ObjectKey, &'a Entry<I::Meta>)> + 'a> {
        match namespace {
            Some(ns) => Box::new(
                self.objects
                    .range(crate::watch::namespace_start(ns)..)
                    .take_while(move |((n, _), _)| **n == *ns),
            ),
            None => Box::new(self.objects.iter()),
        }
    }

    fn put(&mut self, key: &ObjectKey, entry: Entry<I::Meta>) -> Option<Entry<I::Meta>> {
        let before = self.objects.insert(key.clone(), entry);
        if let Some(b) = &before {
            self.index.remove(key, &b.meta);
        }
        if let Some(now) = self.objects.get(key) {
            self.index.insert(key, &now.meta);
        }
        before
    }

    fn take(&mut self, key: &ObjectKey) -> Option<Entry<I::Meta>> {
        let before = self.objects.remove(key);
        if let Some(b) = &before {
            self.index.remove(key, &b.meta);
        }
        before
    }

    fn send(&mut self, event: impl FnOnce() -> Event) {
        if !self.subscribers.is_empty() {
            let event = event();
            self.subscribers.retain(|s| s(&event));
        }
    }

    /// Our own write: into the cache unless the watch brought it (or later) already, or
    /// showed the object deleted since.
    pub fn remember(&mut self, key: ObjectKey, object: &Value) {
        let version = resource_version(object);
        let known = self
            .objects
            .get(&key)
            .is_some_and(|cached| supersedes(cached.stored.resource_version(), version));
        if !known && !self.tombstones.covers(&key, version) {
            let entry = Entry {
                stored: Stored::of(object),
                meta: I::meta(object),
            };
            self.remember_entry(key, entry);
        }
    }

    fn remember_entry(&mut self, key: ObjectKey, entry: Entry<I::Meta>) {
        let before = self.put(&key, entry);
        self.unseen.entry(key).or_insert(before);
    }

    /// Our write of `key` was refused as stale: the cache goes back to what the watch
    /// showed last.
    pub fn forget_write(&mut self, key: &ObjectKey) {
        match self.unseen.remove(key) {
            Some(Some(before)) => {
                self.put(key, before);
            }
            Some(None) => {
                self.take(key);
            }
            None => {}
        }
    }

    /// Our own delete of the object with `uid`: out of the cache at once.
    pub fn removed(&mut self, key: &ObjectKey, uid: &str) {
        if self
            .objects
            .get(key)
            .is_some_and(|e| e.stored.parse()["metadata"]["uid"].as_str() == Some(uid))
        {
            self.take(key);
            self.unseen.remove(key);
        }
    }

    /// An added or modified object from the watch.
    fn applied(&mut self, key: &ObjectKey, new: &Arc<Value>, stored: &Stored) {
        self.tombstones.remove(key);
        let entry = Entry {
            stored: stored.clone(),
            meta: I::meta(new),
        };
        let old = match self.unseen.remove(key) {
            // Our write is newer than this event: it stays; the event is the latest
            // state the watch showed.
            Some(before)
                if self.objects.get(key).is_some_and(|ours| {
                    !supersedes(stored.resource_version(), ours.stored.resource_version())
                }) =>
            {
                self.unseen.insert(key.clone(), Some(entry));
                before
            }
            Some(before) => {
                self.put(key, entry);
                before
            }
            None => self.put(key, entry),
        };
        self.send(|| Event::Applied {
            old: old.map(|e| e.stored),
            new: Arc::clone(new),
        });
    }

    /// A deleted object from the watch.
    fn deleted(&mut self, key: &ObjectKey, object: &Arc<Value>) {
        self.tombstones.insert(key, resource_version(object));
        self.unseen.remove(key);
        let old = self.take(key);
        self.send(|| Event::Deleted(old.map_or_else(|| Arc::clone(object), |e| e.stored.shared())));
    }

    /// The watch's objects after a (re)list: they replace the cache, except our writes
    /// the list does not include yet.
    fn listed(&mut self, objects: &BTreeMap<ObjectKey, Stored>) {
        let ours: Vec<(ObjectKey, Entry<I::Meta>)> = self
            .unseen
            .keys()
            .filter_map(|k| Some((k.clone(), self.objects.get(k)?.clone())))
            .collect();
        let mut listed = BTreeMap::new();
        let mut index = I::default();
        for (k, stored) in objects {
            let meta = if I::READS_OBJECT {
                I::meta(&stored.parse())
            } else {
                I::meta(&Value::Null)
            };
            index.insert(k, &meta);
            listed.insert(
                k.clone(),
                Entry {
                    stored: stored.clone(),
                    meta,
                },
            );
        }
        self.objects = listed;
        self.index = index;
        self.unseen.clear();
        self.tombstones.clear();
        for (key, entry) in ours {
            let known = self.objects.get(&key).is_some_and(|cached| {
                supersedes(
                    cached.stored.resource_version(),
                    entry.stored.resource_version(),
                )
            });
            if !known {
                self.remember_entry(key, entry);
            }
        }
    }
}

/// One resource's informer (see the module docs).
pub struct Informer<I: Index = ()> {
    cache: Mutex<Cache<I>>,
    /// Bumped (under the cache's lock) by every change: a reader that finds the same count
    /// as when it last settled knows it would read the same objects.
    changes: AtomicU64,
}

impl<I: Index> Default for Informer<I> {
    fn default() -> Self {
        Informer {
            cache: Mutex::new(Cache {
                objects: BTreeMap::new(),
                unseen: HashMap::new(),
                tombstones: Tombstones::default(),
                index: I::default(),
                subscribers: Vec::new(),
            }),
            changes: AtomicU64::new(0),
        }
    }
}

impl<I: Index> Informer<I> {
    /// The cache, to read.
    pub fn read(&self) -> MutexGuard<'_, Cache<I>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cache, to change (our own writes): the change count moves with it.
    pub fn change(&self) -> MutexGuard<'_, Cache<I>> {
        let cache = self.read();
        self.changes.fetch_add(1, Ordering::Release);
        cache
    }

    /// How many changes the cache has seen.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Tells `subscriber` of every change from now on.
    pub fn subscribe(&self, subscriber: Subscriber) {
        self.read().subscribers.push(subscriber);
    }
}

impl<I: Index> Listener for Informer<I> {
    fn init(&self, _namespace: &Option<String>, objects: &BTreeMap<ObjectKey, Stored>) {
        self.change().listed(objects);
    }

    fn on(&self, change: WatchChange, key: &ObjectKey, object: &Arc<Value>, stored: &Stored) {
        let mut cache = self.change();
        match change {
            WatchChange::Added | WatchChange::Modified => cache.applied(key, object, stored),
            WatchChange::Deleted => cache.deleted(key, object),
        }
    }

    fn detached(&self, _namespace: Option<&str>) -> Vec<Arc<SharedWatch>> {
        // Informers live as long as bosun, like metacontroller's shared informers.
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(name: &str, rv: &str) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv, "uid": name}})
    }

    fn key(name: &str) -> ObjectKey {
        crate::watch::key_of("ns", name)
    }

    /// An informer whose subscriber's events land in the returned list.
    fn informer() -> (Informer, Arc<Mutex<Vec<Event>>>) {
        let informer = Informer::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        informer.subscribe(Box::new(move |e| {
            sink.lock().map(|mut s| s.push(e.clone())).is_ok()
        }));
        (informer, seen)
    }

    fn event(informer: &Informer, change: WatchChange, o: Value) {
        let k = key(o["metadata"]["name"].as_str().unwrap_or_default());
        let (stored, shared) = Stored::new(o);
        informer.on(change, &k, &shared, &stored);
    }

    fn rv(o: &Value) -> &str {
        resource_version(o)
    }

    fn name(o: &Value) -> String {
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The old resourceVersion of each applied event, in order (`-` for none).
    fn olds(seen: &Mutex<Vec<Event>>) -> Vec<String> {
        let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
        s.drain(..)
            .map(|e| match e {
                Event::Applied { old, .. } => {
                    old.map_or("-".into(), |o| o.resource_version().to_string())
                }
                Event::Deleted(o) => format!("deleted {}", rv(&o)),
            })
            .collect()
    }

    #[test]
    fn a_watch_event_replaces_our_write_only_when_as_new_or_newer() {
        assert!(supersedes("12", "12"));
        assert!(supersedes("13", "12"));
        // An event of a write before ours (delivered after our write returned) does not.
        assert!(!supersedes("11", "12"));
        // Versions that do not read as numbers: the watch wins.
        assert!(supersedes("b", "a"));
        assert!(supersedes("", "12"));
    }

    #[test]
    fn an_object_we_created_is_still_news_when_its_watch_event_comes() {
        let (informer, seen) = informer();
        informer.change().remember(key("a"), &object("a", "5"));
        assert!(informer.read().get(&key("a")).is_some(), "readable at once");
        event(&informer, WatchChange::Added, object("a", "5"));
        event(&informer, WatchChange::Modified, object("a", "6"));
        assert_eq!(olds(&seen), ["-", "5"]);
    }

    #[test]
    fn an_update_we_wrote_is_seen_as_from_the_state_before_it() {
        let (informer, seen) = informer();
        event(&informer, WatchChange::Added, object("a", "1"));
        informer.change().remember(key("a"), &object("a", "2"));
        informer.change().remember(key("a"), &object("a", "3"));
        // The event of our first write comes after the second returned: a read still
        // sees the second.
        event(&informer, WatchChange::Modified, object("a", "2"));
        assert_eq!(
            informer.read().get(&key("a")).map(|o| rv(&o).to_string()),
            Some("3".into())
        );
        event(&informer, WatchChange::Modified, object("a", "3"));
        assert_eq!(olds(&seen), ["-", "1", "2"]);
    }

    #[test]
    fn a_watch_event_before_our_write_is_not_doubled() {
        let (informer, seen) = informer();
        event(&informer, WatchChange::Added, object("a", "4"));
        informer.change().remember(key("a"), &object("a", "4"));
        assert!(informer.read().unseen.is_empty());
        event(&informer, WatchChange::Deleted, object("a", "4"));
        assert_eq!(olds(&seen), ["-", "deleted 4"]);
    }

    #[test]
    fn a_refused_write_gives_the_watch_state_back() {
        let (informer, _seen) = informer();
        event(&informer, WatchChange::Added, object("a", "5"));
        informer.change().remember(key("a"), &object("a", "6"));
        informer.change().forget_write(&key("a"));
        assert_eq!(
            informer.read().get(&key("a")).map(|o| rv(&o).to_string()),
            Some("5".into())
        );
        informer.change().remember(key("b"), &object("b", "7"));
        informer.change().forget_write(&key("b"));
        assert!(informer.read().get(&key("b")).is_none());
    }

    #[test]
    fn a_relist_keeps_our_writes_it_does_not_include_yet() {
        let (informer, _seen) = informer();
        event(&informer, WatchChange::Added, object("a", "5"));
        informer.change().remember(key("a"), &object("a", "8"));
        informer.change().remember(key("b"), &object("b", "9"));
        let listed: BTreeMap<ObjectKey, Stored> = [("a", "6"), ("c", "7")]
            .into_iter()
            .map(|(n, v)| (key(n), Stored::of(&object(n, v))))
            .collect();
        informer.init(&None, &listed);
        let cache = informer.read();
        let rvs: Vec<(String, String)> = cache
            .list(None)
            .iter()
            .map(|o| (name(o), rv(o).to_string()))
            .collect();
        let want =
            [("a", "8"), ("b", "9"), ("c", "7")].map(|(n, v)| (n.to_string(), v.to_string()));
        assert_eq!(rvs, want);
    }

    #[test]
    fn our_delete_leaves_a_recreated_object_alone() {
        let (informer, _seen) = informer();
        event(&informer, WatchChange::Added, object("a", "5"));
        informer.change().removed(&key("a"), "another uid");
        assert!(informer.read().get(&key("a")).is_some());
        informer.change().removed(&key("a"), "a");
        assert!(informer.read().get(&key("a")).is_none());
    }

    /// A graceful delete of ours whose answer (the object, terminating, at version 6)
    /// returns after the watch showed the object terminating and then gone (version 7):
    /// the object is not brought back into the cache, where no later event would take it
    /// out. A later object of that name is.
    #[test]
    fn a_write_that_returns_after_its_object_s_deletion_does_not_bring_it_back() {
        let (informer, _seen) = informer();
        event(&informer, WatchChange::Added, object("a", "5"));
        event(&informer, WatchChange::Modified, object("a", "6"));
        event(&informer, WatchChange::Deleted, object("a", "7"));
        informer.change().remember(key("a"), &object("a", "6"));
        assert!(
            informer.read().get(&key("a")).is_none(),
            "a deleted object came back"
        );
        // Created again: by us (newer than the deletion) or by the watch.
        informer.change().remember(key("a"), &object("a", "9"));
        assert!(informer.read().get(&key("a")).is_some());
        event(&informer, WatchChange::Deleted, object("a", "10"));
        event(&informer, WatchChange::Added, object("a", "11"));
        informer.change().remember(key("a"), &object("a", "11"));
        assert!(informer.read().get(&key("a")).is_some());
    }

    #[test]
    fn the_deletions_remembered_are_bounded() {
        let mut tombstones = Tombstones::default();
        for n in 0..TOMBSTONES_MAX + 10 {
            tombstones.insert(&key(&format!("o{n}")), "1");
        }
        tombstones.insert(&key("o20"), "2");
        assert!(tombstones.by_key.len() <= TOMBSTONES_MAX);
        assert!(tombstones.order.len() <= TOMBSTONES_MAX);
        assert!(!tombstones.covers(&key("o0"), "1"), "the oldest went first");
        assert!(tombstones.covers(&key("o20"), "2"), "deleted again: kept");
    }
}
