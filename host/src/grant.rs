//! Grants: what the operator lets a plugin watch and read, and the one review
//! of a plugin's registration against it.
//!
//! A [`Grant`] names resources (`apiVersion/Kind` patterns) and namespaces (a
//! [`Scope`]). [`Grant::review`] decides, for a plugin's [`Registration`], which
//! subscriptions and indexes it gets and which are refused, and why: the runtime
//! starts what is accepted, `kinformer check` prints the same answer. Reads are
//! enforced through the scope every cache read passes ([`crate::indexer::Indexer::scoped`])
//! and every delta queue ([`crate::processor::ListenerOptions::scope`]).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use kube::api::GroupVersionKind;

use crate::index::{LABEL_INDEX_PREFIX, NAMESPACE_INDEX, OWNER_INDEX, check_definition};
use crate::object::CachedObject;
use crate::registration::{ControllerSpec, IndexSpec, Registration, Subscription};
use crate::selector::Selector;

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

/// Which resources and namespaces a plugin may watch and read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    resources: Option<Vec<ResourcePattern>>,
    namespaces: Scope,
}

impl Default for Grant {
    /// The default grant: every resource but `v1/Secret`, every namespace.
    fn default() -> Self {
        Self {
            resources: None,
            namespaces: Scope::all(),
        }
    }
}

impl Grant {
    /// A grant of exactly these resources (`apiVersion/Kind` patterns) in these
    /// namespaces (`*` for all).
    ///
    /// # Errors
    ///
    /// When a pattern is malformed.
    pub fn new<'a>(
        resources: impl IntoIterator<Item = &'a str>,
        namespaces: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, String> {
        Self::from_parts(Some(resources), Some(namespaces))
    }

    /// A grant of these resources (the default's when `None`) in these
    /// namespaces (all when `None`).
    ///
    /// # Errors
    ///
    /// When a pattern is malformed.
    pub fn from_parts<'a, R, N>(resources: Option<R>, namespaces: Option<N>) -> Result<Self, String>
    where
        R: IntoIterator<Item = &'a str>,
        N: IntoIterator<Item = &'a str>,
    {
        let resources = resources
            .map(|patterns| {
                patterns
                    .into_iter()
                    .map(ResourcePattern::parse)
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(Self {
            resources,
            namespaces: namespaces.map_or_else(Scope::all, namespaces_scope),
        })
    }

    /// True when the plugin may watch and read `gvk`.
    #[must_use]
    pub fn allows_resource(&self, gvk: &GroupVersionKind) -> bool {
        match &self.resources {
            None => !(gvk.group.is_empty() && gvk.version == "v1" && gvk.kind == "Secret"),
            Some(patterns) => patterns.iter().any(|pattern| pattern.matches(gvk)),
        }
    }

    /// The namespaces the plugin may see.
    #[must_use]
    pub fn namespaces(&self) -> &Scope {
        &self.namespaces
    }

    /// This grant narrowed to `scope` (the host's own namespace, say).
    #[must_use]
    pub fn within(mut self, scope: &Scope) -> Self {
        self.namespaces = self.namespaces.intersect(scope);
        self
    }
}

fn namespaces_scope<'a>(namespaces: impl IntoIterator<Item = &'a str>) -> Scope {
    let namespaces: Vec<&str> = namespaces.into_iter().collect();
    if namespaces.contains(&"*") {
        Scope::all()
    } else {
        Scope::only(namespaces)
    }
}

/// `apiVersion/Kind`, where either may be `*`; `*` alone is everything.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ResourcePattern {
    api_version: Option<String>,
    kind: Option<String>,
}

impl ResourcePattern {
    fn parse(pattern: &str) -> Result<Self, String> {
        let wild = |part: &str| (part != "*").then(|| part.to_owned());
        if pattern == "*" {
            return Ok(Self {
                api_version: None,
                kind: None,
            });
        }
        match pattern.rsplit_once('/') {
            Some((api_version, kind)) if !api_version.is_empty() && !kind.is_empty() => Ok(Self {
                api_version: wild(api_version),
                kind: wild(kind),
            }),
            _ => Err(format!(
                "resource {pattern:?}: want apiVersion/Kind (v1/Pod, apps/v1/Deployment, apps/v1/*) or *"
            )),
        }
    }

