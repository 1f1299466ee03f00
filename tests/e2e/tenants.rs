//! A tenant's plugin that is slow to load, that grabs indexes or that
//! computes flat out hurts only itself: loads run side by side under their
//! limits, the status endpoint answers from the start, index names belong to
//! the plugin that declared them, and a plugin gets no more than its share of
//! a core.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::time::{Duration, Instant};

use apiserver_sim::workload::Workload;
use kinformer::runtime::{PluginState, Runtime, RuntimeConfig};
use kinformer_tests::runtime::{Logs, cluster, http_get, install, status, until};

/// The plugins as the status endpoint at `address` shows them.
async fn served_status(address: std::net::SocketAddr) -> Option<serde_json::Value> {
    serde_json::from_str(&http_get(address, "/plugins").await?.1).ok()
}

fn state_in(served: &serde_json::Value, name: &str) -> Option<String> {
    served
        .as_array()?
        .iter()
        .find(|plugin| plugin["name"] == name)
        .and_then(|plugin| plugin["state"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_slow_to_load_delays_only_itself_and_fails_at_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Its caches never sync: the server forbids ConfigMaps, as RBAC would.
    install(
        d,
        "stuck",
        "delta-logger.wasm",
        Some("config = \"v1/ConfigMap\"\n[limits]\nsync-timeout-ms = 8000\n"),
    );
    // Its file takes longer to compile than its limit (a few times over, not
    // the tens of seconds of a large plugin whose abandoned compile would
    // starve the neighbour's on a small machine).
    install(
        d,
        "slow",
        "node-watcher.wasm",
        Some("[limits]\ncompile-timeout-ms = 100\n"),
    );
    let (server, churn, client) = cluster(&Workload::default().seed(5).size(1, 1, 3)).await;
    server.faults().forbid("configmaps");
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let logs = Logs::default();
    let config = RuntimeConfig::new(d).log_sink(logs.sink()).status_address(address);
    let started = Instant::now();
    let starting = tokio::spawn(Runtime::start(client, config));

    // The status answers while `stuck` is still loading.
    let mut served = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    while served.is_none() && Instant::now() < deadline {
        served = served_status(address).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let served = served.expect("the status endpoint answers during start-up");
    assert_eq!(state_in(&served, "stuck").as_deref(), Some("Starting"), "{served}");

    // A well-behaved plugin dropped in meanwhile runs within a few seconds.
    let dropped = Instant::now();
    install(d, "pods", "delta-logger.wasm", None);
    let mut running = false;
    while !running && dropped.elapsed() < Duration::from_secs(6) {
        if let Some(served) = served_status(address).await {
            running = state_in(&served, "pods").as_deref() == Some("Running");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        running,
        "the neighbour was not running {:?} after it was dropped in",
        dropped.elapsed()
    );
    assert!(!starting.is_finished(), "start returned before `stuck` was done with");

    let runtime = starting.await.unwrap().unwrap();
    assert!(started.elapsed() >= Duration::from_secs(8));
    let statuses = runtime.status();
    let stuck = status(&statuses, "stuck");
    assert_eq!(stuck.state, PluginState::Failed, "{stuck:#?}");
    let error = stuck.load_error.as_deref().unwrap();
    assert!(
        error.contains("syncing its caches took longer than 8000 ms (limits.sync-timeout-ms)")
            && error.contains("ConfigMap")
            && error.contains("forbidden"),
        "{error}"
    );
    let slow = status(&statuses, "slow");
    assert_eq!(slow.state, PluginState::Failed, "{slow:#?}");
    let error = slow.load_error.as_deref().unwrap();
    assert!(
        error.contains("compiling the plugin file took longer than 100 ms (limits.compile-timeout-ms)"),
        "{error}"
    );
    assert!(!logs.of("pods").is_empty(), "the neighbour handled nothing");
    // Neither failed plugin holds an informer: only the neighbour's runs.
    assert_eq!(runtime.running_informers(), 1);
    runtime.shutdown().await;
    churn.abort();
    server.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_names_belong_to_each_plugin_and_a_plugin_over_its_index_limit_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Declares `node` first (by name order), on another field.
    install(d, "a-squatter", "hostile.wasm", Some("config = \"squat\"\n"));
    install(d, "node-watcher", "node-watcher.wasm", None);
    install(d, "hoarder", "hostile.wasm", Some("config = \"indexes=17\"\n"));
    let (server, churn, client) = cluster(&Workload::default().seed(6).size(1, 2, 3)).await;
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();

    until("the squatter and node-watcher to run", Duration::from_secs(10), || {
        let statuses = runtime.status();
        ["a-squatter", "node-watcher"]
            .iter()
            .all(|name| status(&statuses, name).state == PluginState::Running)
    })
    .await;
    let statuses = runtime.status();
    let hoarder = status(&statuses, "hoarder");
    assert_eq!(hoarder.state, PluginState::Failed, "{hoarder:#?}");
    assert!(
        hoarder
            .load_error
            .as_deref()
            .unwrap()
            .contains("17 indexes, over the limit of 16 (limits.max-indexes)"),
        "{hoarder:#?}"
    );
    // node-watcher's `node` is its own: by node name, not by the squatter's field.
    until("node-watcher to count pods by node", Duration::from_secs(20), || {
        logs.of("node-watcher")
            .iter()
            .any(|line| line.contains(" pods on node-"))
    })
    .await;
    runtime.shutdown().await;
    churn.abort();
    server.shutdown();
}

#[test]
fn check_reports_what_a_plugin_would_hit_of_its_limits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    install(d, "hoarder", "hostile.wasm", Some("config = \"indexes=17\"\n"));
    let report = kinformer_cli::check::check(&d.join("hoarder.wasm"), None)
        .unwrap()
        .to_string();
    assert!(report.contains("(limit 134217728), compiled in "), "{report}");
    assert!(
        report.contains("1 subscriptions (limit 16), 17 indexes (limit 16)"),
        "{report}"
    );
    assert!(
        report.contains("OVER LIMITS: 17 indexes, over the limit of 16 (limits.max-indexes)"),
        "{report}"
    );
    assert!(!report.contains("HANDLES NOTHING"), "{report}");

    // The delta logger watches Pods unless its config says otherwise: a
    // grant of ConfigMaps alone leaves it nothing to handle.
    install(
        d,
        "idle",
        "delta-logger.wasm",
        Some("[grant]\nresources = [\"v1/ConfigMap\"]\n"),
    );
    let report = kinformer_cli::check::check(&d.join("idle.wasm"), None)
        .unwrap()
        .to_string();
    assert!(report.contains("REFUSED v1 Pod: not granted"), "{report}");
    assert!(
        report.contains("HANDLES NOTHING: it subscribes to nothing it may watch"),
        "{report}"
    );

    std::fs::write(d.join("huge.wasm"), vec![0_u8; 2 << 20]).unwrap();
    std::fs::write(d.join("huge.toml"), "[limits]\nmodule-mib = 1\n").unwrap();
    let error = kinformer_cli::check::check(&d.join("huge.wasm"), None).unwrap_err();
    let message = format!("{error:#}");
    assert!(
        message.contains("limits.module-mib") && message.contains("over the limit of 1048576 bytes"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_computing_flat_out_is_paused_to_its_cpu_share_and_its_call_ends_on_its_own_running_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 300 ms of running at a tenth of a core: about 30 windows, each paused
    // for 90 ms after its 10 ms.
    install(
        d,
        "spinner",
        "hostile.wasm",
        Some(
            "config = \"loop\"\n[limits]\ncall-timeout-ms = 300\ncpu-millicores = 100\n[failures]\nmax-restarts = 100\n",
        ),
    );
    install(d, "pods", "delta-logger.wasm", None);
    let (_server, _churn, client) = cluster(&Workload::default().seed(9).size(1, 2, 3)).await;
    let logs = Logs::default();
    let started = Instant::now();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();
    until("the spinner's first trap", Duration::from_secs(30), || {
        status(&runtime.status(), "spinner").traps >= 1
    })
    .await;
    let spinner = status(&runtime.status(), "spinner").clone();
    // Alone on a core it would pause about 2.7 s; a busy machine runs it
    // slower, and so pauses it less.
    assert!(
        spinner.cpu_paused_ms >= 500,
        "paused only {} ms in a call that ran 300 ms at a tenth of a core",
        spinner.cpu_paused_ms
    );
    assert!(
        started.elapsed() >= Duration::from_millis(spinner.cpu_paused_ms),
        "the pauses were given back to its deadline"
    );
    let pods = status(&runtime.status(), "pods").clone();
    assert_eq!(pods.state, PluginState::Running);
    assert!(pods.deltas > 0 && pods.cpu_paused_ms == 0, "{pods:?}");
    runtime.shutdown().await;
}
