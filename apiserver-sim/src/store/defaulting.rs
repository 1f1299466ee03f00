//! Defaulting of built-in objects, as kube-apiserver's `SetDefaults_*` functions, its admission plugins and its create strategies fill them in.
//!
//! Every write of the object (create, update, patch, apply) is defaulted, as
//! kube-apiserver defaults what it decodes, so a field a client leaves out
//! reads back as a cluster would write it:
//!
//! | kind | defaults |
//! | --- | --- |
//! | pod specs (Pods and every template) | `restartPolicy`, `dnsPolicy`, `terminationGracePeriodSeconds`, `securityContext`, `schedulerName`, `enableServiceLinks`; a container's `imagePullPolicy`, `terminationMessagePath`/`Policy`, `resources`, ports' `protocol`, probes' timings; volumes' `defaultMode` |
//! | Pods only (admission) | `serviceAccountName` and its token volume, the `not-ready`/`unreachable` tolerations, `priority`, `preemptionPolicy` |
//! | Deployments, ReplicaSets, StatefulSets, DaemonSets, ReplicationControllers | `replicas`, `strategy`/`updateStrategy`, `revisionHistoryLimit`, `progressDeadlineSeconds`, … |
//! | Jobs, CronJobs | `completions`, `parallelism`, `backoffLimit`, `completionMode`, the generated selector; `concurrencyPolicy`, history limits |
//! | Services | `type`, `sessionAffinity`, ports' `protocol` and `targetPort`, a `clusterIP` from `10.96.0.0/12`, node ports for `NodePort` and `LoadBalancer`, IP families, traffic policies, `status.loadBalancer` |
//! | Namespaces | the `kubernetes.io/metadata.name` label, the `kubernetes` finalizer |
//! | Nodes | every `nodeInfo` field and `daemonEndpoints`, which Go always writes |
//! | others | a Secret's `type` (its `stringData` folded into `data`), webhooks' policies and timeouts, a CSIDriver's, StorageClass's and PriorityClass's policies, PVCs' and PVs' modes, HPAs' `minReplicas` and `behavior` |
//!
//! On an update, what the server allocated (a Service's cluster IPs and node
//! ports) is kept when the body leaves it out, as kube-apiserver keeps it, so
//! `kubectl replace -f` of a manifest works.

use std::collections::HashSet;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::resources::ResourceDef;

/// The Service range's first address, which the `kubernetes` Service holds.
const SERVICE_RANGE_START: u32 = u32::from_be_bytes([10, 96, 0, 0]);
/// Addresses in `10.96.0.0/12`.
const SERVICE_RANGE_SIZE: u32 = 1 << 20;
/// Node ports, `30000-32767`.
const NODE_PORTS: std::ops::RangeInclusive<u64> = 30_000..=32_767;

/// What is in use in the cluster, for the values the server allocates.
#[derive(Debug, Default)]
pub(super) struct Allocated {
    /// The Services' cluster IPs.
    pub(super) cluster_ips: HashSet<std::net::Ipv4Addr>,
    /// The Services' node ports.
    pub(super) node_ports: HashSet<u64>,
}

