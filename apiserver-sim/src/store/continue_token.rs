//! Continue tokens: where a paged list resumes, and the resourceVersion all its pages are served at.
//!
//! A token is opaque to clients, as the API server's are: URL-safe base64 of
//! `{"rv": 12, "start": "namespace/name"}`, the last key served.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::status::{ApiError, Result};

/// The token for the page after `key`, served at `rv`.
pub(super) fn encode(rv: u64, key: &str) -> String {
    URL_SAFE_NO_PAD.encode(json!({"rv": rv, "start": key}).to_string())
}

/// The resourceVersion and last key a token carries.
///
/// # Errors
///
/// 400 for a token this server did not make.
pub(super) fn decode(token: &str) -> Result<(u64, String)> {
    let invalid = || ApiError::bad_request("continue key is not valid");
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    let rv = value["rv"].as_u64().ok_or_else(invalid)?;
    let key = value["start"].as_str().ok_or_else(invalid)?.to_owned();
    Ok((rv, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_carries_its_resource_version_and_last_key() {
        let token = encode(42, "default/cm-9");
        assert_eq!(decode(&token).unwrap(), (42, "default/cm-9".to_owned()));
    }

    #[test]
    fn a_foreign_token_is_a_bad_request() {
        assert_eq!(decode("not a token").unwrap_err().code, 400);
        assert_eq!(decode(&URL_SAFE_NO_PAD.encode("{}")).unwrap_err().code, 400);
    }
}
