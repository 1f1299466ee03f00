//! The Reflector: lists and watches one resource with kube-rs's watcher, keeps its
//! Indexer in step, and turns every change into client-go style deltas.
//!
//! The watch protocol (paging, streaming lists, bookmarks, 410 relists) is
//! kube-rs's [`watcher()`]; its back-off after a failure is client-go's
//! ([`crate::retry`]). On top of it the Reflector owns what client-go's
//! Reflector and DeltaFIFO own: comparing a relist with the cache so that
//! objects deleted while disconnected are reported as `Deleted` with their last
//! known state (tombstones), unchanged objects are not reported as updates, and
//! an object recreated under the same name (a new uid) is a delete plus an add,
//! never an update.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use futures::StreamExt;
use kube::api::{Api, ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;

use crate::Recover as _;
use crate::delta::{Delta, DeltaType};
use crate::indexer::IndexerWriter;
use crate::object::{CachedObject, Transform, WatchedObject};

/// What a Reflector lists and watches, and how it reports.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ReflectorConfig {
    /// Only this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// A label selector the server applies.
    pub label_selector: Option<String>,
    /// A field selector the server applies.
    pub field_selector: Option<String>,
    /// What to strip from objects before caching them.
    pub transform: Transform,
    /// Report unchanged objects of a relist as `Replaced` (client-go's behaviour
    /// for consumers that want every relisted object).
    pub replaced_deltas: bool,
    /// List with a streaming watch (`sendInitialEvents`) instead of paged lists;
    /// needs a server with the WatchList feature.
    pub streaming_lists: bool,
    /// Called with every watch error, after it is logged and counted.
    pub watch_error_hook: Option<WatchErrorHook>,
}

/// The signature of a watch error callback: the resource's kind and the error.
pub type WatchErrorFn = dyn Fn(&str, &watcher::Error) + Send + Sync;

/// A callback for watch errors.
#[derive(Clone)]
pub struct WatchErrorHook(pub Arc<WatchErrorFn>);

impl std::fmt::Debug for WatchErrorHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WatchErrorHook")
    }
}

/// Shared progress of a Reflector: whether its first list completed, and the
/// watch errors it survived.
#[derive(Debug, Default)]
pub struct ReflectorStatus {
    synced: AtomicBool,
    watch_errors: AtomicU64,
    gone: AtomicU64,
    lists: AtomicU64,
    /// When the last list completed, in milliseconds since the Unix epoch.
    last_sync_ms: AtomicU64,
    last_error: std::sync::Mutex<Option<String>>,
}

impl ReflectorStatus {
    /// True once the first list has been applied to the cache.
    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Watch errors (410s, dropped connections, refused requests) so far; each was
    /// followed by kube-rs's backoff and a re-watch or relist.
    pub fn watch_errors(&self) -> u64 {
        self.watch_errors.load(Ordering::Relaxed)
    }

    /// Watch errors that were 410 Gone: the watch's resourceVersion was too
    /// old, and the watcher listed again.
    pub fn gone(&self) -> u64 {
        self.gone.load(Ordering::Relaxed)
    }

    /// Lists completed: the first one and every relist.
    pub fn lists(&self) -> u64 {
        self.lists.load(Ordering::Relaxed)
    }

    /// When the last list completed.
    pub fn last_sync(&self) -> Option<std::time::SystemTime> {
        let ms = self.last_sync_ms.load(Ordering::Relaxed);
        (ms > 0).then(|| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
    }

    /// The last watch error, as kube-rs put it: what the server answered a
    /// list or watch it refused.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().recover().clone()
    }
}

/// The delta logic of a Reflector, independent of any server.
#[derive(Debug)]
pub(crate) struct DeltaMaker {
    gvk: Arc<GroupVersionKind>,
    writer: IndexerWriter,
    transform: Transform,
    replaced_deltas: bool,
    /// The objects of a relist in progress.
    relist: Option<Vec<Arc<CachedObject>>>,
    /// Until the first list completes, deltas are flagged as the initial list.
    initial: bool,
    /// The one namespace listed, when the cache is filled by one reflector
    /// per namespace: a relist replaces only that namespace's objects.
    namespace: Option<String>,
}

impl DeltaMaker {
    /// A delta maker writing into `writer`'s cache.
    #[must_use]
    pub(crate) fn new(
        gvk: GroupVersionKind,
        writer: IndexerWriter,
        transform: Transform,
        replaced_deltas: bool,
    ) -> Self {
        Self {
            gvk: Arc::new(gvk),
            writer,
            transform,
            replaced_deltas,
            relist: None,
            initial: true,
            namespace: None,
        }
    }

