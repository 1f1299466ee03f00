//! Who a client is and what it may do: SelfSubjectReview and SelfSubjectAccessReview, answered as the emulation's forbid rules decide.
//!
//! The emulation authenticates no one: every client is the one user
//! [`USER`]. It may do anything but what [`Faults::forbid`] and its kin
//! forbid, and an access review answers exactly that, so `kubectl auth
//! can-i` agrees with the 403s the same request would get.
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

/// Answers a SelfSubjectAccessReview: the review with `status.allowed`.
///
/// # Errors
///
/// 400 for a body that is no SelfSubjectAccessReview, 422 for one that asks
/// about neither a resource nor a path, as kube-apiserver validates it.
pub(crate) fn self_subject_access_review(faults: &Faults, review: &Value) -> Result<Value> {
    check_kind(review, "SelfSubjectAccessReview")?;
    let spec = &review["spec"];
    let resource = &spec["resourceAttributes"];
    let allowed = match (resource.is_object(), spec["nonResourceAttributes"].is_object()) {
        (true, false) => {
            let plural = resource["resource"].as_str().unwrap_or_default();
            let namespace = resource["namespace"].as_str().filter(|namespace| !namespace.is_empty());
            !faults.forbids(plural, namespace)
        }
        (false, true) => true,
        _ => {
            return Err(ApiError::invalid(
                "authorization.k8s.io",
                "SelfSubjectAccessReview",
                "",
                "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        }
    };
    Ok(json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {},
        "spec": spec,
        "status": {"allowed": allowed},
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
