//! The SharedProcessor: fans each delta of one informer out to its listeners, each
//! through its own bounded queue, so one listener's slowness never slows another.
//!
//! A listener added to an informer first receives the current cache as `Added`
//! deltas flagged initial-list, then live deltas. When a listener's queue
//! overflows, the listener is switched to catch-up mode: its backlog is dropped,
//! and when it next asks for deltas it receives one snapshot of the current cache
//! as `Replaced` deltas, plus `Deleted` tombstones for objects it was told about
//! that are gone. Memory stays bounded and no final state is lost; overflows are
//! counted and logged. A listener may also ask for a periodic resync, which queues
//! a `Sync` delta for every cached object, and may be narrowed to a [`Scope`] of
//! namespaces: it is then told of nothing outside them, snapshots included.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kube::api::GroupVersionKind;
use tokio::sync::Notify;

use crate::Recover as _;
use crate::delta::{Delta, DeltaType};
use crate::indexer::Indexer;
use crate::object::CachedObject;
use crate::scope::Scope;

/// An empty live queue holding room for more deltas than this gives it back.
const SHRINK_ABOVE: usize = 1024;

/// Settings of one listener.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ListenerOptions {
    /// Deltas queued at most before the listener is switched to catch-up mode.
    pub queue_capacity: usize,
    /// Queue a `Sync` delta for every cached object at this period.
    pub resync: Option<Duration>,
    /// The namespaces whose objects the listener is told about.
    pub scope: Scope,
    /// Counts the deltas the listener is not told about because of its
    /// scope; listeners given one counter count together.
    pub outside_scope: Arc<AtomicU64>,
}

impl Default for ListenerOptions {
    fn default() -> Self {
        Self {
            queue_capacity: 4096,
            resync: None,
            scope: Scope::all(),
            outside_scope: Arc::default(),
        }
    }
}

impl ListenerOptions {
    /// Sets [`ListenerOptions::queue_capacity`].
    #[must_use]
    pub fn queue_capacity(mut self, capacity: usize) -> Self {
        self.queue_capacity = capacity.max(1);
        self
    }

    /// Sets [`ListenerOptions::scope`].
    #[must_use]
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Sets [`ListenerOptions::outside_scope`].
    #[must_use]
    pub fn count_outside_scope(mut self, counter: Arc<AtomicU64>) -> Self {
        self.outside_scope = counter;
        self
    }

    /// Sets [`ListenerOptions::resync`].
    #[must_use]
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = Some(period);
        self
    }
}

/// What a listener's next batch starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Snapshot {
    /// Nothing: take from the queue.
    None,
    /// The cache as `Added`, flagged initial-list (a new listener).
    Initial,
    /// The cache as `Replaced`, plus tombstones (after an overflow).
    CatchUp,
}

/// What a listener's queue holds, under its lock: the deltas queued, a
/// snapshot being handed out in catch-up mode, and whether it is closed.
#[derive(Debug)]
struct Buffered {
    deltas: VecDeque<Delta>,
    snapshot: Snapshot,
    /// Deltas of a snapshot not yet handed out.
    pending: VecDeque<Delta>,
    closed: bool,
}

#[derive(Debug)]
struct ListenerQueue {
    name: String,
    capacity: usize,
    scope: Scope,
    outside_scope: Arc<AtomicU64>,
    state: Mutex<Buffered>,
    ready: Notify,
    overflows: AtomicU64,
    dropped: AtomicU64,
    synced: AtomicBool,
}