    fn matches(&self, gvk: &GroupVersionKind) -> bool {
        self.api_version.as_ref().is_none_or(|v| *v == gvk.api_version())
            && self.kind.as_ref().is_none_or(|kind| *kind == gvk.kind)
    }
}

/// What a grant makes of a registration: what the plugin gets, and what it is
/// refused and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Review {
    /// The subscriptions the plugin gets, in registration order.
    pub subscriptions: Vec<Subscription>,
    /// The indexes it gets, each on the cache of an accepted subscription.
    pub indexes: Vec<IndexSpec>,
    /// For a controller: its spec, without the owned and mapped resources it
    /// does not get; `None` when its primary resource is refused (it cannot
    /// run) or for a plugin that handles deltas.
    pub controller: Option<ControllerSpec>,
    /// What it asked for and does not get.
    pub refused: Vec<Refusal>,
}

/// A subscription or index a plugin asked for and does not get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What was asked for: `v1 Pod`, `v1 Pod in namespace a`, `index node on v1 Pod`.
    pub what: String,
    /// Why it is refused.
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Both may hold what the plugin registered: kinds, namespaces, names.
        let (what, reason) = (
            crate::text::sanitize(&self.what, 512),
            crate::text::sanitize(&self.reason, 512),
        );
        write!(f, "{what}: {reason}")
    }
}

impl Review {
    /// A controller's spec as far as the accepted subscriptions and indexes
    /// allow: owned and mapped resources must be accepted, a mapping's index
    /// must exist on the primary's cache.
    fn controller_spec(&mut self, spec: &ControllerSpec) -> Option<ControllerSpec> {
        let accepted = |gvk: &GroupVersionKind| self.subscriptions.iter().any(|subscription| subscription.gvk == *gvk);
        if !accepted(&spec.primary) {
            self.refused.push(Refusal {
                what: format!("controller of {}", resource(&spec.primary)),
                reason: "the primary resource is not granted".to_owned(),
            });
            return None;
        }
        let mut granted = spec.clone();
        granted.owns.retain(|gvk| accepted(gvk));
        let mut refused = Vec::new();
        granted.maps.retain(|mapping| {
            let what = format!("mapping of {} by index {}", resource(&mapping.gvk), mapping.index);
            let built_in = mapping.index == NAMESPACE_INDEX
                || mapping.index == OWNER_INDEX
                || mapping.index.starts_with(LABEL_INDEX_PREFIX);
            let declared = self
                .indexes
                .iter()
                .any(|index| index.gvk == spec.primary && index.name == mapping.index);
            let reason = if !accepted(&mapping.gvk) {
                "the resource is not granted"
            } else if !built_in && !declared {
                "no such index on the primary resource"
            } else if crate::index::FieldPath::parse(&mapping.field_path).is_err() {
                "invalid field path"
            } else {
                return true;
            };
            refused.push(Refusal {
                what,
                reason: reason.to_owned(),
            });
            false
        });
        self.refused.extend(refused);
        Some(granted)
    }
}

fn resource(gvk: &GroupVersionKind) -> String {
    format!("{} {}", gvk.api_version(), gvk.kind)
}

