//! kubectl's typed `create` commands, which send their object in protobuf.

use apiserver_sim::SimConfig;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;

use crate::support::{kubectl, kubectl_output, kubectl_run, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_objects_it_sends_in_protobuf() {
    if kubectl().is_none() {
        return;
    }
    let (server, client) = start(SimConfig::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    for command in [
        "create configmap settings --from-literal=mode=fast",
        "create secret generic login --from-literal=password=hunter2",
        "create namespace team",
        "create serviceaccount builder",
        "create role reader --verb=get,list --resource=configmaps",
        "create rolebinding reader --role=reader --serviceaccount=default:builder",
    ] {
        let args: Vec<&str> = command.split(' ').collect();
        let created = kubectl_run(&server, path, &args).await;
        assert!(created.contains("created"), "{command}: {created}");
    }
    let configmaps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    assert_eq!(configmaps.get("settings").await.unwrap().data.unwrap()["mode"], "fast");
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let login = secrets.get("login").await.unwrap();
    assert_eq!(login.type_.as_deref(), Some("Opaque"));
    assert_eq!(login.data.unwrap()["password"].0, b"hunter2");
    let roles: Api<Role> = Api::default_namespaced(client.clone());
    assert_eq!(
        roles.get("reader").await.unwrap().rules.unwrap()[0].verbs,
        ["get", "list"]
    );
    let bindings: Api<RoleBinding> = Api::default_namespaced(client);
    let subjects = bindings.get("reader").await.unwrap().subjects.unwrap();
    assert_eq!(
        (subjects[0].kind.as_str(), subjects[0].name.as_str()),
        ("ServiceAccount", "builder")
    );

    let token = kubectl_run(&server, path, &["create", "token", "builder"]).await;
    assert_eq!(token.trim().split('.').count(), 3, "{token}");

    // A kind whose protobuf form is not read: kubectl says what the server answered.
    let deployment = kubectl_output(&server, path, &["create", "deployment", "web", "--image=app:1"]).await;
    let stderr = String::from_utf8_lossy(&deployment.stderr);
    assert!(!deployment.status.success());
    assert!(
        stderr.contains("the body of the request was in an unknown format"),
        "{stderr}"
    );
}
