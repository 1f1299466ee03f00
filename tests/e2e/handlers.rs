//! Tenants' handlers as resources: `Handler`s whose modules are in
//! ConfigMaps of their namespaces, run by the host confined to those
//! namespaces and acting as their ServiceAccounts, on the emulation with its
//! RBAC enforced.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::BTreeMap;
use std::time::Duration;

use apiserver_sim::workload::Workload;
use apiserver_sim::{ApiServer, SimConfig};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kinformer::handlers::oci::{Credentials, PullConfig};
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::runtime::{Logs, listed_status, until};
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// A server holding namespaces `ns-0` and `ns-1` (ConfigMaps `config-0` and
/// `config-1` in each) with the Handler CRDs installed as `kinformer crds`
/// prints them, and nothing changing it.
pub(crate) async fn tenants_cluster() -> (ApiServer, kube::Client) {
    let server = ApiServer::start(SimConfig::default().controllers(false)).await.unwrap();
    Workload::default().size(2, 1, 1).populate(server.store()).unwrap();
    let client = kube::Client::try_from(server.client_config()).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for document in kinformer::handlers::CRDS.split("\n---\n") {
        let crd: CustomResourceDefinition = serde_yaml::from_str(document).expect("the CRDs parse");
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("the emulation accepts the CRDs");
    }
    (server, client)
}

fn handlers(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kinformer.dev", "v1alpha1", "Handler"),
        "handlers",
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Stores `module` in ConfigMap `NAMESPACE/name`, key `plugin.wasm`.
async fn module(client: &kube::Client, namespace: &str, name: &str, module: &[u8]) {
    let config_map = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            "plugin.wasm".to_owned(),
            ByteString(module.to_vec()),
        )])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
}

/// Creates Handler `NAMESPACE/name` with `spec`.
pub(crate) async fn handler(client: &kube::Client, namespace: &str, name: &str, spec: Value) {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kinformer.dev/v1alpha1", "kind": "Handler",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec}))
    .unwrap();
    handlers(client, namespace)
        .create(&PostParams::default(), &object)
        .await
        .expect("the emulation accepts the Handler");
}

