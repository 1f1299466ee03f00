//! A Handler's `spec` as a manifest: the confinement of a namespaced one, and
//! its camelCase fields turned into the manifest's TOML so that
//! [`Manifest::parse`] makes every check a manifest file gets.
//!
//! A namespaced Handler is confined before it is parsed, and refused (never
//! narrowed) when it asks for more than its namespace:
//!
//! | asks for | answer |
//! | --- | --- |
//! | no `grant.namespaces` (or a write or read rule without `namespaces`) | its own namespace |
//! | another namespace, or `*` | refused: names it |
//! | no `grant.resources`, or a pattern with a wildcard kind | refused: it would take cluster-scoped kinds |
//! | a cluster-scoped kind (discovery says) | refused: names it |
//! | `grant.http` | bounded by the tenant policy ([`super::policy`]) |
//! | `v1/Secret` in `grant.resources` | refused: its cache reads are not bounded by its ServiceAccount |
//! | an `env` Secret (the host would read it, not its ServiceAccount) | refused |
//! | an `env` ConfigMap of another namespace | refused: names it |
//!
//! Every Handler, namespaced or not, is refused (never trimmed) when a list
//! of its grant holds more than [`MAX_ITEMS`] entries or one entry twice,
//! and when a name it gives (`serviceAccountName`, a ConfigMap, a Secret, a
//! namespace) is not a Kubernetes name: names reach the API server as path
//! segments, so only names that need no encoding are sent at all.

use std::path::Path;

use serde_json::{Map, Value};

use super::oci::PullError;
use crate::manifest::Manifest;

/// Why a Handler's spec does not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// It asks for more than a namespaced Handler may have.
    #[error("{0}")]
    Confinement(String),
    /// The manifest it makes is invalid.
    #[error("{0}")]
    Manifest(String),
    /// Its module's pull was refused: a tag, a digest mismatch, no Wasm
    /// layer, too large, a broken manifest.
    #[error(transparent)]
    Pull(#[from] PullError),
    /// Its module cannot be read.
    #[error("{0}")]
    Module(String),
    /// It asks for more than the tenant policy allows.
    #[error("{0}")]
    Policy(String),
    /// A name it gives is not a Kubernetes name, or a list of its grant is
    /// too long or holds an entry twice.
    #[error("{0}")]
    Invalid(String),
    /// Its plugin's name is held by a plugin the operator runs (the plugin
    /// directory's or the embedder's): a Handler never replaces one.
    #[error("the plugin name {plugin} is held by {holder}; a Handler never replaces a plugin the operator runs")]
    Taken {
        /// The Handler's plugin name.
        plugin: String,
        /// What holds it, in words.
        holder: String,
    },
    /// Its namespace already runs as many Handlers as the tenant policy
    /// allows, all older than it.
    #[error("namespace {namespace} runs {allowed} Handlers, the most the tenant policy allows; this one is newer")]
    Quota {
        /// Its namespace.
        namespace: String,
        /// The policy's `per-namespace`.
        allowed: usize,
    },
}

impl Refusal {
    /// The reason of the Handler's `Ready` condition: `Rejected`, or a
    /// refused pull's ([`PullError::reason`]).
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Pull(error) => error.reason(),
            _ => "Rejected",
        }
    }
}

/// Where a Handler's module comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleSource {
    /// A key of a ConfigMap's `binaryData`.
    ConfigMap(ModuleRef),
    /// An OCI artifact (`spec.module.oci`).
    Oci {
        /// `REGISTRY/REPOSITORY@sha256:...` (or `:TAG` when tags are allowed).
        reference: String,
        /// The `kubernetes.io/dockerconfigjson` Secret holding the registry's
        /// credentials (`spec.module.pullSecret`), by namespace and name.
        pull_secret: Option<(String, String)>,
    },
}

/// Where a Handler's module is: a key of a ConfigMap's `binaryData`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleRef {
    /// The ConfigMap's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The key in its `binaryData`.
    pub key: String,
}

