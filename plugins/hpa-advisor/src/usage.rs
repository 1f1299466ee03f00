//! What both HPA plugins read off pods, HPAs and the resource metrics API: the
//! CPU utilization target, the target's pod selector, readiness, requests and
//! usage. One file, included by `hpa-advisor` and (by path) by `hpa-controller`.
//!
//! Usage comes from `metrics.k8s.io/v1beta1` PodMetrics, as the Kubernetes HPA
//! controller reads it: a pod's usage is the sum of its containers' CPU, and
//! utilization is usage over requests. metrics-server answers list and get but
//! no watch, so the plugins read it uncached through `kinformer_sdk::api`,
//! under a `[[grant.read]]` in their manifest.

use std::collections::BTreeMap;

use kinformer_sdk::api::{self, ReadError};
use kinformer_sdk::k8s::api::apps::v1::Deployment;
use kinformer_sdk::k8s::api::autoscaling::v2::{HorizontalPodAutoscaler, MetricSpec};
use kinformer_sdk::k8s::api::core::v1::Pod;
use kinformer_sdk::k8s::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kinformer_sdk::{Gvk, Result, cache};
use serde_json::Value;
/// What an HPA scales, as the cache has it.
pub(crate) struct ScaleTarget {
    /// Its deployment's name.
    pub(crate) deployment: String,
    /// The CPU utilization it aims at, in percent.
    pub(crate) target: i32,
    /// The deployment's replicas.
    pub(crate) current: i32,
    /// The deployment's pod selector, in the cache's string form.
    pub(crate) selector: String,
    /// The deployment's pods.
    pub(crate) pods: Vec<Pod>,
}

/// The deployment an HPA in `namespace` scales, its CPU target and its pods
/// from the cache; `Err` says why the HPA is skipped (not a deployment, no
/// CPU utilization target, no such deployment, an empty selector).
pub(crate) fn scale_target(namespace: &str, hpa: &HorizontalPodAutoscaler) -> Result<Result<ScaleTarget, String>> {
    let spec = &hpa.spec;
    let target_ref = &spec.scale_target_ref;
    if target_ref.kind != "Deployment" {
        return Ok(Err(format!(
            "targets a {}, only deployments are supported",
            target_ref.kind
        )));
    }
    let Some(target) = cpu_utilization_target(spec.metrics.as_deref().unwrap_or_default()) else {
        return Ok(Err("no cpu utilization target".into()));
    };
    let deployment_key = format!("{namespace}/{}", target_ref.name);
    let Some(deployment) = cache::get_as::<Deployment>(&Gvk::of::<Deployment>(), &deployment_key)? else {
        return Ok(Err(format!("deployment {deployment_key} not in the cache")));
    };
    let Some(selector) = selector_string(&deployment.spec.selector) else {
        return Ok(Err(format!("deployment {deployment_key} has an empty selector")));
    };
    let pods: Vec<Pod> = cache::list(&Gvk::of::<Pod>())
        .namespace(namespace)
        .label_selector(selector.as_str())
        .fetch()?
        .parse()?;
    Ok(Ok(ScaleTarget {
        deployment: target_ref.name.clone(),
        target,
        current: deployment.spec.replicas.unwrap_or(1),
        selector,
        pods,
    }))
}

/// Like the HPA controller: no scaling while utilization is within 10% of the target.
pub(crate) const TOLERANCE: f64 = 0.1;

pub(crate) fn cpu_utilization_target(metrics: &[MetricSpec]) -> Option<i32> {
    metrics.iter().find_map(|metric| {
        let resource = metric.resource.as_ref()?;
        (resource.name == "cpu").then_some(resource.target.average_utilization?)
    })
}

/// A label selector in the string form the cache understands.
pub(crate) fn selector_string(selector: &LabelSelector) -> Option<String> {
    let mut terms: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    for expression in selector.match_expressions.iter().flatten() {
        let values = expression.values.as_deref().unwrap_or_default().join(",");
        terms.push(match expression.operator.as_str() {
            "In" => format!("{} in ({values})", expression.key),
            "NotIn" => format!("{} notin ({values})", expression.key),
            "Exists" => expression.key.clone(),
            _ => format!("!{}", expression.key),
        });
    }
    (!terms.is_empty()).then(|| terms.join(","))
}

