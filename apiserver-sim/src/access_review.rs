//! Who a client is and what it may do: SelfSubjectReview, the access reviews and SelfSubjectRulesReview, answered as the emulation's forbid rules decide.
//!
//! The emulation authenticates no one: every client is the one user
//! [`USER`]. It may do anything but what [`Faults::forbid`] and its kin
//! forbid, and an access review answers exactly that, so `kubectl auth
//! can-i` agrees with the 403s the same request would get. A
//! SubjectAccessReview or LocalSubjectAccessReview about another user
//! answers the same: RBAC objects are stored, not enforced.
//!
//! [`Faults::forbid`]: crate::Faults::forbid

use serde_json::{Value, json};

use crate::faults::Faults;
use crate::status::{ApiError, Result, USER};

/// The groups [`USER`] is in, as kube-apiserver lists a service account's.
const GROUPS: [&str; 3] = [
    "system:serviceaccounts",
    "system:serviceaccounts:kinformer",
    "system:authenticated",
];

/// Answers an access review of `kind` (`SelfSubjectAccessReview`,
/// `SubjectAccessReview`, `LocalSubjectAccessReview` in `namespace`): the
/// review with `status.allowed`.
///
/// # Errors
///
/// 400 for a body of another kind, 422 for one that asks about neither a
/// resource nor a path, names no user (for the reviews about another
/// subject), or a local review about another namespace, as kube-apiserver
/// validates them.
pub(crate) fn access_review(faults: &Faults, kind: &str, namespace: Option<&str>, review: &Value) -> Result<Value> {
    check_kind(review, kind)?;
    let spec = &review["spec"];
    let invalid = |message: &str| ApiError::invalid("authorization.k8s.io", kind, "", message);
    if kind != "SelfSubjectAccessReview"
        && spec["user"].as_str().is_none_or(str::is_empty)
        && spec["groups"].as_array().is_none_or(Vec::is_empty)
        && spec["uid"].as_str().is_none_or(str::is_empty)
    {
        return Err(invalid(
            "spec.user: Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    if let Some(namespace) = namespace
        && spec["resourceAttributes"]["namespace"].as_str() != Some(namespace)
    {
        return Err(invalid(&format!(
            "spec.resourceAttributes.namespace: Invalid value: {:?}: must match metadata.namespace",
            spec["resourceAttributes"]["namespace"].as_str().unwrap_or_default()
        )));
    }
    let resource = &spec["resourceAttributes"];
    let allowed = match (resource.is_object(), spec["nonResourceAttributes"].is_object()) {
        (true, false) => {
            let plural = resource["resource"].as_str().unwrap_or_default();
            let namespace = resource["namespace"].as_str().filter(|namespace| !namespace.is_empty());
            !faults.forbids(plural, namespace)
        }
        (false, true) => true,
        _ => {
            return Err(invalid(
                "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        }
    };
    let mut metadata = json!({});
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    Ok(json!({
        "kind": kind,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": metadata,
        "spec": spec,
        "status": {"allowed": allowed},
    }))
}

/// Answers a SelfSubjectRulesReview (`kubectl auth can-i --list`): every
/// verb on every resource and path, as `cluster-admin` has them, and the
/// rules of `system:basic-user` and `system:discovery` that kube-apiserver
/// lists beside them.
///
/// # Errors
///
/// 400 for a body of another kind, 422 without `spec.namespace`.
pub(crate) fn self_subject_rules_review(review: &Value) -> Result<Value> {
    check_kind(review, "SelfSubjectRulesReview")?;
    if review["spec"]["namespace"].as_str().is_none_or(str::is_empty) {
        return Err(ApiError::invalid(
            "authorization.k8s.io",
            "SelfSubjectRulesReview",
            "",
            "spec.namespace: Required value",
        ));
    }
    Ok(json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {},
        "spec": review["spec"],
        "status": {
            "resourceRules": [
                {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
                {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
                {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
            ],
            "nonResourceRules": [
                {"verbs": ["*"], "nonResourceURLs": ["*"]},
                {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"]},
            ],
            "incomplete": false,
        },
    }))
}

/// Answers a SelfSubjectReview: the review with `status.userInfo`.
///
/// # Errors
///
/// 400 for a body that is no SelfSubjectReview.
pub(crate) fn self_subject_review(review: &Value) -> Result<Value> {
    check_kind(review, "SelfSubjectReview")?;
    Ok(json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {},
        "status": {"userInfo": {"username": USER, "groups": GROUPS}},
    }))
}

fn check_kind(review: &Value, expected: &str) -> Result<()> {
    match review["kind"].as_str() {
        None => Ok(()),
        Some(kind) if kind == expected => Ok(()),
        Some(kind) => Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({expected})"
        ))),
    }
}
