//! The emulation's controllers and the `scale` subresource, driven by the real kube-rs client.

use std::future::Future;
use std::time::Duration;

use apiserver_sim::{ApiServer, SimConfig};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::timeout;

async fn start(config: SimConfig) -> (ApiServer, Client) {
    let server = ApiServer::start(config.pod_start_delay(Duration::from_millis(20)))
        .await
        .expect("the server binds a loopback port");
    let client = Client::try_from(server.client_config()).expect("a client for the server");
    (server, client)
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0",
                                         "resources": {"requests": {"cpu": "200m"}}}]}
            }
        }
    }))
    .expect("a valid deployment")
}

fn api_code(error: kube::Error) -> u16 {
    match error {
        kube::Error::Api(status) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Polls `check` until it holds; `what` names what never happened.
async fn eventually<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    timeout(Duration::from_secs(10), async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"));
}

/// Waits until the Deployment's status reports `replicas` ready replicas of its
/// current generation, all updated and available, and no more pods.
async fn converged(deployments: &Api<Deployment>, name: &str, replicas: i32) {
    eventually(
        &format!("the deployment controller never reported {name} at {replicas} ready replicas"),
        || async {
            let deployment = deployments.get(name).await.expect("the deployment exists");
            let generation = deployment.metadata.generation;
            let status = deployment.status.unwrap_or_default();
            status.observed_generation == generation
                && status.replicas.unwrap_or(0) == replicas
                && status.ready_replicas.unwrap_or(0) == replicas
                && status.available_replicas.unwrap_or(0) == replicas
                && status.updated_replicas.unwrap_or(0) == replicas
        },
    )
    .await;
}

fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|status| status.conditions.as_deref());
    conditions
        .unwrap_or_default()
        .iter()
        .any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

#[tokio::test]
async fn a_deployment_gets_a_replicaset_of_running_pods_and_a_status_that_converges() {
    let (server, client) = start(SimConfig::default()).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let created = deployments
        .create(&PostParams::default(), &deployment("web", 3))
        .await
        .unwrap();
    converged(&deployments, "web", 3).await;

    let replicasets: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let owned = replicasets.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(owned.len(), 1, "one ReplicaSet per template");
    let replicaset = &owned[0];
    let owner = &replicaset.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("Deployment", Some(true)));
    assert_eq!(Some(&owner.uid), created.metadata.uid.as_ref());
    assert_eq!(replicaset.spec.replicas, Some(3));
    assert_eq!(replicaset.status.as_ref().unwrap().ready_replicas, Some(3));

    let pods: Api<Pod> = Api::default_namespaced(client);
    let pods = pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let owner = &pod.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("ReplicaSet", replicaset.name_any().as_str())
        );
        assert_eq!(owner.controller, Some(true));
        let usage = server.metrics().pod_cpu("default", &pod.name_any());
        assert!(usage.is_some(), "{pod:?} has no usage in the metrics table");
        assert!(pod.annotations().is_empty(), "{pod:?} carries annotations");
        assert_eq!(pod.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
        assert!(is_ready(pod), "{pod:?} is not ready");
    }
}

#[tokio::test]
async fn the_scale_subresource_writes_through_and_the_pods_follow() {
    let (_server, client) = start(SimConfig::default()).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    deployments
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();
    converged(&deployments, "web", 2).await;

    let scale = deployments.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.as_ref().unwrap().replicas, Some(2));
    let status = scale.status.as_ref().unwrap();
    assert_eq!((status.replicas, status.selector.as_deref()), (2, Some("app=web")));

    let mut up = scale.clone();
    up.spec.as_mut().unwrap().replicas = Some(5);
    let scaled: Scale = deployments
        .replace_scale("web", &PostParams::default(), &up)
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(5));
    let written = deployments.get("web").await.unwrap();
    assert_eq!(written.spec.replicas, Some(5));
    assert_eq!(written.metadata.generation, Some(2), "a scale is a spec change");

    // The first Scale's resourceVersion is stale now.
    let stale = deployments.replace_scale("web", &PostParams::default(), &up).await;
    assert_eq!(api_code(stale.unwrap_err()), 409);
    converged(&deployments, "web", 5).await;

    let down: Scale = deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(down.spec.unwrap().replicas, Some(1));
    converged(&deployments, "web", 1).await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    let left = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
    assert_eq!(left.items.len(), 1, "scaling down deletes the surplus pods");

    let negative = deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": -1}})),
        )
        .await;
    assert_eq!(api_code(negative.unwrap_err()), 422);
    assert_eq!(api_code(deployments.get_scale("missing").await.unwrap_err()), 404);
}

