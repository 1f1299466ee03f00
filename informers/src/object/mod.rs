//! A Kubernetes object as the cache keeps it: the JSON plugins receive, plus
//! the metadata that keys, indexes and the watcher need.
//!
//! Objects are decoded straight from the API server's JSON without building a
//! tree of the whole object: only `metadata`'s identity fields, labels and owner
//! references are read, and kept as positions in the JSON rather than copies
//! (`meta`); the rest stays text. A [`Transform`] strips what plugins do not
//! need (by default `metadata.managedFields` and the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation) by cutting the
//! text, not by re-serializing the object (`transform`).

mod meta;
mod transform;

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;
use kube::core::DynamicResourceScope;
use serde::{Deserialize, Deserializer, Serialize, de};
use serde_json::value::RawValue;

use meta::{Owner, Parse, Span, Strippable};
pub(crate) use transform::Key;
pub use transform::{LAST_APPLIED_ANNOTATION, Transform};

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

/// An immutable object: its JSON and its metadata. Shared by the cache, the
/// deltas and every plugin queue through `Arc`, so it is stored once.
///
/// The metadata costs a few dozen bytes beside the JSON: the key is the one
/// allocation of its own (shared with the cache's indexes, see
/// [`CachedObject::shared_key`]); every other string is a position in the
/// JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedObject {
    /// `namespace/name`, or `name` when cluster-scoped.
    key: Arc<str>,
    /// Where the name starts in the key.
    name_at: u32,
    json: Box<str>,
    /// Metadata strings the JSON escapes, unescaped; almost always empty.
    unescaped: Box<str>,
    uid: Span,
    resource_version: Span,
    generation: Option<i64>,
    deletion_timestamp: Option<Span>,
    /// Sorted by key.
    labels: Box<[(Span, Span)]>,
    owners: Box<[Owner]>,
    /// Until a transform is applied: where its removals go.
    strip: Option<Box<Strippable>>,
}

impl CachedObject {
    /// Reads the metadata out of an object's JSON and keeps the JSON as it is.
    ///
    /// # Errors
    ///
    /// When the JSON is malformed or the object has no name.
    pub fn from_json(json: impl Into<Box<str>>) -> Result<Self, ObjectError> {
        Self::parsed(json.into(), false)
    }

    /// Like [`CachedObject::from_json`], for JSON known to be well-formed.
    fn from_valid_json(json: Box<str>) -> Result<Self, ObjectError> {
        Self::parsed(json, true)
    }

