//! Server-side apply, field managers, dry runs and Events, driven by the real kube-rs client.

use std::collections::BTreeMap;
use std::time::Duration;

use apiserver_sim::{ApiServer, SimConfig};
use axum::http::{self, header};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{self, Recorder, Reporter};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::time::timeout;

async fn start(config: SimConfig) -> (ApiServer, Client) {
    let server = ApiServer::start(config)
        .await
        .expect("the server binds a loopback port");
    let client = Client::try_from(server.client_config()).expect("a client for the server");
    (server, client)
}

fn configmap(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": data.iter().map(|(k, v)| (*k, *v)).collect::<BTreeMap<_, _>>()
    }))
    .expect("a valid configmap")
}

fn api_code(error: kube::Error) -> u16 {
    match error {
        kube::Error::Api(status) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The managedFields entries as (manager, operation, subresource, fieldsV1).
fn managed(object: &impl ResourceExt) -> Vec<(String, String, Option<String>, Value)> {
    object
        .managed_fields()
        .iter()
        .map(|entry| {
            (
                entry.manager.clone().unwrap_or_default(),
                entry.operation.clone().unwrap_or_default(),
                entry.subresource.clone(),
                serde_json::to_value(&entry.fields_v1).expect("fieldsV1 serializes"),
            )
        })
        .collect()
}

/// Sends a raw request; the answer's status code.
async fn raw(client: &Client, method: http::Method, uri: &str, content_type: &str, body: Value) -> u16 {
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, content_type)
        .body(serde_json::to_vec(&body).expect("a JSON value serializes"))
        .expect("a valid request");
    match client.request_text(request).await {
        Ok(_) => 200,
        Err(error) => api_code(error),
    }
}

#[tokio::test]
async fn apply_creates_updates_and_records_its_field_manager() {
    let (server, client) = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let apply = PatchParams::apply("deployer");

    let created = api
        .patch("cfg", &apply, &Patch::Apply(configmap("cfg", &[("a", "1")])))
        .await
        .unwrap();
    assert_eq!(
        managed(&created),
        [("deployer".into(), "Apply".into(), None, json!({"f:data": {"f:a": {}}}))]
    );
    let entry = &created.managed_fields()[0];
    assert_eq!(entry.api_version.as_deref(), Some("v1"));
    assert_eq!(entry.fields_type.as_deref(), Some("FieldsV1"));
    assert!(entry.time.is_some());

    let updated = api
        .patch(
            "cfg",
            &apply,
            &Patch::Apply(configmap("cfg", &[("a", "2"), ("b", "1")])),
        )
        .await
        .unwrap();
    assert_eq!(
        updated.data.clone().unwrap(),
        BTreeMap::from([("a".into(), "2".into()), ("b".into(), "1".into())])
    );

    let rv = server.store().resource_version();
    let again = api
        .patch(
            "cfg",
            &apply,
            &Patch::Apply(configmap("cfg", &[("a", "2"), ("b", "1")])),
        )
        .await
        .unwrap();
    assert_eq!(
        again.resource_version(),
        updated.resource_version(),
        "the same apply again is no change"
    );
    assert_eq!(server.store().resource_version(), rv);

    let smaller = api
        .patch("cfg", &apply, &Patch::Apply(configmap("cfg", &[("b", "1")])))
        .await
        .unwrap();
    assert_eq!(
        smaller.data.unwrap(),
        BTreeMap::from([("b".into(), "1".into())]),
        "a field the manager no longer applies is removed"
    );
}

#[tokio::test]
async fn an_apply_that_changes_another_managers_field_conflicts_unless_forced() {
    let (_server, client) = start(SimConfig::default()).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client);
    let config = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}
    });
    deployments
        .patch("web", &PatchParams::apply("deployer"), &Patch::Apply(&config))
        .await
        .unwrap();

    // An autoscaler takes spec.replicas through the scale subresource.
    let hpa = PatchParams {
        field_manager: Some("hpa".into()),
        ..PatchParams::default()
    };
    deployments
        .patch_scale("web", &hpa, &Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await
        .unwrap();
    let scaled = deployments.get("web").await.unwrap();
    let entries = managed(&scaled);
    assert!(
        entries.contains(&(
            "hpa".into(),
            "Update".into(),
            Some("scale".into()),
            json!({"f:spec": {"f:replicas": {}}})
        )),
        "{entries:#?}"
    );

    let conflict = deployments
        .patch("web", &PatchParams::apply("deployer"), &Patch::Apply(&config))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = conflict else {
        panic!("expected an API error, got {conflict:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("conflict with \"hpa\"") && status.message.contains(".spec.replicas"),
        "{}",
        status.message
    );

    // Leaving replicas out of the configuration leaves them to the autoscaler.
    let mut without_replicas = config.clone();
    without_replicas["spec"].as_object_mut().unwrap().remove("replicas");
    let shared = deployments
        .patch("web", &PatchParams::apply("deployer"), &Patch::Apply(&without_replicas))
        .await
        .unwrap();
    assert_eq!(shared.spec.replicas, Some(4));

    let forced = deployments
        .patch("web", &PatchParams::apply("deployer").force(), &Patch::Apply(&config))
        .await
        .unwrap();
    assert_eq!(forced.spec.replicas, Some(2));
    assert!(
        !managed(&forced).iter().any(|(manager, ..)| manager == "hpa"),
        "the forced apply took the autoscaler's only field"
    );
}