/// Waits until Handler `NAMESPACE/name`'s status satisfies `done`; returns it.
pub(crate) async fn status_until(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let api = handlers(client, namespace);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = api.get(name).await.unwrap().data["status"].clone();
        if done(&status) {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {namespace}/{name}: {what}; its status: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until Handler `NAMESPACE/name`'s `Ready` condition has `reason`;
/// returns the condition's message.
pub(crate) async fn ready_reason(client: &kube::Client, namespace: &str, name: &str, reason: &str) -> String {
    let status = status_until(client, namespace, name, reason, |status| {
        condition(status, "Ready")["reason"] == reason
    })
    .await;
    condition(&status, "Ready")["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

pub(crate) fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|conditions| conditions.iter().find(|condition| condition["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// The spec of a Handler running the delta logger from `module` on its
/// namespace's ConfigMaps.
fn logging(module: Value) -> Value {
    json!({"module": module, "config": "v1/ConfigMap", "grant": {"resources": ["v1/ConfigMap"]}})
}

/// Grants the ServiceAccount `NAMESPACE/account` `verbs` on ConfigMaps in
/// its namespace.
async fn grant_configmaps(client: &kube::Client, namespace: &str, account: &str, verbs: &[&str]) {
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": {"name": account},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]}))
    .unwrap();
    Api::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": account},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}))
    .unwrap();
    Api::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// The spec of a Handler running the writer test plugin, which merge-patches
/// ConfigMap `config-0` of its namespace on its first delta.
fn patching(namespace: &str, account: &str) -> Value {
    json!({
        "module": {"configMap": {"name": "writer", "key": "plugin.wasm"}},
        "serviceAccountName": account,
        "config": format!("slow:{namespace}"),
        "grant": {"resources": ["v1/ConfigMap"],
                  "write": [{"verbs": ["patch"], "resources": ["v1/ConfigMap"]}]},
    })
}

/// Waits until ConfigMap `config-0` of `namespace` carries labels: the
/// `patcher` plugin's write landed.
async fn patched(client: &kube::Client, namespace: &str, within: Duration, who: &str) {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let deadline = tokio::time::Instant::now() + within;
    while config_maps
        .get("config-0")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default()
        .is_empty()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{who} never patched {namespace}/config-0"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_handlers_run_in_their_namespaces_as_their_service_accounts() {
    let (_server, client) = tenants_cluster().await;
    for namespace in ["ns-0", "ns-1"] {
        module(
            &client,
            namespace,
            "writer",
            plugin_artifacts::test_plugin("writer.wasm"),
        )
        .await;
    }
    module(&client, "ns-0", "logger", plugin_artifacts::DELTA_LOGGER).await;
    // ns-1's account may patch ConfigMaps; ns-0's may only read them.
    grant_configmaps(&client, "ns-1", "writer", &["get", "patch"]).await;
    grant_configmaps(&client, "ns-0", "reader", &["get", "list", "watch"]).await;
    let logs = Logs::default();
    let runtime = Runtime::start(
        client.clone(),
        RuntimeConfig::default().handlers(true).log_sink(logs.sink()),
    )
    .await
    .unwrap();

    // Two Handlers of one name in two namespaces: two plugins.
    handler(&client, "ns-0", "patcher", patching("ns-0", "reader")).await;
    handler(&client, "ns-1", "patcher", patching("ns-1", "writer")).await;
    handler(
        &client,
        "ns-0",
        "logger",
        logging(json!({"configMap": {"name": "logger", "key": "plugin.wasm"}})),
    )
    .await;

    // A tenant whose account may not patch: the server's 403 is its status.
    let refused = status_until(&client, "ns-0", "patcher", "the write's 403 in its status", |status| {
        status["lastError"]
            .as_str()
            .is_some_and(|error| error.contains("forbidden"))
    })
    .await;
    let error = refused["lastError"].as_str().unwrap();
    assert!(
        error.contains("system:serviceaccount:ns-0:reader") && error.contains("cannot patch"),
        "the server's words, naming the tenant's account: {error}"
    );
    assert_eq!(condition(&refused, "Degraded")["reason"], "WriteFailed");
    assert_eq!(refused["plugin"], "ns-0.patcher");
    assert_eq!(
        refused["digest"].as_str().unwrap(),
        kinformer::plugin::digest(plugin_artifacts::test_plugin("writer.wasm"))
    );

    // The other tenant, with patch, goes on: its write is made.
    let allowed = status_until(&client, "ns-1", "patcher", "Ready", |status| {
        condition(status, "Ready")["status"] == "True"
    })
    .await;
    assert_eq!(allowed["plugin"], "ns-1.patcher");
    patched(&client, "ns-1", Duration::from_secs(30), "ns-1's handler").await;
    assert_eq!(listed_status(&runtime, "ns-1.patcher").unwrap().write_errors, 0);

    // The logger sees ConfigMaps of its own namespace only.
    let ready = status_until(&client, "ns-0", "logger", "Ready with deltas", |status| {
        condition(status, "Ready")["status"] == "True" && status["deltas"].as_u64() > Some(0)
    })
    .await;
    assert_eq!(condition(&ready, "Ready")["reason"], "Running");
    // A status someone else writes (a tenant may write its Handler's) does
    // not stay.
    let forged = json!({"status": {"digest": "sha256:forged", "plugin": "ns-0.logger"}});
    handlers(&client, "ns-0")
        .patch_status("logger", &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .unwrap();
    status_until(&client, "ns-0", "logger", "its status written over", |status| {
        status["digest"] == ready["digest"]
    })
    .await;
    let lines = logs.of("ns-0.logger");
    assert!(lines.iter().any(|line| line.contains(" ns-0/")), "{lines:?}");
    assert!(!lines.iter().any(|line| line.contains(" ns-1/")), "{lines:?}");

    // Deleting a Handler unloads its plugin; the others run on.
    handlers(&client, "ns-0")
        .delete("logger", &DeleteParams::default())
        .await
        .unwrap();
    until(
        "the deleted Handler's plugin to unload",
        Duration::from_secs(30),
        || listed_status(&runtime, "ns-0.logger").is_none(),
    )
    .await;
    assert!(listed_status(&runtime, "ns-1.patcher").is_some());
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_asking_beyond_their_namespace_are_refused_with_a_condition_naming_it() {
    let (_server, client) = tenants_cluster().await;
    module(&client, "ns-0", "logger", plugin_artifacts::DELTA_LOGGER).await;
    // Over 1 MiB: more than `moduleMib: 1` lets in.
    module(&client, "ns-0", "big", &vec![0; 1_100_000]).await;
    let runtime = Runtime::start(client.clone(), RuntimeConfig::default().handlers(true))
        .await
        .unwrap();
    let logger =
        |grant: Value| json!({"module": {"configMap": {"name": "logger", "key": "plugin.wasm"}}, "grant": grant});
    handler(
        &client,
        "ns-0",
        "wide",
        logger(json!({"resources": ["v1/Pod"], "namespaces": ["ns-0", "ns-1"]})),
    )
    .await;
    handler(
        &client,
        "ns-0",
        "nodes",
        logger(json!({"resources": ["v1/Pod", "v1/Namespace"]})),
    )
    .await;
    handler(
        &client,
        "ns-0",
        "outbound",
        logger(json!({"resources": ["v1/Pod"], "http": {"allow": ["https://example.com"]}})),
    )
    .await;
    handler(
        &client,
        "ns-0",
        "big",
        json!({"module": {"configMap": {"name": "big", "key": "plugin.wasm"}},
               "grant": {"resources": ["v1/Pod"]}, "limits": {"moduleMib": 1}}),
    )
    .await;
    for (name, says) in [
        (
            "wide",
            "spec.grant.namespaces names ns-1: a Handler is confined to its own namespace (ns-0)",
        ),
        ("nodes", "spec.grant.resources: v1/Namespace is cluster-scoped"),
        (
            "outbound",
            "the tenant policy lets no Handler reach outside the cluster",
        ),
        (
            "big",
            "the module is 1100000 bytes, over its limits.moduleMib (1048576 bytes)",
        ),
    ] {
        let status = status_until(&client, "ns-0", name, "its refusal", |status| {
            condition(status, "Ready")["reason"] == "Rejected"
        })
        .await;
        let ready = condition(&status, "Ready");
        assert_eq!(ready["status"], "False");
        let message = ready["message"].as_str().unwrap();
        assert!(message.contains(says), "{name}: {message}");
        assert!(
            listed_status(&runtime, &format!("ns-0.{name}")).is_none(),
            "{name} runs"
        );
    }
    // Each refusal is an Event on its Handler too.
    let events: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "ns-0",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("events.k8s.io", "v1", "Event")),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let listed = events.list(&Default::default()).await.unwrap();
        let rejected = listed
            .items
            .iter()
            .find(|event| event.data["regarding"]["name"] == "wide" && event.data["reason"] == "Rejected");
        if let Some(event) = rejected {
            assert_eq!(event.data["regarding"]["kind"], "Handler");
            assert_eq!(event.data["type"], "Warning");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Rejected Event on Handler wide"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_handler_acts_as_the_host_with_its_module_from_the_namespace_it_names() {
    let (_server, client) = tenants_cluster().await;
    module(&client, "ns-1", "writer", plugin_artifacts::test_plugin("writer.wasm")).await;
    let runtime = Runtime::start(client.clone(), RuntimeConfig::default().handlers(true))
        .await
        .unwrap();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kinformer.dev", "v1alpha1", "ClusterHandler"),
        "clusterhandlers",
    );
    let cluster_handlers: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kinformer.dev/v1alpha1", "kind": "ClusterHandler", "metadata": {"name": "audit"},
        "spec": {"module": {"configMap": {"namespace": "ns-1", "name": "writer", "key": "plugin.wasm"}},
                 "config": "slow:ns-0",
                 "grant": {"resources": ["v1/ConfigMap"],
                           "write": [{"verbs": ["patch"], "resources": ["v1/ConfigMap"], "namespaces": ["ns-0"]}]}}}))
    .unwrap();
    cluster_handlers.create(&PostParams::default(), &object).await.unwrap();
    // No RBAC names it: it writes as the host, in a namespace not its module's.
    patched(&client, "ns-0", Duration::from_secs(60), "the ClusterHandler").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = cluster_handlers.get("audit").await.unwrap().data["status"].clone();
        if condition(&status, "Ready")["reason"] == "Running" {
            assert_eq!(status["plugin"], "audit");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ClusterHandler never Ready: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(listed_status(&runtime, "audit").unwrap().write_errors, 0);
    runtime.shutdown().await;
}

/// The CNCF distribution registry (Debian's `docker-registry`) on a free
/// loopback port, its storage a temporary directory; killed on drop.
struct Registry {
    process: std::process::Child,
    address: String,
    _storage: tempfile::TempDir,
}

impl Registry {
    async fn start() -> Self {
        let binary = std::path::Path::new("/usr/bin/docker-registry");
        assert!(
            binary.exists(),
            "/usr/bin/docker-registry is missing: .ci/run installs it (apt-get install docker-registry)"
        );
        let storage = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let config = storage.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {address}\n",
                storage.path().join("data").display()
            ),
        )
        .unwrap();
        let process = std::process::Command::new(binary)
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("docker-registry starts");
        let registry = Self {
            process,
            address,
            _storage: storage,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(&registry.address).await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "docker-registry never listened on {}",
                registry.address
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        registry
    }

    /// Pushes `module` to `REGISTRY/repository`, as `kinformer push` does;
    /// returns the pinned reference.
    async fn push(&self, module: &[u8], repository: &str) -> String {
        kinformer::handlers::oci::push(
            module,
            &format!("{}/{repository}", self.address),
            &Credentials::Anonymous,
            &PullConfig::default().insecure_registry(&self.address),
        )
        .await
        .expect("the registry takes the push")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The spec of a Handler running the delta logger from `oci`.
pub(crate) fn pulled_logger(oci: &str) -> Value {
    logging(json!({"oci": oci}))
}

fn pulling(registry: &str) -> RuntimeConfig {
    RuntimeConfig::default()
        .handlers(true)
        .tenant_policy(pulls_from(registry))
        .pull(PullConfig::default().insecure_registry(registry))
}

/// A tenant policy that lets modules be pulled from `registry` only, on
/// loopback (which pulls, as plugins, reach only where a network opens it).
fn pulls_from(registry: &str) -> kinformer::handlers::TenantPolicy {
    kinformer::handlers::TenantPolicy::parse(&format!(
        "[registries]\nallow = [\"{registry}\"]\nnetworks = [\"127.0.0.1/32\"]\n"
    ))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_pulled_by_digest_from_a_registry_runs_and_a_second_pull_is_the_cache() {
    let (_server, client) = tenants_cluster().await;
    let registry = Registry::start().await;
    let pinned = registry.push(plugin_artifacts::DELTA_LOGGER, "shop/logger:v1").await;
    let digest = pinned.rsplit_once('@').unwrap().1.to_owned();
    assert!(
        pinned.starts_with(&format!("{}/shop/logger@sha256:", registry.address)),
        "{pinned}"
    );
    let logs = Logs::default();
    let runtime = Runtime::start(client.clone(), pulling(&registry.address).log_sink(logs.sink()))
        .await
        .unwrap();
    handler(&client, "ns-0", "logger", pulled_logger(&pinned)).await;
    let ready = status_until(&client, "ns-0", "logger", "Ready with deltas", |status| {
        condition(status, "Ready")["status"] == "True" && status["deltas"].as_u64() > Some(0)
    })
    .await;
    assert_eq!(ready["digest"], digest.as_str());
    assert!(logs.of("ns-0.logger").iter().any(|line| line.contains(" ns-0/")));

    // A registry the tenant policy does not list is never asked: here, a
    // cloud's metadata service named as one.
    let metadata = format!("169.254.169.254/latest/meta-data@sha256:{}", "0".repeat(64));
    handler(&client, "ns-0", "metadata", pulled_logger(&metadata)).await;
    let message = ready_reason(&client, "ns-0", "metadata", "Rejected").await;
    assert!(
        message.contains("registry 169.254.169.254 is not one the tenant policy lets modules be pulled from"),
        "{message}"
    );

    // A pull secret is read as the Handler's ServiceAccount: `default` of
    // ns-0 may read no Secret, so this one is not the host's to use.
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": format!(
            "{{\"auths\": {{\"{}\": {{\"username\": \"u\", \"password\": \"p\"}}}}}}", registry.address)}}))
    .unwrap();
    Api::namespaced(client.clone(), "ns-0")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // (A digest not pulled yet: a cached one needs no credentials.)
    let unpulled = registry.push(plugin_artifacts::NODE_WATCHER, "shop/private:v1").await;
    let mut private = pulled_logger(&unpulled);
    private["module"]["pullSecret"] = json!({"name": "regcred"});
    handler(&client, "ns-0", "private", private).await;
    let message = ready_reason(&client, "ns-0", "private", "PullFailed").await;
    assert!(
        message.contains("Secret ns-0/regcred is not readable")
            && message.contains("system:serviceaccount:ns-0:default"),
        "{message}"
    );

    // The registry gone, one more Handler of that digest in the namespace
    // that pulled it runs from the cache.
    drop(registry);
    handler(&client, "ns-0", "again", pulled_logger(&pinned)).await;
    let cached = status_until(&client, "ns-0", "again", "Ready from the cache", |status| {
        condition(status, "Ready")["status"] == "True"
    })
    .await;
    assert_eq!(cached["digest"], digest.as_str());
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_is_refused_unless_the_host_allows_tags_and_then_it_reads_as_its_digest() {
    let (_server, client) = tenants_cluster().await;
    let registry = Registry::start().await;
    let pinned = registry.push(plugin_artifacts::DELTA_LOGGER, "shop/logger:v1").await;
    let tagged = format!("{}/shop/logger:v1", registry.address);
    let runtime = Runtime::start(client.clone(), pulling(&registry.address))
        .await
        .unwrap();
    handler(&client, "ns-0", "tagged", pulled_logger(&tagged)).await;
    let message = ready_reason(&client, "ns-0", "tagged", "TagRefused").await;
    assert!(message.contains("--allow-tags"), "{message}");
    assert!(listed_status(&runtime, "ns-0.tagged").is_none());
    runtime.shutdown().await;

    let config = RuntimeConfig::default()
        .handlers(true)
        .tenant_policy(pulls_from(&registry.address))
        .pull(
            PullConfig::default()
                .insecure_registry(&registry.address)
                .allow_tags(true),
        );
    let runtime = Runtime::start(client.clone(), config).await.unwrap();
    let ready = status_until(&client, "ns-0", "tagged", "Ready, the tag resolved", |status| {
        condition(status, "Ready")["status"] == "True"
    })
    .await;
    assert_eq!(ready["digest"], pinned.rsplit_once('@').unwrap().1);
    runtime.shutdown().await;
}

/// A registry that misbehaves, by repository: `hang` never answers,
/// `garbage` serves a manifest that is not JSON, `other` a layer that is not
/// its digest, `huge` declares a 2 GiB layer, `flood` declares 1000 bytes
/// and sends without end. Answers each request with its manifest or blob.
struct BadRegistry {
    address: String,
    manifests: std::sync::Arc<BTreeMap<String, Vec<u8>>>,
    task: tokio::task::JoinHandle<()>,
}

impl BadRegistry {
    const LAYER: &[u8] = b"\0asm not really a module";

    fn manifest(size: u64, digest: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.wasm.config.v0+json",
                       "digest": format!("sha256:{}", kinformer::plugin::digest(b"{}")), "size": 2},
            "layers": [{"mediaType": "application/wasm", "digest": digest, "size": size}],
        }))
        .unwrap()
    }

    async fn start() -> Self {
        let layer = format!("sha256:{}", kinformer::plugin::digest(Self::LAYER));
        let manifests = std::sync::Arc::new(BTreeMap::from([
            ("garbage".to_owned(), b"<html>not a manifest</html>".to_vec()),
            ("other".to_owned(), Self::manifest(Self::LAYER.len() as u64, &layer)),
            ("huge".to_owned(), Self::manifest(2 << 30, &layer)),
            ("flood".to_owned(), Self::manifest(1000, &layer)),
        ]));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let served = manifests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(Self::answer(stream, served.clone()));
            }
        });
        Self {
            address,
            manifests,
            task,
        }
    }

    async fn answer(mut stream: tokio::net::TcpStream, manifests: std::sync::Arc<BTreeMap<String, Vec<u8>>>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        loop {
            let mut request = Vec::new();
            while !request.ends_with(b"\r\n\r\n") {
                let mut byte = [0; 1];
                if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                    return;
                }
                request.push(byte[0]);
            }
            let request = String::from_utf8_lossy(&request).into_owned();
            let path = request.split(' ').nth(1).unwrap_or_default().to_owned();
            let repository = path.split('/').nth(2).unwrap_or_default().to_owned();
            let head =
                |length: &str| format!("HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n{length}\r\n");
            if path == "/v2/" {
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
                continue;
            }
            match repository.as_str() {
                "hang" => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    return;
                }
                "flood" if path.contains("/blobs/") => {
                    let _ = stream
                        .write_all(head("transfer-encoding: chunked\r\n").as_bytes())
                        .await;
                    let chunk = [b"4000\r\n".as_slice(), &[0; 0x4000], b"\r\n"].concat();
                    while stream.write_all(&chunk).await.is_ok() {}
                    return;
                }
                _ if path.contains("/blobs/") => {
                    let other = b"\0asm other bytes of that length!";
                    let body = &other[..BadRegistry::LAYER.len()];
                    let _ = stream
                        .write_all(head(&format!("content-length: {}\r\n", body.len())).as_bytes())
                        .await;
                    let _ = stream.write_all(body).await;
                }
                _ => {
                    let body = manifests.get(&repository).cloned().unwrap_or_default();
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/vnd.oci.image.manifest.v1+json\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.write_all(&body).await;
                }
            }
        }
    }

    /// The pinned reference of `repository`'s manifest.
    fn pinned(&self, repository: &str) -> String {
        let digest = kinformer::plugin::digest(&self.manifests[repository]);
        format!("{}/{repository}@sha256:{digest}", self.address)
    }
}

