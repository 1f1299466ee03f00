//! CRD structural schemas: a custom resource is pruned to, defaulted by and checked against its version's `openAPIV3Schema`.
//!
//! As kube-apiserver does on every write of a custom resource: fields the
//! schema does not declare are dropped (unless it preserves unknown fields),
//! missing fields with a `default` get it, then the value is checked: types,
//! `required` fields, `enum`s, numeric bounds and `multipleOf`, string
//! lengths, `pattern`s (Go's RE2 syntax, which the `regex` crate shares) and
//! `format`s, item counts, `uniqueItems` and the uniqueness of
//! `x-kubernetes-list-type` `set` and `map` lists, property counts,
//! `allOf`/`anyOf`/`oneOf`/`not`, and the CEL rules of
//! `x-kubernetes-validations` (in `rules`), with kube-apiserver's messages.

use serde_json::{Map, Value};

use crate::status::FieldError;

mod formats;

/// Fields every object keeps at its root whatever its schema declares.
const ROOT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Prunes, defaults and validates `object` against `schema`: the paths of
/// the fields pruned, and what is invalid. `old` is the stored object on an
/// update, for the rules that compare with it.
pub(super) fn admit(schema: &Value, object: &mut Value, old: Option<&Value>) -> (Vec<String>, Vec<FieldError>) {
    let mut pruned = Vec::new();
    prune(schema, object, "", true, &mut pruned);
    default(schema, object);
    let mut errors = Vec::new();
    if let Some(fields) = object.as_object() {
        // The root's type meta and metadata are the API server's to check.
        for (name, value) in fields.iter().filter(|(name, _)| !ROOT_FIELDS.contains(&name.as_str())) {
            if let Some(property) = schema["properties"].get(name) {
                let old = old.and_then(|old| old.get(name));
                validate(property, value, old, name, &mut errors);
            }
        }
        required(schema, fields, "", &mut errors);
        super::rules::check(schema, object, old, "<nil>", &mut errors);
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

/// The JSON type of a value, as the schema names types (and kube-apiserver
/// a failed rule's value).
pub(super) fn type_of(value: &Value) -> &'static str {
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

fn validate(schema: &Value, value: &Value, old: Option<&Value>, path: &str, errors: &mut Vec<FieldError>) {
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
    let before = errors.len();
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(printed).collect();
        errors.push(FieldError::not_supported(path, &printed(value), &supported));
    }
    if let Some(number) = value.as_f64() {
        bounds(schema, value, number, path, errors);
    }
    let invalid = |detail: String| FieldError::invalid(path, &printed(value), &format!("{path} in body {detail}"));
    match value {
        Value::String(text) => {
            let length = text.chars().count() as u64;
            if let Some(max) = schema["maxLength"].as_u64()
                && length > max
            {
                errors.push(FieldError::too_long(path, max));
            }
            if let Some(min) = schema["minLength"].as_u64()
                && length < min
            {
                errors.push(invalid(format!("should be at least {min} chars long")));
            }
            if let Some(pattern) = schema["pattern"].as_str() {
                match regex::Regex::new(pattern) {
                    Ok(regex) if regex.is_match(text) => {}
                    _ => errors.push(invalid(format!("should match '{pattern}'"))),
                }
            }
            if let Some(format) = schema["format"].as_str()
                && !formats::valid(format, text)
            {
                errors.push(invalid(format!("must be of type {format}: {}", printed(value))));
            }
        }
        Value::Object(fields) => {
            if let Some(max) = schema["maxProperties"].as_u64()
                && fields.len() as u64 > max
            {
                errors.push(FieldError::too_many(path, fields.len(), max));
            }
            if let Some(min) = schema["minProperties"].as_u64()
                && (fields.len() as u64) < min
            {
                errors.push(invalid(format!("should have at least {min} properties")));
            }
            for (name, field) in fields {
                let property = schema["properties"].get(name).or_else(|| {
                    let additional = &schema["additionalProperties"];
                    additional.is_object().then_some(additional)
                });
                if let Some(property) = property {
                    let old = old.and_then(|old| old.get(name));
                    validate(property, field, old, &child(path, name), errors);
                }
            }
            required(schema, fields, path, errors);
        }
        Value::Array(items) => {
            array(schema, items, path, errors);
            if schema["items"].is_object() {
                for (index, item) in items.iter().enumerate() {
                    let old = old.and_then(|old| correlated(schema, old, item));
                    validate(&schema["items"], item, old, &format!("{path}[{index}]"), errors);
                }
            }
        }
        _ => {}
    }
    combinations(schema, value, path, errors);
    // As kube-apiserver does, the rules run on values the schema accepts.
    if errors.len() == before {
        super::rules::check(schema, value, old, path, errors);
    }
}

/// The old element an array's element is compared with by transition rules:
/// the element of a `map` list with the same keys, of a `set` list the same
/// value; none in an atomic list.
fn correlated<'a>(schema: &Value, old: &'a Value, item: &Value) -> Option<&'a Value> {
    let old = old.as_array()?;
    match schema["x-kubernetes-list-type"].as_str() {
        Some("map") => {
            let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            old.iter()
                .find(|candidate| keys.iter().all(|key| candidate[*key] == item[*key]))
        }
        Some("set") => old.iter().find(|candidate| *candidate == item),
        _ => None,
    }
}

