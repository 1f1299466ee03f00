//! A HorizontalPodAutoscaler controller as a kinformer plugin.
//!
//! It reconciles `autoscaling/v2` HPAs that target deployments and scale on CPU
//! utilization, the way the Kubernetes HPA controller does:
//!
//! - utilization is the ready pods' usage over their CPU requests; within 10% of
//!   the target nothing changes;
//! - scaling up, pods not yet ready count as using nothing (so a scale-up is not
//!   repeated while new pods start); scaling down, pods without metrics count as
//!   using their whole request;
//! - the result is clamped to `[minReplicas, maxReplicas]`;
//! - scaling down is stabilised: the highest recommendation of the last
//!   window (the HPA's `behavior.scaleDown.stabilizationWindowSeconds`, 300 s by
//!   default) is applied.
//!
//! It writes the deployment's `scale` subresource, the HPA's status
//! (currentReplicas, desiredReplicas, lastScaleTime, currentMetrics, conditions)
//! and a `SuccessfulRescale` Event for each rescale. Each HPA is reconciled
//! when it or its deployment changes (a mapping through an index on
//! `spec.scaleTargetRef.name`) and every sync period.
//!
//! Pod usage comes from the resource metrics API (`metrics.k8s.io` PodMetrics,
//! metrics-server on a real cluster), read uncached under the manifest's
//! `[[grant.read]]`. When it cannot be read (metrics-server down, the read
//! forbidden), or names none of the ready pods, nothing is scaled: the HPA's
//! `ScalingActive` condition turns False with reason
//! `FailedGetResourceMetric` and a Warning Event says why, as the Kubernetes
//! HPA controller reports it.
//!
//! Config: options separated by commas: `sync-seconds=N` (default 15),
//! `stabilization-seconds=N` (overrides the HPAs' scale-down window) and
//! `tolerance=F` (how far from 1 the usage ratio may be before scaling;
//! default 0.1, kube-controller-manager's
//! `--horizontal-pod-autoscaler-tolerance`).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use kinformer_sdk::cluster::{self, EventType, ObjectRef, PatchType, WriteError};
use kinformer_sdk::controller::{Action, Controller, ControllerRegistration, Request};
use kinformer_sdk::k8s::api::apps::v1::Deployment;
use kinformer_sdk::k8s::api::autoscaling::v2::HorizontalPodAutoscaler;
use kinformer_sdk::k8s::api::core::v1::Pod;
use kinformer_sdk::{Error, Gvk, Result, cache, info};
use serde_json::json;

#[path = "../../hpa-advisor/src/usage.rs"]
mod usage;
use usage::{ScaleTarget, TOLERANCE, is_ready, pod_cpu_requests, pod_usage, pod_usages, scale_target};

/// The scale-down stabilization window when the HPA sets none.
const DEFAULT_STABILIZATION: Duration = Duration::from_secs(300);
/// The index on HPAs by the name of the deployment they target.
const TARGET_INDEX: &str = "target";

struct HpaController {
    sync: Duration,
    stabilization: Option<Duration>,
    tolerance: f64,
    /// Recent recommendations per HPA, oldest first.
    recommendations: BTreeMap<String, VecDeque<(Instant, i32)>>,
}

impl Controller for HpaController {
    fn init(config: &str) -> Result<(Self, ControllerRegistration)> {
        let mut controller = Self {
            sync: Duration::from_secs(15),
            stabilization: None,
            tolerance: TOLERANCE,
            recommendations: BTreeMap::new(),
        };
        for option in config.split(',').filter(|option| !option.is_empty()) {
            let seconds = |value: &str| {
                value
                    .parse::<u64>()
                    .map(Duration::from_secs)
                    .map_err(|_| Error::msg(format!("bad option {option:?}: want a number of seconds")))
            };
            match option.split_once('=') {
                Some(("sync-seconds", value)) => controller.sync = seconds(value)?,
                Some(("stabilization-seconds", value)) => controller.stabilization = Some(seconds(value)?),
                Some(("tolerance", value)) => {
                    controller.tolerance = value
                        .parse::<f64>()
                        .ok()
                        .filter(|tolerance| (0.0..1.0).contains(tolerance))
                        .ok_or_else(|| Error::msg(format!("bad option {option:?}: want a fraction from 0 to 1")))?;
                }
                _ => return Err(Error::msg(format!("unknown option {option:?}"))),
            }
        }
        let hpas = Gvk::of::<HorizontalPodAutoscaler>();
        let registration = ControllerRegistration::new("hpa-controller", env!("CARGO_PKG_VERSION"), hpas.clone())
            .index(hpas, TARGET_INDEX, "spec.scaleTargetRef.name")
            .maps(Gvk::of::<Deployment>(), TARGET_INDEX, "metadata.name")
            .cache(Gvk::of::<Pod>())
            .resync(controller.sync);
        Ok((controller, registration))
    }

