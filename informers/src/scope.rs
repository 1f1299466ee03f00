//! Scopes: the namespaces a reader may see, the one check that every cache
//! read ([`crate::indexer::Indexer::scoped`]) and every delta queue
//! ([`crate::processor::ListenerOptions::scope`]) passes.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::object::CachedObject;

/// The namespaces a reader may see. Cluster-scoped objects (no namespace) are in
/// every scope: a scope restricts namespaced objects only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope(Option<Arc<BTreeSet<String>>>);

impl Scope {
    /// Every namespace.
    #[must_use]
    pub fn all() -> Self {
        Self(None)
    }

    /// Only these namespaces.
    #[must_use]
    pub fn only(namespaces: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self(Some(Arc::new(namespaces.into_iter().map(Into::into).collect())))
    }

    /// True when every namespace is in scope.
    #[must_use]
    pub fn is_all(&self) -> bool {
        self.0.is_none()
    }

    /// The namespaces in scope, `None` for all.
    #[must_use]
    pub fn namespaces(&self) -> Option<&BTreeSet<String>> {
        self.0.as_deref()
    }

    /// True when `namespace` is in scope.
    #[must_use]
    pub fn allows(&self, namespace: &str) -> bool {
        self.0.as_ref().is_none_or(|namespaces| namespaces.contains(namespace))
    }

    /// True when the object is in scope.
    #[must_use]
    pub fn contains(&self, object: &CachedObject) -> bool {
        object.namespace().is_none_or(|namespace| self.allows(namespace))
    }

    /// True when the object with this cache key (`namespace/name`, or `name` for
    /// cluster-scoped objects) is in scope.
    #[must_use]
    pub fn contains_key(&self, key: &str) -> bool {
        key.split_once('/').is_none_or(|(namespace, _)| self.allows(namespace))
    }

    /// These namespaces, or every one when `*` is among them.
    #[must_use]
    pub fn from_names<'a>(namespaces: impl IntoIterator<Item = &'a str>) -> Self {
        let namespaces: Vec<&str> = namespaces.into_iter().collect();
        if namespaces.contains(&"*") {
            Self::all()
        } else {
            Self::only(namespaces)
        }
    }

    /// The narrower of the two scopes (their intersection).
    #[must_use]
    pub fn intersect(&self, other: &Self) -> Self {
        match (&self.0, &other.0) {
            (None, _) => other.clone(),
            (_, None) => self.clone(),
            (Some(a), Some(b)) => Self(Some(Arc::new(a.intersection(b).cloned().collect()))),
        }
    }
}
