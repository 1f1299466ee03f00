//! RBAC: what the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings in the store allow, decided as kube-apiserver's RBAC authorizer decides it.
//!
//! A user's rules are those of every ClusterRoleBinding that names it (by
//! user name, one of its groups, or its service account), then those of the
//! RoleBindings in the request's namespace that do. A rule allows a request
//! when it names its verb, API group, resource (`pods`, `pods/log`,
//! `*/scale`, `*`) and, if it lists names, the object's name; or, for a
//! path, its verb and the path (`/healthz`, `/apis/*`). RBAC only allows:
//! nothing it says refuses. A binding whose role is missing adds its error to
//! the refusal's reason (`RBAC: role.rbac.authorization.k8s.io "x" not
//! found`), and an allowed review says which binding allowed it.
//!
//! A ClusterRole with an `aggregationRule` has the rules of the ClusterRoles
//! its selectors match. kube-controller-manager writes them into the role;
//! here they are gathered when a decision is made, and the role's `rules`
//! stay as written.

use std::collections::BTreeSet;
use std::sync::Arc;

use kinformer_selector::Selector;
use serde_json::{Value, json};

use super::{Attributes, Decision, User, split_service_account, strings};
use crate::resources::ids;
use crate::store::{Filter, Store, StoredObject, label_selector_string};

/// One RBAC `PolicyRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rule {
    verbs: Vec<String>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    non_resource_urls: Vec<String>,
}

impl Rule {
    fn of(rule: &Value) -> Self {
        Self {
            verbs: strings(&rule["verbs"]),
            api_groups: strings(&rule["apiGroups"]),
            resources: strings(&rule["resources"]),
            resource_names: strings(&rule["resourceNames"]),
            non_resource_urls: strings(&rule["nonResourceURLs"]),
        }
    }

    /// Whether the rule allows what `attributes` ask.
    fn allows(&self, attributes: &Attributes) -> bool {
        if !matches(&self.verbs, &attributes.verb) {
            return false;
        }
        let Some(resource) = &attributes.resource else {
            let path = attributes.path.as_str();
            return self.non_resource_urls.iter().any(|url| {
                url == "*" || url == path || url.ends_with('*') && path.starts_with(url.trim_end_matches('*'))
            });
        };
        let combined = resource.combined();
        let subresource = resource.subresource.as_str();
        matches(&self.api_groups, &resource.group)
            && self.resources.iter().any(|named| {
                named == "*"
                    || *named == combined
                    || !subresource.is_empty() && named.strip_prefix("*/") == Some(subresource)
            })
            && (self.resource_names.is_empty() || self.resource_names.contains(&resource.name))
    }

    /// The rule as a SelfSubjectRulesReview lists it: a `ResourceRule` when
    /// it names resources, a `NonResourceRule` when it names paths.
    pub(crate) fn review_entries(&self) -> (Option<Value>, Option<Value>) {
        let resource = (!self.resources.is_empty()).then(|| {
            let mut rule = json!({"verbs": self.verbs});
            for (field, values) in [
                ("apiGroups", &self.api_groups),
                ("resources", &self.resources),
                ("resourceNames", &self.resource_names),
            ] {
                if !values.is_empty() {
                    rule[field] = json!(values);
                }
            }
            rule
        });
        let path = (!self.non_resource_urls.is_empty())
            .then(|| json!({"verbs": self.verbs, "nonResourceURLs": self.non_resource_urls}));
        (resource, path)
    }
}

/// Whether a rule's list names `item`, or everything (`*`).
fn matches(list: &[String], item: &str) -> bool {
    list.iter().any(|named| named == "*" || named == item)
}

/// A binding that names a user: how a reason describes it, and the rules
/// of the role it grants, or why they could not be read.
struct Grant {
    source: String,
    rules: Result<Vec<Rule>, String>,
}

/// The RBAC objects a decision in one namespace reads: every ClusterRole and
/// ClusterRoleBinding, the namespace's Roles and RoleBindings.
pub(crate) struct Policy {
    cluster_roles: Vec<Arc<StoredObject>>,
    cluster_role_bindings: Vec<Arc<StoredObject>>,
    roles: Vec<Arc<StoredObject>>,
    role_bindings: Vec<Arc<StoredObject>>,
}

