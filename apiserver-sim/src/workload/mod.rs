//! A seeded synthetic workload: namespaces of deployments whose pods churn, with HPAs and configmaps.
//!
//! The workload writes what a cluster's users and metrics pipeline write:
//! Deployments, HPAs and their status, ConfigMaps, pod deletions (as a failing
//! node causes) and scaling, and it sets the pods' CPU usage in the metrics
//! table that `metrics.k8s.io` serves ([`Store::metrics`]; usage is in no
//! object, so a usage update is no change a watch sees). What a cluster's
//! controllers write — ReplicaSets, pods, statuses —
//! comes from the controllers' code (see `SimConfig::controllers`), which the
//! workload runs for a Deployment right after writing to it: its pods appear
//! at once, on seeded nodes with seeded usage, and start at once, so the
//! workload's changes are done when [`Churn::step`] returns and stopping it
//! leaves a quiet cluster. (Pods the server's own controllers make for a
//! workload Deployment first, in a race with the workload, get the mean usage of
//! their siblings.)
//!
//! The same seed gives the same sequence of the workload's own choices; pod
//! names are random, as the API server's generated names are.
//!
//! # Load
//!
//! [`Load::Random`] (the default) sets the usage of one pod at a time to a
//! random 20 to 400 millicores, and writes HPA status as an autoscaler would
//! from the pods' usage (their mean utilization of the 200m request, or the
//! `ScalingActive` condition false while the metrics API is down).
//! [`Load::Phases`] gives each Deployment a CPU
//! demand that rises and falls in a slow wave, and a usage update sets every
//! ready pod of the Deployment to its share of the demand, so that an
//! autoscaler aiming at 50% of the pods' 200m request scales it up, then down.
//! The workload then neither scales Deployments nor writes HPA status itself,
//! leaving both to the autoscaler under test.
//!
//! # Examples
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//!
//! use apiserver_sim::workload::{Load, Workload};
//! use apiserver_sim::{ApiServer, SimConfig};
//!
//! let server = ApiServer::start(SimConfig::default()).await?;
//! let workload = Workload::default().load(Load::Phases {
//!     period: Duration::from_secs(120),
//! });
//! let _churn = server.start_workload(&workload)?;
//! # Ok(()) }
//! ```

mod load;

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::time::Instant;

pub use load::Load;
use load::{CPU_REQUEST, Wave};

use crate::Shared;
use crate::controllers::events::Occurrence;
use crate::controllers::{self, PodChoices};
use crate::resources::ids;
use crate::status::Result;
use crate::store::{PatchType, Preconditions, Store, StoredObject, WriteOptions, now_rfc3339};

/// The shape and pace of a workload.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Seeds every random choice.
    pub seed: u64,
    /// Namespaces `ns-0`, `ns-1`, ...
    pub namespaces: usize,
    /// Deployments per namespace, each with an HPA.
    pub deployments_per_namespace: usize,
    /// Initial pods per deployment.
    pub pods_per_deployment: usize,
    /// ConfigMaps per namespace.
    pub configmaps_per_namespace: usize,
    /// Changes per second while churning.
    pub changes_per_second: f64,
    /// Pods as real clusters serve them (env, volumes, probes, tolerations):
    /// about 8 KB of JSON each with their managedFields and status, instead of
    /// about 3 KB.
    pub realistic_pods: bool,
    /// How the pods' CPU usage changes.
    pub load: Load,
    /// Whether about one change in a hundred makes a running pod's container
    /// crash-loop, as a kubelet reports it: the pod's status in
    /// `CrashLoopBackOff` and a `Warning` Event `BackOff`. The pod stays so
    /// until it is replaced.
    pub crash_loops: bool,
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
            load: Load::Random,
            crash_loops: false,
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

    /// Sets [`Workload::crash_loops`].
    #[must_use]
    pub fn crash_loops(mut self, crash_loops: bool) -> Self {
        self.crash_loops = crash_loops;
        self
    }

    /// Sets [`Workload::load`].
    #[must_use]
    pub fn load(mut self, load: Load) -> Self {
        self.load = load;
        self
    }

    /// Creates the initial objects, with every pod running, and returns the
    /// generator of further changes.
    ///
    /// # Errors
    ///
    /// When the store refuses an object (for instance, it exists already).
    pub fn populate(&self, store: &Store) -> Result<Churn> {
        let mut rng = StdRng::seed_from_u64(self.seed);
        let waves = match self.load {
            Load::Random => Vec::new(),
            Load::Phases { period } => (0..self.namespaces * self.deployments_per_namespace)
                .map(|_| Wave::seeded(&mut rng, period))
                .collect(),
        };
        let mut churn = Churn {
            workload: self.clone(),
            rng,
            deployments: Vec::new(),
            waves,
            started: Instant::now(),
            ips: 0,
        };
        for node in 0..controllers::NODES {
            register_node(store, &format!("node-{node}"))?;
        }
        for n in 0..self.namespaces {
            let namespace = format!("ns-{n}");
            store.create(&ids::namespaces(), None, json!({"metadata": {"name": namespace}}))?;
            // As the controllers would right after: its ServiceAccount and CA bundle.
            controllers::publish_namespace_objects(store, &namespace);
            for c in 0..self.configmaps_per_namespace {
                store.create(
                    &ids::configmaps(),
                    Some(&namespace),
                    json!({"metadata": {"name": format!("config-{c}")}, "data": {"revision": "0"}}),
                )?;
            }
            for d in 0..self.deployments_per_namespace {
                churn.create_deployment(store, &namespace, &format!("app-{d}"))?;
            }
        }
        Ok(churn)
    }
}

