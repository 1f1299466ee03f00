//! The plugin runtime end to end: real components from `plugins/` and
//! `test-plugins/`, the emulated API server with churn, the real kube-rs client.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinformer::plugin::LogSink;
use kinformer::runtime::{PluginState, PluginStatus, Runtime, RuntimeConfig};
use kinformer::sim::store::{EventType, ResourceId};
use kinformer::sim::workload::Workload;
use kinformer::sim::{ApiServer, SimConfig};

/// Every log line of every plugin, in the order each plugin wrote them.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<(String, String)>>>);

impl Logs {
    fn sink(&self) -> LogSink {
        let lines = Arc::clone(&self.0);
        Arc::new(move |plugin, line| {
            lines.lock().unwrap().push((plugin.to_owned(), line.message.clone()));
        })
    }

    fn of(&self, plugin: &str) -> Vec<String> {
        let lines = self.0.lock().unwrap();
        lines
            .iter()
            .filter(|(name, _)| name == plugin)
            .map(|(_, line)| line.clone())
            .collect()
    }
}

/// Writes plugin `file` (a component of `plugin_artifacts`) into `dir` as
/// `name.wasm`, with `manifest` as `name.toml` when given.
fn install(dir: &Path, name: &str, file: &str, manifest: Option<&str>) {
    let (_, bytes) = plugin_artifacts::ALL
        .iter()
        .chain(plugin_artifacts::TEST_PLUGINS)
        .find(|(artifact, _)| *artifact == file)
        .unwrap_or_else(|| panic!("no plugin {file}"));
    std::fs::write(dir.join(format!("{name}.wasm")), bytes).unwrap();
    if let Some(manifest) = manifest {
        std::fs::write(dir.join(format!("{name}.toml")), manifest).unwrap();
    }
}

async fn cluster(workload: &Workload) -> (ApiServer, tokio::task::JoinHandle<()>, kube::Client) {
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let churn = server.start_workload(workload).unwrap();
    let client = kube::Client::try_from(server.client_config()).unwrap();
    (server, churn, client)
}

async fn until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn status<'a>(statuses: &'a [PluginStatus], name: &str) -> &'a PluginStatus {
    statuses
        .iter()
        .find(|status| status.name == name)
        .unwrap_or_else(|| panic!("no plugin {name}"))
}

/// One delta as delta-logger logs it: `Added Pod ns/name rv=12 (initial list)`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Logged {
    delta: String,
    key: String,
    rv: u64,
    initial: bool,
}

fn parse_logged(line: &str) -> Option<Logged> {
    let mut words = line.split(' ');
    let delta = words.next()?.to_owned();
    let _kind = words.next()?;
    let key = words.next()?.to_owned();
    let rv = words.next()?.strip_prefix("rv=")?.parse().ok()?;
    Some(Logged {
        delta,
        key,
        rv,
        initial: line.ends_with("(initial list)"),
    })
}

/// The server's changes of a resource, per object: (delta type, resourceVersion).
fn server_changes(server: &ApiServer, resource: &ResourceId) -> BTreeMap<String, Vec<(String, u64)>> {
    let (events, _) = server.store().events_after(resource, 0, usize::MAX).unwrap();
    let mut changes: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
    for event in events {
        let delta = match event.event_type {
            EventType::Added => "Added",
            EventType::Modified => "Updated",
            EventType::Deleted => "Deleted",
        };
        changes
            .entry(event.object.key.clone())
            .or_default()
            .push((delta.to_owned(), event.resource_version));
    }
    changes
}

