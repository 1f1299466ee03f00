//! The built-in resources a peer's suite uses: Jobs, RBAC, CSRs, tokens, ephemeral containers, the `kubernetes` Service, and what needs a kubelet.

use apiserver_sim::SimConfig;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenReview};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Event, Node, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, EvictParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{api_error, from_json, kubectl, kubectl_output, kubectl_run, pod_on, start};

#[tokio::test]
async fn jobs_and_cron_jobs_keep_status_to_their_subresource() {
    let (_server, client) = start(SimConfig::default()).await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let job: Job = from_json(json!({
        "metadata": {"name": "migrate"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "m:1"}]}}},
        "status": {"succeeded": 9}
    }));
    let created = jobs.create(&PostParams::default(), &job).await.unwrap();
    assert!(created.status.is_none(), "status is dropped on create");
    let status = jobs
        .patch_status(
            "migrate",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"succeeded": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().succeeded, Some(1));
    let relabelled = jobs
        .patch(
            "migrate",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}, "status": {"succeeded": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(relabelled.status.unwrap().succeeded, Some(1));

    let cron_jobs: Api<CronJob> = Api::default_namespaced(client);
    let cron_job: CronJob = from_json(json!({
        "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "m", "image": "m:1"}]}}}}}
    }));
    cron_jobs.create(&PostParams::default(), &cron_job).await.unwrap();
    assert_eq!(cron_jobs.get("nightly").await.unwrap().spec.schedule, "0 3 * * *");
}

#[tokio::test]
async fn rbac_objects_are_stored_in_their_scopes() {
    let (_server, client) = start(SimConfig::default()).await;
    let roles: Api<Role> = Api::default_namespaced(client.clone());
    let role: Role = from_json(json!({
        "metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]
    }));
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<RoleBinding> = Api::default_namespaced(client.clone());
    let binding: RoleBinding = from_json(json!({
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "kinformer", "namespace": "default"}]
    }));
    bindings.create(&PostParams::default(), &binding).await.unwrap();
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let cluster_role: ClusterRole = from_json(json!({
        "metadata": {"name": "node-reader"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    }));
    cluster_roles
        .create(&PostParams::default(), &cluster_role)
        .await
        .unwrap();
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(client);
    let cluster_binding: ClusterRoleBinding = from_json(json!({
        "metadata": {"name": "node-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-reader"}
    }));
    cluster_bindings
        .create(&PostParams::default(), &cluster_binding)
        .await
        .unwrap();

    assert_eq!(
        roles.get("reader").await.unwrap().rules.unwrap()[0].verbs,
        ["get", "list", "watch"]
    );
    assert_eq!(bindings.get("reader").await.unwrap().role_ref.kind, "Role");
    let stored = cluster_roles.get("node-reader").await.unwrap();
    assert_eq!(stored.metadata.namespace, None, "a ClusterRole is in no namespace");
    let bound: Vec<String> = cluster_bindings
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|binding| binding.metadata.name.unwrap())
        .collect();
    assert!(bound.contains(&"node-reader".to_owned()), "{bound:?}");
    // The bootstrap policy's roles exist from the start, as `kubectl get
    // clusterrole cluster-admin` and kube-rs's `Client::fetch` find them.
    let admin = cluster_roles.get("cluster-admin").await.unwrap();
    assert_eq!(admin.rules.unwrap()[0].verbs, ["*"]);
    let admin_binding = cluster_bindings.get("cluster-admin").await.unwrap();
    assert_eq!(admin_binding.subjects.unwrap()[0].name, "system:masters");
    assert!(bound.contains(&"system:discovery".to_owned()), "{bound:?}");
}

