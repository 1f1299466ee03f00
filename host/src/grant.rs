//! Grants: what the operator lets a plugin watch, read and write, and the one
//! review of a plugin's registration against it.
//!
//! A [`Grant`] names resources (`apiVersion/Kind` patterns) and namespaces (a
//! [`Scope`]). [`Grant::review`] decides, for a plugin's [`Registration`], which
//! subscriptions and indexes it gets and which are refused, and why: the runtime
//! starts what is accepted, `kinformer check` prints the same answer. Reads are
//! enforced through the scope every cache read passes ([`crate::indexer::Indexer::scoped`])
//! and every delta queue ([`crate::processor::ListenerOptions::scope`]).
//!
//! Writes are granted apart, by [`WriteRule`]s: verbs on resources (and
//! subresources) in namespaces. [`Grant::allows_write`] is the one check every
//! write passes before it is sent ([`crate::cluster::Writer`]). The default
//! grant writes nothing.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use kube::api::GroupVersionKind;
use serde::{Deserialize, Serialize};

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

/// Which resources and namespaces a plugin may watch and read, and what it
/// may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    resources: Option<Vec<ResourcePattern>>,
    namespaces: Scope,
    writes: Vec<WriteRule>,
}

impl Default for Grant {
    /// The default grant: every resource but `v1/Secret`, every namespace, no
    /// writes.
    fn default() -> Self {
        Self {
            resources: None,
            namespaces: Scope::all(),
            writes: Vec::new(),
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
                    .map(|pattern| {
                        let parsed = ResourcePattern::parse(pattern)?;
                        match parsed.subresource {
                            None => Ok(parsed),
                            Some(_) => Err(format!("resource {pattern:?}: reads name resources, not subresources")),
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(Self {
            resources,
            namespaces: namespaces.map_or_else(Scope::all, Scope::from_names),
            writes: Vec::new(),
        })
    }

    /// This grant with these write rules (in place of any it had).
    #[must_use]
    pub fn with_writes(mut self, rules: impl IntoIterator<Item = WriteRule>) -> Self {
        self.writes = rules.into_iter().collect();
        self
    }

    /// The write rules; none in the default grant.
    #[must_use]
    pub fn writes(&self) -> &[WriteRule] {
        &self.writes
    }

    /// True when some rule lets the plugin `verb` the `subresource` (the object
    /// itself when `None`) of a `gvk` object in `namespace` (`None` for a
    /// cluster-scoped object, which needs a rule for every namespace).
    ///
    /// # Examples
    ///
    /// ```
    /// use kinformer::grant::{Grant, Scope, Verb, WriteRule};
    /// use kube::api::GroupVersionKind;
    ///
    /// let rule = WriteRule::new([Verb::Patch], ["apps/v1/Deployment/scale"], Scope::only(["shop"]))?;
    /// let grant = Grant::default().with_writes([rule]);
    /// let deployments = GroupVersionKind::gvk("apps", "v1", "Deployment");
    /// assert!(grant.allows_write(Verb::Patch, &deployments, Some("scale"), Some("shop")));
    /// assert!(!grant.allows_write(Verb::Patch, &deployments, None, Some("shop")));
    /// assert!(!grant.allows_write(Verb::Update, &deployments, Some("scale"), Some("shop")));
    /// assert!(!grant.allows_write(Verb::Patch, &deployments, Some("scale"), Some("payments")));
    /// # Ok::<(), String>(())
    /// ```
    #[must_use]
    pub fn allows_write(
        &self,
        verb: Verb,
        gvk: &GroupVersionKind,
        subresource: Option<&str>,
        namespace: Option<&str>,
    ) -> bool {
        self.writes
            .iter()
            .any(|rule| rule.allows(verb, gvk, subresource, namespace))
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

    /// This grant narrowed to `scope` (the host's own namespace, say): its reads
    /// and its writes.
    #[must_use]
    pub fn within(mut self, scope: &Scope) -> Self {
        self.namespaces = self.namespaces.intersect(scope);
        for rule in &mut self.writes {
            rule.namespaces = rule.namespaces.intersect(scope);
        }
        self
    }
}

/// How a plugin's writes reach the cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteMode {
    /// Writes are made.
    #[default]
    Live,
    /// Every write is sent with `dryRun=All`: the API server validates it and
    /// answers as if it were made, and persists nothing.
    DryRun,
}

/// What a write does, as the API server's RBAC names it (`apply` is a `patch`
/// there; it is granted apart here, as server-side apply takes over fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verb {
    /// Create an object (events are created too).
    Create,
    /// Replace an object or a subresource.
    Update,
    /// Patch an object or a subresource (JSON merge patch or JSON patch).
    Patch,
    /// Server-side apply to an object or a subresource.
    Apply,
    /// Delete an object.
    Delete,
}

impl Verb {
    /// The verb as written in a manifest: `create`, `update`, ...
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Apply => "apply",
            Self::Delete => "delete",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule of a write grant: these verbs on these resources in these
/// namespaces.
///
/// A resource pattern is `apiVersion/Kind[/subresource]`, `*` standing for any
/// apiVersion or any kind. A pattern without a subresource grants the object
/// only, not its subresources (`status`, `scale`): those are granted by name.
/// A cluster-scoped object is written only under a rule for every namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRule {
    verbs: BTreeSet<Verb>,
    resources: Vec<ResourcePattern>,
    namespaces: Scope,
}

impl WriteRule {
    /// A rule granting `verbs` on `resources` in `namespaces`.
    ///
    /// # Errors
    ///
    /// When a pattern is malformed, or there is no verb or no resource.
    pub fn new<'a>(
        verbs: impl IntoIterator<Item = Verb>,
        resources: impl IntoIterator<Item = &'a str>,
        namespaces: Scope,
    ) -> Result<Self, String> {
        let verbs: BTreeSet<Verb> = verbs.into_iter().collect();
        let resources = resources
            .into_iter()
            .map(ResourcePattern::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if verbs.is_empty() {
            return Err("a write rule needs at least one verb".to_owned());
        }
        if resources.is_empty() {
            return Err("a write rule needs at least one resource".to_owned());
        }
        Ok(Self {
            verbs,
            resources,
            namespaces,
        })
    }

    /// The verbs it grants, in order.
    pub fn verbs(&self) -> impl Iterator<Item = Verb> + '_ {
        self.verbs.iter().copied()
    }

    /// The namespaces it grants.
    #[must_use]
    pub fn namespaces(&self) -> &Scope {
        &self.namespaces
    }

    /// The resources it grants.
    #[must_use]
    pub fn resources(&self) -> &[ResourcePattern] {
        &self.resources
    }

    fn allows(&self, verb: Verb, gvk: &GroupVersionKind, subresource: Option<&str>, namespace: Option<&str>) -> bool {
        self.verbs.contains(&verb)
            && namespace.map_or(self.namespaces.is_all(), |namespace| self.namespaces.allows(namespace))
            && self
                .resources
                .iter()
                .any(|pattern| pattern.matches(gvk) && pattern.subresource.as_deref() == subresource)
    }
}

impl fmt::Display for WriteRule {
    /// `create, patch v1/ConfigMap, apps/v1/Deployment/scale in namespaces a, b`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verbs: Vec<&str> = self.verbs.iter().map(|verb| verb.as_str()).collect();
        let resources: Vec<String> = self.resources.iter().map(ToString::to_string).collect();
        write!(f, "{} {}", verbs.join(", "), resources.join(", "))?;
        match self.namespaces.namespaces() {
            None => write!(f, " in every namespace"),
            Some(namespaces) if namespaces.is_empty() => write!(f, " in no namespace"),
            Some(namespaces) => {
                let namespaces: Vec<&str> = namespaces.iter().map(String::as_str).collect();
                write!(f, " in namespaces {}", namespaces.join(", "))
            }
        }
    }
}

/// `apiVersion/Kind[/subresource]`, where apiVersion or Kind may be `*`; `*`
/// alone is every resource. Kinds begin with a capital letter and
/// subresources with a lowercase one, which tells `v1/Pod/status` (a core
/// subresource) from `apps/v1/Deployment` (a named group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePattern {
    api_version: Option<String>,
    kind: Option<String>,
    subresource: Option<String>,
}

