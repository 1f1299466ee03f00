//! Grants: what the operator lets a plugin watch, read and write, and the one
//! review of a plugin's registration against it.
//!
//! A [`Grant`] names resources (`apiVersion/Kind` patterns) and namespaces (a
//! [`Scope`]). [`Grant::review`] decides, for a plugin's
//! [`Registration`](crate::registration::Registration), which
//! subscriptions and indexes it gets and which are refused, and why: the runtime
//! starts what is accepted, `kinformer check` prints the same answer. Reads are
//! enforced through the scope every cache read passes ([`crate::indexer::Indexer::scoped`])
//! and every delta queue ([`crate::processor::ListenerOptions::scope`]).
//!
//! Writes are granted apart, by [`WriteRule`]s: verbs on resources (and
//! subresources) in namespaces. [`Grant::allows_write`] is the one check every
//! write passes before it is sent ([`crate::apiserver::Writer`]). The default
//! grant writes nothing.

use std::fmt;

use kube::api::GroupVersionKind;

mod identity;
pub mod rbac;
mod review;
mod write;

pub use crate::outbound::HttpGrant;
pub use crate::scope::Scope;
pub use identity::Identity;
pub use review::{Refusal, Review};
pub use write::{Verb, WriteMode, WriteRule};

/// Why a grant or a write rule cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GrantError {
    /// A resource pattern is malformed.
    #[error(
        "resource {0:?}: want apiVersion/Kind (v1/Pod, apps/v1/Deployment, apps/v1/*) or *, \
         and for writes apiVersion/Kind/subresource (apps/v1/Deployment/scale)"
    )]
    Malformed(String),
    /// A read grant names a subresource.
    #[error("resource {0:?}: reads name resources, not subresources")]
    Subresource(String),
    /// A write rule has no verb.
    #[error("a write rule needs at least one verb")]
    NoVerb,
    /// A write rule has no resource.
    #[error("a write rule needs at least one resource")]
    NoResource,
}

/// Which resources and namespaces a plugin may watch and read, and what it
/// may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    resources: Option<Vec<ResourcePattern>>,
    namespaces: Scope,
    writes: Vec<WriteRule>,
    http: HttpGrant,
}

impl Default for Grant {
    /// The default grant: every resource but `v1/Secret`, every namespace, no
    /// writes, no uncached reads, no outbound HTTP.
    fn default() -> Self {
        Self {
            resources: None,
            namespaces: Scope::all(),
            writes: Vec::new(),
            http: HttpGrant::default(),
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
    ) -> Result<Self, GrantError> {
        Self::from_parts(Some(resources), Some(namespaces))
    }

    /// A grant of these resources (the default's when `None`) in these
    /// namespaces (all when `None`).
    ///
    /// # Errors
    ///
    /// When a pattern is malformed.
    pub fn from_parts<'a, R, N>(resources: Option<R>, namespaces: Option<N>) -> Result<Self, GrantError>
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
                            Some(_) => Err(GrantError::Subresource(pattern.to_owned())),
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(Self {
            resources,
            namespaces: namespaces.map_or_else(Scope::all, Scope::from_names),
            writes: Vec::new(),
            http: HttpGrant::default(),
        })
    }

    /// This grant with these write rules (in place of any it had).
    #[must_use]
    pub fn with_writes(mut self, rules: impl IntoIterator<Item = WriteRule>) -> Self {
        self.writes = rules.into_iter().collect();
        self
    }

    /// The write rules, and the rules of uncached reads (verbs `get` and
    /// `list`); none in the default grant.
    #[must_use]
    pub fn writes(&self) -> &[WriteRule] {
        &self.writes
    }

    /// This grant with this HTTP allow-list (in place of any it had).
    #[must_use]
    pub fn with_http(mut self, http: HttpGrant) -> Self {
        self.http = http;
        self
    }

    /// The outbound HTTP allow-list; empty in the default grant.
    #[must_use]
    pub fn http(&self) -> &HttpGrant {
        &self.http
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
    /// # Ok::<(), kinformer::grant::GrantError>(())
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
    fn parse(pattern: &str) -> Result<Self, GrantError> {
        let wild = |part: &str| (part != "*").then(|| part.to_owned());
        let malformed = || GrantError::Malformed(pattern.to_owned());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registration::{ControllerSpec, IndexSpec, Registration, Subscription};

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
    fn a_plugin_whose_subscriptions_are_all_refused_or_cache_only_handles_nothing() {
        let grant = Grant::from_parts(Some(["v1/ConfigMap"]), None::<[&str; 0]>).unwrap();
        assert!(
            grant
                .review(&registration(vec![subscription("v1", "Pod", None)], vec![]))
                .handles_nothing()
        );
        assert!(grant.review(&registration(vec![], vec![])).handles_nothing());
        let mut cached = subscription("v1", "ConfigMap", None);
        cached.deliver = false;
        assert!(grant.review(&registration(vec![cached], vec![])).handles_nothing());
        let watched = registration(vec![subscription("v1", "ConfigMap", None)], vec![]);
        assert!(!grant.review(&watched).handles_nothing());
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
