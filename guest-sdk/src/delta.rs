//! One change to one object, as the host delivers it.

use serde::de::DeserializeOwned;

use crate::Gvk;
use crate::bindings::kinformer::plugin::types as wit;

/// What happened to an object, in client-go's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeltaType {
    /// The object appeared: created, or seen for the first time.
    Added,
    /// The object changed; [`Delta::old_json`] holds the previous state.
    Updated,
    /// The object is gone; the delta carries its last known state.
    Deleted,
    /// The object was present in a relist of its resource.
    Replaced,
    /// A periodic resync of an unchanged object.
    Sync,
}

/// One change to one object.
///
/// The object is kept as the JSON the host sent; [`Delta::object`] parses it into
/// any serde type (a `k8s-openapi` type with the `k8s` feature, or your own struct
/// holding just the fields you need, which is cheaper), and [`Delta::value`] into
/// a `serde_json::Value`.
#[derive(Clone, Debug)]
pub struct Delta {
    delta_type: DeltaType,
    gvk: Gvk,
    key: String,
    resource_version: String,
    object: String,
    old_object: Option<String>,
    initial_list: bool,
}

impl Delta {
    #[doc(hidden)]
    #[must_use]
    pub fn from_wit(delta: wit::Delta) -> Self {
        Self {
            delta_type: match delta.type_ {
                wit::DeltaType::Added => DeltaType::Added,
                wit::DeltaType::Updated => DeltaType::Updated,
                wit::DeltaType::Deleted => DeltaType::Deleted,
                wit::DeltaType::Replaced => DeltaType::Replaced,
                wit::DeltaType::Sync => DeltaType::Sync,
            },
            gvk: Gvk::from_wit(delta.gvk),
            key: delta.key,
            resource_version: delta.resource_version,
            object: delta.object,
            old_object: delta.old_object,
            initial_list: delta.initial_list,
        }
    }

    /// What happened.
    #[must_use]
    pub fn delta_type(&self) -> DeltaType {
        self.delta_type
    }

    /// The resource type of the object.
    #[must_use]
    pub fn gvk(&self) -> &Gvk {
        &self.gvk
    }

    /// The cache key: `namespace/name`, or `name` for cluster-scoped objects.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The object's namespace; empty for cluster-scoped objects.
    #[must_use]
    pub fn namespace(&self) -> &str {
        self.key.split_once('/').map_or("", |(namespace, _)| namespace)
    }

    /// The object's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.key.split_once('/').map_or(&self.key, |(_, name)| name)
    }

    /// The object's `metadata.resourceVersion` in this state.
    #[must_use]
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// True for the initial list a plugin receives when it starts, before live
    /// changes.
    #[must_use]
    pub fn is_initial_list(&self) -> bool {
        self.initial_list
    }

    /// The object as JSON: the new state, or the last known state when deleted.
    #[must_use]
    pub fn json(&self) -> &str {
        &self.object
    }

    /// The previous state as JSON, for [`DeltaType::Updated`] only.
    #[must_use]
    pub fn old_json(&self) -> Option<&str> {
        self.old_object.as_deref()
    }

    /// Parses the object into `T`.
    ///
    /// # Errors
    ///
    /// When the JSON does not fit `T`.
    pub fn object<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(&self.object)
    }

    /// Parses the previous state into `T`, for [`DeltaType::Updated`] only.
    ///
    /// # Errors
    ///
    /// When the JSON does not fit `T`.
    pub fn old_object<T: DeserializeOwned>(&self) -> serde_json::Result<Option<T>> {
        self.old_object.as_deref().map(serde_json::from_str).transpose()
    }

    /// Parses the object into a `serde_json::Value`.
    ///
    /// # Errors
    ///
    /// When the host sent malformed JSON, which it never does.
    pub fn value(&self) -> serde_json::Result<serde_json::Value> {
        self.object()
    }
}
