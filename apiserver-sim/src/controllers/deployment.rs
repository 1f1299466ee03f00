//! The Deployment controller: a ReplicaSet per pod template, scaled to `spec.replicas`, and a status that follows.
//!
//! A changed template gets a new ReplicaSet and the old ones are scaled to zero
//! at once (as the `Recreate` strategy does; a real `RollingUpdate` moves over
//! gradually).

use serde_json::{Map, Value, json};

use super::replicaset::{self, Counts};
use super::{PodChoices, is_deleting, omit_zero, owner_reference};
use crate::resources::ids;
use crate::status::Result;
use crate::store::{PatchType, StoredObject, Transaction, now_rfc3339};

/// The label a ReplicaSet and its pods carry with their template's hash.
const TEMPLATE_HASH: &str = "pod-template-hash";

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
    let current = match owned.iter().find(|rs| rs.labels.get(TEMPLATE_HASH) == Some(&hash)) {
        Some(current) => current.name.clone(),
        None => {
            let replicaset = new_replicaset(&deployment, &hash, desired);
            transaction
                .create(&ids::replicasets(), Some(namespace), replicaset)?
                .name
                .clone()
        }
    };
    let mut names: Vec<String> = owned.iter().map(|rs| rs.name.clone()).collect();
    if !names.contains(&current) {
        names.push(current.clone());
    }

    let mut total = Counts::default();
    let mut updated = Counts::default();
    for replicaset_name in &names {
        let replicas = if *replicaset_name == current { desired } else { 0 };
        let replicaset = transaction.get(&ids::replicasets(), Some(namespace), replicaset_name)?;
        if replicaset.value["spec"]["replicas"].as_i64() != Some(replicas) {
            transaction.patch(
                &ids::replicasets(),
                Some(namespace),
                replicaset_name,
                PatchType::Merge,
                json!({"spec": {"replicas": replicas}}),
                false,
            )?;
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

/// The ReplicaSet of the Deployment's current template.
fn new_replicaset(deployment: &StoredObject, hash: &str, replicas: i64) -> Value {
    let spec = &deployment.value["spec"];
    let mut template = spec["template"].clone();
    let mut labels = template["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    labels.insert(TEMPLATE_HASH.into(), json!(hash));
    template["metadata"]["labels"] = Value::Object(labels.clone());
    let mut selector = spec["selector"].clone();
    let mut match_labels = selector["matchLabels"].as_object().cloned().unwrap_or_else(Map::new);
    match_labels.insert(TEMPLATE_HASH.into(), json!(hash));
    selector["matchLabels"] = Value::Object(match_labels);
    json!({
        "metadata": {
            "name": format!("{}-{hash}", deployment.name),
            "labels": labels,
            "annotations": {"deployment.kubernetes.io/desired-replicas": replicas.to_string()},
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
