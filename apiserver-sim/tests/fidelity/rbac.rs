//! RBAC enforced: a service account's token and an impersonated user get what the stored Roles, ClusterRoles and bindings grant them, and kube-apiserver's `403` otherwise.

use apiserver_sim::{ApiServer, SimConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{api_error, from_json, kubectl, kubectl_output, kubectl_run, raw_with, start};

/// Creates namespace `shop` through `admin`.
async fn shop(admin: &Client) {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "shop"}})),
        )
        .await
        .expect("the namespace is created");
}

/// A client that sends a token the server issued for service account
/// `shop/name`, created here.
async fn service_account_client(server: &ApiServer, admin: &Client, name: &str) -> kube::Config {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "shop");
    accounts
        .create(&PostParams::default(), &from_json(json!({"metadata": {"name": name}})))
        .await
        .expect("the service account is created");
    let request: TokenRequest = from_json(json!({"spec": {}}));
    let issued = accounts
        .create_subresource::<_, TokenRequest>("token", name, &PostParams::default(), &request)
        .await
        .expect("a token is issued");
    let token = issued.status.and_then(|status| status.token).expect("a token");
    let mut config = server.client_config();
    config.auth_info.token = Some(token.into());
    config
}

/// Grants `rules` in `shop` to `subject` through a Role and RoleBinding named `name`.
async fn grant_in_shop(admin: &Client, name: &str, rules: serde_json::Value, subject: serde_json::Value) {
    let roles: Api<Role> = Api::namespaced(admin.clone(), "shop");
    roles
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": name}, "rules": rules})),
        )
        .await
        .expect("the role is created");
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), "shop");
    let binding = json!({"metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [subject]});
    bindings
        .create(&PostParams::default(), &from_json(binding))
        .await
        .expect("the binding is created");
}

#[tokio::test]
async fn a_service_account_token_without_patch_gets_kube_apiservers_403_until_a_role_binding_grants_it() {
    let (server, admin) = start(SimConfig::default().controllers(false)).await;
    shop(&admin).await;
    let deployment: Deployment = from_json(json!({"metadata": {"name": "web"}, "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}}));
    Api::<Deployment>::namespaced(admin.clone(), "shop")
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let config = service_account_client(&server, &admin, "handlers").await;
    let handlers = Client::try_from(config.clone()).unwrap();
    let deployments: Api<Deployment> = Api::namespaced(handlers.clone(), "shop");
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"rolled": "yes"}}}));

    let refused = api_error(
        deployments
            .patch("web", &PatchParams::default(), &relabel)
            .await
            .unwrap_err(),
    );
    assert_eq!(refused.code, 403);
    assert_eq!(refused.reason, "Forbidden");
    assert_eq!(
        refused.message,
        "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:shop:handlers\" cannot patch resource \"deployments\" in API group \"apps\" in the namespace \"shop\""
    );
    let details = refused.details.expect("the refusal's details");
    assert_eq!(
        (details.name.as_str(), details.group.as_str(), details.kind.as_str()),
        ("web", "apps", "deployments")
    );

    grant_in_shop(
        &admin,
        "rollout",
        json!([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "patch"]}]),
        json!({"kind": "ServiceAccount", "name": "handlers"}),
    )
    .await;
    let patched = deployments
        .patch("web", &PatchParams::default(), &relabel)
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["rolled"], "yes");
    let listed = deployments.list(&ListParams::default()).await.unwrap_err();
    assert!(
        api_error(listed)
            .message
            .contains("cannot list resource \"deployments\"")
    );
    let elsewhere: Api<Deployment> = Api::namespaced(handlers.clone(), "default");
    assert_eq!(api_error(elsewhere.get("web").await.unwrap_err()).code, 403);

    // Its own reviews answer from the same rules, saying what allowed it.
    let reviews: Api<SelfSubjectAccessReview> = Api::all(handlers);
    let review: SelfSubjectAccessReview = from_json(json!({"spec": {"resourceAttributes":
        {"namespace": "shop", "verb": "patch", "group": "apps", "resource": "deployments", "name": "web"}}}));
    let status = reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(status.allowed);
    assert_eq!(
        status.reason.as_deref(),
        Some("RBAC: allowed by RoleBinding \"rollout/shop\" of Role \"rollout\" to ServiceAccount \"handlers/shop\"")
    );

    // The token outlives its account only as kube-apiserver lets it: 401.
    Api::<ServiceAccount>::namespaced(admin, "shop")
        .delete("handlers", &DeleteParams::default())
        .await
        .unwrap();
    let orphaned = deployments.get("web").await.unwrap_err();
    assert_eq!(api_error(orphaned).code, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_list_as_a_service_account_answers_from_its_rules() {
    if kubectl().is_none() {
        return;
    }
    let (server, admin) = start(SimConfig::default().controllers(false)).await;
    shop(&admin).await;
    grant_in_shop(
        &admin,
        "reader",
        json!([{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}]),
        json!({"kind": "ServiceAccount", "name": "x", "namespace": "shop"}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let as_x = "--as=system:serviceaccount:shop:x";

    let rules = kubectl_run(&server, dir.path(), &["auth", "can-i", "--list", as_x, "-n", "shop"]).await;
    let line = |resource: &str| {
        rules
            .lines()
            .find(|line| line.split_whitespace().next() == Some(resource))
    };
    assert!(line("pods").is_some_and(|line| line.ends_with("[get list]")), "{rules}");
    assert!(line("pods/log").is_some(), "{rules}");
    assert!(
        line("selfsubjectaccessreviews.authorization.k8s.io").is_some(),
        "{rules}"
    );
    assert!(line("*.*").is_none(), "{rules}");
    let elsewhere = kubectl_run(&server, dir.path(), &["auth", "can-i", "--list", as_x, "-n", "default"]).await;
    assert!(!elsewhere.lines().any(|line| line.starts_with("pods ")), "{elsewhere}");

    let can_i = |args: &'static [&'static str]| {
        let (server, dir) = (&server, dir.path());
        async move {
            let mut command = vec!["auth", "can-i"];
            command.extend_from_slice(args);
            let output = kubectl_output(server, dir, &command).await;
            String::from_utf8_lossy(&output.stdout).trim().to_owned()
        }
    };
    assert_eq!(
        can_i(&["list", "pods", "-n", "shop", "--as=system:serviceaccount:shop:x"]).await,
        "yes"
    );
    assert_eq!(
        can_i(&["delete", "pods", "-n", "shop", "--as=system:serviceaccount:shop:x"]).await,
        "no"
    );
    assert_eq!(
        can_i(&["list", "pods", "-n", "default", "--as=system:serviceaccount:shop:x"]).await,
        "no"
    );
    assert_eq!(
        can_i(&["delete", "pods", "-n", "default"]).await,
        "yes",
        "the kubeconfig's user is an admin"
    );
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb_and_then_the_impersonated_users_rules_apply() {
    let (server, admin) = start(SimConfig::default().controllers(false)).await;
    shop(&admin).await;
    let config = service_account_client(&server, &admin, "impersonator").await;
    let pods_as = |user: &str, groups: Option<Vec<String>>| -> Api<Pod> {
        let mut config = config.clone();
        config.auth_info.impersonate = Some(user.to_owned());
        config.auth_info.impersonate_groups = groups;
        Api::namespaced(Client::try_from(config).unwrap(), "shop")
    };

    let refused = api_error(pods_as("jane", None).list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        (refused.code, refused.message.as_str()),
        (
            403,
            "users \"jane\" is forbidden: User \"system:serviceaccount:shop:impersonator\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        )
    );
    let as_builder = pods_as("system:serviceaccount:shop:builder", None);
    let refused = api_error(as_builder.list(&ListParams::default()).await.unwrap_err());
    assert!(
        refused.message.starts_with("serviceaccounts \"builder\" is forbidden: User \"system:serviceaccount:shop:impersonator\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"shop\""),
        "{}",
        refused.message
    );

    let role: ClusterRole = from_json(json!({"metadata": {"name": "impersonator"},
        "rules": [{"apiGroups": [""], "resources": ["users", "groups", "serviceaccounts"], "verbs": ["impersonate"]}]}));
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = from_json(json!({"metadata": {"name": "impersonator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "impersonator"},
        "subjects": [{"kind": "ServiceAccount", "name": "impersonator", "namespace": "shop"}]}));
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    // Now the request is jane's, and jane may not list pods until granted.
    let refused = api_error(pods_as("jane", None).list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        refused.message,
        "pods is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"\" in the namespace \"shop\""
    );
    let list_pods = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]);
    grant_in_shop(
        &admin,
        "jane",
        list_pods.clone(),
        json!({"kind": "User", "name": "jane"}),
    )
    .await;
    pods_as("jane", None).list(&ListParams::default()).await.unwrap();
    // A group the impersonator names counts: joe lists pods in ops, and not without it.
    grant_in_shop(
        &admin,
        "ops",
        list_pods.clone(),
        json!({"kind": "Group", "name": "ops"}),
    )
    .await;
    pods_as("joe", Some(vec!["ops".into()]))
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(
        api_error(pods_as("joe", None).list(&ListParams::default()).await.unwrap_err()).code,
        403
    );
    // An impersonated service account has its groups.
    grant_in_shop(
        &admin,
        "accounts",
        list_pods,
        json!({"kind": "Group", "name": "system:serviceaccounts:shop"}),
    )
    .await;
    as_builder.list(&ListParams::default()).await.unwrap();

    // Groups without a user are refused as kube-apiserver refuses them.
    let answer = raw_with(
        &server,
        "GET",
        "/api/v1/namespaces/shop/pods",
        &[("Impersonate-Group", "ops")],
        "",
    )
    .await;
    assert_eq!(answer.code, 500);
    assert_eq!(
        answer.body,
        "Internal Server Error: \"/api/v1/namespaces/shop/pods\": requested [{Group  ops    }] without impersonating a user\n"
    );
}

#[tokio::test]
async fn requests_are_counted_by_resource_and_namespace_whether_allowed_or_refused() {
    let (server, admin) = start(SimConfig::default().controllers(false)).await;
    shop(&admin).await;
    let config = service_account_client(&server, &admin, "counted").await;
    let counted = Client::try_from(config).unwrap();
    let refused = Api::<Pod>::namespaced(counted, "default")
        .list(&ListParams::default())
        .await;
    assert_eq!(api_error(refused.unwrap_err()).code, 403);
    Api::<Pod>::namespaced(admin.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    Api::<Pod>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    Api::<Deployment>::namespaced(admin, "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(server.requests_on("pods", "default"), 2);
    assert_eq!(server.requests_on("pods", ""), 1);
    assert_eq!(server.requests_on("deployments.apps", "default"), 1);
    assert_eq!(server.requests_on("pods", "shop"), 0);
}