#[tokio::test]
async fn writes_with_a_field_manager_record_the_fields_they_changed() {
    let (_server, client) = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let creator = PostParams {
        field_manager: Some("creator".into()),
        ..PostParams::default()
    };
    let created = api.create(&creator, &configmap("cfg", &[("a", "1")])).await.unwrap();
    assert_eq!(
        managed(&created),
        [("creator".into(), "Update".into(), None, json!({"f:data": {"f:a": {}}}))]
    );
    let editor = PatchParams {
        field_manager: Some("editor".into()),
        ..PatchParams::default()
    };
    let edited = api
        .patch("cfg", &editor, &Patch::Merge(json!({"data": {"a": "2", "b": "1"}})))
        .await
        .unwrap();
    assert_eq!(
        managed(&edited),
        [(
            "editor".into(),
            "Update".into(),
            None,
            json!({"f:data": {"f:a": {}, "f:b": {}}})
        )],
        "the editor took a from the creator, who owns nothing any more"
    );
    // A write that names no manager leaves ownership as it was.
    let anonymous = api
        .patch(
            "cfg",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"c": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(managed(&anonymous), managed(&edited));
}

#[tokio::test]
async fn the_api_server_checks_write_options_as_a_real_one_does() {
    let (_server, client) = start(SimConfig::default()).await;
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}});
    let apply = "application/apply-patch+yaml";
    assert_eq!(
        raw(
            &client,
            http::Method::PATCH,
            &format!("{configmaps}/cfg"),
            apply,
            body.clone()
        )
        .await,
        422,
        "an apply needs a field manager"
    );
    assert_eq!(
        raw(
            &client,
            http::Method::PATCH,
            &format!("{configmaps}/cfg?fieldManager=me"),
            apply,
            body.clone()
        )
        .await,
        200
    );
    assert_eq!(
        raw(
            &client,
            http::Method::PATCH,
            &format!("{configmaps}/cfg?force=true"),
            "application/merge-patch+json",
            json!({})
        )
        .await,
        422,
        "force is for apply only"
    );
    assert_eq!(
        raw(
            &client,
            http::Method::POST,
            &format!("{configmaps}?dryRun=Bogus"),
            "application/json",
            body
        )
        .await,
        422,
        "dryRun takes only All"
    );
}

/// The next event of a raw watch, or `None` when there is none within a short while.
async fn next_event(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin),
) -> Option<WatchEvent<ConfigMap>> {
    timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("the watch went silent")
        .expect("the watch failed")
}

