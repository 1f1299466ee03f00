//! What a client of kube-apiserver relies on beyond the verbs, driven through
//! kube-rs and `kubectl`: aggregated discovery, metadata-only requests, the
//! built-in resources of a fresh cluster and the shapes of answers.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use apiserver_sim::{ApiServer, SimConfig};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{
    Api, DeleteParams, DynamicObject, GroupVersionKind, ListParams, LogParams, Patch, PatchParams, PostParams,
};
use kube::core::PartialObjectMeta;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

async fn start(config: SimConfig) -> (ApiServer, Client) {
    let server = ApiServer::start(config)
        .await
        .expect("the server binds a loopback port");
    let client = Client::try_from(server.client_config()).expect("a client for the server");
    (server, client)
}

/// An answer read off the wire: status code, headers (lowercase names) and body.
struct Raw {
    code: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.body))
    }
}

/// Sends one HTTP/1.1 request and reads the whole answer, so that headers and
/// the bytes of the body can be checked as a client receives them.
async fn raw(server: &ApiServer, method: &str, path: &str, accept: &str, body: &str) -> Raw {
    let mut stream = tokio::net::TcpStream::connect(server.address())
        .await
        .expect("the server accepts a connection");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: sim\r\nAccept: {accept}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("the server reads the request");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server never finished its answer")
        .expect("the answer is read");
    let answer = String::from_utf8(answer).expect("a UTF-8 answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let mut lines = head.lines();
    let code = lines
        .next()
        .and_then(|status| status.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .expect("a status line with a code");
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.to_lowercase(), value.trim().to_owned()))
        .collect();
    let body = if head.to_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Raw { code, headers, body }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// What discovery says of every resource, in a form two runs can be compared in.
fn described(discovery: &Discovery) -> BTreeSet<String> {
    let describe = |resource: &ApiResource, caps: &ApiCapabilities| {
        let scope = if caps.scope == Scope::Namespaced {
            "ns"
        } else {
            "cluster"
        };
        let mut operations = caps.operations.clone();
        operations.sort();
        let mut subresources: Vec<String> = caps
            .subresources
            .iter()
            .map(|(sub, caps)| format!("{}:{}:{}", sub.plural, sub.kind, caps.operations.join("+")))
            .collect();
        subresources.sort();
        format!(
            "{} {} {scope} [{}] [{}]",
            resource.api_version,
            resource.plural,
            operations.join(","),
            subresources.join(",")
        )
    };
    discovery
        .groups()
        .flat_map(|group| {
            group
                .versions()
                .flat_map(|version| group.versioned_resources(version))
                .collect::<Vec<_>>()
        })
        .map(|(resource, caps)| describe(&resource, &caps))
        .collect()
}

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

#[tokio::test]
async fn aggregated_discovery_says_what_the_legacy_documents_say() {
    let (_server, client) = start(SimConfig::default()).await;
    let legacy = Discovery::new(client.clone()).run().await.unwrap();
    let aggregated = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .expect("the server answers aggregated discovery");
    assert_eq!(described(&aggregated), described(&legacy));
    let groups: Vec<&str> = aggregated.groups().map(|group| group.name()).collect();
    for group in ["", "apps", "apiregistration.k8s.io", "metrics.k8s.io"] {
        assert!(groups.contains(&group), "{group:?} missing from {groups:?}");
    }
    let (deployments, caps) = aggregated
        .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
        .expect("deployments are discovered");
    assert_eq!(deployments.plural, "deployments");
    let scale = caps
        .subresources
        .iter()
        .find(|(sub, _)| sub.plural == "scale")
        .expect("the scale subresource is listed");
    assert_eq!(scale.0.kind, "Scale");
}

#[tokio::test]
async fn aggregated_discovery_is_labelled_and_shaped_as_the_api_server_sends_it() {
    let (server, _client) = start(SimConfig::default()).await;
    // kubectl asks for protobuf first; the JSON entry after it is answered.
    let accept = format!(
        "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,{AGGREGATED},application/json"
    );
    let core = raw(&server, "GET", "/api", &accept, "").await;
    assert_eq!(core.code, 200);
    assert_eq!(core.header("content-type"), Some(AGGREGATED));
    let core = core.json();
    assert_eq!(core["kind"], "APIGroupDiscoveryList");
    assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2");
    let v1 = &core["items"][0]["versions"][0];
    assert_eq!(v1["version"], "v1");
    assert_eq!(v1["freshness"], "Current");
    let pods = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|resource| resource["resource"] == "pods")
        .expect("pods are listed");
    assert_eq!(pods["scope"], "Namespaced");
    assert_eq!(pods["singularResource"], "pod");
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(
        pods["responseKind"],
        json!({"group": "", "version": "v1", "kind": "Pod"})
    );
    assert!(
        pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|sub| sub["subresource"] == "status"),
        "{pods}"
    );

    // A client that asks for the legacy document still gets it.
    let legacy = raw(&server, "GET", "/apis", "application/json", "").await;
    assert_eq!(legacy.header("content-type"), Some("application/json"));
    assert_eq!(legacy.json()["kind"], "APIGroupList");
    // And an older version of the aggregated form is passed over for it.
    let older = raw(
        &server,
        "GET",
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
        "",
    )
    .await;
    assert_eq!(older.json()["kind"], "APIGroupList");
}

