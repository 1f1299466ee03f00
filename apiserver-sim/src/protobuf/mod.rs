//! Request bodies in Kubernetes' protobuf encoding, as kubectl's typed commands (`kubectl create configmap`, `secret`, `namespace`, `serviceaccount`, `role`, `deployment`, `job`, `service`, `token`, `run`, `drain`, …) send them.
//!
//! A body is the magic `k8s\0` and a `runtime.Unknown` envelope naming the
//! object's `apiVersion` and `kind` around its protobuf bytes. The kinds
//! kubectl's simple generators send (ConfigMaps, Secrets, Namespaces,
//! ServiceAccounts, RBAC objects, TokenRequests, the Evictions of
//! `kubectl drain`, the reviews of `kubectl auth`, and the workloads and
//! Services of `kubectl create` and `run`, in the fields `workloads` reads)
//! are decoded, with k8s-pb's message
//! types, into the JSON the rest of the emulation takes; any other kind is
//! `415 Unsupported Media Type`, as from a server that cannot read it.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_pb::api::authentication::v1 as authentication;
use k8s_pb::api::authorization::v1 as authorization;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::policy::v1 as policy;
use k8s_pb::api::rbac::v1 as rbac;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{Map, Value, json};

use crate::status::{ApiError, Result};

mod workloads;

/// The media type of a protobuf body.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// What every protobuf-encoded object starts with.
const MAGIC: &[u8] = b"k8s\0";

/// The JSON form of a protobuf-encoded object.
///
/// # Errors
///
/// 400 for bytes that are no protobuf-encoded object, 415 for a kind whose
/// protobuf form is not read here.
pub(crate) fn decode(body: &[u8]) -> Result<Value> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| ApiError::bad_request("the protobuf body does not start with the \"k8s\\x00\" prefix"))?;
    let unknown = Unknown::decode(envelope).map_err(malformed)?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let raw = raw.as_slice();
    let mut object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => config_map(core::ConfigMap::decode(raw).map_err(malformed)?),
        ("v1", "Secret") => secret(core::Secret::decode(raw).map_err(malformed)?),
        ("v1", "Namespace") => namespace(core::Namespace::decode(raw).map_err(malformed)?),
        ("v1", "ServiceAccount") => service_account(core::ServiceAccount::decode(raw).map_err(malformed)?),
        ("v1", "Pod") => workloads::pod(core::Pod::decode(raw).map_err(malformed)?)?,
        ("v1", "Service") => workloads::service(core::Service::decode(raw).map_err(malformed)?)?,
        ("apps/v1", "Deployment") => {
            workloads::deployment(k8s_pb::api::apps::v1::Deployment::decode(raw).map_err(malformed)?)?
        }
        ("batch/v1", "Job") => workloads::job(k8s_pb::api::batch::v1::Job::decode(raw).map_err(malformed)?)?,
        ("batch/v1", "CronJob") => {
            workloads::cron_job(k8s_pb::api::batch::v1::CronJob::decode(raw).map_err(malformed)?)?
        }
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => {
            let review = authorization::SelfSubjectRulesReview::decode(raw).map_err(malformed)?;
            let namespace = review.spec.and_then(|spec| spec.namespace);
            with_meta(
                review.metadata,
                [("spec", without_nulls(json!({"namespace": namespace})))],
            )
        }
        ("authentication.k8s.io/v1", "TokenRequest") => {
            token_request(authentication::TokenRequest::decode(raw).map_err(malformed)?)
        }
        ("policy/v1", "Eviction") => eviction(policy::Eviction::decode(raw).map_err(malformed)?),
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            access_review(authorization::SelfSubjectAccessReview::decode(raw).map_err(malformed)?)
        }
        ("authentication.k8s.io/v1", "SelfSubjectReview") => {
            let review = authentication::SelfSubjectReview::decode(raw).map_err(malformed)?;
            with_meta(review.metadata, [])
        }
        ("rbac.authorization.k8s.io/v1", "Role") => {
            let role = rbac::Role::decode(raw).map_err(malformed)?;
            with_meta(role.metadata, [("rules", rules(role.rules))])
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            let role = rbac::ClusterRole::decode(raw).map_err(malformed)?;
            let aggregation = role.aggregation_rule.map(|rule| {
                let selectors: Vec<Value> = rule.cluster_role_selectors.into_iter().map(label_selector).collect();
                json!({"clusterRoleSelectors": selectors})
            });
            with_meta(
                role.metadata,
                [
                    ("rules", rules(role.rules)),
                    ("aggregationRule", aggregation.unwrap_or(Value::Null)),
                ],
            )
        }
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            let binding = rbac::RoleBinding::decode(raw).map_err(malformed)?;
            binding_json(binding.metadata, binding.subjects, binding.role_ref)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            let binding = rbac::ClusterRoleBinding::decode(raw).map_err(malformed)?;
            binding_json(binding.metadata, binding.subjects, binding.role_ref)
        }
        _ => {
            return Err(ApiError::unsupported_body(&format!(
                "{MEDIA_TYPE} ({api_version} {kind})"
            )));
        }
    };
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