    fn reconcile(&mut self, request: Request) -> Result<Action> {
        let hpas = Gvk::of::<HorizontalPodAutoscaler>();
        let Some(hpa) = cache::get_as::<HorizontalPodAutoscaler>(&hpas, &request.key)? else {
            self.recommendations.remove(&request.key);
            return Ok(Action::done());
        };
        let namespace = request.namespace.clone().unwrap_or_default();
        let measured = match measure(&namespace, &hpa)? {
            Measurement::Measured(measured) => measured,
            Measurement::Skip(why) => {
                info!("hpa {}: {why}", request.key);
                return Ok(Action::done());
            }
            Measurement::NoMetrics { current, why } => {
                metrics_failed(&request.key, &hpa, current, &why)?;
                return Ok(Action::done());
            }
        };
        let now = Instant::now();
        let window = self.stabilization.unwrap_or_else(|| scale_down_window(&hpa));
        let recommended = measured.recommend(&hpa, self.tolerance);
        let history = self.recommendations.entry(request.key.clone()).or_default();
        let desired = stabilize(history, now, window, recommended, measured.current);
        let rescaled = desired != measured.current;
        if rescaled {
            let scale = ObjectRef::new(
                &Gvk::of::<Deployment>(),
                request.namespace.as_deref(),
                measured.deployment.clone(),
            )
            .subresource("scale");
            let patch = json!({"spec": {"replicas": desired}});
            cluster::patch(&scale, PatchType::Merge, &patch).map_err(write_error)?;
            let reason = if desired > measured.current { "above" } else { "below" };
            let note = format!(
                "New size: {desired}; reason: cpu resource utilization (percentage of request) {reason} target"
            );
            let regarding = ObjectRef::from_key(&hpas, &request.key);
            // An Event is a courtesy: a throttled or refused one does not fail the rescale.
            if let Err(error) =
                cluster::record_event(&regarding, EventType::Normal, "SuccessfulRescale", "Scale", &note)
            {
                info!("hpa {}: event not recorded: {}", request.key, write_error(error));
            }
            info!(
                "hpa {}: {} ready pods of deployment {} at {}% cpu (target {}%): scaled {} -> {desired}",
                request.key,
                measured.ready,
                measured.deployment,
                measured.utilization,
                measured.target,
                measured.current
            );
        }
        // A status write is itself a change of the HPA, which reconciles it
        // again: write only what differs, or the two would chase each other.
        if rescaled || !status_current(&hpa, &measured, desired) {
            let status = ObjectRef::from_key(&hpas, &request.key).subresource("status");
            let patch = status_patch(&hpa, &measured, desired, rescaled);
            cluster::patch(&status, PatchType::Merge, &patch).map_err(write_error)?;
        }
        Ok(Action::done())
    }
}

/// What the HPA's target looks like now.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    deployment: String,
    /// The deployment's `spec.replicas`.
    current: i32,
    target: i32,
    /// Ready pods with metrics.
    ready: usize,
    /// Their usage over their requests, in percent.
    utilization: i64,
    usage: i64,
    requests: i64,
    /// Requests of pods not yet ready.
    unready_requests: i64,
    unready: usize,
}

impl Measured {
    /// The replica count the HPA algorithm recommends, before stabilization.
    fn recommend(&self, hpa: &HorizontalPodAutoscaler, tolerance: f64) -> i32 {
        let spec = &hpa.spec;
        let ratio = self.usage as f64 / self.requests as f64 * 100.0 / f64::from(self.target);
        let mut desired = if (ratio - 1.0).abs() <= tolerance {
            self.current
        } else {
            (ratio * self.ready as f64).ceil() as i32
        };
        if ratio > 1.0 && self.unready > 0 {
            // Scaling up: pods not yet ready count as using nothing; if that
            // brings the ratio within tolerance (or reverses it), hold.
            let adjusted =
                self.usage as f64 / (self.requests + self.unready_requests) as f64 * 100.0 / f64::from(self.target);
            desired = if adjusted <= 1.0 + tolerance {
                self.current
            } else {
                (adjusted * (self.ready + self.unready) as f64).ceil() as i32
            };
        }
        desired.clamp(spec.min_replicas.unwrap_or(1), spec.max_replicas)
    }
}