/// The module of `spec`: a Handler's ConfigMap or pull secret is in its own
/// `namespace`, a ClusterHandler's (`namespace` `None`) in the one it names.
///
/// # Errors
///
/// A reference without a name, key or (for a ClusterHandler) namespace, and
/// one to another namespace than a Handler's own.
pub fn module(spec: &Value, namespace: Option<&str>) -> Result<ModuleSource, Refusal> {
    let module = &spec["module"];
    let home = |at: &str, object: &Value| match (namespace, object.get("namespace")) {
        (Some(own), None) => Ok(own.to_owned()),
        (Some(own), Some(named)) if named == own => Ok(own.to_owned()),
        (Some(own), Some(named)) => Err(Refusal::Confinement(format!(
            "{at}.namespace is {named}: a Handler's module comes from its own namespace ({own})"
        ))),
        (None, _) => {
            let named = object["namespace"]
                .as_str()
                .filter(|value| !value.is_empty())
                .ok_or_else(|| Refusal::Module(format!("{at}.namespace is missing")))?;
            checked(named, &format!("{at}.namespace"), is_namespace_name)
        }
    };
    if let Some(oci) = module.get("oci") {
        let reference = oci
            .as_str()
            .filter(|value| !value.is_empty())
            .ok_or_else(|| Refusal::Module("spec.module.oci is not a reference".to_owned()))?;
        let secret = &module["pullSecret"];
        let pull_secret = match secret.get("name").and_then(Value::as_str) {
            Some(name) => Some((
                home("spec.module.pullSecret", secret)?,
                checked(name, "spec.module.pullSecret.name", is_object_name)?,
            )),
            None if secret.is_null() => None,
            None => return Err(Refusal::Module("spec.module.pullSecret.name is missing".to_owned())),
        };
        return Ok(ModuleSource::Oci {
            reference: reference.to_owned(),
            pull_secret,
        });
    }
    let config_map = &module["configMap"];
    let field = |name: &str| {
        config_map[name]
            .as_str()
            .filter(|value| !value.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| Refusal::Module(format!("spec.module.configMap.{name} is missing")))
    };
    let home = home("spec.module.configMap", config_map)?;
    Ok(ModuleSource::ConfigMap(ModuleRef {
        namespace: home,
        name: checked(&field("name")?, "spec.module.configMap.name", is_object_name)?,
        key: checked(&field("key")?, "spec.module.configMap.key", is_config_map_key)?,
    }))
}

/// The ServiceAccount a Handler acts as: `spec.serviceAccountName`, or
/// `default`.
///
/// # Errors
///
/// [`Refusal::Invalid`] when it is not a Kubernetes name (`a:b` would make
/// the user `system:serviceaccount:NS:a:b`).
pub fn service_account(spec: &Value) -> Result<String, Refusal> {
    match spec.get("serviceAccountName") {
        None | Some(Value::Null) => Ok("default".to_owned()),
        Some(Value::String(name)) => checked(name, "spec.serviceAccountName", is_object_name),
        Some(other) => Err(Refusal::Invalid(format!(
            "spec.serviceAccountName is not a string: {other}"
        ))),
    }
}

/// The most entries one list of a Handler's grant may hold; the CRDs'
/// `maxItems` say the same, so the API server refuses longer ones first.
pub const MAX_ITEMS: usize = 64;