#[tokio::test]
async fn a_certificate_signing_request_is_approved_and_issued_through_its_subresources() {
    let (_server, client) = start(SimConfig::default()).await;
    let csrs: Api<CertificateSigningRequest> = Api::all(client);
    let csr: CertificateSigningRequest = from_json(json!({
        "metadata": {"name": "node-a"},
        "spec": {"request": "LS0tLS1CRUdJTg==", "signerName": "kubernetes.io/kube-apiserver-client",
                 "usages": ["client auth"]}
    }));
    csrs.create(&PostParams::default(), &csr).await.unwrap();

    let approved_condition = json!({"type": "Approved", "status": "True", "reason": "Test", "message": "ok"});
    // The object itself does not take conditions: only `approval` does.
    let ignored = csrs
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [approved_condition]}})),
        )
        .await
        .unwrap();
    assert!(ignored.status.is_none(), "{ignored:?}");
    let approved = csrs
        .patch_subresource(
            "approval",
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [approved_condition]}})),
        )
        .await
        .unwrap();
    let conditions = approved.status.unwrap().conditions.unwrap();
    assert_eq!(
        (conditions[0].type_.as_str(), conditions[0].status.as_str()),
        ("Approved", "True")
    );

    let issued = csrs
        .patch_status(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"certificate": "LS0tLS1DRVJU"}})),
        )
        .await
        .unwrap();
    let status = issued.status.unwrap();
    assert!(status.certificate.is_some());
    assert_eq!(status.conditions.unwrap().len(), 1, "issuing keeps the approval");
}

#[tokio::test]
async fn the_kubernetes_service_exists_from_the_start() {
    let (server, client) = start(SimConfig::default()).await;
    let services: Api<Service> = Api::default_namespaced(client);
    let kubernetes = services.get("kubernetes").await.unwrap();
    let spec = kubernetes.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert!(spec.cluster_ip.is_some());
    let port = &spec.ports.unwrap()[0];
    assert_eq!((port.name.as_deref(), port.port), (Some("https"), 443));
    assert_eq!(
        port.target_port,
        Some(IntOrString::Int(i32::from(server.address().port()))),
        "the Service leads to the server itself"
    );
}

#[tokio::test]
async fn a_token_request_issues_a_token_for_an_existing_service_account() {
    let (_server, client) = start(SimConfig::default()).await;
    let accounts: Api<ServiceAccount> = Api::default_namespaced(client.clone());
    accounts
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "builder"}})),
        )
        .await
        .unwrap();
    let request: TokenRequest = from_json(json!({"spec": {"audiences": ["vault"], "expirationSeconds": 1200}}));
    let issued: TokenRequest = accounts
        .create_subresource("token", "builder", &PostParams::default(), &request)
        .await
        .unwrap();
    let status = issued.status.expect("the token is in the status");
    let token = status.token.expect("a token");
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let expires = status.expiration_timestamp.expect("an expiry").0;
    let in_twenty_minutes = k8s_openapi::jiff::Timestamp::now().as_second() + 1200;
    assert!((expires.as_second() - in_twenty_minutes).abs() < 60, "{expires}");
    assert_eq!(
        issued.spec.and_then(|spec| spec.audiences),
        Some(vec!["vault".to_owned()])
    );

    // A TokenReview accepts the token for its audience and names its account;
    // it refuses another audience, a forged signature, and an account gone.
    let reviews: Api<TokenReview> = Api::all(client);
    let review = |token: &str, audience: &str| {
        let reviews = reviews.clone();
        let review: TokenReview = from_json(json!({"spec": {"token": token, "audiences": [audience]}}));
        async move {
            reviews
                .create(&PostParams::default(), &review)
                .await
                .unwrap()
                .status
                .unwrap()
        }
    };
    let valid = review(&token, "vault").await;
    assert_eq!(valid.authenticated, Some(true), "{:?}", valid.error);
    assert_eq!(
        valid.user.unwrap().username.as_deref(),
        Some("system:serviceaccount:default:builder")
    );
    assert_eq!(valid.audiences, Some(vec!["vault".to_owned()]));
    let elsewhere = review(&token, "api").await;
    assert_ne!(elsewhere.authenticated, Some(true));
    assert!(elsewhere.error.unwrap().contains("audiences"));
    let (signed, _) = token.rsplit_once('.').unwrap();
    let forged = review(&format!("{signed}.AAAA"), "vault").await;
    assert_ne!(forged.authenticated, Some(true));
    assert!(forged.error.unwrap().starts_with("[invalid bearer token"));

    let missing = accounts
        .create_subresource::<_, TokenRequest>("token", "nobody", &PostParams::default(), &request)
        .await
        .unwrap_err();
    assert_eq!(api_error(missing).code, 404);
    let short: TokenRequest = from_json(json!({"spec": {"audiences": [], "expirationSeconds": 60}}));
    let refused = accounts
        .create_subresource::<_, TokenRequest>("token", "builder", &PostParams::default(), &short)
        .await
        .unwrap_err();
    let refused = api_error(refused);
    assert_eq!(refused.code, 422);
    assert!(
        refused
            .message
            .contains("may not specify a duration less than 10 minutes"),
        "{}",
        refused.message
    );
}

