//! The objects a fresh cluster holds before anyone writes: its four namespaces, the `kubernetes` Service, the APIServices of its groups and the RBAC bootstrap roles every client may read.

use serde_json::{Value, json};

use crate::metrics;
use crate::resources::{ResourceDef, ids};
use crate::status::Result;
use crate::store::{Store, WriteOptions};

/// Creates the `default`, `kube-system`, `kube-public` and `kube-node-lease`
/// namespaces, the
/// `default/kubernetes` Service of the API server listening on `port`, and an
/// APIService for each served group version, and the bootstrap ClusterRoles
/// and ClusterRoleBindings of [`bootstrap_rbac`].
///
/// # Errors
///
/// When the store refuses one, which a fresh store does not.
pub(crate) fn create(store: &Store, port: u16) -> Result<()> {
    for namespace in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        store.create(&ids::namespaces(), None, json!({"metadata": {"name": namespace}}))?;
    }
    store.create(&ids::services(), Some("default"), kubernetes_service(port))?;
    store.transaction(WriteOptions::default()).update(
        &ids::services(),
        Some("default"),
        "kubernetes",
        json!({"status": {"loadBalancer": {}}}),
        true,
    )?;
    for (object, status) in api_services(&store.defs().iter().map(|def| &**def).collect::<Vec<_>>()) {
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        store.create(&ids::apiservices(), None, object)?;
        store.transaction(WriteOptions::default()).update(
            &ids::apiservices(),
            None,
            &name,
            json!({"status": status}),
            true,
        )?;
    }
    for (role, binding) in bootstrap_rbac() {
        store.create(&ids::cluster_roles(), None, role)?;
        store.create(&ids::cluster_role_bindings(), None, binding)?;
    }
    Ok(())
}

/// The ClusterRoles kube-apiserver's RBAC bootstrap policy writes that need no
/// aggregation, each with the ClusterRoleBinding that grants it, labelled and
/// annotated as the policy marks them: `cluster-admin` for the group
/// `system:masters`, and what every authenticated client may do (discovery,
/// its own access reviews, the version and health endpoints). The aggregated
/// roles (`admin`, `edit`, `view`) and the controllers' `system:` roles are
/// not written: a client bound to them gets nothing from them.
fn bootstrap_rbac() -> Vec<(Value, Value)> {
    let public_paths = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let mut discovery_paths = vec!["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*"];
    discovery_paths.extend(public_paths);
    discovery_paths.sort_unstable();
    let group = |name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name});
    let authenticated = || vec![group("system:authenticated")];
    let roles = [
        (
            "cluster-admin",
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ]),
            vec![group("system:masters")],
        ),
        (
            "system:basic-user",
            json!([
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
            ]),
            authenticated(),
        ),
        (
            "system:discovery",
            json!([{"nonResourceURLs": discovery_paths, "verbs": ["get"]}]),
            authenticated(),
        ),
        (
            "system:public-info-viewer",
            json!([{"nonResourceURLs": public_paths, "verbs": ["get"]}]),
            vec![group("system:authenticated"), group("system:unauthenticated")],
        ),
    ];
    let metadata = |name: &str| {
        json!({
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        })
    };
    roles
        .into_iter()
        .map(|(name, rules, subjects)| {
            let role = json!({"metadata": metadata(name), "rules": rules});
            let binding = json!({
                "metadata": metadata(name),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": subjects,
            });
            (role, binding)
        })
        .collect()
}

/// The Service by which pods reach the API server, as kube-apiserver keeps
/// it: the first address of the service range, port 443 to the server's own.
fn kubernetes_service(port: u16) -> Value {
    json!({
        "metadata": {
            "name": "kubernetes",
            "labels": {"component": "apiserver", "provider": "kubernetes"},
        },
        "spec": {
            "ports": [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": port}],
            "clusterIP": "10.96.0.1",
            "clusterIPs": ["10.96.0.1"],
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
        },
    })
}

/// The APIServices the aggregator registers on start, with their status: one
/// per group version served in-process (`Local`, always available), and the
/// one of `metrics.k8s.io`, served by metrics-server in `kube-system`.
fn api_services(defs: &[&ResourceDef]) -> Vec<(Value, Value)> {
    let mut group_versions: Vec<(&str, &str)> = Vec::new();
    for def in defs {
        if !group_versions.contains(&(def.group.as_str(), def.version.as_str())) {
            group_versions.push((&def.group, &def.version));
        }
    }
    let local = |group: &str, version: &str| {
        let object = json!({
            "metadata": {
                "name": format!("{version}.{group}"),
                "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"},
            },
            "spec": {
                "group": group,
                "version": version,
                "groupPriorityMinimum": if group.is_empty() { 18000 } else { 17000 },
                "versionPriority": 15,
            },
        });
        let status = json!({"conditions": [{
            "type": "Available",
            "status": "True",
            "lastTransitionTime": crate::store::now_rfc3339(),
            "reason": "Local",
            "message": "Local APIServices are always available",
        }]});
        (object, status)
    };
    let mut services: Vec<(Value, Value)> = group_versions
        .into_iter()
        .map(|(group, version)| local(group, version))
        .collect();
    services.push((
        json!({
            "metadata": {"name": format!("v1beta1.{}", metrics::api::GROUP), "labels": {"k8s-app": "metrics-server"}},
            "spec": {
                "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443},
                "group": metrics::api::GROUP,
                "version": "v1beta1",
                "insecureSkipTLSVerify": true,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        }),
        json!({"conditions": [{
            "type": "Available",
            "status": "True",
            "lastTransitionTime": crate::store::now_rfc3339(),
            "reason": "Passed",
            "message": "all checks passed",
        }]}),
    ));
    services
}
