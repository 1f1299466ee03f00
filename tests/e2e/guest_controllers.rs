//! Controllers written in Python and JavaScript, built from source with their
//! SDK's build for the `controller` world, on the emulation: config-reloader
//! (Python) rolls deployments out when their config maps change, within its
//! write grant; a refused write is an exception that the host retries with
//! backoff; a JavaScript controller reconciles and writes.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::time::Duration;

use apiserver_sim::ApiServer;
use apiserver_sim::store::{Filter, ListOptions, PatchType, ResourceId};
use apiserver_sim::workload::Workload;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::guest::{Language, World, compile_cache, component, example, root};
use kinformer_tests::runtime::{Logs, cluster, plugin_status, publish, until};
use serde_json::{Value, json};

const HASH: &str = "config-reloader.kinformer.dev/hash";

fn deployments() -> ResourceId {
    ResourceId::new("apps", "v1", "deployments")
}

fn config_maps() -> ResourceId {
    ResourceId::new("", "v1", "configmaps")
}

/// The manifest config-reloader ships with, its deployment writes narrowed
/// to `ns-0`, and no log rate limit.
fn reloader_manifest() -> String {
    let shipped = include_str!("../../plugins/config-reloader/manifest.toml");
    let narrowed = shipped.replace(
        "resources = [\"apps/v1/Deployment\"]",
        "resources = [\"apps/v1/Deployment\"]\nnamespaces = [\"ns-0\"]",
    );
    assert_ne!(narrowed, shipped, "the shipped manifest changed shape");
    format!("{narrowed}\n[limits]\nlog-lines-per-second = 1000000\n")
}

/// A quiet emulated cluster: namespaces `ns-0` and `ns-1`, each with
/// config maps `config-0` and `config-1` and deployments `app-0` and
/// `app-1`. Every `app-0` opts in to config-reloader; every deployment's
/// pods mount `config-0` and take their environment from `config-1`.
async fn quiet_cluster() -> (ApiServer, kube::Client) {
    let workload = Workload::default().seed(5).size(2, 2, 1).changes_per_second(0.0);
    let (server, churn, client) = cluster(&workload).await;
    churn.abort();
    for namespace in ["ns-0", "ns-1"] {
        for app in ["app-0", "app-1"] {
            let mut patch = vec![
                json!({"op": "add", "path": "/spec/template/spec/volumes",
                       "value": [{"name": "config", "configMap": {"name": "config-0"}}]}),
                json!({"op": "add", "path": "/spec/template/spec/containers/0/envFrom",
                       "value": [{"configMapRef": {"name": "config-1"}}]}),
            ];
            if app == "app-0" {
                patch.push(json!({"op": "add", "path": "/metadata/annotations",
                                  "value": {"config-reloader.kinformer.dev/auto": "true"}}));
            }
            server
                .store()
                .patch(
                    &deployments(),
                    Some(namespace),
                    app,
                    PatchType::Json,
                    Value::Array(patch),
                    false,
                )
                .unwrap();
        }
    }
    (server, client)
}

fn deployment(server: &ApiServer, namespace: &str, name: &str) -> Value {
    server
        .store()
        .get(&deployments(), Some(namespace), name)
        .unwrap()
        .value
        .clone()
}

/// The hash config-reloader recorded on the deployment, and the one in its
/// pod template.
fn hashes(server: &ApiServer, namespace: &str, name: &str) -> (Option<String>, Option<String>) {
    let deployment = deployment(server, namespace, name);
    let read = |annotations: &Value| annotations[HASH].as_str().map(str::to_owned);
    (
        read(&deployment["metadata"]["annotations"]),
        read(&deployment["spec"]["template"]["metadata"]["annotations"]),
    )
}

fn edit(server: &ApiServer, namespace: &str, config_map: &str, revision: &str) {
    server
        .store()
        .patch(
            &config_maps(),
            Some(namespace),
            config_map,
            PatchType::Merge,
            json!({"data": {"revision": revision}}),
            false,
        )
        .unwrap();
}

