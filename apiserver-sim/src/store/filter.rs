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
                || (kind == "Pod" && matches!(field, "spec.nodeName" | "status.phase"));
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
                let actual = field
                    .split('.')
                    .try_fold(&object.value, |value, segment| value.get(segment))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                (actual == value) == *equal
            })
    }
}
