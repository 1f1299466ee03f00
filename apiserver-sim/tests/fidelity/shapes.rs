//! Answers in kube-apiserver's shapes: field order, what a delete answers, which objects have a generation.

use apiserver_sim::SimConfig;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::rbac::v1::Role;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{from_json, labelled_configmap, pod_on, raw, start};

#[tokio::test]
async fn objects_are_written_kind_first_and_status_last() {
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client);
    let deployment: Deployment = from_json(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}
    }));
    deployments.create(&PostParams::default(), &deployment).await.unwrap();
    deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1}})),
        )
        .await
        .unwrap();
    let path = "/apis/apps/v1/namespaces/default/deployments";
    let one = raw(&server, "GET", &format!("{path}/web"), "application/json", "")
        .await
        .body;
    assert!(
        one.starts_with(
            r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"web","namespace":"default","uid":"#
        ),
        "{one}"
    );
    let (spec, status) = (one.find(r#","spec":"#).unwrap(), one.find(r#","status":"#).unwrap());
    // Go's JSON encoder ends every body with a newline.
    assert!(
        spec < status && one.ends_with("\"status\":{\"replicas\":1}}\n"),
        "{one}"
    );
    let list = raw(&server, "GET", path, "application/json", "").await.body;
    assert!(
        list.starts_with(r#"{"kind":"DeploymentList","apiVersion":"apps/v1","metadata":{"#),
        "{list}"
    );
    // A built-in type's list items have no kind and apiVersion: the list says them.
    assert!(list.contains(r#""items":[{"metadata":{"name":"web","#), "{list}");
    assert!(!list.contains(r#""kind":"Deployment""#), "{list}");
    let missing = raw(&server, "GET", &format!("{path}/gone"), "application/json", "")
        .await
        .body;
    assert!(
        missing.starts_with(r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"#),
        "{missing}"
    );
}

#[tokio::test]
async fn deletes_answer_a_status_or_the_object_as_their_storage_does() {
    let (_server, client) = start(SimConfig::default().controllers(false)).await;
    let configmaps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let created = labelled_configmap(&configmaps, "plain").await;
    let answer = configmaps.delete("plain", &DeleteParams::default()).await.unwrap();
    let status = answer.right().expect("a ConfigMap's delete answers a Status");
    assert_eq!(status.status, Some(kube::core::response::StatusSummary::Success));
    let details = status.details.expect("the Status names what it deleted");
    assert_eq!((details.name.as_str(), details.kind.as_str()), ("plain", "configmaps"));
    assert_eq!(Some(details.uid), created.metadata.uid);

    let mut guarded = labelled_configmap(&configmaps, "guarded").await;
    guarded.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    guarded.metadata.resource_version = None;
    configmaps
        .replace("guarded", &PostParams::default(), &guarded)
        .await
        .unwrap();
    let kept = configmaps.delete("guarded", &DeleteParams::default()).await.unwrap();
    let kept = kept.left().expect("an object finalizers keep is answered");
    assert!(kept.metadata.deletion_timestamp.is_some());

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pod_on(&pods, "web", None).await;
    let pod = pods.delete("web", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        pod.left()
            .expect("a Pod's delete answers the Pod")
            .metadata
            .name
            .as_deref(),
        Some("web")
    );

    let roles: Api<Role> = Api::default_namespaced(client);
    roles
        .create(&PostParams::default(), &from_json(json!({"metadata": {"name": "r"}})))
        .await
        .unwrap();
    let details = roles
        .delete("r", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .and_then(|status| status.details)
        .expect("a Role's delete answers a Status with details");
    assert_eq!(
        (details.group.as_str(), details.kind.as_str()),
        ("rbac.authorization.k8s.io", "roles")
    );
}

#[tokio::test]
async fn only_the_resources_whose_strategy_keeps_a_generation_have_one() {
    let (_server, client) = start(SimConfig::default().controllers(false)).await;
    let configmaps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let created = labelled_configmap(&configmaps, "settings").await;
    assert_eq!(created.metadata.generation, None);
    let patched = configmaps
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"more": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, None);
    let jobs: Api<Job> = Api::default_namespaced(client);
    let job: Job = from_json(json!({
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "m:1"}]}}}
    }));
    assert_eq!(
        jobs.create(&PostParams::default(), &job)
            .await
            .unwrap()
            .metadata
            .generation,
        Some(1)
    );
}

#[tokio::test]
async fn emptied_metadata_is_left_out_and_version_has_kube_apiservers_fields() {
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let configmaps: Api<ConfigMap> = Api::default_namespaced(client);
    labelled_configmap(&configmaps, "settings").await;
    let emptied = configmaps
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": null}, "annotations": {"note": null}}})),
        )
        .await
        .unwrap();
    assert_eq!(emptied.metadata.labels, None, "Go leaves an empty map out");
    assert_eq!(emptied.metadata.annotations, None);
    let version = raw(&server, "GET", "/version", "application/json", "").await;
    assert!(version.body.ends_with("}\n"), "{}", version.body);
    let version = version.json();
    for field in [
        "emulationMajor",
        "emulationMinor",
        "minCompatibilityMajor",
        "minCompatibilityMinor",
    ] {
        assert!(version[field].is_string(), "/version has no {field}: {version}");
    }
    assert_eq!(version["minor"], "36");
}
