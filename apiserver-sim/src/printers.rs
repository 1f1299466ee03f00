//! Server-side printing: the `meta.k8s.io/v1` Table kubectl asks for, with the columns kube-apiserver's printers give each type.
//!
//! `kubectl get` prints what the server puts in the Table, so the columns, their
//! order and priority (0 always shown, 1 with `-o wide`) and the cells' text
//! (`1/1`, `Running`, `5m`) follow the API server's printers for the types a
//! handler host's users look at. A custom resource gets its CRD's
//! `additionalPrinterColumns` (an `Age` column when it names none); any other
//! type gets the API server's default, `Name` and `Created At`.

use serde_json::{Value, json};

use crate::resources::ResourceDef;

/// A column: its name, type, priority and how a cell is read off an object.
struct Column {
    name: &'static str,
    kind: &'static str,
    priority: u8,
    cell: fn(&Value) -> Value,
}

const fn column(name: &'static str, priority: u8, cell: fn(&Value) -> Value) -> Column {
    Column {
        name,
        kind: "string",
        priority,
        cell,
    }
}

const fn number(name: &'static str, cell: fn(&Value) -> Value) -> Column {
    Column {
        name,
        kind: "integer",
        priority: 0,
        cell,
    }
}

/// The list metadata a Table of a list page carries: its resourceVersion and
/// the token of the next page, which kubectl follows past the first 500 rows.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Page<'a> {
    pub(crate) resource_version: Option<u64>,
    pub(crate) continue_token: Option<&'a str>,
}

