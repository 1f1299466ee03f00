//! What both HPA plugins read off pods and HPAs: the CPU utilization target, the
//! target's pod selector, readiness, usage and requests. One file, included by
//! `hpa-advisor` and (by path) by `hpa-controller`.

use kinformer_sdk::k8s::api::autoscaling::v2::MetricSpec;
use kinformer_sdk::k8s::api::core::v1::Pod;
use kinformer_sdk::k8s::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The pod annotation carrying the pod's CPU usage in millicores.
pub(crate) const USAGE_ANNOTATION: &str = "metrics.kinformer.dev/cpu-millicores";
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

pub(crate) fn pod_usage(pod: &Pod) -> Option<i64> {
    pod.metadata.annotations.as_ref()?.get(USAGE_ANNOTATION)?.parse().ok()
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

/// A CPU quantity (`250m`, `1`, `0.5`) in millicores.
pub(crate) fn millicores(quantity: &str) -> Option<i64> {
    match quantity.strip_suffix('m') {
        Some(milli) => milli.parse().ok(),
        None => quantity
            .parse::<f64>()
            .ok()
            .map(|cores| (cores * 1000.0).round() as i64),
    }
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
