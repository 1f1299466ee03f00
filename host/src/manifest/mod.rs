//! The manifest file format: what the operator grants a plugin, its limits and
//! its config, read from `NAME.toml` beside `NAME.wasm`.
//!
//! A plugin `NAME.wasm` may have a manifest `NAME.toml` beside it, written by the
//! operator (never by the plugin's author alone: it is the plugin's sandbox).
//! Every field is optional; unknown fields are errors, so a typo never widens or
//! loosens anything silently.
//!
//! ```toml
//! # The string passed to the plugin's `init`.
//! config = "v1/Pod,apps/v1/Deployment"
//! # "dry-run": every write is sent with dryRun=All and persists nothing.
//! mode = "live"
//!
//! [grant]
//! # apiVersion/Kind patterns; `*` stands for any apiVersion or any kind.
//! resources = ["v1/Pod", "apps/v1/*"]
//! # Namespaces whose objects the plugin may see; `*` for all.
//! namespaces = ["shop", "payments"]
//!
//! # Writes, one table per rule; none by default.
//! [[grant.write]]
//! verbs = ["patch", "update"]     # create, update, patch, apply, delete
//! # apiVersion/Kind[/subresource]; an object's subresources are granted by name.
//! resources = ["apps/v1/Deployment/scale", "autoscaling/v2/HorizontalPodAutoscaler/status"]
//! namespaces = ["shop"]           # default: the namespaces of the grant
//!
//! [[grant.write]]                 # record-event creates events.k8s.io/v1 Events
//! verbs = ["create"]
//! resources = ["events.k8s.io/v1/Event"]
//!
//! [limits]                     # every key: the fields of `limits::Limits`
//! call-timeout-ms = 1000       # longest init or handle call
//! memory-mib = 64              # memories, tables, what the host holds for it
//! writes-per-second = 10       # token bucket of the plugin's writes...
//! write-burst = 20             # ...and its size
//!
//! [failures]
//! on-error = "retry"           # a batch `handle` rejects: "retry" or "skip"
//! retries = 5                  # then the batch is skipped
//! retry-backoff-ms = 100       # doubles per retry
//! restart-backoff-ms = 200     # after a trap; doubles per restart, at most 30 s
//! max-restarts = 5             # traps within the window before quarantine
//! restart-window-seconds = 300
//!
//! # Only in a next version's manifest (`NAME.next.toml`): how it runs
//! # beside the running `NAME.wasm`.
//! [rollout]
//! mode = "shadow"              # or "canary"
//! percent = 0                  # a canary's share of the keys, 0 to 100
//! window-seconds = 60          # the window the versions are compared over
//! max-error-rate-increase = 10 # percentage points of errors per call over the running version's
//! max-trap-increase = 1        # traps over the running version's
//! max-refusal-increase = 5     # refused writes over the running version's
//! min-calls = 10               # calls before the error rate counts
//! ```
//!
//! Without a manifest (or without a `[grant]`), a plugin gets the **default
//! grant**: every resource except `v1/Secret`, in every namespace, no writes,
//! with the default limits. Secrets are only ever readable through an explicit grant that
//! names them (`v1/Secret`, `v1/*` or `*`).

pub mod limits;

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::rollout::{RolloutMode, RolloutPolicy};

use crate::grant::{Grant, HttpGrant, Scope, Verb, WriteMode, WriteRule};
use crate::limits::{FailurePolicy, Limits, LimitsFile, MAX_RESTART_BACKOFF, OnError};

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file exists but could not be read: not a regular file, too large,
    /// or an I/O error.
    #[error("{path}: cannot read the manifest")]
    Io {
        /// The manifest.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::file::FileError,
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
    /// Whether its writes are made or only validated by the server.
    pub mode: WriteMode,
    /// What the plugin may watch, read and write.
    pub grant: Grant,
    /// The plugin's limits.
    pub limits: Limits,
    /// What happens when it fails.
    pub failures: FailurePolicy,
    /// The plugin's environment variables, in the manifest's order.
    pub env: Vec<EnvVar>,
    /// How a next version runs beside the running one (`[rollout]`).
    pub rollout: Option<RolloutPolicy>,
    /// Who the plugin acts as on the API server: the host when `None`. No
    /// manifest text sets it; an embedder does (a namespaced `Handler` acts
    /// as its ServiceAccount).
    pub identity: Option<crate::grant::Identity>,
}

