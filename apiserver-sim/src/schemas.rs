//! The built-in types' OpenAPI schemas, generated once from k8s-openapi's types (its `schemars` feature) and annotated as kube-apiserver annotates them.
//!
//! Each schema is named as kube-apiserver names it
//! (`io.k8s.api.apps.v1.Deployment`) and refers to the others with
//! `#/components/schemas/NAME`, wrapped in `allOf` where the reference has a
//! description beside it, as kube-apiserver's OpenAPI v3 documents write
//! them. A kind's schema carries `x-kubernetes-group-version-kind`, and the
//! lists that a strategic merge patch merges carry
//! `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key`, from
//! the same table the emulation merges them by, so kubectl computes the
//! patches the server applies.
//!
//! The schemas serve two ends: the OpenAPI documents (`openapi`), and the
//! pruning of built-in objects to their types' fields ([`prune`]), as
//! kube-apiserver's decoding drops what a Go type has no field for.

use std::collections::HashMap;
use std::sync::OnceLock;

use k8s_openapi::Resource;
use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, autoscaling, batch, certificates, coordination, core,
    discovery, events, flowcontrol, networking, node, policy, rbac, scheduling, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

/// Where references point.
pub(crate) const REF_PREFIX: &str = "#/components/schemas/";

/// Every built-in schema, by name, and the kinds among them.
#[derive(Debug)]
pub(crate) struct Schemas {
    /// Every schema, by name.
    pub(crate) definitions: Map<String, Value>,
    /// The schema name of each kind, by (group, version, kind).
    pub(crate) kinds: HashMap<(String, String, String), String>,
}

/// The built-in schemas, generated on first use.
pub(crate) fn built_in() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(generate)
}

impl Schemas {
    /// The schema name of a built-in kind.
    pub(crate) fn kind(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.kinds
            .get(&(group.to_owned(), version.to_owned(), kind.to_owned()))
            .map(String::as_str)
    }

    /// The schema a property schema stands for: itself, or the one it refers to.
    pub(crate) fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        let reference = schema["$ref"].as_str().or_else(|| schema["allOf"][0]["$ref"].as_str());
        match reference.and_then(|reference| reference.strip_prefix(REF_PREFIX)) {
            Some(name) => self.definitions.get(name).unwrap_or(schema),
            None => schema,
        }
    }
}

/// A type's kind and schema, generated into `generator`.
macro_rules! kinds {
    ($generator:expr, $kinds:expr, $($type:ty),* $(,)?) => {
        $(
            let schema = $generator.subschema_for::<$type>();
            let name = schema
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|reference| reference.strip_prefix(REF_PREFIX))
                .unwrap_or_default()
                .to_owned();
            $kinds.insert(
                (<$type>::GROUP.to_owned(), <$type>::VERSION.to_owned(), <$type>::KIND.to_owned()),
                name,
            );
        )*
    };
}

fn generate() -> Schemas {
    let mut generator = SchemaSettings::openapi3()
        .with(|settings| settings.meta_schema = None)
        .into_generator();
    let mut kinds = HashMap::new();
    kinds!(
        generator,
        kinds,
        core::v1::ComponentStatus,
        core::v1::ConfigMap,
        core::v1::Endpoints,
        core::v1::Event,
        core::v1::LimitRange,
        core::v1::Namespace,
        core::v1::Node,
        core::v1::PersistentVolume,
        core::v1::PersistentVolumeClaim,
        core::v1::Pod,
        core::v1::PodTemplate,
        core::v1::ReplicationController,
        core::v1::ResourceQuota,
        core::v1::Secret,
        core::v1::Service,
        core::v1::ServiceAccount,
        apps::v1::ControllerRevision,
        apps::v1::DaemonSet,
        apps::v1::Deployment,
        apps::v1::ReplicaSet,
        apps::v1::StatefulSet,
        autoscaling::v1::HorizontalPodAutoscaler,
        autoscaling::v2::HorizontalPodAutoscaler,
        autoscaling::v1::Scale,
        batch::v1::CronJob,
        batch::v1::Job,
        policy::v1::PodDisruptionBudget,
        policy::v1::Eviction,
        rbac::v1::ClusterRole,
        rbac::v1::ClusterRoleBinding,
        rbac::v1::Role,
        rbac::v1::RoleBinding,
        networking::v1::Ingress,
        networking::v1::IngressClass,
        networking::v1::NetworkPolicy,
        storage::v1::CSIDriver,
        storage::v1::CSINode,
        storage::v1::CSIStorageCapacity,
        storage::v1::StorageClass,
        storage::v1::VolumeAttachment,
        scheduling::v1::PriorityClass,
        node::v1::RuntimeClass,
        coordination::v1::Lease,
        discovery::v1::EndpointSlice,
        events::v1::Event,
        admissionregistration::v1::MutatingWebhookConfiguration,
        admissionregistration::v1::ValidatingWebhookConfiguration,
        admissionregistration::v1::ValidatingAdmissionPolicy,
        admissionregistration::v1::ValidatingAdmissionPolicyBinding,
        flowcontrol::v1::FlowSchema,
        flowcontrol::v1::PriorityLevelConfiguration,
        certificates::v1::CertificateSigningRequest,
        authentication::v1::SelfSubjectReview,
        authentication::v1::TokenRequest,
        authentication::v1::TokenReview,
        authorization::v1::LocalSubjectAccessReview,
        authorization::v1::SelfSubjectAccessReview,
        authorization::v1::SelfSubjectRulesReview,
        authorization::v1::SubjectAccessReview,
        apiextensions::v1::CustomResourceDefinition,
        apiregistration::v1::APIService,
    );
    let mut definitions = generator.take_definitions(true);
    definitions.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(),
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
    );
    for ((group, version, kind), name) in &kinds {
        if let Some(schema) = definitions.get_mut(name).and_then(Value::as_object_mut) {
            schema.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": group, "version": version, "kind": kind}]),
            );
        }
    }
    let roots: Vec<String> = kinds.values().cloned().collect();
    let mut annotated = std::collections::HashSet::new();
    for root in roots {
        annotate_patch_strategies(&mut definitions, &root, &mut Vec::new(), &mut annotated);
    }
    Schemas { definitions, kinds }
}

