//! A Kubernetes object as the cache keeps it: the JSON plugins receive, plus the
//! parsed metadata that keys, indexes and the watcher need.
//!
//! Objects are decoded straight from the API server's JSON without building a
//! tree of the whole object: only `metadata`'s identity fields, labels and owner
//! references are parsed; the rest stays text. A [`Transform`] strips what
//! plugins do not need (by default `metadata.managedFields` and the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation) by cutting the
//! text, not by re-serializing the object.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::ApiResource;
use kube::core::DynamicResourceScope;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

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

/// The annotation `kubectl apply` writes: a copy of the whole last applied object.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What an informer strips from objects before caching them, as client-go's
/// `SetTransform` users do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    /// Remove `metadata.managedFields`.
    pub strip_managed_fields: bool,
    /// Remove these annotations.
    pub strip_annotations: Vec<String>,
}

impl Default for Transform {
    /// Strips `metadata.managedFields` and the last-applied annotation.
    fn default() -> Self {
        Self {
            strip_managed_fields: true,
            strip_annotations: vec![LAST_APPLIED_ANNOTATION.to_owned()],
        }
    }
}

impl Transform {
    /// Keeps objects exactly as served.
    #[must_use]
    pub fn none() -> Self {
        Self {
            strip_managed_fields: false,
            strip_annotations: Vec::new(),
        }
    }

    /// The JSON with the stripped fields cut out; `None` when nothing is stripped.
    fn apply(&self, json: &str) -> Result<Option<String>, ObjectError> {
        let strips_fields = self.strip_managed_fields && json.contains("\"managedFields\"");
        let strips_annotations = self.strip_annotations.iter().any(|a| json.contains(a.as_str()));
        if !strips_fields && !strips_annotations {
            return Ok(None);
        }
        let mut top: Fields<'_> = serde_json::from_str(json).map_err(ObjectError::Json)?;
        let Some((_, metadata)) = top.0.iter_mut().find(|(key, _)| key.as_str() == "metadata") else {
            return Ok(None);
        };
        let mut meta: Fields<'_> = serde_json::from_str(metadata.get()).map_err(ObjectError::Json)?;
        if self.strip_managed_fields {
            meta.0.retain(|(key, _)| key.as_str() != "managedFields");
        }
        let mut annotations_json = None;
        if let Some((_, annotations)) = meta.0.iter().find(|(key, _)| key.as_str() == "annotations") {
            let mut annotations: Fields<'_> = serde_json::from_str(annotations.get()).map_err(ObjectError::Json)?;
            annotations
                .0
                .retain(|(key, _)| !self.strip_annotations.iter().any(|a| a == key.as_str()));
            annotations_json = Some(annotations.to_json());
        }
        let annotations_raw = annotations_json
            .as_deref()
            .map(|json| serde_json::from_str::<&RawValue>(json).map_err(ObjectError::Json))
            .transpose()?;
        if let Some(raw) = annotations_raw {
            for (key, value) in &mut meta.0 {
                if key.as_str() == "annotations" {
                    *value = raw;
                }
            }
        }
        let meta_json = meta.to_json();
        let meta_raw: &RawValue = serde_json::from_str(&meta_json).map_err(ObjectError::Json)?;
        *metadata = meta_raw;
        Ok(Some(top.to_json()))
    }
}

/// The fields of a JSON object in their order, values left as text.
struct Fields<'a>(Vec<(Key<'a>, &'a RawValue)>);

/// A field name, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl Key<'_> {
    fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(entry) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    fields.push(entry);
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(FieldsVisitor)
    }
}

impl Fields<'_> {
    fn to_json(&self) -> String {
        let size = self.0.iter().map(|(k, v)| k.0.len() + v.get().len() + 4).sum::<usize>() + 2;
        let mut out = String::with_capacity(size);
        out.push('{');
        for (i, (key, value)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(&key.0).expect("a string serializes"));
            out.push(':');
            out.push_str(value.get());
        }
        out.push('}');
        out
    }
}

/// The part of `metadata` the cache parses.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataSubset {
    #[serde(default)]
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    deletion_timestamp: Option<Time>,
}

#[derive(Deserialize)]
struct Shape {
    metadata: MetadataSubset,
}