    fn parsed(json: Box<str>, valid: bool) -> Result<Self, ObjectError> {
        let parse = if valid {
            Parse::of_valid(&json)
        } else {
            Parse::new(&json)
        };
        let Parse { found, unescaped, .. } = parse.run().map_err(ObjectError::Json)?;
        let text = |span: Span| span.text(&json, &unescaped);
        let name = found
            .name
            .map(text)
            .filter(|name| !name.is_empty())
            .ok_or(ObjectError::NoName)?;
        let namespace = found.namespace.map(text).filter(|namespace| !namespace.is_empty());
        let (key, name_at): (Arc<str>, usize) = match namespace {
            Some(namespace) => ([namespace, "/", name].concat().into(), namespace.len() + 1),
            None => (name.into(), 0),
        };
        let strip = (found.strip != Strippable::default()).then(|| Box::new(found.strip));
        Ok(Self {
            key,
            name_at: name_at as u32,
            uid: found.uid.unwrap_or_default(),
            resource_version: found.resource_version.unwrap_or_default(),
            generation: found.generation,
            deletion_timestamp: found.deletion_timestamp,
            labels: found.labels.into_boxed_slice(),
            owners: found.owners.into_boxed_slice(),
            strip,
            unescaped: unescaped.into_boxed_str(),
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

    /// The object with `kind` and `apiVersion` written first when its JSON
    /// does not start with them: kube-apiserver leaves them out of the items
    /// of a built-in type's list (and writes them first everywhere else), and
    /// a plugin gets the same object whether it came from a list or a watch.
    ///
    /// # Errors
    ///
    /// When the JSON is malformed.
    pub fn typed(self, gvk: &kube::api::GroupVersionKind) -> Result<Self, ObjectError> {
        let Some(rest) = self.json.trim_start().strip_prefix('{') else {
            return Ok(self);
        };
        let first = rest.trim_start();
        if first.starts_with("\"kind\"") || first.starts_with("\"apiVersion\"") {
            return Ok(self);
        }
        let separator = if first.starts_with('}') { "" } else { "," };
        let quoted = |text: &str| serde_json::to_string(text).map_err(ObjectError::Json);
        let api_version = if gvk.group.is_empty() {
            gvk.version.clone()
        } else {
            format!("{}/{}", gvk.group, gvk.version)
        };
        let json = format!(
            "{{\"kind\":{},\"apiVersion\":{}{separator}{rest}",
            quoted(&gvk.kind)?,
            quoted(&api_version)?
        );
        Self::from_valid_json(json.into())
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
        let mut removals: Vec<Range<usize>> = strip
            .annotations
            .iter()
            .filter(|(key, _)| transform.strip_annotations.iter().any(|a| *a == self.json[key.clone()]))
            .map(|(_, removal)| removal.clone())
            .collect();
        // Two removals in one object may touch: strip those by parsing, as when a
        // name was escaped, and read the metadata of what is left.
        if strip.unknown || removals.len() > 1 {
            return match transform.apply(&self.json)? {
                Some(json) => Ok(Self {
                    strip: None,
                    ..Self::from_json(json)?
                }),
                None => Ok(self),
            };
        }
        if transform.strip_managed_fields {
            removals.extend(strip.managed_fields.clone());
        }
        removals.sort_by_key(|removal| removal.start);
        if !removals.is_empty() {
            self.json = transform::without(&self.json, &removals);
            self.shift(&removals);
        }
        Ok(self)
    }

    /// Moves every span past the `removals` made to the JSON.
    fn shift(&mut self, removals: &[Range<usize>]) {
        self.uid = self.uid.shifted(removals);
        self.resource_version = self.resource_version.shifted(removals);
        self.deletion_timestamp = self.deletion_timestamp.map(|span| span.shifted(removals));
        for (key, value) in &mut self.labels {
            *key = key.shifted(removals);
            *value = value.shifted(removals);
        }
        for owner in &mut self.owners {
            for span in [&mut owner.api_version, &mut owner.kind, &mut owner.name, &mut owner.uid] {
                *span = span.shifted(removals);
            }
        }
    }

    fn text(&self, span: Span) -> &str {
        span.text(&self.json, &self.unescaped)
    }

    /// The cache key: `namespace/name`, or `name` when cluster-scoped.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The cache key, shared: indexes hold it without a copy of their own.
    #[must_use]
    pub fn shared_key(&self) -> &Arc<str> {
        &self.key
    }

    /// The object with `key`, an equal key held elsewhere, as its own: one
    /// allocation serves both.
    #[must_use]
    pub fn with_shared_key(mut self, key: &Arc<str>) -> Self {
        debug_assert_eq!(*self.key, **key);
        if *self.key == **key {
            self.key = Arc::clone(key);
        }
        self
    }

    /// The namespace; `None` when cluster-scoped.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        let at = self.name_at as usize;
        (at > 0).then(|| &self.key[..at - 1])
    }

    /// The name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.key[self.name_at as usize..]
    }

    /// `metadata.uid`.
    #[must_use]
    pub fn uid(&self) -> &str {
        self.text(self.uid)
    }

    /// `metadata.resourceVersion`.
    #[must_use]
    pub fn resource_version(&self) -> &str {
        self.text(self.resource_version)
    }

    /// `metadata.generation`.
    #[must_use]
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    /// `metadata.deletionTimestamp`, as written.
    #[must_use]
    pub fn deletion_timestamp(&self) -> Option<&str> {
        self.deletion_timestamp.map(|span| self.text(span))
    }

    /// `metadata.labels`.
    #[must_use]
    pub fn labels(&self) -> Labels<'_> {
        Labels(self)
    }

