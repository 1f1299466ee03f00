//! Plugins writing to the cluster end to end: the write test plugin under
//! different grants, modes and rates, on the emulated API server, through the
//! real kube-rs client.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use apiserver_sim::store::{EventType, ResourceId};
use apiserver_sim::workload::Workload;
use apiserver_sim::{ApiServer, SimConfig};
use kinformer::runtime::{PluginState, PluginStatus, Runtime, RuntimeConfig};
use kinformer_tests::runtime::{
    Logged, Logs, assert_record_matches_server, caught_up, cluster, install, server_changes, status,
};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

const LOUD: &str = "[limits]\nlog-lines-per-second = 1000000\n";

/// Every write the script tries, granted in namespace `ns-0`.
const SCRIPT_GRANT: &str = r#"
[[grant.write]]
verbs = ["create", "update", "patch", "apply", "delete"]
resources = ["v1/ConfigMap"]
namespaces = ["ns-0"]

[[grant.write]]
verbs = ["patch"]
resources = ["apps/v1/Deployment/status", "apps/v1/Deployment/scale"]
namespaces = ["ns-0"]

[[grant.write]]
verbs = ["create"]
resources = ["events.k8s.io/v1/Event"]
namespaces = ["ns-0"]
"#;

/// A server holding one namespace (`ns-0`: configmaps `config-0` and
/// `config-1`, deployment `app-0` with its pods) and nothing changing it: no
/// churn, and no controllers reacting to the plugins' writes.
async fn quiet_cluster() -> (ApiServer, kube::Client) {
    let server = ApiServer::start(SimConfig::default().controllers(false)).await.unwrap();
    Workload::default().size(1, 1, 2).populate(server.store()).unwrap();
    let client = kube::Client::try_from(server.client_config()).unwrap();
    (server, client)
}

