//! The tenant policy: the bounds the platform team sets once on every
//! tenant's (namespaced) `Handler`, whatever its spec asks for.
//!
//! It is a TOML file given to the host (`kinformer run --handlers
//! --tenant-policy FILE`), mounted from a ConfigMap in the host's own
//! namespace: the bounds are there before the first Handler is read, a tenant
//! cannot write them whatever it may do in its namespace, and a change is a
//! rollout of the host, as for its other flags.
//!
//! ```toml
//! [registries]        # where their modules may be pulled from
//! allow = ["ghcr.io", "registry.example.com:5000"]
//! networks = ["10.30.0.0/16"]   # private CIDRs pulls may connect to
//! shared-cache = false          # true: a digest one namespace pulled runs for all
//!
//! [http]
//! allow = ["https://hooks.slack.com/services/", "https://*.example.com"]
//! networks = ["10.20.0.0/16"]
//!
//! [limits]            # the most a Handler may set; its default when lower
//! memory-mib = 32
//! cpu-millicores = 100
//! http-requests-per-second = 5
//!
//! [handlers]
//! per-namespace = 10
//! ```
//!
//! | a Handler asks for | answer |
//! | --- | --- |
//! | a module from a registry the policy does not list (or any, without `[registries]`) | refused: names the registry |
//! | a pull (any request of it, redirects and token realms too) to a loopback, link-local or private address no `[registries] networks` opens; to a metadata service, the API server or the host, whatever they open | refused: names the address and its kind |
//! | a digest another namespace pulled, in a repository its own credentials do not reach (unless `shared-cache`) | refused: the registry's status to a `HEAD` of the manifest |
//! | an HTTP entry no policy entry covers, or without a policy `[http]` | refused: names the entry |
//! | a network no policy network contains | refused: names it |
//! | a limit above its bound | refused: names the limit and the bound |
//! | no value for a limit whose default is above its bound | the bound |
//! | a place in its namespace past `per-namespace` (oldest first) | refused: says how many |
//!
//! A pull is a request the host makes for the tenant, so its registries are
//! the platform team's choice, never the tenant's: a name a tenant could
//! choose could be the API server, a cloud's metadata service or any address
//! the host's network reaches. For the same reason every connection of a pull
//! is checked as a plugin's is, with `[registries] networks` opened (for
//! ClusterHandlers' pulls too: it is the one list of where the host pulls
//! from). ClusterHandlers are the platform team's own and are not bounded
//! otherwise.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::spec::Refusal;
use crate::manifest::Manifest;
use crate::manifest::limits::KEYS;
use crate::outbound::{AllowedUrl, IpNet};

/// Why a tenant policy file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a policy: its TOML, a key, an entry or a bound is wrong.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, and where.
        message: String,
    },
}