impl Drop for BadRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_registry_is_refused_or_timed_out_while_other_handlers_run() {
    let (_server, client) = tenants_cluster().await;
    let registry = BadRegistry::start().await;
    module(&client, "ns-0", "logger", plugin_artifacts::DELTA_LOGGER).await;
    let config = RuntimeConfig::default()
        .handlers(true)
        .tenant_policy(pulls_from(&registry.address))
        .pull(
            PullConfig::default()
                .insecure_registry(&registry.address)
                .timeout(Duration::from_secs(2)),
        );
    let runtime = Runtime::start(client.clone(), config).await.unwrap();
    let hang = format!("{}/hang@sha256:{}", registry.address, "0".repeat(64));
    handler(&client, "ns-0", "hang", pulled_logger(&hang)).await;
    status_until(&client, "ns-0", "hang", "Pulling", |status| {
        condition(status, "Ready")["reason"] == "Pulling"
    })
    .await;
    // The hanging pull holds up no other Handler.
    handler(
        &client,
        "ns-0",
        "logger",
        logging(json!({"configMap": {"name": "logger", "key": "plugin.wasm"}})),
    )
    .await;
    let hang_status = handlers(&client, "ns-0").get("hang").await.unwrap().data["status"].clone();
    status_until(&client, "ns-0", "logger", "Ready beside a hanging pull", |status| {
        condition(status, "Ready")["status"] == "True"
    })
    .await;
    let timed_out = status_until(&client, "ns-0", "hang", "PullFailed after the timeout", |status| {
        condition(status, "Ready")["reason"] == "PullFailed"
    })
    .await;
    assert!(
        condition(&timed_out, "Ready")["message"]
            .as_str()
            .unwrap()
            .contains("no module within 2s"),
        "{timed_out:#}"
    );
    assert_ne!(
        condition(&hang_status, "Ready")["reason"],
        "Running",
        "the hanging Handler never ran"
    );

