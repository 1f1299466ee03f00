//! The controllers a cluster runs beside its API server, as far as a workload needs them: Deployments get ReplicaSets, ReplicaSets get pods, pods start, statuses converge.
//!
//! [`run`] is one task, started with the server (see `SimConfig::controllers`),
//! so it serves every Deployment, whoever writes it: kube-rs, kubectl, a
//! plugin, or the synthetic workload. It follows the store's change feed (which
//! is never compacted) and, for each Deployment or ReplicaSet whose own objects
//! changed (a pod's status update that leaves its readiness is no such change),
//! runs one step that brings
//! it to its spec, finding what each owns through the store's index of
//! controller references:
//!
//! - the Deployment controller ([`deployment::sync`]): one ReplicaSet per pod
//!   template, scaled to the Deployment's `spec.replicas` (by any writer: an
//!   update, a patch, an apply or the `scale` subresource), older ones scaled to
//!   zero; then the Deployment's status (`replicas`, `updatedReplicas`,
//!   `readyReplicas`, `availableReplicas`, `unavailableReplicas`,
//!   `observedGeneration`, the `Available` and `Progressing` conditions);
//! - the ReplicaSet controller ([`replicaset::sync`]): pods made from the
//!   template, owned through a controller reference, each with a first CPU
//!   usage in the metrics table (`Store::metrics`), deleted not-ready-first
//!   then newest-first when there are too many; then the ReplicaSet's status;
//! - the garbage collector's part ([`collect_garbage`]): the ReplicaSets of a
//!   deleted Deployment and the pods of a deleted ReplicaSet, found by the uid
//!   in their controller reference, are deleted (background propagation; an
//!   `Orphan` propagation policy is not honoured);
//! - a kubelet stand-in ([`kubelet::start`]): a pod of a ReplicaSet is Running
//!   and Ready `pod_start_delay` after it appears. Pods created any other way are
//!   left as they are, and pods are deleted at once, without a grace period.
//!
//! A step runs in one store transaction, so no other writer interleaves with
//! it; the synthetic workload runs the same steps synchronously after its own
//! writes, which makes its changes land at once. Controller writes are recorded
//! in `managedFields` as `kube-controller-manager`, the kubelet's as `kubelet`.

pub(crate) mod deployment;
pub(crate) mod disruption;
pub(crate) mod events;
pub(crate) mod kubelet;
pub(crate) mod namespace;
pub(crate) mod replicaset;

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::Shared;
use crate::resources::ids;
use crate::status::Result;
use crate::store::{Event, EventType, Preconditions, Store, StoredObject, Transaction, WriteOptions};

/// The nodes pods are scheduled to, `node-0` to `node-7`; the synthetic
/// workload registers them (see `Workload::populate`).
pub(crate) const NODES: u64 = 8;

/// The field manager controller writes are recorded under.
pub(crate) const CONTROLLER_MANAGER: &str = "kube-controller-manager";
/// The field manager the kubelet stand-in's writes are recorded under.
pub(crate) const KUBELET: &str = "kubelet";

/// What a new pod needs that its template does not say: the node it runs on,
/// the CPU it uses and, once started, its IP.
pub(crate) trait PodChoices {
    /// The node a new pod is scheduled to.
    fn node(&mut self) -> String;
    /// A new pod's CPU usage in millicores; `siblings` are the usages of the
    /// ReplicaSet's other pods.
    fn usage(&mut self, siblings: &[u32]) -> u32;
    /// The IP of a pod that starts.
    fn pod_ip(&mut self) -> String;
    /// Whether the controllers record Events of what they do (scaling,
    /// creating and deleting pods). The server's controllers do; a
    /// workload's own steps do not, so that its object counts are its own.
    fn records_events(&self) -> bool {
        true
    }
}

/// The server's choices for pods it makes on its own: nodes in turn, the mean
/// usage of the pod's siblings (100 millicores for a first pod), IPs in order.
#[derive(Debug, Default)]
pub(crate) struct ServerChoices {
    pods: u64,
    ips: u64,
}

impl PodChoices for ServerChoices {
    fn node(&mut self) -> String {
        self.pods += 1;
        format!("node-{}", self.pods % NODES)
    }

    fn usage(&mut self, siblings: &[u32]) -> u32 {
        if siblings.is_empty() {
            100
        } else {
            let total: u64 = siblings.iter().map(|usage| u64::from(*usage)).sum();
            u32::try_from(total / siblings.len() as u64).unwrap_or(u32::MAX)
        }
    }

