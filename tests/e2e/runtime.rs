//! The plugin runtime end to end: real components from `plugins/` and
//! `test-plugins/`, the emulated API server with churn, the real kube-rs client.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiserver_sim::store::ResourceId;
use apiserver_sim::workload::Workload;
use apiserver_sim::{ApiServer, SimConfig};
use kinformer::delta::Delta;
use kinformer::runtime::{BatchObserver, PluginState, Runtime, RuntimeConfig};
use kinformer_tests::runtime::{
    Logged, Logs, assert_record_matches_server, caught_up, cluster, install, server_changes, status, until,
};
use serde_json::json;

/// A plugin's deltas as delta-logger logs them.
fn record(logs: &Logs, plugin: &str) -> Vec<Logged> {
    logs.of(plugin)
        .iter()
        .filter_map(|line| Logged::parse_delta_logger(line))
        .collect()
}

const RECORDER: &str = "[limits]\nlog-lines-per-second = 1000000\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_plugin_records_exactly_what_the_server_did() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = |config: &str| format!("config = \"{config}\"\n{RECORDER}");
    install(dir.path(), "pods", "delta-logger.wasm", Some(&recorder("v1/Pod")));
    install(
        dir.path(),
        "hpas",
        "delta-logger.wasm",
        Some(&recorder("autoscaling/v2/HorizontalPodAutoscaler")),
    );
    // Watches HPAs, reads pods by label selector from the cache and their
    // usage from the metrics API, under its own manifest's grant.
    let advisor_manifest = format!(
        "{}\n{RECORDER}",
        include_str!("../../plugins/hpa-advisor/manifest.toml")
    );
    install(dir.path(), "hpa-advisor", "hpa-advisor.wasm", Some(&advisor_manifest));
    let workload = Workload::default().seed(7).size(3, 2, 3).changes_per_second(300.0);
    let (server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let config = RuntimeConfig::new(dir.path()).log_sink(logs.sink());
    let runtime = Runtime::start(client, config).await.unwrap();

    tokio::time::sleep(Duration::from_secs(3)).await;
    churn.abort();
    let pods = ResourceId::new("", "v1", "pods");
    let hpas = ResourceId::new("autoscaling", "v2", "horizontalpodautoscalers");
    caught_up(&server, &pods, || record(&logs, "pods")).await;
    caught_up(&server, &hpas, || record(&logs, "hpas")).await;
    let statuses = runtime.shutdown().await;

    let pod_record = record(&logs, "pods");
    assert!(
        pod_record.iter().filter(|l| !l.initial).count() > 100,
        "too little churn: {pod_record:?}"
    );
    assert_record_matches_server(&pod_record, &server_changes(&server, &pods));
    let hpa_record = record(&logs, "hpas");
    assert_record_matches_server(&hpa_record, &server_changes(&server, &hpas));

    // The advisor evaluated every HPA delta it got, each from a cache query.
    let advice = logs.of("hpa-advisor");
    let advisor = status(&statuses, "hpa-advisor");
    assert_eq!(advice.len() as u64, advisor.deltas, "{advice:#?}");
    assert!(
        advice.iter().any(|line| line.contains("ready pods of deployment")),
        "{advice:#?}"
    );
    for plugin in ["pods", "hpas", "hpa-advisor"] {
        let status = status(&statuses, plugin);
        assert_eq!(status.state, PluginState::Stopped, "{status:#?}");
        assert_eq!((status.traps, status.errors, status.restarts), (0, 0, 0), "{status:#?}");
    }
    assert_eq!(status(&statuses, "pods").deltas as usize, pod_record.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plugins_are_contained_and_a_neighbour_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fast_failures = "restart-backoff-ms = 20\nmax-restarts = 2\nrestart-window-seconds = 600\n";
    install(
        d,
        "pods",
        "delta-logger.wasm",
        Some(&format!("config = \"v1/Pod\"\n{RECORDER}")),
    );
    install(
        d,
        "loop",
        "hostile.wasm",
        Some(&format!(
            "config = \"loop\"\n[limits]\ncall-timeout-ms = 100\n[failures]\n{fast_failures}"
        )),
    );
    install(
        d,
        "sleep",
        "hostile.wasm",
        Some(&format!(
            "config = \"sleep\"\n[limits]\ncall-timeout-ms = 100\n[failures]\n{fast_failures}"
        )),
    );
    install(
        d,
        "bomb",
        "hostile.wasm",
        Some(&format!(
            "config = \"bomb\"\n[limits]\nmemory-mib = 16\n[failures]\n{fast_failures}"
        )),
    );
    install(
        d,
        "trap",
        "hostile.wasm",
        Some(&format!("config = \"trap-every-3rd\"\n[failures]\n{fast_failures}")),
    );
    install(
        d,
        "reject",
        "hostile.wasm",
        Some("config = \"reject\"\n[failures]\nretries = 2\nretry-backoff-ms = 5\n"),
    );
    install(
        d,
        "huge",
        "hostile.wasm",
        Some("config = \"huge-queries\"\n[limits]\nquery-objects = 5\n"),
    );
    install(d, "nonsense", "hostile.wasm", Some("config = \"nonsense\"\n"));
    install(d, "print", "hostile.wasm", Some("config = \"print\"\n"));
    install(d, "refuse", "hostile.wasm", Some("config = \"refuse\"\n"));
    install(
        d,
        "broken-manifest",
        "delta-logger.wasm",
        Some("[limits]\nmemory = 1\n"),
    );
    std::fs::write(d.join("corrupt.wasm"), b"\0asm\x0d\0\x01\0garbage").unwrap();

    let workload = Workload::default().seed(3).size(2, 2, 3).changes_per_second(150.0);
    let (server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();
    until("the failing plugins to be quarantined", Duration::from_secs(30), || {
        let statuses = runtime.status();
        ["loop", "sleep", "bomb", "trap"]
            .iter()
            .all(|name| status(&statuses, name).state == PluginState::Quarantined)
    })
    .await;
    churn.abort();
    let pods = ResourceId::new("", "v1", "pods");
    caught_up(&server, &pods, || record(&logs, "pods")).await;
    let statuses = runtime.shutdown().await;

    // The neighbour got every change, in order, none twice.
    assert_record_matches_server(&record(&logs, "pods"), &server_changes(&server, &pods));
    let neighbour = status(&statuses, "pods");
    assert_eq!((neighbour.traps, neighbour.restarts), (0, 0), "{neighbour:#?}");

    // Deadline overruns, memory exhaustion and traps: restarted, then quarantined.
    // A sleep (a blocking WASI call) is bounded by the deadline like a loop.
    for (name, cause) in [
        ("loop", "interrupt"),
        ("sleep", "past the call's deadline"),
        ("bomb", "memory"),
        ("trap", "unreachable"),
    ] {
        let status = status(&statuses, name);
        assert_eq!(status.state, PluginState::Quarantined, "{status:#?}");
        assert_eq!((status.traps, status.restarts), (3, 2), "{status:#?}");
        let error = status.last_error.as_deref().unwrap_or_default();
        assert!(error.contains(cause), "{name}: {error}");
        assert!(
            !error.contains("wasm backtrace"),
            "the backtrace is for the debug log: {error}"
        );
    }
    // The trap says the plugin's own account first: its panic message.
    let error = status(&statuses, "trap").last_error.clone().unwrap_or_default();
    assert!(
        error.contains("trapped in handle: panicked at") && error.contains("trapping on delta 3"),
        "{error}"
    );
    // Each fresh instance of the trapping plugin started from its initial list
    // and trapped on its 3rd delta; the panic messages reached its log through
    // stderr.
    let trap = logs.of("trap");
    let panics = trap.iter().filter(|line| line.contains("trapping on delta 3")).count();
    assert_eq!(panics, 3, "{trap:#?}");

    // Rejected batches: each delivered three times, then skipped.
    let reject = status(&statuses, "reject");
    assert!(
        reject.errors >= 3 && reject.errors == reject.retries + reject.errors / 3,
        "{reject:#?}"
    );
    assert!(reject.skipped >= 1 && reject.traps == 0, "{reject:#?}");

    // Huge queries are cut at the manifest's limit.
    let huge = logs.of("huge");
    assert!(
        huge.iter()
            .any(|line| line.starts_with("huge query: 5 objects") && line.contains("truncated=true")),
        "{huge:#?}"
    );
    // Nonsense gets error values, never a host panic.
    let nonsense = logs.of("nonsense");
    assert_eq!(
        nonsense.first().map(String::as_str),
        Some(
            "nonsense: empty-key=invalid-argument huge-key=invalid-argument empty-gvk=not-cached \
             huge-kind=invalid-argument bad-selector=invalid-argument huge-selector=invalid-argument \
             unknown-index=unknown-index control-chars=unknown-index huge-index=invalid-argument"
        ),
        "{nonsense:#?}"
    );
    assert_eq!(status(&statuses, "nonsense").traps, 0);
    // What a plugin prints lands in its log.
    let printed = logs.of("print");
    assert!(
        printed.iter().any(|line| line.starts_with("printed ns-")),
        "{printed:#?}"
    );
    assert!(
        printed.iter().any(|line| line.starts_with("complained about ns-")),
        "{printed:#?}"
    );

    // Plugins that cannot start are reported, not run.
    for (name, cause) in [
        ("refuse", "refusing to start, as configured"),
        (
            "broken-manifest",
            "broken-manifest.toml: line 2, column 1: unknown field `memory`",
        ),
        ("corrupt", "corrupt.wasm: not a loadable WebAssembly component"),
    ] {
        let status = status(&statuses, name);
        assert_eq!(status.state, PluginState::Failed, "{status:#?}");
        assert_eq!(status.running_digest, None);
        assert_eq!(status.rejected_digest, status.desired_digest);
        let error = status.load_error.as_deref().unwrap_or_default();
        assert!(error.contains(cause), "{name}: {error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_granted_one_namespace_sees_nothing_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    install(
        d,
        "spy",
        "hostile.wasm",
        Some(&format!(
            "config = \"spy=ns-1\"\n[grant]\nresources = [\"v1/Pod\"]\nnamespaces = [\"ns-0\"]\n{RECORDER}"
        )),
    );
    // Secrets are not in the default grant: the subscription and its index are refused.
    install(d, "secrets", "hostile.wasm", Some("config = \"spy=ns-1:v1/Secret\"\n"));
    // A grant without pods refuses the pod subscription.
    install(
        d,
        "no-pods",
        "delta-logger.wasm",
        Some("config = \"v1/Pod\"\n[grant]\nresources = [\"apps/v1/*\"]\n"),
    );
    let workload = Workload::default().seed(5).size(2, 2, 3).changes_per_second(100.0);
    let (_server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();
    until("the spy to see live deltas", Duration::from_secs(20), || {
        logs.of("spy").iter().filter(|line| line.starts_with("delta ")).count() > 30
    })
    .await;
    churn.abort();
    let statuses = runtime.shutdown().await;

    let spy = logs.of("spy");
    let deltas: BTreeSet<&str> = spy.iter().filter_map(|line| line.strip_prefix("delta ")).collect();
    assert!(deltas.iter().all(|key| key.starts_with("ns-0/")), "{deltas:#?}");
    let probes: Vec<&String> = spy.iter().filter(|line| line.starts_with("spy: ")).collect();
    assert!(!probes.is_empty());
    for probe in probes {
        assert_eq!(
            probe,
            "spy: get=denied list-namespaces={\"ns-0\"} list-in=denied by-index=0 namespace-values=[\"ns-0\"]"
        );
    }

    // The host listed and watched ns-0 alone for it: nothing of ns-1 (which
    // the churn changes too) reached its queue to be hidden there.
    assert_eq!(status(&statuses, "spy").outside_grant, 0);
    assert_eq!(status(&statuses, "no-pods").outside_grant, 0);

    let secrets = status(&statuses, "secrets");
    assert_eq!(secrets.refused.len(), 2, "{secrets:#?}");
    assert!(secrets.refused[0].contains("v1 Secret: not granted"), "{secrets:#?}");
    assert_eq!(secrets.deltas, 0);
    let no_pods = status(&statuses, "no-pods");
    assert_eq!(no_pods.refused, ["v1 Pod: not granted"]);
    assert_eq!(no_pods.deltas, 0);
    assert!(logs.of("no-pods").is_empty());

    // `kinformer check` reviews each plugin as the runtime did.
    for name in ["spy", "secrets", "no-pods"] {
        let report = kinformer_cli::check::check(&d.join(format!("{name}.wasm")), None).unwrap();
        let refused: Vec<String> = report.review.refused.iter().map(ToString::to_string).collect();
        assert_eq!(
            refused,
            status(&statuses, name).refused,
            "{name}: check and run disagree"
        );
    }
    let spy = kinformer_cli::check::check(&d.join("spy.wasm"), None)
        .unwrap()
        .to_string();
    assert!(spy.contains("sees namespaces ns-0 only"), "{spy}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_arriving_within_the_batch_window_share_one_call() {
    let dir = tempfile::tempdir().unwrap();
    install(
        dir.path(),
        "gathered",
        "delta-logger.wasm",
        Some("config = \"v1/ConfigMap\"\n[limits]\nbatch-window-ms = 100\n"),
    );
    install(
        dir.path(),
        "at-once",
        "delta-logger.wasm",
        Some("config = \"v1/ConfigMap\"\n[limits]\nbatch-window-ms = 0\n"),
    );
    // No controllers: the ConfigMaps are the test's own, no namespace's kube-root-ca.crt.
    let server = ApiServer::start(SimConfig::default().controllers(false)).await.unwrap();
    let client = kube::Client::try_from(server.client_config()).unwrap();
    let configmaps = ResourceId::new("", "v1", "configmaps");
    server
        .store()
        .create(
            &ResourceId::new("", "v1", "namespaces"),
            None,
            json!({"metadata": {"name": "a"}}),
        )
        .unwrap();
    let batches: Arc<Mutex<BTreeMap<String, Vec<Vec<String>>>>> = Arc::default();
    let seen = Arc::clone(&batches);
    let observer: BatchObserver = Arc::new(move |plugin: &str, batch: &[Delta]| {
        let names = batch.iter().map(|delta| delta.object.name().to_owned()).collect();
        seen.lock().unwrap().entry(plugin.to_owned()).or_default().push(names);
    });
    let config = RuntimeConfig::new(dir.path()).watch(false).observer(observer);
    let runtime = Runtime::start(client, config).await.unwrap();
    until("both plugins running", Duration::from_secs(30), || {
        runtime.all_running()
    })
    .await;
    let handed = |plugin: &str, name: &str| {
        batches
            .lock()
            .unwrap()
            .get(plugin)
            .is_some_and(|batches| batches.iter().flatten().any(|handed| handed == name))
    };
    let create = |name: &str| {
        server
            .store()
            .create(&configmaps, Some("a"), json!({"metadata": {"name": name}}))
            .unwrap();
    };

    create("first");
    until("the first change handled", Duration::from_secs(10), || {
        handed("gathered", "first") && handed("at-once", "first")
    })
    .await;
    // Three changes 15 ms apart, right after a call: within a 100 ms window.
    for name in ["second", "third", "fourth"] {
        create(name);
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    until("the later changes handled", Duration::from_secs(10), || {
        handed("gathered", "fourth") && handed("at-once", "fourth")
    })
    .await;
    runtime.shutdown().await;

    let batches = batches.lock().unwrap();
    let later = |plugin: &str| -> Vec<Vec<String>> {
        batches[plugin]
            .iter()
            .filter(|batch| batch.iter().any(|name| name != "first"))
            .cloned()
            .collect()
    };
    assert_eq!(later("gathered"), [["second", "third", "fourth"]], "{batches:?}");
    // Without a window each change is handed out as it arrives (unless the
    // worker was kept from running for longer than the changes' spacing).
    assert!(later("at-once").len() > 1, "{batches:?}");
}
