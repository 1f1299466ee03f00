//! What a request asks to do, read off its method, path and query as kube-apiserver's `RequestInfo` reads it, and the `403` that refuses it.

use std::collections::HashMap;

use axum::http::Method;
use serde_json::Value;

use crate::http::query_flag;
use crate::status::ApiError;

/// A request as the authorizer sees it: a verb on a resource, or on a path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Attributes {
    /// `get`, `list`, `watch`, `create`, …; for a path the method in lower
    /// case (`get`, `post`).
    pub(crate) verb: String,
    /// What a resource request addresses; `None` for a path (`/healthz`,
    /// `/apis`), a non-resource request.
    pub(crate) resource: Option<ResourceAttributes>,
    /// A non-resource request's path, as sent.
    pub(crate) path: String,
}

/// The resource a request addresses. Empty strings stand for "none", as in
/// kube-apiserver (a namespace of `""` is every namespace, or none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ResourceAttributes {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl ResourceAttributes {
    /// `resource` or `resource/subresource`, as rules and messages name it.
    pub(crate) fn combined(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// Path segments that are verbs: `/api/v1/watch/pods` (long deprecated, still read).
const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];
/// Subresources of a namespace: `/api/v1/namespaces/x/status` is the
/// namespace's status, not a resource `status` in it.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl Attributes {
    /// What a request with this method, path and query asks to do.
    pub(crate) fn of_request(method: &Method, path: &str, query: &HashMap<String, String>) -> Self {
        let method_verb = match *method {
            Method::POST => "create",
            Method::GET | Method::HEAD => "get",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "",
        };
        let non_resource = || Self {
            verb: method.as_str().to_lowercase(),
            resource: None,
            path: path.to_owned(),
        };
        let parts: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
        let (group, rest) = match parts[..] {
            ["api", ref rest @ ..] if rest.len() >= 2 => ("", rest),
            ["apis", group, ref rest @ ..] if rest.len() >= 2 => (group, rest),
            _ => return non_resource(),
        };
        let (version, mut rest) = (rest[0], &rest[1..]);
        let mut verb = method_verb.to_owned();
        if SPECIAL_VERBS.contains(&rest[0]) {
            if rest.len() < 2 {
                return non_resource();
            }
            verb = rest[0].to_owned();
            rest = &rest[1..];
        }
        let mut resource = ResourceAttributes {
            group: group.to_owned(),
            version: version.to_owned(),
            ..ResourceAttributes::default()
        };
        if rest[0] == "namespaces"
            && let Some(namespace) = rest.get(1)
        {
            resource.namespace = (*namespace).to_owned();
            if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
                rest = &rest[2..];
            }
        }
        resource.resource = rest[0].to_owned();
        if let Some(name) = rest.get(1) {
            resource.name = (*name).to_owned();
        }
        if let Some(subresource) = rest.get(2)
            && verb != "proxy"
        {
            resource.subresource = (*subresource).to_owned();
        }
        if resource.name.is_empty() && verb == "get" {
            verb = if query_flag(query.get("watch")) {
                "watch"
            } else {
                "list"
            }
            .to_owned();
            if let Some(name) = query.get("fieldSelector").and_then(|selector| exact_name(selector)) {
                resource.name = name.to_owned();
            }
        }
        if resource.name.is_empty() && verb == "delete" {
            verb = "deletecollection".to_owned();
        }
        Self {
            verb,
            resource: Some(resource),
            path: path.to_owned(),
        }
    }

    /// What an access review's spec asks about: its `resourceAttributes`
    /// or its `nonResourceAttributes`; `None` when it names neither or both.
    pub(crate) fn of_review(spec: &Value) -> Option<Self> {
        let text = |value: &Value, field: &str| value[field].as_str().unwrap_or_default().to_owned();
        match (&spec["resourceAttributes"], &spec["nonResourceAttributes"]) {
            (resource @ Value::Object(_), Value::Null) => Some(Self {
                verb: text(resource, "verb"),
                resource: Some(ResourceAttributes {
                    group: text(resource, "group"),
                    version: text(resource, "version"),
                    resource: text(resource, "resource"),
                    subresource: text(resource, "subresource"),
                    namespace: text(resource, "namespace"),
                    name: text(resource, "name"),
                }),
                path: String::new(),
            }),
            (Value::Null, path @ Value::Object(_)) => Some(Self {
                verb: text(path, "verb"),
                resource: None,
                path: text(path, "path"),
            }),
            _ => None,
        }
    }

    /// The namespace the request is in; `""` for none.
    pub(crate) fn namespace(&self) -> &str {
        self.resource
            .as_ref()
            .map_or("", |resource| resource.namespace.as_str())
    }

    /// The `403` kube-apiserver answers when `user` may not do this, with the
    /// authorizer's reason when it gives one.
    pub(crate) fn forbidden(&self, user: &str, reason: &str) -> ApiError {
        let mut why = match &self.resource {
            None => format!("User {user:?} cannot {} path {:?}", self.verb, self.path),
            Some(resource) => {
                let scope = if resource.namespace.is_empty() {
                    "at the cluster scope".to_owned()
                } else {
                    format!("in the namespace {:?}", resource.namespace)
                };
                format!(
                    "User {user:?} cannot {} resource {:?} in API group {:?} {scope}",
                    self.verb,
                    resource.combined(),
                    resource.group
                )
            }
        };
        if !reason.is_empty() {
            why = format!("{why}: {reason}");
        }
        match &self.resource {
            None => ApiError::forbidden("", "", "", &why),
            Some(resource) => ApiError::forbidden(&resource.group, &resource.resource, &resource.name, &why),
        }
    }
}