#[tokio::test]
async fn a_patch_to_spec_replicas_scales_like_a_scale_write() {
    let (_server, client) = start(SimConfig::default()).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client);
    deployments
        .create(&PostParams::default(), &deployment("web", 1))
        .await
        .unwrap();
    converged(&deployments, "web", 1).await;
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    converged(&deployments, "web", 4).await;
}

#[tokio::test]
async fn a_statefulset_serves_scale_without_a_controller() {
    let (_server, client) = start(SimConfig::default()).await;
    let statefulsets: Api<StatefulSet> = Api::default_namespaced(client);
    let statefulset: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}}}
    }))
    .unwrap();
    statefulsets.create(&PostParams::default(), &statefulset).await.unwrap();
    let scale = statefulsets.get_scale("db").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1), "replicas default to 1");
    let scaled = statefulsets
        .patch_scale(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(3));
    assert_eq!(statefulsets.get("db").await.unwrap().spec.replicas, Some(3));
}

#[tokio::test]
async fn a_new_template_rolls_out_a_new_replicaset() {
    let (_server, client) = start(SimConfig::default()).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    deployments
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();
    converged(&deployments, "web", 2).await;
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:2.0"}]}}}}),
            ),
        )
        .await
        .unwrap();
    converged(&deployments, "web", 2).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for pod in pods.list(&ListParams::default().labels("app=web")).await.unwrap() {
        let image = &pod.spec.unwrap().containers[0].image;
        assert_eq!(image.as_deref(), Some("registry.example/app:2.0"));
    }
    let replicasets: Api<ReplicaSet> = Api::default_namespaced(client);
    let mut replicas: Vec<i32> = replicasets
        .list(&ListParams::default())
        .await
        .unwrap()
        .iter()
        .map(|rs| rs.spec.replicas.unwrap())
        .collect();
    replicas.sort_unstable();
    assert_eq!(replicas, [0, 2], "the old ReplicaSet is scaled to zero");
}

#[tokio::test]
async fn deleting_a_deployment_deletes_its_replicasets_and_pods() {
    let (_server, client) = start(SimConfig::default()).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    deployments
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();
    converged(&deployments, "web", 2).await;
    deployments.delete("web", &DeleteParams::default()).await.unwrap();
    let replicasets: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client);
    eventually("the garbage collector left the deployment's objects", || async {
        replicasets.list(&ListParams::default()).await.unwrap().items.is_empty()
            && pods.list(&ListParams::default()).await.unwrap().items.is_empty()
    })
    .await;
}

#[tokio::test]
async fn discovery_lists_the_scale_subresources_and_both_event_apis() {
    let (_server, client) = start(SimConfig::default()).await;
    let apps = client.list_api_group_resources("apps/v1").await.unwrap();
    let names: Vec<&str> = apps.resources.iter().map(|r| r.name.as_str()).collect();
    for subresource in ["deployments/scale", "replicasets/scale", "statefulsets/scale"] {
        let entry = apps
            .resources
            .iter()
            .find(|r| r.name == subresource)
            .unwrap_or_else(|| panic!("{subresource} missing from {names:?}"));
        assert_eq!(
            (entry.kind.as_str(), entry.group.as_deref(), entry.version.as_deref()),
            ("Scale", Some("autoscaling"), Some("v1"))
        );
    }
    let events = client.list_api_group_resources("events.k8s.io/v1").await.unwrap();
    assert!(events.resources.iter().any(|r| r.name == "events" && r.kind == "Event"));
    let core = client.list_core_api_resources("v1").await.unwrap();
    assert!(core.resources.iter().any(|r| r.name == "events" && r.kind == "Event"));
}