fn reloaded_events(server: &ApiServer) -> Vec<Value> {
    let events = ResourceId::new("events.k8s.io", "v1", "events");
    let list = server
        .store()
        .list(&events, &Filter::default(), &ListOptions::default())
        .unwrap();
    list.items
        .iter()
        .map(|event| event.value.clone())
        .filter(|event| event["reason"] == "Reloaded")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_reloader_rolls_out_the_deployments_whose_config_maps_change_and_only_where_granted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    publish(d, "reloader.toml", reloader_manifest().as_bytes());
    publish(
        d,
        "reloader.wasm",
        &example(Language::Python, World::Controller, "config-reloader"),
    );
    let (server, client) = quiet_cluster().await;
    let logs = Logs::default();
    let config = RuntimeConfig::new(d).log_sink(logs.sink()).cache_dir(compile_cache());
    let runtime = Runtime::start(client, config).await.unwrap();

    // First sight: the hash is recorded, and nothing rolls out.
    until(
        "the hash of ns-0/app-0 to be recorded",
        Duration::from_secs(120),
        || hashes(&server, "ns-0", "app-0").0.is_some(),
    )
    .await;
    let (first, template) = hashes(&server, "ns-0", "app-0");
    let first = first.unwrap();
    assert_eq!(first.len(), 16, "{first}");
    assert_eq!(template, None, "opting in rolled the deployment out");

    // Each config map the pods use, changed, rolls them out once more.
    let mut seen = vec![first];
    for (config_map, revision) in [("config-0", "1"), ("config-1", "1"), ("config-0", "2")] {
        edit(&server, "ns-0", config_map, revision);
        until(
            &format!("a rollout after {config_map} changed"),
            Duration::from_secs(20),
            || {
                let (recorded, template) = hashes(&server, "ns-0", "app-0");
                recorded.as_ref().is_some_and(|hash| !seen.contains(hash)) && template == recorded
            },
        )
        .await;
        seen.push(hashes(&server, "ns-0", "app-0").0.unwrap());
    }
    until("an Event per rollout", Duration::from_secs(10), || {
        reloaded_events(&server).len() == 3
    })
    .await;
    let events = reloaded_events(&server);
    assert!(
        events.iter().all(|event| event["regarding"]["name"] == "app-0"),
        "{events:#?}"
    );
    // Converged: no write chases another.
    let writes = plugin_status(&runtime, "reloader").writes;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(plugin_status(&runtime, "reloader").writes, writes, "still writing");
    // A deployment that did not opt in is left alone.
    assert_eq!(hashes(&server, "ns-0", "app-1"), (None, None));
    let lines = logs.of("reloader");
    assert!(
        lines.iter().any(|line| line
            .starts_with("deployment ns-0/app-0: config maps config-0, config-1 changed: rolling out (hash ")),
        "{lines:#?}"
    );

    // ns-1/app-0 opted in too, but the grant writes only ns-0: the plugin's
    // patch raises `cluster.Denied` out of `reconcile`, and the host retries
    // the key with backoff, never restarting the plugin.
    until("denied reconciles of ns-1/app-0", Duration::from_secs(10), || {
        plugin_status(&runtime, "reloader").errors >= 5
    })
    .await;
    let status = plugin_status(&runtime, "reloader");
    let error = status.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("write denied: patch apps/v1/Deployment in namespace ns-1 is not granted"),
        "{error}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = plugin_status(&runtime, "reloader");
    assert!(later.errors < 30, "retried without backoff: {later:#?}");
    assert_eq!((later.traps, later.restarts), (0, 0), "{later:#?}");
    assert_eq!(
        hashes(&server, "ns-1", "app-0"),
        (None, None),
        "a write outside the grant was made"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_controller_reconciles_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let manifest = "[grant]\nresources = [\"v1/ConfigMap\"]\nnamespaces = [\"ns-0\"]\n\n\
                    [[grant.write]]\nverbs = [\"patch\"]\nresources = [\"v1/ConfigMap\"]\n";
    publish(d, "keys.toml", manifest.as_bytes());
    let source = root().join("test-plugins").join("js-controller");
    publish(
        d,
        "keys.wasm",
        &component(Language::JavaScript, World::Controller, &source),
    );
    let workload = Workload::default().seed(3).size(1, 1, 1).changes_per_second(0.0);
    let (server, churn, client) = cluster(&workload).await;
    churn.abort();
    let logs = Logs::default();
    let config = RuntimeConfig::new(d).log_sink(logs.sink()).cache_dir(compile_cache());
    let runtime = Runtime::start(client, config).await.unwrap();

    let annotation = |name: &str| {
        let config_map = server.store().get(&config_maps(), Some("ns-0"), name).unwrap();
        config_map.value["metadata"]["annotations"]["kinformer.dev/keys"]
            .as_str()
            .map(str::to_owned)
    };
    until("both config maps annotated", Duration::from_secs(120), || {
        annotation("config-0").as_deref() == Some("1") && annotation("config-1").as_deref() == Some("1")
    })
    .await;
    server
        .store()
        .patch(
            &config_maps(),
            Some("ns-0"),
            "config-0",
            PatchType::Merge,
            json!({"data": {"added": "yes"}}),
            false,
        )
        .unwrap();
    until("config-0 annotated again", Duration::from_secs(20), || {
        annotation("config-0").as_deref() == Some("2")
    })
    .await;
    // The plugin logs once its write has returned, which may be after the
    // write is seen.
    until("the second reconcile logged", Duration::from_secs(20), || {
        logs.of("keys")
            .iter()
            .any(|line| line.starts_with("reconciled ns-0/config-0: 2 keys, stored at rv "))
    })
    .await;
    let status = plugin_status(&runtime, "keys");
    assert!(status.reconciles >= 3, "{status:#?}");
    assert_eq!((status.errors, status.traps), (0, 0), "{status:#?}");
    runtime.shutdown().await;
}