/// What a reconcile found to act on.
enum Measurement {
    Measured(Measured),
    /// Nothing to act on, and nothing to report on the HPA.
    Skip(String),
    /// No usage to act on (the resource metrics API did not answer, or
    /// answered for none of the ready pods): reported on the HPA, nothing
    /// scaled.
    NoMetrics {
        current: i32,
        why: String,
    },
}

/// Measures the HPA's deployment and pods from the cache and their usage from
/// the resource metrics API.
fn measure(namespace: &str, hpa: &HorizontalPodAutoscaler) -> Result<Measurement> {
    let ScaleTarget {
        deployment,
        target,
        current,
        selector,
        pods,
    } = match scale_target(namespace, hpa)? {
        Ok(found) => found,
        Err(why) => return Ok(Measurement::Skip(why)),
    };
    let usages = match pod_usages(namespace, &selector) {
        Ok(usages) => usages,
        Err(error) => {
            let why = format!("unable to get metrics for resource cpu: {}", error.message());
            return Ok(Measurement::NoMetrics { current, why });
        }
    };
    Ok(match measure_pods(&deployment, current, target, &pods, &usages) {
        Ok(measured) => Measurement::Measured(measured),
        // As kube-controller-manager: metrics that name none of the ready
        // pods are a failure to get the metric, said on the HPA.
        Err(why) => Measurement::NoMetrics { current, why },
    })
}

/// Reports on the HPA that its metrics could not be read: the `ScalingActive`
/// condition False with reason `FailedGetResourceMetric`, and a Warning Event,
/// once per change of the message rather than every sync.
fn metrics_failed(key: &str, hpa: &HorizontalPodAutoscaler, current: i32, why: &str) -> Result<()> {
    let message = format!("the HPA was unable to compute the replica count: failed to get cpu utilization: {why}");
    let reported = hpa
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|condition| {
            condition.type_ == "ScalingActive"
                && condition.status == "False"
                && condition.message.as_deref() == Some(message.as_str())
        });
    if reported {
        return Ok(());
    }
    info!("hpa {key}: not scaling: {message}");
    let hpas = Gvk::of::<HorizontalPodAutoscaler>();
    let regarding = ObjectRef::from_key(&hpas, key);
    if let Err(failed) = cluster::record_event(
        &regarding,
        EventType::Warning,
        "FailedGetResourceMetric",
        "GetResourceMetric",
        &message,
    ) {
        info!("hpa {key}: event not recorded: {}", write_error(failed));
    }
    let status = ObjectRef::from_key(&hpas, key).subresource("status");
    cluster::patch(&status, PatchType::Merge, &no_metrics_patch(hpa, current, &message)).map_err(write_error)?;
    Ok(())
}

/// The HPA status when its metrics could not be read, as a merge patch: the
/// replica count stays, the current metrics are unknown.
fn no_metrics_patch(hpa: &HorizontalPodAutoscaler, current: i32, message: &str) -> serde_json::Value {
    let now = now_rfc3339();
    json!({"status": {
        "observedGeneration": hpa.metadata.generation,
        "currentReplicas": current,
        "desiredReplicas": current,
        "currentMetrics": null,
        "conditions": [
            {"type": "AbleToScale", "status": "True", "reason": "SucceededGetScale",
             "message": "the HPA controller was able to get the target's current scale", "lastTransitionTime": now},
            {"type": "ScalingActive", "status": "False", "reason": "FailedGetResourceMetric",
             "message": message, "lastTransitionTime": now},
        ],
    }})
}

/// The measurement of a deployment's pods against a utilization target, with
/// each pod's usage from `usages` by name.
fn measure_pods(
    deployment: &str,
    current: i32,
    target: i32,
    pods: &[Pod],
    usages: &BTreeMap<String, i64>,
) -> std::result::Result<Measured, String> {
    let mut measured = Measured {
        deployment: deployment.to_owned(),
        current,
        target,
        ready: 0,
        utilization: 0,
        usage: 0,
        requests: 0,
        unready_requests: 0,
        unready: 0,
    };
    for pod in pods.iter().filter(|pod| pod.metadata.deletion_timestamp.is_none()) {
        let Some(requests) = pod_cpu_requests(pod) else {
            continue;
        };
        match (is_ready(pod), pod_usage(pod, usages)) {
            (true, Some(usage)) => {
                measured.usage += usage;
                measured.requests += requests;
                measured.ready += 1;
            }
            _ => {
                measured.unready_requests += requests;
                measured.unready += 1;
            }
        }
    }
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    if measured.ready == 0 || measured.requests == 0 {
        return Err("did not receive metrics for any ready pods".into());
    }
    measured.utilization = measured.usage * 100 / measured.requests;
    Ok(measured)
}

