//! What the fidelity tests share: a server and client, raw HTTP answers, kubectl, and small objects.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use apiserver_sim::{ApiServer, SimConfig};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) async fn start(config: SimConfig) -> (ApiServer, Client) {
    let server = ApiServer::start(config)
        .await
        .expect("the server binds a loopback port");
    let client = Client::try_from(server.client_config()).expect("a client for the server");
    (server, client)
}

/// An answer read off the wire: status code, headers (lowercase names) and body.
pub(crate) struct Raw {
    pub(crate) code: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Raw {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.body))
    }
}

/// Sends one HTTP/1.1 request and reads the whole answer, so that headers and
/// the bytes of the body can be checked as a client receives them.
pub(crate) async fn raw(server: &ApiServer, method: &str, path: &str, accept: &str, body: &str) -> Raw {
    raw_with(server, method, path, &[("Accept", accept)], body).await
}

/// [`raw`], sending these headers.
pub(crate) async fn raw_with(
    server: &ApiServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Raw {
    let mut stream = tokio::net::TcpStream::connect(server.address())
        .await
        .expect("the server accepts a connection");
    let headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: sim\r\n{headers}Content-Type: application/json\r\n\
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

pub(crate) fn dechunk(mut body: &str) -> String {
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

/// `kubectl`, when one is installed; `None` with the reason printed.
pub(crate) fn kubectl() -> Option<&'static str> {
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
pub(crate) async fn kubectl_run(server: &ApiServer, dir: &Path, args: &[&str]) -> String {
    let output = kubectl_output(server, dir, args).await;
    assert!(
        output.status.success(),
        "kubectl {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) async fn kubectl_output(server: &ApiServer, dir: &Path, args: &[&str]) -> std::process::Output {
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

pub(crate) async fn labelled_configmap(api: &Api<ConfigMap>, name: &str) -> ConfigMap {
    let configmap: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}, "annotations": {"note": "kept"}},
        "data": {"secret-ish": "not in metadata"}
    }))
    .expect("a valid ConfigMap");
    api.create(&PostParams::default(), &configmap)
        .await
        .expect("the ConfigMap is created")
}

pub(crate) fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a valid object")
}

pub(crate) fn api_error(error: kube::Error) -> kube::core::Status {
    match error {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A pod with one container, on `node` if any.
pub(crate) async fn pod_on(pods: &Api<Pod>, name: &str, node: Option<&str>) {
    let pod: Pod = from_json(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1"}]}
    }));
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
}

/// A namespaced CRD of `example.com/v1` with `kind` and `plural` and the
/// schema of its `spec`.
pub(crate) fn example_crd(kind: &str, plural: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": spec}}}}]}
    })
}

/// Creates an [`example_crd`]; the API of its objects in `default`.
pub(crate) async fn register_example_crd(client: &Client, kind: &str, plural: &str, spec: Value) -> Api<DynamicObject> {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.create(&PostParams::default(), &from_json(example_crd(kind, plural, spec)))
        .await
        .expect("the CRD is created");
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", kind), plural);
    Api::default_namespaced_with(client.clone(), &resource)
}
