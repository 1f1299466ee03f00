//! Looking up the names plugins' requests name: on a resolver of the host's
//! own, never on the blocking thread pool.
//!
//! A name that never answers would hold a thread of tokio's blocking pool
//! (`getaddrinfo` cannot be cancelled) past the request's connect timeout,
//! and the pool is shared with everything else the host does; so names are
//! looked up with [`hickory_resolver`] from the system's configuration
//! (`/etc/resolv.conf`, `/etc/hosts`: in a pod, the cluster's DNS and its
//! search domains), each lookup within the request's connect timeout and at
//! most [`LOOKUPS_IN_FLIGHT`] at once per plugin. Overrides set by the host's
//! operator (or a test) answer their names first, as `/etc/hosts` would.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use hickory_resolver::TokioResolver;

/// Lookups one plugin may have in flight at once; more wait their turn
/// within their connect timeout.
pub const LOOKUPS_IN_FLIGHT: usize = 2;

/// Why a name has no addresses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The name does not exist, or has no address records.
    #[error("{0}: no such host")]
    NotFound(String),
    /// The lookup failed: no DNS server answered, or the system's
    /// configuration cannot be read.
    #[error("{name}: lookup failed: {message}")]
    Failed {
        /// The name.
        name: String,
        /// What the resolver said.
        message: String,
    },
}

/// The host's resolver for plugins' requests. Cheap to clone; clones share
/// the resolver and its cache.
#[derive(Clone, Default)]
pub struct Resolver {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Names answered without asking DNS, lower case, without a trailing dot.
    overrides: BTreeMap<String, Vec<IpAddr>>,
    /// Built at the first lookup, from the system's configuration; `None`
    /// when it cannot be read.
    system: OnceLock<Option<TokioResolver>>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("overrides", &self.inner.overrides)
            .finish_non_exhaustive()
    }
}

impl Resolver {
    /// A resolver that answers `name` with `addresses`, before and instead
    /// of DNS (as an `/etc/hosts` line would): the operator's way to pin a
    /// name, and the tests' way to give names addresses.
    #[must_use]
    pub fn with_override(self, name: &str, addresses: impl IntoIterator<Item = IpAddr>) -> Self {
        let mut overrides = self.inner.overrides.clone();
        overrides.insert(normal(name), addresses.into_iter().collect());
        Self {
            inner: Arc::new(Inner {
                overrides,
                system: OnceLock::new(),
            }),
        }
    }

    /// The addresses of `name`.
    ///
    /// # Errors
    ///
    /// When the name has none, or the lookup fails.
    pub async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        let name = normal(name);
        if let Some(addresses) = self.inner.overrides.get(&name) {
            return Ok(addresses.clone());
        }
        let Some(system) = self.inner.system.get_or_init(system_resolver) else {
            return Err(ResolveError::Failed {
                name,
                message: "the system's DNS configuration cannot be read".into(),
            });
        };
        match system.lookup_ip(name.as_str()).await {
            Ok(found) => {
                let addresses: Vec<IpAddr> = found.iter().collect();
                if addresses.is_empty() {
                    Err(ResolveError::NotFound(name))
                } else {
                    Ok(addresses)
                }
            }
            Err(error) if error.is_no_records_found() || error.is_nx_domain() => Err(ResolveError::NotFound(name)),
            Err(error) => Err(ResolveError::Failed {
                name,
                message: error.to_string(),
            }),
        }
    }
}

fn normal(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

fn system_resolver() -> Option<TokioResolver> {
    match TokioResolver::builder_tokio() {
        Ok(mut builder) => {
            let options = builder.options_mut();
            options.timeout = std::time::Duration::from_secs(2);
            options.attempts = 2;
            Some(builder.build())
        }
        Err(error) => {
            tracing::warn!("plugins' outbound HTTP cannot look names up: {error}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_override_answers_its_name_in_any_case_and_with_a_trailing_dot() {
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let resolver = Resolver::default().with_override("Hooks.Internal.", [ip]);
        assert_eq!(resolver.lookup("hooks.internal").await, Ok(vec![ip]));
        assert_eq!(resolver.lookup("HOOKS.internal.").await, Ok(vec![ip]));
    }
}