impl ResourcePattern {
    fn parse(pattern: &str) -> Result<Self, String> {
        let wild = |part: &str| (part != "*").then(|| part.to_owned());
        let malformed = || {
            format!(
                "resource {pattern:?}: want apiVersion/Kind (v1/Pod, apps/v1/Deployment, apps/v1/*) or *, \
                 and for writes apiVersion/Kind/subresource (apps/v1/Deployment/scale)"
            )
        };
        let (resource, subresource) = match pattern.rsplit_once('/') {
            Some((rest, last)) if last.starts_with(|c: char| c.is_ascii_lowercase()) => (rest, Some(last)),
            _ => (pattern, None),
        };
        if subresource.is_some_and(|sub| !sub.chars().all(|c| c.is_ascii_lowercase())) {
            return Err(malformed());
        }
        let subresource = subresource.map(str::to_owned);
        if resource == "*" {
            return Ok(Self {
                api_version: None,
                kind: None,
                subresource,
            });
        }
        match resource.rsplit_once('/') {
            Some((api_version, kind))
                if !api_version.is_empty()
                    && api_version.matches('/').count() <= 1
                    && (kind == "*" || kind.starts_with(|c: char| c.is_ascii_uppercase())) =>
            {
                Ok(Self {
                    api_version: wild(api_version),
                    kind: wild(kind),
                    subresource,
                })
            }
            _ => Err(malformed()),
        }
    }

