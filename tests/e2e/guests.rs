//! Plugins written in Python and JavaScript, built from source with their
//! SDK's build, on the churning emulation: the same record of deltas, the same
//! grants and the same hot reload as a Rust plugin.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::BTreeMap;
use std::time::Duration;

use apiserver_sim::ApiServer;
use apiserver_sim::store::{Filter, PatchType, ResourceId};
use apiserver_sim::workload::Workload;
use kinformer::plugin::digest;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::guest::{Language, World, compile_cache, example};
use kinformer_tests::runtime::{
    Generations, Logged, Logs, assert_record_matches_server, caught_up, cluster, listed_status, plugin_status, publish,
    quick_manifest, server_changes, status, until,
};
use plugin_artifacts::variant;
use serde_json::json;

/// The Python example: reports pods in CrashLoopBackOff per deployment and
/// logs every delta at DEBUG as delta-logger does.
fn crashloop_report() -> Vec<u8> {
    example(Language::Python, World::Plugin, "crashloop-report")
}

/// A plugin's deltas as it logged them.
fn record(logs: &Logs, plugin: &str) -> Vec<Logged> {
    logs.of(plugin)
        .iter()
        .filter_map(|line| Logged::parse_delta_logger(line))
        .collect()
}

fn pods() -> ResourceId {
    ResourceId::new("", "v1", "pods")
}

/// The server's pod changes in namespace `namespace` (all when `None`).
fn pod_changes(server: &ApiServer, namespace: Option<&str>) -> BTreeMap<String, Vec<(String, u64)>> {
    let mut changes = server_changes(server, &pods());
    if let Some(namespace) = namespace {
        changes.retain(|key, _| key.starts_with(&format!("{namespace}/")));
    }
    changes
}

/// Waits until the plugin's record holds the last change of these changes.
async fn holds_last(changes: &BTreeMap<String, Vec<(String, u64)>>, mut record: impl FnMut() -> Vec<Logged>) {
    let last = changes.values().flatten().map(|(_, rv)| *rv).max().unwrap();
    until(
        &format!("the plugin to reach rv {last}"),
        Duration::from_secs(30),
        || record().iter().any(|logged| logged.rv == last),
    )
    .await;
}

/// Puts the first pod of deployment `app-0` in `namespace` into
/// CrashLoopBackOff with 7 restarts; returns its name.
/// The copy named `all` recorded every change to the pods, with churn enough
/// to tell, and the copy granted only `namespace` (named after it) recorded
/// exactly that namespace's.
fn assert_records_match_server(server: &ApiServer, logs: &Logs, namespace: &str) {
    let all = record(logs, "all");
    assert!(
        all.iter().filter(|l| !l.initial).count() > 100,
        "too little churn: {all:?}"
    );
    assert_record_matches_server(&all, &pod_changes(server, None));
    let granted = record(logs, namespace);
    assert!(
        granted
            .iter()
            .all(|logged| logged.key.starts_with(&format!("{namespace}/"))),
        "{granted:#?}"
    );
    assert_record_matches_server(&granted, &pod_changes(server, Some(namespace)));
}

fn crash_loop(server: &ApiServer, namespace: &str) -> String {
    let filter = Filter {
        namespace: Some(namespace.to_owned()),
        ..Filter::default()
    };
    let (mut pods_now, _) = server.store().snapshot(&pods(), &filter).unwrap();
    pods_now.retain(|pod| pod.labels.get("app").map(String::as_str) == Some("app-0"));
    let pod = pods_now.first().unwrap();
    let status = json!({"status": {"containerStatuses": [{
        "name": "app", "ready": false, "restartCount": 7,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}}
    }]}});
    server
        .store()
        .patch(&pods(), Some(namespace), &pod.name, PatchType::Merge, status, true)
        .unwrap();
    pod.name.clone()
}

/// Whether `line` reports `pod` as the one pod of `namespace/app-0` stuck.
fn reports_crash_loop(line: &str, namespace: &str, pod: &str) -> bool {
    line.starts_with(&format!("deployment {namespace}/app-0: 1 of "))
        && line.ends_with(&format!(" pods in CrashLoopBackOff: {pod} (7 restarts)"))
}

