//! The OpenAPI documents kubectl downloads: `/openapi/v3` (an index, and a document per group version) and `/openapi/v2` (one document).
//!
//! kubectl reads them to validate what it sends (it looks up whether each
//! kind's `PATCH` takes the `fieldValidation` parameter, and if so leaves the
//! checking to the server, sending `fieldValidation=Strict`), to compute the
//! strategic merge patches of `kubectl apply` (the schemas' patch
//! strategies and merge keys), and for `kubectl explain`. The schemas are the
//! built-in types' ([`crate::schemas`]) and each served CRD version's
//! `openAPIV3Schema`, with `apiVersion`, `kind` and `metadata` added as
//! kube-apiserver adds them. The paths are each resource's collection and
//! object, with their verbs, parameters and the kind they take and answer.
//!
//! The v3 index names each document with a hash of its content
//! (`/openapi/v3/apis/apps/v1?hash=…`), as kube-apiserver does, so clients
//! that cache documents by URL see a CRD's new version. The v2 document is
//! served as JSON; kube-apiserver also serves it in protobuf, which client-go's
//! `OpenAPISchema` asks for (kubectl falls back to it only when v3 fails).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::resources::ResourceDef;
use crate::schemas::{self, REF_PREFIX};
use crate::store::Store;

/// The documents of the resources served now, made when first asked for and
/// made again once the served resources change (a CRD comes or goes).
#[derive(Debug, Default)]
pub(crate) struct Documents {
    cache: Mutex<Option<Arc<Cached>>>,
}

#[derive(Debug)]
struct Cached {
    /// The resources the documents describe.
    defs: Vec<ResourceDef>,
    index: Bytes,
    /// Each group version's document, by its path (`apis/apps/v1`).
    documents: HashMap<String, Bytes>,
    /// Made when first asked for: kubectl rarely does.
    v2: std::sync::OnceLock<Bytes>,
}

impl Documents {
    fn current(&self, store: &Store) -> Arc<Cached> {
        let defs: Vec<ResourceDef> = store.defs().iter().map(|def| (**def).clone()).collect();
        let mut cache = crate::lock(&self.cache);
        if let Some(cached) = cache.as_ref().filter(|cached| cached.defs == defs) {
            return Arc::clone(cached);
        }
        let refs: Vec<&ResourceDef> = defs.iter().collect();
        let mut documents = HashMap::new();
        let mut index = Map::new();
        for (group, version) in group_versions(&refs) {
            let document = v3_document(&refs, &group, &version);
            let path = gv_path(&group, &version);
            index.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", hash(&document))}),
            );
            documents.insert(path, Bytes::from(crate::encoding::to_vec(&document)));
        }
        let cached = Arc::new(Cached {
            index: Bytes::from(crate::encoding::to_vec(&json!({"paths": index}))),
            v2: std::sync::OnceLock::new(),
            documents,
            defs,
        });
        *cache = Some(Arc::clone(&cached));
        cached
    }

    /// `/openapi/v3`: the index of the documents.
    pub(crate) fn v3_index(&self, store: &Store) -> Bytes {
        self.current(store).index.clone()
    }

    /// `/openapi/v3/{path}`: a group version's document, if it is served.
    pub(crate) fn v3_document(&self, store: &Store, path: &str) -> Option<Bytes> {
        self.current(store).documents.get(path).cloned()
    }

    /// `/openapi/v2`.
    pub(crate) fn v2(&self, store: &Store) -> Bytes {
        let cached = self.current(store);
        cached
            .v2
            .get_or_init(|| {
                let refs: Vec<&ResourceDef> = cached.defs.iter().collect();
                Bytes::from(crate::encoding::to_vec(&v2_document(&refs)))
            })
            .clone()
    }
}

/// `api/v1` or `apis/GROUP/VERSION`, as the index keys documents.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn group_versions(defs: &[&ResourceDef]) -> BTreeSet<(String, String)> {
    defs.iter()
        .map(|def| (def.group.clone(), def.version.clone()))
        .collect()
}

