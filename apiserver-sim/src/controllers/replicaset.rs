//! The ReplicaSet controller: as many pods as `spec.replicas`, made from the template (each with its first CPU usage in the metrics table), and a status that counts them.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::events::{self, Occurrence};
use super::{PodChoices, is_deleting, is_ready, omit_zero, owner_reference};
use crate::resources::ids;
use crate::status::Result;
use crate::store::{Preconditions, StoredObject, Transaction};

/// Who the ReplicaSet controller's Events say reported them.
const COMPONENT: &str = "replicaset-controller";

/// What a synced ReplicaSet holds, for its Deployment's status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// `spec.replicas`.
    pub(crate) desired: i64,
    /// Pods that exist and are not being deleted.
    pub(crate) replicas: i64,
    /// Of those, pods with the `Ready` condition.
    pub(crate) ready: i64,
}

/// Brings the ReplicaSet's pods to its `spec.replicas` and writes its status.
/// Answers its counts, `None` when it is gone or being deleted.
///
/// # Errors
///
/// When the store refuses a write.
pub(crate) fn sync(
    transaction: &mut Transaction<'_>,
    namespace: &str,
    name: &str,
    choices: &mut dyn PodChoices,
) -> Result<Option<Counts>> {
    let replicaset = match transaction.get(&ids::replicasets(), Some(namespace), name) {
        Ok(replicaset) if !is_deleting(&replicaset) => replicaset,
        Ok(_) => return Ok(None),
        Err(error) if error.code == 404 => return Ok(None),
        Err(error) => return Err(error),
    };
    let uid = replicaset.value["metadata"]["uid"].as_str().unwrap_or_default();
    let mut live: Vec<Arc<StoredObject>> = transaction
        .controlled_by(&ids::pods(), uid)?
        .into_iter()
        .filter(|pod| !is_deleting(pod))
        .collect();
    let desired = replicaset.value["spec"]["replicas"].as_i64().unwrap_or(1);

    let missing = desired - live.len() as i64;
    for _ in 0..missing.max(0) {
        let siblings: Vec<u32> = live
            .iter()
            .filter_map(|pod| transaction.metrics().pod_cpu(namespace, &pod.name))
            .collect();
        let pod = new_pod(&replicaset, &choices.node());
        let usage = choices.usage(&siblings);
        let pod = transaction.create(&ids::pods(), Some(namespace), pod)?;
        transaction.metrics().set_pod_cpu(namespace, &pod.name, usage);
        if choices.records_events() {
            let created = Occurrence::normal(COMPONENT, "SuccessfulCreate");
            events::record(transaction, &replicaset, created, &format!("Created pod: {}", pod.name))?;
        }
        live.push(pod);
    }
    if missing < 0 {
        // As the ReplicaSet controller ranks them: pods that are not ready go
        // first, then the newest.
        live.sort_by_key(|pod| (is_ready(pod), std::cmp::Reverse(pod.resource_version)));
        let surplus: Vec<_> = live.drain(..missing.unsigned_abs() as usize).collect();
        for pod in surplus {
            delete_pod(transaction, &pod)?;
            if choices.records_events() {
                let deleted = Occurrence::normal(COMPONENT, "SuccessfulDelete");
                events::record(transaction, &replicaset, deleted, &format!("Deleted pod: {}", pod.name))?;
            }
        }
    }

    let counts = Counts {
        desired,
        replicas: live.len() as i64,
        ready: live.iter().filter(|pod| is_ready(pod)).count() as i64,
    };
    let status = omit_zero(json!({
        "replicas": counts.replicas,
        "fullyLabeledReplicas": counts.replicas,
        "readyReplicas": counts.ready,
        "availableReplicas": counts.ready,
        "observedGeneration": replicaset.value["metadata"]["generation"],
    }));
    if replicaset.value.get("status") != Some(&status) {
        transaction.update(
            &ids::replicasets(),
            Some(namespace),
            name,
            json!({"status": status}),
            true,
        )?;
    }
    Ok(Some(counts))
}

/// A new pod of the ReplicaSet: its template, owned by it through a controller
/// reference, on `node`. The one place the emulation makes a pod of a
/// Deployment.
pub(crate) fn new_pod(replicaset: &StoredObject, node: &str) -> Value {
    let template = &replicaset.value["spec"]["template"];
    let mut spec = template["spec"].as_object().cloned().unwrap_or_default();
    spec.insert("nodeName".into(), json!(node));
    let mut pod = json!({
        "metadata": {
            "generateName": format!("{}-", replicaset.name),
            "labels": template["metadata"]["labels"].as_object().cloned().unwrap_or_else(Map::new),
            "ownerReferences": [owner_reference(replicaset)],
        },
        "spec": spec,
    });
    if let Some(annotations) = template["metadata"].get("annotations") {
        pod["metadata"]["annotations"] = annotations.clone();
    }
    pod
}

pub(super) fn delete_pod(transaction: &mut Transaction<'_>, pod: &StoredObject) -> Result<()> {
    match transaction.delete(
        &ids::pods(),
        pod.namespace.as_deref(),
        &pod.name,
        &Preconditions::default(),
    ) {
        Err(error) if error.code != 404 => Err(error),
        _ => Ok(()),
    }
}