fn malformed(error: prost::DecodeError) -> ApiError {
    ApiError::bad_request(format!("the protobuf body is malformed: {error}"))
}

/// An object of `metadata` and the fields given, those that are set.
fn with_meta<const N: usize>(metadata: Option<meta::ObjectMeta>, fields: [(&str, Value); N]) -> Value {
    let mut object = Map::new();
    object.insert("metadata".into(), object_meta(metadata.unwrap_or_default()));
    insert_set(&mut object, fields, true);
    Value::Object(object)
}

/// Inserts the fields that are set: not null, not an empty list or object,
/// and unless `keep_empty_strings`, not an empty string either.
fn insert_set<const N: usize>(object: &mut Map<String, Value>, fields: [(&str, Value); N], keep_empty_strings: bool) {
    for (name, value) in fields {
        let empty = match &value {
            Value::Null => true,
            Value::String(text) => !keep_empty_strings && text.is_empty(),
            Value::Array(items) => items.is_empty(),
            Value::Object(fields) => fields.is_empty(),
            _ => false,
        };
        if !empty {
            object.insert(name.into(), value);
        }
    }
}

/// The fields of `ObjectMeta` a client writes.
pub(super) fn object_meta(metadata: meta::ObjectMeta) -> Value {
    let owners: Vec<Value> = metadata
        .owner_references
        .into_iter()
        .map(|owner| {
            let mut reference = json!({
                "apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name, "uid": owner.uid,
            });
            if let Some(controller) = owner.controller {
                reference["controller"] = json!(controller);
            }
            if let Some(block) = owner.block_owner_deletion {
                reference["blockOwnerDeletion"] = json!(block);
            }
            reference
        })
        .collect();
    let strings = |value: Option<String>| value.map_or(Value::Null, Value::String);
    let fields = [
        ("name", strings(metadata.name)),
        ("generateName", strings(metadata.generate_name)),
        ("namespace", strings(metadata.namespace)),
        ("uid", strings(metadata.uid)),
        ("resourceVersion", strings(metadata.resource_version)),
        ("labels", json!(metadata.labels)),
        ("annotations", json!(metadata.annotations)),
        ("ownerReferences", json!(owners)),
        ("finalizers", json!(metadata.finalizers)),
    ];
    let mut object = Map::new();
    insert_set(&mut object, fields, false);
    Value::Object(object)
}

fn base64_values(values: BTreeMap<String, Vec<u8>>) -> Value {
    let encoded: Map<String, Value> = values
        .into_iter()
        .map(|(key, bytes)| (key, json!(STANDARD.encode(bytes))))
        .collect();
    Value::Object(encoded)
}

fn config_map(config_map: core::ConfigMap) -> Value {
    with_meta(
        config_map.metadata,
        [
            ("data", json!(config_map.data)),
            ("binaryData", base64_values(config_map.binary_data)),
            ("immutable", json!(config_map.immutable)),
        ],
    )
}

