//! Metadata-only answers: `PartialObjectMetadata` for gets, writes and watch events, `PartialObjectMetadataList` for lists.

use std::time::Duration;

use apiserver_sim::SimConfig;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::time::timeout;

use crate::support::{labelled_configmap, raw, start};

const METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

#[tokio::test]
async fn metadata_requests_answer_partial_object_metadata() {
    let (server, client) = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let created = labelled_configmap(&api, "settings").await;

    let meta = api.get_metadata("settings").await.unwrap();
    let types = meta.types.clone().expect("the answer names its kind");
    assert_eq!(
        (types.kind.as_str(), types.api_version.as_str()),
        ("PartialObjectMetadata", "meta.k8s.io/v1")
    );
    assert_eq!(meta.metadata.uid, created.metadata.uid);
    assert_eq!(meta.labels()["app"], "web");

    // The namespace also holds the controllers' kube-root-ca.crt.
    let list = api
        .list_metadata(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(list.types.kind, "PartialObjectMetadataList");
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );

    let patched = api
        .patch_metadata(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "front"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.labels()["tier"], "front");
    assert_eq!(
        api.get("settings").await.unwrap().data.unwrap()["secret-ish"],
        "not in metadata",
        "a metadata patch leaves the rest of the object"
    );

    // On the wire: metadata only, no data.
    let path = "/api/v1/namespaces/default/configmaps";
    let one = raw(&server, "GET", &format!("{path}/settings"), METADATA, "")
        .await
        .json();
    assert_eq!(one["kind"], "PartialObjectMetadata");
    assert!(one.get("data").is_none(), "{one}");
    let all = raw(&server, "GET", path, METADATA_LIST, "").await.json();
    assert_eq!(all["apiVersion"], "meta.k8s.io/v1");
    assert!(all["metadata"]["resourceVersion"].is_string(), "{all}");
    assert!(all["items"][0].get("data").is_none(), "{all}");
}

#[tokio::test]
async fn asking_for_the_wrong_metadata_form_is_not_acceptable() {
    let (server, client) = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    labelled_configmap(&api, "settings").await;
    let path = "/api/v1/namespaces/default/configmaps";
    let list_as_one = raw(&server, "GET", path, METADATA, "").await;
    assert_eq!(list_as_one.code, 406);
    let status = list_as_one.json();
    assert_eq!(status["reason"], "NotAcceptable");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("you requested PartialObjectMetadata, but the requested object is a list"),
        "{status}"
    );
    let one_as_list = raw(&server, "GET", &format!("{path}/settings"), METADATA_LIST, "").await;
    assert_eq!(one_as_list.code, 406);
}

#[tokio::test]
async fn metadata_watches_carry_partial_object_metadata() {
    let (server, client) = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    // What kube-rs's `metadata_watcher` became: a watcher of `PartialObjectMeta`.
    let metadata: Api<PartialObjectMeta<ConfigMap>> = Api::default_namespaced(client);
    let mut events = watcher(metadata, watcher::Config::default()).boxed();
    loop {
        let event = timeout(Duration::from_secs(10), events.try_next())
            .await
            .expect("the metadata watcher never finished its initial list")
            .unwrap();
        if matches!(event, Some(watcher::Event::InitDone)) {
            break;
        }
    }
    labelled_configmap(&api, "one").await;
    api.delete("one", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = timeout(Duration::from_secs(10), events.try_next())
            .await
            .expect("the metadata watcher saw no change")
            .unwrap()
            .expect("the stream goes on");
        let (what, meta) = match event {
            watcher::Event::Apply(meta) => ("apply", meta),
            watcher::Event::Delete(meta) => ("delete", meta),
            other => panic!("unexpected {other:?}"),
        };
        let kind = meta.types.map(|types| types.kind);
        seen.push((what, meta.metadata.name.unwrap_or_default(), kind));
    }
    let kind = Some("PartialObjectMetadata".to_owned());
    assert_eq!(
        seen,
        [
            ("apply", "one".to_owned(), kind.clone()),
            ("delete", "one".to_owned(), kind)
        ]
    );

    // On the wire, with either metadata form: no data in any event.
    labelled_configmap(&api, "two").await;
    for accept in [METADATA, METADATA_LIST] {
        let path = "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1";
        let watch = raw(&server, "GET", path, accept, "").await;
        let event: Value = serde_json::from_str(watch.body.lines().next().expect("an event")).unwrap();
        assert_eq!(event["object"]["kind"], "PartialObjectMetadata", "{event}");
        assert!(event["object"].get("data").is_none(), "{event}");
    }
}