impl Policy {
    /// The policy as the store holds it now, for decisions in `namespace`
    /// (`""`: cluster-wide, where no RoleBinding counts).
    pub(crate) fn load(store: &Store, namespace: &str) -> Self {
        let all = |id| {
            store
                .snapshot(&id, &Filter::default())
                .map(|(objects, _)| objects)
                .unwrap_or_default()
        };
        let in_namespace = |id| {
            if namespace.is_empty() {
                return Vec::new();
            }
            let filter = Filter {
                namespace: Some(namespace.to_owned()),
                ..Filter::default()
            };
            store
                .snapshot(&id, &filter)
                .map(|(objects, _)| objects)
                .unwrap_or_default()
        };
        Self {
            cluster_roles: all(ids::cluster_roles()),
            cluster_role_bindings: all(ids::cluster_role_bindings()),
            roles: in_namespace(ids::roles()),
            role_bindings: in_namespace(ids::role_bindings()),
        }
    }

    /// Whether RBAC allows `user` what `attributes` ask, and why.
    pub(crate) fn authorize(&self, user: &User, attributes: &Attributes) -> Decision {
        let mut errors = Vec::new();
        for grant in self.grants(user, attributes.namespace()) {
            match grant.rules {
                Ok(rules) if rules.iter().any(|rule| rule.allows(attributes)) => {
                    return Decision {
                        allowed: true,
                        reason: format!("RBAC: allowed by {}", grant.source),
                    };
                }
                Ok(_) => {}
                Err(error) => errors.push(error),
            }
        }
        Decision {
            allowed: false,
            reason: if errors.is_empty() {
                String::new()
            } else {
                format!("RBAC: {}", aggregate(&errors))
            },
        }
    }

    /// Every rule that applies to `user` in `namespace`, and the errors of
    /// the bindings whose roles could not be read (`""` when none).
    pub(crate) fn rules_for(&self, user: &User, namespace: &str) -> (Vec<Rule>, String) {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        for grant in self.grants(user, namespace) {
            match grant.rules {
                Ok(granted) => rules.extend(granted),
                Err(error) => errors.push(error),
            }
        }
        (rules, aggregate(&errors))
    }

    /// The bindings that name `user`: ClusterRoleBindings, then the
    /// RoleBindings of `namespace`.
    fn grants(&self, user: &User, namespace: &str) -> Vec<Grant> {
        let cluster = self.cluster_role_bindings.iter().filter_map(|binding| {
            let subject = applying_subject(user, &binding.value, "")?;
            Some(Grant {
                source: format!(
                    "ClusterRoleBinding {:?} of {} to {}",
                    binding.name,
                    role_ref(&binding.value),
                    describe(subject, "")
                ),
                rules: self.role_rules(&binding.value, ""),
            })
        });
        let local = self.role_bindings.iter().filter_map(|binding| {
            let subject = applying_subject(user, &binding.value, namespace)?;
            Some(Grant {
                source: format!(
                    "RoleBinding {:?} of {} to {}",
                    format!("{}/{namespace}", binding.name),
                    role_ref(&binding.value),
                    describe(subject, namespace)
                ),
                rules: self.role_rules(&binding.value, namespace),
            })
        });
        cluster.chain(local).collect()
    }

    /// The rules of the role a binding in `namespace` refers to.
    fn role_rules(&self, binding: &Value, namespace: &str) -> Result<Vec<Rule>, String> {
        let reference = &binding["roleRef"];
        let name = reference["name"].as_str().unwrap_or_default();
        let named = |objects: &[Arc<StoredObject>]| objects.iter().find(|object| object.name == name).cloned();
        match reference["kind"].as_str().unwrap_or_default() {
            "Role" if !namespace.is_empty() => named(&self.roles)
                .map(|role| rules_of(&role.value))
                .ok_or_else(|| format!("role.rbac.authorization.k8s.io {name:?} not found")),
            "ClusterRole" => named(&self.cluster_roles)
                .map(|role| self.cluster_role_rules(&role, &mut BTreeSet::new()))
                .ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io {name:?} not found")),
            "Role" => Err(format!("role.rbac.authorization.k8s.io {name:?} not found")),
            other => Err(format!("unsupported role reference kind: {other:?}")),
        }
    }

