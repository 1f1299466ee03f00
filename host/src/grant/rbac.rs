//! The Kubernetes RBAC a host needs for its plugins: `list` and `watch` on
//! every resource an informer caches for them, each write verb (and `get` and
//! `list` for each read) their grants allow, `get`, `list` and `watch` on
//! exactly the Secrets and ConfigMaps their `[env]` names (`resourceNames`),
//! the Service `default/kubernetes` and the EndpointSlices of `default` (the
//! API server's addresses, refused to plugins), and the Lease of leader
//! election; nothing else.
//!
//! It is computed from the same [`Review`] of each plugin's registration that
//! the runtime starts informers from and `kinformer check` prints, and from
//! the same write rules every write is checked against
//! ([`Grant::allows_write`]), so the three agree. Reads and writes in every
//! namespace go to a ClusterRole; those confined to namespaces go to a Role
//! in each.
//!
//! Resource names are plurals as kube-rs derives them from kinds
//! ([`kube::api::ApiResource::from_gvk`]), but for the resource metrics API's
//! (`PodMetrics` are `pods`, `NodeMetrics` are `nodes`); a custom resource
//! whose plural is irregular needs its rule corrected by hand.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{ApiResource, GroupVersionKind};

use crate::grant::{Grant, Review, Verb};
use crate::manifest::{EnvValue, EnvVar};

/// Whether `gvk` is one of Kubernetes' built-in cluster-scoped kinds, listed
/// cluster-wide whatever namespaces a plugin is granted. A custom
/// cluster-scoped resource subscribed to by a plugin granted some namespaces
/// needs its rule moved to the ClusterRole by hand.
fn cluster_scoped(gvk: &GroupVersionKind) -> bool {
    const KINDS: &[(&str, &str)] = &[
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("", "ComponentStatus"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("metrics.k8s.io", "NodeMetrics"),
        ("networking.k8s.io", "IngressClass"),
        ("node.k8s.io", "RuntimeClass"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "CSINode"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "VolumeAttachment"),
    ];
    KINDS.contains(&(gvk.group.as_str(), gvk.kind.as_str()))
}

/// An API group and a resource (`deployments`, `deployments/scale`, `*`).
type Resource = (String, String);

/// What one place (the cluster, or a namespace) needs: verbs per resource.
type Rules = BTreeMap<Resource, BTreeSet<&'static str>>;

/// The permissions a host needs, gathered plugin by plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    cluster: Rules,
    namespaced: BTreeMap<String, Rules>,
    /// Objects read by name, per namespace: (group, resource) to names.
    named: BTreeMap<String, BTreeMap<Resource, BTreeSet<String>>>,
}

