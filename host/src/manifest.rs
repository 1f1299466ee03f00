//! Plugin manifests: what the operator grants a plugin, its limits and its config.
//!
//! A plugin `NAME.wasm` may have a manifest `NAME.toml` beside it, written by the
//! operator (never by the plugin's author alone: it is the plugin's sandbox).
//! Every field is optional; unknown fields are errors, so a typo never widens or
//! loosens anything silently.
//!
//! ```toml
//! # The string passed to the plugin's `init`.
//! config = "v1/Pod,apps/v1/Deployment"
//!
//! [grant]
//! # apiVersion/Kind patterns; `*` stands for any apiVersion or any kind.
//! resources = ["v1/Pod", "apps/v1/*"]
//! # Namespaces whose objects the plugin may see; `*` for all.
//! namespaces = ["shop", "payments"]
//!
//! [limits]
//! call-timeout-ms = 1000       # longest init or handle call
//! memory-mib = 64              # linear memory
//! query-objects = 1000         # objects per cache query
//! query-bytes = 16777216       # bytes of JSON per cache query
//! log-lines-per-second = 200
//! queue-capacity = 4096        # deltas queued before catch-up mode
//! max-batch = 64               # deltas per handle call
//!
//! [failures]
//! on-error = "retry"           # a batch `handle` rejects: "retry" or "skip"
//! retries = 5                  # then the batch is skipped
//! retry-backoff-ms = 100       # doubles per retry
//! restart-backoff-ms = 200     # after a trap; doubles per restart, at most 30 s
//! max-restarts = 5             # traps within the window before quarantine
//! restart-window-seconds = 300
//! ```
//!
//! Without a manifest (or without a `[grant]`), a plugin gets the **default
//! grant**: every resource except `v1/Secret`, in every namespace, with the
//! default limits. Secrets are only ever readable through an explicit grant that
//! names them (`v1/Secret`, `v1/*` or `*`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::api::GroupVersionKind;
use serde::Deserialize;

use crate::indexer::Scope;
use crate::plugin::{PluginOptions, QueryLimits};

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file exists but could not be read.
    #[error("{path}: cannot read the manifest")]
    Io {
        /// The manifest.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped fields.
    #[error("{path}: {message}")]
    Invalid {
        /// The manifest.
        path: PathBuf,
        /// What is wrong, with its line and column.
        message: String,
    },
}

/// An operator's manifest for one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The string passed to the plugin's `init`.
    pub config: String,
    /// What the plugin may watch and read.
    pub grant: Grant,
    /// The plugin's limits.
    pub limits: Limits,
    /// What happens when it fails.
    pub failures: FailurePolicy,
}

/// Which resources and namespaces a plugin may watch and read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    resources: Option<Vec<ResourcePattern>>,
    namespaces: Scope,
}

impl Default for Grant {
    /// The default grant: every resource but `v1/Secret`, every namespace.
    fn default() -> Self {
        Self {
            resources: None,
            namespaces: Scope::all(),
        }
    }
}

impl Grant {
    /// A grant of exactly these resources (`apiVersion/Kind` patterns) in these
    /// namespaces (`*` for all).
    ///
    /// # Errors
    ///
    /// When a pattern is malformed.
    pub fn new<'a>(
        resources: impl IntoIterator<Item = &'a str>,
        namespaces: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, String> {
        let resources = resources
            .into_iter()
            .map(ResourcePattern::parse)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            resources: Some(resources),
            namespaces: namespaces_scope(namespaces),
        })
    }

    /// True when the plugin may watch and read `gvk`.
    #[must_use]
    pub fn allows_resource(&self, gvk: &GroupVersionKind) -> bool {
        match &self.resources {
            None => !(gvk.group.is_empty() && gvk.version == "v1" && gvk.kind == "Secret"),
            Some(patterns) => patterns.iter().any(|pattern| pattern.matches(gvk)),
        }
    }

    /// The namespaces the plugin may see.
    #[must_use]
    pub fn namespaces(&self) -> &Scope {
        &self.namespaces
    }

    /// This grant narrowed to `scope` (the host's own namespace, say).
    #[must_use]
    pub fn within(mut self, scope: &Scope) -> Self {
        self.namespaces = self.namespaces.intersect(scope);
        self
    }
}

