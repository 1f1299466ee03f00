//! Impersonation: the `Impersonate-*` headers, checked and applied as kube-apiserver's impersonation filter does.
//!
//! Each header is a request to act as someone, which the requester must be
//! allowed as the verb `impersonate`:
//!
//! | header | resource | API group | name |
//! |---|---|---|---|
//! | `Impersonate-User: system:serviceaccount:NS:NAME` | `serviceaccounts` in `NS` | `""` | `NAME` |
//! | `Impersonate-User: NAME` (anyone else) | `users` | `""` | `NAME` |
//! | `Impersonate-Group: NAME` (repeatable) | `groups` | `""` | `NAME` |
//! | `Impersonate-Extra-KEY: VALUE` | `userextras/KEY` | `authentication.k8s.io` | `VALUE` |
//! | `Impersonate-Uid: UID` | `uids` | `authentication.k8s.io` | `UID` |
//!
//! The first refused is kube-apiserver's `403` (`users "jane" is
//! forbidden: User "..." cannot impersonate resource "users" in API group ""
//! at the cluster scope`); a group, extra or uid without a user is a `500`
//! in plain text, as kube-apiserver answers it. The request then runs as the
//! impersonated user: a service account gets its groups unless groups are
//! given, and every user but `system:anonymous` is in
//! `system:authenticated` unless the groups given say otherwise.

use std::collections::BTreeMap;

use axum::http::HeaderMap;

use super::{
    AUTHENTICATED, Attributes, Authorizer, Refusal, ResourceAttributes, UNAUTHENTICATED, User, split_service_account,
};

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA: &str = "impersonate-extra-";
const ANONYMOUS: &str = "system:anonymous";

/// One thing to act as, as kube-apiserver lists them.
#[derive(Debug)]
enum Impersonation {
    ServiceAccount { namespace: String, name: String },
    User(String),
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

impl Impersonation {
    /// The `impersonate` request the requester must be allowed.
    fn attributes(&self) -> Attributes {
        let (group, version, resource, subresource, namespace, name) = match self {
            Self::ServiceAccount { namespace, name } => ("", "", "serviceaccounts", "", namespace.as_str(), name),
            Self::User(name) => ("", "", "users", "", "", name),
            Self::Group(name) => ("", "", "groups", "", "", name),
            Self::Extra { key, value } => ("authentication.k8s.io", "v1", "userextras", key.as_str(), "", value),
            Self::Uid(uid) => ("authentication.k8s.io", "v1", "uids", "", "", uid),
        };
        Attributes {
            verb: "impersonate".to_owned(),
            resource: Some(ResourceAttributes {
                group: group.to_owned(),
                version: version.to_owned(),
                resource: resource.to_owned(),
                subresource: subresource.to_owned(),
                namespace: namespace.to_owned(),
                name: name.clone(),
            }),
            path: String::new(),
        }
    }

