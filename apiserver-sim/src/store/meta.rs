//! Server-set metadata: valid names, generated names, uids and timestamps.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::resources::ResourceDef;
use crate::status::{ApiError, Result};

/// A DNS subdomain: at most 253 lowercase alphanumerics, `-` and `.`. An
/// APIService is named `version.group`, `v1.` for the core group; the RBAC
/// objects take any name that is a path segment (`system:basic-user`).
pub(super) fn check_name(def: &ResourceDef, name: &str) -> Result<()> {
    if def.group == "rbac.authorization.k8s.io" {
        let why = match name {
            "." | ".." => format!("may not be '{name}'"),
            _ if name.contains('/') => "may not contain '/'".to_owned(),
            _ if name.contains('%') => "may not contain '%'".to_owned(),
            _ => return Ok(()),
        };
        return Err(ApiError::invalid(
            &def.group,
            &def.kind,
            name,
            &format!("metadata.name: Invalid value: {name:?}: {why}"),
        ));
    }
    let subdomain = |name: &str| {
        name.len() <= 253
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let valid = match name.split_once('.') {
        Some((version, group)) if def.kind == "APIService" && def.group == "apiregistration.k8s.io" => {
            subdomain(version) && (group.is_empty() || subdomain(group))
        }
        _ => subdomain(name),
    };
    if valid {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &def.group,
            &def.kind,
            name,
            &format!(
                "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ),
        ))
    }
}

/// A random version 4 UUID, as `metadata.uid` carries.
pub(super) fn new_uid() -> String {
    let bits: u128 = rand::random();
    let bits = (bits & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The five characters `generateName` gets appended, from the API server's alphabet.
pub(super) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The current time as Kubernetes writes timestamps: `2026-01-02T03:04:05Z`.
#[must_use]
pub fn now_rfc3339() -> String {
    rfc3339_in(0)
}

/// The time `seconds` from now, as Kubernetes writes timestamps.
#[must_use]
pub fn rfc3339_in(seconds: i64) -> String {
    let time = Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
        .unwrap_or(Timestamp::MAX);
    // `metav1.Time` serializes as the API server does: UTC, whole seconds, `Z`.
    let time = serde_json::to_value(Time(time)).expect("metav1.Time serializes");
    time.as_str().expect("metav1.Time serializes as a string").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_have_whole_seconds_in_utc() {
        let now = now_rfc3339();
        assert_eq!(now.len(), "2026-12-02T10:00:00Z".len(), "{now}");
        assert!(now.ends_with('Z'), "{now}");
        assert!(now.parse::<Timestamp>().is_ok(), "{now}");
    }

    #[test]
    fn uids_are_version_4_uuids() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert!(matches!(&uid[19..20], "8" | "9" | "a" | "b"), "{uid}");
    }
}
