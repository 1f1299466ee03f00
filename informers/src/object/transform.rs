//! What an informer strips from objects before caching them, and stripping
//! it by parsing: the way taken when the metadata parse could not say where
//! the removals go (an escaped field name, or two removals that touch).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::ObjectError;

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

    /// The JSON with the stripped fields removed; `None` when nothing is stripped.
    pub(super) fn apply(&self, json: &str) -> Result<Option<String>, ObjectError> {
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
pub(super) struct Fields<'a>(pub(super) Vec<(Key<'a>, &'a RawValue)>);

/// A field name, borrowed when it has no escapes.
pub(crate) struct Key<'a>(pub(super) Cow<'a, str>);

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

/// `json` without the byte ranges `removals` (sorted by start; they may touch or
/// overlap), in a buffer of its own size. Cutting in place would save a copy
/// but leave each object in a buffer sized for the text as served, whose
/// freed tail the allocator keeps: 1.8× the resident memory per object
/// instead of 1.15× (benchmark row 2).
pub(super) fn without(json: &str, removals: &[Range<usize>]) -> Box<str> {
    let mut out = String::with_capacity(json.len());
    let mut from = 0;
    for removal in removals {
        out.push_str(&json[from..removal.start.max(from)]);
        from = from.max(removal.end);
    }
    out.push_str(&json[from..]);
    out.into_boxed_str()
}

#[cfg(test)]
mod tests {
    use super::without;

    #[test]
    fn cuts_that_touch_or_overlap_remove_their_union() {
        let text = "0123456789";
        assert_eq!(&*without(text, &[1..3, 5..7]), "034789");
        assert_eq!(&*without(text, &[1..4, 4..6, 5..8]), "089");
        assert_eq!(&*without(text, &[]), text);
    }
}