    /// `metadata.ownerReferences`.
    pub fn owner_references(&self) -> impl Iterator<Item = OwnerReference<'_>> {
        self.owners.iter().map(|owner| OwnerReference {
            api_version: self.text(owner.api_version),
            kind: self.text(owner.kind),
            name: self.text(owner.name),
            uid: self.text(owner.uid),
            controller: owner.controller,
        })
    }

    /// The uids of `metadata.ownerReferences`.
    pub fn owner_uids(&self) -> impl Iterator<Item = &str> {
        self.owners.iter().map(|owner| self.text(owner.uid))
    }

    /// The object's JSON.
    #[must_use]
    pub fn json(&self) -> &str {
        &self.json
    }
}

/// An object's labels, sorted by key.
#[derive(Debug, Clone, Copy)]
pub struct Labels<'a>(&'a CachedObject);

impl<'a> Labels<'a> {
    /// The value of label `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&'a str> {
        let object = self.0;
        object
            .labels
            .binary_search_by(|(name, _)| object.text(*name).cmp(key))
            .ok()
            .map(|at| object.text(object.labels[at].1))
    }

    /// The labels, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + use<'a> {
        let object = self.0;
        object
            .labels
            .iter()
            .map(|(name, value)| (object.text(*name), object.text(*value)))
    }

    /// True without labels.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.labels.is_empty()
    }
}

impl crate::selector::Labels for Labels<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

/// One of an object's owner references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerReference<'a> {
    /// The owner's `apiVersion`.
    pub api_version: &'a str,
    /// The owner's kind.
    pub kind: &'a str,
    /// The owner's name, in the object's namespace.
    pub name: &'a str,
    /// The owner's uid.
    pub uid: &'a str,
    /// Whether the owner is the object's controller.
    pub controller: bool,
}

impl<'de> Deserialize<'de> for CachedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw: Box<RawValue> = Deserialize::deserialize(deserializer)?;
        Self::from_valid_json(raw.into()).map_err(de::Error::custom)
    }
}

impl Serialize for CachedObject {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(&self.json).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

/// An object as kube-rs's watcher decodes it: the object, and the one part of
/// an `ObjectMeta` the watcher reads (the resourceVersion it resumes from),
/// which is dropped once the event is handed on.
#[derive(Debug, Clone)]
pub struct WatchedObject {
    meta: ObjectMeta,
    /// The object.
    pub object: CachedObject,
}

impl<'de> Deserialize<'de> for WatchedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let object = CachedObject::deserialize(deserializer)?;
        let meta = ObjectMeta {
            resource_version: Some(object.resource_version().to_owned()),
            ..ObjectMeta::default()
        };
        Ok(Self { meta, object })
    }
}

/// Lets kube-rs's watcher and API list and watch any resource as objects the
/// cache keeps.
impl kube::Resource for WatchedObject {
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

