//! Kubernetes `Status` answers: the code, reason and message of an error a real server answers, and the success of a delete.

use serde_json::{Value, json};

/// A failed request, answered as a `Status` object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// The HTTP status code.
    pub code: u16,
    /// The machine-readable reason, e.g. `NotFound`.
    pub reason: &'static str,
    /// The human-readable message.
    pub message: String,
    /// What the error is about, when known.
    pub details: Option<Box<Details>>,
}

/// The `details` of a failure: the object it is about and, for an invalid
/// one, the fields that make it so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Details {
    /// `details.name`.
    pub name: String,
    /// `details.kind`: the plural, or the kind of an invalid object.
    pub kind: String,
    /// `details.group`.
    pub group: String,
    /// `details.causes`.
    pub causes: Vec<FieldError>,
}

/// One field that makes an object invalid, as kube-apiserver's field
/// validation reports it: `spec.size: Invalid value: 0: must be positive`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The cause's reason, e.g. `FieldValueInvalid`, `FieldValueRequired`.
    pub reason: &'static str,
    /// The path of the field, e.g. `spec.size`.
    pub field: String,
    /// What is wrong, without the path, e.g. `Invalid value: 0: must be positive`.
    pub message: String,
}

impl FieldError {
    /// `Required value`, with what is required when `detail` says.
    #[must_use]
    pub fn required(field: &str, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_owned()
        } else {
            format!("Required value: {detail}")
        };
        Self::with("FieldValueRequired", field, message)
    }

    /// `Invalid value: <value>: <detail>`; `value` as Go prints it (`"text"`, `3`).
    #[must_use]
    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Self::with("FieldValueInvalid", field, format!("Invalid value: {value}: {detail}"))
    }

    /// `Invalid value` of the wrong type: `Invalid value: "string": <detail>`.
    #[must_use]
    pub fn type_invalid(field: &str, value: &str, detail: &str) -> Self {
        Self::with(
            "FieldValueTypeInvalid",
            field,
            format!("Invalid value: {value}: {detail}"),
        )
    }

    /// `Unsupported value: <value>: supported values: <supported>`.
    #[must_use]
    pub fn not_supported(field: &str, value: &str, supported: &[String]) -> Self {
        Self::with(
            "FieldValueNotSupported",
            field,
            format!("Unsupported value: {value}: supported values: {}", supported.join(", ")),
        )
    }

    /// `Forbidden: <detail>`.
    #[must_use]
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self::with("FieldValueForbidden", field, format!("Forbidden: {detail}"))
    }

    /// `Duplicate value: <value>`.
    #[must_use]
    pub fn duplicate(field: &str, value: &str) -> Self {
        Self::with("FieldValueDuplicate", field, format!("Duplicate value: {value}"))
    }

    /// `Too long: may not be more than <max> bytes`.
    #[must_use]
    pub fn too_long(field: &str, max: u64) -> Self {
        let unit = if max == 1 { "byte" } else { "bytes" };
        Self::with(
            "FieldValueTooLong",
            field,
            format!("Too long: may not be more than {max} {unit}"),
        )
    }

    /// `Too many: <actual>: must have at most <max> items`.
    #[must_use]
    pub fn too_many(field: &str, actual: usize, max: u64) -> Self {
        Self::with(
            "FieldValueTooMany",
            field,
            format!("Too many: {actual}: must have at most {max} items"),
        )
    }

    fn with(reason: &'static str, field: &str, message: String) -> Self {
        Self {
            reason,
            field: field.to_owned(),
            message,
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn about(mut self, group: &str, plural: &str, name: &str) -> Self {
        self.details = Some(Box::new(Details {
            name: name.to_owned(),
            kind: plural.to_owned(),
            group: group.to_owned(),
            causes: Vec::new(),
        }));
        self
    }

    /// 404: `pods "x" not found`.
    #[must_use]
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, plural)),
        )
        .about(group, plural, name)
    }

    /// 404 for a path that names no resource.
    #[must_use]
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409: the object exists already.
    #[must_use]
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, plural)),
        )
        .about(group, plural, name)
    }

    /// 409: a stale resourceVersion or a failed precondition.
    #[must_use]
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, plural)
            ),
        )
        .about(group, plural, name)
    }

    /// 410: a resourceVersion or continue token older than the compaction window.
    #[must_use]
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 422: the object `name` of `kind` in `group` is invalid for one reason,
    /// said whole (`metadata.name: Required value`).
    #[must_use]
    pub fn invalid(group: &str, kind: &str, name: &str, why: &str) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {why}", qualified_kind(group, kind)),
        )
        .about(group, kind, name)
    }

    /// 422: the object `name` of `kind` in `group` is invalid in these fields,
    /// as kube-apiserver words it: one error as it is, several in brackets,
    /// each a cause in the details.
    #[must_use]
    pub fn invalid_fields(group: &str, kind: &str, name: &str, errors: Vec<FieldError>) -> Self {
        let why = match &errors[..] {
            [one] => one.to_string(),
            many => format!(
                "[{}]",
                many.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ),
        };
        let mut error = Self::invalid(group, kind, name, &why);
        if let Some(details) = &mut error.details {
            details.causes = errors;
        }
        error
    }

    /// 422: the request's options are invalid, as `CreateOptions`,
    /// `UpdateOptions`, `PatchOptions` or `DeleteOptions` (`kind`) are checked.
    #[must_use]
    pub fn invalid_options(kind: &str, why: &str) -> Self {
        Self::invalid("meta.k8s.io", kind, "", why)
    }

    /// 409: a server-side apply would change fields another manager owns.
    #[must_use]
    pub fn apply_conflict(message: impl Into<String>) -> Self {
        Self::new(409, "Conflict", message)
    }

    /// 400: the request is malformed.
    #[must_use]
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 405: the verb is not served on this path.
    #[must_use]
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 405, as the API server's router answers a method that no route of the
    /// path takes (a write to a read-only API), with empty details.
    #[must_use]
    pub fn method_not_routed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .about("", "", "")
    }

    /// 405: the resource serves no such verb, e.g. `watch is not supported on
    /// resources of kind "pods.metrics.k8s.io"`.
    #[must_use]
    pub fn method_not_supported(group: &str, plural: &str, verb: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "{verb} is not supported on resources of kind \"{}\"",
                qualified(group, plural)
            ),
        )
        .about(group, plural, "")
    }

    /// 406: the answer cannot be given in the form the client accepts.
    #[must_use]
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 415: the patch type is not supported.
    #[must_use]
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::unsupported_patch(
            content_type,
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json",
        )
    }

    /// 415: a strategic merge patch of a custom resource, whose lists have no
    /// merge keys.
    #[must_use]
    pub fn strategic_patch_of_custom_resource() -> Self {
        Self::unsupported_patch(
            "application/strategic-merge-patch+json",
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        )
    }

    fn unsupported_patch(content_type: &str, accepted: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted} (got {content_type:?})"
            ),
        )
    }

    /// 415: a request body in a media type (or of a kind in that media type)
    /// the emulation does not read.
    #[must_use]
    pub fn unsupported_body(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/vnd.kubernetes.protobuf (for ConfigMaps, Secrets, Namespaces, ServiceAccounts, RBAC objects, Pods, Services, Deployments, Jobs, CronJobs, TokenRequests, Evictions and reviews) (got {content_type})"
            ),
        )
    }

    /// 429, as an overloaded server answers.
    #[must_use]
    pub fn too_many_requests() -> Self {
        Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        )
    }

    /// 403, as kube-apiserver's authorization refuses a request: `why`
    /// after `deployments.apps "web" is forbidden: `, `pods is forbidden: `
    /// without a name, or `forbidden: ` for a path (no resource).
    #[must_use]
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let message = match (resource, name) {
            ("", _) => format!("forbidden: {why}"),
            (resource, "") => format!("{} is forbidden: {why}", qualified(group, resource)),
            (resource, name) => format!("{} \"{name}\" is forbidden: {why}", qualified(group, resource)),
        };
        Self::new(403, "Forbidden", message).about(group, resource, name)
    }

    /// 401, as kube-apiserver answers a credential it cannot authenticate.
    #[must_use]
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 for a creation in a namespace that is being deleted, as the
    /// NamespaceLifecycle admission plugin refuses it.
    #[must_use]
    pub fn namespace_terminating(group: &str, plural: &str, name: &str, namespace: &str) -> Self {
        let mut error = Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                qualified(group, plural)
            ),
        )
        .about(group, plural, name);
        if let Some(details) = error.details.as_mut() {
            details.causes.push(FieldError {
                reason: "NamespaceTerminating",
                field: String::new(),
                message: format!("namespace {namespace} is being terminated"),
            });
        }
        error
    }

    /// 429 for an eviction that a PodDisruptionBudget refuses, as the
    /// eviction subresource answers it.
    #[must_use]
    pub fn disruption_budget(budget: &str, needs: i64, has: i64) -> Self {
        let mut error = Self::new(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
        );
        error.details = Some(Box::new(Details {
            name: String::new(),
            kind: String::new(),
            group: String::new(),
            causes: vec![FieldError {
                reason: "DisruptionBudget",
                field: String::new(),
                message: format!("The disruption budget {budget} needs {needs} healthy pods and has {has} currently"),
            }],
        }));
        error
    }

    /// 500.
    #[must_use]
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 500 without a reason, as kube-apiserver answers an error that is no
    /// API status, such as failing to reach a kubelet.
    #[must_use]
    pub fn unreachable(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    /// 504: a resourceVersion newer than the server has.
    #[must_use]
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {requested}, current: {current}"),
        )
    }

    /// The error with another status code and reason (for injected faults).
    #[must_use]
    pub fn injected(code: u16) -> Self {
        match code {
            429 => Self::too_many_requests(),
            _ => Self::internal(format!("injected fault ({code})")),
        }
    }

    /// The `Status` object.
    #[must_use]
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty() {
            // An unknown reason is left out, as the API server serializes it.
            if let Some(status) = status.as_object_mut() {
                status.remove("reason");
            }
        }
        if let Some(details) = &self.details {
            // Empty fields are left out, as the API server serializes them.
            let mut fields: serde_json::Map<String, Value> = [
                ("name", &details.name),
                ("group", &details.group),
                ("kind", &details.kind),
            ]
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .map(|(field, value)| (field.to_owned(), json!(value)))
            .collect();
            if !details.causes.is_empty() {
                let causes: Vec<Value> = details
                    .causes
                    .iter()
                    .map(|cause| json!({"reason": cause.reason, "message": cause.message, "field": cause.field}))
                    .collect();
                fields.insert("causes".into(), json!(causes));
            }
            status["details"] = Value::Object(fields);
        }
        status
    }
}

/// The `Status` of success a delete answers for a resource whose storage
/// does not answer the deleted object: the object's name, group, resource
/// (as `kind`) and uid.
#[must_use]
pub fn deleted(group: &str, plural: &str, name: &str, uid: &str) -> Value {
    let mut details = json!({"name": name, "kind": plural, "uid": uid});
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

/// `ConfigMap` or `Deployment.apps`, as the API server names a kind in messages.
fn qualified_kind(group: &str, kind: &str) -> String {
    qualified(group, kind)
}

/// `pods` or `deployments.apps`, as the API server names resources in messages.
fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}

/// `Result` with [`ApiError`].
pub type Result<T, E = ApiError> = std::result::Result<T, E>;