    /// Lists only `namespace`: a relist compares with and replaces that
    /// namespace's objects alone.
    #[must_use]
    pub(crate) fn within(mut self, namespace: Option<String>) -> Self {
        self.namespace = namespace;
        self
    }

    /// True while the first list is in progress.
    #[must_use]
    pub(crate) fn in_initial_list(&self) -> bool {
        self.initial
    }

    /// Applies one watcher event to the cache; returns the deltas it makes.
    pub(crate) fn step(&mut self, event: watcher::Event<CachedObject>) -> Vec<Delta> {
        match event {
            watcher::Event::Init => {
                self.relist = Some(Vec::new());
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                if let Some(object) = self.prepare(object) {
                    self.relist.get_or_insert_with(Vec::new).push(Arc::new(object));
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let deltas = self.replace(listed);
                self.initial = false;
                deltas
            }
            watcher::Event::Apply(object) => self
                .prepare(object)
                .map(|object| self.apply(object))
                .unwrap_or_default(),
            watcher::Event::Delete(object) => {
                let Some(object) = self.prepare(object) else {
                    return Vec::new();
                };
                let removed = self.writer.delete(object.key());
                // The server's final state is the freshest; fall back to the cache's.
                let last = match removed {
                    Some(removed) if object.resource_version().is_empty() => removed,
                    _ => Arc::new(object),
                };
                vec![self.delta(DeltaType::Deleted, last)]
            }
        }
    }

    fn prepare(&self, object: CachedObject) -> Option<CachedObject> {
        let key = Arc::clone(object.shared_key());
        match object
            .typed(&self.gvk)
            .and_then(|object| object.transformed(&self.transform))
        {
            Ok(object) => Some(object),
            Err(error) => {
                tracing::warn!(key = %key, %error, "object dropped: the transform failed");
                None
            }
        }
    }

    fn delta(&self, delta_type: DeltaType, object: Arc<CachedObject>) -> Delta {
        let delta = Delta::new(delta_type, Arc::clone(&self.gvk), object);
        if self.initial { delta.in_initial_list() } else { delta }
    }

    fn apply(&mut self, object: CachedObject) -> Vec<Delta> {
        let (object, old) = self.writer.apply_new(object);
        let mut deltas = Vec::new();
        self.compare(old, &object, false, &mut deltas);
        deltas
    }

    /// The deltas that take the cached state `old` to `new`: an add; a delete
    /// and an add for a new uid under the same name; an update; and for an
    /// unchanged object nothing, or `Replaced` in a relist when asked for.
    fn compare(&self, old: Option<Arc<CachedObject>>, new: &Arc<CachedObject>, relist: bool, deltas: &mut Vec<Delta>) {
        match old {
            None => deltas.push(self.delta(DeltaType::Added, Arc::clone(new))),
            Some(old) if old.uid() != new.uid() => {
                deltas.push(self.delta(DeltaType::Deleted, old));
                deltas.push(self.delta(DeltaType::Added, Arc::clone(new)));
            }
            Some(old) if old.resource_version() != new.resource_version() => {
                let delta = Delta::updated(Arc::clone(&self.gvk), old, Arc::clone(new));
                deltas.push(if self.initial { delta.in_initial_list() } else { delta });
            }
            Some(_) if relist && self.replaced_deltas => deltas.push(self.delta(DeltaType::Replaced, Arc::clone(new))),
            Some(_) => {}
        }
    }

    /// A relist: the listed objects replace the cache. What vanished is deleted
    /// with its last known state; what changed is updated; what is new is added.
    fn replace(&mut self, listed: Vec<Arc<CachedObject>>) -> Vec<Delta> {
        let mut previous: HashMap<String, Arc<CachedObject>> = self
            .writer
            .reader()
            .list_all()
            .into_iter()
            .filter(|object| self.namespace.is_none() || object.namespace() == self.namespace.as_deref())
            .map(|object| (object.key().to_owned(), object))
            .collect();
        let mut deltas = Vec::new();
        for object in &listed {
            self.compare(previous.remove(object.key()), object, true, &mut deltas);
        }
        let mut vanished: Vec<_> = previous.into_values().collect();
        vanished.sort_by(|a, b| a.key().cmp(b.key()));
        deltas.extend(vanished.into_iter().map(|old| self.delta(DeltaType::Deleted, old)));
        match &self.namespace {
            Some(namespace) => self.writer.replace_in(namespace, listed),
            None => self.writer.replace(listed),
        };
        deltas
    }
}

/// Where a Reflector's deltas go.
pub trait DeltaSink: Send {
    /// Takes one delta, after the cache holds it; false when nobody listens any
    /// more, which stops the Reflector.
    fn deliver(&mut self, delta: Delta) -> impl std::future::Future<Output = bool> + Send;
}

impl DeltaSink for mpsc::Sender<Delta> {
    async fn deliver(&mut self, delta: Delta) -> bool {
        self.send(delta).await.is_ok()
    }
}

impl DeltaSink for Arc<crate::processor::SharedProcessor> {
    async fn deliver(&mut self, delta: Delta) -> bool {
        self.distribute(&delta);
        true
    }
}

/// Lists and watches one resource until its delta receiver is dropped.
///
/// # Examples
///
/// ```no_run
/// # async fn example(client: kube::Client) {
/// use kinformer_informers::indexer::indexer;
/// use kinformer_informers::reflector::{Reflector, ReflectorConfig};
/// use kube::api::{ApiResource, GroupVersionKind};
///
/// let gvk = GroupVersionKind::gvk("", "v1", "Pod");
/// let (cache, writer) = indexer();
/// let (deltas, mut received) = tokio::sync::mpsc::channel(1024);
/// let reflector = Reflector::new(client, ApiResource::from_gvk(&gvk), ReflectorConfig::default(), writer);
/// tokio::spawn(reflector.run(deltas));
/// while let Some(delta) = received.recv().await {
///     println!("{} {} ({} cached)", delta.delta_type, delta.key(), cache.len());
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Reflector {
    api: Api<WatchedObject>,
    config: ReflectorConfig,
    maker: DeltaMaker,
    status: Arc<ReflectorStatus>,
}

impl Reflector {
    /// A Reflector for `resource`, writing into `writer`'s cache.
    #[must_use]
    pub fn new(client: kube::Client, resource: ApiResource, config: ReflectorConfig, writer: IndexerWriter) -> Self {
        let api = match &config.namespace {
            Some(namespace) => Api::namespaced_with(client, namespace, &resource),
            None => Api::all_with(client, &resource),
        };
        let gvk = GroupVersionKind::gvk(&resource.group, &resource.version, &resource.kind);
        let maker = DeltaMaker::new(gvk, writer, config.transform.clone(), config.replaced_deltas)
            .within(config.namespace.clone());
        Self {
            api,
            config,
            maker,
            status: Arc::default(),
        }
    }