/// A Table of `items` as kube-apiserver prints objects of `def`.
pub(crate) fn table(def: &ResourceDef, page: Page<'_>, items: &[&Value]) -> Value {
    let mut metadata = json!({});
    if let Some(resource_version) = page.resource_version {
        metadata["resourceVersion"] = json!(resource_version.to_string());
    }
    if let Some(token) = page.continue_token {
        metadata["continue"] = json!(token);
    }
    let (definitions, rows): (Vec<Value>, Vec<Value>) = if def.custom {
        custom_table(def, items)
    } else if let Some(conversion) = def.stored_as {
        // kube-apiserver prints the one type behind both versions: the
        // stored version's columns.
        let stored: Vec<Value> = items.iter().map(|item| conversion.stored(item)).collect();
        let storage = conversion.storage();
        let storage_def = ResourceDef::new(&storage.group, &storage.version, &def.kind, &storage.plural);
        let stored: Vec<&Value> = stored.iter().collect();
        return table(&storage_def, page, &stored);
    } else {
        let columns = columns(def);
        let definitions = columns
            .iter()
            .map(|column| {
                let format = if column.name == "Name" { "name" } else { "" };
                json!({"name": column.name, "type": column.kind, "format": format, "description": "", "priority": column.priority})
            })
            .collect();
        let rows = items
            .iter()
            .map(|item| row(item, columns.iter().map(|column| (column.cell)(item)).collect()))
            .collect();
        (definitions, rows)
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

fn row(item: &Value, cells: Vec<Value>) -> Value {
    json!({
        "cells": cells,
        "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": item["metadata"]},
    })
}

/// The printer columns of a built-in type; the default pair for the others.
fn columns(def: &ResourceDef) -> Vec<Column> {
    let name = column("Name", 0, |o| o["metadata"]["name"].clone());
    let age_column = column("Age", 0, |o| json!(age(&o["metadata"]["creationTimestamp"])));
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "Pod") => vec![
            name,
            column("Ready", 0, pod_ready),
            column("Status", 0, pod_status),
            column("Restarts", 0, pod_restarts),
            age_column,
            column("IP", 1, |o| or_none(&o["status"]["podIP"])),
            column("Node", 1, |o| or_none(&o["spec"]["nodeName"])),
            column("Nominated Node", 1, |o| or_none(&o["status"]["nominatedNodeName"])),
            column("Readiness Gates", 1, |_| json!("<none>")),
        ],
        ("", "Namespace") => vec![name, column("Status", 0, |o| o["status"]["phase"].clone()), age_column],
        ("", "ConfigMap") => vec![
            name,
            number("Data", |o| json!(len(&o["data"]) + len(&o["binaryData"]))),
            age_column,
        ],
        ("", "Secret") => vec![
            name,
            column("Type", 0, |o| o["type"].clone()),
            number("Data", |o| json!(len(&o["data"]))),
            age_column,
        ],
        ("", "ServiceAccount") => vec![name, number("Secrets", |o| json!(len(&o["secrets"]))), age_column],
        ("", "Service") => vec![
            name,
            column("Type", 0, |o| o["spec"]["type"].clone()),
            column("Cluster-IP", 0, |o| or_none(&o["spec"]["clusterIP"])),
            column("External-IP", 0, service_external_ip),
            column("Port(s)", 0, service_ports),
            age_column,
            column("Selector", 1, |o| labels(&o["spec"]["selector"])),
        ],
        ("", "Node") => vec![
            name,
            column("Status", 0, node_status),
            column("Roles", 0, node_roles),
            age_column,
            column("Version", 0, |o| o["status"]["nodeInfo"]["kubeletVersion"].clone()),
        ],
        ("", "Event") => vec![
            column("Last Seen", 0, |o| {
                let seen = &o["lastTimestamp"];
                json!(age(if seen.is_null() { &o["eventTime"] } else { seen }))
            }),
            column("Type", 0, |o| o["type"].clone()),
            column("Reason", 0, |o| o["reason"].clone()),
            column("Object", 0, |o| {
                let about = &o["involvedObject"];
                json!(format!(
                    "{}/{}",
                    about["kind"].as_str().unwrap_or_default().to_lowercase(),
                    about["name"].as_str().unwrap_or_default()
                ))
            }),
            column("Message", 0, |o| o["message"].clone()),
        ],
        ("apps", "Deployment") => vec![
            name,
            column("Ready", 0, |o| {
                ratio(&o["status"]["readyReplicas"], &o["spec"]["replicas"])
            }),
            number("Up-to-date", |o| count(&o["status"]["updatedReplicas"])),
            number("Available", |o| count(&o["status"]["availableReplicas"])),
            age_column,
        ]
        .into_iter()
        .chain(template_columns())
        .collect(),
        ("apps", "ReplicaSet") => vec![
            name,
            number("Desired", |o| count(&o["spec"]["replicas"])),
            number("Current", |o| count(&o["status"]["replicas"])),
            number("Ready", |o| count(&o["status"]["readyReplicas"])),
            age_column,
        ]
        .into_iter()
        .chain(template_columns())
        .collect(),
        ("", "ReplicationController") => vec![
            name,
            number("Desired", |o| count(&o["spec"]["replicas"])),
            number("Current", |o| count(&o["status"]["replicas"])),
            number("Ready", |o| count(&o["status"]["readyReplicas"])),
            age_column,
        ],
        ("policy", "PodDisruptionBudget") => vec![
            name,
            column("Min Available", 0, |o| {
                or_none(&int_or_string(&o["spec"]["minAvailable"]))
            }),
            column("Max Unavailable", 0, |o| {
                or_none(&int_or_string(&o["spec"]["maxUnavailable"]))
            }),
            number("Allowed Disruptions", |o| count(&o["status"]["disruptionsAllowed"])),
            age_column,
        ],
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration") => {
            vec![name, number("Webhooks", |o| json!(len(&o["webhooks"]))), age_column]
        }
        ("node.k8s.io", "RuntimeClass") => vec![name, column("Handler", 0, |o| o["handler"].clone()), age_column],
        ("apps", "ControllerRevision") => vec![
            name,
            column("Controller", 0, |o| {
                let owner = o["metadata"]["ownerReferences"]
                    .as_array()
                    .and_then(|owners| owners.iter().find(|owner| owner["controller"] == true));
                match owner {
                    Some(owner) => json!(format!(
                        "{}/{}",
                        owner["kind"].as_str().unwrap_or_default().to_lowercase(),
                        owner["name"].as_str().unwrap_or_default()
                    )),
                    None => json!("<none>"),
                }
            }),
            number("Revision", |o| count(&o["revision"])),
            age_column,
        ],
        ("coordination.k8s.io", "Lease") => vec![
            name,
            column("Holder", 0, |o| o["spec"]["holderIdentity"].clone()),
            age_column,
        ],
        ("batch", "Job") => vec![
            name,
            column("Status", 0, job_status),
            column("Completions", 0, |o| {
                ratio(
                    &o["status"]["succeeded"],
                    &json!(o["spec"]["completions"].as_i64().unwrap_or(1)),
                )
            }),
            age_column,
        ],
        ("autoscaling", "HorizontalPodAutoscaler") => vec![
            name,
            column("Reference", 0, |o| {
                let target = &o["spec"]["scaleTargetRef"];
                json!(format!(
                    "{}/{}",
                    target["kind"].as_str().unwrap_or_default(),
                    target["name"].as_str().unwrap_or_default()
                ))
            }),
            column("Targets", 0, hpa_targets),
            number("MinPods", |o| json!(o["spec"]["minReplicas"].as_i64().unwrap_or(1))),
            number("MaxPods", |o| count(&o["spec"]["maxReplicas"])),
            number("Replicas", |o| count(&o["status"]["currentReplicas"])),
            age_column,
        ],
        _ => vec![
            name,
            Column {
                name: "Created At",
                kind: "date",
                priority: 0,
                cell: |o| o["metadata"]["creationTimestamp"].clone(),
            },
        ],
    }
}