#[tokio::test]
async fn ephemeral_containers_are_written_through_their_subresource_only() {
    let (_server, client) = start(SimConfig::default().controllers(false)).await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    let pod: Pod = from_json(json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    }));
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let debugger = json!({"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox"}]}});
    let ignored = pods
        .patch("web", &PatchParams::default(), &Patch::Merge(debugger.clone()))
        .await
        .unwrap();
    assert!(ignored.spec.unwrap().ephemeral_containers.is_none());
    let added = pods
        .patch_ephemeral_containers("web", &PatchParams::default(), &Patch::Strategic(debugger))
        .await
        .unwrap();
    let ephemeral = added.spec.unwrap().ephemeral_containers.unwrap();
    assert_eq!(ephemeral[0].name, "debug");
    // A strategic merge patch adds to the list, merged by container name.
    let second = json!({"spec": {"ephemeralContainers": [{"name": "debug-2", "image": "busybox"}]}});
    let both = pods
        .patch_ephemeral_containers("web", &PatchParams::default(), &Patch::Strategic(second))
        .await
        .unwrap();
    let names: Vec<String> = both
        .spec
        .unwrap()
        .ephemeral_containers
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["debug", "debug-2"]);
    let read = pods.get_ephemeral_containers("web").await.unwrap();
    assert_eq!(read.spec.unwrap().containers[0].name, "app");
}

