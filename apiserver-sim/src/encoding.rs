//! Objects written as kube-apiserver writes them: `kind`, `apiVersion` and `metadata` first, `status` last.
//!
//! kube-apiserver serializes Go structs, so every object comes out in the
//! order of its type's fields: the type meta, the object meta in
//! `ObjectMeta`'s order, the rest, and the status. A `Status` answer keeps
//! its own order (`status`, `message`, `reason`, `details`, `code`). Fields
//! below those come out ordered by name.

use serde_json::{Map, Value};

/// What every object starts with.
const HEAD: [&str; 3] = ["kind", "apiVersion", "metadata"];
/// A `Status` object's fields after its head.
const STATUS_FIELDS: [&str; 5] = ["status", "message", "reason", "details", "code"];
/// `StatusDetails`' fields in their order.
const DETAILS: [&str; 6] = ["name", "group", "kind", "uid", "causes", "retryAfterSeconds"];
/// `StatusCause`'s fields in their order.
const CAUSE: [&str; 3] = ["reason", "message", "field"];
/// `ObjectMeta`'s fields in its order, with `ListMeta`'s after `resourceVersion`.
const METADATA: [&str; 17] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "continue",
    "remainingItemCount",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// `value` as JSON bytes, in kube-apiserver's field order.
#[must_use]
pub(crate) fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(&mut out, value);
    out
}

fn write(out: &mut Vec<u8>, value: &Value) {
    let Value::Object(fields) = value else {
        serde_json::to_writer(out, value).expect("a JSON value serializes");
        return;
    };
    let is_status = fields.get("kind").and_then(Value::as_str) == Some("Status");
    let first: &[&str] = if is_status { &STATUS_FIELDS } else { &[] };
    let last = if is_status { None } else { Some("status") };
    let ordered = HEAD.iter().chain(first).copied();
    let rest = fields
        .keys()
        .map(String::as_str)
        .filter(|key| !HEAD.contains(key) && !first.contains(key) && Some(*key) != last);
    let keys = ordered.chain(rest).chain(last);
    write_fields(out, fields, keys, |out, key, value| match key {
        "metadata" => write_metadata(out, value),
        "details" if is_status => write_details(out, value),
        _ => serde_json::to_writer(out, value).expect("a JSON value serializes"),
    });
}

/// A `Status`'s details, and each of its causes, in their types' order.
fn write_details(out: &mut Vec<u8>, value: &Value) {
    let Value::Object(fields) = value else {
        serde_json::to_writer(out, value).expect("a JSON value serializes");
        return;
    };
    write_fields(out, fields, DETAILS.iter().copied(), |out, key, value| {
        match (key, value) {
            ("causes", Value::Array(causes)) => {
                out.push(b'[');
                for (index, cause) in causes.iter().enumerate() {
                    if index > 0 {
                        out.push(b',');
                    }
                    match cause {
                        Value::Object(cause) => write_fields(out, cause, CAUSE.iter().copied(), |out, _, value| {
                            serde_json::to_writer(out, value).expect("a JSON value serializes");
                        }),
                        other => serde_json::to_writer(&mut *out, other).expect("a JSON value serializes"),
                    }
                }
                out.push(b']');
            }
            _ => serde_json::to_writer(out, value).expect("a JSON value serializes"),
        }
    });
}

fn write_metadata(out: &mut Vec<u8>, value: &Value) {
    let Value::Object(fields) = value else {
        serde_json::to_writer(out, value).expect("a JSON value serializes");
        return;
    };
    let rest = fields.keys().map(String::as_str).filter(|key| !METADATA.contains(key));
    write_fields(out, fields, METADATA.iter().copied().chain(rest), |out, _, value| {
        serde_json::to_writer(out, value).expect("a JSON value serializes");
    });
}

/// Writes the fields present among `keys`, in that order, each value by `value`.
fn write_fields<'a>(
    out: &mut Vec<u8>,
    fields: &Map<String, Value>,
    keys: impl Iterator<Item = &'a str>,
    value: impl Fn(&mut Vec<u8>, &str, &Value),
) {
    out.push(b'{');
    let mut first = true;
    for key in keys {
        let Some(field) = fields.get(key) else { continue };
        if !first {
            out.push(b',');
        }
        first = false;
        serde_json::to_writer(&mut *out, key).expect("a key serializes");
        out.push(b':');
        value(out, key, field);
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn text(value: &Value) -> String {
        String::from_utf8(to_vec(value)).unwrap()
    }

    #[test]
    fn objects_start_with_their_type_and_metadata_and_end_with_their_status() {
        let pod = json!({
            "status": {"phase": "Running"}, "spec": {"nodeName": "a"}, "metadata": {
                "uid": "u", "name": "web", "labels": {"b": "2", "a": "1"}, "namespace": "shop"},
            "apiVersion": "v1", "kind": "Pod",
        });
        assert_eq!(
            text(&pod),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"shop","uid":"u","labels":{"a":"1","b":"2"}},"spec":{"nodeName":"a"},"status":{"phase":"Running"}}"#
        );
        assert_eq!(serde_json::from_slice::<Value>(&to_vec(&pod)).unwrap(), pod);
    }

    #[test]
    fn a_status_answer_keeps_its_own_order() {
        let status = json!({"code": 422, "reason": "Invalid", "message": "m", "status": "Failure",
                            "details": {"kind": "Widget", "name": "w", "group": "example.com",
                                        "causes": [{"field": "spec.size", "message": "Required value", "reason": "FieldValueRequired"}]},
                            "metadata": {}, "apiVersion": "v1", "kind": "Status"});
        assert_eq!(
            text(&status),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","reason":"Invalid","details":{"name":"w","group":"example.com","kind":"Widget","causes":[{"reason":"FieldValueRequired","message":"Required value","field":"spec.size"}]},"code":422}"#
        );
    }
}