/// The wide columns of a workload: its pod template's containers and images,
/// and its selector.
fn template_columns() -> [Column; 3] {
    [
        column("Containers", 1, |o| containers(o, "name")),
        column("Images", 1, |o| containers(o, "image")),
        column("Selector", 1, |o| labels(&o["spec"]["selector"]["matchLabels"])),
    ]
}

/// A custom resource's columns: `Name`, its CRD version's
/// `additionalPrinterColumns` (`Age` when it names none), each cell read at
/// the column's simple JSON path (`.spec.replicas`).
fn custom_table(def: &ResourceDef, items: &[&Value]) -> (Vec<Value>, Vec<Value>) {
    let age_column = json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"});
    let named = def.printer_columns.clone();
    let extra = if named.is_empty() { vec![age_column] } else { named };
    let mut definitions =
        vec![json!({"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0})];
    definitions.extend(extra.iter().map(|column| {
        json!({
            "name": column["name"],
            "type": column["type"],
            "format": column["format"].as_str().unwrap_or_default(),
            "description": column["description"].as_str().unwrap_or_default(),
            "priority": column["priority"].as_i64().unwrap_or(0),
        })
    }));
    let rows = items
        .iter()
        .map(|item| {
            let mut cells = vec![item["metadata"]["name"].clone()];
            cells.extend(extra.iter().map(|column| {
                let path = column["jsonPath"].as_str().unwrap_or_default();
                let value = column_value(item, path);
                if column["type"] == "date" && value.is_string() {
                    json!(age(value))
                } else {
                    value.clone()
                }
            }));
            row(item, cells)
        })
        .collect();
    (definitions, rows)
}

/// The cell of a printer column's `jsonPath` (`.spec.replicas`,
/// `.status.conditions[?(@.type=="Ready")].status`): the first value it
/// finds, as kube-apiserver's table convertor takes it; null for none.
fn column_value<'a>(item: &'a Value, path: &str) -> &'a Value {
    match serde_json_path::JsonPath::parse(&format!("${path}")) {
        Ok(path) => path.query(item).first().unwrap_or(&Value::Null),
        // Not RFC 9535 (a dotted name with `\.` escapes): step by step.
        Err(_) => path
            .trim_start_matches('.')
            .split('.')
            .filter(|step| !step.is_empty())
            .fold(item, |value, step| &value[step]),
    }
}

/// How long ago an RFC 3339 time was, as kubectl shows an age: `45s`, `3m12s`,
/// `25m`, `4h10m`, `3d`, and `<unknown>` for no time.
pub(crate) fn age(time: &Value) -> String {
    let Some(then) = time
        .as_str()
        .and_then(|time| time.parse::<k8s_openapi::jiff::Timestamp>().ok())
    else {
        return "<unknown>".into();
    };
    let seconds = k8s_openapi::jiff::Timestamp::now().as_second() - then.as_second();
    human_duration(seconds)
}

/// Go's `duration.HumanDuration`, which every printer's age uses.
fn human_duration(seconds: i64) -> String {
    let (minutes, hours, days) = (seconds / 60, seconds / 3600, seconds / 86_400);
    let years = days / 365;
    let with = |big: i64, unit: &str, small: i64, small_unit: &str| {
        if small == 0 {
            format!("{big}{unit}")
        } else {
            format!("{big}{unit}{small}{small_unit}")
        }
    };
    if seconds < -1 {
        "<invalid>".into()
    } else if seconds < 0 {
        "0s".into()
    } else if seconds < 120 {
        format!("{seconds}s")
    } else if seconds < 600 {
        with(minutes, "m", seconds % 60, "s")
    } else if seconds < 10_800 {
        format!("{minutes}m")
    } else if seconds < 28_800 {
        with(hours, "h", minutes % 60, "m")
    } else if seconds < 172_800 {
        format!("{hours}h")
    } else if seconds < 691_200 {
        with(days, "d", hours % 24, "h")
    } else if days < 730 {
        format!("{days}d")
    } else if years < 8 {
        with(years, "y", days % 365, "d")
    } else {
        format!("{years}y")
    }
}

fn len(value: &Value) -> usize {
    value
        .as_object()
        .map_or_else(|| value.as_array().map_or(0, Vec::len), serde_json::Map::len)
}

fn count(value: &Value) -> Value {
    json!(value.as_i64().unwrap_or(0))
}

fn ratio(have: &Value, want: &Value) -> Value {
    json!(format!("{}/{}", have.as_i64().unwrap_or(0), want.as_i64().unwrap_or(0)))
}

/// An int-or-string field as text: `1`, `25%`, or nothing.
fn int_or_string(value: &Value) -> Value {
    match value {
        Value::Number(number) => json!(number.to_string()),
        other => other.clone(),
    }
}

fn or_none(value: &Value) -> Value {
    match value.as_str() {
        Some(text) if !text.is_empty() => json!(text),
        _ => json!("<none>"),
    }
}

fn labels(selector: &Value) -> Value {
    let Some(selector) = selector.as_object().filter(|selector| !selector.is_empty()) else {
        return json!("<none>");
    };
    let pairs: Vec<String> = selector
        .iter()
        .map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or_default()))
        .collect();
    json!(pairs.join(","))
}

