//! A seeded synthetic workload: namespaces of deployments whose pods churn, with HPAs and configmaps.
//!
//! The workload writes what a cluster's users and metrics pipeline write:
//! Deployments, HPAs, ConfigMaps, pod CPU usage (the
//! [`CPU_USAGE_ANNOTATION`]), pod deletions (as a failing node causes) and
//! scaling. What a cluster's controllers write — ReplicaSets, pods, statuses —
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
//! random 20 to 400 millicores. [`Load::Phases`] gives each Deployment a CPU
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
use crate::controllers::{self, PodChoices};
use crate::resources::ids;
use crate::status::Result;
use crate::store::{PatchType, Preconditions, Store, StoredObject, WriteOptions};

/// The pod annotation carrying the pod's CPU usage, read by the example HPA plugin.
pub const CPU_USAGE_ANNOTATION: &str = "metrics.kinformer.dev/cpu-millicores";

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
                churn.create_deployment(store, &namespace, &format!("app-{d}"))?;
            }
        }
        Ok(churn)
    }
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
    /// Applies one random change: mostly pod usage updates, then pod
    /// replacements, HPA status updates, configmap edits and scaling (under
    /// [`Load::Phases`], usage updates instead of HPA status and scaling).
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
            store.patch(
                &ids::pods(),
                pod.namespace.as_deref(),
                &pod.name,
                PatchType::Merge,
                json!({"metadata": {"annotations": {CPU_USAGE_ANNOTATION: usage.to_string()}}}),
                false,
            )?;
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

    fn update_hpa_status(&mut self, store: &Store, d: usize) -> Result<()> {
        let replicas = self.pods(store, d)?.len();
        let utilization: u32 = self.rng.random_range(10..150);
        let deployment = &self.deployments[d];
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

/// The workload's seeded choices for its Deployments' new pods.
struct WorkloadChoices<'a> {
    rng: &'a mut StdRng,
    ips: &'a mut u64,
    /// The Deployment's demand now, in millicores, under [`Load::Phases`].
    demand: Option<f64>,
}

impl PodChoices for WorkloadChoices<'_> {
    fn node(&mut self) -> String {
        format!("node-{}", self.rng.random_range(0..8))
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
    /// for Deployment `d`, from its ready pods' usage (as the example HPA plugin
    /// computes it).
    fn wanted(store: &Store, churn: &Churn, d: usize) -> i64 {
        let pods = churn.pods(store, d).unwrap();
        let usage: f64 = pods
            .iter()
            .filter(|pod| controllers::is_ready(pod))
            .filter_map(|pod| {
                pod.value["metadata"]["annotations"][CPU_USAGE_ANNOTATION]
                    .as_str()?
                    .parse::<f64>()
                    .ok()
            })
            .sum();
        ((usage / (CPU_REQUEST / 2.0)).ceil() as i64).clamp(1, 10)
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
