//! The answers the HTTP surface writes: plain text, JSON, protobuf bytes,
//! lists assembled from stored bytes, and `Status` errors.

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::{BufMut, BytesMut};
use serde_json::{Value, json};

use crate::status::ApiError;
use crate::{encoding, resources};

/// A plain text answer, as the health endpoints and `/metrics` give.
pub(super) fn text_response(status: StatusCode, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}

pub(super) fn json_response(status: StatusCode, value: &Value) -> Response {
    let mut bytes = encoding::to_vec(value);
    bytes.push(b'\n');
    bytes_response(status, Bytes::from(bytes))
}

/// An aggregated discovery document, labelled as the API server labels it.
pub(super) fn aggregated_discovery_response(groups: &[(String, Vec<Value>)]) -> Response {
    let mut response = json_response(StatusCode::OK, &resources::aggregated_discovery(groups));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(resources::AGGREGATED_DISCOVERY),
    );
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    response
}

/// A JSON answer. Its body ends with a newline, as Go's JSON encoder ends
/// every value kube-apiserver writes.
pub(super) fn bytes_response(status: StatusCode, bytes: Bytes) -> Response {
    let bytes = if bytes.ends_with(b"\n") {
        bytes
    } else {
        let mut line = BytesMut::with_capacity(bytes.len() + 1);
        line.put_slice(&bytes);
        line.put_u8(b'\n');
        line.freeze()
    };
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The Go type kube-apiserver names in a 406 for a resource's `kind`: its
/// internal type (`*core.ConfigMap`, `*apps.DeploymentList`), or an
/// unstructured one for custom resources.
pub(super) fn go_type(def: &resources::ResourceDef, kind: &str) -> String {
    let package = match def.group.as_str() {
        "" | "events.k8s.io" => "core",
        "rbac.authorization.k8s.io" => "rbac",
        group if group.contains('.') && !group.ends_with(".k8s.io") => {
            return if kind.ends_with("List") {
                "unstructured.UnstructuredList".to_owned()
            } else {
                "unstructured.Unstructured".to_owned()
            };
        }
        group => group.split('.').next().unwrap_or(group),
    };
    format!("{package}.{kind}")
}

/// An object's JSON without its leading `kind` and `apiVersion`, as
/// kube-apiserver writes the items of a built-in type's list.
/// (The answer starts at the comma before `metadata`: the list writes its
/// opening brace in place of that comma, so no item is copied.)
pub(super) fn without_type_meta(json: Bytes) -> Bytes {
    // Objects are written kind, apiVersion, metadata: both values are plain
    // strings, so the first `,"metadata":` is the top-level key.
    const METADATA: &[u8] = b",\"metadata\":";
    if !json.starts_with(b"{\"kind\":") {
        return json;
    }
    match json.windows(METADATA.len()).position(|window| window == METADATA) {
        Some(at) => json.slice(at..),
        None => json,
    }
}

/// A list, assembled from the items' serialized bytes without re-serializing them.
pub(super) fn list_response(
    kind: &str,
    api_version: &str,
    rv: u64,
    continue_token: Option<&str>,
    items: impl ExactSizeIterator<Item = Bytes>,
) -> Response {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    let head = encoding::to_vec(&json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}));
    let items: Vec<Bytes> = items.collect();
    let size = items.iter().map(|item| item.len() + 1).sum::<usize>() + head.len() + 17;
    let mut buf = BytesMut::with_capacity(size);
    // The head without its closing brace; the items follow.
    buf.put_slice(&head[..head.len() - 1]);
    buf.put_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            buf.put_u8(b',');
        }
        // An item without its type starts at the comma before `metadata`.
        match item.strip_prefix(b",") {
            Some(rest) => {
                buf.put_u8(b'{');
                buf.put_slice(rest);
            }
            None => buf.put_slice(item),
        }
    }
    buf.put_slice(b"]}\n");
    bytes_response(StatusCode::OK, buf.freeze())
}

pub(super) fn error_response(error: &ApiError) -> Response {
    let status = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(status, &error.to_status());
    if error.code == 429 {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}
