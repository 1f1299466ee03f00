//! Who sends a request and what it may do: authentication, impersonation and RBAC authorization, in the order kube-apiserver's filters run them.
//!
//! [`identify`] does the first two steps, [`Authorizer`] the third.
//!
//! 1. **Authentication** ([`authenticate`]): a bearer token this server
//!    issued (a TokenRequest) is its ServiceAccount,
//!    `system:serviceaccount:NS:NAME` in the groups `system:serviceaccounts`,
//!    `system:serviceaccounts:NS` and `system:authenticated`; such a token
//!    that expired, names another audience or outlived its account is `401`.
//!    Any other credential, or none, is the kubeconfig's user,
//!    [`User::admin`], in the group `system:masters`.
//! 2. **Impersonation** ([`impersonate`]): the `Impersonate-User`,
//!    `Impersonate-Group`, `Impersonate-Uid` and `Impersonate-Extra-*`
//!    headers, each checked as an `impersonate` of `users`, `groups`,
//!    `serviceaccounts`, `uids` or `userextras` (see `impersonation`).
//! 3. **Authorization** ([`Authorizer`]): the forbid rules of [`Faults`]
//!    first (they stand for RBAC a test wants without writing it), then the
//!    group `system:masters`, which kube-apiserver allows everything before
//!    RBAC is asked, then the Roles, ClusterRoles and bindings in the store
//!    (`rbac`). A refusal is kube-apiserver's `403` (`attributes`).
//!
//! [`Faults`]: crate::Faults

mod attributes;
mod impersonation;
mod rbac;

use std::collections::BTreeMap;

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

pub(crate) use attributes::{Attributes, ResourceAttributes};
use impersonation::impersonate;
pub(crate) use rbac::Rule;

use crate::Shared;
use crate::faults::Faults;
use crate::status::{ApiError, Result};
use crate::store::Store;
use crate::token::{self, TokenKey};

/// The group kube-apiserver allows everything, before RBAC is asked.
const MASTERS: &str = "system:masters";
/// The group of every authenticated user.
const AUTHENTICATED: &str = "system:authenticated";
/// The group of requests without credentials.
const UNAUTHENTICATED: &str = "system:unauthenticated";

/// An authenticated user, as kube-apiserver's `user.Info` holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) groups: Vec<String>,
    pub(crate) extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// The kubeconfig's user, whom every client is unless it sends a token
    /// this server issued: named as a service account (`kubectl auth
    /// whoami`), and in `system:masters`, so allowed everything, as a
    /// cluster's admin credentials are.
    pub(crate) fn admin() -> Self {
        let mut admin = Self::service_account("kinformer", "kinformer", "");
        admin.groups.insert(2, MASTERS.to_owned());
        admin
    }

    /// The user a token of the service account `namespace/name` is, with
    /// the groups kube-apiserver gives it.
    pub(crate) fn service_account(namespace: &str, name: &str, uid: &str) -> Self {
        Self {
            name: service_account_name(namespace, name),
            uid: uid.to_owned(),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.to_owned(),
            ],
            extra: BTreeMap::new(),
        }
    }

    /// The user as a `UserInfo` writes it, empty fields left out.
    pub(crate) fn info(&self) -> Value {
        let mut info = json!({"username": self.name});
        if !self.uid.is_empty() {
            info["uid"] = json!(self.uid);
        }
        if !self.groups.is_empty() {
            info["groups"] = json!(self.groups);
        }
        if !self.extra.is_empty() {
            info["extra"] = json!(self.extra);
        }
        info
    }

    /// The user a `SubjectAccessReview`'s spec names.
    pub(crate) fn of_review(spec: &Value) -> Self {
        Self {
            name: spec["user"].as_str().unwrap_or_default().to_owned(),
            uid: spec["uid"].as_str().unwrap_or_default().to_owned(),
            groups: strings(&spec["groups"]),
            extra: spec["extra"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(key, values)| (key.clone(), strings(values)))
                .collect(),
        }
    }
}

/// The strings of a JSON list (`["get", "list"]`); none for anything else.
fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| Some(item.as_str()?.to_owned()))
        .collect()
}

/// `system:serviceaccount:NAMESPACE:NAME`.
pub(crate) fn service_account_name(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The namespace and name of a service account's user name.
fn split_service_account(user: &str) -> Option<(&str, &str)> {
    let (namespace, name) = user.strip_prefix("system:serviceaccount:")?.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then_some((namespace, name))
}

/// Why a request is refused before it is authorized.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// A `Status` answer: `401` for a credential that does not authenticate,
    /// `403` for an impersonation the requester may not make.
    Status(ApiError),
    /// Impersonation headers that name no user: kube-apiserver's `500`, in
    /// plain text.
    InternalError(String),
}