/// The hash a document's URL carries: SHA-512 of its JSON, in upper-case hex.
fn hash(document: &Value) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA512, &crate::encoding::to_vec(document));
    digest.as_ref().iter().map(|byte| format!("{byte:02X}")).collect()
}

/// The v3 document of one group version.
pub(crate) fn v3_document(defs: &[&ResourceDef], group: &str, version: &str) -> Value {
    let served: Vec<&&ResourceDef> = defs
        .iter()
        .filter(|def| def.group == group && def.version == version)
        .collect();
    let mut schemas = BTreeMap::new();
    let mut paths = Map::new();
    for def in &served {
        let Some((name, schema)) = kind_schema(def) else {
            continue;
        };
        schemas.insert(name.clone(), schema);
        for (path, item) in path_items(def, &name) {
            paths.insert(path, item);
        }
    }
    let wanted: Vec<String> = schemas.keys().cloned().collect();
    let mut components = Map::new();
    let all = &schemas::built_in().definitions;
    for name in referenced(&wanted, &schemas, all) {
        if let Some(schema) = schemas.remove(&name).or_else(|| all.get(&name).cloned()) {
            components.insert(name, schema);
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.36.0"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        },
    })
}

/// The v2 document: every group version's paths and definitions, with
/// references to `#/definitions/…` and a reference's description beside it.
pub(crate) fn v2_document(defs: &[&ResourceDef]) -> Value {
    let mut paths = Map::new();
    let mut definitions = Map::new();
    for (group, version) in group_versions(defs) {
        let document = v3_document(defs, &group, &version);
        for (path, item) in document["paths"].as_object().into_iter().flatten() {
            paths.insert(path.clone(), to_v2(item.clone()));
        }
        for (name, schema) in document["components"]["schemas"].as_object().into_iter().flatten() {
            definitions.entry(name.clone()).or_insert_with(|| to_v2(schema.clone()));
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.36.0"},
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    })
}

/// A v3 schema or path item in v2's form: references to `#/definitions/`,
/// `allOf` around one reference unwrapped, parameters' `schema` folded in,
/// request bodies as `body` parameters.
fn to_v2(value: Value) -> Value {
    match value {
        Value::Object(mut fields) => {
            if let Some(Value::Array(all_of)) = fields.get("allOf")
                && all_of.len() == 1
                && all_of[0].get("$ref").is_some()
            {
                let reference = all_of[0]["$ref"].clone();
                fields.remove("allOf");
                fields.insert("$ref".into(), reference);
            }
            if fields.get("in").is_some()
                && let Some(Value::Object(schema)) = fields.remove("schema")
            {
                fields.extend(schema);
            }
            if let Some(body) = fields.remove("requestBody") {
                let schema = body["content"]
                    .as_object()
                    .and_then(|content| content.values().next())
                    .map(|media| media["schema"].clone())
                    .unwrap_or(Value::Null);
                let parameters = fields.entry("parameters").or_insert_with(|| json!([]));
                if let Some(parameters) = parameters.as_array_mut() {
                    parameters.insert(
                        0,
                        json!({"name": "body", "in": "body", "required": true, "schema": schema}),
                    );
                }
            }
            if let Some(Value::Object(responses)) = fields.get_mut("responses") {
                for response in responses.values_mut() {
                    if let Some(schema) = response["content"]
                        .as_object()
                        .and_then(|content| content.values().next())
                        .map(|media| media["schema"].clone())
                        && let Some(response) = response.as_object_mut()
                    {
                        response.remove("content");
                        response.insert("schema".into(), schema);
                    }
                }
            }
            Value::Object(
                fields
                    .into_iter()
                    .map(|(key, value)| match (key.as_str(), value) {
                        ("$ref", Value::String(reference)) => {
                            (key, json!(reference.replacen(REF_PREFIX, "#/definitions/", 1)))
                        }
                        (_, value) => (key, to_v2(value)),
                    })
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(to_v2).collect()),
        other => other,
    }
}

/// The schema of a resource's kind, by name: a built-in type's, or a CRD
/// version's with the type meta and metadata added.
fn kind_schema(def: &ResourceDef) -> Option<(String, Value)> {
    if !def.custom {
        let name = schemas::built_in().kind(&def.group, &def.version, &def.kind)?;
        return Some((name.to_owned(), schemas::built_in().definitions.get(name)?.clone()));
    }
    let reversed: Vec<&str> = def.group.split('.').rev().collect();
    let name = format!("{}.{}.{}", reversed.join("."), def.version, def.kind);
    let mut schema = def
        .schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    let fields = schema.as_object_mut()?;
    let properties = fields.entry("properties").or_insert_with(|| json!({}));
    if let Some(properties) = properties.as_object_mut() {
        properties.insert(
            "apiVersion".into(),
            json!({"description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources", "type": "string"}),
        );
        properties.insert(
            "kind".into(),
            json!({"description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "type": "string"}),
        );
        properties.insert(
            "metadata".into(),
            json!({"description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata", "allOf": [{"$ref": format!("{REF_PREFIX}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")}]}),
        );
    }
    fields.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([{"group": def.group, "version": def.version, "kind": def.kind}]),
    );
    Some((name, schema))
}

/// The names of `roots` and every schema they refer to, transitively.
fn referenced(roots: &[String], local: &BTreeMap<String, Value>, all: &Map<String, Value>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut pending: Vec<String> = roots.to_vec();
    while let Some(name) = pending.pop() {
        if !found.insert(name.clone()) {
            continue;
        }
        if let Some(schema) = local.get(&name).or_else(|| all.get(&name)) {
            references(schema, &mut pending);
        }
    }
    found
}

fn references(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            if let Some(name) = fields
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|reference| reference.strip_prefix(REF_PREFIX))
            {
                out.push(name.to_owned());
            }
            fields.values().for_each(|value| references(value, out));
        }
        Value::Array(items) => items.iter().for_each(|value| references(value, out)),
        _ => {}
    }
}

