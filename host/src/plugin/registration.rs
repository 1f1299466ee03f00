//! What a plugin asks for in `init`: the resources it subscribes to and the
//! indexes it wants. The grant decides what it gets ([`crate::grant::Grant::review`]).

use std::time::Duration;

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
    /// What a controller reconciles; `None` for a plugin that handles deltas.
    pub controller: Option<ControllerSpec>,
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

/// What a controller reconciles, and which changes lead to its keys. Its
/// primary, owned and mapped resources are among the registration's
/// subscriptions (the host adds them when the plugin did not).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ControllerSpec {
    /// The resource whose objects are the keys.
    pub primary: GroupVersionKind,
    /// Resources whose objects' controller owner is a primary object.
    pub owns: Vec<GroupVersionKind>,
    /// Other resources mapped to primary keys through an index.
    pub maps: Vec<KeyMapping>,
    /// How often every primary key is enqueued; `None` for never.
    pub resync: Option<Duration>,
}

/// A change to an object of `gvk` enqueues the primary objects of its namespace
/// whose index `index` holds a value found at `field_path` in the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMapping {
    /// The watched resource.
    pub gvk: GroupVersionKind,
    /// An index on the primary resource's cache.
    pub index: String,
    /// A dotted path in the watched object.
    pub field_path: String,
}
