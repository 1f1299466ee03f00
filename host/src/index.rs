//! Index definitions: the built-in index names, field paths, and the rules a
//! declared index follows.
//!
//! The [`crate::indexer`] maintains indexes; a plugin's registration declares
//! them ([`crate::registration::IndexSpec`]); the grant review checks them with
//! [`check_definition`], the same rule the cache applies when one is added.

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

    /// The scalar values at this path (strings, numbers and booleans as strings).
    #[must_use]
    pub fn values(&self, value: &serde_json::Value) -> Vec<String> {
        let mut found = Vec::new();
        collect(value, &self.segments, &mut found);
        found
    }
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.segments.join("."))
    }
}

fn collect(value: &serde_json::Value, path: &[String], found: &mut Vec<String>) {
    use serde_json::Value;
    match (value, path.split_first()) {
        (Value::Array(items), _) => items.iter().for_each(|item| collect(item, path, found)),
        (Value::Object(fields), Some((first, rest))) => {
            if let Some(field) = fields.get(first) {
                collect(field, rest, found);
            }
        }
        (Value::String(s), None) => found.push(s.clone()),
        (Value::Number(n), None) => found.push(n.to_string()),
        (Value::Bool(b), None) => found.push(b.to_string()),
        _ => {}
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