/// Registers a Ready node, as its kubelet does: labels, addresses, capacity
/// (which `kubectl top nodes` divides by), the kubelet's version, and the
/// node's Lease in `kube-node-lease`, which the kubelet renews as its
/// heartbeat.
fn register_node(store: &Store, name: &str) -> Result<()> {
    store.create(
        &ids::nodes(),
        None,
        json!({"metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }}}),
    )?;
    let resources = json!({"cpu": "4", "memory": "8Gi", "pods": "110"});
    store.transaction(WriteOptions::default()).update(
        &ids::nodes(),
        None,
        name,
        json!({"status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()}],
            "addresses": [{"type": "InternalIP", "address": node_ip(name)}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.36.0", "containerRuntimeVersion": "containerd://2.1.0",
                         "kernelVersion": "6.12.0", "operatingSystem": "linux", "architecture": "amd64",
                         "osImage": "kinformer-sim"},
        }}),
        true,
    )?;
    // A bare store (a unit test's) has no `kube-node-lease` namespace.
    if store.get(&ids::namespaces(), None, "kube-node-lease").is_err() {
        return Ok(());
    }
    let node = store.get(&ids::nodes(), None, name)?;
    store.create(
        &ids::leases(),
        Some("kube-node-lease"),
        json!({
            "metadata": {"name": name, "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": name, "uid": node.value["metadata"]["uid"],
            }]},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now_micro_rfc3339()},
        }),
    )?;
    Ok(())
}

/// A node's InternalIP: `node-3` is `192.168.0.13`. It is data only: the
/// emulation never connects to it.
fn node_ip(name: &str) -> String {
    let index: u32 = name.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(0);
    format!("192.168.0.{}", 10 + index % 240)
}

/// The time now as a Lease's `renewTime` carries it: microseconds.
fn now_micro_rfc3339() -> String {
    let now = now_rfc3339();
    format!("{}.000000Z", now.trim_end_matches('Z'))
}

/// A Deployment the workload manages.
#[derive(Debug, Clone)]
struct Managed {
    namespace: String,
    name: String,
}

/// The generator of a workload's changes; call [`Churn::step`] for each one.
#[derive(Debug)]
pub struct Churn {
    workload: Workload,
    rng: StdRng,
    deployments: Vec<Managed>,
    /// One per Deployment under [`Load::Phases`].
    waves: Vec<Wave>,
    started: Instant,
    ips: u64,
}