/// The platform team's bounds on tenants' Handlers; the default bounds
/// nothing but HTTP, which no Handler may then use.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantPolicy {
    /// Registries (`HOST[:PORT]`, lower case) modules may be pulled from.
    registries: Vec<String>,
    /// The loopback, link-local and private networks pulls may connect to.
    registry_networks: Vec<IpNet>,
    /// Whether a digest one namespace pulled runs for another without a
    /// check of the other's credentials.
    shared_cache: bool,
    http: Vec<AllowedUrl>,
    networks: Vec<IpNet>,
    /// Manifest key of `[limits]` → the most a Handler may set.
    limits: BTreeMap<String, u64>,
    per_namespace: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    registries: RegistriesFile,
    #[serde(default)]
    http: HttpFile,
    #[serde(default)]
    limits: BTreeMap<String, u64>,
    #[serde(default)]
    handlers: HandlersFile,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RegistriesFile {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    networks: Vec<String>,
    #[serde(default)]
    shared_cache: bool,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    networks: Vec<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct HandlersFile {
    per_namespace: Option<usize>,
}

impl TenantPolicy {
    /// Reads the policy file at `path`.
    ///
    /// # Errors
    ///
    /// When it cannot be read or is not a policy.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|message| PolicyError::Invalid {
            path: path.display().to_string(),
            message,
        })
    }

    /// Reads a policy from its TOML text; the error says what and where.
    ///
    /// # Errors
    ///
    /// Bad TOML, an unknown key, an HTTP entry or network that does not
    /// parse, a limit that is not a key of `[limits]` or below its range.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: PolicyFile = toml::from_str(text).map_err(|error| error.to_string().trim_end().to_owned())?;
        let http = file
            .http
            .allow
            .iter()
            .map(|entry| AllowedUrl::parse(entry).map_err(|error| format!("http.allow: {error}")))
            .collect::<Result<_, _>>()?;
        let networks = cidrs(&file.http.networks, "http.networks")?;
        let registry_networks = cidrs(&file.registries.networks, "registries.networks")?;
        for (key, bound) in &file.limits {
            let Some((_, _, range)) = KEYS.iter().find(|(known, ..)| known == key) else {
                return Err(format!("limits.{key}: not a key of a manifest's [limits]"));
            };
            if bound < range.start() {
                return Err(format!(
                    "limits.{key} is {bound}: below the least a manifest may set ({})",
                    range.start()
                ));
            }
        }
        for registry in &file.registries.allow {
            let plain = !registry.is_empty()
                && registry
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
            if !plain {
                return Err(format!(
                    "registries.allow: {registry:?} is not HOST[:PORT] (no scheme, no path)"
                ));
            }
        }
        if file.handlers.per_namespace == Some(0) {
            return Err("handlers.per-namespace is 0: remove the Handler CRD rather than allow none".to_owned());
        }
        Ok(Self {
            registries: file
                .registries
                .allow
                .iter()
                .map(|registry| registry.to_ascii_lowercase())
                .collect(),
            registry_networks,
            shared_cache: file.registries.shared_cache,
            http,
            networks,
            limits: file.limits,
            per_namespace: file.handlers.per_namespace,
        })
    }

    /// How many Handlers of one namespace run at most, when bounded.
    #[must_use]
    pub fn per_namespace(&self) -> Option<usize> {
        self.per_namespace
    }

    /// The loopback, link-local and private networks a pull may connect to
    /// (`[registries] networks`).
    #[must_use]
    pub fn registry_networks(&self) -> &[IpNet] {
        &self.registry_networks
    }

    /// Whether a digest one namespace pulled runs for another without a
    /// check that the other's credentials reach its manifest
    /// (`[registries] shared-cache`).
    #[must_use]
    pub fn shares_cache(&self) -> bool {
        self.shared_cache
    }

    /// Lets a Handler's module be pulled from `registry` (`HOST[:PORT]`, as
    /// its reference names it) only when the policy lists it.
    ///
    /// # Errors
    ///
    /// [`Refusal::Policy`] naming the registry and the listed ones.
    pub fn check_registry(&self, registry: &str) -> Result<(), Refusal> {
        if self
            .registries
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(registry))
        {
            return Ok(());
        }
        Err(Refusal::Policy(format!(
            "spec.module.oci: registry {registry} is not one the tenant policy lets modules be pulled from ({})",
            listed(&self.registries)
        )))
    }

    /// Bounds a Handler's `spec.limits` (camelCase keys, as the API writes
    /// them): a value above its bound is refused, a default above it becomes
    /// the bound.
    ///
    /// # Errors
    ///
    /// [`Refusal::Policy`] naming the limit and its bound.
    pub fn bound_limits(&self, spec: &mut Value) -> Result<(), Refusal> {
        if self.limits.is_empty() {
            return Ok(());
        }
        let Some(spec) = spec.as_object_mut() else {
            return Ok(());
        };
        let limits = spec
            .entry("limits")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        let Some(limits) = limits.as_object_mut() else {
            // Not an object: the manifest's parser says so.
            return Ok(());
        };
        for (key, bound) in &self.limits {
            let set = limits.iter().find(|(name, _)| super::spec::kebab(name) == *key);
            match set {
                Some((name, value)) => {
                    if let Some(number) = value.as_u64()
                        && number > *bound
                    {
                        return Err(Refusal::Policy(format!(
                            "spec.limits.{name} is {number}: the tenant policy allows at most {bound}"
                        )));
                    }
                }
                None => {
                    let default = KEYS
                        .iter()
                        .find(|(known, ..)| known == key)
                        .map(|(_, default, _)| *default);
                    if default.is_some_and(|default| default > *bound) {
                        limits.insert(camel(key), Value::from(*bound));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks a Handler's HTTP grant: each entry inside one of the policy's,
    /// each network inside one of its networks.
    ///
    /// # Errors
    ///
    /// [`Refusal::Policy`] naming the first entry or network outside.
    pub fn check_http(&self, manifest: &Manifest) -> Result<(), Refusal> {
        let grant = manifest.grant.http();
        for entry in grant.entries() {
            if self.http.is_empty() {
                return Err(Refusal::Policy(format!(
                    "spec.grant.http.allow: {entry}: the tenant policy lets no Handler reach outside the cluster"
                )));
            }
            if !self.http.iter().any(|bound| bound.covers(entry)) {
                return Err(Refusal::Policy(format!(
                    "spec.grant.http.allow: {entry} is outside what the tenant policy allows ({})",
                    listed(&self.http)
                )));
            }
        }
        for network in grant.networks() {
            if !self.networks.iter().any(|bound| bound.contains(network)) {
                return Err(Refusal::Policy(format!(
                    "spec.grant.http.networks: {network} is outside the tenant policy's networks ({})",
                    listed(&self.networks)
                )));
            }
        }
        Ok(())
    }
}

/// The networks of `key`, each a CIDR.
fn cidrs(networks: &[String], key: &str) -> Result<Vec<IpNet>, String> {
    networks
        .iter()
        .map(|network| {
            network
                .parse::<IpNet>()
                .map_err(|_| format!("{key}: {network:?} is not a CIDR"))
        })
        .collect()
}

/// The policy's entries of one kind, for a refusal: `none` when it has none.
fn listed<T: std::fmt::Display>(entries: &[T]) -> String {
    if entries.is_empty() {
        return "none".to_owned();
    }
    entries.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// `memory-mib` → `memoryMib`.
fn camel(key: &str) -> String {
    let mut camel = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            camel.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            camel.push(c);
        }
    }
    camel
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn manifest(http: &str) -> Manifest {
        Manifest::parse(Path::new("h"), http).unwrap()
    }

    #[test]
    fn a_policy_file_is_checked_as_it_is_read() {
        let policy = TenantPolicy::parse(
            "[http]\nallow = [\"https://*.example.com\"]\nnetworks = [\"10.20.0.0/16\"]\n\
             [limits]\nmemory-mib = 32\n[handlers]\nper-namespace = 3\n",
        )
        .unwrap();
        assert_eq!(policy.per_namespace(), Some(3));
        for (text, wanted) in [
            ("[limits]\nmemory-mb = 32\n", "limits.memory-mb: not a key"),
            ("[limits]\nmemory-mib = 0\n", "below the least a manifest may set (1)"),
            ("[http]\nallow = [\"ftp://x\"]\n", "http.allow:"),
            ("[http]\nnetworks = [\"10.0.0.0\"]\n", "not a CIDR"),
            ("[handlers]\nper-namespace = 0\n", "per-namespace is 0"),
            ("[registries]\nallow = [\"https://ghcr.io\"]\n", "is not HOST[:PORT]"),
            (
                "[registries]\nnetworks = [\"127.0.0.1\"]\n",
                "registries.networks: \"127.0.0.1\" is not a CIDR",
            ),
            ("[registries]\nshared-cache = \"yes\"\n", "invalid type"),
            ("[tenants]\n", "unknown field `tenants`"),
        ] {
            let error = TenantPolicy::parse(text).unwrap_err();
            assert!(error.contains(wanted), "{text:?}: {error}");
        }
    }

    #[test]
    fn modules_come_only_from_the_registries_the_policy_lists() {
        let policy = TenantPolicy::parse("[registries]\nallow = [\"GHCR.io\", \"127.0.0.1:5000\"]\n").unwrap();
        assert_eq!(policy.check_registry("ghcr.io"), Ok(()));
        assert_eq!(policy.check_registry("127.0.0.1:5000"), Ok(()));
        let refusal = policy.check_registry("169.254.169.254").unwrap_err().to_string();
        assert!(
            refusal.contains("registry 169.254.169.254 is not one the tenant policy lets"),
            "{refusal}"
        );
        assert!(policy.check_registry("127.0.0.1:5001").is_err());
        let closed = TenantPolicy::default().check_registry("ghcr.io").unwrap_err();
        assert!(closed.to_string().ends_with("(none)"), "{closed}");
    }

    #[test]
    fn pulls_reach_only_the_networks_the_policy_opens_and_share_the_cache_only_when_it_says() {
        let closed = TenantPolicy::default();
        assert!(closed.registry_networks().is_empty());
        assert!(!closed.shares_cache());
        let policy = TenantPolicy::parse(
            "[registries]\nallow = [\"127.0.0.1:5000\"]\nnetworks = [\"127.0.0.1/32\", \"10.30.0.0/16\"]\n\
             shared-cache = true\n",
        )
        .unwrap();
        let networks: Vec<String> = policy.registry_networks().iter().map(ToString::to_string).collect();
        assert_eq!(networks, ["127.0.0.1/32", "10.30.0.0/16"]);
        assert!(policy.shares_cache());
        // The HTTP grant's networks are another list.
        let refusal = policy
            .check_http(&manifest(
                "[grant.http]\nallow = [\"http://10.30.0.5\"]\nnetworks = [\"10.30.0.0/16\"]\n",
            ))
            .unwrap_err();
        assert!(
            refusal.to_string().contains("lets no Handler reach outside"),
            "{refusal}"
        );
    }

    #[test]
    fn the_tenants_overlay_s_policy_is_a_policy() {
        let policy = TenantPolicy::parse(include_str!("../../../deploy/overlays/tenants/tenant-policy.toml")).unwrap();
        assert_eq!(policy.per_namespace(), Some(10));
    }

    #[test]
    fn a_limit_above_its_bound_is_refused_and_a_default_above_it_lowered() {
        let policy = TenantPolicy::parse("[limits]\nmemory-mib = 32\ncpu-millicores = 500\n").unwrap();
        let mut spec = json!({"limits": {"memoryMib": 64}});
        assert_eq!(
            policy.bound_limits(&mut spec),
            Err(Refusal::Policy(
                "spec.limits.memoryMib is 64: the tenant policy allows at most 32".to_owned()
            ))
        );
        let mut spec = json!({"limits": {"memoryMib": 16}});
        policy.bound_limits(&mut spec).unwrap();
        // 16 stays; the default CPU share (250) is under its bound.
        assert_eq!(spec, json!({"limits": {"memoryMib": 16}}));
        let mut spec = json!({});
        policy.bound_limits(&mut spec).unwrap();
        assert_eq!(spec, json!({"limits": {"memoryMib": 32}}));
    }

    #[test]
    fn http_is_granted_only_inside_the_policy_s_entries_and_networks() {
        let policy = TenantPolicy::parse(
            "[http]\nallow = [\"https://*.example.com\", \"https://hooks.slack.com/services/\"]\n\
             networks = [\"10.20.0.0/16\"]\n",
        )
        .unwrap();
        let granted = |allow: &str, networks: &str| {
            policy.check_http(&manifest(&format!(
                "[grant.http]\nallow = [{allow}]\nnetworks = [{networks}]\n"
            )))
        };
        assert_eq!(granted("\"https://api.example.com/v1\"", "\"10.20.3.0/24\""), Ok(()));
        assert_eq!(granted("\"https://*.eu.example.com\"", ""), Ok(()));
        assert_eq!(granted("\"https://hooks.slack.com/services/T0/\"", ""), Ok(()));
        for (allow, networks, named) in [
            ("\"https://example.com\"", "", "https://example.com is outside"),
            ("\"http://api.example.com\"", "", "http://api.example.com is outside"),
            ("\"https://api.example.com:8443\"", "", "is outside"),
            (
                "\"https://hooks.slack.com/\"",
                "",
                "https://hooks.slack.com/ is outside",
            ),
            ("\"https://*\"", "", "https://* is outside"),
            ("\"https://api.example.com\"", "\"10.0.0.0/8\"", "10.0.0.0/8 is outside"),
        ] {
            let refusal = granted(allow, networks).unwrap_err().to_string();
            assert!(refusal.contains(named), "{allow} {networks}: {refusal}");
        }
        let closed = TenantPolicy::default();
        let refusal = closed
            .check_http(&manifest("[grant.http]\nallow = [\"https://api.example.com\"]\n"))
            .unwrap_err();
        assert!(
            refusal.to_string().contains("lets no Handler reach outside"),
            "{refusal}"
        );
        assert_eq!(closed.check_http(&manifest("")), Ok(()));
    }
}