fn secret(secret: core::Secret) -> Value {
    with_meta(
        secret.metadata,
        [
            ("data", base64_values(secret.data)),
            ("stringData", json!(secret.string_data)),
            ("type", json!(secret.r#type)),
            ("immutable", json!(secret.immutable)),
        ],
    )
}

fn namespace(namespace: core::Namespace) -> Value {
    let finalizers = namespace.spec.map(|spec| spec.finalizers).unwrap_or_default();
    let spec = if finalizers.is_empty() {
        Value::Null
    } else {
        json!({"finalizers": finalizers})
    };
    with_meta(namespace.metadata, [("spec", spec)])
}

fn service_account(account: core::ServiceAccount) -> Value {
    let secrets: Vec<Value> = account
        .secrets
        .into_iter()
        .map(|secret| {
            json!({"kind": secret.kind, "namespace": secret.namespace, "name": secret.name, "uid": secret.uid,
                   "apiVersion": secret.api_version, "resourceVersion": secret.resource_version,
                   "fieldPath": secret.field_path})
        })
        .map(without_nulls)
        .collect();
    let pull_secrets: Vec<Value> = account
        .image_pull_secrets
        .into_iter()
        .map(|secret| without_nulls(json!({"name": secret.name})))
        .collect();
    with_meta(
        account.metadata,
        [
            ("secrets", json!(secrets)),
            ("imagePullSecrets", json!(pull_secrets)),
            (
                "automountServiceAccountToken",
                json!(account.automount_service_account_token),
            ),
        ],
    )
}

fn token_request(request: authentication::TokenRequest) -> Value {
    let spec = request.spec.unwrap_or_default();
    let bound = spec.bound_object_ref.map_or(Value::Null, |bound| {
        without_nulls(
            json!({"kind": bound.kind, "apiVersion": bound.api_version, "name": bound.name, "uid": bound.u_id}),
        )
    });
    let spec = without_nulls(json!({
        "audiences": spec.audiences,
        "expirationSeconds": spec.expiration_seconds,
        "boundObjectRef": bound,
    }));
    with_meta(request.metadata, [("spec", spec)])
}

fn eviction(eviction: policy::Eviction) -> Value {
    let options = eviction.delete_options.map_or(Value::Null, |options| {
        let preconditions = options.preconditions.map_or(Value::Null, |preconditions| {
            without_nulls(json!({"uid": preconditions.uid, "resourceVersion": preconditions.resource_version}))
        });
        let dry_run = if options.dry_run.is_empty() {
            Value::Null
        } else {
            json!(options.dry_run)
        };
        without_nulls(json!({
            "gracePeriodSeconds": options.grace_period_seconds,
            "preconditions": preconditions,
            "propagationPolicy": options.propagation_policy,
            "dryRun": dry_run,
        }))
    });
    with_meta(eviction.metadata, [("deleteOptions", options)])
}

fn access_review(review: authorization::SelfSubjectAccessReview) -> Value {
    let spec = review.spec.unwrap_or_default();
    let resource = spec.resource_attributes.map_or(Value::Null, |attributes| {
        without_nulls(json!({
            "namespace": attributes.namespace, "verb": attributes.verb, "group": attributes.group,
            "version": attributes.version, "resource": attributes.resource,
            "subresource": attributes.subresource, "name": attributes.name,
        }))
    });
    let non_resource = spec.non_resource_attributes.map_or(Value::Null, |attributes| {
        without_nulls(json!({"path": attributes.path, "verb": attributes.verb}))
    });
    let spec = without_nulls(json!({"resourceAttributes": resource, "nonResourceAttributes": non_resource}));
    with_meta(review.metadata, [("spec", spec)])
}

fn rules(rules: Vec<rbac::PolicyRule>) -> Value {
    let rules: Vec<Value> = rules
        .into_iter()
        .map(|rule| {
            let fields = [
                ("verbs", rule.verbs),
                ("apiGroups", rule.api_groups),
                ("resources", rule.resources),
                ("resourceNames", rule.resource_names),
                ("nonResourceURLs", rule.non_resource_ur_ls),
            ];
            let rule: Map<String, Value> = fields
                .into_iter()
                // `verbs` is required and kept even when empty.
                .filter(|(name, values)| *name == "verbs" || !values.is_empty())
                .map(|(name, values)| (name.to_owned(), json!(values)))
                .collect();
            Value::Object(rule)
        })
        .collect();
    json!(rules)
}

pub(super) fn label_selector(selector: meta::LabelSelector) -> Value {
    let expressions: Vec<Value> = selector
        .match_expressions
        .into_iter()
        .map(|requirement| {
            without_nulls(
                json!({"key": requirement.key, "operator": requirement.operator, "values": requirement.values}),
            )
        })
        .collect();
    let mut object = Map::new();
    if !selector.match_labels.is_empty() {
        object.insert("matchLabels".into(), json!(selector.match_labels));
    }
    if !expressions.is_empty() {
        object.insert("matchExpressions".into(), json!(expressions));
    }
    Value::Object(object)
}

fn binding_json(
    metadata: Option<meta::ObjectMeta>,
    subjects: Vec<rbac::Subject>,
    role_ref: Option<rbac::RoleRef>,
) -> Value {
    let subjects: Vec<Value> = subjects
        .into_iter()
        .map(|subject| {
            without_nulls(
                json!({"kind": subject.kind, "apiGroup": subject.api_group, "name": subject.name,
                                 "namespace": subject.namespace}),
            )
        })
        .collect();
    let role_ref = role_ref.map_or(Value::Null, |role_ref| {
        without_nulls(json!({"apiGroup": role_ref.api_group, "kind": role_ref.kind, "name": role_ref.name}))
    });
    with_meta(metadata, [("subjects", json!(subjects)), ("roleRef", role_ref)])
}

/// The object without the fields that are `null` or empty strings: unset in protobuf.
pub(super) fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(_, value)| !value.is_null() && value.as_str() != Some(""))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut body = MAGIC.to_vec();
        body.extend(unknown.encode_to_vec());
        body
    }

    #[test]
    fn a_secret_is_read_with_its_bytes_in_base64() {
        let secret = core::Secret {
            metadata: Some(meta::ObjectMeta {
                name: Some("token".into()),
                labels: [("app".to_owned(), "web".to_owned())].into(),
                ..meta::ObjectMeta::default()
            }),
            data: [("key".to_owned(), b"value".to_vec())].into(),
            r#type: Some("Opaque".into()),
            ..core::Secret::default()
        };
        let body = envelope("v1", "Secret", secret.encode_to_vec());
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": "token", "labels": {"app": "web"}}, "data": {"key": "dmFsdWU="}})
        );
    }

    #[test]
    fn a_kind_not_read_here_is_an_unsupported_media_type() {
        let body = envelope("apps/v1", "StatefulSet", Vec::new());
        assert_eq!(decode(&body).unwrap_err().code, 415);
        assert_eq!(decode(b"{\"kind\":\"ConfigMap\"}").unwrap_err().code, 400);
    }
}
