//! What a client of kube-apiserver relies on beyond the verbs, driven through
//! kube-rs and `kubectl`: aggregated discovery, metadata-only requests, the
//! built-in resources of a fresh cluster and the shapes of answers.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use apiserver_sim::{ApiServer, SimConfig};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
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
