//! What a plugin tells the host it watches.

use crate::bindings::kinformer::plugin0_1_0::types as wit;

/// A Kubernetes resource type: API group, version and kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Gvk {
    /// The API group; empty for the core group.
    pub group: String,
    /// The version within the group.
    pub version: String,
    /// The kind.
    pub kind: String,
}

impl Gvk {
    /// A resource type; `group` is empty for the core group (`Gvk::new("", "v1", "Pod")`).
    #[must_use]
    pub fn new(group: impl Into<String>, version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    /// The resource type of a `k8s-openapi` type (`Gvk::of::<Pod>()`).
    #[cfg(feature = "k8s")]
    #[must_use]
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        Self::new(K::GROUP, K::VERSION, K::KIND)
    }

    /// The `apiVersion` string: `group/version`, or `version` for the core group.
    #[must_use]
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub(crate) fn from_wit(gvk: wit::GroupVersionKind) -> Self {
        Self {
            group: gvk.group,
            version: gvk.version,
            kind: gvk.kind,
        }
    }

    pub(crate) fn to_wit(&self) -> wit::GroupVersionKind {
        wit::GroupVersionKind {
            group: self.group.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
        }
    }
}

/// A resource the plugin wants deltas for, optionally narrowed to a namespace and
/// a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    gvk: Gvk,
    namespace: Option<String>,
    label_selector: Option<String>,
    deliver: bool,
}

impl Subscription {
    /// Every object of this resource type the plugin is granted.
    #[must_use]
    pub fn new(gvk: Gvk) -> Self {
        Self {
            gvk,
            namespace: None,
            label_selector: None,
            deliver: true,
        }
    }

    /// Keep the resource cached for [`crate::cache`] queries, but deliver none of
    /// its deltas to [`crate::Handler::handle`].
    #[must_use]
    pub fn cache_only(mut self) -> Self {
        self.deliver = false;
        self
    }

    /// Only objects in this namespace.
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only objects matching this label selector (`app=web,tier in (a,b)`).
    #[must_use]
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }
}

impl From<Gvk> for Subscription {
    fn from(gvk: Gvk) -> Self {
        Self::new(gvk)
    }
}

/// An index the plugin queries with [`crate::cache::by_index`]: the value of a
/// field, addressed by a dotted path such as `spec.nodeName`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexSpec {
    /// The resource type whose cache gets the index.
    pub gvk: Gvk,
    /// The index name.
    pub name: String,
    /// The dotted path to the indexed field.
    pub field_path: String,
}

/// The plugin's answer to `init`: its name and version, what it watches and the
/// indexes it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    name: String,
    version: String,
    subscriptions: Vec<Subscription>,
    indexes: Vec<IndexSpec>,
}

impl Registration {
    /// A registration watching nothing yet.
    #[must_use]
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            subscriptions: Vec::new(),
            indexes: Vec::new(),
        }
    }

    /// Also watch this resource ([`Gvk`] or [`Subscription`]).
    #[must_use]
    pub fn watch(mut self, subscription: impl Into<Subscription>) -> Self {
        self.subscriptions.push(subscription.into());
        self
    }

    /// Keep this resource cached for [`crate::cache`] queries without receiving its
    /// deltas.
    #[must_use]
    pub fn cache(self, gvk: Gvk) -> Self {
        self.watch(Subscription::new(gvk).cache_only())
    }

    /// Also maintain the index `name` over `field_path` of `gvk`'s cache. The
    /// built-in indexes `namespace`, `owner` and `label:<key>` need no declaration.
    #[must_use]
    pub fn index(mut self, gvk: Gvk, name: impl Into<String>, field_path: impl Into<String>) -> Self {
        self.indexes.push(IndexSpec {
            gvk,
            name: name.into(),
            field_path: field_path.into(),
        });
        self
    }

    #[doc(hidden)]
    #[must_use]
    pub fn into_wit(self) -> wit::Registration {
        wit::Registration {
            name: self.name,
            version: self.version,
            subscriptions: self
                .subscriptions
                .into_iter()
                .map(|subscription| wit::Subscription {
                    gvk: subscription.gvk.to_wit(),
                    namespace: subscription.namespace,
                    label_selector: subscription.label_selector,
                    deliver: subscription.deliver,
                })
                .collect(),
            indexes: self
                .indexes
                .into_iter()
                .map(|index| wit::IndexSpec {
                    gvk: index.gvk.to_wit(),
                    name: index.name,
                    field_path: index.field_path,
                })
                .collect(),
        }
    }
}
