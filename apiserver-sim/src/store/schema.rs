//! CRD structural schemas: a custom resource is pruned to, defaulted by and checked against its version's `openAPIV3Schema`.
//!
//! As kube-apiserver does on every write of a custom resource: fields the
//! schema does not declare are dropped (unless it preserves unknown fields),
//! missing fields with a `default` get it, then the types, `required`
//! fields, `enum`s and numeric bounds are checked. Formats, patterns,
//! lengths, item counts and CEL rules are not checked here.

use serde_json::{Map, Value};

use crate::status::FieldError;

/// Fields every object keeps at its root whatever its schema declares.
const ROOT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Prunes, defaults and validates `object` against `schema`: the paths of
/// the fields pruned, and what is invalid.
pub(super) fn admit(schema: &Value, object: &mut Value) -> (Vec<String>, Vec<FieldError>) {
    let mut pruned = Vec::new();
    prune(schema, object, "", true, &mut pruned);
    default(schema, object);
    let mut errors = Vec::new();
    if let Some(fields) = object.as_object() {
        // The root's type meta and metadata are the API server's to check.
        for (name, value) in fields.iter().filter(|(name, _)| !ROOT_FIELDS.contains(&name.as_str())) {
            if let Some(property) = schema["properties"].get(name) {
                validate(property, value, name, &mut errors);
            }
        }
        required(schema, fields, "", &mut errors);
    }
    (pruned, errors)
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn preserves_unknown(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"] == true
}

fn prune(schema: &Value, value: &mut Value, path: &str, root: bool, pruned: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            let embedded = root || schema["x-kubernetes-embedded-resource"] == true;
            let properties = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            let keep_unknown = preserves_unknown(schema) || *additional == true;
            let mut unknown = Vec::new();
            for (name, field) in fields.iter_mut() {
                let field_path = child(path, name);
                if let Some(property) = properties.and_then(|properties| properties.get(name)) {
                    prune(property, field, &field_path, false, pruned);
                } else if additional.is_object() {
                    prune(additional, field, &field_path, false, pruned);
                } else if !(keep_unknown || (embedded && ROOT_FIELDS.contains(&name.as_str()))) {
                    unknown.push(name.clone());
                    pruned.push(field_path);
                }
            }
            for name in unknown {
                fields.remove(&name);
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                prune(&schema["items"], item, &format!("{path}[{index}]"), false, pruned);
            }
        }
        _ => {}
    }
}

fn default(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(fields) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (name, property) in properties {
                    let missing = match fields.get(name) {
                        None => true,
                        Some(Value::Null) => property["nullable"] != true,
                        Some(_) => false,
                    };
                    if missing && let Some(value) = property.get("default") {
                        fields.insert(name.clone(), value.clone());
                    }
                    if let Some(field) = fields.get_mut(name) {
                        default(property, field);
                    }
                }
            }
            if schema["additionalProperties"].is_object() {
                for field in fields.values_mut() {
                    default(&schema["additionalProperties"], field);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                default(&schema["items"], item);
            }
        }
        _ => {}
    }
}

/// The JSON type of a value, as the schema names types.
fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as Go's field errors print it: strings quoted, the rest as JSON.
fn printed(value: &Value) -> String {
    match value {
        Value::String(text) => format!("{text:?}"),
        other => other.to_string(),
    }
}

fn validate(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let actual = type_of(value);
    if value.is_null() && schema["nullable"] == true {
        return;
    }
    let int_or_string = schema["x-kubernetes-int-or-string"] == true;
    if let Some(expected) = schema["type"].as_str() {
        let fits = expected == actual || (expected == "number" && actual == "integer");
        if !(fits || (int_or_string && matches!(actual, "integer" | "string"))) {
            let quoted = format!("{actual:?}");
            errors.push(FieldError::type_invalid(
                path,
                &quoted,
                &format!("{path} in body must be of type {expected}: {quoted}"),
            ));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(printed).collect();
        errors.push(FieldError::not_supported(path, &printed(value), &supported));
    }
    if let Some(number) = value.as_f64() {
        bounds(schema, value, number, path, errors);
    }
    match value {
        Value::Object(fields) => {
            for (name, field) in fields {
                let property = schema["properties"].get(name).or_else(|| {
                    let additional = &schema["additionalProperties"];
                    additional.is_object().then_some(additional)
                });
                if let Some(property) = property {
                    validate(property, field, &child(path, name), errors);
                }
            }
            required(schema, fields, path, errors);
        }
        Value::Array(items) if schema["items"].is_object() => {
            for (index, item) in items.iter().enumerate() {
                validate(&schema["items"], item, &format!("{path}[{index}]"), errors);
            }
        }
        _ => {}
    }
}

fn bounds(schema: &Value, value: &Value, number: f64, path: &str, errors: &mut Vec<FieldError>) {
    let checks = [
        ("minimum", "exclusiveMinimum", "greater than"),
        ("maximum", "exclusiveMaximum", "less than"),
    ];
    for (bound, exclusive, relation) in checks {
        let Some(limit) = schema[bound].as_f64() else {
            continue;
        };
        let exclusive = schema[exclusive] == true;
        let within = match (relation, exclusive) {
            ("greater than", false) => number >= limit,
            ("greater than", true) => number > limit,
            (_, false) => number <= limit,
            (_, true) => number < limit,
        };
        if !within {
            let relation = if exclusive {
                relation.to_owned()
            } else {
                format!("{relation} or equal to")
            };
            errors.push(FieldError::invalid(
                path,
                &printed(value),
                &format!("{path} in body should be {relation} {}", schema[bound]),
            ));
        }
    }
}

fn required(schema: &Value, fields: &Map<String, Value>, path: &str, errors: &mut Vec<FieldError>) {
    for name in schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !fields.contains_key(name) {
            errors.push(FieldError::required(&child(path, name), ""));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                        "port": {"x-kubernetes-int-or-string": true},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    }
                }
            }
        })
    }

    #[test]
    fn unknown_fields_are_pruned_and_defaults_filled() {
        let mut object = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                                "spec": {"size": 3, "unknown": 1, "port": "http", "extra": {"kept": true},
                                         "labels": {"a": "b"}},
                                "junk": true});
        let (pruned, errors) = admit(&schema(), &mut object);
        assert_eq!(pruned, ["junk", "spec.unknown"]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(object["spec"]["color"], "red");
        assert_eq!(object["spec"]["extra"], json!({"kept": true}));
        assert_eq!(object["metadata"]["name"], "w");
    }

    #[test]
    fn invalid_fields_are_reported_as_kube_apiserver_words_them() {
        let mut object = json!({"spec": {"size": "big", "color": "pink", "labels": {"a": 1}}});
        let (_, errors) = admit(&schema(), &mut object);
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "spec.color: Unsupported value: \"pink\": supported values: \"red\", \"blue\"",
                "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
                "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\"",
            ]
        );
        let mut missing = json!({"spec": {"size": 11}});
        let (_, errors) = admit(&schema(), &mut missing);
        assert_eq!(
            errors[0].to_string(),
            "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"
        );
        let mut empty = json!({"spec": {}});
        let (_, errors) = admit(&schema(), &mut empty);
        assert_eq!(errors[0].to_string(), "spec.size: Required value");
    }
}
