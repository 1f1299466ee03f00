//! Strategic merge patches of the built-in types, as kube-apiserver applies them.
//!
//! A strategic merge patch is a merge patch whose lists know their element's
//! identity: a list with a patch merge key (`containers` by `name`, `ports`
//! by `containerPort`, `conditions` by `type`, …) is merged element by
//! element, a list with the merge strategy and no key (`finalizers`) is merged
//! as a set, and every other list is replaced. The directives kubectl writes
//! are honoured: `$patch: delete | replace | merge`, `$retainKeys`,
//! `$deleteFromPrimitiveList/FIELD` and `$setElementOrder/FIELD`.
//!
//! The merge keys come from the built-in types' `patchMergeKey` and
//! `patchStrategy` tags, matched by the end of a field's path, so that a Pod's
//! `spec.containers` and a Deployment's `spec.template.spec.containers` merge
//! alike.

use serde_json::{Map, Value};

use crate::status::{ApiError, Result};

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListMerge {
    /// Element by element, identified by this field.
    ByKey(&'static str),
    /// As a set of primitive values.
    Set,
}

/// The lists of the built-in types that merge, by the end of their field path
/// (list indices left out) and, for the merge key, the field that names an
/// element. Every other list is replaced by the patch's.
const LISTS: &[(&[&str], ListMerge)] = &[
    (&["metadata", "finalizers"], ListMerge::Set),
    (&["metadata", "ownerReferences"], ListMerge::ByKey("uid")),
    (&["containers"], ListMerge::ByKey("name")),
    (&["initContainers"], ListMerge::ByKey("name")),
    (&["ephemeralContainers"], ListMerge::ByKey("name")),
    (&["containers", "ports"], ListMerge::ByKey("containerPort")),
    (&["initContainers", "ports"], ListMerge::ByKey("containerPort")),
    (&["ephemeralContainers", "ports"], ListMerge::ByKey("containerPort")),
    (&["env"], ListMerge::ByKey("name")),
    (&["volumeMounts"], ListMerge::ByKey("mountPath")),
    (&["volumeDevices"], ListMerge::ByKey("devicePath")),
    (&["resizePolicy"], ListMerge::ByKey("resourceName")),
    (&["spec", "volumes"], ListMerge::ByKey("name")),
    (&["spec", "imagePullSecrets"], ListMerge::ByKey("name")),
    (&["spec", "hostAliases"], ListMerge::ByKey("ip")),
    (&["spec", "resourceClaims"], ListMerge::ByKey("name")),
    (&["spec", "schedulingGates"], ListMerge::ByKey("name")),
    (&["spec", "topologySpreadConstraints"], ListMerge::ByKey("topologyKey")),
    (&["spec", "taints"], ListMerge::ByKey("key")),
    (&["spec", "ports"], ListMerge::ByKey("port")),
    (&["webhooks"], ListMerge::ByKey("name")),
    (&["status", "conditions"], ListMerge::ByKey("type")),
    (&["status", "addresses"], ListMerge::ByKey("type")),
    (&["status", "podIPs"], ListMerge::ByKey("ip")),
    (&["status", "hostIPs"], ListMerge::ByKey("ip")),
];

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// `original` with the strategic merge patch `patch` applied.
///
/// # Errors
///
/// 400 for a patch that is no object, or a directive with a value it cannot
/// have (an unknown `$patch`, a merge list element without its merge key), in
/// kube-apiserver's words.
pub(super) fn apply(original: &Value, patch: &Value) -> Result<Value> {
    let Value::Object(patch) = patch else {
        return Err(ApiError::bad_request("a strategic merge patch must be a JSON object"));
    };
    let mut path = Vec::new();
    Ok(
        merge_map(original.as_object().cloned().unwrap_or_default(), patch, &mut path)?
            .map_or_else(|| Value::Object(Map::new()), Value::Object),
    )
}

/// `original` merged with `patch`; `None` when the patch deletes the map.
fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
) -> Result<Option<Map<String, Value>>> {
    match patch.get(PATCH).map(|directive| directive.as_str()) {
        None | Some(Some("merge")) => {}
        Some(Some("delete")) => return Ok(None),
        Some(Some("replace")) => {
            let mut replaced = patch.clone();
            replaced.remove(PATCH);
            return Ok(Some(strip_directives(replaced)));
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Unknown patch type: {}",
                other.map_or_else(|| patch[PATCH].to_string(), str::to_owned)
            )));
        }
    }
    if let Some(retained) = patch.get(RETAIN_KEYS) {
        let retained: Vec<&str> = retained
            .as_array()
            .ok_or_else(|| ApiError::bad_request("$retainKeys must be a list of strings"))?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        original.retain(|key, _| retained.contains(&key.as_str()));
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            if let (Some(Value::Array(list)), Some(deleted)) = (original.get_mut(field), value.as_array()) {
                list.retain(|item| !deleted.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        path.push(key.clone());
        let merged = match value {
            Value::Null => None,
            Value::Object(patch) => match original.remove(key) {
                Some(Value::Object(original)) => merge_map(original, patch, path)?.map(Value::Object),
                _ => merge_map(Map::new(), patch, path)?.map(Value::Object),
            },
            Value::Array(items) => {
                let original = match original.remove(key) {
                    Some(Value::Array(original)) => original,
                    _ => Vec::new(),
                };
                Some(Value::Array(merge_list(original, items, path)?))
            }
            scalar => Some(scalar.clone()),
        };
        path.pop();
        match merged {
            Some(merged) => {
                original.insert(key.clone(), merged);
            }
            None => {
                original.remove(key);
            }
        }
    }
    for (key, order) in patch {
        if let (Some(field), Some(order)) = (key.strip_prefix(SET_ELEMENT_ORDER), order.as_array())
            && let Some(Value::Array(list)) = original.get_mut(field)
        {
            path.push(field.to_owned());
            order_as(list, order, list_merge(path));
            path.pop();
        }
    }
    Ok(Some(original))
}

/// The list at `path`, `original`, merged with the patch's `items`.
fn merge_list(mut original: Vec<Value>, items: &[Value], path: &mut Vec<String>) -> Result<Vec<Value>> {
    let replace = items
        .iter()
        .any(|item| item.get(PATCH).and_then(Value::as_str) == Some("replace"));
    if replace {
        return Ok(items
            .iter()
            .filter(|item| item.get(PATCH).is_none())
            .cloned()
            .map(strip_value)
            .collect());
    }
    match list_merge(path) {
        None => Ok(items.iter().cloned().map(strip_value).collect()),
        Some(ListMerge::Set) => {
            for item in items {
                if !original.contains(item) {
                    original.push(item.clone());
                }
            }
            Ok(original)
        }
        Some(ListMerge::ByKey(key)) => {
            for item in items {
                let Value::Object(fields) = item else {
                    original.push(item.clone());
                    continue;
                };
                let Some(id) = fields.get(key) else {
                    return Err(ApiError::bad_request(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    )));
                };
                let at = original.iter().position(|existing| existing.get(key) == Some(id));
                let existing = match at {
                    Some(at) => match original.remove(at) {
                        Value::Object(existing) => existing,
                        _ => Map::new(),
                    },
                    None => Map::new(),
                };
                if let Some(merged) = merge_map(existing, fields, path)? {
                    match at {
                        Some(at) => original.insert(at, Value::Object(merged)),
                        None => original.push(Value::Object(merged)),
                    }
                }
            }
            Ok(original)
        }
    }
}