impl ListenerQueue {
    fn lock(&self) -> MutexGuard<'_, Buffered> {
        self.state.lock().recover()
    }

    fn stats(&self) -> ListenerStats {
        ListenerStats {
            queued: self.lock().deltas.len(),
            overflows: self.overflows.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            outside_scope: self.outside_scope.load(Ordering::Relaxed),
        }
    }

    fn push(&self, delta: Delta) {
        if !self.scope.contains(&delta.object) {
            if self.outside_scope.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::info!(
                    listener = %self.name,
                    namespace = delta.object.namespace().unwrap_or_default(),
                    "deltas outside the listener's namespaces (a plugin's grant.namespaces) are not delivered; its status counts them"
                );
            }
            return;
        }
        let mut state = self.lock();
        if state.closed {
            return;
        }
        if state.snapshot != Snapshot::None {
            // A snapshot will be taken after this change was cached: it holds it.
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if state.deltas.len() >= self.capacity {
            let dropped = state.deltas.len() as u64 + 1;
            state.deltas.clear();
            state.snapshot = Snapshot::CatchUp;
            self.overflows.fetch_add(1, Ordering::Relaxed);
            self.dropped.fetch_add(dropped, Ordering::Relaxed);
            tracing::warn!(
                listener = %self.name,
                capacity = self.capacity,
                "listener queue overflowed: backlog dropped, catching up from the cache"
            );
        } else {
            state.deltas.push_back(delta);
        }
        drop(state);
        self.ready.notify_one();
    }
}

#[derive(Debug)]
struct Registered {
    id: u64,
    queue: Arc<ListenerQueue>,
    resync: Option<tokio::task::JoinHandle<()>>,
}

/// Counters of one listener.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListenerStats {
    /// Deltas waiting in the queue.
    pub queued: usize,
    /// Times the queue overflowed into catch-up mode.
    pub overflows: u64,
    /// Deltas dropped because a cache snapshot replaced them.
    pub dropped: u64,
    /// Deltas not queued: outside the listener's scope (counted with every
    /// listener that shares its counter).
    pub outside_scope: u64,
}

/// Fans the deltas of one informer out to its listeners.
#[derive(Debug)]
pub struct SharedProcessor {
    gvk: Arc<GroupVersionKind>,
    cache: Indexer,
    listeners: Mutex<Vec<Registered>>,
    next_id: AtomicU64,
}

impl SharedProcessor {
    /// A processor for the informer of `gvk` whose cache is `cache`.
    #[must_use]
    pub fn new(gvk: GroupVersionKind, cache: Indexer) -> Self {
        Self {
            gvk: Arc::new(gvk),
            cache,
            listeners: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        }
    }

