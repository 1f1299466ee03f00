//! A seeded synthetic workload: namespaces of deployments whose pods churn, with
//! HPAs and configmaps, written into the store the way a cluster's controllers and
//! kubelets write.
//!
//! The same seed gives the same sequence of changes.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::Shared;
use crate::status::Result;
use crate::store::{PatchType, Store};

/// The pod annotation carrying the pod's CPU usage, read by the example HPA plugin.
pub const CPU_USAGE_ANNOTATION: &str = "metrics.kinformer.dev/cpu-millicores";

/// The shape and pace of a workload.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Seeds every random choice.
    pub seed: u64,
    /// Namespaces `ns-0`, `ns-1`, ...
    pub namespaces: usize,
    /// Deployments per namespace, each with a ReplicaSet and an HPA.
    pub deployments_per_namespace: usize,
    /// Initial pods per deployment.
    pub pods_per_deployment: usize,
    /// ConfigMaps per namespace.
    pub configmaps_per_namespace: usize,
    /// Changes per second while churning.
    pub changes_per_second: f64,
    /// Pods as real clusters serve them (managedFields, env, volumes, status):
    /// about 10 KB of JSON each, instead of about 1.5 KB.
    pub realistic_pods: bool,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            seed: 1,
            namespaces: 2,
            deployments_per_namespace: 2,
            pods_per_deployment: 3,
            configmaps_per_namespace: 2,
            changes_per_second: 20.0,
            realistic_pods: false,
        }
    }
}

impl Workload {
    /// Sets [`Workload::seed`].
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the size: namespaces, deployments per namespace, pods per deployment.
    #[must_use]
    pub fn size(mut self, namespaces: usize, deployments_per_namespace: usize, pods_per_deployment: usize) -> Self {
        self.namespaces = namespaces;
        self.deployments_per_namespace = deployments_per_namespace;
        self.pods_per_deployment = pods_per_deployment;
        self
    }

    /// Sets [`Workload::changes_per_second`].
    #[must_use]
    pub fn changes_per_second(mut self, rate: f64) -> Self {
        self.changes_per_second = rate;
        self
    }

    /// Sets [`Workload::realistic_pods`].
    #[must_use]
    pub fn realistic_pods(mut self, realistic: bool) -> Self {
        self.realistic_pods = realistic;
        self
    }

    /// Creates the initial objects and returns the generator of further changes.
    ///
    /// # Errors
    ///
    /// When the store refuses an object (for instance, it exists already).
    pub fn populate(&self, store: &Store) -> Result<Churn> {
        let mut churn = Churn {
            workload: self.clone(),
            rng: StdRng::seed_from_u64(self.seed),
            deployments: Vec::new(),
            next_pod: 0,
        };
        for n in 0..self.namespaces {
            let namespace = format!("ns-{n}");
            store.create(&ids::namespaces(), None, json!({"metadata": {"name": namespace}}))?;
            for c in 0..self.configmaps_per_namespace {
                store.create(
                    &ids::configmaps(),
                    Some(&namespace),
                    json!({"metadata": {"name": format!("config-{c}")}, "data": {"revision": "0"}}),
                )?;
            }
            for d in 0..self.deployments_per_namespace {
                let name = format!("app-{d}");
                let deployment = Deployment {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    pods: Vec::new(),
                    replicaset_uid: String::new(),
                };
                churn.create_deployment(store, deployment)?;
            }
        }
        Ok(churn)
    }
}

/// A deployment the workload manages.
#[derive(Debug)]
struct Deployment {
    namespace: String,
    name: String,
    pods: Vec<String>,
    replicaset_uid: String,
}

/// The generator of a workload's changes; call [`Churn::step`] for each one.
#[derive(Debug)]
pub struct Churn {
    workload: Workload,
    rng: StdRng,
    deployments: Vec<Deployment>,
    next_pod: u64,
}

impl Churn {
    /// Applies one random change: mostly pod status updates, then pod
    /// replacements, HPA status updates, configmap edits and scaling.
    ///
    /// # Errors
    ///
    /// When the store refuses a write the workload expected to succeed.
    pub fn step(&mut self, store: &Store) -> Result<()> {
        if self.deployments.is_empty() {
            return Ok(());
        }
        let d = self.rng.random_range(0..self.deployments.len());
        match self.rng.random_range(0..100) {
            0..60 => self.update_pod_usage(store, d),
            60..75 => {
                self.delete_pod(store, d)?;
                self.create_pod(store, d)
            }
            75..85 => self.update_hpa_status(store, d),
            85..95 => self.edit_configmap(store, d),
            _ => self.scale(store, d),
        }
    }

