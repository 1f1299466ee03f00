//! The status address's probes and Prometheus metrics: `/readyz` waits for the
//! caches, `/metrics` parses as Prometheus text and its counters follow the
//! deltas, traps, reloads, reconciles and writes the runtime sees.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::time::Duration;

use apiserver_sim::workload::Workload;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::runtime::{FLOOD_MANIFEST, cluster, http_get as get, install, publish, quick_manifest, until};
use prometheus_parse::{Scrape, Value};

/// `/metrics`, parsed.
async fn scrape(address: std::net::SocketAddr) -> Scrape {
    let (code, body) = get(address, "/metrics").await.expect("the metrics endpoint answers");
    assert_eq!(code, 200);
    Scrape::parse(body.lines().map(|line| Ok(line.to_owned()))).expect("the metrics parse as Prometheus text")
}

/// The value of the series `name` whose labels include `labels`; `None` when
/// there is none.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .filter(|sample| sample.metric == name)
        .find(|sample| labels.iter().all(|(key, value)| sample.labels.get(key) == Some(*value)))
        .map(|sample| match &sample.value {
            Value::Counter(value) | Value::Gauge(value) | Value::Untyped(value) => *value,
            Value::Histogram(buckets) => buckets.last().map_or(0.0, |bucket| bucket.count),
            Value::Summary(_) => f64::NAN,
        })
}

fn of(scrape: &Scrape, name: &str, plugin: &str) -> f64 {
    value(scrape, name, &[("plugin", plugin)]).unwrap_or_else(|| panic!("no {name} for plugin {plugin}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_the_caches_and_the_metrics_follow_what_the_plugins_do() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    install(d, "pods", "delta-logger.wasm", Some("config = \"v1/Pod\"\n"));
    install(
        d,
        "deployments",
        "delta-logger.wasm",
        Some("config = \"apps/v1/Deployment\"\n"),
    );
    install(
        d,
        "trapper",
        "hostile.wasm",
        Some(&quick_manifest("trap-every-3rd").replace("[failures]\n", "[failures]\nmax-restarts = 1000\n")),
    );
    install(d, "flood", "writer.wasm", Some(FLOOD_MANIFEST));
    install(d, "rs", "reconciler.wasm", Some("config = \"rs\"\n"));
    let workload = Workload::default().seed(5).size(2, 2, 3).changes_per_second(50.0);
    let (server, churn, client) = cluster(&workload).await;
    // Deployments cannot be listed yet: the `deployments` plugin waits for its cache.
    server.faults().forbid("deployments");
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = RuntimeConfig::new(d).status_address(address);
    let starting = tokio::spawn(Runtime::start(client, config));

    // Not ready while the Deployment cache cannot sync: wait until the server
    // has refused its list, then ask.
    until(
        "the Deployment informer never tried to list",
        Duration::from_secs(60),
        || server.stats().faults.failed_requests >= 1,
    )
    .await;
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(get(address, "/readyz").await.map(|(code, _)| code));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(codes, [Some(503); 3], "ready while a cache had not synced");
    assert_eq!(get(address, "/healthz").await.map(|(code, _)| code), Some(200));
    server.faults().allow("deployments");
    let runtime = starting.await.unwrap().unwrap();
    let mut ready = None;
    for _ in 0..500 {
        ready = get(address, "/readyz").await.map(|(code, _)| code);
        if ready == Some(200) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready, Some(200), "never ready once the caches could sync");

    // Counters move as the plugins work.
    let first = scrape(address).await;
    let before = of(&first, "kinformer_plugin_deltas_total", "pods");
    let progressed = || {
        let status = runtime.status();
        let of = |name: &str| status.iter().find(|s| s.name == name).unwrap().clone();
        of("pods").deltas as f64 > before
            && of("trapper").traps > 1
            && of("flood").writes > 0
            && of("rs").reconciles > 0
    };
    for _ in 0..300 {
        if progressed() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let summary: Vec<_> = runtime
        .status()
        .into_iter()
        .map(|s| {
            (
                s.name,
                s.state,
                s.deltas,
                s.traps,
                s.writes,
                s.write_errors,
                s.reconciles,
                s.load_error,
            )
        })
        .collect();
    assert!(progressed(), "not every plugin progressed: {summary:#?}");
    // Once the churn stops, the informer's gauge comes to what the server
    // holds (while it churns, either may be a replacement behind).
    churn.abort();
    let pods = apiserver_sim::store::ResourceId::new("", "v1", "pods");
    let mut later = scrape(address).await;
    for _ in 0..100 {
        let cached = value(&later, "kinformer_informer_objects", &[("kind", "Pod")]);
        if cached == Some(server.store().count(&pods) as f64) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        later = scrape(address).await;
    }
    assert!(of(&later, "kinformer_plugin_deltas_total", "pods") > before);
    assert!(of(&later, "kinformer_plugin_traps_total", "trapper") >= 2.0);
    assert!(of(&later, "kinformer_plugin_restarts_total", "trapper") >= 1.0);
    assert!(
        value(
            &later,
            "kinformer_plugin_writes_total",
            &[("plugin", "flood"), ("verb", "patch"), ("outcome", "ok")]
        )
        .unwrap()
            >= 1.0
    );
    assert!(of(&later, "kinformer_plugin_handle_duration_seconds", "pods") >= 1.0);
    assert!(
        of(&later, "kinformer_plugin_memory_bytes", "pods") >= 65536.0,
        "one Wasm page at least"
    );
    assert_eq!(
        value(
            &later,
            "kinformer_plugin_state",
            &[("plugin", "pods"), ("state", "Running")]
        ),
        Some(1.0)
    );
    assert!(value(&later, "workqueue_adds_total", &[("name", "rs")]).unwrap() >= 1.0);
    assert!(value(&later, "workqueue_work_duration_seconds", &[("name", "rs")]).unwrap() >= 1.0);
    assert_eq!(
        value(&later, "kinformer_informer_objects", &[("kind", "Pod")]),
        Some(server.store().count(&pods) as f64),
        "the Pod informer's gauge against the server's pods"
    );
    assert_eq!(
        value(&later, "kinformer_informer_synced", &[("kind", "Deployment")]),
        Some(1.0)
    );
    assert!(
        value(
            &later,
            "kinformer_informer_watch_restarts_total",
            &[("kind", "Deployment")]
        )
        .unwrap()
            >= 1.0
    );
    assert!(value(&later, "leader_election_master_status", &[]).is_none());

    // A reload is counted.
    assert_eq!(of(&later, "kinformer_plugin_reloads_total", "pods"), 0.0);
    publish(
        d,
        "pods.wasm",
        &plugin_artifacts::variant(plugin_artifacts::DELTA_LOGGER, 1),
    );
    runtime.rescan().await;
    until("the new version never swapped in", Duration::from_secs(30), || {
        runtime.status().iter().any(|s| s.name == "pods" && s.reloads == 1)
    })
    .await;
    let reloaded = scrape(address).await;
    assert_eq!(of(&reloaded, "kinformer_plugin_reloads_total", "pods"), 1.0);
    drop(runtime.shutdown().await);
}