/// The user a request acts as: who sends it ([`authenticate`]), or whom its
/// `Impersonate-*` headers name, once the sender may impersonate them; `uri`
/// is the request's, as a `500` names it.
///
/// # Errors
///
/// As [`authenticate`] and [`impersonate`].
pub(crate) fn identify(shared: &Shared, headers: &HeaderMap, uri: &str) -> std::result::Result<User, Refusal> {
    let requester = authenticate(&shared.store, &shared.tokens, headers).map_err(Refusal::Status)?;
    impersonate(&shared.authorizer(), requester, headers, uri)
}

/// Who sends a request: the service account of a bearer token this server
/// issued, or else [`User::admin`].
///
/// # Errors
///
/// `401 Unauthorized` for a token this server signed that is no longer
/// valid, as kube-apiserver answers every token it cannot authenticate.
fn authenticate(store: &Store, key: &TokenKey, headers: &HeaderMap) -> Result<User> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match bearer.map(|token| token::authenticate(store, key, token.trim())) {
        None | Some(token::Authenticated::NotIssuedHere) => Ok(User::admin()),
        Some(token::Authenticated::User(user)) => Ok(user),
        Some(token::Authenticated::Invalid(why)) => {
            tracing::debug!(%why, "a service account token was refused");
            Err(ApiError::unauthorized())
        }
    }
}

/// What a decision says: allowed or not, and why, in kube-apiserver's
/// words (`RBAC: allowed by ClusterRoleBinding "x" of ...`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) allowed: bool,
    pub(crate) reason: String,
}

/// Decides requests: the forbid rules, then `system:masters`, then RBAC.
pub(crate) struct Authorizer<'a> {
    pub(crate) store: &'a Store,
    pub(crate) faults: &'a Faults,
}

impl Authorizer<'_> {
    /// Whether `user` may do what `attributes` say, as an access review asks
    /// it: nothing is counted.
    pub(crate) fn decide(&self, user: &User, attributes: &Attributes) -> Decision {
        let forbidden = attributes
            .resource
            .as_ref()
            .is_some_and(|resource| self.faults.forbids(&resource.resource, namespace_of(resource)));
        if forbidden {
            Decision::default()
        } else {
            self.decide_by_policy(user, attributes)
        }
    }

    /// Authorizes a request as [`Authorizer::decide`] does, counting a
    /// request the forbid rules refuse as an injected fault.
    ///
    /// # Errors
    ///
    /// kube-apiserver's `403` when it is not allowed.
    pub(crate) fn authorize(&self, user: &User, attributes: &Attributes) -> Result<()> {
        let forbidden = attributes
            .resource
            .as_ref()
            .is_some_and(|resource| self.faults.is_forbidden(&resource.resource, namespace_of(resource)));
        let decision = if forbidden {
            Decision::default()
        } else {
            self.decide_by_policy(user, attributes)
        };
        if decision.allowed {
            Ok(())
        } else {
            Err(attributes.forbidden(&user.name, &decision.reason))
        }
    }

    /// `system:masters`, then RBAC.
    fn decide_by_policy(&self, user: &User, attributes: &Attributes) -> Decision {
        if user.groups.iter().any(|group| group == MASTERS) {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        rbac::Policy::load(self.store, attributes.namespace()).authorize(user, attributes)
    }

    /// The rules that apply to `user` in `namespace`, as a
    /// SelfSubjectRulesReview lists them, and what could not be read.
    pub(crate) fn rules_for(&self, user: &User, namespace: &str) -> (Vec<Rule>, String) {
        rbac::Policy::load(self.store, namespace).rules_for(user, namespace)
    }
}

/// The namespace the forbid rules see: `None` across all namespaces or for
/// a cluster-scoped resource.
fn namespace_of(resource: &ResourceAttributes) -> Option<&str> {
    Some(resource.namespace.as_str()).filter(|namespace| !namespace.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_accounts_user_name_splits_into_namespace_and_name() {
        assert_eq!(
            split_service_account("system:serviceaccount:shop:handlers"),
            Some(("shop", "handlers"))
        );
        assert_eq!(split_service_account("system:serviceaccount:shop"), None);
        assert_eq!(split_service_account("system:serviceaccount:shop:a:b"), None);
        assert_eq!(split_service_account("jane"), None);
    }
}
