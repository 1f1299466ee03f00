//! Index definitions: the built-in index names, field paths, and the rules a
//! declared index follows.
//!
//! The [`crate::indexer`] maintains indexes; a plugin's registration declares
//! them (the host's `IndexSpec`); the grant review checks them with
//! [`check_definition`], the same rule the cache applies when one is added.

use serde::de;

use crate::object::Key;

/// The built-in index of objects by namespace.
pub const NAMESPACE_INDEX: &str = "namespace";
/// The built-in index of objects by the uids of their owners.
pub const OWNER_INDEX: &str = "owner";
/// The prefix of the built-in label indexes: `label:app` indexes label `app`.
pub const LABEL_INDEX_PREFIX: &str = "label:";

/// The longest index name accepted.
pub const MAX_INDEX_NAME_LEN: usize = 253;

/// Why an index could not be added or queried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// No index of that name exists.
    #[error("no index named {0:?}")]
    Unknown(String),
    /// The name is empty, too long, or taken by a built-in index.
    #[error("invalid index name {0:?}: {1}")]
    InvalidName(String, &'static str),
    /// An index of that name exists with another definition.
    #[error("index {0:?} already exists with another field path")]
    Conflict(String),
    /// The field path is malformed.
    #[error("invalid field path {0:?}: want dotted field names such as spec.nodeName")]
    InvalidFieldPath(String),
}

/// A dotted path into an object's JSON (`spec.nodeName`); lists along the way are
/// entered element by element, so `spec.containers.image` yields every image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    segments: Vec<String>,
}

impl FieldPath {
    /// Parses `a.b.c`.
    ///
    /// # Errors
    ///
    /// When a segment is empty, or the path is over 256 bytes or 16 segments.
    pub fn parse(path: &str) -> Result<Self, IndexError> {
        let segments: Vec<String> = path.split('.').map(str::to_owned).collect();
        if path.len() > 256 || segments.len() > 16 || segments.iter().any(String::is_empty) {
            return Err(IndexError::InvalidFieldPath(path.chars().take(100).collect()));
        }
        Ok(Self { segments })
    }

    /// The scalar values at this path in an object's JSON (strings, numbers and
    /// booleans as strings); none when the JSON is malformed up to them.
    ///
    /// Only the fields along the path are decoded: everything else is skipped
    /// without being built. Unless a list lies along the path, the scan ends
    /// with the path's field, as an object's text holds each field once: an
    /// index on `spec.nodeName` does not read a pod's `status`. The text after
    /// that field is not checked, so `json` must be well-formed (as every
    /// object the cache holds is).
    #[must_use]
    pub fn values_in(&self, json: &str) -> Vec<String> {
        let mut found = Vec::new();
        let mut ended = false;
        let mut deserializer = serde_json::Deserializer::from_str(json);
        let read = de::DeserializeSeed::deserialize(
            Along {
                path: &self.segments,
                found: &mut found,
                ended: &mut ended,
                outside_lists: true,
            },
            &mut deserializer,
        );
        if read.is_err() && !ended {
            found.clear();
        }
        found
    }
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.segments.join("."))
    }
}

/// Walks a JSON value along `path`, collecting the scalars at its end; lists
/// are entered element by element.
struct Along<'p> {
    path: &'p [String],
    found: &'p mut Vec<String>,
    /// Set when the walk stopped early: nothing after it can hold a value.
    ended: &'p mut bool,
    /// No list encloses this value, so once its field on the path is read,
    /// the rest of the text is of no interest.
    outside_lists: bool,
}

