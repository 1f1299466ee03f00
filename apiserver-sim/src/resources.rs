//! The resource types the emulated server serves, and their discovery documents.

use serde_json::{Value, json};

use crate::conversion::Conversion;

mod discovery;

pub use discovery::{AGGREGATED_DISCOVERY, aggregated_discovery, core_versions, group_list, resource_list, version};

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
    /// The categories it belongs to, e.g. `all` for what `kubectl get all` lists.
    pub categories: Vec<String>,
    /// Where the `scale` subresource reads and writes, when it is served.
    pub scale_subresource: Option<ScalePaths>,
    /// The verbs the resource serves, as discovery lists them.
    pub verbs: Vec<String>,
    /// Subresources besides `status` and `scale`, as discovery lists them.
    pub subresources: Vec<SubresourceDef>,
    /// Whether `metadata.generation` is kept (1 on creation, one more on each
    /// change of the spec), as the strategies of workloads, pods and custom
    /// resources keep it; other resources have none.
    pub tracks_generation: bool,
    /// Whether a delete answers the deleted object, as kube-apiserver's
    /// storage of pods, services and service accounts does; others answer a
    /// `Status` of success. An object that finalizers keep is answered in
    /// either case.
    pub returns_deleted_object: bool,
    /// The structural schema (a CRD version's `openAPIV3Schema`) that every
    /// write is pruned to, defaulted by and checked against; none for
    /// built-in resources, whose fields are taken as written.
    pub schema: Option<serde_json::Value>,
    /// A CRD version's `additionalPrinterColumns`, the columns `kubectl get`
    /// prints for a custom resource; none for built-in resources, whose
    /// columns are the API server's printers'.
    pub printer_columns: Vec<serde_json::Value>,
    /// A custom resource, served from a CRD: its list items keep `kind` and
    /// `apiVersion`, which kube-apiserver leaves out of built-in types' items.
    pub custom: bool,
    /// Served from another resource's objects, converted: one storage
    /// behind two versions, as kube-apiserver keeps `events.k8s.io/v1`
    /// Events as `v1` Events. `None` for a resource with objects of its own.
    pub stored_as: Option<Conversion>,
}

/// A subresource as discovery lists it: its name, the kind it answers and its verbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubresourceDef {
    /// The name after the object's, e.g. `log`.
    pub name: String,
    /// The group of the kind it answers; `None` when it is the resource's own.
    pub group_version: Option<(String, String)>,
    /// The kind it answers, e.g. `Pod` or `TokenRequest`.
    pub kind: String,
    /// Its verbs.
    pub verbs: Vec<String>,
}

impl SubresourceDef {
    /// A subresource answering `kind` of the resource's own group version.
    #[must_use]
    pub fn new(name: &str, kind: &str, verbs: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            group_version: None,
            kind: kind.to_owned(),
            verbs: verbs.iter().map(|verb| (*verb).to_owned()).collect(),
        }
    }

    /// Answers a kind of another group version.
    #[must_use]
    pub fn of(mut self, group: &str, version: &str) -> Self {
        self.group_version = Some((group.to_owned(), version.to_owned()));
        self
    }
}

/// The verbs of a proxy subresource.
const PROXY_VERBS: [&str; 5] = ["create", "delete", "get", "patch", "update"];

