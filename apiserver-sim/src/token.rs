//! TokenRequests: the `serviceaccounts/token` subresource issues a short-lived token for a service account.
//!
//! The token has the shape of a kube-apiserver service account token (a JWT
//! with the issuer, audiences, expiry and the account's name and uid) but no
//! valid signature: the emulation authenticates no one.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::resources::ids;
use crate::status::{ApiError, Result};
use crate::store::{Store, rfc3339_in};

/// The issuer and default audience, as a cluster built by kubeadm names them.
const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// `spec.expirationSeconds` when the request sets none.
const DEFAULT_EXPIRATION: i64 = 3600;
/// The shortest expiry the API server grants.
const MIN_EXPIRATION: i64 = 600;

/// Answers a TokenRequest for the service account `namespace/name`: the
/// request with its spec defaulted and `status.token` and
/// `status.expirationTimestamp` filled in.
///
/// # Errors
///
/// 404 when the service account does not exist, 400 for a body that is no
/// TokenRequest, 422 for an expiry under ten minutes, as the API server
/// validates it.
pub(crate) fn issue(store: &Store, namespace: &str, name: &str, request: &Value) -> Result<Value> {
    let account = store.get(&ids::serviceaccounts(), Some(namespace), name)?;
    if let Some(kind) = request["kind"].as_str()
        && kind != "TokenRequest"
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind (TokenRequest)"
        )));
    }
    let spec = &request["spec"];
    let expiration = spec["expirationSeconds"].as_i64().unwrap_or(DEFAULT_EXPIRATION);
    if expiration < MIN_EXPIRATION {
        return Err(ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            name,
            &format!(
                "spec.expirationSeconds: Invalid value: {expiration}: may not specify a duration less than 10 minutes"
            ),
        ));
    }
    let audiences = match spec["audiences"].as_array() {
        Some(audiences) if !audiences.is_empty() => Value::Array(audiences.clone()),
        _ => json!([ISSUER]),
    };
    let uid = account.value["metadata"]["uid"].as_str().unwrap_or_default();
    let token = token(namespace, name, uid, &audiences, expiration);
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "audiences": audiences,
            "expirationSeconds": expiration,
            "boundObjectRef": spec.get("boundObjectRef").cloned().unwrap_or(Value::Null),
        },
        "status": {"token": token, "expirationTimestamp": rfc3339_in(expiration)},
    }))
}

/// A JWT with the claims of a service account token and a random signature.
fn token(namespace: &str, name: &str, uid: &str, audiences: &Value, expiration: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| i64::try_from(since.as_secs()).unwrap_or(i64::MAX));
    let header = json!({"alg": "RS256", "kid": "kinformer-sim"});
    let claims = json!({
        "aud": audiences,
        "exp": now.saturating_add(expiration),
        "iat": now,
        "iss": ISSUER,
        "jti": format!("{:032x}", rand::random::<u128>()),
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
        "nbf": now,
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
    });
    let signature: [u8; 32] = rand::random();
    format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        URL_SAFE_NO_PAD.encode(signature)
    )
}