    fn pod_ip(&mut self) -> String {
        self.ips += 1;
        format!("10.244.{}.{}", (self.ips >> 8) % 250, self.ips % 250)
    }
}

/// Runs one Deployment's step (see [`deployment::sync`]) in its own transaction.
///
/// # Errors
///
/// When the store refuses a write.
pub(crate) fn sync_deployment(store: &Store, namespace: &str, name: &str, choices: &mut dyn PodChoices) -> Result<()> {
    let mut transaction = store.transaction(WriteOptions::default().field_manager(CONTROLLER_MANAGER));
    deployment::sync(&mut transaction, namespace, name, choices)
}

/// Runs the Deployment's step, starts its pods that are not running yet at once
/// (as populating a workload does, without the kubelet's delay), then runs the
/// step again so that the statuses catch up.
///
/// # Errors
///
/// When the store refuses a write.
pub(crate) fn start_pods_now(store: &Store, namespace: &str, name: &str, choices: &mut dyn PodChoices) -> Result<()> {
    sync_deployment(store, namespace, name, choices)?;
    let mut kubelet = store.transaction(WriteOptions::default().field_manager(KUBELET));
    for pod in pods_of(&kubelet, namespace, name)? {
        if kubelet::should_start(&pod) {
            kubelet::start(&mut kubelet, namespace, &pod.name, &choices.pod_ip())?;
        }
    }
    drop(kubelet);
    sync_deployment(store, namespace, name, choices)
}

/// The pods of a Deployment's ReplicaSets, found through their controller
/// references.
///
/// # Errors
///
/// When the store fails to read.
pub(crate) fn pods_of(transaction: &Transaction<'_>, namespace: &str, name: &str) -> Result<Vec<Arc<StoredObject>>> {
    let deployment = match transaction.get(&ids::deployments(), Some(namespace), name) {
        Ok(deployment) => deployment,
        Err(error) if error.code == 404 => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut pods = Vec::new();
    for replicaset in transaction.controlled_by(&ids::replicasets(), uid(&deployment))? {
        pods.extend(transaction.controlled_by(&ids::pods(), uid(&replicaset))?);
    }
    Ok(pods)
}

/// The garbage collector's part: deletes what the owner with this uid (now
/// deleted) controlled, and what that controlled in turn.
///
/// # Errors
///
/// When the store refuses a deletion.
pub(crate) fn collect_garbage(transaction: &mut Transaction<'_>, owner_uid: &str) -> Result<()> {
    for replicaset in transaction.controlled_by(&ids::replicasets(), owner_uid)? {
        match transaction.delete(
            &ids::replicasets(),
            replicaset.namespace.as_deref(),
            &replicaset.name,
            &Preconditions::default(),
        ) {
            Err(error) if error.code != 404 => return Err(error),
            _ => {}
        }
        collect_garbage(transaction, uid(&replicaset))?;
    }
    for pod in transaction.controlled_by(&ids::pods(), owner_uid)? {
        replicaset::delete_pod(transaction, &pod)?;
    }
    Ok(())
}

fn uid(object: &StoredObject) -> &str {
    object.value["metadata"]["uid"].as_str().unwrap_or_default()
}

/// The objects a change makes the controllers look at again.
#[derive(Debug, Default)]
struct Dirty {
    /// Deployments, by (namespace, name).
    deployments: BTreeSet<(String, String)>,
    /// ReplicaSets that no Deployment controls.
    replicasets: BTreeSet<(String, String)>,
    /// The uids of deleted Deployments and ReplicaSets, whose dependents go.
    deleted_owners: Vec<String>,
}

/// Runs the controllers until the server stops; `changes` is the store's feed of
/// Deployments, ReplicaSets and pods, taken when the server started.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut changes: mpsc::UnboundedReceiver<Arc<Event>>,
    pod_start_delay: Duration,
) {
    let mut controllers = Controllers::new(pod_start_delay);
    let mut stopping = shared.stopping.subscribe();
    // The namespaces that were there before the feed was taken.
    let existing = shared
        .store
        .snapshot(&ids::namespaces(), &crate::store::Filter::default())
        .map(|(namespaces, _)| namespaces)
        .unwrap_or_default();
    for found in existing {
        publish_namespace_objects(&shared.store, &found.name);
    }
    loop {
        let mut batch = Vec::new();
        tokio::select! {
            change = changes.recv() => match change {
                Some(change) => batch.push(change),
                None => return,
            },
            () = sleep_until(controllers.next_start()) => {}
            _ = stopping.changed() => return,
        }
        while let Ok(change) = changes.try_recv() {
            batch.push(change);
        }
        controllers.step(&shared.store, &batch, Instant::now());
    }
}