/// Every verb of a resource stored as objects.
const ALL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

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
            categories: Vec::new(),
            scale_subresource: None,
            verbs: ALL_VERBS.iter().map(|verb| (*verb).to_owned()).collect(),
            subresources: Vec::new(),
            tracks_generation: false,
            returns_deleted_object: false,
            schema: None,
            printer_columns: Vec::new(),
            custom: false,
            stored_as: None,
        }
    }

    /// Serves the objects of another resource, converted; see
    /// [`ResourceDef::stored_as`].
    #[must_use]
    pub fn stored_as(mut self, conversion: Conversion) -> Self {
        self.stored_as = Some(conversion);
        self
    }

    /// Keeps `metadata.generation`; see [`ResourceDef::tracks_generation`].
    #[must_use]
    pub fn with_generation(mut self) -> Self {
        self.tracks_generation = true;
        self
    }

    /// Answers a delete with the deleted object; see
    /// [`ResourceDef::returns_deleted_object`].
    #[must_use]
    pub fn returning_deleted_object(mut self) -> Self {
        self.returns_deleted_object = true;
        self
    }

    /// Serves only these verbs.
    #[must_use]
    pub fn verbs(mut self, verbs: &[&str]) -> Self {
        self.verbs = verbs.iter().map(|verb| (*verb).to_owned()).collect();
        self
    }

    /// Serves another subresource.
    #[must_use]
    pub fn with_subresource(mut self, subresource: SubresourceDef) -> Self {
        self.subresources.push(subresource);
        self
    }

    /// Whether `name` is a subresource it serves.
    #[must_use]
    pub fn serves_subresource(&self, name: &str) -> bool {
        match name {
            "status" => self.status_subresource,
            "scale" => self.scale_subresource.is_some(),
            _ => self.subresources.iter().any(|subresource| subresource.name == name),
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

    /// Puts it in the `all` category, which `kubectl get all` lists.
    #[must_use]
    pub fn in_all(mut self) -> Self {
        self.categories.push("all".to_owned());
        self
    }

    /// Puts it in these categories too.
    #[must_use]
    pub fn categories(mut self, categories: &[&str]) -> Self {
        self.categories
            .extend(categories.iter().map(|category| (*category).to_owned()));
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

    /// The entries of this resource in an `APIResourceList`: the resource,
    /// then its subresources by name. Empty short names are left out, as the
    /// API server serializes them.
    fn discovery_entries(&self) -> Vec<Value> {
        let mut main = json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": self.verbs,
        });
        if !self.short_names.is_empty() {
            main["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            main["categories"] = json!(self.categories);
        }
        let mut subresources = self.subresources.clone();
        if self.status_subresource {
            subresources.push(SubresourceDef::new("status", &self.kind, &["get", "patch", "update"]));
        }
        if self.scale_subresource.is_some() {
            subresources
                .push(SubresourceDef::new("scale", "Scale", &["get", "patch", "update"]).of("autoscaling", "v1"));
        }
        subresources.sort_by(|a, b| a.name.cmp(&b.name));
        let mut entries = vec![main];
        entries.extend(subresources.iter().map(|subresource| {
            let mut entry = json!({
                "name": format!("{}/{}", self.plural, subresource.name),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": subresource.kind,
                "verbs": subresource.verbs,
            });
            if let Some((group, version)) = &subresource.group_version {
                entry["group"] = json!(group);
                entry["version"] = json!(version);
            }
            entry
        }));
        entries
    }
}

/// The resource types every emulated server starts with.
#[must_use]
pub fn built_in() -> Vec<ResourceDef> {
    vec![
        // A namespace is finalized before it goes, so a delete answers it.
        ResourceDef::new("", "v1", "Namespace", "namespaces")
            .cluster_scoped()
            .with_status()
            .returning_deleted_object()
            .short_names(&["ns"]),
        ResourceDef::new("", "v1", "Node", "nodes")
            .cluster_scoped()
            .with_status()
            .with_subresource(SubresourceDef::new("proxy", "NodeProxyOptions", &PROXY_VERBS))
            .short_names(&["no"]),
        ResourceDef::new("", "v1", "Pod", "pods")
            .with_status()
            .in_all()
            .with_generation()
            .returning_deleted_object()
            .with_subresource(SubresourceDef::new("attach", "PodAttachOptions", &["create", "get"]))
            .with_subresource(SubresourceDef::new(
                "ephemeralcontainers",
                "Pod",
                &["get", "patch", "update"],
            ))
            .with_subresource(SubresourceDef::new("eviction", "Eviction", &["create"]).of("policy", "v1"))
            .with_subresource(SubresourceDef::new("exec", "PodExecOptions", &["create", "get"]))
            .with_subresource(SubresourceDef::new("log", "Pod", &["get"]))
            .with_subresource(SubresourceDef::new(
                "portforward",
                "PodPortForwardOptions",
                &["create", "get"],
            ))
            .short_names(&["po"]),
        // Stored as written: no controller fills endpoints, binds volumes
        // or enforces quotas and limits.
        ResourceDef::new("", "v1", "Endpoints", "endpoints").short_names(&["ep"]),
        ResourceDef::new("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims")
            .with_status()
            .short_names(&["pvc"]),
        ResourceDef::new("", "v1", "PersistentVolume", "persistentvolumes")
            .cluster_scoped()
            .with_status()
            .short_names(&["pv"]),
        ResourceDef::new("", "v1", "ResourceQuota", "resourcequotas")
            .with_status()
            .short_names(&["quota"]),
        ResourceDef::new("", "v1", "LimitRange", "limitranges").short_names(&["limits"]),
        ResourceDef::new("", "v1", "ReplicationController", "replicationcontrollers")
            .with_status()
            .in_all()
            .with_generation()
            .with_scale(ScalePaths::replicas())
            .short_names(&["rc"]),
        ResourceDef::new("", "v1", "PodTemplate", "podtemplates"),
        ResourceDef::new("apps", "v1", "ControllerRevision", "controllerrevisions"),
        ResourceDef::new("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets")
            .with_status()
            .with_generation()
            .short_names(&["pdb"]),
        ResourceDef::new(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        )
        .cluster_scoped()
        .with_generation()
        .categories(&["api-extensions"]),
        ResourceDef::new(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        )
        .cluster_scoped()
        .with_generation()
        .categories(&["api-extensions"]),
        ResourceDef::new(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
        )
        .cluster_scoped()
        .with_status()
        .with_generation()
        .categories(&["api-extensions"]),
        ResourceDef::new(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        )
        .cluster_scoped()
        .with_generation()
        .categories(&["api-extensions"]),
        ResourceDef::new("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses").cluster_scoped(),
        ResourceDef::new("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema", "flowschemas")
            .cluster_scoped()
            .with_status()
            .with_generation(),
        ResourceDef::new(
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "PriorityLevelConfiguration",
            "prioritylevelconfigurations",
        )
        .cluster_scoped()
        .with_status()
        .with_generation(),
        ResourceDef::new("storage.k8s.io", "v1", "CSIDriver", "csidrivers").cluster_scoped(),
        ResourceDef::new("storage.k8s.io", "v1", "CSINode", "csinodes").cluster_scoped(),
        ResourceDef::new("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments")
            .cluster_scoped()
            .with_status(),
        ResourceDef::new("storage.k8s.io", "v1", "CSIStorageCapacity", "csistoragecapacities"),
        ResourceDef::new("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
        ResourceDef::new("networking.k8s.io", "v1", "Ingress", "ingresses")
            .with_status()
            .with_generation()
            .short_names(&["ing"]),
        ResourceDef::new("networking.k8s.io", "v1", "IngressClass", "ingressclasses").cluster_scoped(),
        ResourceDef::new("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies")
            .with_generation()
            .short_names(&["netpol"]),
        ResourceDef::new("storage.k8s.io", "v1", "StorageClass", "storageclasses")
            .cluster_scoped()
            .returning_deleted_object()
            .short_names(&["sc"]),
        ResourceDef::new("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses")
            .cluster_scoped()
            .short_names(&["pc"]),
        // Computed on each request from the components' health, not stored.
        ResourceDef::new("", "v1", "ComponentStatus", "componentstatuses")
            .cluster_scoped()
            .verbs(&["get", "list"])
            .short_names(&["cs"]),
        ResourceDef::new("", "v1", "ConfigMap", "configmaps").short_names(&["cm"]),
        ResourceDef::new("", "v1", "Secret", "secrets"),
        ResourceDef::new("", "v1", "Service", "services")
            .with_status()
            .in_all()
            .returning_deleted_object()
            .short_names(&["svc"]),
        ResourceDef::new("", "v1", "ServiceAccount", "serviceaccounts")
            .returning_deleted_object()
            .with_subresource(
                SubresourceDef::new("token", "TokenRequest", &["create"]).of("authentication.k8s.io", "v1"),
            )
            .short_names(&["sa"]),
        ResourceDef::new("", "v1", "Event", "events").short_names(&["ev"]),
        ResourceDef::new("events.k8s.io", "v1", "Event", "events")
            .short_names(&["ev"])
            .stored_as(Conversion::EventsV1),
        ResourceDef::new("apps", "v1", "Deployment", "deployments")
            .with_status()
            .in_all()
            .with_generation()
            .with_scale(ScalePaths::replicas())
            .short_names(&["deploy"]),
        ResourceDef::new("apps", "v1", "ReplicaSet", "replicasets")
            .with_status()
            .in_all()
            .with_generation()
            .with_scale(ScalePaths::replicas())
            .short_names(&["rs"]),
        ResourceDef::new("apps", "v1", "StatefulSet", "statefulsets")
            .with_status()
            .in_all()
            .with_generation()
            .with_scale(ScalePaths::replicas())
            .short_names(&["sts"]),
        ResourceDef::new("apps", "v1", "DaemonSet", "daemonsets")
            .with_status()
            .in_all()
            .with_generation()
            .short_names(&["ds"]),
        ResourceDef::new(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
        )
        .with_status()
        .in_all()
        .with_generation()
        .short_names(&["hpa"]),
        // A real server keeps one storage behind both versions and converts
        // between them; here they are two resources, as the Events are.
        ResourceDef::new(
            "autoscaling",
            "v1",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
        )
        .with_status()
        .with_generation()
        .short_names(&["hpa"]),
        // Reviews are answered, not stored: `create` only.
        ResourceDef::new("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews")
            .cluster_scoped()
            .verbs(&["create"]),
        ResourceDef::new("authentication.k8s.io", "v1", "TokenReview", "tokenreviews")
            .cluster_scoped()
            .verbs(&["create"]),
        ResourceDef::new(
            "authorization.k8s.io",
            "v1",
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
        )
        .cluster_scoped()
        .verbs(&["create"]),
        ResourceDef::new(
            "authorization.k8s.io",
            "v1",
            "SelfSubjectRulesReview",
            "selfsubjectrulesreviews",
        )
        .cluster_scoped()
        .verbs(&["create"]),
        ResourceDef::new(
            "authorization.k8s.io",
            "v1",
            "SubjectAccessReview",
            "subjectaccessreviews",
        )
        .cluster_scoped()
        .verbs(&["create"]),
        ResourceDef::new(
            "authorization.k8s.io",
            "v1",
            "LocalSubjectAccessReview",
            "localsubjectaccessreviews",
        )
        .verbs(&["create"]),
        ResourceDef::new("batch", "v1", "Job", "jobs")
            .with_status()
            .in_all()
            .with_generation(),
        ResourceDef::new("batch", "v1", "CronJob", "cronjobs")
            .with_status()
            .in_all()
            .with_generation()
            .short_names(&["cj"]),
        ResourceDef::new("coordination.k8s.io", "v1", "Lease", "leases"),
        // What they grant is enforced; see `auth`.
        ResourceDef::new("rbac.authorization.k8s.io", "v1", "Role", "roles"),
        ResourceDef::new("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
        ResourceDef::new("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles").cluster_scoped(),
        ResourceDef::new(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
        )
        .cluster_scoped(),
        ResourceDef::new(
            "certificates.k8s.io",
            "v1",
            "CertificateSigningRequest",
            "certificatesigningrequests",
        )
        .cluster_scoped()
        .with_status()
        .with_subresource(SubresourceDef::new(
            "approval",
            "CertificateSigningRequest",
            &["get", "patch", "update"],
        ))
        .short_names(&["csr"]),
        ResourceDef::new("apiregistration.k8s.io", "v1", "APIService", "apiservices")
            .cluster_scoped()
            .with_status(),
        ResourceDef::new(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        )
        .cluster_scoped()
        .with_status()
        .with_generation()
        // Its cleanup finalizer keeps it while its objects go.
        .returning_deleted_object()
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
    pub(crate) fn apiservices() -> ResourceId {
        ResourceId::new("apiregistration.k8s.io", "v1", "apiservices")
    }
    pub(crate) fn services() -> ResourceId {
        ResourceId::new("", "v1", "services")
    }
    pub(crate) fn nodes() -> ResourceId {
        ResourceId::new("", "v1", "nodes")
    }
    pub(crate) fn serviceaccounts() -> ResourceId {
        ResourceId::new("", "v1", "serviceaccounts")
    }
    pub(crate) fn roles() -> ResourceId {
        ResourceId::new("rbac.authorization.k8s.io", "v1", "roles")
    }
    pub(crate) fn role_bindings() -> ResourceId {
        ResourceId::new("rbac.authorization.k8s.io", "v1", "rolebindings")
    }
    pub(crate) fn cluster_roles() -> ResourceId {
        ResourceId::new("rbac.authorization.k8s.io", "v1", "clusterroles")
    }
    pub(crate) fn cluster_role_bindings() -> ResourceId {
        ResourceId::new("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
    }
    pub(crate) fn disruption_budgets() -> ResourceId {
        ResourceId::new("policy", "v1", "poddisruptionbudgets")
    }
    pub(crate) fn leases() -> ResourceId {
        ResourceId::new("coordination.k8s.io", "v1", "leases")
    }
    pub(crate) fn hpas() -> ResourceId {
        ResourceId::new("autoscaling", "v2", "horizontalpodautoscalers")
    }
}