    /// Its apiVersion; `None` for any.
    #[must_use]
    pub fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }

    /// Its kind; `None` for any.
    #[must_use]
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// Its subresource; `None` for the object itself.
    #[must_use]
    pub fn subresource(&self) -> Option<&str> {
        self.subresource.as_deref()
    }

    fn matches(&self, gvk: &GroupVersionKind) -> bool {
        self.api_version.as_ref().is_none_or(|v| *v == gvk.api_version())
            && self.kind.as_ref().is_none_or(|kind| *kind == gvk.kind)
    }
}

impl fmt::Display for ResourcePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.api_version, &self.kind) {
            (None, None) => f.write_str("*")?,
            (api_version, kind) => write!(
                f,
                "{}/{}",
                api_version.as_deref().unwrap_or("*"),
                kind.as_deref().unwrap_or("*")
            )?,
        }
        match &self.subresource {
            Some(subresource) => write!(f, "/{subresource}"),
            None => Ok(()),
        }
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

impl Review {
    /// Why what the plugin gets is over its limits, if it is: more
    /// subscriptions than `limits.max-subscriptions` or more indexes than
    /// `limits.max-indexes`. Such a plugin does not start.
    #[must_use]
    pub fn over_limits(&self, limits: &crate::limits::Limits) -> Option<String> {
        if self.subscriptions.len() > limits.max_subscriptions {
            return Some(format!(
                "{} subscriptions, over the limit of {} (limits.max-subscriptions)",
                self.subscriptions.len(),
                limits.max_subscriptions
            ));
        }
        if self.indexes.len() > limits.max_indexes {
            return Some(format!(
                "{} indexes, over the limit of {} (limits.max-indexes)",
                self.indexes.len(),
                limits.max_indexes
            ));
        }
        None
    }
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

    fn write_rule(verbs: &[Verb], resources: &[&str], namespaces: &[&str]) -> WriteRule {
        WriteRule::new(
            verbs.iter().copied(),
            resources.iter().copied(),
            Scope::from_names(namespaces.iter().copied()),
        )
        .unwrap()
    }

    const ALL_VERBS: [Verb; 5] = [Verb::Create, Verb::Update, Verb::Patch, Verb::Apply, Verb::Delete];

    #[test]
    fn the_default_grant_writes_nothing() {
        let grant = Grant::default();
        let pods = GroupVersionKind::gvk("", "v1", "Pod");
        for verb in ALL_VERBS {
            for subresource in [None, Some("status")] {
                assert!(!grant.allows_write(verb, &pods, subresource, Some("a")), "{verb}");
                assert!(!grant.allows_write(verb, &pods, subresource, None), "{verb}");
            }
        }
        assert!(Grant::new(["*"], ["*"]).unwrap().writes().is_empty());
    }

