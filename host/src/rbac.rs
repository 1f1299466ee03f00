//! The Kubernetes RBAC a host needs for its plugins: `list` and `watch` on
//! every resource an informer caches for them, each write verb their grants
//! allow, and the Lease of leader election; nothing else.
//!
//! It is computed from the same [`Review`] of each plugin's registration that
//! the runtime starts informers from and `kinformer check` prints, and from
//! the same write rules every write is checked against
//! ([`Grant::allows_write`]), so the three agree. Reads and writes in every
//! namespace go to a ClusterRole; those confined to namespaces go to a Role
//! in each.
//!
//! Resource names are plurals as kube-rs derives them from kinds
//! ([`kube::api::ApiResource::from_gvk`]); a custom resource whose plural is
//! irregular needs its rule corrected by hand.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{ApiResource, GroupVersionKind};

use crate::grant::{Grant, Review, Verb};

/// An API group and a resource (`deployments`, `deployments/scale`, `*`).
type Resource = (String, String);

/// What one place (the cluster, or a namespace) needs: verbs per resource.
type Rules = BTreeMap<Resource, BTreeSet<&'static str>>;

/// The permissions a host needs, gathered plugin by plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    cluster: Rules,
    namespaced: BTreeMap<String, Rules>,
}

impl Permissions {
    /// No permissions.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds what a plugin needs: `list` and `watch` for each subscription its
    /// review accepted (in its namespace, or `host_namespace` when the host is
    /// confined to one, or cluster-wide), and each verb of `grant`'s write
    /// rules. Pass the grant as the runtime narrows it
    /// ([`Grant::within`] the host's namespace) and its review.
    pub fn add_plugin(&mut self, grant: &Grant, review: &Review, host_namespace: Option<&str>) {
        for subscription in &review.subscriptions {
            let namespace = subscription.namespace.as_deref().or(host_namespace);
            let resource = resource_of(&subscription.gvk, None);
            let verbs = self.rules(namespace).entry(resource).or_default();
            verbs.extend(["list", "watch"]);
        }
        for rule in grant.writes() {
            let namespaces: Vec<Option<String>> = match rule.namespaces().namespaces() {
                None => vec![None],
                Some(namespaces) => namespaces.iter().cloned().map(Some).collect(),
            };
            for pattern in rule.resources() {
                let group = match pattern.api_version() {
                    None => "*".to_owned(),
                    Some(api_version) => api_version.rsplit_once('/').map_or("", |(group, _)| group).to_owned(),
                };
                let plural = match (pattern.api_version(), pattern.kind()) {
                    (Some(api_version), Some(kind)) => {
                        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
                        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)).plural
                    }
                    _ => "*".to_owned(),
                };
                let name = match pattern.subresource() {
                    Some(subresource) => format!("{plural}/{subresource}"),
                    None => plural,
                };
                for namespace in &namespaces {
                    let verbs = self
                        .rules(namespace.as_deref())
                        .entry((group.clone(), name.clone()))
                        .or_default();
                    verbs.extend(rule.verbs().map(rbac_verb));
                }
            }
        }
    }

    /// Adds what leader election on a Lease in `namespace` needs: `get`,
    /// `create` and `update` on Leases.
    pub fn add_leader_election(&mut self, namespace: &str) {
        let verbs = self
            .rules(Some(namespace))
            .entry(("coordination.k8s.io".to_owned(), "leases".to_owned()))
            .or_default();
        verbs.extend(["get", "create", "update"]);
    }

    fn rules(&mut self, namespace: Option<&str>) -> &mut Rules {
        match namespace {
            None => &mut self.cluster,
            Some(namespace) => self.namespaced.entry(namespace.to_owned()).or_default(),
        }
    }

    /// The ClusterRole's rules: one per resource, sorted.
    #[must_use]
    pub fn cluster_rules(&self) -> Vec<PolicyRule> {
        policy_rules(&self.cluster)
    }

    /// Each namespace's Role rules: one per resource, sorted.
    #[must_use]
    pub fn namespaced_rules(&self) -> BTreeMap<String, Vec<PolicyRule>> {
        self.namespaced
            .iter()
            .map(|(namespace, rules)| (namespace.clone(), policy_rules(rules)))
            .collect()
    }
}

/// A write verb as RBAC names it: server-side apply is a `patch`.
fn rbac_verb(verb: Verb) -> &'static str {
    match verb {
        Verb::Apply => "patch",
        other => other.as_str(),
    }
}

