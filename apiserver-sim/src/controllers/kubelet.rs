//! A kubelet stand-in: a pod of a ReplicaSet starts on its node and reports itself Running and Ready.

use serde_json::{Value, json};

use super::{controller_of, is_deleting};
use crate::resources::ids;
use crate::status::Result;
use crate::store::{StoredObject, Transaction, now_rfc3339};

/// Whether the kubelet stand-in starts this pod: one of a ReplicaSet, not
/// running yet and not being deleted. Pods created any other way are left as
/// they are.
pub(super) fn should_start(pod: &StoredObject) -> bool {
    controller_of(pod).is_some_and(|owner| owner.kind == "ReplicaSet")
        && pod.value["status"]["phase"].as_str() != Some("Running")
        && !is_deleting(pod)
}

/// Starts the pod: a `Running` status with every condition true, as a kubelet
/// writes it once the containers are up. Answers whether it wrote anything.
///
/// # Errors
///
/// When the store refuses the write.
pub(crate) fn start(transaction: &mut Transaction<'_>, namespace: &str, name: &str, ip: &str) -> Result<bool> {
    let pod = match transaction.get(&ids::pods(), Some(namespace), name) {
        Ok(pod) => pod,
        Err(error) if error.code == 404 => return Ok(false),
        Err(error) => return Err(error),
    };
    if !should_start(&pod) {
        return Ok(false);
    }
    let status = running_status(&pod.value, ip);
    transaction.update(&ids::pods(), Some(namespace), name, json!({"status": status}), true)?;
    Ok(true)
}

fn running_status(pod: &Value, ip: &str) -> Value {
    let now = now_rfc3339();
    let condition =
        |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    let containers: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, container)| {
            json!({
                "name": container["name"], "image": container["image"],
                "imageID": format!("{}@sha256:{:064x}", container["image"].as_str().unwrap_or_default(), i + 1),
                "containerID": format!("containerd://{:064x}", rand::random::<u128>()),
                "ready": true, "started": true, "restartCount": 0, "lastState": {},
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    json!({
        "phase": "Running",
        "conditions": [condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
        "hostIP": "192.168.0.10",
        "hostIPs": [{"ip": "192.168.0.10"}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "containerStatuses": containers,
        "qosClass": "Burstable",
    })
}