    /// The shared status, to check `has_synced` and errors from elsewhere.
    #[must_use]
    pub fn status(&self) -> Arc<ReflectorStatus> {
        Arc::clone(&self.status)
    }

    /// Runs until `deltas` is closed. Watch errors are logged and counted; the
    /// watcher backs off and re-watches or relists by itself.
    pub async fn run(mut self, mut deltas: impl DeltaSink) {
        let mut config = watcher::Config::default();
        if let Some(selector) = &self.config.label_selector {
            config = config.labels(selector);
        }
        if let Some(selector) = &self.config.field_selector {
            config = config.fields(selector);
        }
        if self.config.streaming_lists {
            config = config.streaming_lists();
        }
        let resource = self.maker.gvk.kind.clone();
        let backoff = crate::retry::Backoff::default();
        let retry_in = backoff.next_delay();
        let mut events = watcher(self.api.clone(), config).backoff(backoff).boxed();
        let mut repeats = crate::retry::Repeats::default();
        let mut listed = 0_usize;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    self.status.watch_errors.fetch_add(1, Ordering::Relaxed);
                    if matches!(&error, watcher::Error::WatchError(status) if status.code == 410) {
                        self.status.gone.fetch_add(1, Ordering::Relaxed);
                    }
                    let failure = crate::retry::describe(&resource, &error);
                    if let Some(line) = repeats.note(&failure, retry_in.get()) {
                        tracing::warn!(resource, "{line}");
                    }
                    *self.status.last_error.lock().recover() = Some(failure);
                    if let Some(hook) = &self.config.watch_error_hook {
                        (hook.0)(&resource, &error);
                    }
                    continue;
                }
            };
            if matches!(event, watcher::Event::InitApply(_)) && self.maker.in_initial_list() {
                listed += 1;
                if listed.is_multiple_of(10_000) {
                    tracing::info!(resource, listed, "initial list in progress");
                }
            }
            let event = unwrapped(event);
            let done = matches!(event, watcher::Event::InitDone);
            for delta in self.maker.step(event) {
                tracing::trace!(resource, key = delta.key(), delta = %delta.delta_type, "delta");
                if !deltas.deliver(delta).await {
                    return;
                }
            }
            if done {
                repeats.clear();
                self.status.lists.fetch_add(1, Ordering::Relaxed);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX));
                self.status.last_sync_ms.store(now, Ordering::Relaxed);
            }
            if done && !self.status.has_synced() {
                self.status.synced.store(true, Ordering::Release);
                tracing::info!(resource, objects = listed, "initial list synced");
            }
        }
    }
}