fn resource_of(gvk: &GroupVersionKind, subresource: Option<&str>) -> Resource {
    let plural = ApiResource::from_gvk(gvk).plural;
    let name = match subresource {
        Some(subresource) => format!("{plural}/{subresource}"),
        None => plural,
    };
    (gvk.group.clone(), name)
}

fn policy_rules(rules: &Rules) -> Vec<PolicyRule> {
    rules
        .iter()
        .map(|((group, resource), verbs)| PolicyRule {
            api_groups: Some(vec![group.clone()]),
            resources: Some(vec![resource.clone()]),
            verbs: verbs.iter().map(|verb| (*verb).to_owned()).collect(),
            ..PolicyRule::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::{Scope, WriteRule};
    use crate::registration::{Registration, Subscription};

    fn subscription(group: &str, version: &str, kind: &str, namespace: Option<&str>) -> Subscription {
        Subscription {
            gvk: GroupVersionKind::gvk(group, version, kind),
            namespace: namespace.map(str::to_owned),
            label_selector: None,
            deliver: true,
        }
    }

    fn rule(rules: &[PolicyRule], group: &str, resource: &str) -> Option<Vec<String>> {
        rules
            .iter()
            .find(|rule| {
                rule.api_groups.as_deref() == Some(&[group.to_owned()])
                    && rule.resources.as_deref() == Some(&[resource.to_owned()])
            })
            .map(|rule| rule.verbs.clone())
    }

    #[test]
    fn reads_are_list_and_watch_where_the_informer_runs_and_writes_are_the_granted_verbs() {
        let grant = Grant::new(["v1/Pod", "apps/v1/Deployment", "v1/ConfigMap"], ["*"])
            .unwrap()
            .with_writes([
                WriteRule::new([Verb::Patch, Verb::Apply], ["apps/v1/Deployment/scale"], Scope::all()).unwrap(),
                WriteRule::new([Verb::Create], ["v1/ConfigMap"], Scope::only(["shop"])).unwrap(),
            ]);
        let registration = Registration {
            name: "p".into(),
            version: "1".into(),
            subscriptions: vec![
                subscription("", "v1", "Pod", None),
                subscription("apps", "v1", "Deployment", None),
                subscription("", "v1", "ConfigMap", Some("shop")),
                subscription("", "v1", "Secret", None),
            ],
            indexes: Vec::new(),
            controller: None,
        };
        let mut permissions = Permissions::new();
        permissions.add_plugin(&grant, &grant.review(&registration), None);
        permissions.add_leader_election("kinformer");
        let cluster = permissions.cluster_rules();
        assert_eq!(cluster.len(), 3, "{cluster:?}");
        assert_eq!(rule(&cluster, "", "pods"), Some(vec!["list".into(), "watch".into()]));
        assert_eq!(
            rule(&cluster, "apps", "deployments"),
            Some(vec!["list".into(), "watch".into()])
        );
        assert_eq!(rule(&cluster, "apps", "deployments/scale"), Some(vec!["patch".into()]));
        assert_eq!(
            rule(&cluster, "", "secrets"),
            None,
            "a refused subscription needs nothing"
        );
        let namespaced = permissions.namespaced_rules();
        assert_eq!(namespaced.keys().collect::<Vec<_>>(), ["kinformer", "shop"]);
        assert_eq!(
            rule(&namespaced["shop"], "", "configmaps"),
            Some(vec!["create".into(), "list".into(), "watch".into()])
        );
        assert_eq!(
            rule(&namespaced["kinformer"], "coordination.k8s.io", "leases"),
            Some(vec!["create".into(), "get".into(), "update".into()])
        );
    }

    #[test]
    fn a_host_confined_to_a_namespace_reads_there_and_wildcards_stay_wildcards() {
        let grant = Grant::default()
            .with_writes([WriteRule::new([Verb::Delete], ["apps/v1/*"], Scope::all()).unwrap()])
            .within(&Scope::only(["team"]));
        let registration = Registration {
            name: "p".into(),
            version: "1".into(),
            subscriptions: vec![subscription("", "v1", "Pod", None)],
            indexes: Vec::new(),
            controller: None,
        };
        let mut permissions = Permissions::new();
        permissions.add_plugin(&grant, &grant.review(&registration), Some("team"));
        assert!(permissions.cluster_rules().is_empty());
        let team = &permissions.namespaced_rules()["team"];
        assert_eq!(rule(team, "", "pods"), Some(vec!["list".into(), "watch".into()]));
        assert_eq!(rule(team, "apps", "*"), Some(vec!["delete".into()]));
    }
}