/// An immutable object: its JSON and its parsed metadata. Shared by the cache,
/// the deltas and every plugin queue through `Arc`, so it is stored once.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedObject {
    key: String,
    meta: ObjectMeta,
    json: Box<str>,
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl CachedObject {
    /// Parses the metadata out of an object's JSON and keeps the JSON as it is.
    ///
    /// # Errors
    ///
    /// When the JSON is malformed or the object has no name.
    pub fn from_json(json: impl Into<Box<str>>) -> Result<Self, ObjectError> {
        let json = json.into();
        let Shape { metadata } = serde_json::from_str(&json).map_err(ObjectError::Json)?;
        let name = metadata
            .name
            .filter(|name| !name.is_empty())
            .ok_or(ObjectError::NoName)?;
        let namespace = metadata.namespace.filter(|namespace| !namespace.is_empty());
        let key = match &namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.clone(),
        };
        let meta = ObjectMeta {
            name: Some(name),
            namespace,
            uid: metadata.uid,
            resource_version: metadata.resource_version,
            generation: metadata.generation,
            labels: metadata.labels,
            owner_references: metadata.owner_references,
            deletion_timestamp: metadata.deletion_timestamp,
            ..ObjectMeta::default()
        };
        Ok(Self { key, meta, json })
    }

    /// Like [`CachedObject::from_json`], for a `serde_json::Value`.
    ///
    /// # Errors
    ///
    /// As [`CachedObject::from_json`].
    pub fn from_value(value: &serde_json::Value) -> Result<Self, ObjectError> {
        Self::from_json(value.to_string())
    }

    /// The object with `transform` applied to its JSON.
    ///
    /// # Errors
    ///
    /// When the JSON is malformed.
    pub fn transformed(self, transform: &Transform) -> Result<Self, ObjectError> {
        match transform.apply(&self.json)? {
            Some(json) => Ok(Self {
                json: json.into_boxed_str(),
                ..self
            }),
            None => Ok(self),
        }
    }

    /// The cache key: `namespace/name`, or `name` when cluster-scoped.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The parsed metadata: name, namespace, uid, resourceVersion, generation,
    /// labels, owner references and deletion timestamp (nothing else is parsed).
    #[must_use]
    pub fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    /// The namespace; `None` when cluster-scoped.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        self.meta.namespace.as_deref()
    }

    /// The name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.meta.name.as_deref().unwrap_or_default()
    }

    /// `metadata.uid`.
    #[must_use]
    pub fn uid(&self) -> &str {
        self.meta.uid.as_deref().unwrap_or_default()
    }

    /// `metadata.resourceVersion`.
    #[must_use]
    pub fn resource_version(&self) -> &str {
        self.meta.resource_version.as_deref().unwrap_or_default()
    }

    /// `metadata.labels`.
    #[must_use]
    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.meta.labels.as_ref().unwrap_or(&NO_LABELS)
    }

    /// The uids of `metadata.ownerReferences`.
    pub fn owner_uids(&self) -> impl Iterator<Item = &str> {
        self.meta
            .owner_references
            .iter()
            .flatten()
            .map(|owner| owner.uid.as_str())
    }

    /// The object's JSON.
    #[must_use]
    pub fn json(&self) -> &str {
        &self.json
    }
}

impl<'de> Deserialize<'de> for CachedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw: Box<RawValue> = Deserialize::deserialize(deserializer)?;
        let json: Box<str> = raw.into();
        Self::from_json(json).map_err(de::Error::custom)
    }
}

impl Serialize for CachedObject {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(&self.json).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

/// Lets kube-rs's watcher and API list and watch any resource as `CachedObject`s.
impl kube::Resource for CachedObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    /// The parsed metadata only: changes here do not reach the JSON.
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert_eq!(object.owner_uids().collect::<Vec<_>>(), ["rs-1"]);
        assert_eq!(object.json(), json);
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

    #[test]
    fn the_default_transform_strips_managed_fields_and_last_applied() {
        let value = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "a", "resourceVersion": "7",
                         "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}],
                         "annotations": {LAST_APPLIED_ANNOTATION: "{\"big\":true}", "keep": "me"}},
            "data": {"k": "managedFields"}
        });
        let object = CachedObject::from_value(&value)
            .unwrap()
            .transformed(&Transform::default())
            .unwrap();
        let stripped: serde_json::Value = serde_json::from_str(object.json()).unwrap();
        let mut expected = value.clone();
        expected["metadata"].as_object_mut().unwrap().remove("managedFields");
        expected["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(LAST_APPLIED_ANNOTATION);
        assert_eq!(stripped, expected);
        assert_eq!(object.resource_version(), "7");

        let kept = CachedObject::from_value(&value)
            .unwrap()
            .transformed(&Transform::none())
            .unwrap();
        assert_eq!(serde_json::from_str::<serde_json::Value>(kept.json()).unwrap(), value);
    }

    #[test]
    fn objects_decode_from_a_watch_event_and_encode_back_verbatim() {
        let line = r#"{"type":"ADDED","object":{"metadata":{"name":"x","resourceVersion":"3"},"spec":{"a":[1,2]}}}"#;
        let event: kube::api::WatchEvent<CachedObject> = serde_json::from_str(line).unwrap();
        let kube::api::WatchEvent::Added(object) = event else {
            panic!("an added event")
        };
        assert_eq!(
            object.json(),
            r#"{"metadata":{"name":"x","resourceVersion":"3"},"spec":{"a":[1,2]}}"#
        );
        assert_eq!(serde_json::to_string(&object).unwrap(), object.json());
    }
}
