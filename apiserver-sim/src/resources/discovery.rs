//! The discovery documents: `/api`, `/apis`, each group version's resource
//! list, the aggregated discovery of kube-apiserver 1.30+, and `/version`.

use serde_json::{Value, json};

use super::ResourceDef;

/// `/api`: the core group's versions.
#[must_use]
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// `/api/v1` or `/apis/{group}/{version}`: the resources of one group version.
#[must_use]
pub fn resource_list<'a>(group_version: &str, defs: impl Iterator<Item = &'a ResourceDef>) -> Value {
    let resources: Vec<Value> = defs.flat_map(ResourceDef::discovery_entries).collect();
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

/// `/apis`: every named group with its versions.
#[must_use]
pub fn group_list<'a>(defs: impl Iterator<Item = &'a ResourceDef>) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for def in defs.filter(|def| !def.group.is_empty()) {
        match groups.iter_mut().find(|(group, _)| *group == def.group) {
            Some((_, versions)) if versions.contains(&def.version) => {}
            Some((_, versions)) => versions.push(def.version.clone()),
            None => groups.push((def.group.clone(), vec![def.version.clone()])),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(group, mut versions)| {
            versions.sort_by_key(|version| std::cmp::Reverse(version_priority(version)));
            let entries: Vec<Value> = versions
                .iter()
                .map(|version| json!({"groupVersion": format!("{group}/{version}"), "version": version}))
                .collect();
            let preferred = entries[0].clone();
            json!({"name": group, "versions": entries, "preferredVersion": preferred})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// How kube-apiserver ranks a group's versions, the preferred one first:
/// GA before beta before alpha, then the higher major and minor number
/// (`v2` > `v1` > `v1beta2` > `v1beta1` > `v1alpha1`).
fn version_priority(version: &str) -> (u8, u32, u32) {
    let rest = version.strip_prefix('v').unwrap_or(version);
    let major_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    let major = rest[..major_end].parse().unwrap_or(0);
    let (stage, minor) = match &rest[major_end..] {
        "" => (3, 0),
        tail if tail.starts_with("beta") => (2, tail[4..].parse().unwrap_or(0)),
        tail if tail.starts_with("alpha") => (1, tail[5..].parse().unwrap_or(0)),
        _ => (0, 0),
    };
    (stage, major, minor)
}

/// The media type of an aggregated discovery document, as the API server
/// labels it in `Content-Type`.
pub const AGGREGATED_DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// `/api` or `/apis` in aggregated form, an `apidiscovery.k8s.io/v2`
/// `APIGroupDiscoveryList`: each group (`""` for the core group) with the
/// `APIResourceList` of each of its versions, preferred first. The content
/// is read from those legacy documents, so both forms say the same.
#[must_use]
pub fn aggregated_discovery(groups: &[(String, Vec<Value>)]) -> Value {
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, lists)| {
            let metadata = if group.is_empty() {
                json!({})
            } else {
                json!({"name": group})
            };
            let versions: Vec<Value> = lists.iter().map(aggregated_version).collect();
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// One version of an aggregated discovery document, from its `APIResourceList`:
/// each resource with its subresources folded in, ordered by name.
fn aggregated_version(list: &Value) -> Value {
    let group_version = list["groupVersion"].as_str().unwrap_or_default();
    let (group, version) = group_version.split_once('/').unwrap_or(("", group_version));
    let entries = list["resources"].as_array().map(Vec::as_slice).unwrap_or_default();
    let kind_of = |entry: &Value| {
        json!({
            "group": entry["group"].as_str().unwrap_or(group),
            "version": entry["version"].as_str().unwrap_or(version),
            "kind": entry["kind"],
        })
    };
    let mut resources: Vec<Value> = entries
        .iter()
        .filter_map(|entry| {
            let name = entry["name"].as_str().filter(|name| !name.contains('/'))?;
            let scope = if entry["namespaced"].as_bool() == Some(true) {
                "Namespaced"
            } else {
                "Cluster"
            };
            let mut resource = json!({
                "resource": name,
                "responseKind": kind_of(entry),
                "scope": scope,
                "singularResource": entry["singularName"],
                "verbs": entry["verbs"],
            });
            if entry["shortNames"].as_array().is_some_and(|names| !names.is_empty()) {
                resource["shortNames"] = entry["shortNames"].clone();
            }
            if entry["categories"].as_array().is_some_and(|names| !names.is_empty()) {
                resource["categories"] = entry["categories"].clone();
            }
            let prefix = format!("{name}/");
            let subresources: Vec<Value> = entries
                .iter()
                .filter_map(|sub| {
                    let subresource = sub["name"].as_str()?.strip_prefix(&prefix)?;
                    Some(json!({"subresource": subresource, "responseKind": kind_of(sub), "verbs": sub["verbs"]}))
                })
                .collect();
            if !subresources.is_empty() {
                resource["subresources"] = json!(subresources);
            }
            Some(resource)
        })
        .collect();
    resources.sort_by(|a, b| a["resource"].as_str().cmp(&b["resource"].as_str()));
    json!({"version": version, "resources": resources, "freshness": "Current"})
}

/// `/version`, with the emulated and minimum compatibility versions that
/// kube-apiserver reports since 1.33.
#[must_use]
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "36",
        "emulationMajor": "1",
        "emulationMinor": "36",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "35",
        "gitVersion": "v1.36.0+kinformer-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}
