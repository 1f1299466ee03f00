//! What a plugin asks for in `init`: the resources it subscribes to and the
//! indexes it wants. The grant decides what it gets ([`crate::grant::Grant::review`]).

use kube::api::GroupVersionKind;

/// What a plugin asked for in `init`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The plugin's own name.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The resources whose deltas (or cache) it wants.
    pub subscriptions: Vec<Subscription>,
    /// Extra indexes it queries.
    pub indexes: Vec<IndexSpec>,
}

/// A resource a plugin wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The resource type.
    pub gvk: GroupVersionKind,
    /// Only this namespace, when set.
    pub namespace: Option<String>,
    /// Only objects matching this label selector, when set.
    pub label_selector: Option<String>,
    /// False: keep it cached for queries, deliver no deltas.
    pub deliver: bool,
}

/// An index a plugin wants on a resource's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    /// The resource type.
    pub gvk: GroupVersionKind,
    /// The index name.
    pub name: String,
    /// The dotted field path whose values are indexed.
    pub field_path: String,
}
