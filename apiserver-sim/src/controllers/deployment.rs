//! The Deployment controller: a ReplicaSet per pod template, scaled to `spec.replicas`, and a status that follows.
//!
//! A changed template gets a new ReplicaSet at the next revision
//! (`deployment.kubernetes.io/revision`, on the Deployment and its ReplicaSets,
//! as `kubectl rollout history` and `undo` read it) and the old ones are
//! scaled to zero at once (as the `Recreate` strategy does; a real
//! `RollingUpdate` moves over gradually). A template rolled back to makes its
//! ReplicaSet the newest revision again; old ReplicaSets past
//! `revisionHistoryLimit` are deleted. Each scaling is an Event
//! (`ScalingReplicaSet`).

use serde_json::{Map, Value, json};

use super::events::{self, Occurrence};
use super::replicaset::{self, Counts};
use super::{PodChoices, is_deleting, omit_zero, owner_reference};
use crate::resources::ids;
use crate::status::Result;
use crate::store::{PatchType, Preconditions, StoredObject, Transaction, now_rfc3339};

/// The label a ReplicaSet and its pods carry with their template's hash.
const TEMPLATE_HASH: &str = "pod-template-hash";
/// The annotation of a Deployment's revision, on it and on its ReplicaSets,
/// which `kubectl rollout history` and `undo` read.
const REVISION: &str = "deployment.kubernetes.io/revision";
/// The annotation a ReplicaSet takes from its Deployment, which
/// `kubectl rollout history` prints as the change cause.
const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";
/// Who the Deployment controller's Events say reported them.
const COMPONENT: &str = "deployment-controller";

/// Brings the Deployment's ReplicaSets and their pods to its spec and writes its
/// status.
///
/// # Errors
///
/// When the store refuses a write.
pub(crate) fn sync(
    transaction: &mut Transaction<'_>,
    namespace: &str,
    name: &str,
    choices: &mut dyn PodChoices,
) -> Result<()> {
    let deployment = match transaction.get(&ids::deployments(), Some(namespace), name) {
        Ok(deployment) if !is_deleting(&deployment) => deployment,
        Ok(_) => return Ok(()),
        Err(error) if error.code == 404 => return Ok(()),
        Err(error) => return Err(error),
    };
    let uid = deployment.value["metadata"]["uid"].as_str().unwrap_or_default();
    let owned = transaction.controlled_by(&ids::replicasets(), uid)?;

    let spec = &deployment.value["spec"];
    let desired = spec["replicas"].as_i64().unwrap_or(1);
    let hash = template_hash(&spec["template"]);
    let newest = owned.iter().map(|rs| revision(rs)).max().unwrap_or(0);
    let current = match owned.iter().find(|rs| rs.labels.get(TEMPLATE_HASH) == Some(&hash)) {
        Some(current) => {
            // A template rolled back to: its ReplicaSet becomes the newest revision.
            if revision(current) < newest {
                let bumped = (newest + 1).to_string();
                transaction.patch(
                    &ids::replicasets(),
                    Some(namespace),
                    &current.name,
                    PatchType::Merge,
                    json!({"metadata": {"annotations": {REVISION: bumped}}}),
                    false,
                )?;
            }
            current.name.clone()
        }
        None => {
            let replicaset = new_replicaset(&deployment, &hash, desired, newest + 1);
            transaction
                .create(&ids::replicasets(), Some(namespace), replicaset)?
                .name
                .clone()
        }
    };
    let current_revision = revision(&*transaction.get(&ids::replicasets(), Some(namespace), &current)?).to_string();
    if deployment.value["metadata"]["annotations"][REVISION].as_str() != Some(current_revision.as_str()) {
        transaction.patch(
            &ids::deployments(),
            Some(namespace),
            name,
            PatchType::Merge,
            json!({"metadata": {"annotations": {REVISION: current_revision}}}),
            false,
        )?;
    }
    let mut names: Vec<String> = owned.iter().map(|rs| rs.name.clone()).collect();
    if !names.contains(&current) {
        names.push(current.clone());
    }

    let mut total = Counts::default();
    let mut updated = Counts::default();
    for replicaset_name in &names {
        let replicas = if *replicaset_name == current { desired } else { 0 };
        let replicaset = transaction.get(&ids::replicasets(), Some(namespace), replicaset_name)?;
        let before = replicaset.value["spec"]["replicas"].as_i64().unwrap_or(0);
        if before != replicas {
            transaction.patch(
                &ids::replicasets(),
                Some(namespace),
                replicaset_name,
                PatchType::Merge,
                json!({"spec": {"replicas": replicas},
                       "metadata": {"annotations": {"deployment.kubernetes.io/desired-replicas": desired.to_string()}}}),
                false,
            )?;
            if choices.records_events() {
                let direction = if replicas > before { "up" } else { "down" };
                let message = format!("Scaled {direction} replica set {replicaset_name} to {replicas} from {before}");
                let occurrence = Occurrence::normal(COMPONENT, "ScalingReplicaSet");
                events::record(transaction, &deployment, occurrence, &message)?;
            }
        }
        let Some(counts) = replicaset::sync(transaction, namespace, replicaset_name, choices)? else {
            continue;
        };
        total.desired += counts.desired;
        total.replicas += counts.replicas;
        total.ready += counts.ready;
        if *replicaset_name == current {
            updated = counts;
        }
    }

    clean_up_old_revisions(transaction, &deployment, &current)?;

    let status = status(&deployment, &current, desired, total, updated);
    if deployment.value.get("status") != Some(&status) {
        transaction.update(
            &ids::deployments(),
            Some(namespace),
            name,
            json!({"status": status}),
            true,
        )?;
    }
    Ok(())
}

