//! The write verbs: create, update, patch and delete.
//!
//! They follow the API server's rules for server-set metadata, optimistic
//! concurrency, generations, finalizers and the `status` subresource.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::meta::{check_name, new_uid, now_rfc3339, random_suffix};
use super::{EventType, Filter, ResourceId, State, Store, StoredObject, collection, crd, existing, lookup, object_key};
use crate::resources::ResourceDef;
use crate::status::{ApiError, Result};

/// `DeleteOptions.preconditions`.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    /// The object must have this uid.
    pub uid: Option<String>,
    /// The object must be at this resourceVersion.
    pub resource_version: Option<String>,
}

/// How a patch body is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 6902 JSON patch.
    Json,
    /// RFC 7386 JSON merge patch.
    Merge,
    /// Strategic merge patch, applied as a merge patch.
    Strategic,
    /// Server-side apply, applied as a merge patch that creates when missing.
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type`.
    ///
    /// # Errors
    ///
    /// 415 for any other media type.
    pub fn from_content_type(content_type: &str) -> Result<Self> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(Self::Apply),
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }
}

/// The keys, besides `metadata`, that do not count as a spec change.
const NOT_SPEC: [&str; 4] = ["metadata", "status", "apiVersion", "kind"];

impl Store {
    /// Creates an object.
    ///
    /// # Errors
    ///
    /// 409 when it exists, 422 when invalid, 404 when its namespace does not
    /// exist, 400 when its kind or namespace contradicts the path.
    pub fn create(&self, id: &ResourceId, namespace: Option<&str>, mut body: Value) -> Result<Arc<StoredObject>> {
        let mut state = self.lock();
        let def = Arc::clone(&collection(&state, id)?.def);
        check_type(&def, &body)?;
        let metadata = metadata_mut(&mut body, &def)?;
        let name = match metadata.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name.to_owned(),
            _ => match metadata.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => format!("{prefix}{}", random_suffix()),
                _ => {
                    return Err(ApiError::invalid(
                        &def.group,
                        &def.plural,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        check_name(&def, &name)?;
        let namespace = resolve_namespace(&state, &def, namespace, metadata)?;
        let key = object_key(namespace.as_deref(), &name);
        if collection(&state, id)?.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        metadata.insert("name".into(), json!(name));
        match &namespace {
            Some(namespace) => metadata.insert("namespace".into(), json!(namespace)),
            None => metadata.remove("namespace"),
        };
        metadata.insert("uid".into(), json!(new_uid()));
        metadata.insert("creationTimestamp".into(), json!(now_rfc3339()));
        metadata.insert("generation".into(), json!(1));
        metadata.remove("deletionTimestamp");
        metadata.remove("deletionGracePeriodSeconds");
        if def.status_subresource {
            // As the API server does: status is written through the subresource only.
            body.as_object_mut().expect("checked to be an object").remove("status");
        }
        if def.kind == "CustomResourceDefinition" {
            crd::establish(&mut body);
        }
        let object = self.commit(&mut state, id, EventType::Added, body, None);
        if def.kind == "CustomResourceDefinition" {
            crd::register(&mut state, &object.value);
        }
        Ok(object)
    }

    /// Replaces an object (or, with `status`, only its status).
    ///
    /// # Errors
    ///
    /// 404 when it does not exist, 409 on a stale resourceVersion, 400 when the
    /// body names another object.
    pub fn update(
        &self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        status: bool,
    ) -> Result<Arc<StoredObject>> {
        let mut state = self.lock();
        self.update_locked(&mut state, id, namespace, name, body, status)
    }

    /// Applies a patch to an object (or, with `status`, to its status).
    ///
    /// # Errors
    ///
    /// As [`Store::update`], and 422 for a patch that does not apply.
    pub fn patch(
        &self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: Value,
        status: bool,
    ) -> Result<Arc<StoredObject>> {
        let mut state = self.lock();
        let (def, existing) = lookup(&state, id, namespace, name)?;
        let Some(existing) = existing else {
            if patch_type == PatchType::Apply && !status {
                drop(state);
                let mut body = patch;
                if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                    metadata.insert("name".into(), json!(name));
                }
                return self.create(id, namespace, body);
            }
            return Err(ApiError::not_found(&def.group, &def.plural, name));
        };
        let mut patched = existing.value.clone();
        match patch_type {
            PatchType::Json => {
                let operations: json_patch::Patch = serde_json::from_value(patch)
                    .map_err(|error| ApiError::bad_request(format!("invalid JSON patch: {error}")))?;
                json_patch::patch(&mut patched, &operations)
                    .map_err(|error| ApiError::invalid(&def.group, &def.plural, name, &error.to_string()))?;
            }
            PatchType::Merge | PatchType::Strategic | PatchType::Apply => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                json_patch::merge(&mut patched, &patch);
            }
        }
        self.update_locked(&mut state, id, namespace, name, patched, status)
    }

    fn update_locked(
        &self,
        state: &mut State,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        mut body: Value,
        status: bool,
    ) -> Result<Arc<StoredObject>> {
        let (def, existing) = existing(state, id, namespace, name)?;
        if status && !def.status_subresource {
            return Err(ApiError::no_route(&format!("{}/status", def.plural)));
        }
        check_type(&def, &body)?;
        let metadata = metadata_mut(&mut body, &def)?;
        if metadata.get("name").and_then(Value::as_str).is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                metadata["name"].as_str().unwrap_or_default()
            )));
        }
        if let Some(rv) = metadata
            .get("resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty())
            && rv != existing.resource_version.to_string()
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }

        let mut next = if status {
            let mut next = existing.value.clone();
            next["status"] = body.get("status").cloned().unwrap_or(Value::Null);
            next
        } else {
            if def.status_subresource {
                match existing.value.get("status") {
                    Some(status) => body["status"] = status.clone(),
                    None => {
                        body.as_object_mut().expect("checked to be an object").remove("status");
                    }
                }
            }
            body
        };
        let old_meta = existing.value["metadata"].as_object().cloned().unwrap_or_default();
        let spec_changed = !status && spec_of(&next) != spec_of(&existing.value);
        let meta = next["metadata"].as_object_mut().expect("checked to be an object");
        for field in [
            "uid",
            "creationTimestamp",
            "namespace",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match old_meta.get(field) {
                Some(value) => meta.insert(field.into(), value.clone()),
                None => meta.remove(field),
            };
        }
        meta.insert("name".into(), json!(name));
        let generation = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
        meta.insert("generation".into(), json!(generation + i64::from(spec_changed)));
        meta.insert("resourceVersion".into(), json!(existing.resource_version.to_string()));
        let finalized = meta.contains_key("deletionTimestamp")
            && meta
                .get("finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        if next == existing.value {
            // Nothing changed: no new resourceVersion, no event.
            return Ok(existing);
        }
        if finalized {
            let object = self.commit(state, id, EventType::Deleted, next, Some(existing));
            return Ok(object);
        }
        Ok(self.commit(state, id, EventType::Modified, next, Some(existing)))
    }

    /// Deletes an object, or marks it deleted while finalizers remain.
    ///
    /// # Errors
    ///
    /// 404 when it does not exist, 409 when a precondition fails.
    pub fn delete(
        &self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<Arc<StoredObject>> {
        let mut state = self.lock();
        self.delete_locked(&mut state, id, namespace, name, preconditions)
    }

    fn delete_locked(
        &self,
        state: &mut State,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<Arc<StoredObject>> {
        let (def, existing) = existing(state, id, namespace, name)?;
        let metadata = &existing.value["metadata"];
        if let Some(uid) = &preconditions.uid
            && metadata["uid"].as_str() != Some(uid)
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                "Precondition failed: UID mismatch",
            ));
        }
        if let Some(rv) = &preconditions.resource_version
            && *rv != existing.resource_version.to_string()
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                "Precondition failed: ResourceVersion mismatch",
            ));
        }
        let mut last = existing.value.clone();
        let has_finalizers = metadata["finalizers"].as_array().is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if metadata.get("deletionTimestamp").is_some() {
                return Ok(existing);
            }
            last["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            last["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            return Ok(self.commit(state, id, EventType::Modified, last, Some(existing)));
        }
        if def.kind == "Namespace" {
            // Namespace deletion takes its contents with it.
            let contained: Vec<(ResourceId, String)> = state
                .collections
                .iter()
                .filter(|(_, c)| c.def.namespaced)
                .flat_map(|(id, c)| {
                    c.objects
                        .values()
                        .filter(|o| o.namespace.as_deref() == Some(name))
                        .map(|o| (id.clone(), o.name.clone()))
                        .collect::<Vec<_>>()
                })
                .collect();
            for (id, object) in contained {
                let mut forced = collection(state, &id)?.objects[&object_key(Some(name), &object)]
                    .value
                    .clone();
                forced["metadata"]["finalizers"] = json!([]);
                forced["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                let previous = collection(state, &id)?
                    .objects
                    .get(&object_key(Some(name), &object))
                    .cloned();
                self.commit(state, &id, EventType::Deleted, forced, previous);
            }
        }
        if def.kind == "CustomResourceDefinition" {
            crd::unregister(state, &existing.value);
        }
        Ok(self.commit(state, id, EventType::Deleted, last, Some(existing)))
    }

    /// Deletes every object `filter` selects; returns them.
    ///
    /// # Errors
    ///
    /// 404 when the resource does not exist.
    pub fn delete_collection(&self, id: &ResourceId, filter: &Filter) -> Result<Vec<Arc<StoredObject>>> {
        let mut state = self.lock();
        let selected: Vec<(Option<String>, String)> = collection(&state, id)?
            .objects
            .values()
            .filter(|object| filter.matches(object))
            .map(|object| (object.namespace.clone(), object.name.clone()))
            .collect();
        let mut deleted = Vec::with_capacity(selected.len());
        for (namespace, name) in selected {
            deleted.push(self.delete_locked(&mut state, id, namespace.as_deref(), &name, &Preconditions::default())?);
        }
        Ok(deleted)
    }
}

fn spec_of(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(key, _)| !NOT_SPEC.contains(&key.as_str()))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn check_type(def: &ResourceDef, body: &Value) -> Result<()> {
    let Some(object) = body.as_object() else {
        return Err(ApiError::bad_request("the request body is not a JSON object"));
    };
    if let Some(api_version) = object.get("apiVersion").and_then(Value::as_str)
        && api_version != def.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    if let Some(kind) = object.get("kind").and_then(Value::as_str)
        && kind != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            def.kind
        )));
    }
    Ok(())
}

/// The body's metadata, with `apiVersion` and `kind` filled in.
fn metadata_mut<'a>(body: &'a mut Value, def: &ResourceDef) -> Result<&'a mut Map<String, Value>> {
    let object = body
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the request body is not a JSON object"))?;
    object.insert("apiVersion".into(), json!(def.api_version()));
    object.insert("kind".into(), json!(def.kind));
    let metadata = object.entry("metadata").or_insert_with(|| json!({}));
    metadata
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata is not a JSON object"))
}

fn resolve_namespace(
    state: &State,
    def: &ResourceDef,
    from_path: Option<&str>,
    metadata: &Map<String, Value>,
) -> Result<Option<String>> {
    if !def.namespaced {
        return Ok(None);
    }
    let in_body = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty());
    let namespace = match (from_path, in_body) {
        (Some(path), Some(body)) if path != body => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (Some(namespace), _) | (None, Some(namespace)) => namespace,
        (None, None) => return Err(ApiError::bad_request("a namespaced object needs a namespace")),
    };
    let namespaces = ResourceId::new("", "v1", "namespaces");
    if !collection(state, &namespaces)?.objects.contains_key(namespace) {
        return Err(ApiError::not_found("", "namespaces", namespace));
    }
    Ok(Some(namespace.to_owned()))
}

#[cfg(test)]
mod tests {
    use kinformer_selector::Selector;

    use super::*;
    use crate::resources::built_in;

    fn store() -> (Store, ResourceId) {
        let store = Store::new(built_in(), 1000);
        store
            .create(
                &ResourceId::new("", "v1", "namespaces"),
                None,
                json!({"metadata": {"name": "a"}}),
            )
            .unwrap();
        (store, ResourceId::new("", "v1", "configmaps"))
    }

    #[test]
    fn json_patches_apply_and_a_failing_test_operation_is_invalid() {
        let (store, configmaps) = store();
        store
            .create(
                &configmaps,
                Some("a"),
                json!({"metadata": {"name": "cm"}, "data": {"k": "v"}}),
            )
            .unwrap();
        let patch =
            json!([{"op": "replace", "path": "/data/k", "value": "w"}, {"op": "add", "path": "/data/n", "value": "1"}]);
        let patched = store
            .patch(&configmaps, Some("a"), "cm", PatchType::Json, patch, false)
            .unwrap();
        assert_eq!(patched.value["data"], json!({"k": "w", "n": "1"}));
        let failing = json!([{"op": "test", "path": "/data/k", "value": "nope"}]);
        let error = store
            .patch(&configmaps, Some("a"), "cm", PatchType::Json, failing, false)
            .unwrap_err();
        assert_eq!(error.code, 422);
    }

    #[test]
    fn deletecollection_deletes_what_the_selector_selects() {
        let (store, configmaps) = store();
        for (name, app) in [("x", "web"), ("y", "web"), ("z", "db")] {
            store
                .create(
                    &configmaps,
                    Some("a"),
                    json!({"metadata": {"name": name, "labels": {"app": app}}}),
                )
                .unwrap();
        }
        let filter = Filter {
            labels: Selector::parse("app=web").unwrap(),
            ..Filter::default()
        };
        let deleted = store.delete_collection(&configmaps, &filter).unwrap();
        assert_eq!(deleted.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(store.count(&configmaps), 1);
    }
}