/// The controllers between two steps: the pods waiting for the kubelet.
#[derive(Debug)]
struct Controllers {
    choices: ServerChoices,
    pod_start_delay: Duration,
    /// Pods to start, by when: in order, since the delay is the same for all.
    starting: VecDeque<(Instant, String, String)>,
    scheduled: HashSet<(String, String)>,
}

impl Controllers {
    fn new(pod_start_delay: Duration) -> Self {
        Self {
            choices: ServerChoices::default(),
            pod_start_delay,
            starting: VecDeque::new(),
            scheduled: HashSet::new(),
        }
    }

    /// When the next pod is due to start.
    fn next_start(&self) -> Option<Instant> {
        self.starting.front().map(|(due, _, _)| *due)
    }

    /// One step at `now`: collects the garbage of deleted owners, starts the pods
    /// that are due, and syncs what the `changes` concern. Failures are logged;
    /// the next change of the object retries.
    fn step(&mut self, store: &Store, changes: &[Arc<Event>], now: Instant) {
        let mut dirty = Dirty::default();
        let mut budgets = BTreeSet::new();
        for change in changes {
            let kind = change.object.value["kind"].as_str().unwrap_or_default();
            if kind == "Namespace" && change.event_type == EventType::Added {
                publish_namespace_objects(store, &change.object.name);
            }
            if (kind == "Pod" && pod_changed(change)) || kind == "PodDisruptionBudget" {
                budgets.insert(change.object.namespace.clone().unwrap_or_default());
            }
            note(store, change, &mut dirty);
            let pod = &change.object;
            if pod.value["kind"] == "Pod" && change.event_type != EventType::Deleted && kubelet::should_start(pod) {
                let key = (pod.namespace.clone().unwrap_or_default(), pod.name.clone());
                if self.scheduled.insert(key.clone()) {
                    self.starting.push_back((now + self.pod_start_delay, key.0, key.1));
                }
            }
        }
        if !dirty.deleted_owners.is_empty() {
            let mut collector = store.transaction(WriteOptions::default());
            for owner in &dirty.deleted_owners {
                if let Err(error) = collect_garbage(&mut collector, owner) {
                    tracing::warn!(%error, owner, "garbage collection failed");
                }
            }
        }
        if self.next_start().is_some_and(|due| due <= now) {
            let mut kubelet = store.transaction(WriteOptions::default().field_manager(KUBELET));
            while let Some((_, namespace, name)) = self.starting.front().filter(|(due, _, _)| *due <= now).cloned() {
                self.starting.pop_front();
                self.scheduled.remove(&(namespace.clone(), name.clone()));
                if let Err(error) = kubelet::start(&mut kubelet, &namespace, &name, &self.choices.pod_ip()) {
                    tracing::warn!(%error, pod = %format!("{namespace}/{name}"), "the kubelet could not start a pod");
                }
            }
        }
        for namespace in &budgets {
            let mut transaction = store.transaction(WriteOptions::default().field_manager(CONTROLLER_MANAGER));
            if let Err(error) = disruption::sync_namespace(&mut transaction, namespace) {
                tracing::warn!(%error, namespace, "disruption budget status not written");
            }
        }
        for (namespace, name) in &dirty.deployments {
            if let Err(error) = sync_deployment(store, namespace, name, &mut self.choices) {
                tracing::warn!(%error, deployment = %format!("{namespace}/{name}"), "deployment sync failed");
            }
        }
        for (namespace, name) in &dirty.replicasets {
            let mut transaction = store.transaction(WriteOptions::default().field_manager(CONTROLLER_MANAGER));
            if let Err(error) = replicaset::sync(&mut transaction, namespace, name, &mut self.choices) {
                tracing::warn!(%error, replicaset = %format!("{namespace}/{name}"), "replicaset sync failed");
            }
        }
    }
}

