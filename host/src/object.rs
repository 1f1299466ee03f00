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
use std::ops::Range;

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
pub(crate) struct Key<'a>(Cow<'a, str>);

impl Key<'_> {
    pub(crate) fn as_str(&self) -> &str {
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
#[derive(Default)]
struct MetadataSubset {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    deletion_timestamp: Option<Time>,
}

/// Where, in an object's JSON, the parts a [`Transform`] may strip are: found
/// while the metadata is parsed, so stripping them is a copy around the cuts,
/// with no second parse. Each cut is the field with one of its separating
/// commas, so what is left is valid JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Strippable {
    /// The cut that removes `metadata.managedFields`.
    managed_fields: Option<Range<usize>>,
    /// Each annotation: its key's text, and the cut that removes it.
    annotations: Vec<(Range<usize>, Range<usize>)>,
    /// A name was escaped, so positions are unknown: strip by parsing.
    unknown: bool,
}

/// Byte positions of the fields of one JSON object, read from the borrowed
/// field names and raw values of a parse of `json`.
struct Positions<'j> {
    json: &'j str,
    /// Each field's name start (its opening quote); `None` when escaped.
    starts: Vec<Option<usize>>,
}

impl<'j> Positions<'j> {
    fn new(json: &'j str) -> Self {
        Self {
            json,
            starts: Vec::new(),
        }
    }

    /// Where `part` (borrowed from the parsed JSON) starts; `None` if it is not
    /// a slice of it.
    fn offset(&self, part: &str) -> Option<usize> {
        let offset = (part.as_ptr() as usize).checked_sub(self.json.as_ptr() as usize)?;
        (offset + part.len() <= self.json.len()).then_some(offset)
    }

    /// Notes the next field's name.
    fn field(&mut self, key: &Key<'_>) {
        let start = match &key.0 {
            Cow::Borrowed(name) => self.offset(name).and_then(|at| at.checked_sub(1)),
            Cow::Owned(_) => None,
        };
        self.starts.push(start);
    }

    /// The cut that removes field `index`, whose value ends at `end`: up to the
    /// next field's name, or from the comma before it when it is the last.
    fn cut(&self, index: usize, end: usize) -> Option<Range<usize>> {
        let start = self.starts.get(index).copied().flatten()?;
        if let Some(next) = self.starts.get(index + 1) {
            return Some(start..(*next)?);
        }
        if index == 0 {
            return Some(start..end);
        }
        let before = self.json[..start].trim_end_matches([' ', '\t', '\n', '\r']);
        before.ends_with(',').then(|| before.len() - 1..end)
    }

    /// Where a borrowed raw value ends.
    fn end(&self, raw: &RawValue) -> Option<usize> {
        self.offset(raw.get()).map(|at| at + raw.get().len())
    }
}

/// Parses an object's top level, reading only `metadata`.
struct ObjectSeed<'p, 'j>(MetadataSeed<'p, 'j>);

impl<'de> de::DeserializeSeed<'de> for ObjectSeed<'_, '_> {
    type Value = MetadataSubset;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<MetadataSubset, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = MetadataSubset;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MetadataSubset, A::Error> {
        let mut metadata = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.as_str() == "metadata" {
                metadata = Some(map.next_value_seed(MetadataSeed {
                    json: self.0.json,
                    strip: &mut *self.0.strip,
                })?);
            } else {
                map.next_value::<de::IgnoredAny>()?;
            }
        }
        metadata.ok_or_else(|| de::Error::missing_field("metadata"))
    }
}

/// Parses `metadata`: the subset the cache keeps, and where in `json` (the
/// whole object's text) its strippable parts are.
struct MetadataSeed<'p, 'j> {
    json: &'j str,
    strip: &'p mut Strippable,
}