impl Grant {
    /// Reviews a registration: a subscription is accepted when its resource and
    /// namespace are granted and its label selector parses; an index when its
    /// definition is valid and its resource is among the accepted subscriptions.
    ///
    /// # Examples
    ///
    /// ```
    /// use kinformer::grant::Grant;
    /// use kinformer::registration::{Registration, Subscription};
    /// use kube::api::GroupVersionKind;
    ///
    /// let grant = Grant::new(["v1/Pod"], ["shop"])?;
    /// let subscription = |kind: &str| Subscription {
    ///     gvk: GroupVersionKind::gvk("", "v1", kind),
    ///     namespace: None,
    ///     label_selector: None,
    ///     deliver: true,
    /// };
    /// let registration = Registration {
    ///     name: "p".into(),
    ///     version: "1".into(),
    ///     subscriptions: vec![subscription("Pod"), subscription("Secret")],
    ///     indexes: Vec::new(),
    ///     controller: None,
    /// };
    /// let review = grant.review(&registration);
    /// assert_eq!(review.subscriptions, [subscription("Pod")]);
    /// assert_eq!(review.refused[0].to_string(), "v1 Secret: not granted");
    /// # Ok::<(), String>(())
    /// ```
    #[must_use]
    pub fn review(&self, registration: &Registration) -> Review {
        let mut review = Review::default();
        for subscription in &registration.subscriptions {
            let what = match &subscription.namespace {
                Some(namespace) => format!("{} in namespace {namespace}", resource(&subscription.gvk)),
                None => resource(&subscription.gvk),
            };
            let reason = if !self.allows_resource(&subscription.gvk) {
                Some("not granted".to_owned())
            } else if subscription
                .namespace
                .as_deref()
                .is_some_and(|ns| !self.namespaces.allows(ns))
            {
                Some("namespace not granted".to_owned())
            } else if let Some(Err(error)) = subscription.label_selector.as_deref().map(Selector::parse) {
                Some(error.to_string())
            } else {
                None
            };
            match reason {
                Some(reason) => review.refused.push(Refusal { what, reason }),
                None => review.subscriptions.push(subscription.clone()),
            }
        }
        for index in &registration.indexes {
            let what = format!("index {} on {}", index.name, resource(&index.gvk));
            let reason = if let Err(error) = check_definition(&index.name, &index.field_path) {
                Some(error.to_string())
            } else if !review
                .subscriptions
                .iter()
                .any(|subscription| subscription.gvk == index.gvk)
            {
                Some("the resource is not watched or not granted".to_owned())
            } else {
                None
            };
            match reason {
                Some(reason) => review.refused.push(Refusal { what, reason }),
                None => review.indexes.push(index.clone()),
            }
        }
        if let Some(spec) = &registration.controller {
            review.controller = review.controller_spec(spec);
        }
        review
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscription(api_version: &str, kind: &str, namespace: Option<&str>) -> Subscription {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Subscription {
            gvk: GroupVersionKind::gvk(group, version, kind),
            namespace: namespace.map(str::to_owned),
            label_selector: None,
            deliver: true,
        }
    }

    fn index(kind: &str, name: &str, path: &str) -> IndexSpec {
        IndexSpec {
            gvk: GroupVersionKind::gvk("", "v1", kind),
            name: name.to_owned(),
            field_path: path.to_owned(),
        }
    }

    fn registration(subscriptions: Vec<Subscription>, indexes: Vec<IndexSpec>) -> Registration {
        Registration {
            name: "p".into(),
            version: "1".into(),
            subscriptions,
            indexes,
            controller: None,
        }
    }

    fn refusals(review: &Review) -> Vec<String> {
        review.refused.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_default_grant_accepts_everything_but_secrets() {
        let asked = registration(
            vec![
                subscription("v1", "Pod", None),
                subscription("apps/v1", "Deployment", Some("shop")),
                subscription("v1", "Secret", None),
            ],
            vec![index("Pod", "node", "spec.nodeName"), index("Secret", "type", "type")],
        );
        let review = Grant::default().review(&asked);
        assert_eq!(review.subscriptions, asked.subscriptions[..2]);
        assert_eq!(review.indexes, asked.indexes[..1]);
        assert_eq!(
            refusals(&review),
            [
                "v1 Secret: not granted",
                "index type on v1 Secret: the resource is not watched or not granted"
            ]
        );
    }

    #[test]
    fn a_namespace_outside_the_grant_is_refused_and_the_rest_accepted() {
        let grant = Grant::new(["v1/*"], ["a"]).unwrap();
        let asked = registration(
            vec![
                subscription("v1", "Pod", Some("b")),
                subscription("v1", "ConfigMap", Some("a")),
                subscription("v1", "Service", None),
                subscription("apps/v1", "Deployment", None),
            ],
            Vec::new(),
        );
        let review = grant.review(&asked);
        assert_eq!(
            review.subscriptions,
            [asked.subscriptions[1].clone(), asked.subscriptions[2].clone()]
        );
        assert_eq!(
            refusals(&review),
            [
                "v1 Pod in namespace b: namespace not granted",
                "apps/v1 Deployment: not granted"
            ]
        );
    }

    #[test]
    fn a_bad_selector_or_index_definition_is_refused_with_its_reason() {
        let mut bad_selector = subscription("v1", "Pod", None);
        bad_selector.label_selector = Some("app in (".into());
        let asked = registration(
            vec![bad_selector, subscription("v1", "Node", None)],
            vec![
                index("Node", "namespace", "metadata.name"),
                index("Node", "zone", "metadata..labels"),
                index("Pod", "node", "spec.nodeName"),
                index("Node", "zone", "metadata.labels.zone"),
            ],
        );
        let review = Grant::default().review(&asked);
        assert_eq!(review.controller, None);
        assert_eq!(review.subscriptions, [asked.subscriptions[1].clone()]);
        assert_eq!(review.indexes, [asked.indexes[3].clone()]);
        let refused = refusals(&review);
        assert_eq!(refused.len(), 4);
        assert!(refused[0].starts_with("v1 Pod: "), "{refused:?}");
        assert!(refused[1].contains("taken by a built-in index"), "{refused:?}");
        assert!(refused[2].contains("invalid field path"), "{refused:?}");
        assert_eq!(
            refused[3],
            "index node on v1 Pod: the resource is not watched or not granted"
        );
    }

    #[test]
    fn a_controller_keeps_what_is_granted_and_cannot_run_without_its_primary() {
        use crate::registration::KeyMapping;
        let mapping = |kind: &str, index: &str| KeyMapping {
            gvk: GroupVersionKind::gvk("", "v1", kind),
            index: index.to_owned(),
            field_path: "metadata.name".to_owned(),
        };
        let spec = ControllerSpec {
            primary: GroupVersionKind::gvk("", "v1", "ConfigMap"),
            owns: vec![
                GroupVersionKind::gvk("", "v1", "Pod"),
                GroupVersionKind::gvk("", "v1", "Secret"),
            ],
            maps: vec![
                mapping("Pod", "config"),
                mapping("Pod", "missing"),
                mapping("Secret", "config"),
            ],
            resync: None,
        };
        let mut asked = registration(
            vec![
                subscription("v1", "ConfigMap", None),
                subscription("v1", "Pod", None),
                subscription("v1", "Secret", None),
            ],
            vec![index("ConfigMap", "config", "data.name")],
        );
        asked.controller = Some(spec.clone());
        let review = Grant::default().review(&asked);
        let granted = review.controller.clone().unwrap();
        assert_eq!(granted.owns, [GroupVersionKind::gvk("", "v1", "Pod")]);
        assert_eq!(granted.maps, [mapping("Pod", "config")]);
        assert_eq!(
            refusals(&review)[1..],
            [
                "mapping of v1 Pod by index missing: no such index on the primary resource",
                "mapping of v1 Secret by index config: the resource is not granted"
            ]
        );

        let pods_only = Grant::new(["v1/Pod"], ["*"]).unwrap().review(&asked);
        assert_eq!(pods_only.controller, None);
        assert!(
            refusals(&pods_only)
                .contains(&"controller of v1 ConfigMap: the primary resource is not granted".to_owned())
        );
    }

    #[test]
    fn scopes_intersect_and_keep_cluster_scoped_objects() {
        let a = Scope::only(["a", "b"]);
        assert!(a.allows("a") && !a.allows("c"));
        assert!(a.intersect(&Scope::all()) == a);
        assert!(!a.intersect(&Scope::only(["b", "c"])).allows("a"));
        assert!(a.contains_key("a/x") && !a.contains_key("c/x") && a.contains_key("node-1"));
        let narrowed = Grant::new(["*"], ["*"]).unwrap().within(&Scope::only(["z"]));
        assert!(narrowed.namespaces().allows("z") && !narrowed.namespaces().allows("a"));
    }
}