#[tokio::test]
async fn nodes_are_selected_by_spec_unschedulable() {
    let (_server, client) = start(SimConfig::default()).await;
    let nodes: Api<Node> = Api::all(client);
    for (name, unschedulable) in [("open", None), ("cordoned", Some(true)), ("uncordoned", Some(false))] {
        let mut node: Node = from_json(json!({"metadata": {"name": name}}));
        if let Some(unschedulable) = unschedulable {
            node.spec = Some(from_json(json!({"unschedulable": unschedulable})));
        }
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let names = |list: kube::api::ObjectList<Node>| list.items.iter().map(ResourceExt::name_any).collect::<Vec<_>>();
    let schedulable = nodes
        .list(&ListParams::default().fields("spec.unschedulable=false"))
        .await
        .unwrap();
    assert_eq!(names(schedulable), ["open", "uncordoned"]);
    let cordoned = nodes
        .list(&ListParams::default().fields("spec.unschedulable==true"))
        .await
        .unwrap();
    assert_eq!(names(cordoned), ["cordoned"]);
    let unsupported = nodes
        .list(&ListParams::default().fields("spec.podCIDR=x"))
        .await
        .unwrap_err();
    assert_eq!(api_error(unsupported).code, 400);
}

#[tokio::test]
async fn logs_are_answered_as_by_a_cluster_whose_kubelet_cannot_be_reached() {
    let (_server, client) = start(SimConfig::default().controllers(false)).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let nodes: Api<Node> = Api::all(client);
    pod_on(&pods, "pending", None).await;
    assert_eq!(
        pods.logs("pending", &LogParams::default()).await.unwrap(),
        "",
        "a pod on no node has no logs yet"
    );

    pod_on(&pods, "lost", Some("gone")).await;
    let lost = api_error(pods.logs("lost", &LogParams::default()).await.unwrap_err());
    assert_eq!((lost.code, lost.message.as_str()), (404, "nodes \"gone\" not found"));

    nodes
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "bare"}})),
        )
        .await
        .unwrap();
    pod_on(&pods, "bare", Some("bare")).await;
    let bare = api_error(pods.logs("bare", &LogParams::default()).await.unwrap_err());
    assert_eq!(bare.code, 500);
    assert!(
        bare.message.starts_with("no preferred addresses found"),
        "{}",
        bare.message
    );

    nodes
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "node-a"}})),
        )
        .await
        .unwrap();
    nodes
        .patch_status(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.7"}]}})),
        )
        .await
        .unwrap();
    pod_on(&pods, "web", Some("node-a")).await;
    let refused = api_error(pods.logs("web", &LogParams::default()).await.unwrap_err());
    assert_eq!(refused.code, 500);
    assert_eq!(
        refused.message,
        "Get \"https://10.0.0.7:10250/containerLogs/default/web/app\": dial tcp 10.0.0.7:10250: connect: connection refused"
    );
    let params = LogParams {
        container: Some("sidecar".into()),
        ..LogParams::default()
    };
    let unknown = api_error(pods.logs("web", &params).await.unwrap_err());
    assert_eq!(
        (unknown.code, unknown.message.as_str()),
        (400, "container sidecar is not valid for pod web")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reports_what_needs_a_kubelet_and_the_component_statuses() {
    if kubectl().is_none() {
        return;
    }
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let dir = tempfile::tempdir().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "node-a"}})),
        )
        .await
        .unwrap();
    nodes
        .patch_status(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.7"}]}})),
        )
        .await
        .unwrap();
    pod_on(&Api::default_namespaced(client), "web", Some("node-a")).await;

    let logs = kubectl_output(&server, dir.path(), &["logs", "web"]).await;
    let stderr = String::from_utf8_lossy(&logs.stderr);
    assert!(!logs.status.success());
    assert!(
        stderr.contains("dial tcp 10.0.0.7:10250: connect: connection refused"),
        "{stderr}"
    );
    let exec = kubectl_output(&server, dir.path(), &["exec", "web", "--", "true"]).await;
    let stderr = String::from_utf8_lossy(&exec.stderr);
    assert!(!exec.status.success());
    assert!(stderr.contains("error dialing backend"), "{stderr}");

    let statuses = kubectl_output(&server, dir.path(), &["get", "componentstatuses", "--no-headers"]).await;
    let stdout = String::from_utf8_lossy(&statuses.stdout);
    assert!(
        statuses.status.success(),
        "{}",
        String::from_utf8_lossy(&statuses.stderr)
    );
    let healthy: Vec<(&str, &str)> = stdout
        .lines()
        .filter_map(|line| {
            let mut cells = line.split_whitespace();
            Some((cells.next()?, cells.next()?))
        })
        .collect();
    assert_eq!(
        healthy,
        [
            ("scheduler", "Unhealthy"),
            ("controller-manager", "Unhealthy"),
            ("etcd-0", "Healthy")
        ]
    );
    assert!(
        String::from_utf8_lossy(&statuses.stderr).contains("ComponentStatus is deprecated"),
        "kubectl prints the server's deprecation warning"
    );
}

