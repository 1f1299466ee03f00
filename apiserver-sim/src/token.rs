//! Service account tokens: the `serviceaccounts/token` subresource issues one (a TokenRequest), and a TokenReview checks one.
//!
//! The token has the claims of a kube-apiserver service account token (a JWT
//! with the issuer, audiences, expiry and the account's name and uid), signed
//! with HMAC-SHA256 under a key each server draws when it starts, so a
//! TokenReview accepts exactly the tokens this server issued, until they
//! expire or their service account is gone, and a request that sends one as
//! its bearer token is that service account's (see `auth`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use serde_json::{Value, json};

use crate::auth::User;
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
pub(crate) fn issue(store: &Store, key: &TokenKey, namespace: &str, name: &str, request: &Value) -> Result<Value> {
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
    let token = key.token(namespace, name, uid, &audiences, expiration);
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

/// The key a server signs its service account tokens with.
pub(crate) struct TokenKey(hmac::Key);

impl TokenKey {
    /// A key drawn at random, for one server's lifetime.
    pub(crate) fn random() -> Self {
        Self(hmac::Key::new(hmac::HMAC_SHA256, &rand::random::<[u8; 32]>()))
    }

    /// A JWT with the claims of a service account token, signed with this key.
    fn token(&self, namespace: &str, name: &str, uid: &str, audiences: &Value, expiration: i64) -> String {
        let now = unix_now();
        let header = json!({"alg": "HS256", "kid": "kinformer-sim"});
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
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = hmac::sign(&self.0, signed.as_bytes());
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }

    /// The claims of `token` when this key signed it and its issuer is this
    /// server's; `None` for any other text.
    fn claims(&self, token: &str) -> Option<Value> {
        let (signed, signature) = token.rsplit_once('.')?;
        let signature = URL_SAFE_NO_PAD.decode(signature).ok()?;
        hmac::verify(&self.0, signed.as_bytes(), &signature).ok()?;
        let (_, claims) = signed.split_once('.')?;
        let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()?;
        (claims["iss"] == ISSUER).then_some(claims)
    }
}

/// Answers a TokenReview: the review with `status.authenticated` and the
/// token's user when this server issued the token, it has not expired, one of
/// its audiences is asked for (the API server's own when the review names
/// none) and its service account still exists; `status.error` saying which
/// check failed otherwise, as kube-apiserver answers.
///
/// # Errors
///
/// 400 for a body that is no TokenReview or has no token.
pub(crate) fn review(store: &Store, key: &TokenKey, review: &Value) -> Result<Value> {
    if let Some(kind) = review["kind"].as_str()
        && kind != "TokenReview"
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind (TokenReview)"
        )));
    }
    let spec = &review["spec"];
    let token = spec["token"].as_str().unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let status = match verify(store, key, token, &spec["audiences"]) {
        Ok((user, audiences)) => json!({"authenticated": true, "user": user.info(), "audiences": audiences}),
        Err(why) => json!({"user": {}, "error": format!("[invalid bearer token, {why}]")}),
    };
    Ok(json!({
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {},
        "spec": spec,
        "status": status,
    }))
}

/// Who a bearer token says its sender is.
pub(crate) enum Authenticated {
    /// A token this server did not sign: no service account's.
    NotIssuedHere,
    /// A valid token of this service account's user.
    User(User),
    /// A token this server signed that is no longer valid, and why.
    Invalid(String),
}

/// Who sends requests with `token` as their bearer token: the service
/// account of a token this server issued for its own audience, while it
/// lasts and the account exists.
pub(crate) fn authenticate(store: &Store, key: &TokenKey, token: &str) -> Authenticated {
    if key.claims(token).is_none() {
        return Authenticated::NotIssuedHere;
    }
    match verify(store, key, token, &Value::Null) {
        Ok((user, _)) => Authenticated::User(user),
        Err(why) => Authenticated::Invalid(why),
    }
}

/// The user of a valid `token` and the audiences of those `asked` (the API
/// server's own when none are) it is valid for, or why it is not valid.
fn verify(
    store: &Store,
    key: &TokenKey,
    token: &str,
    asked: &Value,
) -> std::result::Result<(User, Vec<Value>), String> {
    let claims = key.claims(token).ok_or("token is not signed by this server")?;
    if claims["exp"].as_i64().is_none_or(|exp| exp <= unix_now()) {
        return Err("service account token has expired".into());
    }
    let asked: Vec<Value> = match asked.as_array() {
        Some(asked) if !asked.is_empty() => asked.clone(),
        _ => vec![json!(ISSUER)],
    };
    let granted = claims["aud"].as_array().cloned().unwrap_or_default();
    let audiences: Vec<Value> = asked
        .iter()
        .filter(|audience| granted.contains(audience))
        .cloned()
        .collect();
    if audiences.is_empty() {
        return Err(format!(
            "token audiences {} is invalid for the target audiences {}",
            Value::Array(granted),
            Value::Array(asked)
        ));
    }
    let owner = &claims["kubernetes.io"];
    let namespace = owner["namespace"].as_str().unwrap_or_default();
    let name = owner["serviceaccount"]["name"].as_str().unwrap_or_default();
    let uid = owner["serviceaccount"]["uid"].as_str().unwrap_or_default();
    let account = store
        .get(&ids::serviceaccounts(), Some(namespace), name)
        .ok()
        .filter(|account| account.value["metadata"]["uid"] == uid)
        .ok_or_else(|| format!("service account {namespace}/{name} has been deleted"))?;
    let mut user = User::service_account(
        namespace,
        name,
        account.value["metadata"]["uid"].as_str().unwrap_or_default(),
    );
    user.extra.insert(
        "authentication.kubernetes.io/credential-id".into(),
        vec![format!("JTI={}", claims["jti"].as_str().unwrap_or_default())],
    );
    Ok((user, audiences))
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| i64::try_from(since.as_secs()).unwrap_or(i64::MAX))
}