/// Refuses a list of `spec`'s grant (its kinds, namespaces, rules, a rule's
/// verbs, kinds and namespaces, HTTP entries and networks) that is longer
/// than [`MAX_ITEMS`] or holds one entry twice, and an `env` of more than
/// [`MAX_ITEMS`] variables.
///
/// # Errors
///
/// [`Refusal::Invalid`], naming the list.
pub fn bounded(spec: &Value) -> Result<(), Refusal> {
    let grant = &spec["grant"];
    let mut lists = vec![
        ("spec.grant.resources".to_owned(), &grant["resources"]),
        ("spec.grant.namespaces".to_owned(), &grant["namespaces"]),
        ("spec.grant.http.allow".to_owned(), &grant["http"]["allow"]),
        ("spec.grant.http.networks".to_owned(), &grant["http"]["networks"]),
    ];
    for rules in ["write", "read"] {
        lists.push((format!("spec.grant.{rules}"), &grant[rules]));
        for (index, rule) in grant[rules].as_array().into_iter().flatten().enumerate() {
            for field in ["verbs", "resources", "namespaces"] {
                lists.push((format!("spec.grant.{rules}[{index}].{field}"), &rule[field]));
            }
        }
    }
    for (at, list) in lists {
        let Some(entries) = list.as_array() else { continue };
        if entries.len() > MAX_ITEMS {
            return Err(Refusal::Invalid(format!(
                "{at} holds {} entries, more than the {MAX_ITEMS} a Handler may list",
                entries.len()
            )));
        }
        if let Some((index, entry)) = entries
            .iter()
            .enumerate()
            .find(|(index, entry)| entries[..*index].contains(entry))
        {
            return Err(Refusal::Invalid(format!("{at}[{index}] repeats {entry}")));
        }
    }
    let variables = spec["env"].as_object().map_or(0, Map::len);
    if variables > MAX_ITEMS {
        return Err(Refusal::Invalid(format!(
            "spec.env holds {variables} variables, more than the {MAX_ITEMS} a Handler may set"
        )));
    }
    Ok(())
}

/// `name` when `valid` says it is one, else a refusal naming the field.
fn checked(name: &str, at: &str, valid: fn(&str) -> bool) -> Result<String, Refusal> {
    if valid(name) {
        Ok(name.to_owned())
    } else {
        Err(Refusal::Invalid(format!(
            "{at} {:?} is not a Kubernetes name (lowercase letters, digits, '-' and '.', at most 253)",
            crate::text::sanitize(name, 64)
        )))
    }
}

/// A DNS subdomain (RFC 1123), as kube-apiserver checks the names of
/// ServiceAccounts, ConfigMaps and Secrets: at most 253 characters, labels
/// of lowercase letters, digits and `-` separated by `.`, each starting and
/// ending with a letter or digit.
fn is_object_name(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(|label| is_label(label, 63))
}

/// A DNS label (RFC 1123), as namespaces are named: at most 63 characters.
fn is_namespace_name(name: &str) -> bool {
    is_label(name, 63)
}

fn is_label(label: &str, longest: usize) -> bool {
    let bytes = label.as_bytes();
    let edge = |byte: &u8| byte.is_ascii_lowercase() || byte.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= longest
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes.iter().all(|byte| edge(byte) || *byte == b'-')
}

/// A ConfigMap key: letters, digits, `-`, `_` and `.`, at most 253, not `.`
/// or `..`.
fn is_config_map_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
}