/// Asserts that a plugin's record of deltas is what the server did: per object,
/// the initial state (if any) then every later change, in order, none missing
/// and none twice; and no change after the record's live start is absent.
fn assert_record_matches_server(record: &[Logged], server: &BTreeMap<String, Vec<(String, u64)>>) {
    let mut per_key: BTreeMap<&str, Vec<&Logged>> = BTreeMap::new();
    for logged in record {
        per_key.entry(&logged.key).or_default().push(logged);
    }
    for (key, seen) in &per_key {
        let changes = server
            .get(*key)
            .unwrap_or_else(|| panic!("{key}: never changed on the server"));
        let first = seen[0];
        let start = changes
            .iter()
            .position(|(_, rv)| *rv == first.rv)
            .unwrap_or_else(|| panic!("{key}: rv {} is no change of the server: {changes:?}", first.rv));
        let (expected, live): (&[(String, u64)], &[&Logged]) = if first.initial {
            assert_eq!(first.delta, "Added", "{key}: {first:?}");
            (&changes[start + 1..], &seen[1..])
        } else {
            (&changes[start..], &seen[..])
        };
        assert!(live.iter().all(|logged| !logged.initial), "{key}: {seen:?}");
        let live: Vec<(String, u64)> = live.iter().map(|l| (l.delta.clone(), l.rv)).collect();
        assert_eq!(live, expected, "{key}: the plugin's changes differ from the server's");
    }
    let first_live = record
        .iter()
        .filter(|l| !l.initial)
        .map(|l| l.rv)
        .min()
        .unwrap_or(u64::MAX);
    for (key, changes) in server {
        if changes.iter().any(|(_, rv)| *rv >= first_live) {
            assert!(
                per_key.contains_key(key.as_str()),
                "{key}: changed after rv {first_live} but never delivered"
            );
        }
    }
}

fn record(logs: &Logs, plugin: &str) -> Vec<Logged> {
    logs.of(plugin).iter().filter_map(|line| parse_logged(line)).collect()
}

/// Waits until `plugin` logged the server's latest change of `resource`.
async fn caught_up(server: &ApiServer, logs: &Logs, plugin: &str, resource: &ResourceId) {
    let last = server_changes(server, resource)
        .values()
        .flatten()
        .map(|(_, rv)| *rv)
        .max()
        .unwrap();
    until(&format!("{plugin} to reach rv {last}"), Duration::from_secs(20), || {
        record(logs, plugin).iter().any(|logged| logged.rv == last)
    })
    .await;
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
    // Watches HPAs and reads pods by label selector from the cache.
    install(dir.path(), "hpa-advisor", "hpa-advisor.wasm", Some(RECORDER));
    let workload = Workload::default().seed(7).size(3, 2, 3).changes_per_second(300.0);
    let (server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let config = RuntimeConfig::new(dir.path()).log_sink(logs.sink());
    let runtime = Runtime::start(client, config).await.unwrap();

    tokio::time::sleep(Duration::from_secs(3)).await;
    churn.abort();
    let pods = ResourceId::new("", "v1", "pods");
    let hpas = ResourceId::new("autoscaling", "v2", "horizontalpodautoscalers");
    caught_up(&server, &logs, "pods", &pods).await;
    caught_up(&server, &logs, "hpas", &hpas).await;
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
        ["loop", "bomb", "trap"]
            .iter()
            .all(|name| status(&statuses, name).state == PluginState::Quarantined)
    })
    .await;
    churn.abort();
    let pods = ResourceId::new("", "v1", "pods");
    caught_up(&server, &logs, "pods", &pods).await;
    let statuses = runtime.shutdown().await;

    // The neighbour got every change, in order, none twice.
    assert_record_matches_server(&record(&logs, "pods"), &server_changes(&server, &pods));
    let neighbour = status(&statuses, "pods");
    assert_eq!((neighbour.traps, neighbour.restarts), (0, 0), "{neighbour:#?}");

    // Deadline overruns, memory exhaustion and traps: restarted, then quarantined.
    for (name, cause) in [("loop", "interrupt"), ("bomb", "memory"), ("trap", "unreachable")] {
        let status = status(&statuses, name);
        assert_eq!(status.state, PluginState::Quarantined, "{status:#?}");
        assert_eq!((status.traps, status.restarts), (3, 2), "{status:#?}");
        let error = status.last_error.as_deref().unwrap_or_default();
        assert!(error.contains(cause), "{name}: {error}");
    }
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
        let error = status.last_error.as_deref().unwrap_or_default();
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

    let secrets = status(&statuses, "secrets");
    assert_eq!(secrets.refused.len(), 2, "{secrets:#?}");
    assert!(secrets.refused[0].contains("v1 Secret: not granted"), "{secrets:#?}");
    assert_eq!(secrets.deltas, 0);
    let no_pods = status(&statuses, "no-pods");
    assert_eq!(no_pods.refused, ["v1 Pod: not granted"]);
    assert_eq!(no_pods.deltas, 0);
    assert!(logs.of("no-pods").is_empty());
}
