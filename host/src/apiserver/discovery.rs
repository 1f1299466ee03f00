//! Which API resource serves a resource type, asked of the server's discovery
//! once per type and remembered.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};

use super::WriteError;
use super::request::ObjectRef;
use kinformer_informers::Recover as _;

/// The API resources resolved so far, by type. Only answers are remembered:
/// a type the server does not serve yet (a CRD being installed) is asked
/// again next time.
#[derive(Debug, Default)]
pub(super) struct Discovery {
    resolved: Mutex<HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>>,
}

impl Discovery {
    /// The API resource of `target`'s type, checked against the target: a
    /// namespace for a namespaced type and none for a cluster-scoped one, and
    /// a subresource the server serves.
    pub(super) async fn resolve(&self, client: &kube::Client, target: &ObjectRef) -> Result<ApiResource, WriteError> {
        let (resource, capabilities) = self.resource(client, &target.gvk).await?;
        check_target(&capabilities, target)?;
        Ok(resource)
    }

    /// The API resource serving `gvk`, and what it can do.
    pub(super) async fn resource(
        &self,
        client: &kube::Client,
        gvk: &GroupVersionKind,
    ) -> Result<(ApiResource, ApiCapabilities), WriteError> {
        if let Some(known) = self.lock().get(gvk).cloned() {
            return Ok(known);
        }
        let found = kube::discovery::pinned_kind(client, gvk)
            .await
            .map_err(|error| match error {
                kube::Error::Discovery(_) => not_served(gvk),
                kube::Error::Api(status) if status.code == 404 => not_served(gvk),
                other => WriteError::from_kube(&other),
            })?;
        self.lock().insert(gvk.clone(), found.clone());
        Ok(found)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>> {
        self.resolved.lock().recover()
    }
}

fn not_served(gvk: &GroupVersionKind) -> WriteError {
    WriteError::Invalid(format!(
        "the API server does not serve {} {}",
        gvk.api_version(),
        gvk.kind
    ))
}

/// Refuses a target whose namespace or subresource the type does not have.
fn check_target(capabilities: &ApiCapabilities, target: &ObjectRef) -> Result<(), WriteError> {
    let what = format!("{} {}", target.gvk.api_version(), target.gvk.kind);
    match (&capabilities.scope, &target.namespace) {
        (Scope::Namespaced, None) => {
            return Err(WriteError::Invalid(format!("{what} is namespaced: name its namespace")));
        }
        (Scope::Cluster, Some(_)) => {
            return Err(WriteError::Invalid(format!(
                "{what} is cluster-scoped: name no namespace"
            )));
        }
        _ => {}
    }
    if let Some(subresource) = &target.subresource
        && !capabilities
            .subresources
            .iter()
            .any(|(resource, _)| resource.plural == *subresource)
    {
        return Err(WriteError::Invalid(format!(
            "the API server serves no {subresource} subresource of {what}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capabilities(scope: Scope, subresources: &[&str]) -> ApiCapabilities {
        let gvk = GroupVersionKind::gvk("apps", "v1", "Deployment");
        ApiCapabilities {
            scope,
            subresources: subresources
                .iter()
                .map(|name| {
                    let resource = ApiResource::from_gvk_with_plural(&gvk, name);
                    let capabilities = ApiCapabilities {
                        scope: Scope::Namespaced,
                        subresources: Vec::new(),
                        operations: Vec::new(),
                    };
                    (resource, capabilities)
                })
                .collect(),
            operations: Vec::new(),
        }
    }

    #[test]
    fn a_target_must_fit_the_scope_and_subresources_the_server_serves() {
        let web = ObjectRef::new(GroupVersionKind::gvk("apps", "v1", "Deployment"), Some("a"), "web");
        let namespaced = capabilities(Scope::Namespaced, &["status", "scale"]);
        assert!(check_target(&namespaced, &web).is_ok());
        assert!(check_target(&namespaced, &web.clone().subresource("scale")).is_ok());
        let mut cluster_wide = web.clone();
        cluster_wide.namespace = None;
        assert!(check_target(&namespaced, &cluster_wide).is_err());
        assert!(check_target(&capabilities(Scope::Cluster, &[]), &web).is_err());
        let without_scale = capabilities(Scope::Namespaced, &["status"]);
        let refused = check_target(&without_scale, &web.subresource("scale")).unwrap_err();
        assert_eq!(
            refused.message(),
            "the API server serves no scale subresource of apps/v1 Deployment"
        );
    }
}
