//! The `metrics.k8s.io/v1beta1` API as metrics-server v0.7 serves it behind the aggregator: `PodMetrics` and `NodeMetrics`, get and list only.
//!
//! What it serves, and how, is told in the [parent module](super); the
//! shapes, status codes and messages follow metrics-server v0.7's
//! `pkg/api` and the aggregator's proxy handler.

use std::collections::{BTreeMap, HashMap};

use axum::http::Method;
use kinformer_selector::Selector;
use serde_json::{Map, Value, json};

use super::{KI, Metrics, NODE_SYSTEM_USAGE, Usage, fingerprint};
use crate::resources::ids;
use crate::status::{ApiError, Result};
use crate::store::{Filter, Store, StoredObject, now_rfc3339};

/// The API group.
pub(crate) const GROUP: &str = "metrics.k8s.io";
const VERSION: &str = "v1beta1";
const API_VERSION: &str = "metrics.k8s.io/v1beta1";
/// The time a measurement spans, as metrics-server reports it (its default
/// `--metric-resolution`).
const WINDOW: &str = "15s";

/// What a request to the group is answered.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A JSON document, `200 OK`.
    Json(Value),
    /// The aggregator's `503` for an APIService that is not available.
    Unavailable,
}

/// What a request to the group asks, past `/apis/metrics.k8s.io`.
pub(crate) struct Request<'a> {
    pub(crate) method: &'a Method,
    pub(crate) path: &'a str,
    /// The segments after `/apis/metrics.k8s.io`.
    pub(crate) rest: &'a [&'a str],
    pub(crate) query: &'a HashMap<String, String>,
    /// Whether the client asked for a `meta.k8s.io` Table.
    pub(crate) table: bool,
}

/// The group's entry in `/apis`.
pub(crate) fn group() -> Value {
    let version = json!({"groupVersion": API_VERSION, "version": VERSION});
    json!({"name": GROUP, "versions": [version], "preferredVersion": version})
}

/// Answers a request to `/apis/metrics.k8s.io/...`.
///
/// # Errors
///
/// The Status errors metrics-server and the aggregator answer.
pub(crate) fn serve(store: &Store, request: &Request<'_>) -> Result<Answer> {
    let metrics = store.metrics();
    let get = *request.method == Method::GET;
    let path = match *request.rest {
        // The aggregator serves the group itself.
        [] if get => {
            let mut group = group();
            group["kind"] = json!("APIGroup");
            group["apiVersion"] = json!("v1");
            return Ok(Answer::Json(group));
        }
        [VERSION, ref path @ ..] => path,
        _ => return Err(ApiError::no_route(request.path)),
    };
    if !metrics.is_available() {
        return Ok(Answer::Unavailable);
    }
    let target = match *path {
        [] => Target::Discovery,
        ["pods"] => Target::List(Resource::Pods { namespace: None }),
        ["namespaces", namespace, "pods"] => Target::List(Resource::Pods {
            namespace: Some(namespace),
        }),
        ["namespaces", namespace, "pods", name] => Target::Pod { namespace, name },
        ["nodes"] => Target::List(Resource::Nodes),
        ["nodes", name] => Target::Node(name),
        _ => return Err(ApiError::no_route(request.path)),
    };
    if !get {
        return Err(ApiError::method_not_routed());
    }
    let now = now_rfc3339();
    let answer = match target {
        Target::Discovery => resource_list(),
        Target::Pod { namespace, name } => one(request, pod_metrics_of(store, metrics, namespace, name, &now)?),
        Target::Node(name) => one(request, node_metrics_of(store, metrics, name, &now)?),
        Target::List(resource) => {
            // The API server turns a watch away before it reads anything else.
            if flag(request.query, "watch") {
                return Err(ApiError::method_not_supported(GROUP, resource.plural(), "watch"));
            }
            let mut filter = Filter::default();
            if let Some(selector) = request.query.get("labelSelector") {
                filter.labels = Selector::parse(selector).map_err(|error| ApiError::bad_request(error.to_string()))?;
            }
            if let Some(selector) = request.query.get("fieldSelector") {
                filter.parse_fields(selector, resource.kind(), None)?;
            }
            let items = match resource {
                Resource::Pods { namespace } => {
                    filter.namespace = namespace.map(str::to_owned);
                    pod_metrics(store, metrics, &filter, &now)?
                }
                Resource::Nodes => node_metrics(store, metrics, &filter, &now)?,
            };
            if request.table {
                table(&items)
            } else {
                json!({"kind": resource.list_kind(), "apiVersion": API_VERSION, "metadata": {}, "items": items})
            }
        }
    };
    Ok(Answer::Json(answer))
}