impl<'de> de::DeserializeSeed<'de> for MetadataSeed<'_, '_> {
    type Value = MetadataSubset;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<MetadataSubset, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_, '_> {
    type Value = MetadataSubset;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("object metadata")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MetadataSubset, A::Error> {
        let mut meta = MetadataSubset::default();
        let json = self.json;
        let mut fields = Positions::new(json);
        let mut managed_fields = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            fields.field(&key);
            match key.as_str() {
                "name" => meta.name = map.next_value()?,
                "namespace" => meta.namespace = map.next_value()?,
                "uid" => meta.uid = map.next_value()?,
                "resourceVersion" => meta.resource_version = map.next_value()?,
                "generation" => meta.generation = map.next_value()?,
                "labels" => meta.labels = map.next_value()?,
                "ownerReferences" => meta.owner_references = map.next_value()?,
                "deletionTimestamp" => meta.deletion_timestamp = map.next_value()?,
                "managedFields" => {
                    let raw: &RawValue = map.next_value()?;
                    managed_fields = Some((fields.starts.len() - 1, fields.end(raw)));
                }
                "annotations" => {
                    let mut entries = Positions::new(json);
                    let annotations: Annotations<'_> = map.next_value_seed(AnnotationsSeed(&mut entries))?;
                    self.strip.annotations = annotations
                        .0
                        .into_iter()
                        .enumerate()
                        .filter_map(|(index, (name, end))| {
                            let name = name?;
                            let at = entries.offset(name)?;
                            Some((at..at + name.len(), entries.cut(index, end?)?))
                        })
                        .collect();
                    if entries.starts.iter().any(Option::is_none) {
                        self.strip.unknown = true;
                    }
                }
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        if fields.starts.iter().any(Option::is_none) {
            self.strip.unknown = true;
        }
        if let Some((index, end)) = managed_fields {
            self.strip.managed_fields = end.and_then(|end| fields.cut(index, end));
            self.strip.unknown |= self.strip.managed_fields.is_none();
        }
        Ok(meta)
    }
}

/// Annotations in order: each one's name (borrowed, when unescaped) and where
/// its value ends.
struct Annotations<'de>(Vec<(Option<&'de str>, Option<usize>)>);

struct AnnotationsSeed<'p, 'j>(&'p mut Positions<'j>);

impl<'de> de::DeserializeSeed<'de> for AnnotationsSeed<'_, '_> {
    type Value = Annotations<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Annotations<'de>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AnnotationsSeed<'_, '_> {
    type Value = Annotations<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("annotations")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Annotations<'de>, A::Error> {
        let mut found = Vec::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            self.0.field(&key);
            let raw: &RawValue = map.next_value()?;
            let name = match key.0 {
                Cow::Borrowed(name) => Some(name),
                Cow::Owned(_) => None,
            };
            found.push((name, self.0.end(raw)));
        }
        Ok(Annotations(found))
    }
}

/// `json` without the byte ranges `cuts`; `None` when there are none.
fn cut(json: &str, mut cuts: Vec<Range<usize>>) -> Option<String> {
    if cuts.is_empty() {
        return None;
    }
    cuts.sort_by_key(|cut| cut.start);
    let mut out = String::with_capacity(json.len());
    let mut from = 0;
    for cut in cuts {
        out.push_str(&json[from..cut.start.max(from)]);
        from = from.max(cut.end);
    }
    out.push_str(&json[from..]);
    Some(out)
}

/// An object's labels, sorted by key, each name and value stored once in
/// one small slice (a map per object would cost more than the labels).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(Box<[(Box<str>, Box<str>)]>);

impl Labels {
    /// The value of label `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(name, _)| name.as_ref().cmp(key))
            .ok()
            .map(|at| self.0[at].1.as_ref())
    }

    /// The labels, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(name, value)| (name.as_ref(), value.as_ref()))
    }

    /// True without labels.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(labels: BTreeMap<String, String>) -> Self {
        Self(labels.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

impl crate::selector::Labels for Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

/// An immutable object: its JSON and its parsed metadata. Shared by the cache,
/// the deltas and every plugin queue through `Arc`, so it is stored once.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedObject {
    key: String,
    meta: ObjectMeta,
    labels: Labels,
    json: Box<str>,
    /// Until a transform is applied: where its cuts go.
    strip: Option<Box<Strippable>>,
}