/// One environment variable of a plugin (`[env]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvVar {
    /// Its name.
    pub name: String,
    /// Where its value comes from.
    pub value: EnvValue,
}

/// Where an environment variable's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvValue {
    /// Written in the manifest.
    Literal(String),
    /// A key of a Secret, read and watched by the host.
    Secret(KeyRef),
    /// A key of a ConfigMap, read and watched by the host.
    ConfigMap(KeyRef),
}

/// A key of a namespaced Secret or ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyRef {
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The key in its `data`.
    pub key: String,
}

impl std::fmt::Display for KeyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} key {}", self.namespace, self.name, self.key)
    }
}

/// The most environment variables a manifest may set.
pub const MAX_ENV_VARS: usize = 64;

/// The file layout of a manifest.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct File {
    config: Option<String>,
    mode: Option<WriteMode>,
    grant: Option<GrantFile>,
    limits: Option<LimitsFile>,
    failures: Option<FailuresFile>,
    env: Option<toml::Spanned<std::collections::BTreeMap<String, toml::Value>>>,
    rollout: Option<RolloutFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RolloutFile {
    mode: Option<RolloutMode>,
    percent: Option<i64>,
    window_seconds: Option<u64>,
    max_error_rate_increase: Option<u32>,
    max_trap_increase: Option<u32>,
    max_refusal_increase: Option<u32>,
    min_calls: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct HttpGrantFile {
    allow: toml::Spanned<Vec<String>>,
    networks: Option<toml::Spanned<Vec<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ReadRuleFile {
    resources: toml::Spanned<Vec<String>>,
    namespaces: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct GrantFile {
    resources: Option<Vec<String>>,
    namespaces: Option<Vec<String>>,
    write: Option<Vec<WriteRuleFile>>,
    read: Option<Vec<ReadRuleFile>>,
    http: Option<HttpGrantFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct WriteRuleFile {
    verbs: Vec<Verb>,
    resources: toml::Spanned<Vec<String>>,
    namespaces: Option<Vec<String>>,
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
        match Self::read(&path) {
            Ok(Some(text)) => Self::parse(&path, &text),
            Ok(None) => Ok(Self::default()),
            Err(error) => Err(error),
        }
    }

    /// Reads a manifest's text: `None` when there is none; an error when it is
    /// not a regular file, over [`crate::file::MAX_MANIFEST_BYTES`] or not UTF-8.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] or, for text that is not UTF-8, [`Error::Invalid`].
    pub fn read(path: &Path) -> Result<Option<String>, Error> {
        match crate::file::read_regular(path, crate::file::MAX_MANIFEST_BYTES) {
            Ok(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| Error::Invalid {
                path: path.to_owned(),
                message: "not UTF-8 text".into(),
            }),
            Err(error) if error.is_not_found() => Ok(None),
            Err(source) => Err(Error::Io {
                path: path.to_owned(),
                source,
            }),
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
        let at = |offset: usize, message: String| {
            let (line, column) = line_and_column(text, offset);
            invalid(format!("line {line}, column {column}: {message}"))
        };
        let mut manifest = Self {
            config: file.config.unwrap_or_default(),
            mode: file.mode.unwrap_or_default(),
            ..Self::default()
        };
        if let Some(grant) = file.grant {
            fn strs(names: &[String]) -> Vec<&str> {
                names.iter().map(String::as_str).collect()
            }
            let reads = Grant::from_parts(
                grant.resources.as_deref().map(strs),
                grant.namespaces.as_deref().map(strs),
            )
            .map_err(|message| invalid(format!("grant.resources: {message}")))?;
            let mut writes = Vec::new();
            for (i, rule) in grant.write.unwrap_or_default().into_iter().enumerate() {
                let namespaces = match &rule.namespaces {
                    Some(names) => Scope::from_names(strs(names)),
                    None => reads.namespaces().clone(),
                };
                let offset = rule.resources.span().start;
                if let Some(verb) = rule.verbs.iter().find(|verb| matches!(verb, Verb::Get | Verb::List)) {
                    return Err(at(
                        offset,
                        format!("grant.write[{i}]: {verb} is granted in [[grant.read]], not as a write"),
                    ));
                }
                let written = WriteRule::new(rule.verbs, strs(rule.resources.get_ref()), namespaces)
                    .map_err(|message| at(offset, format!("grant.write[{i}]: {message}")))?;
                writes.push(written);
            }
            for (i, rule) in grant.read.unwrap_or_default().into_iter().enumerate() {
                let namespaces = match &rule.namespaces {
                    Some(names) => Scope::from_names(strs(names)),
                    None => reads.namespaces().clone(),
                };
                let offset = rule.resources.span().start;
                let read = WriteRule::new([Verb::Get, Verb::List], strs(rule.resources.get_ref()), namespaces)
                    .map_err(|message| at(offset, format!("grant.read[{i}]: {message}")))?;
                writes.push(read);
            }
            let http = match grant.http {
                Some(http) => {
                    let offset = http.allow.span().start;
                    let grant = HttpGrant::new(strs(http.allow.get_ref()))
                        .map_err(|message| at(offset, format!("grant.http.allow: {message}")))?;
                    match &http.networks {
                        Some(networks) => grant
                            .with_networks(strs(networks.get_ref()))
                            .map_err(|message| at(networks.span().start, format!("grant.http.networks: {message}")))?,
                        None => grant,
                    }
                }
                None => HttpGrant::default(),
            };
            manifest.grant = reads.with_writes(writes).with_http(http);
        }
        if let Some(env) = file.env {
            let offset = env.span().start;
            manifest.env = parse_env(env.into_inner()).map_err(|message| at(offset, format!("env: {message}")))?;
        }
        manifest.limits = file.limits.unwrap_or_default().limits().map_err(invalid)?;
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
        if let Some(rollout) = file.rollout {
            let defaults = RolloutPolicy::default();
            let percent = match rollout.percent {
                None => defaults.percent,
                // Within 0 to 100, a u8.
                Some(percent) => in_range("rollout", "percent", percent, &(0..=100)).map_err(invalid)? as u8,
            };
            let window = match rollout.window_seconds {
                None => defaults.window,
                Some(seconds) => {
                    Duration::from_secs(in_range("rollout", "window-seconds", seconds, &(1..=86_400)).map_err(invalid)?)
                }
            };
            manifest.rollout = Some(RolloutPolicy {
                mode: rollout.mode.unwrap_or(defaults.mode),
                percent,
                window,
                max_error_rate_increase: rollout
                    .max_error_rate_increase
                    .unwrap_or(defaults.max_error_rate_increase),
                max_trap_increase: rollout.max_trap_increase.unwrap_or(defaults.max_trap_increase),
                max_refusal_increase: rollout.max_refusal_increase.unwrap_or(defaults.max_refusal_increase),
                min_calls: rollout.min_calls.unwrap_or(defaults.min_calls),
            });
        }
        Ok(manifest)
    }
}

/// The `[env]` table: names checked, references split into namespace, name
/// and key.
fn parse_env(table: std::collections::BTreeMap<String, toml::Value>) -> Result<Vec<EnvVar>, String> {
    if table.len() > MAX_ENV_VARS {
        return Err(format!("{} variables, at most {MAX_ENV_VARS}", table.len()));
    }
    table
        .into_iter()
        .map(|(name, value)| {
            let valid_name = name.len() <= 256
                && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid_name {
                return Err(format!("{name:?} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"));
            }
            let value = match value {
                toml::Value::String(text) => EnvValue::Literal(text),
                toml::Value::Table(reference) => env_reference(&name, &reference)?,
                other => {
                    return Err(format!(
                        "{name}: a {} is neither a string nor {{ secret | configmap = \"namespace/name\", key = \"...\" }}",
                        other.type_str()
                    ));
                }
            };
            Ok(EnvVar { name, value })
        })
        .collect()
}

/// One `{ secret = "namespace/name", key = "..." }` (or `configmap`) reference.
fn env_reference(name: &str, reference: &toml::Table) -> Result<EnvValue, String> {
    let text = |field: &str| match reference.get(field) {
        None => Ok(None),
        Some(toml::Value::String(text)) => Ok(Some(text.as_str())),
        Some(other) => Err(format!("{name}: {field} is a {}, not a string", other.type_str())),
    };
    if let Some(unknown) = reference
        .keys()
        .find(|field| !["secret", "configmap", "key"].contains(&field.as_str()))
    {
        return Err(format!(
            "{name}: unknown field `{unknown}`, expected one of `secret`, `configmap`, `key`"
        ));
    }
    let key = text("key")?
        .ok_or_else(|| format!("{name}: missing field `key`"))?
        .to_owned();
    let key_ref = |text: &str| match text.split_once('/') {
        Some((namespace, object)) if !namespace.is_empty() && !object.is_empty() && !object.contains('/') => {
            Ok(KeyRef {
                namespace: namespace.to_owned(),
                name: object.to_owned(),
                key: key.clone(),
            })
        }
        _ => Err(format!("{name}: {text:?} is not namespace/name")),
    };
    match (text("secret")?, text("configmap")?) {
        (Some(secret), None) => Ok(EnvValue::Secret(key_ref(secret)?)),
        (None, Some(configmap)) => Ok(EnvValue::ConfigMap(key_ref(configmap)?)),
        _ => Err(format!("{name}: name exactly one of secret or configmap")),
    }
}

/// `number` when `range` holds it; else why not, as
/// `limits.memory-mib is 4096: must be 1 to 1024`.
fn in_range<T: PartialOrd + std::fmt::Display>(
    table: &str,
    key: &str,
    number: T,
    range: &RangeInclusive<T>,
) -> Result<T, String> {
    if range.contains(&number) {
        Ok(number)
    } else {
        Err(format!(
            "{table}.{key} is {number}: must be {} to {}",
            range.start(),
            range.end()
        ))
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
    use crate::grant::Scope;
    use kube::api::GroupVersionKind;

    fn parse(text: &str) -> Result<Manifest, Error> {
        Manifest::parse(Path::new("p.toml"), text)
    }

    fn gvk(group: &str, version: &str, kind: &str) -> GroupVersionKind {
        GroupVersionKind::gvk(group, version, kind)
    }

    /// The manifest reference, `docs/manifest.md`.
    fn reference() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/manifest.md");
        std::fs::read_to_string(path).expect("docs/manifest.md is the manifest reference")
    }

    /// The reference's defaults block.
    fn documented_defaults() -> String {
        let page = reference();
        let block = page
            .split("<!-- defaults: begin -->")
            .nth(1)
            .and_then(|rest| rest.split("<!-- defaults: end -->").next())
            .expect("the reference marks its defaults block");
        block
            .lines()
            .filter(|line| !line.starts_with("```"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_manifest_reference_gives_every_limit_and_failure_key_with_the_code_s_default() {
        let text = documented_defaults();
        assert_eq!(
            parse(&text).expect("the documented defaults parse"),
            Manifest::default(),
            "docs/manifest.md's defaults differ from the code's"
        );
        // Every key is there: the limits as the table declares them; the
        // failure policy destructured whole, so that a new field fails to
        // compile here until the reference (and this list) names it.
        let table: toml::Table = text.parse().expect("the documented defaults parse");
        let documented = table["limits"].as_table().expect("the reference has a [limits] table");
        let limits = limits::KEYS
            .iter()
            .map(|(key, ..)| (*key, documented.contains_key(*key)));
        let file: File = toml::from_str(&text).expect("the documented defaults parse");
        let FailuresFile {
            on_error,
            retries,
            retry_backoff_ms,
            restart_backoff_ms,
            max_restarts,
            restart_window_seconds,
        } = file.failures.expect("the reference has a [failures] table");
        let failures = [
            ("on-error", on_error.is_some()),
            ("retries", retries.is_some()),
            ("retry-backoff-ms", retry_backoff_ms.is_some()),
            ("restart-backoff-ms", restart_backoff_ms.is_some()),
            ("max-restarts", max_restarts.is_some()),
            ("restart-window-seconds", restart_window_seconds.is_some()),
        ];
        let missing: Vec<&str> = limits
            .chain(failures)
            .filter(|(_, given)| !given)
            .map(|(key, _)| key)
            .collect();
        assert!(missing.is_empty(), "docs/manifest.md's defaults lack {missing:?}");
        assert!(
            file.mode.is_some() && file.config.is_some(),
            "the defaults give mode and config"
        );
    }

    #[test]
    fn the_manifest_reference_s_limits_table_gives_each_key_s_default_and_range() {
        let page = reference();
        let section = page
            .split("\n## `[limits]`\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("the reference has a [limits] section");
        // `| `key` | default | min–max | what |`
        let documented: Vec<(&str, u64, RangeInclusive<u64>)> = section
            .lines()
            .filter(|line| line.starts_with("| `"))
            .map(|line| {
                let cells: Vec<&str> = line.split(" | ").collect();
                let number = |text: &str| text.parse().unwrap_or_else(|_| panic!("{text:?} in {line:?}"));
                let (min, max) = cells[2]
                    .split_once('–')
                    .unwrap_or_else(|| panic!("no min–max in {line:?}"));
                let key = cells[0].trim_start_matches("| ").trim_matches('`');
                (key, number(cells[1]), number(min)..=number(max))
            })
            .collect();
        assert_eq!(
            documented,
            limits::KEYS,
            "docs/manifest.md's [limits] table differs from the code's keys, defaults or ranges"
        );
    }

    #[test]
    fn every_limit_takes_its_bounds_and_refuses_a_value_past_them() {
        let message = |text: &str| parse(text).unwrap_err().to_string();
        for (key, _, range) in limits::KEYS {
            let (min, max) = (*range.start(), *range.end());
            for bound in [min, max] {
                assert!(parse(&format!("[limits]\n{key} = {bound}")).is_ok(), "{key} = {bound}");
            }
            assert_eq!(
                message(&format!("[limits]\n{key} = {}", max + 1)),
                format!("p.toml: limits.{key} is {}: must be {min} to {max}", max + 1)
            );
            if min > 0 {
                assert_eq!(
                    message(&format!("[limits]\n{key} = {}", min - 1)),
                    format!("p.toml: limits.{key} is {}: must be {min} to {max}", min - 1)
                );
            }
        }
        let keys: Vec<String> = limits::KEYS.iter().map(|(key, ..)| format!("`{key}`")).collect();
        assert_eq!(
            message("[limits]\nmemory-mb = 64"),
            format!(
                "p.toml: line 2, column 1: unknown field `memory-mb`, expected one of {}",
                keys.join(", ")
            )
        );
    }

    #[test]
    fn a_limit_set_in_the_manifest_s_unit_is_converted_to_the_field_s() {
        let limits = parse("[limits]\ncall-timeout-ms = 250\nmemory-mib = 16\nmodule-mib = 2\nquery-bytes = 2048")
            .unwrap()
            .limits;
        assert_eq!(limits.call_timeout, Duration::from_millis(250));
        assert_eq!(limits.memory_bytes, 16 << 20);
        assert_eq!(limits.module_bytes, 2 << 20);
        assert_eq!(limits.query_bytes, 2048);
        assert_eq!(Limits::default().memory_bytes, 64 << 20);
        assert_eq!(Limits::default().call_timeout, Duration::from_secs(1));
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
            cpu-millicores = 200
            memory-mib = 16
            max-batch = 8
            batch-window-ms = 0
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
        assert_eq!(manifest.limits.cpu_millicores, 200);
        assert_eq!(Limits::default().cpu_millicores, 250);
        assert_eq!(manifest.limits.memory_bytes, 16 << 20);
        assert_eq!(manifest.limits.max_batch, 8);
        assert_eq!(manifest.limits.batch_window, Duration::ZERO);
        assert_eq!(Limits::default().batch_window, Duration::ZERO);
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
    fn write_rules_and_write_limits_are_read() {
        let manifest = parse(
            r#"
            mode = "dry-run"
            [grant]
            namespaces = ["a", "b"]
            [[grant.write]]
            verbs = ["patch", "update"]
            resources = ["apps/v1/Deployment/scale", "autoscaling/v2/HorizontalPodAutoscaler/status"]
            namespaces = ["*"]
            [[grant.write]]
            verbs = ["create"]
            resources = ["events.k8s.io/v1/Event"]
            [limits]
            writes-per-second = 3
            write-burst = 4
            write-timeout-ms = 500
            "#,
        )
        .unwrap();
        assert_eq!(manifest.mode, WriteMode::DryRun);
        let grant = &manifest.grant;
        let deployments = gvk("apps", "v1", "Deployment");
        let hpas = gvk("autoscaling", "v2", "HorizontalPodAutoscaler");
        let events = gvk("events.k8s.io", "v1", "Event");
        assert!(grant.allows_write(Verb::Patch, &deployments, Some("scale"), Some("z")));
        assert!(grant.allows_write(Verb::Update, &hpas, Some("status"), Some("z")));
        assert!(!grant.allows_write(Verb::Patch, &deployments, None, Some("z")));
        assert!(!grant.allows_write(Verb::Create, &deployments, Some("scale"), Some("z")));
        // The events rule took the grant's namespaces.
        assert!(grant.allows_write(Verb::Create, &events, None, Some("b")));
        assert!(!grant.allows_write(Verb::Create, &events, None, Some("z")));
        assert_eq!(grant.writes().len(), 2);
        assert_eq!(manifest.limits.writes_per_second, 3);
        assert_eq!(manifest.limits.write_burst, 4);
        assert_eq!(manifest.limits.write_timeout, Duration::from_millis(500));

        let defaults = parse("").unwrap();
        assert_eq!(defaults.mode, WriteMode::Live);
        assert!(defaults.grant.writes().is_empty());
        assert_eq!(defaults.limits.writes_per_second, Limits::default().writes_per_second);
    }

    #[test]
    fn broken_write_rules_are_refused_saying_where() {
        let message = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(
            message("[[grant.write]]\nverbs = [\"patch\"]\nresources = [\"v1/Pod\"]\nnamespace = [\"a\"]\n"),
            "p.toml: line 4, column 1: unknown field `namespace`, expected one of `verbs`, `resources`, `namespaces`"
        );
        assert!(
            message("[[grant.write]]\nverbs = [\"scale\"]\nresources = [\"v1/Pod\"]\n")
                .starts_with("p.toml: line 2, column 10: unknown variant `scale`"),
        );
        assert!(message("[[grant.write]]\nverbs = [\"patch\"]\n").contains("missing field `resources`"));
        assert!(
            message("[[grant.write]]\nverbs = [\"patch\"]\nresources = [\"v1/Pod\", \"pods\"]\n")
                .starts_with("p.toml: line 3, column 13: grant.write[0]: resource \"pods\""),
        );
        assert_eq!(
            message("[[grant.write]]\nverbs = []\nresources = [\"v1/Pod\"]\n"),
            "p.toml: line 3, column 13: grant.write[0]: a write rule needs at least one verb"
        );
        assert!(message("mode = \"wet-run\"").contains("unknown variant `wet-run`"));
        assert_eq!(
            message("[limits]\nwrites-per-second = 0"),
            "p.toml: limits.writes-per-second is 0: must be 1 to 10000"
        );
    }

    #[test]
    fn broken_manifests_are_refused_saying_where() {
        let message = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(
            message("[grant]\nresorces = [\"v1/Pod\"]\n"),
            "p.toml: line 2, column 1: unknown field `resorces`, expected one of `resources`, `namespaces`, `write`, `read`, `http`"
        );
        assert!(message("config = 3").starts_with("p.toml: line 1, column 10: invalid type"));
        assert!(message("[limits\n").starts_with("p.toml: line 1"));
        assert_eq!(
            message("[limits]\nmemory-mib = 4096"),
            "p.toml: limits.memory-mib is 4096: must be 1 to 1024"
        );
        assert_eq!(
            message("[limits]\ncpu-millicores = 2000"),
            "p.toml: limits.cpu-millicores is 2000: must be 10 to 1000"
        );
        assert!(message("[grant]\nresources = [\"Pod\"]").contains("grant.resources: resource \"Pod\""));
        assert!(message("[failures]\non-error = \"ignore\"").contains("unknown variant `ignore`"));
    }

    #[test]
    fn a_rollout_is_read_and_a_share_outside_0_to_100_is_refused() {
        let manifest = parse("[rollout]\nmode = \"canary\"\npercent = 20\nmin-calls = 3\n").unwrap();
        let rollout = manifest.rollout.unwrap();
        assert_eq!(
            (rollout.mode, rollout.percent, rollout.min_calls),
            (RolloutMode::Canary, 20, 3)
        );
        assert_eq!(rollout.window, RolloutPolicy::default().window);
        assert_eq!(parse("").unwrap().rollout, None);
        for percent in [0, 100] {
            let text = format!("[rollout]\nmode = \"canary\"\npercent = {percent}\n");
            assert_eq!(parse(&text).unwrap().rollout.unwrap().percent, percent);
        }
        let message = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(
            message("[rollout]\npercent = 101"),
            "p.toml: rollout.percent is 101: must be 0 to 100"
        );
        assert_eq!(
            message("[rollout]\npercent = -1"),
            "p.toml: rollout.percent is -1: must be 0 to 100"
        );
        assert!(message("[rollout]\nmode = \"blue-green\"").contains("unknown variant `blue-green`"));
    }

    #[test]
    fn reads_http_and_env_are_read() {
        let manifest = parse(
            "[grant]\nresources = [\"v1/Pod\"]\nnamespaces = [\"a\"]\n\
             [[grant.read]]\nresources = [\"metrics.k8s.io/v1beta1/PodMetrics\"]\n\
             [grant.http]\nallow = [\"https://hooks.slack.com/services/\", \"http://*.monitoring.svc:9093\"]\n\
             networks = [\"10.96.0.0/12\"]\n\
             [env]\nGREETING = \"hi\"\nSLACK_URL = { secret = \"monitoring/slack\", key = \"url\" }\n\
             LEVEL = { configmap = \"a/settings\", key = \"level\" }\n",
        )
        .unwrap();
        let metrics = gvk("metrics.k8s.io", "v1beta1", "PodMetrics");
        // A read rule takes the grant's namespaces and allows get and list, never a write.
        assert!(manifest.grant.allows_write(Verb::List, &metrics, None, Some("a")));
        assert!(manifest.grant.allows_write(Verb::Get, &metrics, None, Some("a")));
        assert!(!manifest.grant.allows_write(Verb::List, &metrics, None, Some("b")));
        assert!(!manifest.grant.allows_write(Verb::Patch, &metrics, None, Some("a")));
        let allowed: Vec<String> = manifest
            .grant
            .http()
            .entries()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            allowed,
            ["https://hooks.slack.com/services/", "http://*.monitoring.svc:9093"]
        );
        assert_eq!(manifest.grant.http().networks(), ["10.96.0.0/12".parse().unwrap()]);
        let names: Vec<&str> = manifest.env.iter().map(|var| var.name.as_str()).collect();
        assert_eq!(names, ["GREETING", "LEVEL", "SLACK_URL"]);
        assert_eq!(manifest.env[0].value, EnvValue::Literal("hi".into()));
        assert_eq!(
            manifest.env[2].value,
            EnvValue::Secret(KeyRef {
                namespace: "monitoring".into(),
                name: "slack".into(),
                key: "url".into()
            })
        );
        assert!(matches!(&manifest.env[1].value, EnvValue::ConfigMap(key) if key.name == "settings"));
        assert!(parse("").unwrap().grant.http().is_empty());
    }

    #[test]
    fn broken_reads_http_and_env_are_refused_saying_where() {
        let message = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(
            message("[[grant.write]]\nverbs = [\"list\"]\nresources = [\"v1/Pod\"]\n"),
            "p.toml: line 3, column 13: grant.write[0]: list is granted in [[grant.read]], not as a write"
        );
        assert!(
            message("[grant.http]\nallow = [\"ftp://example.com/\"]")
                .starts_with("p.toml: line 2, column 9: grant.http.allow:")
        );
        assert!(message("[grant.http]\nallow = [\"https://example.com/a/../b\"]").contains("grant.http.allow:"));
        assert_eq!(
            message("[grant.http]\nallow = []\nnetworks = [\"10.0.0.0\"]"),
            "p.toml: line 3, column 12: grant.http.networks: \"10.0.0.0\": a network is a CIDR, e.g. 10.96.0.0/12 or fd00::/8"
        );
        assert!(message("[env]\n\"1BAD\" = \"x\"").contains("\"1BAD\" is not an environment variable name"));
        assert!(
            message("[env]\nA = { secret = \"slack\", key = \"url\" }").contains("A: \"slack\" is not namespace/name")
        );
        assert!(
            message("[env]\nA = { secret = \"a/b\", configmap = \"a/c\", key = \"url\" }")
                .contains("A: name exactly one of secret or configmap")
        );
        assert!(message("[env]\nA = { secret = \"a/b\" }").contains("A: missing field `key`"));
        assert!(
            message("[env]\nA = { secret = \"a/b\", key = \"k\", namespace = \"c\" }")
                .contains("A: unknown field `namespace`")
        );
        assert!(message("[env]\nA = 3").contains("A: a integer is neither a string nor"));
        let many: String = (0..=MAX_ENV_VARS).map(|i| format!("V{i} = \"x\"\n")).collect();
        assert!(message(&format!("[env]\n{many}")).contains("65 variables, at most 64"));
        assert_eq!(
            message("[limits]\nhttp-concurrent = 0"),
            "p.toml: limits.http-concurrent is 0: must be 1 to 1024"
        );
    }
}
