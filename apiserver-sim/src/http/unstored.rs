//! What is answered rather than stored: `componentstatuses`, the access and token reviews, a service account's token, evictions, and what a kubelet serves.

use axum::body::Body;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::{Request, json_response};
use crate::controllers::{self, disruption};
use crate::status::{ApiError, Result};
use crate::store::Preconditions;
use crate::{access_review, component_status, kubelet_api, resources, token};

impl Request<'_> {
    /// The resources whose objects are computed or answered, not stored:
    /// `componentstatuses` and the reviews. `None` for the others.
    pub(super) fn unstored_resource(
        &self,
        def: &resources::ResourceDef,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Option<Result<Response>> {
        match (def.group.as_str(), def.plural.as_str()) {
            ("", "componentstatuses") => Some(self.component_statuses(name)),
            (
                "authorization.k8s.io",
                "selfsubjectaccessreviews" | "subjectaccessreviews" | "localsubjectaccessreviews",
            ) => Some(self.review(name, |body| {
                access_review::access_review(&self.shared.authorizer(), self.user, &def.kind, namespace, body)
            })),
            ("authorization.k8s.io", "selfsubjectrulesreviews") => Some(self.review(name, |body| {
                access_review::self_subject_rules_review(&self.shared.authorizer(), self.user, body)
            })),
            ("authentication.k8s.io", "selfsubjectreviews") => {
                Some(self.review(name, |body| access_review::self_subject_review(self.user, body)))
            }
            ("authentication.k8s.io", "tokenreviews") => Some(self.review(name, |body| {
                token::review(&self.shared.store, &self.shared.tokens, body)
            })),
            _ => None,
        }
    }

    /// A review: created (`POST` to the collection) and answered, `201`.
    fn review(&self, name: Option<&str>, answer: impl FnOnce(&Value) -> Result<Value>) -> Result<Response> {
        if *self.method != Method::POST || name.is_some() {
            return Err(ApiError::method_not_routed());
        }
        let answered = answer(&self.json_body()?)?;
        Ok(json_response(StatusCode::CREATED, &answered))
    }

    /// `componentstatuses`, read-only and computed on each request.
    fn component_statuses(&self, name: Option<&str>) -> Result<Response> {
        let answer = match (self.method, name) {
            (&Method::GET, _) if self.flag("watch") => {
                return Err(ApiError::method_not_supported("", "componentstatuses", "watch"));
            }
            (&Method::GET, None) if self.wants_table() => component_status::table(),
            (&Method::GET, None) => component_status::list(),
            (&Method::GET, Some(name)) => component_status::get(name)?,
            _ => return Err(ApiError::method_not_routed()),
        };
        let mut response = json_response(StatusCode::OK, &answer);
        response
            .headers_mut()
            .insert("warning", HeaderValue::from_static(component_status::WARNING));
        Ok(response)
    }

    /// The subresources that are no part of a stored object: a service
    /// account's `token`, and what a kubelet serves. `None` for the others.
    pub(super) fn unstored_subresource(
        &self,
        def: &resources::ResourceDef,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
    ) -> Option<Result<Response>> {
        let store = &self.shared.store;
        let namespace = namespace.unwrap_or_default();
        let answer = match (def.group.as_str(), def.kind.as_str(), subresource) {
            ("", "ServiceAccount", "token") => {
                if *self.method != Method::POST {
                    return Some(Err(ApiError::method_not_routed()));
                }
                return Some(
                    self.json_body()
                        .and_then(|body| token::issue(store, &self.shared.tokens, namespace, name, &body))
                        .map(|issued| json_response(StatusCode::CREATED, &issued)),
                );
            }
            ("", "Pod", "eviction") => {
                if *self.method != Method::POST {
                    return Some(Err(ApiError::method_not_routed()));
                }
                return Some(self.evict(namespace, name));
            }
            ("", "Pod", "log") if *self.method != Method::GET => return Some(Err(ApiError::method_not_routed())),
            ("", "Pod", "exec" | "attach" | "portforward") if !matches!(*self.method, Method::GET | Method::POST) => {
                return Some(Err(ApiError::method_not_routed()));
            }
            ("", "Pod", "log" | "exec" | "attach" | "portforward") => {
                kubelet_api::pod(store, namespace, name, subresource, self.query)
            }
            ("", "Node", "proxy") => kubelet_api::node_proxy(store, name),
            _ => return None,
        };
        Some(answer.map(|kubelet_api::Answer::NoLogs| {
            let mut response = Response::new(Body::empty());
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            response
        }))
    }

    /// `pods/eviction`: the pod is deleted as its Eviction's delete options
    /// say, and the answer is a `Status` of success, `201`, unless a
    /// PodDisruptionBudget that covers the Ready pod allows no disruption
    /// (`429`, as kube-apiserver answers; `kubectl drain` retries).
    fn evict(&self, namespace: &str, name: &str) -> Result<Response> {
        let eviction = self.json_body()?;
        if !matches!(eviction["kind"].as_str(), None | Some("Eviction")) {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({}) does not match the expected kind (Eviction)",
                eviction["kind"].as_str().unwrap_or_default()
            )));
        }
        if eviction["metadata"]["name"].as_str().is_some_and(|named| named != name) {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
        let options = &eviction["deleteOptions"];
        let preconditions = Preconditions {
            uid: options["preconditions"]["uid"].as_str().map(str::to_owned),
            resource_version: options["preconditions"]["resourceVersion"].as_str().map(str::to_owned),
        };
        let write_options = self.write_options("DeleteOptions", Some(options))?;
        let mut transaction = self.shared.store.transaction(write_options);
        let pod = transaction.get(&resources::ids::pods(), Some(namespace), name)?;
        if controllers::is_ready(&pod) {
            for budget in disruption::budgets_of(&transaction, &pod)? {
                let status = disruption::status(&transaction, &budget)?;
                if status["disruptionsAllowed"].as_i64().unwrap_or(0) < 1 {
                    return Err(ApiError::disruption_budget(
                        &budget.name,
                        status["desiredHealthy"].as_i64().unwrap_or(0),
                        status["currentHealthy"].as_i64().unwrap_or(0),
                    ));
                }
            }
        }
        transaction.delete(&resources::ids::pods(), Some(namespace), name, &preconditions)?;
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
        Ok(json_response(StatusCode::CREATED, &status))
    }
}