fn namespaces_scope<'a>(namespaces: impl IntoIterator<Item = &'a str>) -> Scope {
    let namespaces: Vec<&str> = namespaces.into_iter().collect();
    if namespaces.contains(&"*") {
        Scope::all()
    } else {
        Scope::only(namespaces)
    }
}

/// `apiVersion/Kind`, where either may be `*`; `*` alone is everything.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ResourcePattern {
    api_version: Option<String>,
    kind: Option<String>,
}

impl ResourcePattern {
    fn parse(pattern: &str) -> Result<Self, String> {
        let wild = |part: &str| (part != "*").then(|| part.to_owned());
        if pattern == "*" {
            return Ok(Self {
                api_version: None,
                kind: None,
            });
        }
        match pattern.rsplit_once('/') {
            Some((api_version, kind)) if !api_version.is_empty() && !kind.is_empty() => Ok(Self {
                api_version: wild(api_version),
                kind: wild(kind),
            }),
            _ => Err(format!(
                "resource {pattern:?}: want apiVersion/Kind (v1/Pod, apps/v1/Deployment, apps/v1/*) or *"
            )),
        }
    }

    fn matches(&self, gvk: &GroupVersionKind) -> bool {
        self.api_version.as_ref().is_none_or(|v| *v == gvk.api_version())
            && self.kind.as_ref().is_none_or(|kind| *kind == gvk.kind)
    }
}

/// A plugin's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest one `init` or `handle` call may run.
    pub call_timeout: Duration,
    /// The most linear memory, in bytes.
    pub memory_bytes: usize,
    /// Objects per cache query.
    pub query_objects: usize,
    /// Bytes of JSON per cache query.
    pub query_bytes: usize,
    /// Log lines per second.
    pub log_lines_per_second: u32,
    /// Deltas queued per handler before catch-up mode.
    pub queue_capacity: usize,
    /// Deltas per `handle` call at most.
    pub max_batch: usize,
}

impl Default for Limits {
    fn default() -> Self {
        let options = PluginOptions::default();
        Self {
            call_timeout: options.call_timeout,
            memory_bytes: options.max_memory_bytes,
            query_objects: options.query_limits.max_objects,
            query_bytes: options.query_limits.max_bytes,
            log_lines_per_second: options.log_lines_per_second,
            queue_capacity: 4096,
            max_batch: 64,
        }
    }
}

impl Limits {
    /// The instance options these limits make.
    #[must_use]
    pub fn plugin_options(&self) -> PluginOptions {
        PluginOptions {
            call_timeout: self.call_timeout,
            max_memory_bytes: self.memory_bytes,
            query_limits: QueryLimits {
                max_objects: self.query_objects,
                max_bytes: self.query_bytes,
            },
            log_lines_per_second: self.log_lines_per_second,
            ..PluginOptions::default()
        }
    }
}

/// What to do with a batch the plugin rejects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// Deliver it again, with backoff, up to `retries` times; then skip it.
    Retry,
    /// Skip it (counted and logged).
    Skip,
}

/// How failures are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailurePolicy {
    /// A batch `handle` returned an error for.
    pub on_error: OnError,
    /// Deliveries of one batch after the first, when retrying.
    pub retries: u32,
    /// The first retry's delay; it doubles per retry.
    pub retry_backoff: Duration,
    /// The first restart's delay after a trap; it doubles per restart, to 30 s.
    pub restart_backoff: Duration,
    /// Traps within the window that quarantine the plugin.
    pub max_restarts: u32,
    /// The window traps are counted in.
    pub restart_window: Duration,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        Self {
            on_error: OnError::Retry,
            retries: 5,
            retry_backoff: Duration::from_millis(100),
            restart_backoff: Duration::from_millis(200),
            max_restarts: 5,
            restart_window: Duration::from_secs(300),
        }
    }
}

/// The longest restart delay.
pub const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(30);