/// What a path in the group version addresses.
#[derive(Debug, Clone, Copy)]
enum Target<'a> {
    /// The group version's `APIResourceList`.
    Discovery,
    /// A collection.
    List(Resource<'a>),
    /// One pod's metrics.
    Pod { namespace: &'a str, name: &'a str },
    /// One node's metrics.
    Node(&'a str),
}

/// The resources of the group.
#[derive(Debug, Clone, Copy)]
enum Resource<'a> {
    /// `pods`, in one namespace or all.
    Pods { namespace: Option<&'a str> },
    /// `nodes`.
    Nodes,
}

impl Resource<'_> {
    fn plural(self) -> &'static str {
        match self {
            Self::Pods { .. } => "pods",
            Self::Nodes => "nodes",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Self::Pods { .. } => "PodMetrics",
            Self::Nodes => "NodeMetrics",
        }
    }

    fn list_kind(self) -> &'static str {
        match self {
            Self::Pods { .. } => "PodMetricsList",
            Self::Nodes => "NodeMetricsList",
        }
    }
}

fn flag(query: &HashMap<String, String>, name: &str) -> bool {
    crate::http::query_flag(query.get(name))
}

/// A single object, or a Table of it.
fn one(request: &Request<'_>, object: Value) -> Value {
    if request.table {
        table(std::slice::from_ref(&object))
    } else {
        object
    }
}

/// `/apis/metrics.k8s.io/v1beta1`.
pub(crate) fn resource_list() -> Value {
    let resource = |name: &str, namespaced: bool, kind: &str| json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": ["get", "list"]});
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": [resource("nodes", false, "NodeMetrics"), resource("pods", true, "PodMetrics")],
    })
}

/// Whether the pod runs on a node, so that the kubelet measures it.
fn is_measured(pod: &StoredObject) -> bool {
    pod.value["status"]["phase"] == "Running"
        && pod.value["spec"]["nodeName"]
            .as_str()
            .is_some_and(|node| !node.is_empty())
}

/// The measured pods `filter` selects, with their usage, ordered by namespace and name.
fn measured_pods(store: &Store, metrics: &Metrics, filter: &Filter) -> Result<Vec<(StoredPod, Usage)>> {
    // The store's lock is let go before the table's is taken.
    let (pods, _) = store.snapshot(&ids::pods(), filter)?;
    let pods: Vec<_> = pods.into_iter().filter(|pod| is_measured(pod)).collect();
    let usages = metrics.pod_usages(
        pods.iter()
            .map(|pod| (pod.namespace.as_deref().unwrap_or_default(), pod.name.as_str())),
    );
    let mut measured: Vec<_> = pods
        .into_iter()
        .zip(usages)
        .filter_map(|(pod, usage)| Some((pod, usage?)))
        .collect();
    measured.sort_by(|(a, _), (b, _)| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(measured)
}

type StoredPod = std::sync::Arc<StoredObject>;

fn pod_metrics(store: &Store, metrics: &Metrics, filter: &Filter, now: &str) -> Result<Vec<Value>> {
    Ok(measured_pods(store, metrics, filter)?
        .iter()
        .map(|(pod, usage)| pod_metrics_object(pod, *usage, now))
        .collect())
}

fn pod_metrics_of(store: &Store, metrics: &Metrics, namespace: &str, name: &str, now: &str) -> Result<Value> {
    let pod = store.get(&ids::pods(), Some(namespace), name)?;
    is_measured(&pod)
        .then(|| metrics.pod_usage(namespace, name))
        .flatten()
        .map(|usage| pod_metrics_object(&pod, usage, now))
        .ok_or_else(|| ApiError::not_found(GROUP, "podmetrics", &format!("{namespace}/{name}")))
}

/// A pod's `PodMetrics`: its usage split among its containers.
fn pod_metrics_object(pod: &StoredObject, usage: Usage, now: &str) -> Value {
    let namespace = pod.namespace.as_deref().unwrap_or_default();
    let names: Vec<&str> = pod.value["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|container| container["name"].as_str().unwrap_or_default())
        .collect();
    let count = names.len().max(1) as u64;
    // Millicores and KiB as evenly as they go, the remainder to the first
    // containers; each container's CPU a little under its millicores.
    let millicores = u64::from(usage.cpu_millicores);
    let kib = usage.memory_bytes / KI;
    let containers: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, container)| {
            let i = i as u64;
            let share = |total: u64| total / count + u64::from(i < total % count);
            let mut memory = share(kib) * KI;
            if i == 0 {
                memory += usage.memory_bytes % KI;
            }
            let nanocores = just_under(share(millicores), &[namespace, &pod.name, container], count);
            json!({"name": container, "usage": {"cpu": cpu_quantity(nanocores), "memory": memory_quantity(memory)}})
        })
        .collect();
    json!({
        "kind": "PodMetrics",
        "apiVersion": API_VERSION,
        "metadata": metadata(pod, now),
        "timestamp": now,
        "window": WINDOW,
        "containers": containers,
    })
}

