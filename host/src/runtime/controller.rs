//! A controller's keys: which primary objects each delta leads to, and the
//! workqueue they wait in (client-go's, [`crate::workqueue`]), kept across a
//! controller's restarts and reloads.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::delta::Delta;
use crate::index::FieldPath;
use crate::indexer::Indexer;
use crate::object::CachedObject;
use crate::registration::ControllerSpec;
use crate::selector::Selector;
use crate::workqueue::{RateLimiterConfig, WorkQueue, WorkQueueStats};

/// The primary keys a delta leads to, sorted: the object's own key for the
/// primary resource; the controller owner's key for an owned resource (old and
/// new owner for an update); the primary objects found through each mapping's
/// index (by the names the controller gave its indexes), in the object's
/// namespace. `primary` is the controller's view of its primary objects.
#[must_use]
pub fn keys_for(delta: &Delta, spec: &ControllerSpec, primary: &Indexer) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let states = std::iter::once(&delta.object).chain(delta.old.as_ref());
    if *delta.gvk == spec.primary {
        keys.insert(delta.object.key().to_owned());
        return keys;
    }
    if spec.owns.contains(&delta.gvk) {
        for state in states.clone() {
            keys.extend(controller_owner(state, spec));
        }
    }
    for mapping in spec.maps.iter().filter(|mapping| mapping.gvk == *delta.gvk) {
        let Ok(path) = FieldPath::parse(&mapping.field_path) else {
            continue;
        };
        for state in states.clone() {
            for found in path.values_in(state.json()) {
                let Ok(listing) = primary.by_index(&mapping.index, &found, usize::MAX) else {
                    continue;
                };
                keys.extend(
                    listing
                        .objects
                        .iter()
                        .filter(|object| object.namespace() == state.namespace())
                        .map(|object| object.key().to_owned()),
                );
            }
        }
    }
    keys
}

/// The key of the object's controller owner, when that owner is of the
/// primary resource.
fn controller_owner(object: &CachedObject, spec: &ControllerSpec) -> Option<String> {
    let api_version = spec.primary.api_version();
    let owner = object
        .owner_references()
        .find(|owner| owner.controller && owner.kind == spec.primary.kind && owner.api_version == api_version)?;
    Some(match object.namespace() {
        Some(namespace) => format!("{namespace}/{}", owner.name),
        None => owner.name.to_owned(),
    })
}

/// A controller's workqueue and what feeds it.
#[derive(Debug)]
pub(super) struct Keys {
    queue: WorkQueue<String>,
    spec: ControllerSpec,
    primary: Indexer,
    next_resync: Option<Instant>,
}

impl Keys {
    /// An empty queue for `spec`, whose primary objects are in `primary`.
    pub(super) fn new(spec: ControllerSpec, primary: Indexer) -> Self {
        let mut keys = Self {
            queue: WorkQueue::new(RateLimiterConfig::default()),
            spec,
            primary,
            next_resync: None,
        };
        keys.schedule_resync();
        keys
    }

    /// Follows the next version: its spec and primary cache; what is queued stays.
    pub(super) fn retarget(&mut self, spec: ControllerSpec, primary: Indexer) {
        self.spec = spec;
        self.primary = primary;
        self.schedule_resync();
    }

    fn schedule_resync(&mut self) {
        self.next_resync = self.spec.resync.map(|period| Instant::now() + period);
    }

    /// Queues the keys a batch of deltas leads to.
    pub(super) fn enqueue(&self, batch: &[Delta]) {
        for delta in batch {
            for key in keys_for(delta, &self.spec, &self.primary) {
                self.queue.add(key);
            }
        }
    }

    /// Queues every primary key (after a reload, a restart, or at a resync).
    pub(super) fn enqueue_all(&self) -> usize {
        let all = self.primary.list(None, &Selector::default(), usize::MAX);
        for object in &all.objects {
            self.queue.add(object.key().to_owned());
        }
        all.objects.len()
    }

    /// When the next resync is due, if the controller asked for them.
    pub(super) fn resync_due(&self) -> Option<Instant> {
        self.next_resync
    }

    /// Runs a due resync: every primary key queued, the next one scheduled.
    pub(super) fn resync(&mut self) {
        let queued = self.enqueue_all();
        tracing::debug!(keys = queued, "controller resync");
        self.schedule_resync();
    }

    /// The queue the worker takes keys from.
    pub(super) fn queue(&self) -> &WorkQueue<String> {
        &self.queue
    }

    /// After a reconcile: forgets the key's failures, or retries it with
    /// backoff after an error; requeues it when the controller asked to.
    pub(super) fn finished(&self, key: &String, outcome: Result<Option<Duration>, ()>) {
        match outcome {
            Ok(requeue) => {
                self.queue.forget(key);
                if let Some(delay) = requeue {
                    self.queue.add_after(key.clone(), delay);
                }
            }
            Err(()) => self.queue.add_rate_limited(key.clone()),
        }
        self.queue.done(key);
    }

