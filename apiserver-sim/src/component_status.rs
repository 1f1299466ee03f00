//! `componentstatuses`: the health of the control plane's components, as kube-apiserver probes it on each request.
//!
//! The emulation is the API server and its storage in one process; nothing
//! listens where kube-apiserver probes the scheduler and the controller
//! manager, so they are reported unhealthy with the probe's dial error, and
//! the storage (`etcd-0`) healthy.

use serde_json::{Value, json};

use crate::status::{ApiError, Result};

/// The deprecation warning kube-apiserver sends with every answer.
pub(crate) const WARNING: &str = "299 - \"v1 ComponentStatus is deprecated in v1.19+\"";

/// The components in the order kube-apiserver lists them, with their health:
/// (name, healthy, message).
fn components() -> [(&'static str, bool, String); 3] {
    let refused = |port: u16| {
        format!("Get \"https://127.0.0.1:{port}/healthz\": dial tcp 127.0.0.1:{port}: connect: connection refused")
    };
    [
        ("scheduler", false, refused(10259)),
        ("controller-manager", false, refused(10257)),
        ("etcd-0", true, "ok".to_owned()),
    ]
}

fn item((name, healthy, message): (&str, bool, String)) -> Value {
    json!({
        "kind": "ComponentStatus",
        "apiVersion": "v1",
        "metadata": {"name": name},
        "conditions": [{"type": "Healthy", "status": if healthy { "True" } else { "False" }, "message": message}],
    })
}

/// The `ComponentStatusList`.
pub(crate) fn list() -> Value {
    let items: Vec<Value> = components().into_iter().map(item).collect();
    json!({"kind": "ComponentStatusList", "apiVersion": "v1", "metadata": {}, "items": items})
}

/// The list as kubectl prints it: a `meta.k8s.io/v1` Table with the columns
/// kube-apiserver's printer gives componentstatuses.
pub(crate) fn table() -> Value {
    let column = |name: &str, format: &str, description: &str| json!({"name": name, "type": "string", "format": format, "description": description, "priority": 0});
    let rows: Vec<Value> = components()
        .into_iter()
        .map(|(name, healthy, message)| {
            let status = if healthy { "Healthy" } else { "Unhealthy" };
            json!({
                "cells": [name, status, message, ""],
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": name}},
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": [
            column("Name", "name", "Name must be unique within a namespace."),
            column("Status", "", "Status of the component conditions"),
            column("Message", "", "Message of the component conditions"),
            column("Error", "", "Error of the component conditions"),
        ],
        "rows": rows,
    })
}

/// One component's `ComponentStatus`.
///
/// # Errors
///
/// 404 for a component that is not probed.
pub(crate) fn get(name: &str) -> Result<Value> {
    components()
        .into_iter()
        .find(|(component, _, _)| *component == name)
        .map(item)
        .ok_or_else(|| ApiError::not_found("", "componentstatuses", name))
}