/// Applies the scale-down stabilization: records `recommended` and returns the
/// highest recommendation within `window` when that is below `current`; a
/// scale-up applies at once.
fn stabilize(
    history: &mut VecDeque<(Instant, i32)>,
    now: Instant,
    window: Duration,
    recommended: i32,
    current: i32,
) -> i32 {
    history.push_back((now, recommended));
    while history.front().is_some_and(|(at, _)| now.duration_since(*at) > window) {
        history.pop_front();
    }
    if recommended >= current {
        return recommended;
    }
    let highest = history
        .iter()
        .map(|(_, replicas)| *replicas)
        .max()
        .unwrap_or(recommended);
    highest.min(current)
}

fn scale_down_window(hpa: &HorizontalPodAutoscaler) -> Duration {
    hpa.spec
        .behavior
        .as_ref()
        .and_then(|behavior| behavior.scale_down.as_ref())
        .and_then(|rules| rules.stabilization_window_seconds)
        .map_or(DEFAULT_STABILIZATION, |seconds| {
            Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
        })
}

/// True when the HPA's status already says what this reconcile found.
fn status_current(hpa: &HorizontalPodAutoscaler, measured: &Measured, desired: i32) -> bool {
    let Some(status) = &hpa.status else { return false };
    let utilization = status
        .current_metrics
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find_map(|metric| metric.resource.as_ref()?.current.average_utilization);
    status.current_replicas == Some(measured.current)
        && status.desired_replicas == desired
        && utilization.map(i64::from) == Some(measured.utilization)
}