/// Marks the lists a strategic merge patch merges, walking from a kind's
/// schema with the path of field names that leads to each property.
fn annotate_patch_strategies(
    definitions: &mut Map<String, Value>,
    name: &str,
    path: &mut Vec<String>,
    visited: &mut std::collections::HashSet<(String, Option<String>)>,
) {
    // The table matches at most the two last field names, so a schema needs
    // walking once per field that leads to it; that also ends the walk of a
    // recursive type (JSONSchemaProps).
    if !visited.insert((name.to_owned(), path.last().cloned())) {
        return;
    }
    let Some(properties) = definitions
        .get(name)
        .and_then(|schema| schema["properties"].as_object())
        .cloned()
    else {
        return;
    };
    for (property, schema) in properties {
        path.push(property.clone());
        let is_array = schema["type"] == "array";
        if is_array
            && let Some((strategy, key)) = crate::store::patch_strategy(path)
            && let Some(target) = definitions
                .get_mut(name)
                .and_then(|schema| schema["properties"].get_mut(&property))
                .and_then(Value::as_object_mut)
        {
            target.insert("x-kubernetes-patch-strategy".into(), json!(strategy));
            if let Some(key) = key {
                target.insert("x-kubernetes-patch-merge-key".into(), json!(key));
            }
        }
        let element = if is_array { &schema["items"] } else { &schema };
        let reference = element["$ref"]
            .as_str()
            .or_else(|| element["allOf"][0]["$ref"].as_str())
            .or_else(|| element["additionalProperties"]["$ref"].as_str());
        if let Some(child) = reference.and_then(|reference| reference.strip_prefix(REF_PREFIX)) {
            annotate_patch_strategies(definitions, child, path, visited);
        }
        path.pop();
    }
}

/// Drops the fields of a built-in object that its type does not have, as
/// kube-apiserver's decoding drops them: the paths dropped
/// (`spec.containers[0].colour`). Objects of kinds without a schema are left
/// as they are.
pub(crate) fn prune(group: &str, version: &str, kind: &str, object: &mut Value) -> Vec<String> {
    let schemas = built_in();
    let mut pruned = Vec::new();
    if let Some(schema) = schemas
        .kind(group, version, kind)
        .and_then(|name| schemas.definitions.get(name))
    {
        prune_value(schemas, schema, object, "", &mut pruned);
    }
    pruned
}

fn prune_value(schemas: &Schemas, schema: &Value, value: &mut Value, path: &str, pruned: &mut Vec<String>) {
    let schema = schemas.resolve(schema);
    match value {
        Value::Object(fields) => {
            if let Some(properties) = schema["properties"].as_object() {
                fields.retain(|name, field| match properties.get(name) {
                    Some(property) => {
                        let child = if path.is_empty() {
                            name.clone()
                        } else {
                            format!("{path}.{name}")
                        };
                        prune_value(schemas, property, field, &child, pruned);
                        true
                    }
                    None => {
                        pruned.push(if path.is_empty() {
                            name.clone()
                        } else {
                            format!("{path}.{name}")
                        });
                        false
                    }
                });
            } else if schema["additionalProperties"].is_object() {
                for (name, field) in fields.iter_mut() {
                    prune_value(
                        schemas,
                        &schema["additionalProperties"],
                        field,
                        &format!("{path}.{name}"),
                        pruned,
                    );
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for (index, item) in items.iter_mut().enumerate() {
                prune_value(schemas, &schema["items"], item, &format!("{path}[{index}]"), pruned);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_as_kube_apiserver_names_them_and_lists_carry_their_merge_keys() {
        let schemas = built_in();
        let name = schemas.kind("apps", "v1", "Deployment").unwrap();
        assert_eq!(name, "io.k8s.api.apps.v1.Deployment");
        let deployment = &schemas.definitions[name];
        assert_eq!(
            deployment["x-kubernetes-group-version-kind"],
            json!([{"group": "apps", "version": "v1", "kind": "Deployment"}])
        );
        let containers = &schemas.definitions["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        let ports = &schemas.definitions["io.k8s.api.core.v1.Container"]["properties"]["ports"];
        assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
    }

    #[test]
    fn unknown_fields_of_built_in_objects_are_pruned() {
        let mut pod = json!({"metadata": {"name": "p", "colour": "red"},
                             "spec": {"containers": [{"name": "a", "image": "a", "imagePullPolcy": "Always",
                                                      "resources": {"limits": {"cpu": "1"}}}],
                                      "nodeSelector": {"disk": "ssd"}}});
        let pruned = prune("", "v1", "Pod", &mut pod);
        assert_eq!(pruned, ["metadata.colour", "spec.containers[0].imagePullPolcy"]);
        assert_eq!(pod["spec"]["nodeSelector"]["disk"], "ssd");
        assert_eq!(pod["spec"]["containers"][0]["resources"]["limits"]["cpu"], "1");
    }
}