    /// The resourceVersion only: changes here do not reach the object.
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

#[cfg(test)]
mod tests {
    use super::transform::Fields;
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
    fn a_decoded_object_is_read_up_to_its_metadata_and_a_text_to_its_end() {
        let metadata =
            r#"{"name":"web-0","namespace":"shop","uid":"u1","resourceVersion":"42","labels":{"app":"web"}}"#;
        let first = format!(r#"{{"kind":"Pod","metadata":{metadata},"spec":{{"containers":[{{"name":"a"}}]}}}}"#);
        let last = format!(r#"{{"kind":"Pod","spec":{{"containers":[]}},"metadata":{metadata}}}"#);
        for json in [&first, &last] {
            let decoded: CachedObject = serde_json::from_str(json).unwrap();
            assert_eq!(decoded, CachedObject::from_json(json.as_str()).unwrap());
            assert_eq!(decoded.key(), "shop/web-0");
            assert_eq!(decoded.resource_version(), "42");
            assert_eq!(decoded.labels().get("app"), Some("web"));
            assert_eq!(decoded.json(), json.as_str());
        }
        // A decoder delimits the value it hands over, so the end is checked there;
        // a text given as it is is checked to its end.
        let broken = format!(r#"{{"kind":"Pod","metadata":{metadata},"spec":nope}}"#);
        assert!(serde_json::from_str::<CachedObject>(&broken).is_err());
        assert!(matches!(
            CachedObject::from_json(broken.as_str()),
            Err(ObjectError::Json(_))
        ));
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

    /// Everything the object answers about its metadata, as owned text.
    fn identity(object: &CachedObject) -> serde_json::Value {
        json!({
            "key": object.key(),
            "name": object.name(),
            "namespace": object.namespace(),
            "uid": object.uid(),
            "resourceVersion": object.resource_version(),
            "generation": object.generation(),
            "deletionTimestamp": object.deletion_timestamp(),
            "labels": object.labels().iter().collect::<Vec<_>>(),
            "owners": object.owner_references().map(|o| (o.api_version, o.kind, o.name, o.uid, o.controller)).collect::<Vec<_>>(),
        })
    }

    #[test]
    fn metadata_read_before_and_after_the_cuts_is_the_same() {
        // managedFields and the annotation come before the fields kept, so
        // every position after them moves when they are removed.
        let json = r#"{"kind":"Pod","metadata":{"managedFields":[{"manager":"x","fieldsV1":{"f:metadata":{}}}],
            "annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"},
            "name":"web-0","namespace":"shop","uid":"u-1","resourceVersion":"42","generation":3,
            "deletionTimestamp":"2026-12-03T10:00:00Z","labels":{"tier":"front","app":"web"},
            "ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","uid":"rs-1","controller":true},
                               {"apiVersion":"v1","kind":"ConfigMap","name":"c","uid":"cm-1"}]},"spec":{}}"#;
        let object = CachedObject::from_json(json).unwrap();
        let before = identity(&object);
        let after = object.transformed(&Transform::default()).unwrap();
        assert!(after.json().len() < json.len(), "the removals were made");
        assert_eq!(identity(&after), before);
        assert_eq!(
            before,
            json!({
                "key": "shop/web-0", "name": "web-0", "namespace": "shop", "uid": "u-1",
                "resourceVersion": "42", "generation": 3, "deletionTimestamp": "2026-12-03T10:00:00Z",
                "labels": [["app", "web"], ["tier", "front"]],
                "owners": [["apps/v1", "ReplicaSet", "web-1", "rs-1", true], ["v1", "ConfigMap", "c", "cm-1", false]],
            })
        );
    }

    #[test]
    fn escaped_metadata_strings_are_read_unescaped() {
        let json = r#"{"metadata":{"name":"a-b","namespace":"n","labels":{"example.com\/team":"café","plain":"x"},
            "ownerReferences":[{"apiVersion":"apps\/v1","kind":"Deployment","name":"d","uid":"u"}]}}"#;
        let object = CachedObject::from_json(json).unwrap();
        assert_eq!(object.key(), "n/a-b");
        assert_eq!(object.labels().get("example.com/team"), Some("café"));
        assert_eq!(object.labels().get("plain"), Some("x"));
        assert_eq!(object.owner_references().next().unwrap().api_version, "apps/v1");
    }

    #[test]
    fn null_labels_and_owners_are_none_and_a_repeated_label_keeps_its_last_value() {
        let object =
            CachedObject::from_json(r#"{"metadata":{"name":"x","labels":null,"ownerReferences":null}}"#).unwrap();
        assert!(object.labels().is_empty());
        assert_eq!(object.owner_references().count(), 0);
        let object =
            CachedObject::from_json(r#"{"metadata":{"name":"x","labels":{"a":"1","b":"2","a":"3"}}}"#).unwrap();
        assert_eq!(object.labels().iter().collect::<Vec<_>>(), [("a", "3"), ("b", "2")]);
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
                let stripped = CachedObject::from_json(json.as_str())
                    .unwrap()
                    .transformed(transform)
                    .unwrap();
                let parsed = transform.apply(&json).unwrap().unwrap_or_else(|| json.clone());
                let stripped_value: serde_json::Value = serde_json::from_str(stripped.json())
                    .unwrap_or_else(|error| panic!("{error}: {} from {json}", stripped.json()));
                let parsed_value: serde_json::Value = serde_json::from_str(&parsed).unwrap();
                assert_eq!(stripped_value, parsed_value, "{json} with {transform:?}");
                assert_eq!(metadata_names(stripped.json()), metadata_names(&parsed));
                assert_eq!(stripped.name(), "a");
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
