//! Events, as the controllers' and the kubelet's event recorders write them: one `v1` Event per occurrence, about the object it concerns.

use serde_json::json;

use crate::resources::ids;
use crate::status::Result;
use crate::store::{StoredObject, Transaction, now_rfc3339};

/// What happened, as an Event says it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Occurrence<'a> {
    /// `Normal` or `Warning`.
    pub(crate) event_type: &'a str,
    /// A machine-readable word, e.g. `ScalingReplicaSet`.
    pub(crate) reason: &'a str,
    /// Who reports it, e.g. `deployment-controller` or `kubelet`.
    pub(crate) component: &'a str,
    /// The node of a kubelet's event.
    pub(crate) host: Option<&'a str>,
    /// The part of the object it is about, e.g. `spec.containers{app}`.
    pub(crate) field_path: Option<&'a str>,
}

impl<'a> Occurrence<'a> {
    /// A `Normal` event reported by `component`.
    pub(crate) fn normal(component: &'a str, reason: &'a str) -> Self {
        Self {
            event_type: "Normal",
            reason,
            component,
            host: None,
            field_path: None,
        }
    }
}

/// Writes an Event about `object` (its namespace, or `default` for a
/// cluster-scoped one), named as the recorder names it: the object's name
/// and a unique suffix.
///
/// # Errors
///
/// When the store refuses the Event.
pub(crate) fn record(
    transaction: &mut Transaction<'_>,
    object: &StoredObject,
    occurrence: Occurrence<'_>,
    message: &str,
) -> Result<()> {
    let namespace = object.namespace.as_deref().unwrap_or("default");
    let now = now_rfc3339();
    let mut involved = json!({
        "kind": object.value["kind"], "namespace": object.namespace, "name": object.name,
        "uid": object.value["metadata"]["uid"], "apiVersion": object.value["apiVersion"],
        "resourceVersion": object.resource_version.to_string(),
    });
    if let Some(field_path) = occurrence.field_path {
        involved["fieldPath"] = json!(field_path);
    }
    if object.namespace.is_none() {
        involved.as_object_mut().map(|fields| fields.remove("namespace"));
    }
    let mut source = json!({"component": occurrence.component});
    if let Some(host) = occurrence.host {
        source["host"] = json!(host);
    }
    let suffix: u64 = rand::random();
    transaction.create(
        &ids::events(),
        Some(namespace),
        json!({
            "metadata": {"name": format!("{}.{suffix:016x}", object.name)},
            "involvedObject": involved,
            "reason": occurrence.reason,
            "message": message,
            "source": source,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": occurrence.event_type,
            "eventTime": null,
            "reportingComponent": occurrence.component,
            "reportingInstance": occurrence.host.unwrap_or_default(),
        }),
    )?;
    Ok(())
}
