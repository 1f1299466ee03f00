//! `kinformer rbac`: the Role, ClusterRole and bindings a host needs for the
//! plugins of a directory, as YAML for `kubectl apply`. Each plugin is checked
//! as `kinformer check` does it (its `init` run, its registration reviewed
//! against its grant), so the rules follow what the runtime would start and
//! what its grants let it write ([`kinformer::rbac`]).

use std::path::Path;

use anyhow::Context as _;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject};
use kinformer::grant::Scope;
use kinformer::manifest::Manifest;
use kinformer::plugin::{EngineOptions, PluginEngine};
use kinformer::rbac::Permissions;
use kube::api::ObjectMeta;

/// Who the rules are for, and what the host runs with.
#[derive(Debug, Clone)]
pub struct RbacOptions {
    /// The namespaces the host is confined to (`kinformer run --namespace`);
    /// every namespace when empty.
    pub namespaces: Vec<String>,
    /// The namespace of the Lease, when leader election is on.
    pub lease_namespace: Option<String>,
    /// The ServiceAccount the host runs as.
    pub service_account: String,
    /// Its namespace.
    pub service_account_namespace: String,
    /// The name of the roles and bindings.
    pub name: String,
    /// Where compiled plugins are cached.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Run Handlers (`kinformer run --handlers`), impersonating the
    /// ServiceAccounts of these namespaces (of every namespace when empty).
    pub handlers: Option<Vec<String>>,
}

impl Default for RbacOptions {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            lease_namespace: None,
            service_account: "kinformer".into(),
            service_account_namespace: "kinformer".into(),
            name: "kinformer".into(),
            cache_dir: None,
            handlers: None,
        }
    }
}

/// The permissions the plugins of `dir` need.
///
/// # Errors
///
/// When the directory cannot be read or a plugin does not pass `kinformer
/// check` (a broken manifest or file, a refused `init`).
pub fn permissions(dir: &Path, options: &RbacOptions) -> anyhow::Result<Permissions> {
    let scope = if options.namespaces.is_empty() {
        Scope::all()
    } else {
        Scope::only(options.namespaces.iter().cloned())
    };
    let engine = PluginEngine::with_options(&EngineOptions {
        cache_dir: options.cache_dir.clone(),
        ..EngineOptions::default()
    })?;
    let plugins = kinformer::runtime::plugin_files(dir)?;
    // Compiling is most of the time: the plugins compile side by side.
    let reports: Vec<anyhow::Result<crate::check::Report>> = std::thread::scope(|scope| {
        let checks: Vec<_> = plugins
            .iter()
            .map(|plugin| scope.spawn(|| crate::check::check_with(&engine, plugin, None)))
            .collect();
        checks
            .into_iter()
            .map(|check| check.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    let mut permissions = Permissions::new();
    for (plugin, report) in plugins.iter().zip(reports) {
        let report = report?;
        let manifest = Manifest::for_plugin(plugin)?;
        let grant = manifest.grant.within(&scope);
        let review = grant.review(&report.registration);
        permissions.add_plugin(&grant, &review);
        permissions.add_env(&manifest.env);
    }
    // Whatever the plugins grant: the host follows the API server's
    // addresses from its start, and a plugin that grants HTTP may come with
    // the next reload, or as a Handler.
    permissions.add_api_server_addresses();
    if let Some(namespace) = &options.lease_namespace {
        permissions.add_leader_election(namespace);
    }
    if let Some(tenants) = &options.handlers {
        permissions.add_handlers(tenants);
    }
    Ok(permissions)
}

/// The YAML documents (ClusterRole and ClusterRoleBinding when anything is
/// needed cluster-wide, a Role and RoleBinding per namespace, `default`'s
/// always: the API server's addresses) for the plugins of `dir`.
///
/// # Errors
///
/// As [`permissions`].
pub fn rbac(dir: &Path, options: &RbacOptions) -> anyhow::Result<String> {
    let permissions = permissions(dir, options)?;
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: options.service_account.clone(),
        namespace: Some(options.service_account_namespace.clone()),
        ..Subject::default()
    };
    let role_ref = |kind: &str| RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: options.name.clone(),
    };
    let meta = |namespace: Option<&str>| ObjectMeta {
        name: Some(options.name.clone()),
        namespace: namespace.map(str::to_owned),
        ..ObjectMeta::default()
    };
    let mut documents = Vec::new();
    let cluster = permissions.cluster_rules();
    if !cluster.is_empty() {
        documents.push(yaml(&ClusterRole {
            metadata: meta(None),
            rules: Some(cluster),
            ..ClusterRole::default()
        })?);
        documents.push(yaml(&ClusterRoleBinding {
            metadata: meta(None),
            role_ref: role_ref("ClusterRole"),
            subjects: Some(vec![subject.clone()]),
        })?);
    }
    for (namespace, rules) in permissions.namespaced_rules() {
        documents.push(yaml(&Role {
            metadata: meta(Some(&namespace)),
            rules: Some(rules),
        })?);
        documents.push(yaml(&RoleBinding {
            metadata: meta(Some(&namespace)),
            role_ref: role_ref("Role"),
            subjects: Some(vec![subject.clone()]),
        })?);
    }
    Ok(documents.join("---\n"))
}

/// A Kubernetes object as YAML (k8s-openapi writes its apiVersion and kind).
fn yaml<K: serde::Serialize>(object: &K) -> anyhow::Result<String> {
    serde_yaml::to_string(object).context("encoding the RBAC as YAML")
}