    /// The queue's counters.
    pub(super) fn stats(&self) -> WorkQueueStats {
        self.queue.stats()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kube::api::GroupVersionKind;
    use serde_json::json;

    use super::*;
    use crate::delta::DeltaType;
    use crate::indexer::indexer;
    use crate::registration::KeyMapping;

    fn gvk(group: &str, kind: &str) -> GroupVersionKind {
        GroupVersionKind::gvk(group, "v1", kind)
    }

    fn object(value: serde_json::Value) -> Arc<CachedObject> {
        Arc::new(CachedObject::from_value(&value).unwrap())
    }

    fn delta(kind: &GroupVersionKind, object: Arc<CachedObject>) -> Delta {
        Delta::new(DeltaType::Added, Arc::new(kind.clone()), object)
    }

    /// A controller of `example/v1 Scaler`, owning Pods, with ConfigMaps mapped
    /// through the primary's `config` index over `spec.configName`.
    fn spec() -> ControllerSpec {
        ControllerSpec {
            primary: gvk("example", "Scaler"),
            owns: vec![gvk("", "Pod")],
            maps: vec![KeyMapping {
                gvk: gvk("", "ConfigMap"),
                index: "config".into(),
                field_path: "metadata.name".into(),
            }],
            resync: None,
        }
    }

    fn primaries() -> Indexer {
        let (reader, writer) = indexer();
        writer.add_index("config", "spec.configName").unwrap();
        for (namespace, name, config) in [("a", "one", "shared"), ("a", "two", "shared"), ("b", "three", "shared")] {
            writer.apply(object(json!({
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"configName": config}
            })));
        }
        reader
    }

    fn keys(delta: &Delta) -> Vec<String> {
        keys_for(delta, &spec(), &primaries()).into_iter().collect()
    }

    #[test]
    fn a_primary_object_is_its_own_key() {
        let scaler = object(json!({"metadata": {"name": "one", "namespace": "a"}}));
        assert_eq!(keys(&delta(&gvk("example", "Scaler"), scaler)), ["a/one"]);
    }

    #[test]
    fn an_owned_object_leads_to_its_controller_owner_only() {
        let owned = |controller: bool, kind: &str| {
            object(json!({"metadata": {"name": "p", "namespace": "a", "ownerReferences": [
                {"apiVersion": "example/v1", "kind": kind, "name": "one", "uid": "u1", "controller": controller}
            ]}}))
        };
        let pods = gvk("", "Pod");
        assert_eq!(keys(&delta(&pods, owned(true, "Scaler"))), ["a/one"]);
        assert!(keys(&delta(&pods, owned(false, "Scaler"))).is_empty());
        assert!(keys(&delta(&pods, owned(true, "ReplicaSet"))).is_empty());
    }

    #[test]
    fn an_update_that_changes_the_owner_enqueues_both_owners() {
        let with_owner = |name: &str| {
            object(json!({"metadata": {"name": "p", "namespace": "a", "ownerReferences": [
                {"apiVersion": "example/v1", "kind": "Scaler", "name": name, "uid": name, "controller": true}
            ]}}))
        };
        let update = Delta::updated(Arc::new(gvk("", "Pod")), with_owner("one"), with_owner("two"));
        assert_eq!(keys(&update), ["a/one", "a/two"]);
    }

    #[test]
    fn a_mapped_object_leads_to_the_primaries_of_its_namespace_found_by_index() {
        let config = object(json!({"metadata": {"name": "shared", "namespace": "a"}}));
        assert_eq!(keys(&delta(&gvk("", "ConfigMap"), config)), ["a/one", "a/two"]);
        let unrelated = object(json!({"metadata": {"name": "other", "namespace": "a"}}));
        assert!(keys(&delta(&gvk("", "ConfigMap"), unrelated)).is_empty());
    }

    #[test]
    fn a_resource_neither_owned_nor_mapped_leads_nowhere() {
        let service = object(json!({"metadata": {"name": "shared", "namespace": "a"}}));
        assert!(keys(&delta(&gvk("", "Service"), service)).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn keys_queued_by_many_deltas_are_handed_out_once_and_retried_with_backoff() {
        let keys = Keys::new(spec(), primaries());
        let scaler = object(json!({"metadata": {"name": "one", "namespace": "a"}}));
        let batch = vec![delta(&gvk("example", "Scaler"), scaler); 5];
        keys.enqueue(&batch);
        assert_eq!(keys.queue().len(), 1);
        let key = keys.queue().get().await.unwrap();
        assert_eq!(key, "a/one");
        keys.finished(&key, Err(()));
        assert_eq!(keys.queue().num_requeues(&key), 1);
        assert!(keys.queue().try_get().is_none(), "retried before its backoff");
        tokio::time::sleep(Duration::from_millis(10)).await;
        let again = keys.queue().get().await.unwrap();
        keys.finished(&again, Ok(None));
        assert_eq!(keys.queue().num_requeues(&again), 0);
        assert_eq!(keys.enqueue_all(), 3);
        assert_eq!(keys.queue().len(), 3);
    }
}