impl CachedObject {
    /// Parses the metadata out of an object's JSON and keeps the JSON as it is.
    ///
    /// # Errors
    ///
    /// When the JSON is malformed or the object has no name.
    pub fn from_json(json: impl Into<Box<str>>) -> Result<Self, ObjectError> {
        let json = json.into();
        let mut strip = Strippable::default();
        let mut deserializer = serde_json::Deserializer::from_str(&json);
        let seed = ObjectSeed(MetadataSeed {
            json: &json,
            strip: &mut strip,
        });
        let metadata = de::DeserializeSeed::deserialize(seed, &mut deserializer).map_err(ObjectError::Json)?;
        deserializer.end().map_err(ObjectError::Json)?;
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
            owner_references: metadata.owner_references,
            deletion_timestamp: metadata.deletion_timestamp,
            ..ObjectMeta::default()
        };
        let strip = (strip != Strippable::default()).then(|| Box::new(strip));
        let labels = metadata.labels.map(Labels::from).unwrap_or_default();
        Ok(Self {
            key,
            meta,
            labels,
            json,
            strip,
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

    /// The object with `transform` applied to its JSON.
    ///
    /// # Errors
    ///
    /// When the JSON is malformed.
    pub fn transformed(mut self, transform: &Transform) -> Result<Self, ObjectError> {
        let Some(strip) = self.strip.take() else {
            return Ok(self);
        };
        let mut cuts: Vec<Range<usize>> = strip
            .annotations
            .iter()
            .filter(|(key, _)| transform.strip_annotations.iter().any(|a| *a == self.json[key.clone()]))
            .map(|(_, cut)| cut.clone())
            .collect();
        // Two cuts in one object may touch: strip those by parsing, as when a
        // name was escaped.
        let parse = strip.unknown || cuts.len() > 1;
        if transform.strip_managed_fields {
            cuts.extend(strip.managed_fields.clone());
        }
        let json = if parse {
            transform.apply(&self.json)?
        } else {
            cut(&self.json, cuts)
        };
        if let Some(json) = json {
            self.json = json.into_boxed_str();
        }
        Ok(self)
    }

    /// The cache key: `namespace/name`, or `name` when cluster-scoped.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The parsed metadata: name, namespace, uid, resourceVersion, generation,
    /// owner references and deletion timestamp (nothing else is parsed; the
    /// labels are kept apart, see [`CachedObject::labels`]).
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
    pub fn labels(&self) -> &Labels {
        &self.labels
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
        assert_eq!(object.labels().get("app"), Some("web"));
        assert_eq!(object.labels().get("tier"), None);
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

    /// The field names of `metadata`, in their order in the text.
    fn metadata_names(json: &str) -> Vec<String> {
        let top: Fields<'_> = serde_json::from_str(json).unwrap();
        let (_, metadata) = top.0.iter().find(|(key, _)| key.as_str() == "metadata").unwrap();
        let metadata: Fields<'_> = serde_json::from_str(metadata.get()).unwrap();
        metadata.0.iter().map(|(key, _)| key.as_str().to_owned()).collect()
    }

    /// Every placement of the stripped parts, with and without whitespace and
    /// escaped names: cutting gives the same JSON as parsing, field order kept.
    #[test]
    fn stripping_by_cuts_matches_stripping_by_parsing() {
        let managed = r#""managedFields":[{"manager":"kubectl","fieldsV1":{"f:data":{"x":"}"}}}]"#;
        let last = format!(r#""{LAST_APPLIED_ANNOTATION}":"{{\"big\":true}}""#);
        let metas = [
            format!(r#"{{{managed},"name":"a","namespace":"n","resourceVersion":"1"}}"#),
            format!(r#"{{"name":"a",{managed},"namespace":"n"}}"#),
            format!(r#"{{"name":"a","namespace":"n",{managed}}}"#),
            format!(
                r#"{{ "name" : "a" ,
                {managed} }}"#
            ),
            format!(r#"{{"name":"a","annotations":{{{last}}}}}"#),
            format!(r#"{{"name":"a","annotations":{{{last},"keep":"me"}},{managed}}}"#),
            format!(r#"{{"name":"a","annotations":{{"keep":"me", {last} }},"uid":"u"}}"#),
            format!(r#"{{"name":"a","annotations":{{"a":"1",{last},"b":"2"}}}}"#),
            format!(r#"{{"name":"a","annotations":{{{last},"other":"x"}}}}"#),
            format!(r#"{{"n\u0061me":"a",{managed}}}"#),
            format!(r#"{{"name":"a","annotations":{{"k\u0065ep":"me",{last}}}}}"#),
            r#"{"name":"a","annotations":{}}"#.to_owned(),
        ];
        let transforms = [
            Transform::default(),
            Transform::none(),
            Transform {
                strip_managed_fields: false,
                strip_annotations: vec!["other".to_owned(), LAST_APPLIED_ANNOTATION.to_owned()],
            },
        ];
        for meta in &metas {
            let json = format!(r#"{{"kind":"ConfigMap","metadata":{meta},"data":{{"managedFields":"x"}}}}"#);
            for transform in &transforms {
                let cut = CachedObject::from_json(json.as_str())
                    .unwrap()
                    .transformed(transform)
                    .unwrap();
                let parsed = transform.apply(&json).unwrap().unwrap_or_else(|| json.clone());
                let cut_value: serde_json::Value = serde_json::from_str(cut.json())
                    .unwrap_or_else(|error| panic!("{error}: {} from {json}", cut.json()));
                let parsed_value: serde_json::Value = serde_json::from_str(&parsed).unwrap();
                assert_eq!(cut_value, parsed_value, "{json} with {transform:?}");
                assert_eq!(metadata_names(cut.json()), metadata_names(&parsed));
                assert_eq!(cut.name(), "a");
            }
        }
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