#[tokio::test]
async fn dry_runs_answer_as_the_write_would_and_persist_nothing() {
    let (server, client) = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &configmap("real", &[("a", "1")]))
        .await
        .unwrap();
    let rv = server.store().resource_version();
    let mut watch = api
        .watch(&WatchParams::default().timeout(30), &rv.to_string())
        .await
        .unwrap()
        .boxed();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let dry_patch = PatchParams::default().dry_run();

    let created = api.create(&dry, &configmap("ghost", &[])).await.unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.resource_version, None);
    assert_eq!(
        api_code(api.create(&dry, &configmap("real", &[])).await.unwrap_err()),
        409
    );
    assert_eq!(
        api_code(api.create(&dry, &configmap("Not_Valid", &[])).await.unwrap_err()),
        422
    );

    let mut current = api.get("real").await.unwrap();
    current.data = Some(BTreeMap::from([("a".into(), "2".into())]));
    let replaced = api.replace("real", &dry, &current).await.unwrap();
    assert_eq!(replaced.data.unwrap()["a"], "2");
    assert_eq!(replaced.metadata.resource_version, Some(rv.to_string()));
    let mut stale = current.clone();
    stale.metadata.resource_version = Some("1".into());
    assert_eq!(api_code(api.replace("real", &dry, &stale).await.unwrap_err()), 409);

    let patched = api
        .patch("real", &dry_patch, &Patch::Merge(json!({"data": {"b": "1"}})))
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["b"], "1");
    let applied = api
        .patch(
            "applied",
            &PatchParams::apply("me").dry_run(),
            &Patch::Apply(configmap("applied", &[("a", "1")])),
        )
        .await
        .unwrap();
    assert_eq!(applied.name_any(), "applied");
    assert_eq!(
        api_code(
            api.patch("missing", &dry_patch, &Patch::Merge(json!({})))
                .await
                .unwrap_err()
        ),
        404
    );

    let deleted = api.delete("real", &DeleteParams::default().dry_run()).await.unwrap();
    // A ConfigMap's delete answers a Status of success, dry run or not.
    assert!(deleted.is_right());
    assert_eq!(
        api_code(
            api.delete("missing", &DeleteParams::default().dry_run())
                .await
                .unwrap_err()
        ),
        404
    );

    let deployments: Api<Deployment> = Api::default_namespaced(client);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}}}
    }))
    .unwrap();
    let deployment = deployments.create(&dry, &deployment).await.unwrap();
    assert_eq!(deployment.name_any(), "web");
    assert_eq!(
        api_code(
            deployments
                .patch_scale("web", &dry_patch, &Patch::Merge(json!({"spec": {"replicas": 3}})))
                .await
                .unwrap_err()
        ),
        404,
        "the dry-run deployment does not exist"
    );

    // Nothing was stored: no new resourceVersion, the objects as they were, and
    // the watch's next event is the marker written after all the dry runs.
    assert_eq!(server.store().resource_version(), rv);
    assert_eq!(api.get("real").await.unwrap().data.unwrap()["a"], "1");
    assert_eq!(api_code(api.get("ghost").await.unwrap_err()), 404);
    assert_eq!(api_code(api.get("applied").await.unwrap_err()), 404);
    api.create(&PostParams::default(), &configmap("marker", &[]))
        .await
        .unwrap();
    match next_event(&mut watch).await {
        Some(WatchEvent::Added(cm)) => assert_eq!(cm.name_any(), "marker"),
        other => panic!("expected the marker, got {other:?}"),
    }
}

#[tokio::test]
async fn a_dry_run_scale_answers_the_new_scale_and_keeps_the_old_one() {
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}}}
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &deployment).await.unwrap();
    let rv = server.store().resource_version();
    let scale = deployments
        .patch_scale(
            "web",
            &PatchParams::default().dry_run(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    let mut stale = deployments.get_scale("web").await.unwrap();
    stale.metadata.resource_version = Some("1".into());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    assert_eq!(
        api_code(deployments.replace_scale("web", &dry, &stale).await.unwrap_err()),
        409
    );
    assert_eq!(server.store().resource_version(), rv);
    assert_eq!(deployments.get("web").await.unwrap().spec.replicas, Some(1));
}

#[tokio::test]
async fn events_of_both_apis_are_stored_listed_and_watched() {
    let (_server, client) = start(SimConfig::default()).await;
    let events: Api<Event> = Api::default_namespaced(client.clone());
    let mut watched = events
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "hpa-controller".into(),
            instance: None,
        },
    );
    let regarding = ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some("Deployment".into()),
        name: Some("web".into()),
        namespace: Some("default".into()),
        ..ObjectReference::default()
    };
    let scaled = events::Event {
        action: "Scaling".into(),
        reason: "SuccessfulRescale".into(),
        note: Some("New size: 4".into()),
        type_: events::EventType::Normal,
        secondary: None,
    };
    recorder.publish(&scaled, &regarding).await.unwrap();
    // The same event again is a series: a merge patch of the first.
    recorder.publish(&scaled, &regarding).await.unwrap();

    let listed = events.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].reason.as_deref(), Some("SuccessfulRescale"));
    assert_eq!(listed[0].series.as_ref().map(|series| series.count), Some(2));
    match timeout(Duration::from_secs(5), watched.try_next())
        .await
        .expect("the Event watch went silent")
        .unwrap()
    {
        Some(WatchEvent::Added(event)) => assert_eq!(event.note.as_deref(), Some("New size: 4")),
        other => panic!("expected the event, got {other:?}"),
    }

    let core: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(client);
    let event: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "web.1"},
        "involvedObject": {"kind": "Deployment", "name": "web", "namespace": "default"},
        "reason": "ScalingReplicaSet", "message": "Scaled up replica set web-1 to 4", "type": "Normal"
    }))
    .unwrap();
    core.create(&PostParams::default(), &event).await.unwrap();
    // One storage behind both APIs: the recorded Event is a v1 Event too.
    let listed = core.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 2);
    let rescale = listed
        .iter()
        .find(|event| event.reason.as_deref() == Some("SuccessfulRescale"))
        .expect("the recorded Event, as a v1 Event");
    assert_eq!(rescale.message.as_deref(), Some("New size: 4"));
    assert_eq!(rescale.series.as_ref().and_then(|series| series.count), Some(2));
    assert!(
        listed
            .iter()
            .any(|event| event.reason.as_deref() == Some("ScalingReplicaSet"))
    );
    assert_eq!(events.list(&ListParams::default()).await.unwrap().items.len(), 2);
}
