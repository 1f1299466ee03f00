//! Custom resources pruned, defaulted and validated by their CRD's structural schema.

use apiserver_sim::SimConfig;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, ValidationDirective};
use serde_json::{Value, json};

use crate::support::{api_error, from_json, raw, register_example_crd, start};

/// Registers `widgets.example.com/v1`, whose schema requires a `size` from 1
/// to 10 and defaults `color` to `red`; the API of its objects.
async fn widgets_with_schema(client: &Client) -> Api<DynamicObject> {
    let spec = json!({
        "type": "object",
        "required": ["size"],
        "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 10},
            "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
        }
    });
    register_example_crd(client, "Widget", "widgets", spec).await
}

fn widget(name: &str, spec: Value) -> DynamicObject {
    from_json(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}))
}

#[tokio::test]
async fn custom_resources_are_pruned_and_defaulted_by_their_schema() {
    let (_server, client) = start(SimConfig::default()).await;
    let widgets = widgets_with_schema(&client).await;
    let created = widgets
        .create(
            &PostParams::default(),
            &widget("w1", json!({"size": 3, "shape": "round"})),
        )
        .await
        .unwrap();
    assert_eq!(created.data["spec"], json!({"size": 3, "color": "red"}));
    assert_eq!(widgets.get("w1").await.unwrap().data["spec"]["color"], "red");

    // Strict field validation refuses what would be dropped.
    let strict = PatchParams::apply("test").validation(ValidationDirective::Strict);
    let refused = widgets
        .patch(
            "w1",
            &strict,
            &Patch::Apply(widget("w1", json!({"size": 4, "shape": "round"}))),
        )
        .await
        .unwrap_err();
    let refused = api_error(refused);
    assert_eq!(refused.code, 400);
    assert_eq!(refused.message, "strict decoding error: unknown field \"spec.shape\"");
}

#[tokio::test]
async fn invalid_custom_resources_get_kube_apiservers_422() {
    let (server, client) = start(SimConfig::default()).await;
    let widgets = widgets_with_schema(&client).await;
    let wrong_type = widgets
        .create(&PostParams::default(), &widget("bad", json!({"size": "big"})))
        .await
        .unwrap_err();
    let wrong_type = api_error(wrong_type);
    assert_eq!((wrong_type.code, wrong_type.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        wrong_type.message,
        "Widget.example.com \"bad\" is invalid: spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""
    );
    let several = widgets
        .create(&PostParams::default(), &widget("bad", json!({"color": "pink"})))
        .await
        .unwrap_err();
    assert_eq!(
        api_error(several).message,
        "Widget.example.com \"bad\" is invalid: [spec.color: Unsupported value: \"pink\": supported values: \"red\", \"blue\", spec.size: Required value]"
    );
    widgets
        .create(&PostParams::default(), &widget("ok", json!({"size": 2})))
        .await
        .unwrap();
    let too_big = widgets
        .patch(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 11}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_error(too_big).message,
        "Widget.example.com \"ok\" is invalid: spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"
    );

    // The causes name each field, as clients that map errors to fields read them.
    let body = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "raw"}, "spec": {}});
    let answer = raw(
        &server,
        "POST",
        "/apis/example.com/v1/namespaces/default/widgets",
        "application/json",
        &body.to_string(),
    )
    .await
    .json();
    assert_eq!(
        answer["details"],
        json!({"name": "raw", "group": "example.com", "kind": "Widget",
               "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.size"}]})
    );
}

/// Registers `gadgets.example.com/v1`, whose schema uses every check
/// kube-apiserver makes of a custom resource; the API of its objects.
async fn gadgets(client: &Client) -> Api<DynamicObject> {
    let spec = json!({
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.replicas <= self.maxReplicas", "message": "replicas may not exceed maxReplicas"},
            {"rule": "self.maxReplicas >= oldSelf.maxReplicas", "message": "maxReplicas may not shrink"},
        ],
        "properties": {
            "name": {"type": "string", "minLength": 3, "maxLength": 8, "pattern": "^[a-z]+$"},
            "owner": {"type": "string", "format": "email"},
            "replicas": {"type": "integer"},
            "maxReplicas": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3, "uniqueItems": true},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                      "items": {"type": "object", "properties": {"port": {"type": "integer"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 2},
        }
    });
    register_example_crd(client, "Gadget", "gadgets", spec).await
}

fn gadget(spec: Value) -> DynamicObject {
    from_json(json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": spec}))
}

#[tokio::test]
async fn lengths_patterns_formats_counts_and_cel_rules_are_checked_as_kube_apiserver_checks_them() {
    let (_server, client) = start(SimConfig::default().controllers(false)).await;
    let gadgets = gadgets(&client).await;
    let refused = gadgets
        .create(
            &PostParams::default(),
            &gadget(json!({"name": "Ab", "owner": "nobody", "replicas": 5, "maxReplicas": 3,
                           "tags": ["a", "a", "b", "c"], "ports": [{"port": 80}, {"port": 80}],
                           "labels": {"a": "1", "b": "2", "c": "3"}})),
        )
        .await
        .unwrap_err();
    let message = api_error(refused).message;
    for expected in [
        "spec.name: Invalid value: \"Ab\": spec.name in body should be at least 3 chars long",
        "spec.name: Invalid value: \"Ab\": spec.name in body should match '^[a-z]+$'",
        "spec.owner: Invalid value: \"nobody\": spec.owner in body must be of type email: \"nobody\"",
        "spec.tags: Too many: 4: must have at most 3 items",
        "spec.tags in body shouldn't contain duplicates",
        "spec.ports[1]: Duplicate value: {\"port\":80}",
        "spec.labels: Too many: 3: must have at most 2 items",
    ] {
        assert!(message.contains(expected), "{expected} missing from: {message}");
    }
    let too_long = gadgets
        .create(&PostParams::default(), &gadget(json!({"name": "abcdefghij"})))
        .await
        .unwrap_err();
    assert!(
        api_error(too_long)
            .message
            .contains("spec.name: Too long: may not be more than 8 bytes")
    );
    let rule = gadgets
        .create(
            &PostParams::default(),
            &gadget(json!({"replicas": 5, "maxReplicas": 3})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_error(rule).message,
        "Gadget.example.com \"g\" is invalid: spec: Invalid value: \"object\": replicas may not exceed maxReplicas"
    );
    // A transition rule compares with the stored object on an update only.
    gadgets
        .create(
            &PostParams::default(),
            &gadget(json!({"replicas": 1, "maxReplicas": 3})),
        )
        .await
        .unwrap();
    let shrunk = gadgets
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1, "maxReplicas": 2}})),
        )
        .await
        .unwrap_err();
    assert!(api_error(shrunk).message.contains("maxReplicas may not shrink"));
}
