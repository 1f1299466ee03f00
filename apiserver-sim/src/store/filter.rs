//! Which objects a list, watch or deletecollection selects: namespace, label and field selectors.

use kinformer_selector::Selector;
use serde_json::Value;

use super::StoredObject;
use crate::status::{ApiError, Result};

/// Which objects a list, watch or deletecollection selects.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// The label selector.
    pub labels: Selector,
    /// The field selector: (field path, equal?, value).
    pub fields: Vec<(String, bool, String)>,
}

impl Filter {
    /// Parses a `fieldSelector` (`metadata.name=x,metadata.namespace!=y`).
    ///
    /// # Errors
    ///
    /// 400 for a malformed selector or an unsupported field.
    pub fn parse_fields(&mut self, selector: &str, kind: &str) -> Result<()> {
        for term in selector.split(',').map(str::trim).filter(|term| !term.is_empty()) {
            let (field, equal, value) = if let Some((field, value)) = term.split_once("!=") {
                (field, false, value)
            } else if let Some((field, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (field, true, value)
            } else {
                return Err(ApiError::bad_request(format!("invalid field selector: {term:?}")));
            };
            let supported = matches!(field, "metadata.name" | "metadata.namespace")
                || (kind == "Pod" && matches!(field, "spec.nodeName" | "status.phase"))
                || (kind == "Node" && field == "spec.unschedulable");
            if !supported {
                return Err(ApiError::bad_request(format!("field label not supported: {field}")));
            }
            self.fields.push((field.to_owned(), equal, value.to_owned()));
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
                // a string, or a boolean spelled out (`false` when unset).
                let actual = match field
                    .split('.')
                    .try_fold(&object.value, |value, segment| value.get(segment))
                {
                    Some(Value::String(actual)) => actual.as_str(),
                    Some(Value::Bool(true)) => "true",
                    Some(Value::Bool(false)) => "false",
                    _ if field == "spec.unschedulable" => "false",
                    _ => "",
                };
                (actual == value) == *equal
            })
    }
}

/// The string form of a `LabelSelector` object (`matchLabels`, `matchExpressions`),
/// as the API server writes it: requirements sorted by key, values sorted.
#[must_use]
pub(super) fn label_selector_string(selector: &Value) -> String {
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