/// Confines the spec of a Handler of `namespace`: fills in its namespace
/// where the spec names none, and refuses what reaches outside it.
/// `cluster_scoped` answers for an `apiVersion/Kind` whether the API server
/// serves it cluster-scoped (`Err` when it does not serve it).
///
/// # Errors
///
/// [`Refusal::Confinement`], saying which field asks for what.
pub fn confine(
    spec: &mut Value,
    namespace: &str,
    cluster_scoped: &mut dyn FnMut(&str) -> Result<bool, String>,
) -> Result<(), Refusal> {
    let refuse = |message: String| Err(Refusal::Confinement(message));
    let Some(spec) = spec.as_object_mut() else {
        return refuse("spec is not an object".to_owned());
    };
    let grant = spec.entry("grant").or_insert_with(|| Value::Object(Map::new()));
    let Some(grant) = grant.as_object_mut() else {
        return refuse("spec.grant is not an object".to_owned());
    };
    own_namespaces(grant, "spec.grant", namespace)?;
    let Some(resources) = grant.get("resources") else {
        return refuse(format!(
            "spec.grant.resources is missing: a Handler names the kinds it watches (the default, every \
             kind, includes cluster-scoped ones outside {namespace})"
        ));
    };
    kinds(resources, "spec.grant.resources", true, cluster_scoped)?;
    for rules in ["write", "read"] {
        let Some(rules) = grant.get_mut(rules).and_then(Value::as_array_mut) else {
            continue;
        };
        for (index, rule) in rules.iter_mut().enumerate() {
            let Some(rule) = rule.as_object_mut() else { continue };
            let at = format!(
                "spec.grant.{}[{index}]",
                if rule.contains_key("verbs") { "write" } else { "read" }
            );
            own_namespaces(rule, &at, namespace)?;
            if let Some(resources) = rule.get("resources") {
                // Sent as its ServiceAccount: bounded by its RBAC.
                kinds(resources, &format!("{at}.resources"), false, cluster_scoped)?;
            }
        }
    }
    if let Some(env) = spec.get("env").and_then(Value::as_object) {
        for (name, value) in env {
            for source in ["secret", "configmap"] {
                let Some(reference) = value.get(source).and_then(Value::as_str) else {
                    continue;
                };
                let home = reference.split_once('/').map_or("", |(home, _)| home);
                if source == "secret" {
                    return refuse(format!(
                        "spec.env.{name}: secret {reference}: the host would read it, not the Handler's \
                         ServiceAccount, so a Handler takes no setting from a Secret yet"
                    ));
                }
                if home != namespace {
                    return refuse(format!(
                        "spec.env.{name}: {source} {reference} is outside the Handler's namespace ({namespace})"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `namespaces` of `object` absent: set to `[namespace]`; present: must be
/// exactly that.
fn own_namespaces(object: &mut Map<String, Value>, at: &str, namespace: &str) -> Result<(), Refusal> {
    match object.get("namespaces").and_then(Value::as_array) {
        None => {
            object.insert("namespaces".to_owned(), Value::Array(vec![Value::from(namespace)]));
            Ok(())
        }
        Some(named) => match named.iter().find(|named| named.as_str() != Some(namespace)) {
            Some(other) => Err(Refusal::Confinement(format!(
                "{at}.namespaces names {}: a Handler is confined to its own namespace ({namespace})",
                other.as_str().unwrap_or("a non-string")
            ))),
            None => Ok(()),
        },
    }
}

/// Refuses a pattern with a wildcard kind and a cluster-scoped kind, and
/// for `cached` reads, Secrets: a Handler reads the host's cache, which its
/// ServiceAccount's RBAC does not bound.
fn kinds(
    patterns: &Value,
    at: &str,
    cached: bool,
    cluster_scoped: &mut dyn FnMut(&str) -> Result<bool, String>,
) -> Result<(), Refusal> {
    for pattern in patterns.as_array().into_iter().flatten() {
        let pattern = pattern.as_str().unwrap_or_default();
        let Some(resource) = kind_of(pattern) else {
            return Err(Refusal::Confinement(format!(
                "{at}: {pattern:?} names every kind, cluster-scoped ones too; a Handler names its kinds"
            )));
        };
        if cached && resource == "v1/Secret" {
            return Err(Refusal::Confinement(format!(
                "{at}: v1/Secret: a Handler reads the host's cache, which its ServiceAccount's RBAC does \
                 not bound, so it may not read Secrets"
            )));
        }
        match cluster_scoped(&resource) {
            Ok(false) => {}
            Ok(true) => {
                return Err(Refusal::Confinement(format!(
                    "{at}: {resource} is cluster-scoped; a Handler reaches only its own namespace"
                )));
            }
            Err(why) => return Err(Refusal::Confinement(format!("{at}: {resource}: {why}"))),
        }
    }
    Ok(())
}

/// The `apiVersion/Kind` of a resource pattern (its subresource dropped);
/// `None` for a wildcard kind.
fn kind_of(pattern: &str) -> Option<String> {
    let mut parts: Vec<&str> = pattern.split('/').collect();
    if parts
        .last()
        .is_some_and(|last| last.starts_with(|c: char| c.is_ascii_lowercase()))
    {
        parts.pop();
    }
    let kind = parts.last().copied().unwrap_or_default();
    (kind != "*" && parts.len() >= 2).then(|| parts.join("/"))
}

/// Every `apiVersion/Kind` the spec's grant names, for discovery to say
/// which are cluster-scoped before [`confine`] asks.
#[must_use]
pub fn kinds_named(spec: &Value) -> std::collections::BTreeSet<String> {
    let grant = &spec["grant"];
    let rules = ["write", "read"]
        .into_iter()
        .flat_map(|rules| grant[rules].as_array().into_iter().flatten())
        .map(|rule| &rule["resources"]);
    std::iter::once(&grant["resources"])
        .chain(rules)
        .flat_map(|patterns| patterns.as_array().into_iter().flatten())
        .filter_map(|pattern| pattern.as_str().and_then(kind_of))
        .collect()
}

/// The manifest `spec` says, `module` and `serviceAccountName` aside, parsed
/// as a manifest file is; `path` names it in errors.
///
/// # Errors
///
/// [`Refusal::Manifest`] with the parser's message.
pub fn manifest(spec: &Value, path: &Path) -> Result<Manifest, Refusal> {
    let text = toml_text(spec).map_err(Refusal::Manifest)?;
    Manifest::parse(path, &text).map_err(|error| Refusal::Manifest(error.to_string()))
}

/// The manifest's TOML text for `spec`: one `key = value` line per field,
/// keys kebab-case but for the names a user chose (`env`'s variables).
fn toml_text(spec: &Value) -> Result<String, String> {
    let Some(spec) = spec.as_object() else {
        return Err("spec is not an object".to_owned());
    };
    let mut text = String::new();
    for (key, value) in spec {
        if matches!(key.as_str(), "module" | "serviceAccountName") || value.is_null() {
            continue;
        }
        text.push_str(&toml_key(&kebab(key)));
        text.push_str(" = ");
        toml_value(value, key != "env", &mut text)?;
        text.push('\n');
    }
    Ok(text)
}

/// `callTimeoutMs` → `call-timeout-ms`.
pub(super) fn kebab(key: &str) -> String {
    let mut kebab = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            kebab.push('-');
            kebab.push(c.to_ascii_lowercase());
        } else {
            kebab.push(c);
        }
    }
    kebab
}

fn toml_key(key: &str) -> String {
    // A JSON string is a TOML basic string: both escape `"`, `\` and
    // control characters alike.
    Value::from(key).to_string()
}

/// Writes `value` as an inline TOML value; `kebab_keys` turns its object
/// keys (and theirs) to kebab-case, but never the names directly under an
/// object that holds user-chosen names.
fn toml_value(value: &Value, kebab_keys: bool, text: &mut String) -> Result<(), String> {
    match value {
        Value::Null => return Err("a field is null".to_owned()),
        Value::Bool(_) | Value::Number(_) | Value::String(_) => text.push_str(&value.to_string()),
        Value::Array(items) => {
            text.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    text.push_str(", ");
                }
                toml_value(item, true, text)?;
            }
            text.push(']');
        }
        Value::Object(fields) => {
            text.push('{');
            for (index, (key, item)) in fields.iter().filter(|(_, item)| !item.is_null()).enumerate() {
                text.push_str(if index > 0 { ", " } else { " " });
                let key = if kebab_keys { kebab(key) } else { key.clone() };
                text.push_str(&toml_key(&key));
                text.push_str(" = ");
                toml_value(item, true, text)?;
            }
            text.push_str(" }");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn namespaced(kind: &str) -> Result<bool, String> {
        match kind {
            "v1/Pod" | "v1/ConfigMap" | "v1/Secret" | "apps/v1/Deployment" => Ok(false),
            "v1/Namespace" | "v1/Node" => Ok(true),
            _ => Err("not served by the API server".to_owned()),
        }
    }

    fn confined(mut spec: Value) -> Result<Value, Refusal> {
        confine(&mut spec, "shop", &mut namespaced).map(|()| spec)
    }

    fn refusal(spec: Value) -> String {
        confined(spec).unwrap_err().to_string()
    }

    #[test]
    fn a_spec_becomes_the_manifest_a_file_would_be() {
        let spec = json!({
            "module": {"configMap": {"name": "m", "key": "plugin.wasm"}},
            "serviceAccountName": "handlers",
            "config": "slow:shop",
            "mode": "dry-run",
            "grant": {"resources": ["v1/ConfigMap"], "namespaces": ["shop"],
                      "write": [{"verbs": ["patch"], "resources": ["v1/ConfigMap"]}]},
            "env": {"LOG_LEVEL": "info", "fooBar": {"configmap": "shop/settings", "key": "a"}},
            "limits": {"callTimeoutMs": 500, "memoryMib": 16},
            "failures": {"onError": "skip", "maxRestarts": 2},
        });
        let manifest = manifest(&spec, Path::new("shop/h")).unwrap();
        let text = "config = \"slow:shop\"\nmode = \"dry-run\"\n\
            [grant]\nresources = [\"v1/ConfigMap\"]\nnamespaces = [\"shop\"]\n\
            [[grant.write]]\nverbs = [\"patch\"]\nresources = [\"v1/ConfigMap\"]\n\
            [env]\nLOG_LEVEL = \"info\"\nfooBar = { configmap = \"shop/settings\", key = \"a\" }\n\
            [limits]\ncall-timeout-ms = 500\nmemory-mib = 16\n\
            [failures]\non-error = \"skip\"\nmax-restarts = 2\n";
        assert_eq!(manifest, Manifest::parse(Path::new("h.toml"), text).unwrap());
    }

    #[test]
    fn a_spec_the_manifest_refuses_is_refused_with_the_manifests_message() {
        let spec = json!({"module": {}, "limits": {"memoryMib": 100000}});
        let refusal = manifest(&spec, Path::new("shop/h")).unwrap_err().to_string();
        assert!(refusal.contains("memory-mib"), "{refusal}");
        let spec = json!({"module": {}, "grant": {"resorces": ["v1/Pod"]}});
        let refusal = manifest(&spec, Path::new("shop/h")).unwrap_err().to_string();
        assert!(refusal.contains("unknown field `resorces`"), "{refusal}");
    }

    #[test]
    fn a_handler_without_namespaces_gets_its_own_in_every_rule() {
        let spec = confined(json!({"grant": {"resources": ["v1/Pod"],
            "write": [{"verbs": ["patch"], "resources": ["v1/ConfigMap"]}]}}))
        .unwrap();
        assert_eq!(spec["grant"]["namespaces"], json!(["shop"]));
        assert_eq!(spec["grant"]["write"][0]["namespaces"], json!(["shop"]));
    }

    #[test]
    fn another_namespace_or_all_of_them_is_refused_by_name() {
        let message = refusal(json!({"grant": {"resources": ["v1/Pod"], "namespaces": ["shop", "payments"]}}));
        assert_eq!(
            message,
            "spec.grant.namespaces names payments: a Handler is confined to its own namespace (shop)"
        );
        let message = refusal(json!({"grant": {"resources": ["v1/Pod"],
            "write": [{"verbs": ["patch"], "resources": ["v1/ConfigMap"], "namespaces": ["*"]}]}}));
        assert!(
            message.starts_with("spec.grant.write[0].namespaces names *"),
            "{message}"
        );
    }

    #[test]
    fn a_cluster_scoped_or_wildcard_kind_is_refused_by_name() {
        let message = refusal(json!({"grant": {"resources": ["v1/Pod", "v1/Namespace"]}}));
        assert_eq!(
            message,
            "spec.grant.resources: v1/Namespace is cluster-scoped; a Handler reaches only its own namespace"
        );
        let message = refusal(json!({"grant": {"resources": ["v1/Pod"],
            "read": [{"resources": ["v1/Node"]}]}}));
        assert!(
            message.starts_with("spec.grant.read[0].resources: v1/Node is cluster-scoped"),
            "{message}"
        );
        assert!(refusal(json!({"grant": {"resources": ["apps/v1/*"]}})).contains("names every kind"));
        assert!(refusal(json!({"grant": {"resources": ["*"]}})).contains("names every kind"));
        assert!(refusal(json!({"grant": {}})).starts_with("spec.grant.resources is missing"));
        assert!(refusal(json!({"grant": {"resources": ["v1/Widget"]}})).contains("not served"));
        let message = refusal(json!({"grant": {"resources": ["v1/Secret"]}}));
        assert!(
            message.starts_with("spec.grant.resources: v1/Secret: a Handler reads the host's cache"),
            "{message}"
        );
        // Writing Secrets goes through its ServiceAccount's RBAC.
        confined(json!({"grant": {"resources": ["v1/Pod"],
            "write": [{"verbs": ["patch"], "resources": ["v1/Secret"]}]}}))
        .unwrap();
        // A subresource of a namespaced kind is that kind's.
        confined(json!({"grant": {"resources": ["v1/Pod"],
            "write": [{"verbs": ["patch"], "resources": ["apps/v1/Deployment/scale"]}]}}))
        .unwrap();
    }

    #[test]
    fn the_kinds_named_are_those_of_every_rule_without_subresources() {
        let spec = json!({"grant": {"resources": ["v1/Pod", "*"],
            "write": [{"verbs": ["patch"], "resources": ["apps/v1/Deployment/scale"]}],
            "read": [{"resources": ["metrics.k8s.io/v1beta1/PodMetrics"]}]}});
        assert_eq!(
            kinds_named(&spec).into_iter().collect::<Vec<_>>(),
            ["apps/v1/Deployment", "metrics.k8s.io/v1beta1/PodMetrics", "v1/Pod"]
        );
    }

    #[test]
    fn secrets_and_env_from_another_namespace_are_refused() {
        let message = refusal(json!({"grant": {"resources": ["v1/Pod"]},
            "env": {"URL": {"configmap": "kube-system/urls", "key": "u"}}}));
        assert_eq!(
            message,
            "spec.env.URL: configmap kube-system/urls is outside the Handler's namespace (shop)"
        );
        let message = refusal(json!({"grant": {"resources": ["v1/Pod"]},
            "env": {"TOKEN": {"secret": "shop/token", "key": "t"}}}));
        assert!(
            message.starts_with("spec.env.TOKEN: secret shop/token: the host would read it"),
            "{message}"
        );
        confined(json!({"grant": {"resources": ["v1/Pod"]},
            "env": {"URL": {"configmap": "shop/urls", "key": "u"}, "LEVEL": "info"}}))
        .unwrap();
    }

    #[test]
    fn a_module_is_a_configmap_or_an_oci_reference_with_a_secret_of_the_handlers_namespace() {
        let spec = json!({"module": {"configMap": {"name": "m", "key": "plugin.wasm"}}});
        assert_eq!(
            module(&spec, Some("shop")).unwrap(),
            ModuleSource::ConfigMap(ModuleRef {
                namespace: "shop".into(),
                name: "m".into(),
                key: "plugin.wasm".into()
            })
        );
        let elsewhere = json!({"module": {"configMap": {"name": "m", "key": "k", "namespace": "kube-system"}}});
        assert!(matches!(module(&elsewhere, Some("shop")), Err(Refusal::Confinement(_))));
        assert!(matches!(
            module(&elsewhere, None).unwrap(),
            ModuleSource::ConfigMap(ModuleRef { namespace, .. }) if namespace == "kube-system"
        ));
        assert!(matches!(module(&spec, None), Err(Refusal::Module(_))));
        let oci = json!({"module": {"oci": "registry.example.com/shop/h@sha256:00", "pullSecret": {"name": "pull"}}});
        assert_eq!(
            module(&oci, Some("shop")).unwrap(),
            ModuleSource::Oci {
                reference: "registry.example.com/shop/h@sha256:00".into(),
                pull_secret: Some(("shop".into(), "pull".into()))
            }
        );
        let foreign =
            json!({"module": {"oci": "r.example.com/h:v1", "pullSecret": {"name": "p", "namespace": "other"}}});
        assert!(matches!(module(&foreign, Some("shop")), Err(Refusal::Confinement(_))));
        assert!(matches!(module(&foreign, None).unwrap(),
            ModuleSource::Oci { pull_secret: Some((namespace, _)), .. } if namespace == "other"));
    }

    #[test]
    fn names_that_are_not_kubernetes_names_are_refused_before_they_reach_a_path() {
        let config_map = |name: &str, key: &str| json!({"module": {"configMap": {"name": name, "key": key}}});
        for (name, key) in [
            ("../../kube-system/configmaps/secret-cm", "k"),
            ("M", "k"),
            ("m%2F", "k"),
            ("m", "a/b"),
            ("m", ".."),
        ] {
            let refused = module(&config_map(name, key), Some("shop"));
            assert!(matches!(refused, Err(Refusal::Invalid(_))), "{name} {key}: {refused:?}");
        }
        assert!(module(&config_map("modules.v2", "plugin_1.wasm"), Some("shop")).is_ok());
        let secret = json!({"module": {"oci": "r.example.com/h@sha256:00", "pullSecret": {"name": "a:b"}}});
        assert!(matches!(module(&secret, Some("shop")), Err(Refusal::Invalid(_))));
        let namespace = json!({"module": {"configMap": {"name": "m", "key": "k", "namespace": "a/b"}}});
        assert!(matches!(module(&namespace, None), Err(Refusal::Invalid(_))));

        let account = service_account(&json!({"serviceAccountName": "payments:payments-handlers"}));
        assert!(account.unwrap_err().to_string().contains("not a Kubernetes name"));
        assert_eq!(service_account(&json!({})).unwrap(), "default");
        assert_eq!(
            service_account(&json!({"serviceAccountName": "handlers"})).unwrap(),
            "handlers"
        );
        assert!(service_account(&json!({"serviceAccountName": "x".repeat(254)})).is_err());
    }

    #[test]
    fn a_grant_list_too_long_or_with_an_entry_twice_is_refused_and_kinds_are_asked_once() {
        let many: Vec<String> = (0..=MAX_ITEMS).map(|n| format!("a.b/v1/K{n}")).collect();
        let refused = bounded(&json!({"grant": {"resources": many}})).unwrap_err();
        assert!(
            refused.to_string().contains("spec.grant.resources holds 65 entries"),
            "{refused}"
        );
        let twice = json!({"grant": {"resources": ["v1/Pod", "a.b/v1/K", "a.b/v1/K"]}});
        assert!(
            bounded(&twice)
                .unwrap_err()
                .to_string()
                .contains("spec.grant.resources[2] repeats")
        );
        let rule = json!({"grant": {"write": [{"verbs": ["patch", "patch"], "resources": ["v1/Pod"]}]}});
        assert!(
            bounded(&rule)
                .unwrap_err()
                .to_string()
                .contains("spec.grant.write[0].verbs[1]")
        );
        assert!(bounded(&json!({"grant": {"resources": ["v1/Pod", "apps/v1/Deployment"]}})).is_ok());
        let spec = json!({"grant": {"resources": ["v1/Pod", "a.b/v1/K"],
                                    "read": [{"resources": ["a.b/v1/K", "v1/Pod/status"]}]}});
        assert_eq!(
            kinds_named(&spec).into_iter().collect::<Vec<_>>(),
            ["a.b/v1/K", "v1/Pod"]
        );
    }
}