fn node_metrics(store: &Store, metrics: &Metrics, filter: &Filter, now: &str) -> Result<Vec<Value>> {
    let (nodes, _) = store.snapshot(&nodes(), filter)?;
    let mut on_node = pod_usage_by_node(store, metrics)?;
    let mut items: Vec<_> = nodes
        .iter()
        .map(|node| node_metrics_object(node, on_node.remove(&node.name).unwrap_or_default(), now))
        .collect();
    items.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
    Ok(items)
}

fn node_metrics_of(store: &Store, metrics: &Metrics, name: &str, now: &str) -> Result<Value> {
    // metrics-server finds nodes through a typed lister, which names them so.
    let node = store
        .get(&nodes(), None, name)
        .map_err(|_| ApiError::not_found("", "node", name))?;
    let pods = pod_usage_by_node(store, metrics)?.remove(name).unwrap_or_default();
    Ok(node_metrics_object(&node, pods, now))
}

/// What the measured pods use, summed by node.
fn pod_usage_by_node(store: &Store, metrics: &Metrics) -> Result<BTreeMap<String, Usage>> {
    let mut by_node: BTreeMap<String, Usage> = BTreeMap::new();
    for (pod, usage) in measured_pods(store, metrics, &Filter::default())? {
        let node = pod.value["spec"]["nodeName"].as_str().unwrap_or_default();
        let sum = by_node.entry(node.to_owned()).or_default();
        sum.cpu_millicores = sum.cpu_millicores.saturating_add(usage.cpu_millicores);
        sum.memory_bytes = sum.memory_bytes.saturating_add(usage.memory_bytes);
    }
    Ok(by_node)
}

/// A node's `NodeMetrics`: what it uses itself plus what its pods use.
fn node_metrics_object(node: &StoredObject, pods: Usage, now: &str) -> Value {
    let millicores = u64::from(NODE_SYSTEM_USAGE.cpu_millicores) + u64::from(pods.cpu_millicores);
    let memory = NODE_SYSTEM_USAGE.memory_bytes.saturating_add(pods.memory_bytes);
    json!({
        "kind": "NodeMetrics",
        "apiVersion": API_VERSION,
        "metadata": metadata(node, now),
        "timestamp": now,
        "window": WINDOW,
        "usage": {"cpu": cpu_quantity(just_under(millicores, &[&node.name], 1)), "memory": memory_quantity(memory)},
    })
}

fn nodes() -> crate::store::ResourceId {
    crate::store::ResourceId::new("", "v1", "nodes")
}

/// The metadata metrics-server gives a measurement: the object's name,
/// namespace and labels, created now.
fn metadata(object: &StoredObject, now: &str) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(object.name));
    if let Some(namespace) = &object.namespace {
        metadata.insert("namespace".into(), json!(namespace));
    }
    metadata.insert("creationTimestamp".into(), json!(now));
    if !object.labels.is_empty() {
        metadata.insert("labels".into(), json!(object.labels));
    }
    Value::Object(metadata)
}

/// `millicores` as nanocores a little under them, as a measurement lands:
/// less by 1 to 999999/`parts` nanocores, fixed by `key`, so that `parts` of
/// them still add up to more than their millicores less one.
fn just_under(millicores: u64, key: &[&str], parts: u64) -> u64 {
    if millicores == 0 {
        return 0;
    }
    let span = (1_000_000 / parts.max(1)).max(2) - 1;
    millicores * 1_000_000 - (1 + fingerprint(key) % span)
}

/// Nanocores as a Kubernetes decimal quantity in its canonical form:
/// `119994113n`, or `120m` and `2` when they are round.
fn cpu_quantity(nanocores: u64) -> String {
    const SUFFIXES: [&str; 7] = ["n", "u", "m", "", "k", "M", "G"];
    if nanocores == 0 {
        return "0".into();
    }
    let (mut value, mut suffix) = (nanocores, 0);
    while value % 1000 == 0 && suffix + 1 < SUFFIXES.len() {
        value /= 1000;
        suffix += 1;
    }
    format!("{value}{}", SUFFIXES[suffix])
}