impl Permissions {
    /// No permissions.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds what a plugin needs: `list` and `watch` for each subscription its
    /// review accepted, where the runtime lists it (its own namespace; else
    /// each namespace of the grant, when the grant or the host is confined to
    /// some; else cluster-wide, as always for cluster-scoped resources), and
    /// each verb of `grant`'s write rules. Pass the grant as the runtime
    /// narrows it ([`Grant::within`] the host's namespaces) and its review.
    pub fn add_plugin(&mut self, grant: &Grant, review: &Review) {
        for subscription in &review.subscriptions {
            let resource = resource_of(&subscription.gvk, None);
            let namespaces: Vec<Option<String>> = match (&subscription.namespace, grant.namespaces().namespaces()) {
                _ if cluster_scoped(&subscription.gvk) => vec![None],
                (Some(namespace), _) => vec![Some(namespace.clone())],
                (None, Some(namespaces)) => namespaces.iter().cloned().map(Some).collect(),
                (None, None) => vec![None],
            };
            for namespace in namespaces {
                let verbs = self.rules(namespace.as_deref()).entry(resource.clone()).or_default();
                verbs.extend(["list", "watch"]);
            }
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
                        plural(&GroupVersionKind::gvk(group, version, kind))
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

    /// Adds what a plugin's `[env]` needs: `get`, `list` and `watch` on each
    /// Secret and ConfigMap it names, by name (the host watches each one
    /// with a `metadata.name` field selector, which RBAC matches against
    /// `resourceNames`).
    pub fn add_env(&mut self, env: &[EnvVar]) {
        for var in env {
            let (resource, key) = match &var.value {
                EnvValue::Literal(_) => continue,
                EnvValue::Secret(key) => ("secrets", key),
                EnvValue::ConfigMap(key) => ("configmaps", key),
            };
            self.named
                .entry(key.namespace.clone())
                .or_default()
                .entry((String::new(), resource.to_owned()))
                .or_default()
                .insert(key.name.clone());
        }
    }

    /// Adds what following the API server's addresses needs, for plugins'
    /// outbound HTTP to be refused them ([`crate::outbound::follow_api_server`],
    /// which every host runs): `get`, `list` and `watch` on the Service
    /// `default/kubernetes` (by name) and `list` and `watch` on the
    /// EndpointSlices of `default` (RBAC cannot name them by label). Without
    /// them the host refuses the API server only at its kubeconfig's address.
    pub fn add_api_server_addresses(&mut self) {
        self.rules(Some("default"))
            .entry(("discovery.k8s.io".to_owned(), "endpointslices".to_owned()))
            .or_default()
            .extend(["list", "watch"]);
        self.named
            .entry("default".to_owned())
            .or_default()
            .entry((String::new(), "services".to_owned()))
            .or_default()
            .insert("kubernetes".to_owned());
    }

    /// Adds what leader election on Leases in `namespace` needs: `get`,
    /// `create` and `update`, and `list` (per plugin, a replica reads its
    /// group's Leases in one list).
    pub fn add_leader_election(&mut self, namespace: &str) {
        let verbs = self
            .rules(Some(namespace))
            .entry(("coordination.k8s.io".to_owned(), "leases".to_owned()))
            .or_default();
        verbs.extend(["get", "list", "create", "update"]);
    }

    /// Adds what running Handlers needs ([`crate::handlers`]): `list` and
    /// `watch` on Handlers and ClusterHandlers, `patch` on their status,
    /// `get` on ConfigMaps (their modules), `create` and `patch` on Events,
    /// and `impersonate` on the ServiceAccounts of `tenant_namespaces` (of
    /// every namespace when empty). Never on groups: the host names none
    /// ([`crate::grant::Identity`]), and `impersonate` on every group would
    /// include `system:masters`.
    pub fn add_handlers(&mut self, tenant_namespaces: &[String]) {
        let group = crate::handlers::GROUP;
        for (resource, verbs) in [
            ("handlers", &["list", "watch"][..]),
            ("clusterhandlers", &["list", "watch"]),
            ("handlers/status", &["patch"]),
            ("clusterhandlers/status", &["patch"]),
        ] {
            let rule = self.cluster.entry((group.to_owned(), resource.to_owned())).or_default();
            rule.extend(verbs.iter().copied());
        }
        self.cluster
            .entry((String::new(), "configmaps".to_owned()))
            .or_default()
            .insert("get");
        self.cluster
            .entry(("events.k8s.io".to_owned(), "events".to_owned()))
            .or_default()
            .extend(["create", "patch"]);
        if tenant_namespaces.is_empty() {
            self.cluster
                .entry((String::new(), "serviceaccounts".to_owned()))
                .or_default()
                .insert("impersonate");
        }
        for namespace in tenant_namespaces {
            self.rules(Some(namespace))
                .entry((String::new(), "serviceaccounts".to_owned()))
                .or_default()
                .insert("impersonate");
        }
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

    /// Each namespace's Role rules: one per resource, sorted, then one per
    /// resource read by name.
    #[must_use]
    pub fn namespaced_rules(&self) -> BTreeMap<String, Vec<PolicyRule>> {
        let namespaces: BTreeSet<&String> = self.namespaced.keys().chain(self.named.keys()).collect();
        namespaces
            .into_iter()
            .map(|namespace| {
                let mut rules = self.namespaced.get(namespace).map(policy_rules).unwrap_or_default();
                for ((group, resource), names) in self.named.get(namespace).into_iter().flatten() {
                    rules.push(PolicyRule {
                        api_groups: Some(vec![group.clone()]),
                        resources: Some(vec![resource.clone()]),
                        resource_names: Some(names.iter().cloned().collect()),
                        verbs: ["get", "list", "watch"].map(str::to_owned).to_vec(),
                        ..PolicyRule::default()
                    });
                }
                (namespace.clone(), rules)
            })
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

/// The resource a kind is served as. The resource metrics API names its
/// kinds apart from its resources: `PodMetrics` are `pods`.
fn plural(gvk: &GroupVersionKind) -> String {
    match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("metrics.k8s.io", "PodMetrics") => "pods".to_owned(),
        ("metrics.k8s.io", "NodeMetrics") => "nodes".to_owned(),
        _ => ApiResource::from_gvk(gvk).plural,
    }
}

fn resource_of(gvk: &GroupVersionKind, subresource: Option<&str>) -> Resource {
    let plural = plural(gvk);
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
    use crate::manifest::KeyRef;
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
        permissions.add_plugin(&grant, &grant.review(&registration));
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
            Some(vec!["create".into(), "get".into(), "list".into(), "update".into()])
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
        permissions.add_plugin(&grant, &grant.review(&registration));
        assert!(permissions.cluster_rules().is_empty());
        let team = &permissions.namespaced_rules()["team"];
        assert_eq!(rule(team, "", "pods"), Some(vec!["list".into(), "watch".into()]));
        assert_eq!(rule(team, "apps", "*"), Some(vec!["delete".into()]));
    }

    #[test]
    fn a_host_confined_to_namespaces_lists_in_each_and_cluster_scoped_kinds_cluster_wide() {
        let grant = Grant::default().within(&Scope::only(["a", "b"]));
        let registration = Registration {
            name: "p".into(),
            version: "1".into(),
            subscriptions: vec![
                subscription("", "v1", "ConfigMap", None),
                subscription("", "v1", "Node", None),
                subscription("apps", "v1", "Deployment", Some("a")),
            ],
            indexes: Vec::new(),
            controller: None,
        };
        let mut permissions = Permissions::new();
        permissions.add_plugin(&grant, &grant.review(&registration));
        let cluster = permissions.cluster_rules();
        assert_eq!(rule(&cluster, "", "nodes"), Some(vec!["list".into(), "watch".into()]));
        assert_eq!(rule(&cluster, "", "configmaps"), None);
        let namespaced = permissions.namespaced_rules();
        assert_eq!(namespaced.keys().collect::<Vec<_>>(), ["a", "b"]);
        for namespace in ["a", "b"] {
            let rules = &namespaced[namespace];
            assert_eq!(rule(rules, "", "configmaps"), Some(vec!["list".into(), "watch".into()]));
        }
        assert!(rule(&namespaced["a"], "apps", "deployments").is_some());
        assert!(rule(&namespaced["b"], "apps", "deployments").is_none());
    }

    #[test]
    fn the_api_server_s_addresses_are_read_in_default_only() {
        let mut permissions = Permissions::new();
        permissions.add_api_server_addresses();
        assert!(permissions.cluster_rules().is_empty());
        let namespaced = permissions.namespaced_rules();
        assert_eq!(namespaced.keys().collect::<Vec<_>>(), ["default"]);
        let default = &namespaced["default"];
        assert_eq!(
            rule(default, "discovery.k8s.io", "endpointslices"),
            Some(vec!["list".into(), "watch".into()])
        );
        assert_eq!(
            rule(default, "", "services"),
            Some(vec!["get".into(), "list".into(), "watch".into()])
        );
        let services = default.iter().find(|rule| rule.resource_names.is_some()).unwrap();
        assert_eq!(services.resource_names, Some(vec!["kubernetes".to_owned()]));
    }

    #[test]
    fn handlers_need_their_resources_and_impersonation_of_tenant_accounts_only() {
        let mut permissions = Permissions::new();
        permissions.add_handlers(&["shop".to_owned()]);
        let cluster = permissions.cluster_rules();
        assert_eq!(
            rule(&cluster, "kinformer.dev", "handlers"),
            Some(vec!["list".to_owned(), "watch".to_owned()])
        );
        assert_eq!(
            rule(&cluster, "kinformer.dev", "clusterhandlers/status"),
            Some(vec!["patch".to_owned()])
        );
        assert_eq!(rule(&cluster, "", "configmaps"), Some(vec!["get".to_owned()]));
        assert!(
            !cluster
                .iter()
                .any(|rule| rule.resources == Some(vec!["groups".to_owned()]))
        );
        assert_eq!(rule(&cluster, "", "serviceaccounts"), None);
        let shop = &permissions.namespaced_rules()["shop"];
        assert_eq!(rule(shop, "", "serviceaccounts"), Some(vec!["impersonate".to_owned()]));
    }

    #[test]
    fn env_objects_are_read_by_name_and_metrics_by_their_resources() {
        let grant = Grant::default().with_writes([WriteRule::new(
            [Verb::Get, Verb::List],
            ["metrics.k8s.io/v1beta1/PodMetrics"],
            Scope::all(),
        )
        .unwrap()]);
        let registration = Registration {
            name: "p".into(),
            version: "1".into(),
            subscriptions: Vec::new(),
            indexes: Vec::new(),
            controller: None,
        };
        let key = |namespace: &str, name: &str| KeyRef {
            namespace: namespace.into(),
            name: name.into(),
            key: "url".into(),
        };
        let env = [
            EnvVar {
                name: "SLACK_URL".into(),
                value: EnvValue::Secret(key("monitoring", "slack")),
            },
            EnvVar {
                name: "TOKEN".into(),
                value: EnvValue::Secret(key("monitoring", "pager")),
            },
            EnvVar {
                name: "CHANNEL".into(),
                value: EnvValue::ConfigMap(key("team", "settings")),
            },
            EnvVar {
                name: "LEVEL".into(),
                value: EnvValue::Literal("warn".into()),
            },
        ];
        let mut permissions = Permissions::new();
        permissions.add_plugin(&grant, &grant.review(&registration));
        permissions.add_env(&env);
        let cluster = permissions.cluster_rules();
        assert_eq!(
            rule(&cluster, "metrics.k8s.io", "pods"),
            Some(vec!["get".into(), "list".into()])
        );
        let namespaced = permissions.namespaced_rules();
        assert_eq!(namespaced.keys().collect::<Vec<_>>(), ["monitoring", "team"]);
        let secrets = &namespaced["monitoring"];
        assert_eq!(secrets.len(), 1, "{secrets:?}");
        assert_eq!(
            secrets[0].resource_names,
            Some(vec!["pager".to_owned(), "slack".to_owned()])
        );
        assert_eq!(
            rule(secrets, "", "secrets"),
            Some(vec!["get".into(), "list".into(), "watch".into()])
        );
        assert_eq!(namespaced["team"][0].resource_names, Some(vec!["settings".to_owned()]));
        assert_eq!(
            rule(&namespaced["team"], "", "configmaps"),
            Some(vec!["get".into(), "list".into(), "watch".into()])
        );
    }
}