/// A query parameter of an operation.
fn query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

/// The parameters of a write, which tell clients the server validates fields itself.
fn write_parameters(patch: bool) -> Vec<Value> {
    let mut parameters = vec![
        query(
            "dryRun",
            "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
        ),
        query(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
        ),
        query(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
        ),
    ];
    if patch {
        parameters.push(json!({"name": "force", "in": "query", "description": "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.", "schema": {"type": "boolean", "uniqueItems": true}}));
    }
    parameters
}

/// An operation on a resource: its id, action, kind, parameters, body and answer.
fn operation(def: &ResourceDef, action: &str, schema: &str, body: Option<&[&str]>, parameters: Vec<Value>) -> Value {
    let verb = match action {
        "post" => "create",
        "put" => "replace",
        "list" => "list",
        "deletecollection" => "deletecollection",
        other => other,
    };
    let scope = if def.namespaced { "Namespaced" } else { "" };
    let group_version: String = if def.group.is_empty() {
        format!("Core{}", capitalize(&def.version))
    } else {
        let group: String = def
            .group
            .split(['.', '-'])
            .take_while(|part| *part != "k8s" && *part != "io")
            .map(capitalize)
            .collect();
        format!("{group}{}", capitalize(&def.version))
    };
    let reference = json!({"$ref": format!("{REF_PREFIX}{schema}")});
    let mut operation = json!({
        "operationId": format!("{verb}{group_version}{scope}{}", def.kind),
        "tags": [if def.group.is_empty() { format!("core_{}", def.version) } else { format!("{}_{}", def.group.replace('.', "_"), def.version) }],
        "parameters": parameters,
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": reference}}},
            "401": {"description": "Unauthorized"},
        },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": def.group, "version": def.version, "kind": def.kind},
    });
    if let Some(media_types) = body {
        let body_schema = if action == "patch" {
            json!({"$ref": format!("{REF_PREFIX}io.k8s.apimachinery.pkg.apis.meta.v1.Patch")})
        } else {
            reference
        };
        let content: Map<String, Value> = media_types
            .iter()
            .map(|media_type| ((*media_type).to_owned(), json!({"schema": body_schema})))
            .collect();
        operation["requestBody"] = json!({"content": content, "required": true});
    }
    operation
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The path items of a resource: its collection and its objects (and their
/// `status`, where served), each with the verbs it serves.
fn path_items(def: &ResourceDef, schema: &str) -> Vec<(String, Value)> {
    let base = if def.group.is_empty() {
        format!("/api/{}", def.version)
    } else {
        format!("/apis/{}/{}", def.group, def.version)
    };
    let collection = if def.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", def.plural)
    } else {
        format!("{base}/{}", def.plural)
    };
    let serves = |verb: &str| def.verbs.iter().any(|served| served == verb);
    let mut path_parameters = vec![];
    if def.namespaced {
        path_parameters.push(json!({"name": "namespace", "in": "path", "description": "object name and auth scope, such as for teams and projects", "required": true, "schema": {"type": "string", "uniqueItems": true}}));
    }
    let mut items = Vec::new();
    let mut on_collection = Map::new();
    if serves("list") {
        on_collection.insert("get".into(), operation(def, "list", schema, None, vec![]));
    }
    if serves("create") {
        on_collection.insert(
            "post".into(),
            operation(def, "post", schema, Some(&["*/*"]), write_parameters(false)),
        );
    }
    if serves("deletecollection") {
        on_collection.insert(
            "delete".into(),
            operation(def, "deletecollection", schema, None, vec![]),
        );
    }
    if !on_collection.is_empty() {
        on_collection.insert("parameters".into(), json!(path_parameters));
        items.push((collection.clone(), Value::Object(on_collection)));
    }
    let mut object_parameters = path_parameters.clone();
    object_parameters.insert(
        0,
        json!({"name": "name", "in": "path", "description": format!("name of the {}", def.kind), "required": true, "schema": {"type": "string", "uniqueItems": true}}),
    );
    let patch_types = [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    ];
    let object_item = |subresource: &str| {
        let mut item = Map::new();
        if serves("get") {
            item.insert("get".into(), operation(def, "get", schema, None, vec![]));
        }
        if serves("update") {
            item.insert(
                "put".into(),
                operation(def, "put", schema, Some(&["*/*"]), write_parameters(false)),
            );
        }
        if serves("patch") {
            item.insert(
                "patch".into(),
                operation(def, "patch", schema, Some(&patch_types), write_parameters(true)),
            );
        }
        if serves("delete") && subresource.is_empty() {
            item.insert("delete".into(), operation(def, "delete", schema, None, vec![]));
        }
        item.insert("parameters".into(), json!(object_parameters));
        Value::Object(item)
    };
    if serves("get") || serves("update") || serves("patch") {
        items.push((format!("{collection}/{{name}}"), object_item("")));
        if def.status_subresource {
            items.push((format!("{collection}/{{name}}/status"), object_item("status")));
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::built_in;

    #[test]
    fn a_group_versions_document_has_its_kinds_their_schemas_and_a_patch_with_field_validation() {
        let defs = built_in();
        let defs: Vec<&ResourceDef> = defs.iter().collect();
        let document = v3_document(&defs, "apps", "v1");
        let patch = &document["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|parameter| parameter["name"] == "fieldValidation"),
            "{patch}"
        );
        let schemas = &document["components"]["schemas"];
        assert!(schemas["io.k8s.api.core.v1.PodSpec"].is_object());
        assert!(schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
        assert!(schemas.get("io.k8s.api.batch.v1.Job").is_none());
    }

    #[test]
    fn the_v2_document_refers_to_its_definitions() {
        let defs = built_in();
        let defs: Vec<&ResourceDef> = defs.iter().collect();
        let document = v2_document(&defs);
        let spec = &document["definitions"]["io.k8s.api.apps.v1.Deployment"]["properties"]["spec"];
        assert_eq!(
            spec["$ref"], "#/definitions/io.k8s.api.apps.v1.DeploymentSpec",
            "{spec}"
        );
        assert!(!document.to_string().contains("#/components/"));
    }
}