/// An array's item counts and the uniqueness of its items.
fn array(schema: &Value, items: &[Value], path: &str, errors: &mut Vec<FieldError>) {
    let printed_items = || Value::Array(items.to_vec()).to_string();
    if let Some(max) = schema["maxItems"].as_u64()
        && items.len() as u64 > max
    {
        errors.push(FieldError::too_many(path, items.len(), max));
    }
    if let Some(min) = schema["minItems"].as_u64()
        && (items.len() as u64) < min
    {
        errors.push(FieldError::invalid(
            path,
            &printed_items(),
            &format!("{path} in body should have at least {min} items"),
        ));
    }
    let duplicate_of = |index: usize, same: &dyn Fn(&Value, &Value) -> bool| {
        items[..index].iter().any(|earlier| same(earlier, &items[index]))
    };
    match schema["x-kubernetes-list-type"].as_str() {
        Some("set") => {
            for (index, item) in items.iter().enumerate() {
                if duplicate_of(index, &|a, b| a == b) {
                    errors.push(FieldError::duplicate(&format!("{path}[{index}]"), &printed(item)));
                }
            }
        }
        Some("map") => {
            let keys: Vec<String> = schema["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|key| Some(key.as_str()?.to_owned()))
                .collect();
            for (index, item) in items.iter().enumerate() {
                if duplicate_of(index, &|a, b| keys.iter().all(|key| a[key] == b[key])) {
                    let identity: serde_json::Map<String, Value> =
                        keys.iter().map(|key| (key.clone(), item[key].clone())).collect();
                    errors.push(FieldError::duplicate(
                        &format!("{path}[{index}]"),
                        &Value::Object(identity).to_string(),
                    ));
                }
            }
        }
        _ => {}
    }
    if schema["uniqueItems"] == true && (0..items.len()).any(|index| duplicate_of(index, &|a, b| a == b)) {
        errors.push(FieldError::invalid(
            path,
            &printed_items(),
            &format!("{path} in body shouldn't contain duplicates"),
        ));
    }
}

/// `allOf`, `anyOf`, `oneOf` and `not`, the validation-only parts of a
/// structural schema.
fn combinations(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let passes = |sub: &Value| {
        let mut found = Vec::new();
        validate(sub, value, None, path, &mut found);
        found.is_empty()
    };
    for sub in schema["allOf"].as_array().into_iter().flatten() {
        validate(sub, value, None, path, errors);
    }
    if let Some(any) = schema["anyOf"].as_array()
        && !any.iter().any(passes)
    {
        errors.push(FieldError::invalid(
            path,
            &printed(value),
            &format!("{path} in body must validate at least one schema (anyOf)"),
        ));
    }
    if let Some(one) = schema["oneOf"].as_array() {
        let passing = one.iter().filter(|sub| passes(sub)).count();
        if passing != 1 {
            errors.push(FieldError::invalid(
                path,
                &printed(value),
                &format!("{path} in body must validate one and only one schema (oneOf)"),
            ));
        }
    }
    if schema["not"].is_object() && passes(&schema["not"]) {
        errors.push(FieldError::invalid(
            path,
            &printed(value),
            &format!("{path} in body should not validate the schema (not)"),
        ));
    }
}

fn bounds(schema: &Value, value: &Value, number: f64, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(factor) = schema["multipleOf"].as_f64().filter(|factor| *factor > 0.0)
        && ((number / factor).round() * factor - number).abs() > f64::EPSILON * number.abs().max(1.0)
    {
        errors.push(FieldError::invalid(
            path,
            &printed(value),
            &format!("{path} in body should be a multiple of {}", schema["multipleOf"]),
        ));
    }
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
        let (pruned, errors) = admit(&schema(), &mut object, None);
        assert_eq!(pruned, ["junk", "spec.unknown"]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(object["spec"]["color"], "red");
        assert_eq!(object["spec"]["extra"], json!({"kept": true}));
        assert_eq!(object["metadata"]["name"], "w");
    }

    #[test]
    fn invalid_fields_are_reported_as_kube_apiserver_words_them() {
        let mut object = json!({"spec": {"size": "big", "color": "pink", "labels": {"a": 1}}});
        let (_, errors) = admit(&schema(), &mut object, None);
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
        let (_, errors) = admit(&schema(), &mut missing, None);
        assert_eq!(
            errors[0].to_string(),
            "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"
        );
        let mut empty = json!({"spec": {}});
        let (_, errors) = admit(&schema(), &mut empty, None);
        assert_eq!(errors[0].to_string(), "spec.size: Required value");
    }
}