    fn listeners(&self) -> MutexGuard<'_, Vec<Registered>> {
        self.listeners.lock().recover()
    }

    /// Hands a delta to every listener. Never blocks on a listener.
    pub fn distribute(&self, delta: &Delta) {
        for listener in self.listeners().iter() {
            listener.queue.push(delta.clone());
        }
    }

    /// Adds a listener named `name` (for logs). It first receives the current
    /// cache as an initial list.
    ///
    /// A resync period needs a Tokio runtime.
    pub fn add_listener(self: &Arc<Self>, name: &str, options: &ListenerOptions) -> Listener {
        let queue = Arc::new(ListenerQueue {
            name: name.to_owned(),
            capacity: options.queue_capacity.max(1),
            scope: options.scope.clone(),
            outside_scope: Arc::clone(&options.outside_scope),
            state: Mutex::new(Buffered {
                deltas: VecDeque::new(),
                snapshot: Snapshot::Initial,
                pending: VecDeque::new(),
                closed: false,
            }),
            ready: Notify::new(),
            overflows: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            synced: AtomicBool::new(false),
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let resync = options.resync.map(|period| {
            let (queue, cache, gvk) = (
                Arc::clone(&queue),
                self.cache.scoped(&options.scope),
                Arc::clone(&self.gvk),
            );
            tokio::spawn(async move {
                let mut timer = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                loop {
                    timer.tick().await;
                    for object in cache.list_all() {
                        queue.push(Delta::new(DeltaType::Sync, Arc::clone(&gvk), object));
                    }
                }
            })
        });
        self.listeners().push(Registered {
            id,
            queue: Arc::clone(&queue),
            resync,
        });
        queue.ready.notify_one();
        Listener {
            id,
            queue,
            processor: Arc::clone(self),
            delivered: HashSet::new(),
        }
    }

    /// The number of listeners.
    #[must_use]
    pub fn listener_count(&self) -> usize {
        self.listeners().len()
    }

    fn remove(&self, id: u64) {
        let mut listeners = self.listeners();
        if let Some(position) = listeners.iter().position(|listener| listener.id == id) {
            let listener = listeners.swap_remove(position);
            listener.queue.lock().closed = true;
            listener.queue.ready.notify_one();
            if let Some(resync) = listener.resync {
                resync.abort();
            }
        }
    }
}

/// One listener's end of the processor (client-go's `processorListener`): its
/// queue of deltas. Dropping it removes the listener without disturbing the others.
#[derive(Debug)]
pub struct Listener {
    id: u64,
    queue: Arc<ListenerQueue>,
    processor: Arc<SharedProcessor>,
    /// The last state handed out per key: for tombstones after an overflow, and
    /// to skip a change a snapshot already delivered.
    delivered: HashSet<ByKey>,
}

impl Listener {
    /// The next deltas, at most `max`, in order; waits while there are none.
    /// `None` once the listener was removed.
    pub async fn next_batch(&mut self, max: usize) -> Option<Vec<Delta>> {
        loop {
            if let Some(batch) = self.try_next_batch(max) {
                return Some(batch);
            }
            if self.queue.lock().closed {
                return None;
            }
            self.queue.ready.notified().await;
        }
    }

    /// The next deltas, at most `max`, if any are ready; never waits. An empty
    /// answer is never returned: `None` means nothing is ready.
    pub fn try_next_batch(&mut self, max: usize) -> Option<Vec<Delta>> {
        let max = max.max(1);
        let queue = Arc::clone(&self.queue);
        let mut state = queue.lock();
        if state.closed {
            return None;
        }
        match std::mem::replace(&mut state.snapshot, Snapshot::None) {
            Snapshot::None => {}
            snapshot => {
                // Everything queued is already in the cache: the snapshot replaces it.
                state.deltas.clear();
                state.pending = self.snapshot(snapshot).into();
            }
        }
        let mut batch = Vec::with_capacity(max.min(state.pending.len() + state.deltas.len()));
        while batch.len() < max {
            let Some(delta) = state.pending.pop_front().or_else(|| state.deltas.pop_front()) else {
                break;
            };
            if self.record(&delta) {
                batch.push(delta);
            }
        }
        if state.pending.is_empty() {
            if !queue.synced.load(Ordering::Relaxed) {
                queue.synced.store(true, Ordering::Release);
            }
            // A snapshot's deltas are handed out: give back its room (a
            // delta per cached object), as the live queue's after a backlog.
            if state.pending.capacity() > 0 {
                state.pending = VecDeque::new();
            }
            if state.deltas.is_empty() && state.deltas.capacity() > SHRINK_ABOVE {
                state.deltas = VecDeque::new();
            }
        }
        drop(state);
        (!batch.is_empty()).then_some(batch)
    }

    /// The deltas that bring this listener to the cache's current state.
    fn snapshot(&self, kind: Snapshot) -> Vec<Delta> {
        let gvk = &self.processor.gvk;
        let objects = self.processor.cache.scoped(&self.queue.scope).list_all();
        let mut deltas: Vec<Delta> = Vec::with_capacity(objects.len());
        if kind == Snapshot::CatchUp {
            let present: std::collections::HashSet<&str> = objects.iter().map(|o| o.key()).collect();
            let mut gone: Vec<&Arc<CachedObject>> = self
                .delivered
                .iter()
                .filter(|last| !present.contains(last.0.key()))
                .map(|last| &last.0)
                .collect();
            gone.sort_by(|a, b| a.key().cmp(b.key()));
            deltas.extend(
                gone.into_iter()
                    .map(|last| Delta::new(DeltaType::Deleted, Arc::clone(gvk), Arc::clone(last))),
            );
        }
        for object in objects {
            deltas.push(match kind {
                Snapshot::Initial => Delta::new(DeltaType::Added, Arc::clone(gvk), object).in_initial_list(),
                _ => Delta::new(DeltaType::Replaced, Arc::clone(gvk), object),
            });
        }
        deltas
    }

    /// Notes what the listener is told; false for a change it already has.
    fn record(&mut self, delta: &Delta) -> bool {
        let key = delta.key();
        if delta.delta_type == DeltaType::Deleted {
            return self.delivered.remove(key) || delta.initial_list;
        }
        // One lookup: the state replaces the last one handed out, and an
        // added or updated state that is that very one is not handed out again.
        let last = self.delivered.replace(ByKey(Arc::clone(&delta.object)));
        !(matches!(delta.delta_type, DeltaType::Added | DeltaType::Updated)
            && last.is_some_and(|last| Arc::ptr_eq(&last.0, &delta.object)))
    }

    /// The state this listener has handed out so far, as `Added` deltas flagged
    /// initial-list, ordered by key: exactly what a consumer that handled every
    /// batch knows. A new consumer taking over the listener (a reloaded plugin)
    /// starts from it, then continues with the listener's next batch, so every
    /// change reaches exactly one of the two.
    #[must_use]
    pub fn replay(&self) -> Vec<Delta> {
        let mut known: Vec<&Arc<CachedObject>> = self.delivered.iter().map(|known| &known.0).collect();
        known.sort_by(|a, b| a.key().cmp(b.key()));
        known
            .into_iter()
            .map(|object| {
                Delta::new(DeltaType::Added, Arc::clone(&self.processor.gvk), Arc::clone(object)).in_initial_list()
            })
            .collect()
    }

    /// True once the listener has received its initial list.
    #[must_use]
    pub fn has_synced(&self) -> bool {
        self.queue.synced.load(Ordering::Acquire)
    }

    /// The listener's counters.
    #[must_use]
    pub fn stats(&self) -> ListenerStats {
        self.queue.stats()
    }

    /// A handle that reads the listener's counters from elsewhere, when they
    /// are asked for, rather than each time a batch is taken.
    #[must_use]
    pub fn probe(&self) -> QueueProbe {
        QueueProbe(Arc::clone(&self.queue))
    }
}

/// Reads a listener's counters: [`Listener::probe`].
#[derive(Debug, Clone)]
pub struct QueueProbe(Arc<ListenerQueue>);

impl QueueProbe {
    /// The listener's counters now.
    #[must_use]
    pub fn stats(&self) -> ListenerStats {
        self.0.stats()
    }
}

/// An object that hashes and compares by its cache key, so a set of them is a
/// map from key to the last state without a second copy of the key.
#[derive(Debug)]
struct ByKey(Arc<CachedObject>);

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for ByKey {}

impl std::hash::Hash for ByKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.key().hash(state);
    }
}