/// A ReplicaSet's revision: its `deployment.kubernetes.io/revision`, 0 when it has none.
fn revision(replicaset: &StoredObject) -> u64 {
    replicaset.value["metadata"]["annotations"][REVISION]
        .as_str()
        .and_then(|revision| revision.parse().ok())
        .unwrap_or(0)
}

/// Deletes the old ReplicaSets, scaled down and without pods, beyond the
/// Deployment's `revisionHistoryLimit` (10 unless set), oldest revision first.
fn clean_up_old_revisions(transaction: &mut Transaction<'_>, deployment: &StoredObject, current: &str) -> Result<()> {
    let limit = deployment.value["spec"]["revisionHistoryLimit"].as_u64().unwrap_or(10);
    let uid = deployment.value["metadata"]["uid"].as_str().unwrap_or_default();
    let mut old: Vec<_> = transaction
        .controlled_by(&ids::replicasets(), uid)?
        .into_iter()
        .filter(|rs| rs.name != current && !is_deleting(rs))
        .collect();
    let surplus = old.len().saturating_sub(usize::try_from(limit).unwrap_or(usize::MAX));
    if surplus == 0 {
        return Ok(());
    }
    old.sort_by_key(|rs| revision(rs));
    for replicaset in old.into_iter().take(surplus) {
        let idle = replicaset.value["spec"]["replicas"].as_i64().unwrap_or(0) == 0
            && replicaset.value["status"]["replicas"].as_i64().unwrap_or(0) == 0;
        if idle {
            transaction.delete(
                &ids::replicasets(),
                replicaset.namespace.as_deref(),
                &replicaset.name,
                &Preconditions::default(),
            )?;
        }
    }
    Ok(())
}