    /// Runs [`Churn::step`] at the workload's rate, forever.
    pub(crate) async fn run(mut self, shared: Arc<Shared>) {
        const TICK: Duration = Duration::from_millis(10);
        let mut interval = tokio::time::interval(TICK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let per_tick = self.workload.changes_per_second * TICK.as_secs_f64();
        let mut owed = 0.0;
        loop {
            interval.tick().await;
            owed += per_tick;
            while owed >= 1.0 {
                owed -= 1.0;
                if let Err(error) = self.step(&shared.store) {
                    tracing::warn!(%error, "workload change refused");
                }
            }
        }
    }

    fn create_deployment(&mut self, store: &Store, mut deployment: Deployment) -> Result<()> {
        let (namespace, name) = (deployment.namespace.clone(), deployment.name.clone());
        let replicas = self.workload.pods_per_deployment;
        let labels = json!({"app": name});
        store.create(
            &ids::deployments(),
            Some(&namespace),
            json!({
                "metadata": {"name": name, "labels": labels},
                "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels},
                                      "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0"}]}}}
            }),
        )?;
        let replicaset = store.create(
            &ids::replicasets(),
            Some(&namespace),
            json!({
                "metadata": {"name": format!("{name}-5d8f7c"), "labels": {"app": name, "pod-template-hash": "5d8f7c"}},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name, "pod-template-hash": "5d8f7c"}}}
            }),
        )?;
        deployment.replicaset_uid = replicaset.value["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        store.create(
            &ids::hpas(),
            Some(&namespace),
            json!({
                "metadata": {"name": name},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                         "minReplicas": 1, "maxReplicas": 10,
                         "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                      "target": {"type": "Utilization", "averageUtilization": 60}}}]}
            }),
        )?;
        self.deployments.push(deployment);
        let d = self.deployments.len() - 1;
        for _ in 0..replicas {
            self.create_pod(store, d)?;
        }
        Ok(())
    }

    fn create_pod(&mut self, store: &Store, d: usize) -> Result<()> {
        self.next_pod += 1;
        let deployment = &self.deployments[d];
        let name = format!("{}-5d8f7c-{:05x}", deployment.name, self.next_pod);
        let node = format!("node-{}", self.rng.random_range(0..8));
        let usage = self.rng.random_range(20..400);
        let pod = pod(deployment, &name, &node, usage, self.workload.realistic_pods);
        let namespace = deployment.namespace.clone();
        store.create(&ids::pods(), Some(&namespace), pod)?;
        let ip = format!("10.{}.{}.{}", d % 250, (self.next_pod >> 8) % 250, self.next_pod % 250);
        store.patch(
            &ids::pods(),
            Some(&namespace),
            &name,
            PatchType::Merge,
            json!({"status": pod_status(&ip, self.workload.realistic_pods)}),
            true,
        )?;
        self.deployments[d].pods.push(name);
        Ok(())
    }

    fn delete_pod(&mut self, store: &Store, d: usize) -> Result<()> {
        let deployment = &mut self.deployments[d];
        if deployment.pods.is_empty() {
            return Ok(());
        }
        let i = self.rng.random_range(0..deployment.pods.len());
        let name = deployment.pods.swap_remove(i);
        store.delete(&ids::pods(), Some(&deployment.namespace), &name, &Default::default())?;
        Ok(())
    }

    fn update_pod_usage(&mut self, store: &Store, d: usize) -> Result<()> {
        let deployment = &self.deployments[d];
        if deployment.pods.is_empty() {
            return self.create_pod(store, d);
        }
        let name = &deployment.pods[self.rng.random_range(0..deployment.pods.len())];
        let usage: u32 = self.rng.random_range(20..400);
        store.patch(
            &ids::pods(),
            Some(&deployment.namespace),
            name,
            PatchType::Merge,
            json!({"metadata": {"annotations": {CPU_USAGE_ANNOTATION: usage.to_string()}}}),
            false,
        )?;
        Ok(())
    }

    fn update_hpa_status(&mut self, store: &Store, d: usize) -> Result<()> {
        let deployment = &self.deployments[d];
        let utilization: u32 = self.rng.random_range(10..150);
        let replicas = deployment.pods.len();
        store.patch(
            &ids::hpas(),
            Some(&deployment.namespace),
            &deployment.name,
            PatchType::Merge,
            json!({"status": {
                "currentReplicas": replicas, "desiredReplicas": replicas,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
                                    "current": {"averageUtilization": utilization}}}]
            }}),
            true,
        )?;
        Ok(())
    }

    fn edit_configmap(&mut self, store: &Store, d: usize) -> Result<()> {
        if self.workload.configmaps_per_namespace == 0 {
            return Ok(());
        }
        let namespace = self.deployments[d].namespace.clone();
        let c = self.rng.random_range(0..self.workload.configmaps_per_namespace);
        let revision: u32 = self.rng.random();
        store.patch(
            &ids::configmaps(),
            Some(&namespace),
            &format!("config-{c}"),
            PatchType::Merge,
            json!({"data": {"revision": revision.to_string()}}),
            false,
        )?;
        Ok(())
    }

    fn scale(&mut self, store: &Store, d: usize) -> Result<()> {
        let up =
            self.deployments[d].pods.len() < 2 || (self.rng.random_bool(0.5) && self.deployments[d].pods.len() < 10);
        if up {
            self.create_pod(store, d)?;
        } else {
            self.delete_pod(store, d)?;
        }
        let deployment = &self.deployments[d];
        store.patch(
            &ids::deployments(),
            Some(&deployment.namespace),
            &deployment.name,
            PatchType::Merge,
            json!({"spec": {"replicas": deployment.pods.len()}}),
            false,
        )?;
        Ok(())
    }
}

