//! A Kubernetes object as the cache keeps it: the JSON plugins receive, plus the
//! parsed metadata that keys and indexes need.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

/// Why some bytes are not a Kubernetes object.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The bytes are not JSON, or `metadata` is not shaped like object metadata.
    #[error("object is not valid JSON with Kubernetes metadata")]
    Json(#[source] serde_json::Error),
    /// `metadata.name` is missing or empty.
    #[error("object has no metadata.name")]
    NoName,
}

/// An immutable object: its JSON and its parsed metadata. Shared by the cache,
/// the deltas and every plugin queue through `Arc`, so it is stored once.
#[derive(Debug, PartialEq, Eq)]
pub struct CachedObject {
    key: String,
    namespace: Option<String>,
    name_offset: usize,
    uid: String,
    resource_version: String,
    labels: BTreeMap<String, String>,
    owner_uids: Vec<String>,
    json: Arc<str>,
}

#[derive(Deserialize)]
struct Shape {
    metadata: Metadata,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    #[serde(default)]
    name: String,
    namespace: Option<String>,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    resource_version: String,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
}

#[derive(Deserialize)]
struct OwnerReference {
    uid: String,
}

impl CachedObject {
    /// Parses the metadata out of an object's JSON and keeps the JSON as it is.
    ///
    /// # Errors
    ///
    /// When the JSON is malformed or the object has no name.
    pub fn from_json(json: impl Into<Arc<str>>) -> Result<Self, ObjectError> {
        let json = json.into();
        let Shape { metadata } = serde_json::from_str(&json).map_err(ObjectError::Json)?;
        if metadata.name.is_empty() {
            return Err(ObjectError::NoName);
        }
        let namespace = metadata.namespace.filter(|namespace| !namespace.is_empty());
        let key = object_key(namespace.as_deref(), &metadata.name);
        Ok(Self {
            name_offset: key.len() - metadata.name.len(),
            key,
            namespace,
            uid: metadata.uid,
            resource_version: metadata.resource_version,
            labels: metadata.labels.unwrap_or_default(),
            owner_uids: metadata
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .map(|owner| owner.uid)
                .collect(),
            json,
        })
    }

    /// Like [`CachedObject::from_json`], for a `serde_json::Value`.
    ///
    /// # Errors
    ///
    /// As [`CachedObject::from_json`].
    pub fn from_value(value: &serde_json::Value) -> Result<Self, ObjectError> {
        Self::from_json(value.to_string())
    }

    /// The cache key: `namespace/name`, or `name` when cluster-scoped.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The namespace; `None` when cluster-scoped.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.key[self.name_offset..]
    }

    /// `metadata.uid`.
    #[must_use]
    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// `metadata.resourceVersion`.
    #[must_use]
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// `metadata.labels`.
    #[must_use]
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    /// The uids of `metadata.ownerReferences`.
    #[must_use]
    pub fn owner_uids(&self) -> &[String] {
        &self.owner_uids
    }

    /// The object's JSON, shared.
    #[must_use]
    pub fn json(&self) -> &Arc<str> {
        &self.json
    }
}

/// The cache key of an object: `namespace/name`, or `name` when cluster-scoped.
#[must_use]
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_parsed_and_json_kept_verbatim() {
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"shop","uid":"u1",
            "resourceVersion":"42","labels":{"app":"web"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web","uid":"rs-1"}]},
            "spec":{"containers":[]}}"#;
        let object = CachedObject::from_json(json).unwrap();
        assert_eq!(object.key(), "shop/web-0");
        assert_eq!(object.name(), "web-0");
        assert_eq!(object.namespace(), Some("shop"));
        assert_eq!(object.uid(), "u1");
        assert_eq!(object.resource_version(), "42");
        assert_eq!(object.labels().get("app").map(String::as_str), Some("web"));
        assert_eq!(object.owner_uids(), ["rs-1"]);
        assert_eq!(&**object.json(), json);
    }

    #[test]
    fn cluster_scoped_objects_are_keyed_by_name() {
        let object = CachedObject::from_json(r#"{"metadata":{"name":"node-1"}}"#).unwrap();
        assert_eq!(object.key(), "node-1");
        assert_eq!(object.name(), "node-1");
        assert_eq!(object.namespace(), None);
    }

    #[test]
    fn objects_without_a_name_or_metadata_are_rejected() {
        assert!(matches!(
            CachedObject::from_json(r#"{"metadata":{}}"#),
            Err(ObjectError::NoName)
        ));
        assert!(matches!(
            CachedObject::from_json(r#"{"kind":"Pod"}"#),
            Err(ObjectError::Json(_))
        ));
        assert!(matches!(CachedObject::from_json("not json"), Err(ObjectError::Json(_))));
    }
}