    #[test]
    fn a_write_rule_grants_its_verbs_on_its_resources_in_its_namespaces() {
        let grant = Grant::default().with_writes([
            write_rule(
                &[Verb::Patch, Verb::Update],
                &["apps/v1/Deployment", "v1/*"],
                &["a", "b"],
            ),
            write_rule(&[Verb::Create], &["events.k8s.io/v1/Event"], &["*"]),
        ]);
        let deployments = GroupVersionKind::gvk("apps", "v1", "Deployment");
        let configmaps = GroupVersionKind::gvk("", "v1", "ConfigMap");
        let events = GroupVersionKind::gvk("events.k8s.io", "v1", "Event");
        let statefulsets = GroupVersionKind::gvk("apps", "v1", "StatefulSet");
        let mut granted = Vec::new();
        for verb in ALL_VERBS {
            for (name, gvk) in [
                ("deployment", &deployments),
                ("configmap", &configmaps),
                ("event", &events),
                ("statefulset", &statefulsets),
            ] {
                for namespace in ["a", "c"] {
                    if grant.allows_write(verb, gvk, None, Some(namespace)) {
                        granted.push(format!("{verb} {name} in {namespace}"));
                    }
                }
            }
        }
        assert_eq!(
            granted,
            [
                "create event in a",
                "create event in c",
                "update deployment in a",
                "update configmap in a",
                "patch deployment in a",
                "patch configmap in a",
            ]
        );
    }

    #[test]
    fn a_resource_without_a_subresource_does_not_grant_its_subresources() {
        let deployments = GroupVersionKind::gvk("apps", "v1", "Deployment");
        let pods = GroupVersionKind::gvk("", "v1", "Pod");
        let grant = Grant::default().with_writes([write_rule(
            &[Verb::Patch],
            &["apps/v1/Deployment", "apps/v1/Deployment/scale", "v1/*/status"],
            &["*"],
        )]);
        let allowed = |gvk, subresource| grant.allows_write(Verb::Patch, gvk, subresource, Some("a"));
        assert!(allowed(&deployments, None));
        assert!(allowed(&deployments, Some("scale")));
        assert!(!allowed(&deployments, Some("status")));
        assert!(allowed(&pods, Some("status")));
        assert!(!allowed(&pods, None));
        let only_objects = Grant::default().with_writes([write_rule(&[Verb::Patch], &["*"], &["*"])]);
        assert!(only_objects.allows_write(Verb::Patch, &pods, None, Some("a")));
        assert!(!only_objects.allows_write(Verb::Patch, &pods, Some("status"), Some("a")));
    }

    #[test]
    fn a_cluster_scoped_write_needs_a_rule_for_every_namespace() {
        let nodes = GroupVersionKind::gvk("", "v1", "Node");
        let in_a = Grant::default().with_writes([write_rule(&[Verb::Patch], &["v1/Node"], &["a"])]);
        assert!(!in_a.allows_write(Verb::Patch, &nodes, None, None));
        let everywhere = Grant::default().with_writes([write_rule(&[Verb::Patch], &["v1/Node"], &["*"])]);
        assert!(everywhere.allows_write(Verb::Patch, &nodes, None, None));
        // A host confined to a namespace writes nothing cluster-scoped.
        let confined = everywhere.within(&Scope::only(["a"]));
        assert!(!confined.allows_write(Verb::Patch, &nodes, None, None));
        assert!(confined.allows_write(Verb::Patch, &nodes, None, Some("a")));
        assert!(!confined.allows_write(Verb::Patch, &nodes, None, Some("b")));
    }

    #[test]
    fn malformed_write_rules_are_refused_and_good_ones_print_as_written() {
        for bad in [
            "Pod",
            "v1",
            "apps/v1/deployments",
            "apps/v1/Deployment/Scale",
            "v1/Pod/sta-tus",
        ] {
            assert!(WriteRule::new([Verb::Patch], [bad], Scope::all()).is_err(), "{bad}");
        }
        assert!(WriteRule::new([], ["v1/Pod"], Scope::all()).is_err());
        assert!(WriteRule::new([Verb::Patch], [], Scope::all()).is_err());
        let rule = write_rule(
            &[Verb::Patch, Verb::Create],
            &["v1/ConfigMap", "apps/v1/Deployment/scale", "*", "v1/*/status"],
            &["b", "a"],
        );
        assert_eq!(
            rule.to_string(),
            "create, patch v1/ConfigMap, apps/v1/Deployment/scale, *, v1/*/status in namespaces a, b"
        );
        assert!(
            write_rule(&[Verb::Delete], &["v1/Pod"], &["*"])
                .to_string()
                .ends_with("in every namespace")
        );
        // Reads never name subresources.
        assert!(Grant::new(["apps/v1/Deployment/scale"], ["*"]).is_err());
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