/// Starts the runtime on `dir` and waits for `plugin`'s line starting with
/// `prefix`; returns the line and the plugin's final status.
async fn run_until_logged(
    client: kube::Client,
    dir: &std::path::Path,
    plugin: &str,
    prefix: &str,
) -> (String, PluginStatus) {
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(dir).log_sink(logs.sink()))
        .await
        .unwrap();
    let logged = || logs.of(plugin).into_iter().find(|line| line.starts_with(prefix));
    let deadline = Instant::now() + Duration::from_secs(30);
    while logged().is_none() {
        assert!(
            Instant::now() < deadline,
            "{plugin} never logged {prefix:?}; its status: {:#?}",
            runtime.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let statuses = runtime.shutdown().await;
    (logged().unwrap(), status(&statuses, plugin).clone())
}

/// The server's objects of these resources, by key, with their resourceVersions.
fn snapshot(server: &ApiServer, resources: &[ResourceId]) -> BTreeMap<String, Value> {
    let mut objects = BTreeMap::new();
    for resource in resources {
        let (events, _) = server.store().events_after(resource, 0, usize::MAX).unwrap();
        for event in events {
            let key = format!("{}:{}", resource.plural, event.object.key);
            match event.event_type {
                EventType::Deleted => objects.remove(&key),
                _ => objects.insert(key, event.object.value.clone()),
            };
        }
    }
    objects
}

fn configmaps() -> ResourceId {
    ResourceId::new("", "v1", "configmaps")
}

fn deployments() -> ResourceId {
    ResourceId::new("apps", "v1", "deployments")
}

/// The states `key` went through on the server: (what happened, the object).
fn history(server: &ApiServer, resource: &ResourceId, key: &str) -> Vec<(EventType, Value)> {
    let (events, _) = server.store().events_after(resource, 0, usize::MAX).unwrap();
    events
        .iter()
        .filter(|event| event.object.key == key)
        .map(|event| (event.event_type, event.object.value.clone()))
        .collect()
}

/// The `events.k8s.io/v1` Events of a namespace, as a client lists them.
async fn events(client: &kube::Client, namespace: &str) -> Vec<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("events.k8s.io", "v1", "Event"), "events");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    api.list(&ListParams::default())
        .await
        .expect("the server lists events.k8s.io/v1 Events")
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_with_the_default_grant_is_denied_every_write_and_the_server_is_unchanged() {
    let (server, client) = quiet_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    install(
        dir.path(),
        "scripted",
        "writer.wasm",
        Some(&format!("config = \"script:ns-0\"\n{LOUD}")),
    );
    let resources = [configmaps(), deployments()];
    let (rv_before, objects_before) = (server.store().resource_version(), snapshot(&server, &resources));

    let (line, status) = run_until_logged(client, dir.path(), "scripted", "script ").await;

    assert_eq!(
        line,
        "script create=denied update=denied patch-merge=denied patch-json=denied apply=denied \
         status=denied scale=denied event=denied delete-stale-uid=denied delete=denied"
    );
    assert_eq!(server.store().resource_version(), rv_before, "the server changed");
    assert_eq!(snapshot(&server, &resources), objects_before);
    assert_eq!(
        (status.writes, status.write_errors, status.throttled),
        (0, 10, 0),
        "{status:#?}"
    );
    assert!(status.intents.is_empty());
    assert_eq!(status.traps, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_writes_of_every_kind_land_and_apply_names_the_plugin_as_field_manager() {
    let (server, client) = quiet_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    install(
        dir.path(),
        "scripted",
        "writer.wasm",
        Some(&format!("config = \"script:ns-0\"\n{SCRIPT_GRANT}{LOUD}")),
    );

    let (line, status) = run_until_logged(client.clone(), dir.path(), "scripted", "script ").await;

    assert_eq!(
        line,
        "script create=ok update=ok patch-merge=ok patch-json=ok apply=ok status=ok scale=ok \
         event=ok delete-stale-uid=conflict delete=ok"
    );
    assert_eq!(
        (status.writes, status.write_errors, status.throttled),
        (9, 1, 0),
        "{status:#?}"
    );

    // The ConfigMap went through every write, in order, and is gone.
    let written = history(&server, &configmaps(), "ns-0/written");
    let kinds: Vec<EventType> = written.iter().map(|(kind, _)| *kind).collect();
    use EventType::{Added, Deleted, Modified};
    assert_eq!(kinds, [Added, Modified, Modified, Modified, Modified, Deleted]);
    let states: Vec<&Value> = written.iter().map(|(_, object)| object).collect();
    assert_eq!(states[0]["data"]["step"], "create");
    assert_eq!(states[1]["data"]["step"], "update");
    assert_eq!(states[2]["metadata"]["labels"]["patched"], "merge");
    assert_eq!(states[3]["data"]["json"], "yes");
    assert_eq!(states[4]["data"]["applied"], "yes");
    let managers: Vec<&str> = states[4]["metadata"]["managedFields"]
        .as_array()
        .map(|fields| fields.iter().filter_map(|field| field["manager"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        managers.contains(&"scripted"),
        "no field manager named after the plugin: {:#}",
        states[4]["metadata"]
    );

    // The status and scale subresources of the deployment.
    let app = history(&server, &deployments(), "ns-0/app-0");
    let (_, last) = app.last().unwrap();
    assert_eq!(last["status"]["collisionCount"], 7, "{last:#}");
    assert_eq!(last["spec"]["replicas"], 5, "{last:#}");

    // The event, reported as the plugin, about the ConfigMap.
    let events = events(&client, "ns-0").await;
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0].data;
    assert_eq!(event["reportingController"], "kinformer/scripted");
    assert_eq!(event["regarding"]["name"], "written");
    assert_eq!(event["reason"], "Written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_dry_run_mode_nothing_changes_on_the_server_and_the_intents_show_in_the_status() {
    let (server, client) = quiet_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    install(
        dir.path(),
        "scripted",
        "writer.wasm",
        Some(&format!(
            "config = \"script:ns-0\"\nmode = \"dry-run\"\n{SCRIPT_GRANT}{LOUD}"
        )),
    );
    let resources = [configmaps(), deployments()];
    let (rv_before, objects_before) = (server.store().resource_version(), snapshot(&server, &resources));

    let (line, status) = run_until_logged(client.clone(), dir.path(), "scripted", "script ").await;

    assert_eq!(
        server.store().resource_version(),
        rv_before,
        "a dry run changed the server"
    );
    assert_eq!(snapshot(&server, &resources), objects_before);
    assert!(events(&client, "ns-0").await.is_empty());
    // The create was validated; what needed it to exist found nothing.
    assert!(line.starts_with("script create=ok update=not-found"), "{line}");
    assert!(line.contains("scale=ok") && line.contains("status=ok"), "{line}");
    assert_eq!(status.intents.len(), 10, "{status:#?}");
    assert!(status.intents.iter().all(|intent| intent.dry_run));
    let create = &status.intents[0];
    assert_eq!(
        (create.verb, create.key.as_str(), create.outcome),
        ("create", "ns-0/written", "ok")
    );
    assert!(
        create
            .body
            .as_deref()
            .unwrap_or_default()
            .contains(r#""step":"create""#)
    );
    let scale = status
        .intents
        .iter()
        .find(|intent| intent.resource == "apps/v1/Deployment/scale")
        .unwrap();
    assert_eq!(scale.body.as_deref(), Some(r#"{"spec":{"replicas":5}}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_plugin_is_held_to_its_rate_while_a_neighbour_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    install(
        d,
        "pods",
        "delta-logger.wasm",
        Some(&format!("config = \"v1/Pod\"\n{LOUD}")),
    );
    install(
        d,
        "flood",
        "writer.wasm",
        Some(
            "config = \"flood:ns-0\"\n\
             [[grant.write]]\nverbs = [\"create\", \"patch\"]\nresources = [\"v1/ConfigMap\"]\nnamespaces = [\"ns-0\"]\n\
             [limits]\nwrites-per-second = 5\nwrite-burst = 5\n",
        ),
    );
    let workload = Workload::default().seed(11).size(2, 2, 3).changes_per_second(200.0);
    let (server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let started = Instant::now();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();

    tokio::time::sleep(Duration::from_secs(4)).await;
    churn.abort();
    let pods = ResourceId::new("", "v1", "pods");
    let record = || {
        logs.of("pods")
            .iter()
            .filter_map(|line| Logged::parse_delta_logger(line))
            .collect::<Vec<_>>()
    };
    caught_up(&server, &pods, record).await;
    let statuses = runtime.shutdown().await;
    let elapsed = started.elapsed().as_secs_f64();

    // The flood: its bucket starts with 5 writes and refills 5 per second,
    // and every write let through changed the ConfigMap once.
    let flood = status(&statuses, "flood");
    assert_eq!(flood.state, PluginState::Stopped, "{flood:#?}");
    assert!(flood.throttled > flood.writes, "{flood:#?}");
    assert!(flood.writes >= 5, "{flood:#?}");
    assert!(
        flood.writes as f64 <= 5.0 + 5.0 * elapsed,
        "{} writes in {elapsed:.1} s at 5/s with a burst of 5",
        flood.writes
    );
    assert_eq!(flood.write_errors, 0, "{flood:#?}");
    let changes = history(&server, &configmaps(), "ns-0/flood").len() as u64;
    assert_eq!(changes, flood.writes, "the server saw other writes than were counted");

    // The neighbour missed nothing and was never held up into failure.
    assert_record_matches_server(&record(), &server_changes(&server, &pods));
    let neighbour = status(&statuses, "pods");
    assert_eq!((neighbour.traps, neighbour.errors), (0, 0), "{neighbour:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_bumps_the_series_of_the_first_instead_of_creating_another() {
    let (_server, client) = quiet_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    install(
        dir.path(),
        "checker",
        "writer.wasm",
        Some(&format!(
            "config = \"events:ns-0\"\n\
             [[grant.write]]\nverbs = [\"create\"]\nresources = [\"events.k8s.io/v1/Event\"]\n{LOUD}"
        )),
    );

    let (line, status) = run_until_logged(client.clone(), dir.path(), "checker", "events ").await;

    assert_eq!(line, "events A=ok A-again=ok B=ok");
    assert_eq!(status.writes, 3, "{status:#?}");
    let mut events: Vec<Value> = events(&client, "ns-0")
        .await
        .into_iter()
        .map(|event| event.data)
        .collect();
    events.sort_by_key(|event| event["note"].as_str().map(str::to_owned));
    assert_eq!(events.len(), 2, "{events:#?}");
    let (another, same) = (&events[0], &events[1]);
    assert_eq!(same["note"], "the same note");
    assert_eq!(same["series"]["count"], 2, "{same:#}");
    assert!(same["series"]["lastObservedTime"].is_string(), "{same:#}");
    assert_eq!(another["note"], "another note");
    assert!(another.get("series").is_none_or(Value::is_null), "{another:#}");
    for event in &events {
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["reportingController"], "kinformer/checker");
        assert_eq!(event["regarding"]["kind"], "ConfigMap");
        assert_eq!(event["regarding"]["name"], "config-0");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_slow_api_server_does_not_count_against_the_call_deadline() {
    let (server, client) = quiet_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    // Every answer takes 300 ms; the plugin's calls may compute for 50 ms.
    install(
        dir.path(),
        "slow",
        "writer.wasm",
        Some(
            "config = \"slow:ns-0\"\n\
             [[grant.write]]\nverbs = [\"patch\"]\nresources = [\"v1/ConfigMap\"]\n\
             [limits]\ncall-timeout-ms = 50\nwrite-timeout-ms = 5000\nlog-lines-per-second = 1000\n",
        ),
    );
    server.faults().set_latency(Duration::from_millis(300));

    let (line, status) = run_until_logged(client, dir.path(), "slow", "slow ").await;

    assert_eq!(line, "slow patch=ok");
    assert_eq!((status.traps, status.restarts), (0, 0), "{status:#?}");
    let config = history(&server, &configmaps(), "ns-0/config-0");
    assert_eq!(config.last().unwrap().1["metadata"]["labels"]["slow"], "written");
}

#[test]
fn check_prints_the_write_grant_and_the_mode() {
    let dir = tempfile::tempdir().unwrap();
    install(
        dir.path(),
        "scripted",
        "writer.wasm",
        Some(&format!("config = \"script:ns-0\"\nmode = \"dry-run\"\n{SCRIPT_GRANT}")),
    );
    install(dir.path(), "reader", "writer.wasm", Some("config = \"script:ns-0\"\n"));

    let report = kinformer_cli::check::check(&dir.path().join("scripted.wasm"), None)
        .unwrap()
        .to_string();
    assert!(
        report.contains(
            "  write create, update, patch, apply, delete v1/ConfigMap in namespaces ns-0\n\
             \x20 write patch apps/v1/Deployment/status, apps/v1/Deployment/scale in namespaces ns-0\n\
             \x20 write create events.k8s.io/v1/Event in namespaces ns-0\n\
             \x20 writes in dry-run mode"
        ),
        "{report}"
    );
    let report = kinformer_cli::check::check(&dir.path().join("reader.wasm"), None)
        .unwrap()
        .to_string();
    assert!(report.ends_with("  writes nothing\n"), "{report}");
}

#[test]
fn plugins_that_never_write_import_no_cluster_interface() {
    const CLUSTER: &[u8] = b"kinformer:plugin/cluster@";
    let imports_cluster = |bytes: &[u8]| bytes.windows(CLUSTER.len()).any(|window| window == CLUSTER);
    // hpa-controller writes; every other example only reads.
    let readers = || {
        plugin_artifacts::ALL
            .iter()
            .filter(|(file, _)| *file != "hpa-controller.wasm")
    };
    for (file, bytes) in readers() {
        assert!(!imports_cluster(bytes), "{file} imports the cluster interface");
    }
    assert!(imports_cluster(plugin_artifacts::HPA_CONTROLLER));
    assert!(imports_cluster(plugin_artifacts::test_plugin("writer.wasm")));
    // And they load and run as before.
    for (file, _) in readers() {
        let name = file.strip_suffix(".wasm").unwrap();
        let mut instance = kinformer_tests::example(name)
            .instantiate(
                kinformer::caches::Caches::new(),
                kinformer::plugin::PluginOptions::default(),
            )
            .unwrap();
        instance.init("v1/Pod").unwrap();
    }
}
