//! Which objects a list, watch or deletecollection selects: namespace, label and field selectors.

use kinformer_selector::Selector;
use serde_json::Value;

use super::StoredObject;
use crate::conversion::Conversion;
use crate::status::{ApiError, Result};

/// Which objects a list, watch or deletecollection selects.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// The label selector.
    pub labels: Selector,
    /// The field selector: (field path of the stored object, equal?, value).
    pub fields: Vec<(String, bool, String)>,
}

impl Filter {
    /// Parses a `fieldSelector` (`metadata.name=x,metadata.namespace!=y`) of
    /// objects of `kind`, or, for a resource served from another's storage,
    /// of the version `stored_as` converts: its fields are then the stored
    /// objects' fields they are converted to (`regarding.name` of an
    /// `events.k8s.io/v1` Event selects by a `v1` Event's
    /// `involvedObject.name`).
    ///
    /// # Errors
    ///
    /// 400 for a malformed selector or an unsupported field.
    pub fn parse_fields(&mut self, selector: &str, kind: &str, stored_as: Option<Conversion>) -> Result<()> {
        for term in selector.split(',').map(str::trim).filter(|term| !term.is_empty()) {
            let (field, equal, value) = if let Some((field, value)) = term.split_once("!=") {
                (field, false, value)
            } else if let Some((field, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (field, true, value)
            } else {
                return Err(ApiError::bad_request(format!("invalid field selector: {term:?}")));
            };
            let stored = match stored_as {
                Some(conversion) => conversion.field_label(field),
                None => (matches!(field, "metadata.name" | "metadata.namespace") || selectable(kind).contains(&field))
                    .then_some(field),
            };
            let Some(stored) = stored else {
                return Err(ApiError::bad_request(format!("field label not supported: {field}")));
            };
            self.fields.push((stored.to_owned(), equal, value.to_owned()));
        }
        Ok(())
    }

    /// Whether the object is selected.
    #[must_use]
    pub fn matches(&self, object: &StoredObject) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|namespace| object.namespace.as_deref() == Some(namespace))
            && self.labels.matches(&object.labels)
            && self.fields.iter().all(|(field, equal, value)| {
                // A field's value as the API server sets it for selectors:
                // strings as they are, booleans and counts spelled out, and
                // the zero value of its type when unset.
                let unset = match field.as_str() {
                    "spec.unschedulable" | "spec.hostNetwork" => "false",
                    "status.replicas" | "status.successful" => "0",
                    _ => "",
                };
                let read = |path: &str| match path
                    .split('.')
                    .try_fold(&object.value, |value, segment| value.get(segment))
                {
                    Some(Value::String(actual)) => actual.clone(),
                    Some(Value::Bool(flag)) => flag.to_string(),
                    Some(Value::Number(number)) => number.to_string(),
                    _ => unset.to_owned(),
                };
                // An Event's `source` is its source's component, or the
                // controller that reported it when it names none.
                let actual = match field.as_str() {
                    "source" => Some(read("source.component"))
                        .filter(|component| !component.is_empty())
                        .unwrap_or_else(|| read("reportingComponent")),
                    field => read(field),
                };
                (actual == *value) == *equal
            })
    }
}

/// The fields besides `metadata.name` and `metadata.namespace` that
/// kube-apiserver selects a kind's objects by (its field label conversions).
fn selectable(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "Node" => &["spec.unschedulable"],
        "Namespace" => &["status.phase"],
        "Secret" => &["type"],
        "Service" => &["spec.clusterIP", "spec.type"],
        "ReplicaSet" => &["status.replicas"],
        "Job" => &["status.successful"],
        "CertificateSigningRequest" => &["spec.signerName"],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        _ => &[],
    }
}

/// The string form of a `LabelSelector` object (`matchLabels`, `matchExpressions`),
/// as the API server writes it: requirements sorted by key, values sorted.
#[must_use]
pub(crate) fn label_selector_string(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector["matchLabels"].as_object() {
        for (key, value) in labels {
            requirements.push((key.clone(), format!("{key}={}", value.as_str().unwrap_or_default())));
        }
    }
    for expression in selector["matchExpressions"].as_array().into_iter().flatten() {
        let key = expression["key"].as_str().unwrap_or_default();
        let mut values: Vec<&str> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let values = values.join(",");
        let requirement = match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.to_owned(),
            _ => format!("!{key}"),
        };
        requirements.push((key.to_owned(), requirement));
    }
    requirements.sort();
    requirements
        .into_iter()
        .map(|(_, requirement)| requirement)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn label_selector_objects_print_sorted_by_key() {
        let selector = json!({
            "matchLabels": {"tier": "web", "app": "shop"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "canary"]},
                                 {"key": "legacy", "operator": "DoesNotExist"}]
        });
        let printed = label_selector_string(&selector);
        assert_eq!(printed, "app=shop,env in (canary,prod),!legacy,tier=web");
        assert!(Selector::parse(&printed).is_ok());
        assert_eq!(label_selector_string(&json!({})), "");
    }
}