#[tokio::test]
async fn an_evicted_pod_is_deleted_and_the_eviction_answered_with_a_status() {
    let (_server, client) = start(SimConfig::default().controllers(false)).await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    pod_on(&pods, "web", None).await;
    let status = pods.evict("web", &EvictParams::default()).await.unwrap();
    assert_eq!(status.code, 201);
    assert_eq!(api_error(pods.get("web").await.unwrap_err()).code, 404);
    let missing = pods.evict("web", &EvictParams::default()).await.unwrap_err();
    assert_eq!(api_error(missing).code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drains_a_node_by_cordoning_it_and_evicting_its_pods() {
    if kubectl().is_none() {
        return;
    }
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let dir = tempfile::tempdir().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    for name in ["node-a", "node-b"] {
        nodes
            .create(&PostParams::default(), &from_json(json!({"metadata": {"name": name}})))
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::default_namespaced(client);
    pod_on(&pods, "on-a", Some("node-a")).await;
    pod_on(&pods, "on-b", Some("node-b")).await;

    let drained = kubectl_output(
        &server,
        dir.path(),
        &["drain", "node-a", "--force", "--ignore-daemonsets", "--timeout=30s"],
    )
    .await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&drained.stdout),
        String::from_utf8_lossy(&drained.stderr),
    );
    assert!(drained.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("evicting pod default/on-a") || stderr.contains("evicting pod default/on-a"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("node/node-a drained"), "{stdout}");
    let node = nodes.get("node-a").await.unwrap();
    assert_eq!(node.spec.and_then(|spec| spec.unschedulable), Some(true));
    let left: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(left, ["on-b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_selected_by_what_they_are_about_as_kubectl_describe_asks() {
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pod_on(&pods, "web", None).await;
    let uid = pods.get("web").await.unwrap().metadata.uid.unwrap();
    let events: Api<Event> = Api::default_namespaced(client);
    for (name, about, reason) in [
        ("web.1", "web", "BackOff"),
        ("web.2", "web", "Pulled"),
        ("db.1", "db", "BackOff"),
    ] {
        let event: Event = from_json(json!({
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": about, "uid": if about == "web" { uid.as_str() } else { "other" }},
            "reason": reason, "message": format!("{reason} of {about}"), "type": "Warning",
            "source": {"component": "kubelet"}
        }));
        events.create(&PostParams::default(), &event).await.unwrap();
    }
    let names = |selector: &'static str| {
        let events = events.clone();
        async move {
            let listed = events.list(&ListParams::default().fields(selector)).await.unwrap();
            listed.items.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
        }
    };
    assert_eq!(names("involvedObject.name=web,reason=BackOff").await, ["web.1"]);
    assert_eq!(
        names("involvedObject.kind=Pod,source=kubelet").await,
        ["db.1", "web.1", "web.2"]
    );
    assert_eq!(names("involvedObject.name!=web").await, ["db.1"]);

    if kubectl().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let described = kubectl_output(&server, dir.path(), &["describe", "pod", "web"]).await;
    let stdout = String::from_utf8_lossy(&described.stdout);
    assert!(
        described.status.success(),
        "{}",
        String::from_utf8_lossy(&described.stderr)
    );
    assert!(
        stdout.contains("BackOff of web") && stdout.contains("Pulled of web"),
        "{stdout}"
    );
    assert!(!stdout.contains("BackOff of db"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_agrees_with_the_forbidden_answers() {
    if kubectl().is_none() {
        return;
    }
    let (server, _client) = start(SimConfig::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let can_i = |args: &'static [&'static str]| {
        let (server, dir) = (&server, dir.path());
        async move {
            let mut command = vec!["auth", "can-i"];
            command.extend_from_slice(args);
            let output = kubectl_output(server, dir, &command).await;
            String::from_utf8_lossy(&output.stdout).trim().to_owned()
        }
    };
    assert_eq!(can_i(&["list", "pods"]).await, "yes");
    server.faults().confine("configmaps", ["team-a"]);
    assert_eq!(can_i(&["get", "configmaps", "-n", "team-a"]).await, "yes");
    assert_eq!(can_i(&["get", "configmaps", "-n", "team-b"]).await, "no");
    assert_eq!(can_i(&["list", "configmaps", "--all-namespaces"]).await, "no");
    assert_eq!(
        server.faults().denied("configmaps"),
        0,
        "a review is no request on configmaps"
    );

    let whoami = kubectl_run(
        &server,
        dir.path(),
        &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"],
    )
    .await;
    assert_eq!(whoami, "system:serviceaccount:kinformer:kinformer");
}