    /// A ClusterRole's rules: its own, or, when it aggregates, those of the
    /// ClusterRoles its selectors match (each once).
    fn cluster_role_rules(&self, role: &StoredObject, seen: &mut BTreeSet<String>) -> Vec<Rule> {
        let Some(selectors) = role.value["aggregationRule"]["clusterRoleSelectors"].as_array() else {
            return rules_of(&role.value);
        };
        seen.insert(role.name.clone());
        let selectors: Vec<Selector> = selectors
            .iter()
            .filter_map(|selector| Selector::parse(&label_selector_string(selector)).ok())
            .collect();
        let mut rules: Vec<Rule> = Vec::new();
        for other in &self.cluster_roles {
            if seen.contains(&other.name) || !selectors.iter().any(|selector| selector.matches(&other.labels)) {
                continue;
            }
            for rule in self.cluster_role_rules(other, seen) {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
        rules
    }
}

fn rules_of(role: &Value) -> Vec<Rule> {
    role["rules"].as_array().into_iter().flatten().map(Rule::of).collect()
}

/// `ClusterRole "view"`, as a reason names a binding's role.
fn role_ref(binding: &Value) -> String {
    let reference = &binding["roleRef"];
    format!(
        "{} {:?}",
        reference["kind"].as_str().unwrap_or_default(),
        reference["name"].as_str().unwrap_or_default()
    )
}

/// The first of a binding's subjects that `user` is, in a binding of
/// `namespace` (a service account subject without a namespace is in it).
fn applying_subject<'a>(user: &User, binding: &'a Value, namespace: &str) -> Option<&'a Value> {
    binding["subjects"].as_array()?.iter().find(|subject| {
        let name = subject["name"].as_str().unwrap_or_default();
        match subject["kind"].as_str().unwrap_or_default() {
            "User" => user.name == name,
            "Group" => user.groups.iter().any(|group| group == name),
            "ServiceAccount" => {
                let subject_namespace = subject["namespace"]
                    .as_str()
                    .filter(|ns| !ns.is_empty())
                    .unwrap_or(namespace);
                !subject_namespace.is_empty() && split_service_account(&user.name) == Some((subject_namespace, name))
            }
            _ => false,
        }
    })
}

