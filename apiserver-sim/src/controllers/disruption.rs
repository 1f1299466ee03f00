//! The disruption controller's part: a PodDisruptionBudget's status from the pods it selects, and whether an eviction may take a pod.
//!
//! A budget's expected pods are the pods its selector selects (kube's
//! controller reads them off their controllers' scale; for the emulation's
//! Deployments that is the same count), the healthy ones those that are
//! Ready, and it allows `currentHealthy - desiredHealthy` disruptions, where
//! `desiredHealthy` is `minAvailable` or `expectedPods - maxUnavailable`
//! (percentages of the expected pods, rounded up).

use kinformer_selector::Selector;
use serde_json::{Value, json};

use super::is_ready;
use crate::resources::ids;
use crate::status::Result;
use crate::store::{Filter, StoredObject, Transaction, label_selector_string, now_rfc3339};

/// The budget's status as the disruption controller writes it.
pub(crate) fn status(transaction: &Transaction<'_>, budget: &StoredObject) -> Result<Value> {
    let pods = selected(transaction, budget)?;
    let expected = i64::try_from(pods.len()).unwrap_or(i64::MAX);
    let healthy = i64::try_from(pods.iter().filter(|pod| is_ready(pod)).count()).unwrap_or(i64::MAX);
    let spec = &budget.value["spec"];
    let desired = if let Some(min) = count(&spec["minAvailable"], expected) {
        min
    } else if let Some(max) = count(&spec["maxUnavailable"], expected) {
        (expected - max).max(0)
    } else {
        0
    };
    let allowed = (healthy - desired).max(0);
    let previous = &budget.value["status"]["conditions"];
    let (condition, reason) = if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    let transition = previous
        .as_array()
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == "DisruptionAllowed"))
        .filter(|before| before["status"] == condition)
        .map_or_else(|| json!(now_rfc3339()), |before| before["lastTransitionTime"].clone());
    Ok(json!({
        "observedGeneration": budget.value["metadata"]["generation"],
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [{
            "type": "DisruptionAllowed", "status": condition, "reason": reason, "message": "",
            "observedGeneration": budget.value["metadata"]["generation"], "lastTransitionTime": transition,
        }],
    }))
}

/// An int-or-percent of `total`, percentages rounded up.
fn count(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(number) => number.as_i64(),
        Value::String(text) => match text.strip_suffix('%') {
            Some(percent) => percent.parse::<i64>().ok().map(|percent| (percent * total + 99) / 100),
            None => text.parse().ok(),
        },
        _ => None,
    }
}

/// The pods the budget selects, in its namespace.
fn selected(transaction: &Transaction<'_>, budget: &StoredObject) -> Result<Vec<std::sync::Arc<StoredObject>>> {
    let selector = &budget.value["spec"]["selector"];
    if !selector.is_object() {
        return Ok(Vec::new());
    }
    let Ok(labels) = Selector::parse(&label_selector_string(selector)) else {
        return Ok(Vec::new());
    };
    let filter = Filter {
        namespace: budget.namespace.clone(),
        labels,
        ..Filter::default()
    };
    Ok(transaction
        .select(&ids::pods(), &filter)?
        .into_iter()
        .filter(|pod| pod.value["metadata"].get("deletionTimestamp").is_none())
        .collect())
}

/// The budgets that cover `pod`.
pub(crate) fn budgets_of(
    transaction: &Transaction<'_>,
    pod: &StoredObject,
) -> Result<Vec<std::sync::Arc<StoredObject>>> {
    let filter = Filter {
        namespace: pod.namespace.clone(),
        ..Filter::default()
    };
    Ok(transaction
        .select(&ids::disruption_budgets(), &filter)?
        .into_iter()
        .filter(|budget| {
            let selector = &budget.value["spec"]["selector"];
            selector.is_object()
                && Selector::parse(&label_selector_string(selector)).is_ok_and(|selector| selector.matches(&pod.labels))
        })
        .collect())
}

/// Writes the status of the namespace's budgets where it changed.
///
/// # Errors
///
/// When the store refuses a write.
pub(crate) fn sync_namespace(transaction: &mut Transaction<'_>, namespace: &str) -> Result<()> {
    let filter = Filter {
        namespace: Some(namespace.to_owned()),
        ..Filter::default()
    };
    for budget in transaction.select(&ids::disruption_budgets(), &filter)? {
        let status = status(transaction, &budget)?;
        if budget.value.get("status") != Some(&status) {
            transaction.update(
                &ids::disruption_budgets(),
                Some(namespace),
                &budget.name,
                json!({"status": status}),
                true,
            )?;
        }
    }
    Ok(())
}