pub(crate) fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|status| status.conditions.as_deref());
    conditions
        .unwrap_or_default()
        .iter()
        .any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

/// The resource metrics API's pod usage type.
pub(crate) fn pod_metrics_gvk() -> Gvk {
    Gvk::new("metrics.k8s.io", "v1beta1", "PodMetrics")
}

/// The CPU usage in millicores of the pods in `namespace` matching `selector`,
/// by pod name, from the resource metrics API.
pub(crate) fn pod_usages(namespace: &str, selector: &str) -> Result<BTreeMap<String, i64>, ReadError> {
    let items = api::list(&pod_metrics_gvk(), Some(namespace), Some(selector))?;
    Ok(usages(&items))
}

/// Each PodMetrics' CPU summed over its containers, by pod name; a pod whose
/// usage does not parse has no metrics.
pub(crate) fn usages(items: &[Value]) -> BTreeMap<String, i64> {
    items
        .iter()
        .filter_map(|item| {
            let name = item["metadata"]["name"].as_str()?;
            let mut total = 0;
            for container in item["containers"].as_array()? {
                total += millicores(container["usage"]["cpu"].as_str()?)?;
            }
            Some((name.to_owned(), total))
        })
        .collect()
}

/// The pod's usage among `usages`.
pub(crate) fn pod_usage(pod: &Pod, usages: &BTreeMap<String, i64>) -> Option<i64> {
    usages.get(pod.metadata.name.as_deref()?).copied()
}

pub(crate) fn pod_cpu_requests(pod: &Pod) -> Option<i64> {
    let containers = &pod.spec.as_ref()?.containers;
    let mut total = 0;
    for container in containers {
        let requests = container.resources.as_ref()?.requests.as_ref()?;
        total += millicores(&requests.get("cpu")?.0)?;
    }
    Some(total)
}

/// A CPU quantity (`250m`, `1`, `0.5`, metrics-server's `123456789n`) in
/// millicores, rounded up as Kubernetes' `MilliValue` does.
pub(crate) fn millicores(quantity: &str) -> Option<i64> {
    let (number, scale) = [
        ("n", 1e-6),
        ("u", 1e-3),
        ("m", 1.0),
        ("k", 1e6),
        ("M", 1e9),
        ("G", 1e12),
    ]
    .iter()
    .find_map(|(suffix, scale)| Some((quantity.strip_suffix(suffix)?, *scale)))
    .unwrap_or((quantity, 1e3));
    let value = number
        .parse::<f64>()
        .ok()
        .filter(|value| value.is_finite() && *value >= 0.0)?
        * scale;
    // Round up, but not past a value that is whole up to float error.
    Some((value - 1e-9).ceil().max(0.0) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_quantities_convert_to_millicores() {
        assert_eq!(millicores("250m"), Some(250));
        assert_eq!(millicores("2"), Some(2000));
        assert_eq!(millicores("0.5"), Some(500));
        assert_eq!(millicores("lots"), None);
        assert_eq!(millicores("249999999n"), Some(250), "rounded up");
        assert_eq!(millicores("250000000n"), Some(250));
        assert_eq!(millicores("1500u"), Some(2));
        assert_eq!(millicores("0"), Some(0));
        assert_eq!(millicores("-1"), None);
    }

    #[test]
    fn pod_metrics_sum_their_containers() {
        let items = vec![
            serde_json::json!({"metadata": {"name": "a"}, "containers": [
                {"name": "c", "usage": {"cpu": "100m", "memory": "1Mi"}},
                {"name": "d", "usage": {"cpu": "49999999n", "memory": "1Mi"}}
            ]}),
            serde_json::json!({"metadata": {"name": "b"}, "containers": [{"name": "c", "usage": {"cpu": "oops"}}]}),
        ];
        let usages = usages(&items);
        assert_eq!(usages.get("a"), Some(&150));
        assert!(!usages.contains_key("b"), "a pod whose usage does not parse has none");
    }

    #[test]
    fn selectors_render_match_labels_and_expressions() {
        let selector: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "canary", "operator": "DoesNotExist"}
            ]
        }))
        .expect("valid selector");
        assert_eq!(
            selector_string(&selector).as_deref(),
            Some("app=web,tier in (a,b),!canary")
        );
        assert_eq!(selector_string(&LabelSelector::default()), None);
    }
}