#[tokio::test]
async fn api_services_list_the_served_group_versions() {
    let (_server, client) = start(SimConfig::default()).await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService"),
        "apiservices",
    );
    let services: Api<DynamicObject> = Api::all_with(client, &resource);
    let apps = services.get("v1.apps").await.unwrap();
    assert_eq!(apps.data["spec"]["group"], "apps");
    assert_eq!(apps.data["status"]["conditions"][0]["type"], "Available");
    let metrics = services.get("v1beta1.metrics.k8s.io").await.unwrap();
    assert_eq!(metrics.data["spec"]["service"]["name"], "metrics-server");
    let names: Vec<String> = services
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|service| service.metadata.name)
        .collect();
    assert!(names.contains(&"v1.".to_owned()), "{names:?}");
}

/// `kubectl`, when one is installed; `None` with the reason printed.
fn kubectl() -> Option<&'static str> {
    let works = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !works {
        println!("skipped: no kubectl on PATH");
    }
    works.then_some("kubectl")
}

/// Runs kubectl against the server with a discovery cache of its own, in a
/// blocking task; its stdout, or a panic with its stderr.
async fn kubectl_run(server: &ApiServer, dir: &Path, args: &[&str]) -> String {
    let output = kubectl_output(server, dir, args).await;
    assert!(
        output.status.success(),
        "kubectl {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

async fn kubectl_output(server: &ApiServer, dir: &Path, args: &[&str]) -> std::process::Output {
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("the kubeconfig is written");
    let cache = dir.join("cache");
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(&cache)
            .args(&args)
            .output()
            .expect("kubectl runs")
    })
    .await
    .expect("the kubectl task ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_discovers_every_group_in_two_requests() {
    if kubectl().is_none() {
        return;
    }
    let (server, _client) = start(SimConfig::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let before = server.stats().requests;
    let resources = kubectl_run(&server, dir.path(), &["api-resources", "--no-headers"]).await;
    let requests = server.stats().requests - before;
    // `/api` and `/apis`, and `/version` when kubectl is a dispatcher that
    // picks the kubectl of the server's minor version; without aggregated
    // discovery it would ask each group version too.
    assert!(
        requests <= 3,
        "kubectl needed {requests} requests: aggregated discovery was not used"
    );
    let line = resources
        .lines()
        .find(|line| line.starts_with("apiservices "))
        .unwrap_or_else(|| panic!("no apiservices in:\n{resources}"));
    assert!(
        line.contains("apiregistration.k8s.io/v1") && line.contains("APIService"),
        "{line}"
    );
    assert!(
        resources.lines().any(|line| line.starts_with("deployments ")),
        "{resources}"
    );
}

const METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

async fn labelled_configmap(api: &Api<ConfigMap>, name: &str) -> ConfigMap {
    let configmap: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}, "annotations": {"note": "kept"}},
        "data": {"secret-ish": "not in metadata"}
    }))
    .expect("a valid ConfigMap");
    api.create(&PostParams::default(), &configmap)
        .await
        .expect("the ConfigMap is created")
}

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

    let list = api.list_metadata(&ListParams::default()).await.unwrap();
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

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a valid object")
}

fn api_error(error: kube::Error) -> kube::core::Status {
    match error {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

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
    assert_eq!(
        cluster_bindings.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
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
    let accounts: Api<ServiceAccount> = Api::default_namespaced(client);
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

/// A pod with one container, on `node` if any.
async fn pod_on(pods: &Api<Pod>, name: &str, node: Option<&str>) {
    let pod: Pod = from_json(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1"}]}
    }));
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
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
    assert!(spec < status && one.ends_with(r#""status":{"replicas":1}}"#), "{one}");
    let list = raw(&server, "GET", path, "application/json", "").await.body;
    assert!(
        list.starts_with(r#"{"kind":"DeploymentList","apiVersion":"apps/v1","metadata":{"#),
        "{list}"
    );
    assert!(
        list.contains(r#""items":[{"kind":"Deployment","apiVersion":"apps/v1","#),
        "{list}"
    );
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
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::default_namespaced(client.clone());
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

/// Registers `widgets.example.com/v1`, whose schema requires a `size` from 1
/// to 10 and defaults `color` to `red`; the API of its objects.
async fn widgets_with_schema(client: &Client) -> Api<DynamicObject> {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = from_json(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                     "type": "object",
                     "properties": {"spec": {
                         "type": "object",
                         "required": ["size"],
                         "properties": {
                             "size": {"type": "integer", "minimum": 1, "maximum": 10},
                             "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                         }}}}}}]}
    }));
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("the CRD is created");
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Widget"), "widgets");
    Api::default_namespaced_with(client.clone(), &resource)
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
    let strict = PatchParams::apply("test").validation(kube::api::ValidationDirective::Strict);
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