/// The watcher's event with the object it carries, without the metadata only
/// the watcher reads.
fn unwrapped(event: watcher::Event<WatchedObject>) -> watcher::Event<CachedObject> {
    match event {
        watcher::Event::Apply(watched) => watcher::Event::Apply(watched.object),
        watcher::Event::Delete(watched) => watcher::Event::Delete(watched.object),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(watched) => watcher::Event::InitApply(watched.object),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::indexer::indexer;
    use serde_json::json;

    fn object(name: &str, uid: &str, rv: &str) -> CachedObject {
        CachedObject::from_value(&json!({
            "metadata": {"name": name, "namespace": "a", "uid": uid, "resourceVersion": rv}
        }))
        .unwrap()
    }

    fn maker(replaced: bool) -> DeltaMaker {
        let (_, writer) = indexer();
        DeltaMaker::new(
            GroupVersionKind::gvk("", "v1", "ConfigMap"),
            writer,
            Transform::default(),
            replaced,
        )
    }

    fn summary(deltas: &[Delta]) -> Vec<(DeltaType, String, String, bool)> {
        deltas
            .iter()
            .map(|d| {
                (
                    d.delta_type,
                    d.key().to_owned(),
                    d.object.resource_version().to_owned(),
                    d.initial_list,
                )
            })
            .collect()
    }

    fn list(maker: &mut DeltaMaker, objects: Vec<CachedObject>) -> Vec<Delta> {
        let mut deltas = maker.step(watcher::Event::Init);
        for object in objects {
            deltas.extend(maker.step(watcher::Event::InitApply(object)));
        }
        deltas.extend(maker.step(watcher::Event::InitDone));
        deltas
    }

    #[test]
    fn the_first_list_is_added_and_flagged_initial() {
        let mut maker = maker(false);
        let deltas = list(&mut maker, vec![object("x", "u1", "1"), object("y", "u2", "2")]);
        assert_eq!(
            summary(&deltas),
            [
                (DeltaType::Added, "a/x".into(), "1".into(), true),
                (DeltaType::Added, "a/y".into(), "2".into(), true)
            ]
        );
        let live = maker.step(watcher::Event::Apply(object("z", "u3", "3")));
        assert_eq!(summary(&live), [(DeltaType::Added, "a/z".into(), "3".into(), false)]);
    }

    #[test]
    fn list_items_without_their_type_get_it_as_watch_events_have_it() {
        let mut maker = maker(false);
        // kube-apiserver writes a built-in type's list items without kind and
        // apiVersion; its watch events carry them first.
        let deltas = list(&mut maker, vec![object("x", "u1", "1")]);
        let listed: serde_json::Value = serde_json::from_str(deltas[0].object.json()).unwrap();
        assert_eq!(
            (listed["kind"].as_str(), listed["apiVersion"].as_str()),
            (Some("ConfigMap"), Some("v1"))
        );
        assert!(
            deltas[0]
                .object
                .json()
                .starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata""#)
        );
        assert_eq!((deltas[0].key(), deltas[0].object.uid()), ("a/x", "u1"));
        let watched = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"y","namespace":"a","uid":"u2","resourceVersion":"2"},"data":{"k":"v"}}"#;
        let live = maker.step(watcher::Event::Apply(CachedObject::from_json(watched).unwrap()));
        assert_eq!(
            live[0].object.json(),
            watched,
            "an object with its type is kept as it is"
        );

        let (_, writer) = indexer();
        let mut apps = DeltaMaker::new(
            GroupVersionKind::gvk("apps", "v1", "Deployment"),
            writer,
            Transform::default(),
            false,
        );
        let deltas = list(&mut apps, vec![object("d", "u3", "3")]);
        let listed: serde_json::Value = serde_json::from_str(deltas[0].object.json()).unwrap();
        assert_eq!(listed["apiVersion"], "apps/v1");
    }

    #[test]
    fn updates_carry_the_old_state_and_duplicates_are_dropped() {
        let mut maker = maker(false);
        list(&mut maker, vec![object("x", "u1", "1")]);
        let deltas = maker.step(watcher::Event::Apply(object("x", "u1", "5")));
        assert_eq!(deltas.len(), 1);
        assert_eq!(deltas[0].delta_type, DeltaType::Updated);
        assert_eq!(deltas[0].old.as_ref().unwrap().resource_version(), "1");
        assert!(maker.step(watcher::Event::Apply(object("x", "u1", "5"))).is_empty());
    }

    #[test]
    fn deleted_while_disconnected_yields_a_tombstone() {
        let mut maker = maker(false);
        list(&mut maker, vec![object("x", "u1", "1"), object("y", "u2", "2")]);
        // The watch was down while y was deleted; the relist no longer has it.
        let deltas = list(&mut maker, vec![object("x", "u1", "1")]);
        assert_eq!(
            summary(&deltas),
            [(DeltaType::Deleted, "a/y".into(), "2".into(), false)]
        );
        assert!(maker.writer.reader().get("a/y").is_none());
    }

    #[test]
    fn a_recreated_object_is_a_delete_plus_an_add() {
        let mut maker = maker(false);
        list(&mut maker, vec![object("x", "u1", "1")]);
        let live = maker.step(watcher::Event::Apply(object("x", "u2", "4")));
        assert_eq!(
            summary(&live),
            [
                (DeltaType::Deleted, "a/x".into(), "1".into(), false),
                (DeltaType::Added, "a/x".into(), "4".into(), false)
            ]
        );
        let relisted = list(&mut maker, vec![object("x", "u3", "9")]);
        assert_eq!(relisted[0].delta_type, DeltaType::Deleted);
        assert_eq!(relisted[1].delta_type, DeltaType::Added);
        assert_eq!(relisted[1].object.uid(), "u3");
    }

    #[test]
    fn a_relist_reports_changes_but_no_spurious_updates() {
        let mut maker = maker(false);
        list(&mut maker, vec![object("x", "u1", "1"), object("y", "u2", "2")]);
        let deltas = list(&mut maker, vec![object("x", "u1", "1"), object("y", "u2", "7")]);
        assert_eq!(
            summary(&deltas),
            [(DeltaType::Updated, "a/y".into(), "7".into(), false)]
        );

        let mut replacing = self::maker(true);
        list(&mut replacing, vec![object("x", "u1", "1")]);
        let deltas = list(&mut replacing, vec![object("x", "u1", "1")]);
        assert_eq!(
            summary(&deltas),
            [(DeltaType::Replaced, "a/x".into(), "1".into(), false)]
        );
    }

    #[test]
    fn a_delete_reports_the_final_state() {
        let mut maker = maker(false);
        list(&mut maker, vec![object("x", "u1", "1")]);
        let deltas = maker.step(watcher::Event::Delete(object("x", "u1", "8")));
        assert_eq!(
            summary(&deltas),
            [(DeltaType::Deleted, "a/x".into(), "8".into(), false)]
        );
        assert!(maker.writer.reader().is_empty());
    }

    #[test]
    fn reflectors_of_several_namespaces_fill_one_cache_and_relist_only_their_own() {
        let in_namespace = |namespace: &str, name: &str, rv: &str| {
            CachedObject::from_value(&json!({
                "metadata": {"name": name, "namespace": namespace, "uid": format!("{namespace}-{name}"), "resourceVersion": rv}
            }))
            .unwrap()
        };
        let (cache, writer) = indexer();
        let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
        let maker = |namespace: &str| {
            DeltaMaker::new(gvk.clone(), writer.for_namespace(), Transform::default(), false)
                .within(Some(namespace.to_owned()))
        };
        let (mut a, mut b) = (maker("a"), maker("b"));
        list(&mut a, vec![in_namespace("a", "x", "1"), in_namespace("a", "y", "2")]);
        list(&mut b, vec![in_namespace("b", "x", "3")]);
        assert_eq!(cache.len(), 3);
        // b relists without its object: only b's is deleted; a's stay, unreported.
        let deltas = list(&mut b, Vec::new());
        assert_eq!(
            summary(&deltas),
            [(DeltaType::Deleted, "b/x".into(), "3".into(), false)]
        );
        let keys: Vec<String> = cache.list_all().iter().map(|object| object.key().to_owned()).collect();
        assert_eq!(keys, ["a/x", "a/y"]);
        // a relists one changed and one gone.
        let deltas = list(&mut a, vec![in_namespace("a", "x", "4")]);
        assert_eq!(
            summary(&deltas),
            [
                (DeltaType::Updated, "a/x".into(), "4".into(), false),
                (DeltaType::Deleted, "a/y".into(), "2".into(), false)
            ]
        );
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.by_index("namespace", "a", 10).unwrap().objects.len(), 1);
        assert!(cache.by_index("namespace", "b", 10).unwrap().objects.is_empty());
    }
}