    /// As Go prints the `ObjectReference` kube-apiserver makes of it (its
    /// kind, namespace, name, uid, API version, resourceVersion and field path).
    fn go_debug(&self) -> String {
        let (kind, namespace, name, api_version, field_path) = match self {
            Self::ServiceAccount { namespace, name } => ("ServiceAccount", namespace.as_str(), name.as_str(), "", ""),
            Self::User(name) => ("User", "", name.as_str(), "", ""),
            Self::Group(name) => ("Group", "", name.as_str(), "", ""),
            Self::Extra { key, value } => (
                "UserExtra",
                "",
                value.as_str(),
                "authentication.k8s.io/v1",
                key.as_str(),
            ),
            Self::Uid(uid) => ("UID", "", uid.as_str(), "authentication.k8s.io/v1", ""),
        };
        format!("{{{kind} {namespace} {name}  {api_version}  {field_path}}}")
    }
}

/// The user a request acts as: `requester`, or whom its `Impersonate-*`
/// headers name, once the requester is allowed to impersonate them.
///
/// # Errors
///
/// [`Refusal::Status`] (`403`) when the requester may not impersonate one
/// of them, [`Refusal::InternalError`] for groups, extras or a uid without a user;
/// `uri` is the request's, as the `500` names it.
pub(crate) fn impersonate(
    authorizer: &Authorizer<'_>,
    requester: User,
    headers: &HeaderMap,
    uri: &str,
) -> Result<User, Refusal> {
    let requests = requests(headers);
    if requests.is_empty() {
        return Ok(requester);
    }
    if !requests
        .iter()
        .any(|request| matches!(request, Impersonation::User(_) | Impersonation::ServiceAccount { .. }))
    {
        let listed: Vec<String> = requests.iter().map(Impersonation::go_debug).collect();
        return Err(Refusal::InternalError(format!(
            "Internal Server Error: {uri:?}: requested [{}] without impersonating a user\n",
            listed.join(" ")
        )));
    }
    let mut user = User::default();
    let groups_given = requests
        .iter()
        .any(|request| matches!(request, Impersonation::Group(_)));
    for request in &requests {
        let attributes = request.attributes();
        let decision = authorizer.decide(&requester, &attributes);
        if !decision.allowed {
            return Err(Refusal::Status(attributes.forbidden(&requester.name, &decision.reason)));
        }
        match request {
            Impersonation::ServiceAccount { namespace, name } => {
                user.name = super::service_account_name(namespace, name);
                if !groups_given {
                    user.groups = User::service_account(namespace, name, "").groups;
                    user.groups.retain(|group| group != AUTHENTICATED);
                }
            }
            Impersonation::User(name) => user.name.clone_from(name),
            Impersonation::Group(group) => user.groups.push(group.clone()),
            Impersonation::Extra { key, value } => user.extra.entry(key.clone()).or_default().push(value.clone()),
            Impersonation::Uid(uid) => user.uid.clone_from(uid),
        }
    }
    let given = |wanted: &[&str]| user.groups.iter().any(|group| wanted.contains(&group.as_str()));
    let implied = if user.name == ANONYMOUS {
        (!given(&[UNAUTHENTICATED])).then_some(UNAUTHENTICATED)
    } else {
        (!given(&[AUTHENTICATED, UNAUTHENTICATED])).then_some(AUTHENTICATED)
    };
    if let Some(group) = implied {
        user.groups.push(group.to_owned());
    }
    Ok(user)
}

/// The impersonations the headers ask for: the user, the groups, the
/// extras, the uid.
fn requests(headers: &HeaderMap) -> Vec<Impersonation> {
    let mut requests = Vec::new();
    let text = |value: &axum::http::HeaderValue| value.to_str().unwrap_or_default().to_owned();
    if let Some(user) = headers.get(USER).map(text).filter(|user| !user.is_empty()) {
        requests.push(match split_service_account(&user) {
            Some((namespace, name)) => Impersonation::ServiceAccount {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            },
            None => Impersonation::User(user),
        });
    }
    requests.extend(
        headers
            .get_all(GROUP)
            .iter()
            .map(|group| Impersonation::Group(text(group))),
    );
    let mut extras: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix(EXTRA) {
            extras
                .entry(unescape(key).to_lowercase())
                .or_default()
                .push(text(value));
        }
    }
    for (key, values) in extras {
        requests.extend(values.into_iter().map(|value| Impersonation::Extra {
            key: key.clone(),
            value,
        }));
    }
    if let Some(uid) = headers.get(UID).map(text).filter(|uid| !uid.is_empty()) {
        requests.push(Impersonation::Uid(uid));
    }
    requests
}

/// A header name's percent-escapes decoded, as extra keys are sent
/// (`Impersonate-Extra-Example.com%2fscopes`).
fn unescape(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = (bytes[at] == b'%')
            .then(|| key.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                at += 3;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_keys_are_unescaped_and_lowercased() {
        let mut headers = HeaderMap::new();
        headers.insert("impersonate-user", "jane".parse().unwrap());
        headers.insert("impersonate-extra-example.com%2Fscopes", "view".parse().unwrap());
        let requests = requests(&headers);
        assert!(
            matches!(&requests[1], Impersonation::Extra { key, value } if key == "example.com/scopes" && value == "view")
        );
        assert_eq!(unescape("a%zz%2"), "a%zz%2");
    }

    #[test]
    fn groups_without_a_user_are_named_as_go_prints_them() {
        let group = Impersonation::Group("system:masters".into());
        assert_eq!(group.go_debug(), "{Group  system:masters    }");
    }
}