impl std::borrow::Borrow<str> for ByKey {
    fn borrow(&self) -> &str {
        self.0.key()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.processor.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::indexer::indexer;
    use serde_json::json;

    fn object(name: &str, rv: u32) -> Arc<CachedObject> {
        Arc::new(
            CachedObject::from_value(
                &json!({"metadata": {"name": name, "namespace": "a", "resourceVersion": rv.to_string()}}),
            )
            .unwrap(),
        )
    }

    fn setup() -> (
        Arc<SharedProcessor>,
        crate::indexer::IndexerWriter,
        Arc<GroupVersionKind>,
    ) {
        let (reader, writer) = indexer();
        let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
        (
            Arc::new(SharedProcessor::new(gvk.clone(), reader)),
            writer,
            Arc::new(gvk),
        )
    }

    /// Applies a change to the cache and distributes its delta, as an informer does.
    fn change(
        processor: &SharedProcessor,
        writer: &crate::indexer::IndexerWriter,
        gvk: &Arc<GroupVersionKind>,
        object: Arc<CachedObject>,
    ) {
        let delta = match writer.apply(Arc::clone(&object)) {
            Some(old) => Delta::updated(Arc::clone(gvk), old, object),
            None => Delta::new(DeltaType::Added, Arc::clone(gvk), object),
        };
        processor.distribute(&delta);
    }

    fn summary(batch: &[Delta]) -> Vec<(DeltaType, String, String)> {
        batch
            .iter()
            .map(|d| (d.delta_type, d.key().to_owned(), d.object.resource_version().to_owned()))
            .collect()
    }

    #[test]
    fn a_new_listener_gets_the_cache_as_an_initial_list_then_live_deltas() {
        let (processor, writer, gvk) = setup();
        change(&processor, &writer, &gvk, object("x", 1));
        let mut listener = processor.add_listener("h", &ListenerOptions::default());
        assert!(!listener.has_synced());
        change(&processor, &writer, &gvk, object("y", 2));
        let batch = listener.try_next_batch(10).unwrap();
        // y was cached before the snapshot was taken: it is part of it, once.
        assert_eq!(
            summary(&batch),
            [
                (DeltaType::Added, "a/x".into(), "1".into()),
                (DeltaType::Added, "a/y".into(), "2".into())
            ]
        );
        assert!(batch.iter().all(|d| d.initial_list));
        assert!(listener.has_synced());
        change(&processor, &writer, &gvk, object("x", 3));
        let batch = listener.try_next_batch(10).unwrap();
        assert_eq!(summary(&batch), [(DeltaType::Updated, "a/x".into(), "3".into())]);
        assert!(listener.try_next_batch(10).is_none());
    }

    #[test]
    fn a_state_the_snapshot_already_handed_out_is_not_handed_out_again() {
        let (processor, writer, gvk) = setup();
        let mut listener = processor.add_listener("h", &ListenerOptions::default());
        // Cached before the snapshot is taken, distributed after it.
        let x = object("x", 1);
        writer.apply(Arc::clone(&x));
        let batch = listener.try_next_batch(10).unwrap();
        assert_eq!(summary(&batch), [(DeltaType::Added, "a/x".into(), "1".into())]);
        processor.distribute(&Delta::new(DeltaType::Added, Arc::clone(&gvk), x));
        assert!(listener.try_next_batch(10).is_none());
        change(&processor, &writer, &gvk, object("x", 2));
        let batch = listener.try_next_batch(10).unwrap();
        assert_eq!(summary(&batch), [(DeltaType::Updated, "a/x".into(), "2".into())]);
    }

    #[test]
    fn a_scoped_listener_is_told_nothing_outside_its_namespaces() {
        let (processor, writer, gvk) = setup();
        let in_namespace = |namespace: &str, name: &str, rv: u32| {
            Arc::new(
                CachedObject::from_value(&json!({"metadata": {
                    "name": name, "namespace": namespace, "resourceVersion": rv.to_string()}}))
                .unwrap(),
            )
        };
        change(&processor, &writer, &gvk, in_namespace("a", "x", 1));
        change(&processor, &writer, &gvk, in_namespace("b", "x", 2));
        let mut scoped = processor.add_listener("a-only", &ListenerOptions::default().scope(Scope::only(["a"])));
        let mut everything = processor.add_listener("all", &ListenerOptions::default());
        let batch = scoped.try_next_batch(10).unwrap();
        assert_eq!(summary(&batch), [(DeltaType::Added, "a/x".into(), "1".into())]);
        assert_eq!(everything.try_next_batch(10).unwrap().len(), 2);
        change(&processor, &writer, &gvk, in_namespace("b", "y", 3));
        change(&processor, &writer, &gvk, in_namespace("a", "x", 4));
        let batch = scoped.try_next_batch(10).unwrap();
        assert_eq!(summary(&batch), [(DeltaType::Updated, "a/x".into(), "4".into())]);
        assert!(scoped.try_next_batch(10).is_none());
        assert_eq!(everything.try_next_batch(10).unwrap().len(), 2);
        // What the scope hid is counted (the initial list is the scoped
        // cache: nothing hidden there).
        assert_eq!(scoped.stats().outside_scope, 1);
        assert_eq!(everything.stats().outside_scope, 0);
    }

    #[test]
    fn a_replay_is_what_was_handed_out_not_what_is_queued() {
        let (processor, writer, gvk) = setup();
        change(&processor, &writer, &gvk, object("x", 1));
        change(&processor, &writer, &gvk, object("y", 2));
        let mut listener = processor.add_listener("h", &ListenerOptions::default());
        assert_eq!(listener.try_next_batch(10).unwrap().len(), 2);
        change(&processor, &writer, &gvk, object("x", 3));
        change(&processor, &writer, &gvk, object("y", 4));
        assert_eq!(
            summary(&listener.try_next_batch(1).unwrap()),
            [(DeltaType::Updated, "a/x".into(), "3".into())]
        );
        // y@4 is queued, not handed out: the replay holds y@2, and y@4 follows.
        let replay = listener.replay();
        assert_eq!(
            summary(&replay),
            [
                (DeltaType::Added, "a/x".into(), "3".into()),
                (DeltaType::Added, "a/y".into(), "2".into())
            ]
        );
        assert!(replay.iter().all(|delta| delta.initial_list));
        assert_eq!(
            summary(&listener.try_next_batch(10).unwrap()),
            [(DeltaType::Updated, "a/y".into(), "4".into())]
        );
    }

    #[test]
    fn a_slow_listener_overflows_into_catch_up_without_touching_a_fast_one() {
        let (processor, writer, gvk) = setup();
        let options = ListenerOptions::default().queue_capacity(8);
        let mut slow = processor.add_listener("slow", &options);
        // What a status reads when asked, away from the listener's thread.
        let probe = slow.probe();
        let mut fast = processor.add_listener("fast", &options);
        assert!(slow.try_next_batch(10).is_none() && fast.try_next_batch(10).is_none());
        change(&processor, &writer, &gvk, object("doomed", 1));
        assert_eq!(slow.try_next_batch(10).unwrap().len(), 1);

        let mut fast_seen = 0;
        for rv in 2..1000 {
            change(&processor, &writer, &gvk, object(&format!("o{}", rv % 20), rv));
            if rv == 500 {
                writer.delete("a/doomed");
                processor.distribute(&Delta::new(DeltaType::Deleted, Arc::clone(&gvk), object("doomed", 500)));
            }
            fast_seen += fast.try_next_batch(100).map_or(0, |batch| batch.len());
            // The slow listener never reads; its queue stays bounded.
            assert!(probe.stats().queued <= 8);
        }
        assert_eq!(fast_seen, 1 + 998 + 1, "the fast listener saw every change");
        assert!(probe.stats().overflows >= 1);

        // Catching up: a tombstone for what it knew and is gone, then the cache.
        let batch = slow.try_next_batch(1000).unwrap();
        assert_eq!(batch[0].delta_type, DeltaType::Deleted);
        assert_eq!(batch[0].key(), "a/doomed");
        let replaced: Vec<_> = batch[1..].iter().map(|d| (d.delta_type, d.key().to_owned())).collect();
        assert_eq!(replaced.len(), 20);
        assert!(replaced.iter().all(|(t, _)| *t == DeltaType::Replaced));
        assert_eq!(probe.stats().queued, 0);
        for delta in &batch[1..] {
            let cached = writer.reader().get(delta.key()).unwrap();
            assert_eq!(cached.resource_version(), delta.object.resource_version());
        }
    }

    #[test]
    fn removing_a_listener_stops_its_delivery_only() {
        let (processor, writer, gvk) = setup();
        let mut kept = processor.add_listener("kept", &ListenerOptions::default());
        let removed = processor.add_listener("removed", &ListenerOptions::default());
        assert_eq!(processor.listener_count(), 2);
        drop(removed);
        assert_eq!(processor.listener_count(), 1);
        change(&processor, &writer, &gvk, object("x", 1));
        assert_eq!(kept.try_next_batch(10).unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resync_period_queues_a_sync_for_every_cached_object() {
        let (processor, writer, gvk) = setup();
        change(&processor, &writer, &gvk, object("x", 1));
        change(&processor, &writer, &gvk, object("y", 2));
        let mut listener = processor.add_listener("h", &ListenerOptions::default().resync(Duration::from_secs(30)));
        assert_eq!(listener.next_batch(10).await.unwrap().len(), 2);
        let sync = tokio::time::timeout(Duration::from_secs(31), listener.next_batch(10))
            .await
            .expect("no resync within its period")
            .unwrap();
        assert_eq!(
            summary(&sync),
            [
                (DeltaType::Sync, "a/x".into(), "1".into()),
                (DeltaType::Sync, "a/y".into(), "2".into())
            ]
        );
    }
}