impl Churn {
    /// Applies one random change: mostly pod usage updates (in the metrics
    /// table, which no watch sees), then pod replacements, HPA status updates,
    /// configmap edits and scaling (under [`Load::Phases`], usage updates
    /// instead of HPA status and scaling).
    ///
    /// # Errors
    ///
    /// When the store refuses a write the workload expected to succeed.
    pub fn step(&mut self, store: &Store) -> Result<()> {
        if self.deployments.is_empty() {
            return Ok(());
        }
        let d = self.rng.random_range(0..self.deployments.len());
        let phases = !self.waves.is_empty();
        if self.workload.crash_loops && self.rng.random_range(0..100) == 0 {
            return self.crash_loop(store, d);
        }
        match self.rng.random_range(0..100) {
            0..60 => self.update_pod_usage(store, d),
            60..75 => self.replace_pod(store, d),
            75..85 if !phases => self.update_hpa_status(store, d),
            85..95 => self.edit_configmap(store, d),
            95.. if !phases => self.scale(store, d),
            _ => self.update_pod_usage(store, d),
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

    fn create_deployment(&mut self, store: &Store, namespace: &str, name: &str) -> Result<()> {
        let labels = json!({"app": name});
        let mut template = json!({
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0",
                                     "resources": {"requests": {"cpu": format!("{CPU_REQUEST}m"), "memory": "128Mi"},
                                                   "limits": {"memory": "256Mi"}}}]}
        });
        if self.workload.realistic_pods {
            realistic_template(&mut template);
        }
        store.create(
            &ids::deployments(),
            Some(namespace),
            json!({
                "metadata": {"name": name, "labels": labels},
                "spec": {"replicas": self.workload.pods_per_deployment, "selector": {"matchLabels": labels},
                         "template": template}
            }),
        )?;
        let target = if self.waves.is_empty() { 60 } else { 50 };
        store.create(
            &ids::hpas(),
            Some(namespace),
            json!({
                "metadata": {"name": name},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                         "minReplicas": 1, "maxReplicas": 10,
                         "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                      "target": {"type": "Utilization", "averageUtilization": target}}}]}
            }),
        )?;
        self.deployments.push(Managed {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
        let d = self.deployments.len() - 1;
        controllers::start_pods_now(store, namespace, name, &mut self.choices(d))
    }

    /// The choices the controllers make for Deployment `d`'s new pods.
    fn choices(&mut self, d: usize) -> WorkloadChoices<'_> {
        let demand = self.waves.get(d).map(|wave| wave.demand(self.started.elapsed()));
        WorkloadChoices {
            rng: &mut self.rng,
            ips: &mut self.ips,
            demand,
        }
    }

    /// Runs the controllers' step for Deployment `d`, as they would right after
    /// the workload's write, and starts its new pods at once.
    fn sync(&mut self, store: &Store, d: usize) -> Result<()> {
        let Managed { namespace, name } = self.deployments[d].clone();
        controllers::start_pods_now(store, &namespace, &name, &mut self.choices(d))
    }

    /// Deployment `d`'s pods.
    fn pods(&self, store: &Store, d: usize) -> Result<Vec<Arc<StoredObject>>> {
        let deployment = &self.deployments[d];
        controllers::pods_of(
            &store.transaction(WriteOptions::default()),
            &deployment.namespace,
            &deployment.name,
        )
    }

    /// Updates the usage of one of the Deployment's pods at random, or under
    /// [`Load::Phases`] of all its ready pods, to their share of its demand now.
    fn update_pod_usage(&mut self, store: &Store, d: usize) -> Result<()> {
        let pods = self.pods(store, d)?;
        if pods.is_empty() {
            return self.sync(store, d);
        }
        let updates: Vec<(&StoredObject, u32)> = match self.waves.get(d) {
            None => {
                let pod = &pods[self.rng.random_range(0..pods.len())];
                vec![(pod, self.rng.random_range(20..400))]
            }
            Some(wave) => {
                let ready: Vec<&StoredObject> = pods
                    .iter()
                    .filter(|pod| controllers::is_ready(pod))
                    .map(|pod| &**pod)
                    .collect();
                let share = wave.demand(self.started.elapsed()) / ready.len().max(1) as f64;
                ready
                    .into_iter()
                    .map(|pod| (pod, (share * self.rng.random_range(0.95..1.05)).round() as u32))
                    .collect()
            }
        };
        for (pod, usage) in updates {
            store
                .metrics()
                .set_pod_cpu(pod.namespace.as_deref().unwrap_or_default(), &pod.name, usage);
        }
        Ok(())
    }