fn containers(object: &Value, field: &str) -> Value {
    let names: Vec<&str> = object["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|container| container[field].as_str())
        .collect();
    json!(names.join(","))
}

fn pod_ready(pod: &Value) -> Value {
    let total = len(&pod["spec"]["containers"]);
    let ready = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|status| status["ready"] == true)
        .count();
    json!(format!("{ready}/{total}"))
}

/// The pod's phase, or the reason a container is waiting or terminated, and
/// `Terminating` once it is being deleted, as `kubectl get pods` shows.
fn pod_status(pod: &Value) -> Value {
    let status = &pod["status"];
    let mut reason = status["reason"]
        .as_str()
        .or_else(|| status["phase"].as_str())
        .unwrap_or("Pending")
        .to_owned();
    for container in status["containerStatuses"].as_array().into_iter().flatten() {
        let state = &container["state"];
        if let Some(why) = state["waiting"]["reason"].as_str().filter(|why| !why.is_empty()) {
            why.clone_into(&mut reason);
        } else if let Some(why) = state["terminated"]["reason"].as_str().filter(|why| !why.is_empty()) {
            why.clone_into(&mut reason);
        }
    }
    if pod["metadata"]["deletionTimestamp"].is_string() {
        reason = "Terminating".into();
    }
    json!(reason)
}

fn pod_restarts(pod: &Value) -> Value {
    let restarts: i64 = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|status| status["restartCount"].as_i64())
        .sum();
    json!(restarts.to_string())
}

fn service_external_ip(service: &Value) -> Value {
    let spec = &service["spec"];
    let ingress: Vec<&str> = service["status"]["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ingress| ingress["ip"].as_str().or_else(|| ingress["hostname"].as_str()))
        .collect();
    match spec["type"].as_str() {
        Some("LoadBalancer") if ingress.is_empty() => json!("<pending>"),
        Some("LoadBalancer") => json!(ingress.join(",")),
        Some("ExternalName") => spec["externalName"].clone(),
        _ => match spec["externalIPs"].as_array() {
            Some(ips) if !ips.is_empty() => {
                json!(ips.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","))
            }
            _ => json!("<none>"),
        },
    }
}

fn service_ports(service: &Value) -> Value {
    let ports: Vec<String> = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|port| {
            let protocol = port["protocol"].as_str().unwrap_or("TCP");
            match port["nodePort"].as_i64() {
                Some(node_port) => format!("{}:{node_port}/{protocol}", port["port"]),
                None => format!("{}/{protocol}", port["port"]),
            }
        })
        .collect();
    if ports.is_empty() {
        json!("<none>")
    } else {
        json!(ports.join(","))
    }
}