/// Runs [`namespace::publish`] in its own transaction; a failure is logged.
pub(crate) fn publish_namespace_objects(store: &Store, name: &str) {
    let mut transaction = store.transaction(WriteOptions::default().field_manager(CONTROLLER_MANAGER));
    if let Err(error) = namespace::publish(&mut transaction, name) {
        tracing::warn!(%error, namespace = name, "the namespace's ServiceAccount and CA ConfigMap were not created");
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Marks what a change concerns: a Deployment for its own changes and its
/// ReplicaSets'; a ReplicaSet for its pods' when no Deployment controls it; the
/// dependents of a deleted owner. A pod change that leaves its existence,
/// readiness and owner as they were concerns nobody.
fn note(store: &Store, change: &Event, dirty: &mut Dirty) {
    let object = &change.object;
    let namespace = object.namespace.clone().unwrap_or_default();
    match object.value["kind"].as_str() {
        Some("Deployment" | "ReplicaSet") if change.event_type == EventType::Deleted => {
            dirty.deleted_owners.push(uid(object).to_owned());
        }
        Some("Deployment") => {
            dirty.deployments.insert((namespace, object.name.clone()));
        }
        Some("ReplicaSet") => note_replicaset(object, namespace, dirty),
        Some("Pod") if pod_changed(change) => {
            let Some(replicaset) = controller_of(object).filter(|owner| owner.kind == "ReplicaSet") else {
                return;
            };
            if let Ok(replicaset) = store.get(&ids::replicasets(), Some(&namespace), &replicaset.name) {
                note_replicaset(&replicaset, namespace, dirty);
            }
        }
        _ => {}
    }
}

/// Whether a pod change matters to its ReplicaSet: the pod came or went, or its
/// readiness, deletion or controller changed.
fn pod_changed(change: &Event) -> bool {
    let Some(previous) = &change.previous else {
        return true;
    };
    let now = &change.object;
    change.event_type == EventType::Deleted
        || is_ready(previous) != is_ready(now)
        || is_deleting(previous) != is_deleting(now)
        || previous.controller_uid != now.controller_uid
}

fn note_replicaset(replicaset: &StoredObject, namespace: String, dirty: &mut Dirty) {
    match controller_of(replicaset).filter(|owner| owner.kind == "Deployment") {
        Some(deployment) => {
            dirty.deployments.insert((namespace, deployment.name));
        }
        None => {
            dirty.replicasets.insert((namespace, replicaset.name.clone()));
        }
    }
}

/// The controller reference of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) uid: String,
}

/// The owner that controls the object, if any.
pub(crate) fn controller_of(object: &StoredObject) -> Option<Owner> {
    let owner = object.value["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|owner| owner["controller"].as_bool() == Some(true))?;
    Some(Owner {
        kind: owner["kind"].as_str()?.to_owned(),
        name: owner["name"].as_str()?.to_owned(),
        uid: owner["uid"].as_str().unwrap_or_default().to_owned(),
    })
}

/// A controller reference to `owner`.
fn owner_reference(owner: &StoredObject) -> Value {
    json!({
        "apiVersion": owner.value["apiVersion"], "kind": owner.value["kind"], "name": owner.name,
        "uid": owner.value["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
    })
}

fn is_deleting(object: &StoredObject) -> bool {
    object.value["metadata"].get("deletionTimestamp").is_some()
}

/// Whether a pod has the `Ready` condition.
pub(crate) fn is_ready(pod: &StoredObject) -> bool {
    pod.value["status"]["conditions"].as_array().is_some_and(|conditions| {
        conditions
            .iter()
            .any(|condition| condition["type"] == "Ready" && condition["status"] == "True")
    })
}

/// The status without its zero counts, as the API server serializes them
/// (`omitempty`).
fn omit_zero(mut status: Value) -> Value {
    if let Some(fields) = status.as_object_mut() {
        fields.retain(|_, value| value.as_i64() != Some(0));
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::built_in;
    use crate::store::PatchType;

    fn store_with_deployment(replicas: u32) -> Store {
        let store = Store::new(built_in(), 10_000);
        store
            .create(&ids::namespaces(), None, json!({"metadata": {"name": "shop"}}))
            .unwrap();
        store
            .create(
                &ids::deployments(),
                Some("shop"),
                json!({"metadata": {"name": "web"},
                       "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                                "template": {"metadata": {"labels": {"app": "web"}},
                                             "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}}),
            )
            .unwrap();
        store
    }

    fn drain(changes: &mut mpsc::UnboundedReceiver<Arc<Event>>) -> Vec<Arc<Event>> {
        let mut batch = Vec::new();
        while let Ok(change) = changes.try_recv() {
            batch.push(change);
        }
        batch
    }

    fn pods(store: &Store) -> Vec<Arc<StoredObject>> {
        pods_of(&store.transaction(WriteOptions::default()), "shop", "web").unwrap()
    }

    #[test]
    fn a_converged_deployment_needs_no_more_writes() {
        let store = store_with_deployment(3);
        let mut choices = ServerChoices::default();
        start_pods_now(&store, "shop", "web", &mut choices).unwrap();
        let rv = store.resource_version();
        sync_deployment(&store, "shop", "web", &mut choices).unwrap();
        assert_eq!(store.resource_version(), rv, "a second step wrote again");
        let status = &store.get(&ids::deployments(), Some("shop"), "web").unwrap().value["status"];
        assert_eq!(
            (status["readyReplicas"].as_i64(), status["updatedReplicas"].as_i64()),
            (Some(3), Some(3))
        );
    }

    #[test]
    fn new_pods_wait_for_the_kubelet_and_scaling_down_takes_them_first() {
        let store = store_with_deployment(2);
        let mut choices = ServerChoices::default();
        start_pods_now(&store, "shop", "web", &mut choices).unwrap();
        let running: Vec<String> = pods(&store).iter().map(|pod| pod.name.clone()).collect();

        store
            .patch(
                &ids::deployments(),
                Some("shop"),
                "web",
                PatchType::Merge,
                json!({"spec": {"replicas": 4}}),
                false,
            )
            .unwrap();
        sync_deployment(&store, "shop", "web", &mut choices).unwrap();
        let all = pods(&store);
        assert_eq!(all.len(), 4);
        assert_eq!(
            all.iter().filter(|pod| kubelet::should_start(pod)).count(),
            2,
            "two pods wait to start"
        );
        let status = &store.get(&ids::deployments(), Some("shop"), "web").unwrap().value["status"];
        assert_eq!(
            (status["replicas"].as_i64(), status["readyReplicas"].as_i64()),
            (Some(4), Some(2))
        );

        store
            .patch(
                &ids::deployments(),
                Some("shop"),
                "web",
                PatchType::Merge,
                json!({"spec": {"replicas": 2}}),
                false,
            )
            .unwrap();
        sync_deployment(&store, "shop", "web", &mut choices).unwrap();
        let left: Vec<String> = pods(&store).iter().map(|pod| pod.name.clone()).collect();
        assert_eq!(left, running, "the pods that never started went first");
    }

    #[test]
    fn the_pods_of_a_deleted_deployment_are_collected() {
        let store = store_with_deployment(2);
        let mut choices = ServerChoices::default();
        sync_deployment(&store, "shop", "web", &mut choices).unwrap();
        let deleted = store
            .delete(&ids::deployments(), Some("shop"), "web", &Preconditions::default())
            .unwrap();
        collect_garbage(&mut store.transaction(WriteOptions::default()), uid(&deleted)).unwrap();
        assert_eq!(store.count(&ids::replicasets()), 0);
        assert_eq!(store.count(&ids::pods()), 0);
    }

    #[test]
    fn a_step_starts_new_pods_once_the_start_delay_has_passed() {
        let store = store_with_deployment(0);
        let mut changes = store.feed(vec![ids::deployments(), ids::replicasets(), ids::pods()]);
        let mut controllers = Controllers::new(Duration::from_secs(2));
        store
            .patch(
                &ids::deployments(),
                Some("shop"),
                "web",
                PatchType::Merge,
                json!({"spec": {"replicas": 2}}),
                false,
            )
            .unwrap();
        let t0 = Instant::now();
        let batch = drain(&mut changes);
        controllers.step(&store, &batch, t0);
        // The step's own writes are the next batch: the new pods are scheduled.
        let batch = drain(&mut changes);
        controllers.step(&store, &batch, t0);
        assert_eq!(pods(&store).iter().filter(|pod| is_ready(pod)).count(), 0);
        assert_eq!(controllers.next_start(), Some(t0 + Duration::from_secs(2)));

        controllers.step(&store, &[], t0 + Duration::from_secs(2));
        assert_eq!(pods(&store).iter().filter(|pod| is_ready(pod)).count(), 2);
        let batch = drain(&mut changes);
        controllers.step(&store, &batch, t0 + Duration::from_secs(2));
        let status = &store.get(&ids::deployments(), Some("shop"), "web").unwrap().value["status"];
        assert_eq!(
            status["readyReplicas"].as_i64(),
            Some(2),
            "the status follows the started pods"
        );
        assert_eq!(controllers.next_start(), None);
    }
}