    /// Deletes one of the Deployment's pods; its ReplicaSet replaces it.
    fn replace_pod(&mut self, store: &Store, d: usize) -> Result<()> {
        let pods = self.pods(store, d)?;
        if !pods.is_empty() {
            let pod = &pods[self.rng.random_range(0..pods.len())];
            match store.delete(
                &ids::pods(),
                pod.namespace.as_deref(),
                &pod.name,
                &Preconditions::default(),
            ) {
                Err(error) if error.code != 404 => return Err(error),
                _ => {}
            }
        }
        self.sync(store, d)
    }

    /// Makes the container of one of the Deployment's running pods
    /// crash-loop: its status and the Event as a kubelet writes them.
    fn crash_loop(&mut self, store: &Store, d: usize) -> Result<()> {
        let pods = self.pods(store, d)?;
        let running: Vec<_> = pods.iter().filter(|pod| controllers::is_ready(pod)).collect();
        if running.is_empty() {
            return Ok(());
        }
        let pod = running[self.rng.random_range(0..running.len())];
        let namespace = pod.namespace.as_deref().unwrap_or_default();
        let restarts = self.rng.random_range(3..12);
        let now = now_rfc3339();
        let containers: Vec<Value> = pod.value["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|container| {
                let mut container = container.clone();
                container["ready"] = json!(false);
                container["started"] = json!(false);
                container["restartCount"] = json!(restarts);
                container["lastState"] = json!({"terminated": {"exitCode": 1, "reason": "Error",
                                                               "startedAt": now, "finishedAt": now}});
                container["state"] = json!({"waiting": {"reason": "CrashLoopBackOff",
                    "message": format!("back-off 5m0s restarting failed container={} pod={}_{namespace}",
                                       container["name"].as_str().unwrap_or_default(), pod.name)}});
                container
            })
            .collect();
        let conditions: Vec<Value> = pod.value["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|condition| {
                let mut condition = condition.clone();
                if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
                    condition["status"] = json!("False");
                    condition["reason"] = json!("ContainersNotReady");
                    condition["lastTransitionTime"] = json!(now);
                }
                condition
            })
            .collect();
        store.patch(
            &ids::pods(),
            Some(namespace),
            &pod.name,
            PatchType::Merge,
            json!({"status": {"containerStatuses": containers, "conditions": conditions}}),
            true,
        )?;
        let uid = pod.value["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        let kubelet = Occurrence {
            event_type: "Warning",
            host: Some(pod.value["spec"]["nodeName"].as_str().unwrap_or("node-0")),
            field_path: Some("spec.containers{app}"),
            ..Occurrence::normal("kubelet", "BackOff")
        };
        controllers::events::record(
            &mut store.transaction(WriteOptions::default()),
            pod,
            kubelet,
            &format!(
                "Back-off restarting failed container app in pod {}_{namespace}({uid})",
                pod.name
            ),
        )?;
        Ok(())
    }

    /// Writes the HPA's status as the HPA controller would from its pods'
    /// usage now, without scaling: the ready pods' mean utilization of their
    /// CPU request, or, while the metrics API is down, `ScalingActive` false.
    fn update_hpa_status(&mut self, store: &Store, d: usize) -> Result<()> {
        let pods = self.pods(store, d)?;
        let replicas = pods.len();
        let deployment = &self.deployments[d];
        let metrics = store.metrics();
        let usage: Vec<u32> = pods
            .iter()
            .filter(|pod| controllers::is_ready(pod))
            .filter_map(|pod| metrics.pod_cpu(&deployment.namespace, &pod.name))
            .collect();
        let hpa = store.get(&ids::hpas(), Some(&deployment.namespace), &deployment.name)?;
        let mut status = json!({"currentReplicas": replicas, "desiredReplicas": replicas});
        let active = if !metrics.is_available() {
            (
                "False",
                "FailedGetResourceMetric",
                "the HPA was unable to compute the replica count: failed to get cpu utilization: unable to get metrics for resource cpu: unable to fetch metrics from resource metrics API: the server is currently unable to handle the request (get pods.metrics.k8s.io)",
            )
        } else if usage.is_empty() {
            (
                "False",
                "FailedGetResourceMetric",
                "the HPA was unable to compute the replica count: failed to get cpu utilization: did not receive metrics for targeted pods (pods might be unready)",
            )
        } else {
            let mean = usage.iter().map(|m| f64::from(*m)).sum::<f64>() / usage.len() as f64;
            status["currentMetrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": (mean * 100.0 / CPU_REQUEST).round() as u32,
                            "averageValue": format!("{}m", mean.round() as u32)}}}]);
            (
                "True",
                "ValidMetricFound",
                "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)",
            )
        };
        status["conditions"] = json!([condition(&hpa.value, "ScalingActive", active)]);
        store.patch(
            &ids::hpas(),
            Some(&deployment.namespace),
            &deployment.name,
            PatchType::Merge,
            json!({"status": status}),
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

    /// Scales the Deployment by one, between 1 and 10 replicas.
    fn scale(&mut self, store: &Store, d: usize) -> Result<()> {
        let deployment = &self.deployments[d];
        let current = store
            .get(&ids::deployments(), Some(&deployment.namespace), &deployment.name)?
            .value["spec"]["replicas"]
            .as_i64()
            .unwrap_or(1);
        let up = current < 2 || (self.rng.random_bool(0.5) && current < 10);
        let replicas = if up { current + 1 } else { current - 1 };
        store.patch(
            &ids::deployments(),
            Some(&deployment.namespace),
            &deployment.name,
            PatchType::Merge,
            json!({"spec": {"replicas": replicas}}),
            false,
        )?;
        self.sync(store, d)
    }
}

