//! The caches plugins read, by resource type.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::api::GroupVersionKind;

use crate::Recover as _;
use crate::indexer::Indexer;

/// The read handles of every cache the host keeps, by resource type; clone it
/// freely. Plugins' `cache` queries are answered from here.
#[derive(Debug, Clone, Default)]
pub struct Caches {
    by_gvk: Arc<RwLock<HashMap<GroupVersionKind, Indexer>>>,
}

impl Caches {
    /// An empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `indexer` the cache of `gvk`, replacing any previous one.
    pub fn insert(&self, gvk: GroupVersionKind, indexer: Indexer) {
        self.by_gvk.write().recover().insert(gvk, indexer);
    }

    /// Forgets the cache of `gvk`.
    pub fn remove(&self, gvk: &GroupVersionKind) -> Option<Indexer> {
        self.by_gvk.write().recover().remove(gvk)
    }

    /// The cache of `gvk`, if one is kept.
    #[must_use]
    pub fn get(&self, gvk: &GroupVersionKind) -> Option<Indexer> {
        self.by_gvk.read().recover().get(gvk).cloned()
    }
}