/// The file layout of a manifest.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct File {
    config: Option<String>,
    grant: Option<GrantFile>,
    limits: Option<LimitsFile>,
    failures: Option<FailuresFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct GrantFile {
    resources: Option<Vec<String>>,
    namespaces: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct LimitsFile {
    call_timeout_ms: Option<u64>,
    memory_mib: Option<u64>,
    query_objects: Option<u64>,
    query_bytes: Option<u64>,
    log_lines_per_second: Option<u32>,
    queue_capacity: Option<u64>,
    max_batch: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FailuresFile {
    on_error: Option<OnError>,
    retries: Option<u32>,
    retry_backoff_ms: Option<u64>,
    restart_backoff_ms: Option<u64>,
    max_restarts: Option<u32>,
    restart_window_seconds: Option<u64>,
}

/// The most memory a manifest may grant, in MiB.
pub const MAX_MEMORY_MIB: u64 = 1024;

impl Manifest {
    /// The manifest path of a plugin file: `NAME.wasm` → `NAME.toml`.
    #[must_use]
    pub fn path_for(plugin: &Path) -> PathBuf {
        plugin.with_extension("toml")
    }

    /// Reads the manifest of the plugin file `plugin`; the defaults when there is
    /// none.
    ///
    /// # Errors
    ///
    /// When the manifest exists but cannot be read or is invalid.
    pub fn for_plugin(plugin: &Path) -> Result<Self, Error> {
        let path = Self::path_for(plugin);
        match std::fs::read_to_string(&path) {
            Ok(text) => Self::parse(&path, &text),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(Error::Io { path, source }),
        }
    }

    /// Parses a manifest's text; `path` names it in errors.
    ///
    /// # Errors
    ///
    /// When it is not valid TOML, has unknown or mistyped fields, or a value is
    /// out of range.
    pub fn parse(path: &Path, text: &str) -> Result<Self, Error> {
        let invalid = |message: String| Error::Invalid {
            path: path.to_owned(),
            message,
        };
        let file: File = toml::from_str(text).map_err(|error| {
            let message = error.message().trim().to_owned();
            match error.span().map(|span| line_and_column(text, span.start)) {
                Some((line, column)) => invalid(format!("line {line}, column {column}: {message}")),
                None => invalid(message),
            }
        })?;
        let mut manifest = Self {
            config: file.config.unwrap_or_default(),
            ..Self::default()
        };
        if let Some(grant) = file.grant {
            let resources = grant
                .resources
                .map(|patterns| {
                    patterns
                        .iter()
                        .map(|pattern| ResourcePattern::parse(pattern))
                        .collect::<Result<Vec<_>, _>>()
                })
                .transpose()
                .map_err(|message| invalid(format!("grant.resources: {message}")))?;
            manifest.grant = Grant {
                resources,
                namespaces: grant
                    .namespaces
                    .map_or_else(Scope::all, |names| namespaces_scope(names.iter().map(String::as_str))),
            };
        }
        let limits = file.limits.unwrap_or_default();
        let defaults = Limits::default();
        let range = |field: &str, value: Option<u64>, min: u64, max: u64, default: u64| match value {
            None => Ok(default),
            Some(value) if (min..=max).contains(&value) => Ok(value),
            Some(value) => Err(invalid(format!("limits.{field} is {value}: must be {min} to {max}"))),
        };
        manifest.limits = Limits {
            call_timeout: Duration::from_millis(range(
                "call-timeout-ms",
                limits.call_timeout_ms,
                10,
                60_000,
                defaults.call_timeout.as_millis() as u64,
            )?),
            memory_bytes: (range(
                "memory-mib",
                limits.memory_mib,
                1,
                MAX_MEMORY_MIB,
                (defaults.memory_bytes >> 20) as u64,
            )? << 20) as usize,
            query_objects: range(
                "query-objects",
                limits.query_objects,
                1,
                100_000,
                defaults.query_objects as u64,
            )? as usize,
            query_bytes: range(
                "query-bytes",
                limits.query_bytes,
                1024,
                1 << 30,
                defaults.query_bytes as u64,
            )? as usize,
            log_lines_per_second: range(
                "log-lines-per-second",
                limits.log_lines_per_second.map(u64::from),
                1,
                1_000_000,
                u64::from(defaults.log_lines_per_second),
            )? as u32,
            queue_capacity: range(
                "queue-capacity",
                limits.queue_capacity,
                1,
                1 << 20,
                defaults.queue_capacity as u64,
            )? as usize,
            max_batch: range("max-batch", limits.max_batch, 1, 4096, defaults.max_batch as u64)? as usize,
        };
        let failures = file.failures.unwrap_or_default();
        let defaults = FailurePolicy::default();
        let millis = |value: Option<u64>, default: Duration| value.map_or(default, Duration::from_millis);
        manifest.failures = FailurePolicy {
            on_error: failures.on_error.unwrap_or(defaults.on_error),
            retries: failures.retries.unwrap_or(defaults.retries),
            retry_backoff: millis(failures.retry_backoff_ms, defaults.retry_backoff),
            restart_backoff: millis(failures.restart_backoff_ms, defaults.restart_backoff).min(MAX_RESTART_BACKOFF),
            max_restarts: failures.max_restarts.unwrap_or(defaults.max_restarts),
            restart_window: failures
                .restart_window_seconds
                .map_or(defaults.restart_window, Duration::from_secs),
        };
        Ok(manifest)
    }
}

/// The 1-based line and column of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |last| last.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Manifest, Error> {
        Manifest::parse(Path::new("p.toml"), text)
    }

    fn gvk(group: &str, version: &str, kind: &str) -> GroupVersionKind {
        GroupVersionKind::gvk(group, version, kind)
    }

    #[test]
    fn no_manifest_is_the_default_grant_without_secrets() {
        let manifest = parse("").unwrap();
        assert_eq!(manifest, Manifest::default());
        assert!(manifest.grant.allows_resource(&gvk("", "v1", "Pod")));
        assert!(manifest.grant.allows_resource(&gvk("apps", "v1", "Deployment")));
        assert!(!manifest.grant.allows_resource(&gvk("", "v1", "Secret")));
        assert!(manifest.grant.namespaces().is_all());
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            Manifest::for_plugin(&dir.path().join("absent.wasm")).unwrap(),
            Manifest::default()
        );
    }

    #[test]
    fn a_full_manifest_is_read() {
        let manifest = parse(
            r#"
            config = "v1/Pod"
            [grant]
            resources = ["v1/Pod", "apps/v1/*", "*/Lease"]
            namespaces = ["a", "b"]
            [limits]
            call-timeout-ms = 250
            memory-mib = 16
            max-batch = 8
            [failures]
            on-error = "skip"
            max-restarts = 2
            "#,
        )
        .unwrap();
        assert_eq!(manifest.config, "v1/Pod");
        let grant = &manifest.grant;
        assert!(grant.allows_resource(&gvk("", "v1", "Pod")));
        assert!(grant.allows_resource(&gvk("apps", "v1", "StatefulSet")));
        assert!(grant.allows_resource(&gvk("coordination.k8s.io", "v1", "Lease")));
        assert!(!grant.allows_resource(&gvk("", "v1", "ConfigMap")));
        assert!(!grant.allows_resource(&gvk("apps", "v2", "Deployment")));
        assert!(grant.namespaces().allows("a") && !grant.namespaces().allows("c"));
        assert!(!grant.clone().within(&Scope::only(["b"])).namespaces().allows("a"));
        assert_eq!(manifest.limits.call_timeout, Duration::from_millis(250));
        assert_eq!(manifest.limits.memory_bytes, 16 << 20);
        assert_eq!(manifest.limits.max_batch, 8);
        assert_eq!(manifest.limits.query_objects, Limits::default().query_objects);
        assert_eq!(manifest.failures.on_error, OnError::Skip);
        assert_eq!(manifest.failures.max_restarts, 2);
        assert_eq!(manifest.failures.retries, FailurePolicy::default().retries);
        // Secrets only when named.
        assert!(
            Grant::new(["*"], ["*"])
                .unwrap()
                .allows_resource(&gvk("", "v1", "Secret"))
        );
    }

    #[test]
    fn broken_manifests_are_refused_saying_where() {
        let message = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(
            message("[grant]\nresorces = [\"v1/Pod\"]\n"),
            "p.toml: line 2, column 1: unknown field `resorces`, expected `resources` or `namespaces`"
        );
        assert!(message("config = 3").starts_with("p.toml: line 1, column 10: invalid type"));
        assert!(message("[limits\n").starts_with("p.toml: line 1"));
        assert_eq!(
            message("[limits]\nmemory-mib = 4096"),
            "p.toml: limits.memory-mib is 4096: must be 1 to 1024"
        );
        assert!(message("[grant]\nresources = [\"Pod\"]").contains("grant.resources: resource \"Pod\""));
        assert!(message("[failures]\non-error = \"ignore\"").contains("unknown variant `ignore`"));
    }
}
