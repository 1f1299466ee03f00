//! The `scale` subresource: an `autoscaling/v1` `Scale` read from the object and written through to it.
//!
//! As on a real server, a `Scale` carries the object's name, uid and
//! resourceVersion; writing one sets the object's desired replicas (a spec
//! change, so the generation moves), refuses a stale resourceVersion with 409,
//! and answers the `Scale` after the write. A `Scale` without `spec.replicas`
//! scales to zero, as the API server's decoding of it does.

use std::sync::Arc;

use serde_json::{Value, json};

use super::write::{Ownership, Part, patch_value};
use super::{PatchType, ResourceId, StoredObject, Transaction, existing, field_path, filter};
use crate::resources::{ResourceDef, ScalePaths};
use crate::status::{ApiError, Result};

impl Transaction<'_> {
    /// The object's `Scale`.
    ///
    /// # Errors
    ///
    /// 404 when the object does not exist or its resource serves no `scale`.
    pub fn scale(&self, id: &ResourceId, namespace: Option<&str>, name: &str) -> Result<Value> {
        let (def, object) = existing(&self.state, id, namespace, name)?;
        let paths = paths(&def)?;
        Ok(scale_of(paths, &object))
    }

    /// Sets the object's desired replicas from a `Scale`; answers the `Scale` after.
    ///
    /// # Errors
    ///
    /// 404 when the object does not exist, 409 on a stale resourceVersion or
    /// another uid, 422 for negative replicas, 400 for a body that is no `Scale`.
    pub fn update_scale(
        &mut self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        scale: Value,
    ) -> Result<Value> {
        let (def, object) = existing(&self.state, id, namespace, name)?;
        let paths = paths(&def)?.clone();
        check_scale(name, &scale)?;
        if let Some(uid) = scale["metadata"]["uid"].as_str().filter(|uid| !uid.is_empty())
            && object.value["metadata"]["uid"].as_str() != Some(uid)
        {
            return Err(ApiError::conflict(
                &def.group,
                &format!("{}/scale", def.plural),
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    object.value["metadata"]["uid"].as_str().unwrap_or_default()
                ),
            ));
        }
        let mut next = object.value.clone();
        field_path::set(
            &mut next,
            &field_path::parse(&paths.spec_replicas),
            json!(replicas(name, &scale)?),
        );
        match scale["metadata"]["resourceVersion"].as_str() {
            Some(rv) => next["metadata"]["resourceVersion"] = json!(rv),
            None => {
                if let Some(metadata) = next["metadata"].as_object_mut() {
                    metadata.remove("resourceVersion");
                }
            }
        }
        let written = self.write(id, namespace, name, next, Part::Scale, Ownership::Record)?;
        Ok(scale_of(&paths, &written))
    }

    /// Patches the object's `Scale`, or applies one (which needs a field manager,
    /// and owns the desired replicas as an `Apply` through `scale`); answers the
    /// `Scale` after.
    ///
    /// # Errors
    ///
    /// As [`Transaction::update_scale`], and 422 for a patch that does not apply.
    pub fn patch_scale(
        &mut self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: Value,
    ) -> Result<Value> {
        let (def, object) = existing(&self.state, id, namespace, name)?;
        let paths = paths(&def)?.clone();
        if patch_type == PatchType::Apply {
            check_scale(name, &patch)?;
            let mut applied = json!({"metadata": {}});
            if patch["spec"].get("replicas").is_some() {
                field_path::set(
                    &mut applied,
                    &field_path::parse(&paths.spec_replicas),
                    json!(replicas(name, &patch)?),
                );
            }
            let written = self.apply(id, namespace, name, applied, Part::Scale)?;
            return Ok(scale_of(&paths, &written));
        }
        let scale = scale_def();
        let patched = patch_value(&scale, name, &scale_of(&paths, &object), patch_type, patch)?;
        self.update_scale(id, namespace, name, patched)
    }
}

fn paths(def: &ResourceDef) -> Result<&ScalePaths> {
    def.scale_subresource
        .as_ref()
        .ok_or_else(|| ApiError::no_route(&format!("{}/scale", def.plural)))
}

/// The resource `Scale` objects are named by in messages: `scales.autoscaling`.
fn scale_def() -> ResourceDef {
    ResourceDef::new("autoscaling", "v1", "Scale", "Scale")
}

fn check_scale(name: &str, scale: &Value) -> Result<()> {
    if !scale.is_object() {
        return Err(ApiError::bad_request("the request body is not a JSON object"));
    }
    if let Some(api_version) = scale["apiVersion"].as_str()
        && api_version != "autoscaling/v1"
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version (autoscaling/v1)"
        )));
    }
    if let Some(kind) = scale["kind"].as_str()
        && kind != "Scale"
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind (Scale)"
        )));
    }
    if let Some(other) = scale["metadata"]["name"].as_str()
        && !other.is_empty()
        && other != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({other}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

/// `spec.replicas` of a `Scale`: a count, zero when absent.
fn replicas(name: &str, scale: &Value) -> Result<i64> {
    let replicas = &scale["spec"]["replicas"];
    let invalid = |why: &str| {
        let scale = scale_def();
        ApiError::invalid(
            &scale.group,
            &scale.kind,
            name,
            &format!("spec.replicas: Invalid value: {replicas}: {why}"),
        )
    };
    match replicas {
        Value::Null => Ok(0),
        Value::Number(number) => match number.as_i64() {
            Some(count) if count < 0 => Err(invalid("must be greater than or equal to 0")),
            Some(count) if count > i64::from(i32::MAX) => Err(invalid("must be a 32-bit integer")),
            Some(count) => Ok(count),
            None => Err(invalid("must be an integer")),
        },
        _ => Err(invalid("must be an integer")),
    }
}

/// The `Scale` of an object.
fn scale_of(paths: &ScalePaths, object: &Arc<StoredObject>) -> Value {
    let value = &object.value;
    let metadata = &value["metadata"];
    let at = |path: &str| field_path::get(value, &field_path::parse(path));
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(at)
        .map(|selector| match selector {
            Value::String(selector) => selector.clone(),
            object => filter::label_selector_string(object),
        });
    let mut scale = json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": metadata["name"],
            "uid": metadata["uid"],
            "resourceVersion": object.resource_version.to_string(),
            "creationTimestamp": metadata["creationTimestamp"],
        },
        "spec": {},
        "status": {"replicas": at(&paths.status_replicas).cloned().unwrap_or(json!(0))},
    });
    if let Some(namespace) = metadata["namespace"].as_str() {
        scale["metadata"]["namespace"] = json!(namespace);
    }
    if let Some(replicas) = at(&paths.spec_replicas) {
        scale["spec"]["replicas"] = replicas.clone();
    }
    if let Some(selector) = selector {
        scale["status"]["selector"] = json!(selector);
    }
    scale
}