/// The HPA status after this reconcile, as a merge patch.
fn status_patch(hpa: &HorizontalPodAutoscaler, measured: &Measured, desired: i32, rescaled: bool) -> serde_json::Value {
    let now = now_rfc3339();
    let condition = |kind: &str, reason: &str, message: String| json!({"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now});
    let limited = desired == hpa.spec.max_replicas || Some(desired) == hpa.spec.min_replicas;
    let mut status = json!({
        "observedGeneration": hpa.metadata.generation,
        "currentReplicas": measured.current,
        "desiredReplicas": desired,
        "currentMetrics": [{
            "type": "Resource",
            "resource": {"name": "cpu", "current": {"averageUtilization": measured.utilization}}
        }],
        "conditions": [
            condition("AbleToScale", "ReadyForNewScale", "recommended size matches current size".into()),
            condition(
                "ScalingActive",
                "ValidMetricFound",
                "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)".into(),
            ),
            json!({"type": "ScalingLimited", "status": if limited { "True" } else { "False" },
                   "reason": if limited { "TooManyReplicas" } else { "DesiredWithinRange" },
                   "message": "the desired count is within the acceptable range", "lastTransitionTime": now}),
        ],
    });
    if rescaled {
        status["lastScaleTime"] = json!(now);
    }
    json!({ "status": status })
}

fn now_rfc3339() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    // Whole seconds: Kubernetes timestamps carry no fraction.
    kinformer_sdk::k8s::jiff::Timestamp::from_second(i64::try_from(seconds).unwrap_or(0))
        .unwrap_or(kinformer_sdk::k8s::jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

fn write_error(error: WriteError) -> Error {
    Error::msg(format!("write failed: {} ({})", error.message(), error.kind()))
}

kinformer_sdk::controller!(HpaController);

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod with a 100m request and, when `usage` is set, that much CPU in
    /// its metrics.
    fn pod(ready: bool, usage: Option<i64>) -> (Pod, Option<i64>) {
        let pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .expect("a valid pod");
        (pod, usage)
    }

    /// Measures pods named apart, with their usages as PodMetrics would give them.
    fn measure_pods(
        deployment: &str,
        current: i32,
        target: i32,
        pods: &[(Pod, Option<i64>)],
    ) -> std::result::Result<Measured, String> {
        let mut named = Vec::new();
        let mut usages = BTreeMap::new();
        for (i, (pod, usage)) in pods.iter().enumerate() {
            let mut pod = pod.clone();
            pod.metadata.name = Some(format!("p{i}"));
            if let Some(usage) = usage {
                usages.insert(format!("p{i}"), *usage);
            }
            named.push(pod);
        }
        super::measure_pods(deployment, current, target, &named, &usages)
    }

    fn hpa(min: i32, max: i32) -> HorizontalPodAutoscaler {
        serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": min, "maxReplicas": max,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}
        }))
        .expect("a valid hpa")
    }

    fn recommend(current: i32, pods: &[(Pod, Option<i64>)], min: i32, max: i32) -> i32 {
        measure_pods("web", current, 50, pods)
            .expect("measurable")
            .recommend(&hpa(min, max), TOLERANCE)
    }

    #[test]
    fn high_utilization_scales_up_in_proportion() {
        // 3 ready pods at 100% of request against a 50% target: 6.
        let pods = vec![pod(true, Some(100)); 3];
        assert_eq!(recommend(3, &pods, 1, 10), 6);
    }

    #[test]
    fn within_the_tolerance_nothing_changes() {
        let pods = vec![pod(true, Some(54)); 4];
        assert_eq!(recommend(4, &pods, 1, 10), 4);
        // A tighter tolerance acts on the same 8% over the target.
        let measured = measure_pods("web", 4, 50, &pods).expect("measurable");
        assert_eq!(measured.recommend(&hpa(1, 10), 0.05), 5);
    }

    #[test]
    fn low_utilization_scales_down_within_the_bounds() {
        let pods = vec![pod(true, Some(10)); 4];
        assert_eq!(recommend(4, &pods, 1, 10), 1);
        assert_eq!(recommend(4, &pods, 2, 10), 2);
        let hot = vec![pod(true, Some(400)); 4];
        assert_eq!(recommend(4, &hot, 1, 10), 10);
    }

    #[test]
    fn pods_not_yet_ready_hold_back_a_repeated_scale_up() {
        // 2 ready pods at 60% (ratio 1.2) and 2 starting: counted as using
        // nothing the ratio is 0.6, so no further scale-up.
        let mut pods = vec![pod(true, Some(60)); 2];
        pods.extend(vec![pod(false, None); 2]);
        assert_eq!(recommend(4, &pods, 1, 10), 4);
        // Without the starting pods the same usage scales up.
        assert_eq!(recommend(2, &pods[..2], 1, 10), 3);
    }

    #[test]
    fn without_ready_pods_with_metrics_the_metric_is_missing() {
        let missing = |pods: &[(Pod, Option<i64>)]| measure_pods("web", 2, 50, pods).map(|_| ()).unwrap_err();
        assert_eq!(
            missing(&[pod(false, None)]),
            "did not receive metrics for any ready pods"
        );
        assert_eq!(
            missing(&[pod(true, None)]),
            "did not receive metrics for any ready pods"
        );
        assert_eq!(
            missing(&[]),
            "no pods returned by selector while calculating replica count"
        );
    }

    #[test]
    fn a_status_without_metrics_keeps_the_replicas_and_says_why() {
        let patch = no_metrics_patch(&hpa(1, 10), 3, "unable to get metrics");
        let status = &patch["status"];
        assert_eq!(status["desiredReplicas"], 3);
        let active = &status["conditions"][1];
        assert_eq!(
            (&active["type"], &active["status"], &active["reason"]),
            (
                &json!("ScalingActive"),
                &json!("False"),
                &json!("FailedGetResourceMetric")
            )
        );
        assert_eq!(active["message"], "unable to get metrics");
    }

    #[test]
    fn a_status_that_already_says_what_was_found_is_not_written_again() {
        let pods = vec![pod(true, Some(100)); 3];
        let measured = measure_pods("web", 3, 50, &pods).expect("measurable");
        let mut hpa = hpa(1, 10);
        assert!(!status_current(&hpa, &measured, 6), "no status yet");
        hpa.status = Some(
            serde_json::from_value(json!({
                "currentReplicas": 3, "desiredReplicas": 6,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 100}}}]
            }))
            .expect("a valid status"),
        );
        assert!(status_current(&hpa, &measured, 6));
        assert!(!status_current(&hpa, &measured, 5), "another desired count");
    }

    #[test]
    fn a_scale_down_waits_for_the_stabilization_window() {
        let start = Instant::now();
        let window = Duration::from_secs(60);
        let mut history = VecDeque::new();
        assert_eq!(
            stabilize(&mut history, start, window, 6, 3),
            6,
            "a scale-up applies at once"
        );
        let later = |seconds| start + Duration::from_secs(seconds);
        assert_eq!(
            stabilize(&mut history, later(10), window, 2, 6),
            6,
            "held by the earlier 6"
        );
        assert_eq!(stabilize(&mut history, later(50), window, 3, 6), 6);
        assert_eq!(
            stabilize(&mut history, later(65), window, 2, 6),
            3,
            "the 6 left the window"
        );
        assert_eq!(stabilize(&mut history, later(200), window, 2, 3), 2);
    }
}
