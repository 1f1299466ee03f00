//! Deltas: what happened to one object, in client-go's terms.

use std::sync::Arc;

use kube::api::GroupVersionKind;

use crate::object::CachedObject;

pub use kinformer_contract::DeltaType;

/// One change to one object. Cheap to clone: the objects are shared.
#[derive(Debug, Clone)]
pub struct Delta {
    /// What happened.
    pub delta_type: DeltaType,
    /// The resource type of the object.
    pub gvk: Arc<GroupVersionKind>,
    /// The new state, or the last known state for [`DeltaType::Deleted`].
    pub object: Arc<CachedObject>,
    /// The previous state, for [`DeltaType::Updated`].
    pub old: Option<Arc<CachedObject>>,
    /// Part of the initial list a handler receives when it starts.
    pub initial_list: bool,
}

impl Delta {
    /// A delta that is not part of an initial list.
    #[must_use]
    pub fn new(delta_type: DeltaType, gvk: Arc<GroupVersionKind>, object: Arc<CachedObject>) -> Self {
        Self {
            delta_type,
            gvk,
            object,
            old: None,
            initial_list: false,
        }
    }

    /// An [`DeltaType::Updated`] delta from `old` to `object`.
    #[must_use]
    pub fn updated(gvk: Arc<GroupVersionKind>, old: Arc<CachedObject>, object: Arc<CachedObject>) -> Self {
        Self {
            old: Some(old),
            ..Self::new(DeltaType::Updated, gvk, object)
        }
    }

    /// The same delta, flagged as part of an initial list.
    #[must_use]
    pub fn in_initial_list(mut self) -> Self {
        self.initial_list = true;
        self
    }

    /// The object's cache key.
    #[must_use]
    pub fn key(&self) -> &str {
        self.object.key()
    }
}
