//! Who a client is and what it may do: SelfSubjectReview, the access reviews and SelfSubjectRulesReview, answered from the same rules that authorize requests.
//!
//! A review is decided by the [`Authorizer`] that decides requests (the
//! forbid rules of [`Faults`], `system:masters`, then RBAC), so `kubectl
//! auth can-i` agrees with the `403`s the same request gets. A
//! SelfSubjectAccessReview asks about its requester (the impersonated user
//! under `--as`), a SubjectAccessReview or LocalSubjectAccessReview about
//! the user its spec names, and a SelfSubjectRulesReview (`kubectl auth
//! can-i --list`) lists the RBAC rules that apply to its requester in a
//! namespace.
//!
//! [`Faults`]: crate::Faults

use serde_json::{Value, json};

use crate::auth::{Attributes, Authorizer, User};
use crate::status::{ApiError, Result};

/// Answers an access review of `kind` (`SelfSubjectAccessReview` by
/// `requester`, `SubjectAccessReview`, `LocalSubjectAccessReview` in
/// `namespace`): the review with its status, as kube-apiserver writes it
/// (`allowed`, the authorizer's `reason` when it gives one).
///
/// # Errors
///
/// 400 for a body of another kind, 422 for one that asks about neither a
/// resource nor a path, names no user (for the reviews about another
/// subject), or a local review about another namespace, as kube-apiserver
/// validates them.
pub(crate) fn access_review(
    authorizer: &Authorizer<'_>,
    requester: &User,
    kind: &str,
    namespace: Option<&str>,
    review: &Value,
) -> Result<Value> {
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
    let attributes = Attributes::of_review(spec).ok_or_else(|| {
        invalid(
            "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
    })?;
    let user = if kind == "SelfSubjectAccessReview" {
        requester.clone()
    } else {
        User::of_review(spec)
    };
    let decision = authorizer.decide(&user, &attributes);
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    let mut metadata = json!({});
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    Ok(json!({
        "kind": kind,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }))
}

/// Answers a SelfSubjectRulesReview (`kubectl auth can-i --list`): the RBAC
/// rules that apply to `requester` in `spec.namespace`, each a resource
/// rule, a path rule or both, and the errors of bindings whose roles are
/// missing as its `evaluationError`.
///
/// # Errors
///
/// 400 for a body of another kind, 422 without `spec.namespace`.
pub(crate) fn self_subject_rules_review(
    authorizer: &Authorizer<'_>,
    requester: &User,
    review: &Value,
) -> Result<Value> {
    check_kind(review, "SelfSubjectRulesReview")?;
    let Some(namespace) = review["spec"]["namespace"]
        .as_str()
        .filter(|namespace| !namespace.is_empty())
    else {
        return Err(ApiError::invalid(
            "authorization.k8s.io",
            "SelfSubjectRulesReview",
            "",
            "spec.namespace: Required value",
        ));
    };
    let (rules, errors) = authorizer.rules_for(requester, namespace);
    let (mut resource_rules, mut path_rules) = (Vec::new(), Vec::new());
    for rule in &rules {
        let (resource, path) = rule.review_entries();
        resource_rules.extend(resource);
        path_rules.extend(path);
    }
    let mut status = json!({"resourceRules": resource_rules, "nonResourceRules": path_rules, "incomplete": false});
    if !errors.is_empty() {
        status["evaluationError"] = json!(errors);
    }
    Ok(json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {},
        "spec": review["spec"],
        "status": status,
    }))
}

/// Answers a SelfSubjectReview: the review with `status.userInfo`, the
/// requester's.
///
/// # Errors
///
/// 400 for a body that is no SelfSubjectReview.
pub(crate) fn self_subject_review(requester: &User, review: &Value) -> Result<Value> {
    check_kind(review, "SelfSubjectReview")?;
    Ok(json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {},
        "status": {"userInfo": requester.info()},
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
