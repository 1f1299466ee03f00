//! A kinformer plugin modelled on the HorizontalPodAutoscaler controller.
//!
//! It watches `autoscaling/v2` HPAs and keeps deployments and pods cached. On each
//! HPA delta it looks up the target deployment by key, finds the pods the
//! deployment selects with a label-selector query on the cache, and logs the
//! replica count the HPA algorithm would choose for a CPU utilization target:
//! `desired = ceil(ready pods × utilization / target)`, left alone within a 10%
//! tolerance and clamped to `[minReplicas, maxReplicas]`.
//!
//! Pod usage comes from the resource metrics API (`metrics.k8s.io` PodMetrics,
//! served by metrics-server on a real cluster and by the emulation in the demo),
//! read uncached: the manifest grants `[[grant.read]]` of PodMetrics.

use kinformer_sdk::k8s::api::apps::v1::Deployment;
use kinformer_sdk::k8s::api::autoscaling::v2::HorizontalPodAutoscaler;
use kinformer_sdk::k8s::api::core::v1::Pod;
use kinformer_sdk::{Delta, DeltaType, Gvk, Handler, Registration, Result, info};

mod usage;
use usage::{ScaleTarget, TOLERANCE, is_ready, pod_cpu_requests, pod_usage, pod_usages, scale_target};

struct HpaAdvisor;

impl Handler for HpaAdvisor {
    fn init(_config: &str) -> Result<(Self, Registration)> {
        let registration = Registration::new("hpa-advisor", env!("CARGO_PKG_VERSION"))
            .watch(Gvk::of::<HorizontalPodAutoscaler>())
            .cache(Gvk::of::<Deployment>())
            .cache(Gvk::of::<Pod>());
        Ok((Self, registration))
    }

    fn handle(&mut self, delta: Delta) -> Result<()> {
        if delta.gvk() != &Gvk::of::<HorizontalPodAutoscaler>() {
            return Ok(());
        }
        if delta.delta_type() == DeltaType::Deleted {
            info!("hpa {}: deleted, nothing to scale", delta.key());
            return Ok(());
        }
        let hpa: HorizontalPodAutoscaler = delta.object()?;
        match recommend(delta.namespace(), &hpa)? {
            Recommendation::Scale {
                deployment,
                pods,
                utilization,
                target,
                current,
                desired,
            } => info!(
                "hpa {}: {pods} ready pods of deployment {deployment} at {utilization}% cpu (target {target}%): would scale {current} -> {desired}",
                delta.key()
            ),
            Recommendation::Skip(why) => info!("hpa {}: {why}", delta.key()),
        }
        Ok(())
    }
}

/// What the HPA algorithm would do for one HPA.
enum Recommendation {
    Scale {
        deployment: String,
        pods: usize,
        utilization: i64,
        target: i32,
        current: i32,
        desired: i32,
    },
    Skip(String),
}

fn recommend(namespace: &str, hpa: &HorizontalPodAutoscaler) -> Result<Recommendation> {
    let ScaleTarget {
        deployment,
        target,
        current,
        selector,
        pods,
    } = match scale_target(namespace, hpa)? {
        Ok(found) => found,
        Err(why) => return Ok(Recommendation::Skip(why)),
    };
    let deployment_key = format!("{namespace}/{deployment}");
    let usages = match pod_usages(namespace, &selector) {
        Ok(usages) => usages,
        Err(error) => {
            return Ok(Recommendation::Skip(format!(
                "unable to get cpu metrics of {deployment_key}: {error}"
            )));
        }
    };

    let (mut usage, mut requests, mut ready) = (0_i64, 0_i64, 0_usize);
    for pod in pods.iter().filter(|pod| is_ready(pod)) {
        let (Some(pod_usage), Some(pod_requests)) = (pod_usage(pod, &usages), pod_cpu_requests(pod)) else {
            continue;
        };
        usage += pod_usage;
        requests += pod_requests;
        ready += 1;
    }
    if ready == 0 || requests == 0 {
        return Ok(Recommendation::Skip(format!(
            "no ready pods with cpu metrics behind {deployment_key}"
        )));
    }
    let utilization = usage * 100 / requests;
    let ratio = utilization as f64 / f64::from(target);
    let desired = if (ratio - 1.0).abs() <= TOLERANCE {
        current
    } else {
        (ratio * ready as f64).ceil() as i32
    };
    let desired = desired.clamp(hpa.spec.min_replicas.unwrap_or(1), hpa.spec.max_replicas);
    Ok(Recommendation::Scale {
        deployment,
        pods: ready,
        utilization,
        target,
        current,
        desired,
    })
}

kinformer_sdk::plugin!(HpaAdvisor);