/// The HPA condition `kind` as `(status, reason, message)` says, keeping its
/// `lastTransitionTime` while its status stays.
fn condition(hpa: &Value, kind: &str, (status, reason, message): (&str, &str, &str)) -> Value {
    let previous = hpa["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|condition| condition["type"] == kind && condition["status"] == status);
    let since = previous.map_or_else(
        || json!(now_rfc3339()),
        |previous| previous["lastTransitionTime"].clone(),
    );
    json!({"type": kind, "status": status, "lastTransitionTime": since, "reason": reason, "message": message})
}

/// The workload's seeded choices for its Deployments' new pods.
struct WorkloadChoices<'a> {
    rng: &'a mut StdRng,
    ips: &'a mut u64,
    /// The Deployment's demand now, in millicores, under [`Load::Phases`].
    demand: Option<f64>,
}

impl PodChoices for WorkloadChoices<'_> {
    fn node(&mut self) -> String {
        format!("node-{}", self.rng.random_range(0..controllers::NODES))
    }

    fn usage(&mut self, siblings: &[u32]) -> u32 {
        match self.demand {
            None => self.rng.random_range(20..400),
            Some(demand) => (demand / (siblings.len() + 1) as f64).round() as u32,
        }
    }

    fn pod_ip(&mut self) -> String {
        *self.ips += 1;
        format!(
            "10.{}.{}.{}",
            (*self.ips >> 16) % 250,
            (*self.ips >> 8) % 250,
            *self.ips % 250
        )
    }

    fn records_events(&self) -> bool {
        false
    }
}