/// Fills in what kube-apiserver's defaulting fills in; `previous` is the
/// stored object on an update.
pub(super) fn apply(def: &ResourceDef, body: &mut Value, previous: Option<&Value>, allocated: &Allocated) {
    let Some(object) = body.as_object_mut() else {
        return;
    };
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "Pod") => {
            if let Some(spec) = object.get_mut("spec") {
                pod_spec(spec);
                pod_admission(spec);
            }
        }
        ("", "PodTemplate") => template(object.get_mut("template")),
        ("", "ReplicationController") => {
            let spec = object_entry(object, "spec");
            set(spec, "replicas", json!(1));
            let labels = spec["template"]["metadata"]["labels"].clone();
            if labels.is_object() {
                set(spec, "selector", labels.clone());
                set(object_entry(object, "metadata"), "labels", labels);
            }
            template(object.get_mut("spec").and_then(|spec| spec.get_mut("template")));
        }
        ("", "Service") => service(object, previous, allocated),
        ("", "Namespace") => namespace(object, previous),
        ("", "Node") => node(object),
        ("", "Secret") => secret(object),
        ("", "PersistentVolumeClaim") => {
            set(object_entry(object, "spec"), "volumeMode", json!("Filesystem"));
        }
        ("", "PersistentVolume") => {
            let spec = object_entry(object, "spec");
            set(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
            set(spec, "volumeMode", json!("Filesystem"));
        }
        ("", "Endpoints") => {
            for subset in array(object.get_mut("subsets")) {
                ports(subset.get_mut("ports"));
            }
        }
        ("discovery.k8s.io", "EndpointSlice") => ports(object.get_mut("ports")),
        ("apps", "Deployment") => {
            let spec = object_entry(object, "spec");
            set(spec, "replicas", json!(1));
            let strategy = object_entry(spec, "strategy");
            set(strategy, "type", json!("RollingUpdate"));
            if strategy["type"] == "RollingUpdate" {
                let rolling = object_entry(strategy, "rollingUpdate");
                set(rolling, "maxUnavailable", json!("25%"));
                set(rolling, "maxSurge", json!("25%"));
            }
            set(spec, "revisionHistoryLimit", json!(10));
            set(spec, "progressDeadlineSeconds", json!(600));
            template(spec.get_mut("template"));
        }
        ("apps", "ReplicaSet") => {
            let spec = object_entry(object, "spec");
            set(spec, "replicas", json!(1));
            template(spec.get_mut("template"));
        }
        ("apps", "StatefulSet") => {
            let spec = object_entry(object, "spec");
            set(spec, "replicas", json!(1));
            set(spec, "podManagementPolicy", json!("OrderedReady"));
            let strategy = object_entry(spec, "updateStrategy");
            set(strategy, "type", json!("RollingUpdate"));
            if strategy["type"] == "RollingUpdate" {
                set(object_entry(strategy, "rollingUpdate"), "partition", json!(0));
            }
            set(spec, "revisionHistoryLimit", json!(10));
            let retention = object_entry(spec, "persistentVolumeClaimRetentionPolicy");
            set(retention, "whenDeleted", json!("Retain"));
            set(retention, "whenScaled", json!("Retain"));
            template(spec.get_mut("template"));
        }
        ("apps", "DaemonSet") => {
            let spec = object_entry(object, "spec");
            let strategy = object_entry(spec, "updateStrategy");
            set(strategy, "type", json!("RollingUpdate"));
            if strategy["type"] == "RollingUpdate" {
                let rolling = object_entry(strategy, "rollingUpdate");
                set(rolling, "maxUnavailable", json!(1));
                set(rolling, "maxSurge", json!(0));
            }
            set(spec, "revisionHistoryLimit", json!(10));
            template(spec.get_mut("template"));
        }
        ("batch", "Job") => job_spec(object_entry(object, "spec")),
        ("batch", "CronJob") => {
            let spec = object_entry(object, "spec");
            set(spec, "concurrencyPolicy", json!("Allow"));
            set(spec, "suspend", json!(false));
            set(spec, "successfulJobsHistoryLimit", json!(3));
            set(spec, "failedJobsHistoryLimit", json!(1));
            let job_template = object_entry(spec, "jobTemplate");
            job_spec(object_entry(job_template, "spec"));
        }
        ("autoscaling", "HorizontalPodAutoscaler") => hpa(def, object),
        ("networking.k8s.io", "NetworkPolicy") => {
            let spec = object_entry(object, "spec");
            for direction in ["ingress", "egress"] {
                for rule in array(spec.get_mut(direction)) {
                    ports(rule.get_mut("ports"));
                }
            }
            if spec.get("policyTypes").is_none_or(Value::is_null) {
                let mut types = vec![json!("Ingress")];
                if spec.get("egress").is_some_and(|egress| !egress.is_null()) {
                    types.push(json!("Egress"));
                }
                spec.insert("policyTypes".into(), json!(types));
            }
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            // A ServiceAccount's is `""`, which Go leaves out.
            for subject in array(object.get_mut("subjects")) {
                if matches!(subject["kind"].as_str(), Some("User" | "Group")) {
                    set(subject, "apiGroup", json!("rbac.authorization.k8s.io"));
                }
            }
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration") => {
            let mutating = def.kind == "MutatingWebhookConfiguration";
            for webhook in array(object.get_mut("webhooks")) {
                set(webhook, "failurePolicy", json!("Fail"));
                set(webhook, "matchPolicy", json!("Equivalent"));
                set(webhook, "namespaceSelector", json!({}));
                set(webhook, "objectSelector", json!({}));
                set(webhook, "timeoutSeconds", json!(10));
                if mutating {
                    set(webhook, "reinvocationPolicy", json!("Never"));
                }
                for rule in array(webhook.get_mut("rules")) {
                    set(rule, "scope", json!("*"));
                }
                if let Some(service) = webhook
                    .get_mut("clientConfig")
                    .and_then(|config| config.get_mut("service"))
                    .and_then(Value::as_object_mut)
                {
                    set(service, "port", json!(443));
                }
            }
        }
        ("storage.k8s.io", "StorageClass") => {
            set(object, "reclaimPolicy", json!("Delete"));
            set(object, "volumeBindingMode", json!("Immediate"));
        }
        ("storage.k8s.io", "CSIDriver") => {
            let spec = object_entry(object, "spec");
            set(spec, "attachRequired", json!(true));
            set(spec, "podInfoOnMount", json!(false));
            set(spec, "requiresRepublish", json!(false));
            set(spec, "storageCapacity", json!(false));
            set(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
            set(spec, "seLinuxMount", json!(false));
            set(spec, "volumeLifecycleModes", json!(["Persistent"]));
        }
        ("scheduling.k8s.io", "PriorityClass") => {
            set(object, "preemptionPolicy", json!("PreemptLowerPriority"));
        }
        _ => {}
    }
}