fn node_status(node: &Value) -> Value {
    let ready = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|condition| condition["type"] == "Ready");
    let mut status = match ready.and_then(|ready| ready["status"].as_str()) {
        Some("True") => "Ready".to_owned(),
        _ => "NotReady".to_owned(),
    };
    if node["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    json!(status)
}

fn node_roles(node: &Value) -> Value {
    let mut roles: Vec<&str> = node["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(label, _)| label.strip_prefix("node-role.kubernetes.io/"))
        .collect();
    roles.sort_unstable();
    if roles.is_empty() {
        json!("<none>")
    } else {
        json!(roles.join(","))
    }
}

/// Each resource metric's current and target utilization, `cpu: 45%/50%`,
/// `<unknown>` before the controller measured it.
fn hpa_targets(hpa: &Value) -> Value {
    let current = hpa["status"]["currentMetrics"].as_array();
    let targets: Vec<String> = hpa["spec"]["metrics"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|metric| {
            let resource = &metric["resource"];
            let name = resource["name"].as_str()?;
            let target = resource["target"]["averageUtilization"].as_i64()?;
            let now = current
                .into_iter()
                .flatten()
                .find(|measured| measured["resource"]["name"] == name)
                .and_then(|measured| measured["resource"]["current"]["averageUtilization"].as_i64())
                .map_or_else(|| "<unknown>".to_owned(), |now| format!("{now}%"));
            Some(format!("{name}: {now}/{target}%"))
        })
        .collect();
    if targets.is_empty() {
        json!("<none>")
    } else {
        json!(targets.join(", "))
    }
}

fn job_status(job: &Value) -> Value {
    let conditions = job["status"]["conditions"].as_array().into_iter().flatten();
    let mut status = "Running";
    for condition in conditions.filter(|condition| condition["status"] == "True") {
        match condition["type"].as_str() {
            Some("Complete") => status = "Complete",
            Some("Failed") => status = "Failed",
            Some("Suspended") => status = "Suspended",
            _ => {}
        }
    }
    json!(status)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Page, Value, column_value, human_duration, table};
    use crate::resources::built_in;

    #[test]
    fn printer_columns_read_json_paths_with_filters_as_kube_apiserver_does() {
        let item = json!({"spec": {"replicas": 3},
            "status": {"conditions": [{"type": "Degraded", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(column_value(&item, ".spec.replicas"), &json!(3));
        assert_eq!(
            column_value(&item, r#".status.conditions[?(@.type=="Ready")].status"#),
            &json!("True")
        );
        assert_eq!(column_value(&item, ".status.conditions[0].type"), &json!("Degraded"));
        assert_eq!(column_value(&item, ".status.missing"), &Value::Null);
    }

    #[test]
    fn ages_read_as_kubectl_shows_them() {
        let ages: Vec<String> = [
            5,
            119,
            125,
            600,
            3 * 3600 + 60,
            50 * 3600,
            3 * 86_400 + 3600,
            800 * 86_400,
        ]
        .into_iter()
        .map(human_duration)
        .collect();
        assert_eq!(ages, ["5s", "119s", "2m5s", "10m", "3h1m", "2d2h", "3d1h", "2y70d"]);
    }

    #[test]
    fn pods_print_readiness_status_and_restarts() {
        let pods = built_in().into_iter().find(|def| def.kind == "Pod").unwrap();
        let pod = json!({
            "metadata": {"name": "web", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "node-1"},
            "status": {"phase": "Running", "podIP": "10.0.0.7", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
            ]},
        });
        let printed = table(
            &pods,
            Page {
                resource_version: Some(7),
                continue_token: None,
            },
            &[&pod],
        );
        let names: Vec<&str> = printed["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|column| column["priority"] == 0)
            .map(|column| column["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Ready", "Status", "Restarts", "Age"]);
        let cells = printed["rows"][0]["cells"].as_array().unwrap();
        assert_eq!(
            cells[..4],
            [json!("web"), json!("1/2"), json!("CrashLoopBackOff"), json!("3")]
        );
        assert_eq!(cells[5], json!("10.0.0.7"));
        assert_eq!(printed["metadata"]["resourceVersion"], "7");
    }
}
