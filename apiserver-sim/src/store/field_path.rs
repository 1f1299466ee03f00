//! Paths to fields inside objects: `.spec.replicas` as the field names an object is walked by.

use serde_json::{Map, Value};

/// The field names of a path such as `.spec.replicas` (the leading dot is optional).
pub(super) fn parse(path: &str) -> Vec<String> {
    path.split('.')
        .filter(|segment| !segment.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `.spec.replicas`, as the API server names fields in messages.
pub(super) fn display(path: &[String]) -> String {
    path.iter().map(|segment| format!(".{segment}")).collect()
}

/// The value at `path`, if every object on the way has the field.
pub(super) fn get<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter()
        .try_fold(value, |value, segment| value.as_object()?.get(segment))
}

/// Sets the value at `path`, creating (or replacing non-objects with) objects on
/// the way.
pub(super) fn set(value: &mut Value, path: &[String], new: Value) {
    let Some((last, parents)) = path.split_last() else {
        *value = new;
        return;
    };
    let mut node = value;
    for segment in parents {
        node = object(node)
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    object(node).insert(last.clone(), new);
}

/// Removes the field at `path`, then every object on the way that it left empty.
pub(super) fn remove(value: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some(fields) = value.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        fields.remove(first);
        return;
    }
    if let Some(child) = fields.get_mut(first) {
        remove(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            fields.remove(first);
        }
    }
}

fn object(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    value.as_object_mut().expect("made an object above")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn paths_walk_objects_and_stop_at_anything_else() {
        let object = json!({"spec": {"replicas": 3, "list": [1]}});
        assert_eq!(get(&object, &parse(".spec.replicas")), Some(&json!(3)));
        assert_eq!(get(&object, &parse("spec.list.0")), None);
        assert_eq!(display(&parse("spec.replicas")), ".spec.replicas");
    }

    #[test]
    fn setting_creates_parents_and_removing_prunes_them() {
        let mut object = json!({"metadata": {"name": "x"}});
        set(&mut object, &parse(".spec.template.replicas"), json!(2));
        assert_eq!(object["spec"]["template"]["replicas"], 2);
        remove(&mut object, &parse(".spec.template.replicas"));
        assert_eq!(object, json!({"metadata": {"name": "x"}}));
    }
}