/// The ReplicaSet of the Deployment's current template, at `revision`: its
/// template and selector with the hash label, the Deployment's change cause.
fn new_replicaset(deployment: &StoredObject, hash: &str, replicas: i64, revision: u64) -> Value {
    let spec = &deployment.value["spec"];
    let mut template = spec["template"].clone();
    let mut labels = template["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    labels.insert(TEMPLATE_HASH.into(), json!(hash));
    template["metadata"]["labels"] = Value::Object(labels.clone());
    let mut selector = spec["selector"].clone();
    let mut match_labels = selector["matchLabels"].as_object().cloned().unwrap_or_else(Map::new);
    match_labels.insert(TEMPLATE_HASH.into(), json!(hash));
    selector["matchLabels"] = Value::Object(match_labels);
    let mut annotations = json!({
        "deployment.kubernetes.io/desired-replicas": replicas.to_string(),
        "deployment.kubernetes.io/max-replicas": (replicas + (replicas + 3) / 4).to_string(),
        REVISION: revision.to_string(),
    });
    if let Some(cause) = deployment.value["metadata"]["annotations"][CHANGE_CAUSE].as_str() {
        annotations[CHANGE_CAUSE] = json!(cause);
    }
    json!({
        "metadata": {
            "name": format!("{}-{hash}", deployment.name),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(deployment)],
        },
        "spec": {"replicas": replicas, "selector": selector, "template": template},
    })
}

/// The Deployment's status, from its ReplicaSets' counts; condition times move
/// only when a condition changes.
fn status(deployment: &StoredObject, current: &str, desired: i64, total: Counts, updated: Counts) -> Value {
    let previous = &deployment.value["status"]["conditions"];
    let max_unavailable = desired / 4;
    let available = total.ready >= desired - max_unavailable;
    let complete = updated.replicas == desired && updated.ready == desired && total.replicas == desired;
    let conditions = [
        condition(
            previous,
            "Available",
            available,
            if available {
                (
                    "MinimumReplicasAvailable",
                    "Deployment has minimum availability.".to_owned(),
                )
            } else {
                (
                    "MinimumReplicasUnavailable",
                    "Deployment does not have minimum availability.".to_owned(),
                )
            },
        ),
        condition(
            previous,
            "Progressing",
            true,
            if complete {
                (
                    "NewReplicaSetAvailable",
                    format!("ReplicaSet \"{current}\" has successfully progressed."),
                )
            } else {
                ("ReplicaSetUpdated", format!("ReplicaSet \"{current}\" is progressing."))
            },
        ),
    ];
    let mut status = omit_zero(json!({
        "observedGeneration": deployment.value["metadata"]["generation"],
        "replicas": total.replicas,
        "updatedReplicas": updated.replicas,
        "readyReplicas": total.ready,
        "availableReplicas": total.ready,
        "unavailableReplicas": (total.desired - total.ready).max(0),
    }));
    status["conditions"] = json!(conditions);
    status
}

/// A condition, keeping the previous one's times unless it changed.
fn condition(previous: &Value, kind: &str, status: bool, (reason, message): (&str, String)) -> Value {
    let status = if status { "True" } else { "False" };
    let before = previous
        .as_array()
        .and_then(|conditions| conditions.iter().find(|condition| condition["type"] == kind));
    let now = now_rfc3339();
    let same_status = before.is_some_and(|before| before["status"] == status);
    let same_reason =
        same_status && before.is_some_and(|before| before["reason"] == reason && before["message"] == message);
    let transition = match before {
        Some(before) if same_status => before["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    let update = match before {
        Some(before) if same_reason => before["lastUpdateTime"].clone(),
        _ => json!(now),
    };
    json!({
        "type": kind, "status": status, "reason": reason, "message": message,
        "lastUpdateTime": update, "lastTransitionTime": transition,
    })
}

/// The hash a ReplicaSet of this template is named and labelled with: FNV-1a of
/// the template, in the API server's alphabet for generated names.
fn template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = serde_json::to_vec(template).expect("a JSON value serializes");
    let hash = bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    });
    hash.to_string()
        .bytes()
        .map(|digit| ALPHABET[usize::from(digit) % ALPHABET.len()] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_hash_is_stable_and_tells_templates_apart() {
        let template = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app"}]}});
        let hash = template_hash(&template);
        assert_eq!(hash, template_hash(&template.clone()));
        assert!(hash.bytes().all(|b| b.is_ascii_alphanumeric()), "{hash}");
        let mut changed = template;
        changed["spec"]["containers"][0]["image"] = json!("app:2");
        assert_ne!(hash, template_hash(&changed));
    }
}