/// `Group "dev"`, `ServiceAccount "handlers/shop"`, as a reason names a subject.
fn describe(subject: &Value, namespace: &str) -> String {
    let kind = subject["kind"].as_str().unwrap_or_default();
    let name = subject["name"].as_str().unwrap_or_default();
    if kind == "ServiceAccount" {
        let subject_namespace = subject["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
            .unwrap_or(namespace);
        format!("{kind} {:?}", format!("{name}/{subject_namespace}"))
    } else {
        format!("{kind} {name:?}")
    }
}

/// Errors as Go's aggregate error prints them: one as it is, several
/// (each once) in brackets.
fn aggregate(errors: &[String]) -> String {
    let mut distinct: Vec<&str> = Vec::new();
    for error in errors {
        if !distinct.contains(&error.as_str()) {
            distinct.push(error);
        }
    }
    match distinct[..] {
        [] => String::new(),
        [one] => one.to_owned(),
        ref many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::Method;
    use serde_json::json;

    use super::*;
    use crate::auth::ResourceAttributes;
    use crate::store::test_store;

    fn rule(value: Value) -> Rule {
        Rule::of(&value)
    }

    fn request(verb: &str, group: &str, resource: &str, subresource: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource: Some(ResourceAttributes {
                group: group.into(),
                version: "v1".into(),
                resource: resource.into(),
                subresource: subresource.into(),
                namespace: "a".into(),
                name: name.into(),
            }),
            path: String::new(),
        }
    }

    #[test]
    fn a_rule_matches_verbs_groups_resources_subresources_and_names() {
        let scale = rule(json!({"verbs": ["get", "patch"], "apiGroups": ["apps"], "resources": ["*/scale"]}));
        assert!(scale.allows(&request("patch", "apps", "deployments", "scale", "web")));
        assert!(!scale.allows(&request("patch", "apps", "deployments", "", "web")));
        assert!(!scale.allows(&request("update", "apps", "deployments", "scale", "web")));
        assert!(!scale.allows(&request("get", "", "replicationcontrollers", "scale", "web")));

        let logs = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}));
        assert!(logs.allows(&request("get", "", "pods", "log", "web")));
        assert!(!logs.allows(&request("get", "", "pods", "", "web")));

        let named = rule(
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["configmaps"], "resourceNames": ["settings"]}),
        );
        assert!(named.allows(&request("update", "", "configmaps", "", "settings")));
        assert!(!named.allows(&request("update", "", "configmaps", "", "other")));
        assert!(!named.allows(&request("list", "", "configmaps", "", "")));

        let paths = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/apis/*"]}));
        let path = |verb: &str, path: &str| {
            Attributes::of_request(&verb.parse::<Method>().unwrap(), path, &Default::default())
        };
        assert!(paths.allows(&path("GET", "/healthz")));
        assert!(paths.allows(&path("GET", "/apis/apps/v1")));
        assert!(!paths.allows(&path("GET", "/healthz/etcd")));
        assert!(!paths.allows(&path("POST", "/healthz")));
        assert!(
            !paths.allows(&request("get", "", "pods", "", "")),
            "a path rule grants no resource"
        );
    }

    #[test]
    fn bindings_grant_by_user_group_and_service_account_and_say_which_allowed() {
        let (store, _) = test_store();
        let roles = ids::roles();
        store
            .create(
                &roles,
                Some("a"),
                json!({"metadata": {"name": "reader"},
                "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]}),
            )
            .unwrap();
        store
            .create(
                &ids::role_bindings(),
                Some("a"),
                json!({"metadata": {"name": "readers"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                "subjects": [{"kind": "User", "name": "jane"}, {"kind": "ServiceAccount", "name": "bot"},
                             {"kind": "Group", "name": "team"}]}),
            )
            .unwrap();
        let list = request("list", "", "pods", "", "");
        let decide = |user: &User| Policy::load(&store, "a").authorize(user, &list);

        let bot = User::service_account("a", "bot", "");
        assert_eq!(
            decide(&bot).reason,
            "RBAC: allowed by RoleBinding \"readers/a\" of Role \"reader\" to ServiceAccount \"bot/a\""
        );
        assert!(
            decide(&User {
                name: "jane".into(),
                ..User::default()
            })
            .allowed
        );
        assert!(
            decide(&User {
                name: "joe".into(),
                groups: vec!["team".into()],
                ..User::default()
            })
            .allowed
        );
        assert!(
            !decide(&User::service_account("b", "bot", "")).allowed,
            "another namespace's bot"
        );
        assert!(
            !decide(&User {
                name: "joe".into(),
                ..User::default()
            })
            .allowed
        );
        let watch = request("watch", "", "pods", "", "");
        assert!(!Policy::load(&store, "a").authorize(&bot, &watch).allowed);
        let elsewhere = Attributes {
            resource: list.resource.clone().map(|r| ResourceAttributes {
                namespace: "b".into(),
                ..r
            }),
            ..list.clone()
        };
        assert!(!Policy::load(&store, "b").authorize(&bot, &elsewhere).allowed);
    }

    #[test]
    fn a_missing_role_is_the_refusals_reason_and_an_aggregated_role_has_its_parts_rules() {
        let (store, _) = test_store();
        let binding = |name: &str, role: &str| {
            json!({"metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "User", "name": "jane"}]})
        };
        store
            .create(&ids::cluster_role_bindings(), None, binding("gone", "missing"))
            .unwrap();
        let jane = User {
            name: "jane".into(),
            ..User::default()
        };
        let get = request("get", "", "secrets", "", "s");
        let decision = Policy::load(&store, "a").authorize(&jane, &get);
        assert_eq!(
            decision,
            Decision {
                allowed: false,
                reason: "RBAC: clusterrole.rbac.authorization.k8s.io \"missing\" not found".into()
            }
        );

        store
            .create(
                &ids::cluster_roles(),
                None,
                json!({"metadata": {"name": "secrets", "labels": {"aggregate-to-ops": "true"}},
                "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]}),
            )
            .unwrap();
        store
            .create(
                &ids::cluster_roles(),
                None,
                json!({"metadata": {"name": "ops"},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"aggregate-to-ops": "true"}}]}}),
            )
            .unwrap();
        store
            .create(&ids::cluster_role_bindings(), None, binding("ops", "ops"))
            .unwrap();
        assert!(Policy::load(&store, "a").authorize(&jane, &get).allowed);
        let (rules, errors) = Policy::load(&store, "a").rules_for(&jane, "a");
        assert_eq!(
            rules,
            [rule(
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]})
            )]
        );
        assert_eq!(errors, "clusterrole.rbac.authorization.k8s.io \"missing\" not found");
    }
}