/// What a create strategy writes once the object has its uid: a Job's
/// generated selector and the labels it selects, on its pod template.
pub(super) fn prepare_for_create(def: &ResourceDef, body: &mut Value) {
    if def.group == "batch" && def.kind == "Job" && body["spec"]["manualSelector"] != true {
        let uid = body["metadata"]["uid"].clone();
        let name = body["metadata"]["name"].clone();
        let Some(spec) = body["spec"].as_object_mut() else {
            return;
        };
        spec.insert(
            "selector".into(),
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        );
        let labels = object_entry(object_entry(object_entry(spec, "template"), "metadata"), "labels");
        for (key, value) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            labels.insert(key.into(), value.clone());
        }
    }
}

/// The object under `key`, made an empty one when missing or not an object.
fn object_entry<'a>(object: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let entry = object.entry(key).or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    entry.as_object_mut().expect("made an object")
}

/// Sets `key` to `value` when it is missing or null.
fn set(object: &mut Map<String, Value>, key: &str, value: Value) {
    if object.get(key).is_none_or(Value::is_null) {
        object.insert(key.into(), value);
    }
}

/// The objects of a list field, if it is one.
fn array(value: Option<&mut Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    value
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// A pod template's spec.
fn template(template: Option<&mut Value>) {
    if let Some(spec) = template.and_then(|template| template.get_mut("spec")) {
        pod_spec(spec);
    }
}

fn job_spec(spec: &mut Map<String, Value>) {
    let indexed = spec.get("completionMode").and_then(Value::as_str) == Some("Indexed");
    if spec.get("completions").is_none_or(Value::is_null) && spec.get("parallelism").is_none_or(Value::is_null) {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    set(spec, "parallelism", json!(1));
    set(spec, "backoffLimit", json!(if indexed { 2_147_483_647 } else { 6 }));
    set(spec, "completionMode", json!("NonIndexed"));
    set(spec, "suspend", json!(false));
    set(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    template(spec.get_mut("template"));
}

/// `SetDefaults_PodSpec` and what it runs on containers, probes and volumes.
fn pod_spec(spec: &mut Value) {
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    set(spec, "restartPolicy", json!("Always"));
    set(spec, "terminationGracePeriodSeconds", json!(30));
    set(spec, "dnsPolicy", json!("ClusterFirst"));
    set(spec, "securityContext", json!({}));
    set(spec, "schedulerName", json!("default-scheduler"));
    set(spec, "enableServiceLinks", json!(true));
    if let Some(account) = spec
        .get("serviceAccountName")
        .filter(|account| account.is_string())
        .cloned()
    {
        set(spec, "serviceAccount", account);
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for container in array(spec.get_mut(list)) {
            container_defaults(container);
        }
    }
    for volume in array(spec.get_mut("volumes")) {
        for (source, mode) in [
            ("configMap", "defaultMode"),
            ("secret", "defaultMode"),
            ("downwardAPI", "defaultMode"),
        ] {
            if let Some(source) = volume.get_mut(source).and_then(Value::as_object_mut) {
                set(source, mode, json!(420));
            }
        }
        if let Some(projected) = volume.get_mut("projected").and_then(Value::as_object_mut) {
            set(projected, "defaultMode", json!(420));
        }
        if let Some(host_path) = volume.get_mut("hostPath").and_then(Value::as_object_mut) {
            set(host_path, "type", json!(""));
        }
    }
}

fn container_defaults(container: &mut Map<String, Value>) {
    let image = container.get("image").and_then(Value::as_str).unwrap_or_default();
    // `Always` for an image without a tag or with `latest`, as kubelets pull it.
    let last = image.rsplit('/').next().unwrap_or(image);
    let untagged = !image.contains('@') && last.split_once(':').is_none_or(|(_, tag)| tag == "latest");
    set(
        container,
        "imagePullPolicy",
        json!(if untagged { "Always" } else { "IfNotPresent" }),
    );
    set(container, "terminationMessagePath", json!("/dev/termination-log"));
    set(container, "terminationMessagePolicy", json!("File"));
    set(container, "resources", json!({}));
    ports(container.get_mut("ports"));
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(probe) = container.get_mut(probe).and_then(Value::as_object_mut) {
            set(probe, "timeoutSeconds", json!(1));
            set(probe, "periodSeconds", json!(10));
            set(probe, "successThreshold", json!(1));
            set(probe, "failureThreshold", json!(3));
            if let Some(get) = probe.get_mut("httpGet").and_then(Value::as_object_mut) {
                set(get, "scheme", json!("HTTP"));
                set(get, "path", json!("/"));
            }
        }
    }
    for env in array(container.get_mut("env")) {
        if let Some(field) = env
            .get_mut("valueFrom")
            .and_then(|from| from.get_mut("fieldRef"))
            .and_then(Value::as_object_mut)
        {
            set(field, "apiVersion", json!("v1"));
        }
    }
}

/// Every port's `protocol`, `TCP` unless set.
fn ports(ports: Option<&mut Value>) {
    for port in array(ports) {
        set(port, "protocol", json!("TCP"));
    }
}

/// What kube-apiserver's admission plugins add to a Pod: the ServiceAccount
/// (and the projected volume of its token, mounted in every container), the
/// `DefaultTolerationSeconds` tolerations, and the priority of no class.
fn pod_admission(spec: &mut Value) {
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    set(spec, "serviceAccountName", json!("default"));
    let account = spec["serviceAccountName"].clone();
    set(spec, "serviceAccount", account);
    if spec.get("automountServiceAccountToken") != Some(&json!(false)) {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        let has_token = volumes.as_array().is_some_and(|volumes| {
            volumes.iter().any(|volume| {
                volume["name"]
                    .as_str()
                    .is_some_and(|name| name.starts_with("kube-api-access-"))
            })
        });
        if !has_token && let Some(volumes) = volumes.as_array_mut() {
            let name = format!("kube-api-access-{}", super::meta::random_suffix());
            volumes.push(token_volume(&name));
            for list in ["initContainers", "containers"] {
                for container in array(spec.get_mut(list)) {
                    let mounts = container.entry("volumeMounts").or_insert_with(|| json!([]));
                    if let Some(mounts) = mounts.as_array_mut() {
                        mounts.push(json!({
                            "name": name, "readOnly": true,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        }));
                    }
                }
            }
        }
    }
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(tolerations) = tolerations.as_array_mut() {
        for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
            if !tolerations.iter().any(|toleration| toleration["key"] == key) {
                tolerations
                    .push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    set(spec, "priority", json!(0));
    set(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
}

/// The projected volume of a pod's service account token, CA bundle and namespace.
fn token_volume(name: &str) -> Value {
    json!({"name": name, "projected": {"sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ], "defaultMode": 420}})
}

fn service(object: &mut Map<String, Value>, previous: Option<&Value>, allocated: &Allocated) {
    let before = previous.map(|previous| &previous["spec"]);
    let spec = object_entry(object, "spec");
    set(spec, "type", json!("ClusterIP"));
    let kind = spec["type"].as_str().unwrap_or_default().to_owned();
    if kind == "ExternalName" {
        return;
    }
    set(spec, "sessionAffinity", json!("None"));
    // What the server allocated stays when an update leaves it out.
    for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        if let Some(kept) = before.map(|before| &before[field]).filter(|kept| !kept.is_null()) {
            set(spec, field, kept.clone());
        }
    }
    if spec.get("clusterIP").and_then(Value::as_str).is_none_or(str::is_empty) {
        let ip = free_cluster_ip(allocated);
        spec.insert("clusterIP".into(), json!(ip));
    }
    let ip = spec["clusterIP"].clone();
    set(spec, "clusterIPs", json!([ip]));
    set(spec, "ipFamilies", json!(["IPv4"]));
    set(spec, "ipFamilyPolicy", json!("SingleStack"));
    set(spec, "internalTrafficPolicy", json!("Cluster"));
    let exposed = matches!(kind.as_str(), "NodePort" | "LoadBalancer");
    if exposed {
        set(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        set(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    let mut taken = allocated.node_ports.clone();
    let old_ports: Vec<Value> = before
        .and_then(|before| before["ports"].as_array().cloned())
        .unwrap_or_default();
    for port in array(spec.get_mut("ports")) {
        set(port, "protocol", json!("TCP"));
        let number = port.get("port").cloned().unwrap_or(Value::Null);
        set(port, "targetPort", number);
        if exposed && port.get("nodePort").is_none_or(Value::is_null) {
            let kept = old_ports
                .iter()
                .find(|old| old["port"] == port["port"] && old["protocol"] == port["protocol"])
                .and_then(|old| old["nodePort"].as_u64());
            let node_port = kept.unwrap_or_else(|| {
                NODE_PORTS
                    .clone()
                    .find(|candidate| !taken.contains(candidate))
                    .unwrap_or(*NODE_PORTS.end())
            });
            taken.insert(node_port);
            port.insert("nodePort".into(), json!(node_port));
        }
    }
    let status = object_entry(object, "status");
    set(status, "loadBalancer", json!({}));
}

/// The first address of the Service range no Service holds.
fn free_cluster_ip(allocated: &Allocated) -> String {
    (1..SERVICE_RANGE_SIZE - 1)
        .map(|offset| std::net::Ipv4Addr::from(SERVICE_RANGE_START + offset))
        .find(|ip| !allocated.cluster_ips.contains(ip))
        .map_or_else(|| "10.96.0.2".to_owned(), |ip| ip.to_string())
}

fn namespace(object: &mut Map<String, Value>, previous: Option<&Value>) {
    let name = object["metadata"]["name"].clone();
    if name.is_string() {
        let labels = object_entry(object_entry(object, "metadata"), "labels");
        labels.insert("kubernetes.io/metadata.name".into(), name);
    }
    let finalizers = match previous {
        Some(previous) => previous["spec"]["finalizers"].clone(),
        None => json!(["kubernetes"]),
    };
    let spec = object_entry(object, "spec");
    if finalizers.is_null() {
        spec.remove("finalizers");
    } else {
        spec.insert("finalizers".into(), finalizers);
    }
}

/// A Node's status always has its `nodeInfo` and `daemonEndpoints`: Go
/// writes those structs with every field, set or not.
fn node(object: &mut Map<String, Value>) {
    let status = object_entry(object, "status");
    let endpoints = object_entry(status, "daemonEndpoints");
    set(endpoints, "kubeletEndpoint", json!({"Port": 0}));
    let info = object_entry(status, "nodeInfo");
    for field in [
        "machineID",
        "systemUUID",
        "bootID",
        "kernelVersion",
        "osImage",
        "containerRuntimeVersion",
        "kubeletVersion",
        "kubeProxyVersion",
        "operatingSystem",
        "architecture",
    ] {
        set(info, field, json!(""));
    }
}

/// A Secret's `type` is `Opaque` unless set; its `stringData` is folded
/// into `data` (each value base64-encoded, over a key `data` has too) and
/// not stored.
fn secret(object: &mut Map<String, Value>) {
    if object.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
        object.insert("type".into(), json!("Opaque"));
    }
    if let Some(Value::Object(strings)) = object.remove("stringData") {
        let data = object_entry(object, "data");
        for (key, value) in strings {
            let text = value.as_str().unwrap_or_default();
            data.insert(key, json!(base64::engine::general_purpose::STANDARD.encode(text)));
        }
    }
}

fn hpa(def: &ResourceDef, object: &mut Map<String, Value>) {
    let spec = object_entry(object, "spec");
    set(spec, "minReplicas", json!(1));
    if def.version == "v1" {
        return;
    }
    if spec.get("metrics").and_then(Value::as_array).is_none_or(Vec::is_empty) {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
    let behavior = object_entry(spec, "behavior");
    let up = object_entry(behavior, "scaleUp");
    set(up, "stabilizationWindowSeconds", json!(0));
    set(up, "selectPolicy", json!("Max"));
    set(
        up,
        "policies",
        json!([{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]),
    );
    let down = object_entry(behavior, "scaleDown");
    set(down, "selectPolicy", json!("Max"));
    set(
        down,
        "policies",
        json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::built_in;

    fn def(kind: &str) -> ResourceDef {
        built_in()
            .into_iter()
            .find(|def| def.kind == kind)
            .expect("a built-in kind")
    }

    #[test]
    fn a_pods_containers_get_the_pull_policy_of_their_tag() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "image": "nginx"}, {"name": "b", "image": "nginx:1.27"},
            {"name": "c", "image": "registry:5000/app:latest"}, {"name": "d", "image": "registry:5000/app"}]}});
        apply(&def("Pod"), &mut pod, None, &Allocated::default());
        let policies: Vec<&str> = pod["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["imagePullPolicy"].as_str().unwrap())
            .collect();
        assert_eq!(policies, ["Always", "IfNotPresent", "Always", "Always"]);
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        assert_eq!(pod["spec"]["securityContext"], json!({}));
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_service_gets_a_free_cluster_ip_and_keeps_it_on_update() {
        let allocated = Allocated {
            cluster_ips: [std::net::Ipv4Addr::new(10, 96, 0, 1)].into(),
            node_ports: [30000].into(),
        };
        let mut service = json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        apply(&def("Service"), &mut service, None, &allocated);
        assert_eq!(service["spec"]["clusterIP"], "10.96.0.2");
        assert_eq!(
            service["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30001})
        );
        let mut replaced = json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        apply(&def("Service"), &mut replaced, Some(&service), &allocated);
        assert_eq!(replaced["spec"], service["spec"]);
    }
}