/// The name a field selector requires exactly (`metadata.name=x`), when it
/// is one a path could hold.
fn exact_name(selector: &str) -> Option<&str> {
    selector.split(',').find_map(|term| {
        let (field, value) = term.split_once("==").or_else(|| term.split_once('='))?;
        (field.trim() == "metadata.name").then(|| value.trim()).filter(|name| {
            !name.is_empty() && !name.contains('/') && !name.contains('%') && *name != "." && *name != ".."
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: Method, path: &str, query: &[(&str, &str)]) -> Attributes {
        let query = query.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Attributes::of_request(&method, path, &query)
    }

    fn resource(group: &str, resource: &str, subresource: &str, namespace: &str, name: &str) -> ResourceAttributes {
        ResourceAttributes {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_requests_verb_and_resource_are_read_off_its_method_path_and_query() {
        let cases = [
            (
                of(Method::GET, "/api/v1/namespaces/shop/pods", &[]),
                "list",
                resource("", "pods", "", "shop", ""),
            ),
            (
                of(Method::GET, "/api/v1/pods", &[("watch", "true")]),
                "watch",
                resource("", "pods", "", "", ""),
            ),
            (
                of(
                    Method::GET,
                    "/api/v1/namespaces/shop/pods",
                    &[("watch", "1"), ("fieldSelector", "metadata.name=web")],
                ),
                "watch",
                resource("", "pods", "", "shop", "web"),
            ),
            (
                of(
                    Method::PATCH,
                    "/apis/apps/v1/namespaces/shop/deployments/web/scale",
                    &[],
                ),
                "patch",
                resource("apps", "deployments", "scale", "shop", "web"),
            ),
            (
                of(Method::DELETE, "/api/v1/namespaces/shop/configmaps", &[]),
                "deletecollection",
                resource("", "configmaps", "", "shop", ""),
            ),
            // A namespace is in itself; its status is its subresource.
            (
                of(Method::GET, "/api/v1/namespaces/shop", &[]),
                "get",
                resource("", "namespaces", "", "shop", "shop"),
            ),
            (
                of(Method::PUT, "/api/v1/namespaces/shop/status", &[]),
                "update",
                resource("", "namespaces", "status", "shop", "shop"),
            ),
            (
                of(Method::POST, "/api/v1/namespaces", &[]),
                "create",
                resource("", "namespaces", "", "", ""),
            ),
        ];
        for (attributes, verb, expected) in cases {
            assert_eq!(attributes.verb, verb, "{attributes:?}");
            assert_eq!(attributes.resource, Some(expected));
        }
    }

    #[test]
    fn discovery_and_health_are_paths() {
        for path in [
            "/api",
            "/api/v1",
            "/apis/apps",
            "/apis/apps/v1",
            "/healthz",
            "/openapi/v3",
        ] {
            let attributes = of(Method::GET, path, &[]);
            assert_eq!((attributes.verb.as_str(), attributes.resource), ("get", None), "{path}");
        }
        assert_eq!(of(Method::POST, "/metrics", &[]).verb, "post");
    }

    #[test]
    fn a_refusal_is_worded_as_kube_apiservers() {
        let user = "system:serviceaccount:shop:handlers";
        let patch = of(Method::PATCH, "/apis/apps/v1/namespaces/shop/deployments/web", &[]);
        let status = patch.forbidden(user, "").to_status();
        assert_eq!(
            status["message"],
            "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:shop:handlers\" cannot patch resource \"deployments\" in API group \"apps\" in the namespace \"shop\""
        );
        assert_eq!(
            status["details"],
            serde_json::json!({"name": "web", "group": "apps", "kind": "deployments"})
        );
        let list = of(Method::GET, "/api/v1/pods", &[]);
        assert_eq!(
            list.forbidden(user, "RBAC: role.rbac.authorization.k8s.io \"gone\" not found")
                .message,
            "pods is forbidden: User \"system:serviceaccount:shop:handlers\" cannot list resource \"pods\" in API group \"\" at the cluster scope: RBAC: role.rbac.authorization.k8s.io \"gone\" not found"
        );
        let logs = of(Method::GET, "/api/v1/namespaces/shop/pods/web/log", &[]);
        assert!(
            logs.forbidden(user, "")
                .message
                .contains("cannot get resource \"pods/log\"")
        );
        let metrics = of(Method::GET, "/metrics", &[]);
        let status = metrics.forbidden(user, "").to_status();
        assert_eq!(
            status["message"],
            "forbidden: User \"system:serviceaccount:shop:handlers\" cannot get path \"/metrics\""
        );
        assert_eq!(status["details"], serde_json::json!({}));
    }
}