/// What a real cluster's pod templates carry: env, ports, probes, volumes,
/// tolerations, and the annotation `kubectl apply` leaves.
fn realistic_template(template: &mut Value) {
    let container = &mut template["spec"]["containers"][0];
    container["env"] = Value::Array(
        (0..21)
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
    let spec = &mut template["spec"];
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
    let last_applied = serde_json::to_string(&template["spec"]["containers"]).expect("a JSON value serializes");
    template["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration": last_applied});
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::built_in;

    /// Replicas an autoscaler aiming at 50% of the pods' CPU request would want
    /// for Deployment `d`, from its ready pods' usage in the metrics table.
    fn wanted(store: &Store, churn: &Churn, d: usize) -> i64 {
        let pods = churn.pods(store, d).unwrap();
        let usage: f64 = pods
            .iter()
            .filter(|pod| controllers::is_ready(pod))
            .filter_map(|pod| store.metrics().pod_cpu(&churn.deployments[d].namespace, &pod.name))
            .map(f64::from)
            .sum();
        ((usage / (CPU_REQUEST / 2.0)).ceil() as i64).clamp(1, 10)
    }

    #[test]
    fn a_crash_loop_shows_in_the_pods_status_and_a_warning_event() {
        let store = Store::new(built_in(), 10_000);
        let mut churn = Workload::default()
            .size(1, 1, 2)
            .crash_loops(true)
            .populate(&store)
            .unwrap();
        churn.crash_loop(&store, 0).unwrap();
        let pods = churn.pods(&store, 0).unwrap();
        let looping: Vec<_> = pods
            .iter()
            .filter(|pod| {
                pod.value["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
            })
            .collect();
        assert_eq!(looping.len(), 1);
        assert!(!controllers::is_ready(looping[0]));
        let events = store
            .list(
                &ids::events(),
                &crate::store::Filter::default(),
                &crate::store::ListOptions::default(),
            )
            .unwrap();
        assert_eq!(events.items.len(), 1);
        let event = &events.items[0].value;
        assert_eq!(
            (&event["type"], &event["reason"]),
            (&json!("Warning"), &json!("BackOff"))
        );
        assert_eq!(event["involvedObject"]["name"], looping[0].name);
    }

    #[tokio::test]
    async fn hpa_status_follows_the_pods_usage_and_says_when_metrics_are_down() {
        let store = Store::new(built_in(), 10_000);
        let mut churn = Workload::default().size(1, 1, 2).populate(&store).unwrap();
        for pod in churn.pods(&store, 0).unwrap() {
            store.metrics().set_pod_cpu("ns-0", &pod.name, 150);
        }
        let status = |store: &Store| store.get(&ids::hpas(), Some("ns-0"), "app-0").unwrap().value["status"].clone();
        churn.update_hpa_status(&store, 0).unwrap();
        let up = status(&store);
        assert_eq!(up["currentMetrics"][0]["resource"]["current"]["averageUtilization"], 75);
        assert_eq!(up["currentMetrics"][0]["resource"]["current"]["averageValue"], "150m");
        assert_eq!(up["conditions"][0]["status"], "True");

        store.metrics().set_available(false);
        churn.update_hpa_status(&store, 0).unwrap();
        let down = status(&store);
        assert_eq!(
            (&down["conditions"][0]["status"], &down["conditions"][0]["reason"]),
            (&json!("False"), &json!("FailedGetResourceMetric"))
        );
        store.metrics().set_available(true);
        churn.update_hpa_status(&store, 0).unwrap();
        assert_eq!(status(&store)["conditions"][0]["status"], "True");
    }

    #[tokio::test(start_paused = true)]
    async fn under_load_phases_an_autoscaler_scales_up_then_down() {
        let store = Store::new(built_in(), 1_000_000);
        let period = Duration::from_secs(600);
        let workload = Workload::default().size(1, 2, 3).load(Load::Phases { period });
        let mut churn = workload.populate(&store).unwrap();
        let mut history: Vec<Vec<i64>> = vec![Vec::new(); 2];
        // One autoscaler pass every 10 simulated seconds, for one period.
        for _ in 0..60 {
            tokio::time::advance(Duration::from_secs(10)).await;
            // The kubelet starts what the last pass scaled up, then the load moves.
            for d in 0..2 {
                let Managed { namespace, name } = churn.deployments[d].clone();
                controllers::start_pods_now(&store, &namespace, &name, &mut churn.choices(d)).unwrap();
            }
            for _ in 0..20 {
                churn.step(&store).unwrap();
            }
            for (d, history) in history.iter_mut().enumerate() {
                let Managed { namespace, name } = churn.deployments[d].clone();
                let replicas = wanted(&store, &churn, d);
                store
                    .patch(
                        &ids::deployments(),
                        Some(&namespace),
                        &name,
                        PatchType::Merge,
                        json!({"spec": {"replicas": replicas}}),
                        false,
                    )
                    .unwrap();
                churn.sync(&store, d).unwrap();
                history.push(replicas);
            }
        }
        for replicas in history {
            let peak = *replicas.iter().max().unwrap();
            let at_peak = replicas.iter().position(|r| *r == peak).unwrap();
            assert!(peak >= 6, "never scaled up: {replicas:?}");
            assert!(replicas[0] <= peak - 2, "started at the peak: {replicas:?}");
            assert!(
                replicas[at_peak..].iter().any(|r| *r <= peak - 3),
                "never scaled down after the peak: {replicas:?}"
            );
        }
    }
}