/// How the list at `path` merges; `None` when the patch replaces it.
/// How the list at `path` merges, as an OpenAPI schema says it:
/// `x-kubernetes-patch-strategy` (`merge`) and, for a list of objects,
/// `x-kubernetes-patch-merge-key`. `None` for a list that is replaced.
pub(crate) fn patch_strategy(path: &[String]) -> Option<(&'static str, Option<&'static str>)> {
    match list_merge(path)? {
        ListMerge::ByKey(key) => Some(("merge", Some(key))),
        ListMerge::Set => Some(("merge", None)),
    }
}

fn list_merge(path: &[String]) -> Option<ListMerge> {
    LISTS
        .iter()
        .find(|(suffix, _)| path.len() >= suffix.len() && path[path.len() - suffix.len()..].iter().eq(suffix.iter()))
        .map(|(_, merge)| *merge)
}

/// Orders `list` as `order` lists its elements (by merge key, or by value in
/// a set); elements `order` does not name keep their place after them.
fn order_as(list: &mut [Value], order: &[Value], merge: Option<ListMerge>) {
    let identity = |item: &Value| match merge {
        Some(ListMerge::ByKey(key)) => item.get(key).cloned(),
        _ => Some(item.clone()),
    };
    let rank = |item: &Value| {
        let id = identity(item);
        order
            .iter()
            .position(|named| identity(named) == id)
            .unwrap_or(order.len())
    };
    list.sort_by_key(rank);
}

/// `map` without the directives a replaced part may still carry.
fn strip_directives(map: Map<String, Value>) -> Map<String, Value> {
    map.into_iter()
        .filter(|(key, _)| !key.starts_with('$'))
        .map(|(key, value)| (key, strip_value(value)))
        .collect()
}

fn strip_value(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(strip_directives(map)),
        Value::Array(items) => Value::Array(items.into_iter().map(strip_value).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::apply;

    #[test]
    fn containers_merge_by_name_and_their_ports_by_container_port() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "ports": [{"containerPort": 80, "name": "http"}]},
            {"name": "b", "image": "b:1"},
        ]}});
        let patch = json!({"spec": {"containers": [
            {"name": "a", "image": "a:2", "ports": [{"containerPort": 443}]},
            {"name": "c", "image": "c:1"},
        ]}});
        let patched = apply(&pod, &patch).unwrap();
        assert_eq!(
            patched["spec"]["containers"],
            json!([
                {"name": "a", "image": "a:2", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}]},
                {"name": "b", "image": "b:1"},
                {"name": "c", "image": "c:1"},
            ])
        );
    }

    #[test]
    fn directives_delete_replace_and_order_elements() {
        let deployment = json!({
            "metadata": {"finalizers": ["a", "b"]},
            "spec": {"template": {"spec": {
                "containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
                "tolerations": [{"key": "x"}],
            }}},
        });
        let patch = json!({
            "metadata": {"finalizers": ["c", "a"], "$deleteFromPrimitiveList/finalizers": ["b"]},
            "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
                "containers": [{"name": "b", "$patch": "delete"}],
                "tolerations": [{"key": "y"}],
            }}},
        });
        let patched = apply(&deployment, &patch).unwrap();
        assert_eq!(patched["metadata"]["finalizers"], json!(["a", "c"]));
        assert_eq!(
            patched["spec"]["template"]["spec"],
            json!({"containers": [{"name": "c"}, {"name": "a"}], "tolerations": [{"key": "y"}]})
        );
        let replaced = apply(
            &deployment,
            &json!({"spec": {"template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "z"}]}}}}),
        )
        .unwrap();
        assert_eq!(
            replaced["spec"]["template"]["spec"]["containers"],
            json!([{"name": "z"}])
        );
    }

    #[test]
    fn an_element_without_its_merge_key_is_refused() {
        let error = apply(
            &json!({"spec": {"containers": []}}),
            &json!({"spec": {"containers": [{"image": "a"}]}}),
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("does not contain declared merge key: name"),
            "{error}"
        );
    }
}