    for (name, reason, says) in [
        ("other", "DigestMismatch", "its layer: the registry served sha256:"),
        ("garbage", "PullFailed", "the manifest is not an OCI image manifest"),
        (
            "huge",
            "PullFailed",
            "the module is 2147483648 bytes, over its limits.moduleMib",
        ),
        ("flood", "PullFailed", "over the 1000 bytes its manifest declares"),
    ] {
        handler(&client, "ns-0", name, pulled_logger(&registry.pinned(name))).await;
        let message = ready_reason(&client, "ns-0", name, reason).await;
        assert!(message.contains(says), "{name}: {message}");
        assert!(
            listed_status(&runtime, &format!("ns-0.{name}")).is_none(),
            "{name} runs"
        );
    }
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_policy_bounds_handlers_http_limits_and_numbers_per_namespace() {
    let (_server, client) = tenants_cluster().await;
    let (web, received) = kinformer_tests::http::serve().await;
    let port = web.port();
    module(
        &client,
        "ns-0",
        "fetcher",
        plugin_artifacts::test_plugin("hostile.wasm"),
    )
    .await;
    module(&client, "ns-1", "logger", plugin_artifacts::DELTA_LOGGER).await;
    let policy = kinformer::handlers::TenantPolicy::parse(&format!(
        "[http]\nallow = [\"http://127.0.0.1:{port}/ok\"]\nnetworks = [\"127.0.0.0/8\"]\n\
         [limits]\nmemory-mib = 32\ncpu-millicores = 100\n[handlers]\nper-namespace = 3\n"
    ))
    .unwrap();
    let logs = Logs::default();
    let runtime = Runtime::start(
        client.clone(),
        RuntimeConfig::default()
            .handlers(true)
            .tenant_policy(policy)
            .log_sink(logs.sink()),
    )
    .await
    .unwrap();
    // Fetches `origin/ok?query` per pod delta, granted `origin/ok`.
    let fetcher = |origin: &str, query: &str, extra: Value| {
        let mut spec = json!({"module": {"configMap": {"name": "fetcher", "key": "plugin.wasm"}},
            "config": format!("fetch={origin}/ok?{query}"),
            "grant": {"resources": ["v1/Pod"],
                      "http": {"allow": [format!("{origin}/ok")], "networks": ["127.0.0.1/32"]}}});
        spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        spec
    };
    // Inside the policy: it runs, reaches its server, at the policy's CPU share.
    let inside = format!("http://127.0.0.1:{port}");
    handler(&client, "ns-0", "notifier", fetcher(&inside, "tenant", json!({}))).await;
    // Outside it: another port, and more memory than the policy allows.
    let elsewhere = format!("http://127.0.0.1:{}", port + 1);
    handler(
        &client,
        "ns-0",
        "elsewhere",
        fetcher(&elsewhere, "elsewhere", json!({})),
    )
    .await;
    handler(
        &client,
        "ns-0",
        "greedy",
        fetcher(&inside, "greedy", json!({"limits": {"memoryMib": 64}})),
    )
    .await;
    status_until(&client, "ns-0", "notifier", "Ready", |status| {
        condition(status, "Ready")["status"] == "True"
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while received.count("?tenant") == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tenant's request never reached its server: {:?}",
            logs.of("ns-0.notifier")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(listed_status(&runtime, "ns-0.notifier").unwrap().cpu_millicores, 100);
    for (name, says) in [
        (
            "elsewhere",
            format!("{elsewhere}/ok is outside what the tenant policy allows"),
        ),
        (
            "greedy",
            "spec.limits.memoryMib is 64: the tenant policy allows at most 32".to_owned(),
        ),
    ] {
        let message = ready_reason(&client, "ns-0", name, "Rejected").await;
        assert!(message.contains(&says), "{name}: {message}");
        assert!(
            listed_status(&runtime, &format!("ns-0.{name}")).is_none(),
            "{name} runs"
        );
    }
    assert_eq!(received.count("?elsewhere") + received.count("?greedy"), 0);

    // Three Handlers per namespace: the fourth waits for a place.
    let logger = json!({"module": {"configMap": {"name": "logger", "key": "plugin.wasm"}},
                        "grant": {"resources": ["v1/ConfigMap"]}});
    for name in ["q1", "q2", "q3", "q4"] {
        handler(&client, "ns-1", name, logger.clone()).await;
    }
    let message = ready_reason(&client, "ns-1", "q4", "Rejected").await;
    assert!(
        message.contains("namespace ns-1 runs 3 Handlers, the most the tenant policy allows"),
        "{message}"
    );
    for name in ["q1", "q2", "q3"] {
        status_until(&client, "ns-1", name, "Ready", |status| {
            condition(status, "Ready")["status"] == "True"
        })
        .await;
    }
    handlers(&client, "ns-1")
        .delete("q1", &DeleteParams::default())
        .await
        .unwrap();
    status_until(&client, "ns-1", "q4", "Ready once q1 is gone", |status| {
        condition(status, "Ready")["status"] == "True"
    })
    .await;
    runtime.shutdown().await;
}

/// How many requests of `verb` on `resource` (and `subresource`) the server
/// answered, as its `/metrics` counts them (kube-apiserver's
/// `apiserver_request_total`).
async fn requests_served(client: &kube::Client, verb: &str, resource: &str, subresource: &str) -> u64 {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let metrics = client.request_text(request).await.unwrap();
    metrics
        .lines()
        .filter(|line| line.starts_with("apiserver_request_total{"))
        .filter(|line| {
            [
                format!("verb=\"{verb}\""),
                format!("resource=\"{resource}\""),
                format!("subresource=\"{subresource}\""),
            ]
            .iter()
            .all(|label| line.contains(label.as_str()))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_handler_s_status_is_written_when_it_changes_and_then_left_alone() {
    let (_server, client) = tenants_cluster().await;
    module(&client, "ns-0", "logger", plugin_artifacts::DELTA_LOGGER).await;
    let runtime = Runtime::start(client.clone(), RuntimeConfig::default().handlers(true))
        .await
        .unwrap();
    let logger = json!({"configMap": {"name": "logger", "key": "plugin.wasm"}});
    handler(&client, "ns-0", "running", logging(logger.clone())).await;
    let refused = json!({"module": logger, "grant": {"resources": ["v1/Pod", "v1/Namespace"]}});
    handler(&client, "ns-0", "refused", refused).await;
    ready_reason(&client, "ns-0", "running", "Running").await;
    ready_reason(&client, "ns-0", "refused", "Rejected").await;
    // A refused Handler's status holds no digest and no error at all, not
    // nulls the server would drop.
    let status = handlers(&client, "ns-0").get("refused").await.unwrap().data["status"].clone();
    assert!(
        status.get("digest").is_none() && status.get("lastError").is_none(),
        "{status:#}"
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = requests_served(&client, "PATCH", "handlers", "status").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let written = requests_served(&client, "PATCH", "handlers", "status").await - before;
    assert!(
        written <= 2,
        "two idle Handlers had their status patched {written} times in 10 s"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_is_asked_once_per_kind_and_a_long_grant_is_refused_by_the_schema() {
    let (server, client) = tenants_cluster().await;
    module(&client, "ns-0", "logger", plugin_artifacts::DELTA_LOGGER).await;
    let runtime = Runtime::start(client.clone(), RuntimeConfig::default().handlers(true))
        .await
        .unwrap();
    let logger = json!({"configMap": {"name": "logger", "key": "plugin.wasm"}});
    // 60 kinds no server serves, named by two Handlers.
    let mut kinds: Vec<String> = (0..60).map(|n| format!("k{n}.example.com/v1/Kind")).collect();
    kinds.push("v1/Pod".to_owned());
    for name in ["unknown-a", "unknown-b"] {
        handler(
            &client,
            "ns-0",
            name,
            json!({"module": logger, "grant": {"resources": kinds}}),
        )
        .await;
    }
    for name in ["unknown-a", "unknown-b"] {
        let message = ready_reason(&client, "ns-0", name, "Rejected").await;
        assert!(
            message.contains("the API server does not serve it"),
            "{name}: {message}"
        );
    }
    let before = server.stats().requests;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let asked = server.stats().requests - before;
    // Within the answers' lifetime nothing is asked again; the host's other
    // requests (module reads, status) are a few.
    assert!(
        asked < 30,
        "{asked} requests in 10 s from a host whose two Handlers name 60 unknown kinds"
    );

    // More kinds than a Handler may list: the API server refuses it.
    let many: Vec<String> = (0..65).map(|n| format!("k{n}.example.com/v1/Kind")).collect();
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kinformer.dev/v1alpha1", "kind": "Handler",
        "metadata": {"name": "many", "namespace": "ns-0"},
        "spec": {"module": logger, "grant": {"resources": many}}}))
    .unwrap();
    let refused = handlers(&client, "ns-0")
        .create(&PostParams::default(), &object)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("must have at most 64 items"), "{refused}");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_never_replaces_a_plugin_of_the_directory_and_names_are_checked() {
    let (_server, client) = tenants_cluster().await;
    module(&client, "ns-0", "writer", plugin_artifacts::WRITER).await;
    let dir = tempfile::tempdir().unwrap();
    kinformer_tests::runtime::install(
        dir.path(),
        "ns-0.pod-logger",
        "delta-logger.wasm",
        Some("config = \"v1/Pod\"\n"),
    );
    let runtime = Runtime::start(
        client.clone(),
        RuntimeConfig::new(dir.path()).handlers(true).watch(false),
    )
    .await
    .unwrap();
    until("the directory's plugin runs", Duration::from_secs(60), || {
        listed_status(&runtime, "ns-0.pod-logger").is_some_and(|status| status.running_digest.is_some())
    })
    .await;
    let operator_s = listed_status(&runtime, "ns-0.pod-logger").unwrap().running_digest;
    handler(
        &client,
        "ns-0",
        "pod-logger",
        json!({"module": {"configMap": {"name": "writer", "key": "plugin.wasm"}},
               "grant": {"resources": ["v1/ConfigMap"]}}),
    )
    .await;
    // A Handler whose plugin watches nothing it may (the delta logger
    // watches Pods unless its config says otherwise) runs, Degraded.
    handler(
        &client,
        "ns-0",
        "idle",
        json!({"module": {"configMap": {"name": "writer", "key": "plugin.wasm"}},
               "config": "slow:ns-0", "grant": {"resources": ["v1/Pod"]}}),
    )
    .await;
    let message = ready_reason(&client, "ns-0", "pod-logger", "Rejected").await;
    assert!(
        message.contains("the plugin name ns-0.pod-logger is held by the plugin ns-0.pod-logger of the directory"),
        "{message}"
    );
    assert_eq!(
        listed_status(&runtime, "ns-0.pod-logger").unwrap().running_digest,
        operator_s,
        "the directory's plugin was replaced"
    );
    let status = status_until(&client, "ns-0", "idle", "HandlesNothing", |status| {
        condition(status, "Degraded")["reason"] == "HandlesNothing"
    })
    .await;
    assert_eq!(condition(&status, "Ready")["status"], "True", "{status:#}");
    assert_eq!(condition(&status, "Degraded")["status"], "True", "{status:#}");

    // Names that are not Kubernetes names never reach the host.
    for (name, spec) in [
        (
            "colon",
            json!({"module": {"configMap": {"name": "writer", "key": "plugin.wasm"}},
                   "serviceAccountName": "payments:payments-handlers"}),
        ),
        (
            "path",
            json!({"module": {"configMap": {"name": "../../kube-system/configmaps/secret-cm", "key": "k"}}}),
        ),
    ] {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kinformer.dev/v1alpha1", "kind": "Handler",
            "metadata": {"name": name, "namespace": "ns-0"}, "spec": spec}))
        .unwrap();
        let refused = handlers(&client, "ns-0")
            .create(&PostParams::default(), &object)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("should match"), "{name}: {refused}");
    }
    runtime.shutdown().await;
}
