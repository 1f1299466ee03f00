//! The resource types the emulated server serves, and their discovery documents.

use serde_json::{Value, json};

/// A resource type: where it is served and how it behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceDef {
    /// API group; empty for the core group.
    pub group: String,
    /// Version within the group.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Plural resource name used in paths, e.g. `pods`.
    pub plural: String,
    /// Singular name, e.g. `pod`.
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether the `status` subresource is served (status is then written only
    /// through it).
    pub status_subresource: bool,
    /// Short names for kubectl, e.g. `po`.
    pub short_names: Vec<String>,
    /// Where the `scale` subresource reads and writes, when it is served.
    pub scale_subresource: Option<ScalePaths>,
}

/// Where a resource keeps what its `scale` subresource (an `autoscaling/v1`
/// `Scale`) reads and writes, as a CRD's `subresources.scale` names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// The desired replicas, e.g. `.spec.replicas`; a scale write sets it.
    pub spec_replicas: String,
    /// The observed replicas, e.g. `.status.replicas`.
    pub status_replicas: String,
    /// The label selector, as an object (`.spec.selector` of a Deployment) or in
    /// its string form (a CRD's `.status.selector`).
    pub label_selector: Option<String>,
}

impl ScalePaths {
    /// The paths of the `apps/v1` workloads: `.spec.replicas`, `.status.replicas`
    /// and `.spec.selector`.
    #[must_use]
    pub fn replicas() -> Self {
        Self {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".spec.selector".into()),
        }
    }
}

impl ResourceDef {
    /// A namespaced resource without a status subresource; adjust with the setters.
    #[must_use]
    pub fn new(group: &str, version: &str, kind: &str, plural: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            singular: kind.to_lowercase(),
            namespaced: true,
            status_subresource: false,
            short_names: Vec::new(),
            scale_subresource: None,
        }
    }

    /// Makes the resource cluster-scoped.
    #[must_use]
    pub fn cluster_scoped(mut self) -> Self {
        self.namespaced = false;
        self
    }

    /// Serves the `status` subresource.
    #[must_use]
    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// Serves the `scale` subresource over these fields.
    #[must_use]
    pub fn with_scale(mut self, paths: ScalePaths) -> Self {
        self.scale_subresource = Some(paths);
        self
    }

    /// Sets the kubectl short names.
    #[must_use]
    pub fn short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|name| (*name).to_owned()).collect();
        self
    }

    /// `group/version`, or `version` for the core group.
    #[must_use]
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of a list of these objects, e.g. `PodList`.
    #[must_use]
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The entries of this resource in an `APIResourceList`.
    fn discovery_entries(&self) -> Vec<Value> {
        let verbs = [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        let mut entries = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
            "shortNames": self.short_names,
            "storageVersionHash": "",
        })];
        if self.status_subresource {
            entries.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if self.scale_subresource.is_some() {
            entries.push(json!({
                "name": format!("{}/scale", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        entries
    }
}

/// The resource types every emulated server starts with.
#[must_use]
pub fn built_in() -> Vec<ResourceDef> {
    vec![
        ResourceDef::new("", "v1", "Namespace", "namespaces")
            .cluster_scoped()
            .with_status()
            .short_names(&["ns"]),
        ResourceDef::new("", "v1", "Node", "nodes")
            .cluster_scoped()
            .with_status()
            .short_names(&["no"]),
        ResourceDef::new("", "v1", "Pod", "pods")
            .with_status()
            .short_names(&["po"]),
        ResourceDef::new("", "v1", "ConfigMap", "configmaps").short_names(&["cm"]),
        ResourceDef::new("", "v1", "Secret", "secrets"),
        ResourceDef::new("", "v1", "Service", "services")
            .with_status()
            .short_names(&["svc"]),
        ResourceDef::new("", "v1", "ServiceAccount", "serviceaccounts").short_names(&["sa"]),
        ResourceDef::new("", "v1", "Event", "events").short_names(&["ev"]),
        // A real server keeps one storage behind both Event APIs; here they are
        // two resources.
        ResourceDef::new("events.k8s.io", "v1", "Event", "events").short_names(&["ev"]),
        ResourceDef::new("apps", "v1", "Deployment", "deployments")
            .with_status()
            .with_scale(ScalePaths::replicas())
            .short_names(&["deploy"]),
        ResourceDef::new("apps", "v1", "ReplicaSet", "replicasets")
            .with_status()
            .with_scale(ScalePaths::replicas())
            .short_names(&["rs"]),
        ResourceDef::new("apps", "v1", "StatefulSet", "statefulsets")
            .with_status()
            .with_scale(ScalePaths::replicas())
            .short_names(&["sts"]),
        ResourceDef::new("apps", "v1", "DaemonSet", "daemonsets")
            .with_status()
            .short_names(&["ds"]),
        ResourceDef::new(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
        )
        .with_status()
        .short_names(&["hpa"]),
        ResourceDef::new("coordination.k8s.io", "v1", "Lease", "leases"),
        ResourceDef::new(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        )
        .cluster_scoped()
        .with_status()
        .short_names(&["crd", "crds"]),
    ]
}

/// The built-in resources the emulation's own writers (controllers, workloads) use.
pub(crate) mod ids {
    use crate::store::ResourceId;

    pub(crate) fn namespaces() -> ResourceId {
        ResourceId::new("", "v1", "namespaces")
    }
    pub(crate) fn pods() -> ResourceId {
        ResourceId::new("", "v1", "pods")
    }
    pub(crate) fn events() -> ResourceId {
        ResourceId::new("", "v1", "events")
    }
    pub(crate) fn configmaps() -> ResourceId {
        ResourceId::new("", "v1", "configmaps")
    }
    pub(crate) fn deployments() -> ResourceId {
        ResourceId::new("apps", "v1", "deployments")
    }
    pub(crate) fn replicasets() -> ResourceId {
        ResourceId::new("apps", "v1", "replicasets")
    }
    pub(crate) fn hpas() -> ResourceId {
        ResourceId::new("autoscaling", "v2", "horizontalpodautoscalers")
    }
}

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
        .map(|(group, versions)| {
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

/// `/version`.
#[must_use]
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0+kinformer-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}