fn pod(deployment: &Deployment, name: &str, node: &str, usage: u32, realistic: bool) -> Value {
    let mut pod = json!({
        "metadata": {
            "name": name,
            "labels": {"app": deployment.name, "pod-template-hash": "5d8f7c"},
            "annotations": {CPU_USAGE_ANNOTATION: usage.to_string()},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{}-5d8f7c", deployment.name),
                                 "uid": deployment.replicaset_uid, "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.example/app:1.0",
                            "resources": {"requests": {"cpu": "200m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler"
        }
    });
    if realistic {
        realistic_pod_fields(&mut pod);
    }
    pod
}

fn pod_status(ip: &str, realistic: bool) -> Value {
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-01-01T00:00:00Z"});
    let mut status = json!({
        "phase": "Running",
        "podIP": ip,
        "hostIP": "192.168.0.10",
        "conditions": [condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
        "qosClass": "Burstable",
        "startTime": "2026-01-01T00:00:00Z"
    });
    if realistic {
        status["containerStatuses"] = json!([{
            "name": "app", "ready": true, "restartCount": 0, "started": true,
            "image": "registry.example/app:1.0",
            "imageID": "registry.example/app@sha256:0d5a4b8e6f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e",
            "containerID": "containerd://4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b",
            "lastState": {},
            "state": {"running": {"startedAt": "2026-01-01T00:00:02Z"}}
        }]);
        status["podIPs"] = json!([{"ip": ip}]);
        status["hostIPs"] = json!([{"ip": "192.168.0.10"}]);
    }
    status
}

/// What a real cluster adds to a pod: env, volumes, probes, tolerations, and the
/// managedFields of every writer (about 10 KB of JSON in all).
fn realistic_pod_fields(pod: &mut Value) {
    let container = &mut pod["spec"]["containers"][0];
    container["env"] = Value::Array(
        (0..12)
            .map(|i| json!({"name": format!("APP_SETTING_{i}"), "value": format!("value-of-setting-number-{i}")}))
            .collect(),
    );
    container["ports"] = json!([{"containerPort": 8080, "name": "http", "protocol": "TCP"}]);
    container["livenessProbe"] = json!({"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                                         "periodSeconds": 10, "timeoutSeconds": 1, "failureThreshold": 3, "successThreshold": 1});
    container["readinessProbe"] = container["livenessProbe"].clone();
    container["volumeMounts"] = json!([{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
                                        {"name": "config", "mountPath": "/etc/app"}]);
    container["terminationMessagePath"] = json!("/dev/termination-log");
    container["terminationMessagePolicy"] = json!("File");
    container["imagePullPolicy"] = json!("IfNotPresent");
    let spec = &mut pod["spec"];
    spec["volumes"] = json!([
        {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}},
        {"name": "config", "configMap": {"name": "config-0", "defaultMode": 420}}
    ]);
    spec["tolerations"] = json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    ]);
    spec["securityContext"] = json!({});
    spec["enableServiceLinks"] = json!(true);
    spec["preemptionPolicy"] = json!("PreemptLowerPriority");
    spec["priority"] = json!(0);
    let fields = |paths: &[&str]| -> Value {
        let mut fields = serde_json::Map::new();
        for path in paths {
            fields.insert(
                format!("f:{path}"),
                json!({".": {}, "f:name": {}, "f:value": {}, "f:image": {}, "f:ports": {}}),
            );
        }
        Value::Object(fields)
    };
    pod["metadata"]["managedFields"] = json!([
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": fields(&["generateName", "labels", "ownerReferences", "annotations"]),
                                                 "f:spec": fields(&["containers", "dnsPolicy", "enableServiceLinks", "restartPolicy",
                                                                    "schedulerName", "securityContext", "terminationGracePeriodSeconds",
                                                                    "volumes", "tolerations", "serviceAccountName"])}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:03Z",
         "fieldsType": "FieldsV1", "subresource": "status",
         "fieldsV1": {"f:status": fields(&["conditions", "containerStatuses", "hostIP", "hostIPs", "phase", "podIP",
                                           "podIPs", "startTime", "qosClass"])}}
    ]);
    pod["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!(serde_json::to_string(&pod["spec"]["containers"]).expect("a JSON value serializes"));
}

/// The resources the workload writes.
mod ids {
    use crate::store::ResourceId;

    pub(super) fn namespaces() -> ResourceId {
        ResourceId::new("", "v1", "namespaces")
    }
    pub(super) fn pods() -> ResourceId {
        ResourceId::new("", "v1", "pods")
    }
    pub(super) fn configmaps() -> ResourceId {
        ResourceId::new("", "v1", "configmaps")
    }
    pub(super) fn deployments() -> ResourceId {
        ResourceId::new("apps", "v1", "deployments")
    }
    pub(super) fn replicasets() -> ResourceId {
        ResourceId::new("apps", "v1", "replicasets")
    }
    pub(super) fn hpas() -> ResourceId {
        ResourceId::new("autoscaling", "v2", "horizontalpodautoscalers")
    }
}