/// Every update the plugin logged names its old state (`Updated Pod ns/name
/// rv=12 (was rv=11)`), which the plugin asked the host for while handling
/// it: an earlier state of that very object on the server.
fn assert_updates_name_their_old_state(server: &ApiServer, logs: &Logs, plugin: &str) {
    let changes = pod_changes(server, None);
    let mut updates = 0;
    for line in logs.of(plugin) {
        let Some(logged) = Logged::parse_delta_logger(&line).filter(|logged| logged.delta == "Updated") else {
            continue;
        };
        let was: u64 = line
            .split_once(" (was rv=")
            .and_then(|(_, rest)| rest.split_once(')'))
            .and_then(|(rv, _)| rv.parse().ok())
            .unwrap_or_else(|| panic!("{plugin} logged an update without its old state: {line}"));
        let earlier = changes
            .get(&logged.key)
            .is_some_and(|states| states.iter().any(|(_, rv)| *rv == was && was < logged.rv));
        assert!(
            earlier,
            "{plugin}: {line}: rv {was} is no earlier state of {}",
            logged.key
        );
        updates += 1;
    }
    assert!(updates > 0, "{plugin} logged no update");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_plugins_record_what_the_server_did_and_see_only_their_grant() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let component = crashloop_report();
    publish(d, "all.toml", quick_manifest("").as_bytes());
    publish(d, "all.wasm", &component);
    let granted = "[grant]\nresources = [\"v1/Pod\", \"apps/v1/*\"]\nnamespaces = [\"ns-0\"]\n";
    publish(d, "ns-0.toml", format!("{}{granted}", quick_manifest("")).as_bytes());
    publish(d, "ns-0.wasm", &component);
    let workload = Workload::default().seed(7).size(2, 2, 3).changes_per_second(200.0);
    let (server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let config = RuntimeConfig::new(d).log_sink(logs.sink()).cache_dir(compile_cache());
    let runtime = Runtime::start(client, config).await.unwrap();
    until("both Python plugins to run", Duration::from_secs(120), || {
        runtime.all_running()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    churn.abort();

    // A pod of each namespace starts crash-looping: each plugin reports what
    // its grant lets it see.
    let stuck = [crash_loop(&server, "ns-0"), crash_loop(&server, "ns-1")];
    let reports = |plugin: &str| -> Vec<String> {
        let reports = logs
            .of(plugin)
            .into_iter()
            .filter(|line| line.starts_with("deployment "));
        reports.collect()
    };
    until("the reports of the crash loops", Duration::from_secs(20), || {
        reports("all")
            .iter()
            .any(|line| reports_crash_loop(line, "ns-0", &stuck[0]))
            && reports("all")
                .iter()
                .any(|line| reports_crash_loop(line, "ns-1", &stuck[1]))
            && reports("ns-0")
                .iter()
                .any(|line| reports_crash_loop(line, "ns-0", &stuck[0]))
    })
    .await;
    caught_up(&server, &pods(), || record(&logs, "all")).await;
    holds_last(&pod_changes(&server, Some("ns-0")), || record(&logs, "ns-0")).await;
    let statuses = runtime.shutdown().await;

    assert_records_match_server(&server, &logs, "ns-0");
    let granted_reports = reports("ns-0");
    assert_eq!(
        granted_reports.len(),
        1,
        "ns-0 saw more than its grant: {granted_reports:#?}"
    );
    assert!(
        granted_reports
            .iter()
            .all(|line| reports_crash_loop(line, "ns-0", &stuck[0])),
        "{granted_reports:#?}"
    );
    for plugin in ["all", "ns-0"] {
        assert_updates_name_their_old_state(&server, &logs, plugin);
        let status = status(&statuses, plugin);
        assert!(status.refused.is_empty(), "{status:#?}");
        assert_eq!((status.traps, status.errors, status.restarts), (0, 0, 0), "{status:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_is_swapped_like_a_rust_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let versions = [crashloop_report(), variant(&crashloop_report(), 1)];
    publish(d, "py.toml", quick_manifest("").as_bytes());
    publish(d, "py.wasm", &versions[0]);
    let workload = Workload::default().seed(9).size(2, 2, 3).changes_per_second(200.0);
    let (server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let config = RuntimeConfig::new(d).log_sink(logs.sink()).cache_dir(compile_cache());
    let runtime = Runtime::start(client, config).await.unwrap();
    let runs = |version: usize, reloads: u64| {
        listed_status(&runtime, "py").is_some_and(|status| {
            status.running_digest.as_deref() == Some(digest(&versions[version]).as_str())
                && status.reloads >= reloads
                && status.deltas > 100
        })
    };
    until("the first version to run", Duration::from_secs(120), || runs(0, 0)).await;

    publish(d, "py.wasm", &versions[1]);
    // The new version compiles first: an 18 MB component, beside the other
    // tests' compiles on a loaded two-core machine, took over two minutes.
    until("the second version to be swapped in", Duration::from_secs(300), || {
        runs(1, 1)
    })
    .await;
    let handled = plugin_status(&runtime, "py").deltas;
    until("live deltas after the swap", Duration::from_secs(20), || {
        plugin_status(&runtime, "py").deltas > handled + 100
    })
    .await;
    churn.abort();
    caught_up(&server, &pods(), || record(&logs, "py")).await;
    let statuses = runtime.shutdown().await;

    let py = status(&statuses, "py");
    assert_eq!((py.reloads, py.traps, py.rollbacks, py.errors), (1, 0, 0, 0), "{py:#?}");
    let labelled: Vec<(String, Logged)> = record(&logs, "py")
        .into_iter()
        .map(|logged| (String::new(), logged))
        .collect();
    let generations = Generations::of(&labelled);
    assert_eq!(generations.count, 2, "one swap, two generations");
    assert_record_matches_server(&generations.combined, &pod_changes(&server, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_plugins_record_what_the_server_did_and_see_only_their_grant() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let component = example(Language::JavaScript, World::Plugin, "node-budget");
    // Every pod requests 200m: a node with two pods is over the budget.
    publish(d, "all.toml", quick_manifest("millicpu=300").as_bytes());
    publish(d, "all.wasm", &component);
    let granted = "[grant]\nresources = [\"v1/Pod\"]\nnamespaces = [\"ns-1\"]\n";
    publish(
        d,
        "ns-1.toml",
        format!("{}{granted}", quick_manifest("millicpu=300")).as_bytes(),
    );
    publish(d, "ns-1.wasm", &component);
    let workload = Workload::default().seed(13).size(2, 2, 3).changes_per_second(200.0);
    let (server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let config = RuntimeConfig::new(d).log_sink(logs.sink()).cache_dir(compile_cache());
    let runtime = Runtime::start(client, config).await.unwrap();
    until("both JavaScript plugins to run", Duration::from_secs(120), || {
        runtime.all_running()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    churn.abort();
    caught_up(&server, &pods(), || record(&logs, "all")).await;
    holds_last(&pod_changes(&server, Some("ns-1")), || record(&logs, "ns-1")).await;
    let statuses = runtime.shutdown().await;

    assert_records_match_server(&server, &logs, "ns-1");
    // Each report sums the pods a by-index query found on the node.
    let reports: Vec<String> = logs
        .of("all")
        .into_iter()
        .filter(|line| line.starts_with("node "))
        .collect();
    assert!(
        reports.iter().any(|line| line.ends_with("over the budget of 300m")),
        "{reports:#?}"
    );
    for line in &reports {
        let words: Vec<&str> = line.split(' ').collect();
        let pods: u32 = words[2].parse().unwrap();
        assert_eq!(words[5], format!("{}m", pods * 200), "{line}");
    }
    for plugin in ["all", "ns-1"] {
        assert_updates_name_their_old_state(&server, &logs, plugin);
        let status = status(&statuses, plugin);
        assert!(status.refused.is_empty(), "{status:#?}");
        assert_eq!((status.traps, status.errors, status.restarts), (0, 0, 0), "{status:#?}");
    }
}

#[test]
fn a_python_syntax_error_is_reported_as_python_says_it_at_the_file_s_path() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("app.py"),
        "import kinformer\n\nlabels = {\n\nWitWorld = None\n",
    )
    .unwrap();
    let out = project.path().join("broken.wasm");
    let build = std::process::Command::new(kinformer_tests::guest::root().join("guest-sdk/python/build"))
        .arg(project.path())
        .arg(&out)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&build.stderr);
    assert!(!build.status.success(), "a broken plugin does not build: {said}");
    assert!(!out.exists(), "no component is written");
    let app = project.path().join("app.py");
    assert!(said.contains("SyntaxError"), "{said}");
    assert!(said.contains(&format!("\"{}\", line 3", app.display())), "{said}");
    assert!(
        !said.contains("AssertionError") && !said.contains("Stack backtrace"),
        "{said}"
    );
}

/// A plugin in each language handles thousands of 8 KB updates, one call
/// each, in memory that stays flat: whatever a batch crossing into it leaves
/// behind would grow it by about a batch's size every call until it traps at
/// its limit.
#[test]
fn a_guest_plugin_s_memory_stays_flat_over_thousands_of_batches() {
    use std::sync::Arc;

    use kinformer::caches::Caches;
    use kinformer::delta::Delta;
    use kinformer::plugin::PluginOptions;
    use kube::api::GroupVersionKind;

    let gvk = Arc::new(GroupVersionKind::gvk("", "v1", "Pod"));
    let filler = "x".repeat(8000);
    let pod = |rv: usize| {
        kinformer_tests::object(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "shop", "resourceVersion": rv.to_string(),
                         "annotations": {"filler": filler}}
        }))
    };
    for language in [Language::Python, Language::JavaScript] {
        let source = kinformer_tests::guest::root().join(match language {
            Language::Python => "bench/plugins/noop-py",
            Language::JavaScript => "bench/plugins/noop-js",
        });
        let bytes = kinformer_tests::guest::component(language, World::Plugin, &source);
        let mut instance = kinformer_tests::engine()
            .load_bytes("noop", &bytes)
            .unwrap()
            .instantiate(Caches::new(), PluginOptions::default())
            .unwrap();
        instance.init("noop").unwrap();
        let mut old = pod(0);
        let mut memory_at = BTreeMap::new();
        for rv in 1..=4000 {
            let new = pod(rv);
            instance
                .handle(&[Delta::updated(gvk.clone(), old, new.clone())])
                .unwrap();
            old = new;
            if rv % 1000 == 0 {
                memory_at.insert(rv, instance.memory_bytes());
            }
        }
        // 3,000 calls leaving 8 KB each behind would be 24 MB.
        let growth = memory_at[&4000].saturating_sub(memory_at[&1000]);
        assert!(growth < 8 << 20, "{language:?}: linear memory by call: {memory_at:?}");
    }
}