impl<'de> de::DeserializeSeed<'de> for Along<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> de::Visitor<'de> for Along<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match self.path.split_first() {
                Some((first, rest)) if key.as_str() == first => {
                    map.next_value_seed(Along {
                        path: rest,
                        found: &mut *self.found,
                        ended: &mut *self.ended,
                        outside_lists: self.outside_lists,
                    })?;
                    if self.outside_lists {
                        *self.ended = true;
                        return Err(de::Error::custom("the walk ended with the path's field"));
                    }
                }
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while items
            .next_element_seed(Along {
                path: self.path,
                found: &mut *self.found,
                ended: &mut *self.ended,
                outside_lists: false,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.scalar(|| v.to_owned());
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(|| v.to_string());
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(|| v.to_string());
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(|| v.to_string());
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        // As serde_json prints the number it read.
        self.scalar(|| serde_json::Number::from_f64(v).map_or_else(|| v.to_string(), |n| n.to_string()));
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

impl Along<'_> {
    /// A scalar counts only at the end of the path.
    fn scalar(self, value: impl FnOnce() -> String) {
        if self.path.is_empty() {
            self.found.push(value());
        }
    }
}

/// Checks a declared index: a name that is 1 to 253 bytes and not a built-in
/// index's, and a well-formed field path, which it returns parsed.
///
/// # Errors
///
/// [`IndexError::InvalidName`] or [`IndexError::InvalidFieldPath`].
pub fn check_definition(name: &str, field_path: &str) -> Result<FieldPath, IndexError> {
    let invalid = |why| Err(IndexError::InvalidName(name.chars().take(100).collect(), why));
    if name.is_empty() || name.len() > MAX_INDEX_NAME_LEN {
        return invalid("must be 1 to 253 bytes");
    }
    if name == NAMESPACE_INDEX || name == OWNER_INDEX || name.starts_with(LABEL_INDEX_PREFIX) {
        return invalid("taken by a built-in index");
    }
    FieldPath::parse(field_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(path: &str, json: &str) -> Vec<String> {
        FieldPath::parse(path).unwrap().values_in(json)
    }

    #[test]
    fn a_path_finds_the_scalar_at_its_end() {
        let pod =
            r#"{"metadata":{"name":"a"},"spec":{"nodeName":"node-1","priority":7,"hostNetwork":true,"overhead":1.5}}"#;
        assert_eq!(values("spec.nodeName", pod), ["node-1"]);
        assert_eq!(values("spec.priority", pod), ["7"]);
        assert_eq!(values("spec.hostNetwork", pod), ["true"]);
        assert_eq!(values("spec.overhead", pod), ["1.5"]);
        assert!(values("spec.missing", pod).is_empty());
        assert!(
            values("spec", pod).is_empty(),
            "an object at the end of the path is no scalar"
        );
    }

    #[test]
    fn lists_along_the_path_are_entered_element_by_element() {
        let pod = r#"{"spec":{"containers":[{"image":"a:1"},{"name":"x"},{"image":"b:2"}],"tags":["x","y",null]}}"#;
        assert_eq!(values("spec.containers.image", pod), ["a:1", "b:2"]);
        assert_eq!(values("spec.tags", pod), ["x", "y"]);
    }

    #[test]
    fn escaped_names_and_values_are_decoded() {
        let json = r#"{"sp\u0065c":{"node\"Name":"n\u00e9ud"}}"#;
        assert_eq!(values("spec.node\"Name", json), ["n\u{e9}ud"]);
    }

    #[test]
    fn malformed_json_has_no_values() {
        assert!(values("spec.nodeName", r#"{"spec":{"nodeName" "n"}}"#).is_empty());
        assert!(values("spec.nodeName", r#"{"spec":{"image":,"nodeName":"n"}}"#).is_empty());
        assert!(values("spec.nodeName", "not json").is_empty());
    }

    #[test]
    fn the_scan_ends_with_the_paths_field_unless_a_list_lies_along_it() {
        // Text after the field is never read, so a malformed tail goes unseen.
        assert_eq!(
            values("spec.nodeName", r#"{"spec":{"nodeName":"n","x":nope},"status":nope"#),
            ["n"]
        );
        assert_eq!(values("spec", r#"{"spec":"s","status":nope"#), ["s"]);
        // In a list, every element is read, and the text after the list is not.
        let pod = r#"{"spec":{"containers":[{"image":"a","x":1},{"image":"b"}],"status":nope"#;
        assert_eq!(values("spec.containers.image", pod), ["a", "b"]);
        assert!(
            values(
                "spec.containers.image",
                r#"{"spec":{"containers":[{"image":"a"},nope]}}"#
            )
            .is_empty()
        );
    }
}