/// Bytes as a Kubernetes binary quantity in its canonical form: `61440Ki`,
/// `64Mi`, or plain bytes when they are not whole KiB.
fn memory_quantity(bytes: u64) -> String {
    const SUFFIXES: [&str; 6] = ["", "Ki", "Mi", "Gi", "Ti", "Pi"];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let (mut value, mut suffix) = (bytes, 0);
    while value % 1024 == 0 && suffix + 1 < SUFFIXES.len() {
        value /= 1024;
        suffix += 1;
    }
    format!("{value}{}", SUFFIXES[suffix])
}

/// A `meta.k8s.io/v1` Table of measurements, with metrics-server's columns:
/// name, cpu, memory (each summed over the containers) and window.
fn table(items: &[Value]) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let usage = if item["kind"] == "NodeMetrics" {
                (parse_nanocores(&item["usage"]["cpu"]), parse_bytes(&item["usage"]["memory"]))
            } else {
                let containers = item["containers"].as_array().map(Vec::as_slice).unwrap_or_default();
                containers.iter().fold((0, 0), |(cpu, memory), container| {
                    (
                        cpu + parse_nanocores(&container["usage"]["cpu"]),
                        memory + parse_bytes(&container["usage"]["memory"]),
                    )
                })
            };
            json!({
                "cells": [item["metadata"]["name"], cpu_quantity(usage.0), memory_quantity(usage.1), item["window"]],
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": item["metadata"]},
            })
        })
        .collect();
    let column = |name: &str, format: &str| json!({"name": name, "type": "string", "format": format, "description": "", "priority": 0});
    let columns = if items.is_empty() {
        Vec::new()
    } else {
        let mut name = column("Name", "name");
        name["description"] = json!("Name of the resource");
        vec![
            name,
            column("cpu", "quantity"),
            column("memory", "quantity"),
            column("Window", "duration"),
        ]
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// A quantity this module wrote, back in nanocores.
fn parse_nanocores(quantity: &Value) -> u64 {
    parse(
        quantity,
        &[("n", 1), ("u", 1_000), ("m", 1_000_000), ("", 1_000_000_000)],
    )
}

/// A quantity this module wrote, back in bytes.
fn parse_bytes(quantity: &Value) -> u64 {
    parse(
        quantity,
        &[
            ("Ki", KI),
            ("Mi", KI.pow(2)),
            ("Gi", KI.pow(3)),
            ("Ti", KI.pow(4)),
            ("", 1),
        ],
    )
}

fn parse(quantity: &Value, units: &[(&str, u64)]) -> u64 {
    let text = quantity.as_str().unwrap_or_default();
    units
        .iter()
        .find_map(|(suffix, scale)| {
            let number = text.strip_suffix(suffix)?;
            Some(number.parse::<u64>().ok()?.saturating_mul(*scale))
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_written_in_the_canonical_decimal_form() {
        assert_eq!(cpu_quantity(119_994_113), "119994113n");
        assert_eq!(cpu_quantity(120_000_000), "120m");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(1_500), "1500n");
        assert_eq!(cpu_quantity(0), "0");
    }

    #[test]
    fn memory_is_written_in_the_canonical_binary_form() {
        assert_eq!(memory_quantity(61_440 * KI), "60Mi");
        assert_eq!(memory_quantity(61_444 * KI), "61444Ki");
        assert_eq!(memory_quantity(1_500), "1500");
        assert_eq!(memory_quantity(512), "512");
    }

    #[test]
    fn cpu_just_under_the_millicores_rounds_up_to_them() {
        for millicores in [1, 120, 4000] {
            let nanocores = just_under(millicores, &["ns", "pod"], 1);
            assert!(nanocores < millicores * 1_000_000);
            assert_eq!(nanocores.div_ceil(1_000_000), millicores, "as kubectl top rounds");
        }
        // Three containers' shares still add up to the pod's millicores.
        let sum: u64 = ["a", "b", "c"]
            .iter()
            .map(|container| just_under(40, &["ns", "pod", container], 3))
            .sum();
        assert_eq!(sum.div_ceil(1_000_000), 120);
    }

    #[test]
    fn a_table_row_sums_the_containers() {
        let item = json!({"kind": "PodMetrics", "metadata": {"name": "web"}, "window": WINDOW, "containers": [
            {"name": "a", "usage": {"cpu": "59999000n", "memory": "30Mi"}},
            {"name": "b", "usage": {"cpu": "60m", "memory": "1024Ki"}},
        ]});
        let table = table(&[item]);
        assert_eq!(table["rows"][0]["cells"], json!(["web", "119999u", "31Mi", "15s"]));
    }
}
