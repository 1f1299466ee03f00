//! Next versions beside running ones (`NAME.next.wasm`): a canary owns its
//! stable share of the keys, each change reconciled by exactly one version; a
//! next version that errors more than the running one is rolled back and
//! hands every key back; a shadow's writes reach the server as dry runs only
//! and are compared with the running version's.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use apiserver_sim::store::{Filter, ListOptions, ResourceId};
use apiserver_sim::workload::Workload;
use apiserver_sim::{ApiServer, SimConfig};
use kinformer::plugin::digest;
use kinformer::rollout::next_owns;
use kinformer::runtime::{PluginState, Runtime, RuntimeConfig};
use kinformer_tests::runtime::{
    Logged, Logs, assert_record_matches_server, caught_up, cluster, install, plugin_status, publish, quick_manifest,
    server_changes, until,
};

use super::hpa::{deployments, quiet, replicas, rescale_events, under_load};
use plugin_artifacts::variant;
use serde_json::json;

const KEYS: usize = 200;

fn config_maps() -> ResourceId {
    ResourceId::new("", "v1", "configmaps")
}

/// An emulated cluster holding `KEYS` ConfigMaps in two namespaces, nothing else.
async fn config_map_cluster() -> (ApiServer, kube::Client) {
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    for namespace in ["a", "b"] {
        let namespaces = ResourceId::new("", "v1", "namespaces");
        server
            .store()
            .create(&namespaces, None, json!({"metadata": {"name": namespace}}))
            .unwrap();
    }
    for i in 0..KEYS {
        let namespace = if i % 2 == 0 { "a" } else { "b" };
        server
            .store()
            .create(
                &config_maps(),
                Some(namespace),
                json!({"metadata": {"name": format!("cm-{i}"), "namespace": namespace}, "data": {"n": "0"}}),
            )
            .unwrap();
    }
    let client = kube::Client::try_from(server.client_config()).unwrap();
    (server, client)
}

/// Changes every ConfigMap; returns each key's new resourceVersion.
fn change_every_key(server: &ApiServer, round: u32) -> BTreeMap<String, String> {
    let items = server
        .store()
        .list(&config_maps(), &Filter::default(), &ListOptions::default())
        .unwrap()
        .items;
    items
        .iter()
        .map(|item| {
            let namespace = item.namespace.as_deref().unwrap();
            let mut value = item.value.clone();
            value["data"]["n"] = json!(round.to_string());
            let stored = server
                .store()
                .update(&config_maps(), Some(namespace), &item.name, value, false)
                .unwrap();
            (item.key.clone(), stored.resource_version.to_string())
        })
        .collect()
}

fn reconciler() -> Vec<u8> {
    plugin_artifacts::test_plugin("reconciler.wasm").to_vec()
}

/// The reconciler's manifest: label `label`, ConfigMaps as its primary.
fn reconciler_manifest(label: &str, options: &str) -> String {
    quick_manifest(&format!("{label},primary=v1/ConfigMap{options}"))
}

/// The keys plugin `name` logged reconciling at resourceVersion `versions[key]`.
fn reconciled_at(logs: &Logs, name: &str, versions: &BTreeMap<String, String>) -> Vec<String> {
    logs.of(name)
        .iter()
        .filter_map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            let [_, "reconcile", key, state] = words[..] else {
                return None;
            };
            let rv = state.split('/').next()?;
            (versions.get(key).map(String::as_str) == Some(rv)).then(|| key.to_owned())
        })
        .collect()
}

/// Waits until `name` reconciled every key at its version in `versions`.
async fn every_change_reconciled_by(logs: &Logs, name: &str, versions: &BTreeMap<String, String>, what: &str) {
    until(what, Duration::from_secs(60), || {
        reconciled_at(logs, name, versions).len() >= KEYS
    })
    .await;
}

/// Places the next version `ctl.next`: the reconciler labelled `label` with
/// `options`, under `[rollout]` lines `rollout`; and rescans.
async fn place_next(runtime: &Runtime, dir: &Path, label: &str, options: &str, rollout: &str, file: &[u8]) {
    let manifest = format!("{}[rollout]\n{rollout}", reconciler_manifest(label, options));
    publish(dir, "ctl.next.toml", manifest.as_bytes());
    publish(dir, "ctl.next.wasm", file);
    runtime.rescan().await;
}

/// Starts `ctl` alone and waits until it reconciled every key.
async fn running_controller(dir: &Path, client: kube::Client, logs: &Logs) -> Runtime {
    publish(dir, "ctl.toml", reconciler_manifest("live", "").as_bytes());
    publish(dir, "ctl.wasm", &reconciler());
    let runtime = Runtime::start(client, RuntimeConfig::new(dir).log_sink(logs.sink()))
        .await
        .unwrap();
    until(
        "the running version to reconcile every key",
        Duration::from_secs(60),
        || plugin_status(&runtime, "ctl").reconciles >= KEYS as u64,
    )
    .await;
    runtime
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_at_20_percent_owns_a_fifth_of_the_keys_through_a_swap_a_restart_and_its_promotion() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (server, client) = config_map_cluster().await;
    let logs = Logs::default();
    let runtime = running_controller(d, client, &logs).await;

    let canary = "mode = \"canary\"\npercent = 20\n";
    place_next(&runtime, d, "next", "", canary, &variant(&reconciler(), 1)).await;
    until(
        "the canary to run beside the running version",
        Duration::from_secs(60),
        || {
            let (live, next) = (plugin_status(&runtime, "ctl"), plugin_status(&runtime, "ctl.next"));
            live.rollout.is_some() && next.state == PluginState::Running
        },
    )
    .await;
    // Both versions queue every key when the split starts; let them settle.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let next = split_holds(&server, &logs, 1).await;
    assert!(
        (30..=50).contains(&next),
        "the canary reconciled {next} of {KEYS} keys at 20%"
    );
    let report = plugin_status(&runtime, "ctl").rollout.unwrap();
    assert_eq!((report.percent, report.rolled_back.as_deref()), (20, None));
    assert!(report.next.calls >= next as u64, "{report:?}");

    // The running file replaced during the canary: the split holds.
    publish(d, "ctl.toml", reconciler_manifest("live2", "").as_bytes());
    publish(d, "ctl.wasm", &variant(&reconciler(), 5));
    runtime.rescan().await;
    until("the new running version to swap in", Duration::from_secs(60), || {
        plugin_status(&runtime, "ctl").reloads >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(split_holds(&server, &logs, 2).await, next);
    runtime.shutdown().await;

    // The host restarted: it resumes the same split from the files.
    let runtime = Runtime::start(
        kube::Client::try_from(server.client_config()).unwrap(),
        RuntimeConfig::new(d).log_sink(logs.sink()),
    )
    .await
    .unwrap();
    until("the canary to resume after a restart", Duration::from_secs(60), || {
        plugin_status(&runtime, "ctl").rollout.is_some()
            && plugin_status(&runtime, "ctl.next").state == PluginState::Running
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(split_holds(&server, &logs, 3).await, next);

    // Promotion: the next version's files become the running one's.
    std::fs::rename(d.join("ctl.next.wasm"), d.join("ctl.wasm")).unwrap();
    std::fs::rename(d.join("ctl.next.toml"), d.join("ctl.toml")).unwrap();
    runtime.rescan().await;
    until("the promoted version to run alone", Duration::from_secs(60), || {
        let status = plugin_status(&runtime, "ctl");
        status.rollout.is_none() && status.running_digest == Some(digest(&variant(&reconciler(), 1)))
    })
    .await;
    let versions = change_every_key(&server, 4);
    every_change_reconciled_by(
        &logs,
        "ctl",
        &versions,
        "the promoted version to reconcile every change",
    )
    .await;
    runtime.shutdown().await;
}

/// Changes every key (round `round`) and checks that each change was
/// reconciled exactly once, by the canary when its 20% share owns the key
/// and by the running version otherwise; returns how many the canary took.
async fn split_holds(server: &ApiServer, logs: &Logs, round: u32) -> usize {
    let versions = change_every_key(server, round);
    until(
        &format!("every change of round {round} to be reconciled"),
        Duration::from_secs(60),
        || reconciled_at(logs, "ctl", &versions).len() + reconciled_at(logs, "ctl.next", &versions).len() >= KEYS,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (live, next) = (
        reconciled_at(logs, "ctl", &versions),
        reconciled_at(logs, "ctl.next", &versions),
    );
    for key in versions.keys() {
        let by = (
            live.iter().filter(|k| *k == key).count(),
            next.iter().filter(|k| *k == key).count(),
        );
        let expected = if next_owns(key, 20) { (0, 1) } else { (1, 0) };
        assert_eq!(by, expected, "round {round}, {key}: reconciled (running, canary) times");
    }
    next.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_version_failing_every_third_key_is_rolled_back_and_the_running_version_takes_every_key_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (server, client) = config_map_cluster().await;
    let logs = Logs::default();
    let runtime = running_controller(d, client, &logs).await;

    let failing = "mode = \"canary\"\npercent = 50\nmin-calls = 6\nwindow-seconds = 60\n";
    let next_file = variant(&reconciler(), 2);
    place_next(&runtime, d, "next", ",fail-every=3", failing, &next_file).await;
    until("the failing canary to be rolled back", Duration::from_secs(60), || {
        plugin_status(&runtime, "ctl")
            .rollout
            .is_some_and(|report| report.rolled_back.is_some())
    })
    .await;
    let report = plugin_status(&runtime, "ctl").rollout.unwrap();
    let reason = report.rolled_back.clone().unwrap();
    assert!(reason.starts_with("error rate 3"), "{reason}");
    assert!(report.next.errors > 0 && report.running.errors == 0, "{report:?}");
    until("the rolled back version to stop", Duration::from_secs(10), || {
        plugin_status(&runtime, "ctl.next").state == PluginState::Quarantined
    })
    .await;
    let next = plugin_status(&runtime, "ctl.next");
    assert_eq!(next.rejected_digest, Some(digest(&next_file)));
    assert!(
        next.last_error
            .as_deref()
            .unwrap()
            .starts_with("rolled back: error rate")
    );

    // Not tried again until its file changes.
    runtime.rescan().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(plugin_status(&runtime, "ctl.next").state, PluginState::Quarantined);

    // No key is lost: the running version reconciles every change.
    let versions = change_every_key(&server, 1);
    every_change_reconciled_by(&logs, "ctl", &versions, "the running version to reconcile every change").await;
    assert!(reconciled_at(&logs, "ctl.next", &versions).is_empty());
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_share_of_0_leaves_every_key_to_the_running_version_and_100_takes_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (server, client) = config_map_cluster().await;
    let logs = Logs::default();
    let runtime = running_controller(d, client, &logs).await;
    let next_file = variant(&reconciler(), 3);
    for (round, percent) in [(1, 0), (2, 100)] {
        let canary = format!("mode = \"canary\"\npercent = {percent}\n");
        place_next(&runtime, d, &format!("next{percent}"), "", &canary, &next_file).await;
        until(
            &format!("the canary at {percent}% to run"),
            Duration::from_secs(60),
            || {
                plugin_status(&runtime, "ctl")
                    .rollout
                    .is_some_and(|report| report.percent == percent)
                    && plugin_status(&runtime, "ctl.next").state == PluginState::Running
            },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let versions = change_every_key(&server, round);
        let owner = if percent == 0 { "ctl" } else { "ctl.next" };
        let other = if percent == 0 { "ctl.next" } else { "ctl" };
        until(
            &format!("{owner} to reconcile every change at {percent}%"),
            Duration::from_secs(60),
            || reconciled_at(&logs, owner, &versions).len() >= KEYS,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            reconciled_at(&logs, other, &versions).is_empty(),
            "{other} at {percent}%"
        );
    }
    // A share past 100 is refused; the canary at 100% keeps running.
    place_next(&runtime, d, "x", "", "mode = \"canary\"\npercent = 101\n", &next_file).await;
    until("the broken manifest to be reported", Duration::from_secs(10), || {
        plugin_status(&runtime, "ctl.next")
            .load_error
            .is_some_and(|error| error.contains("rollout.percent is 101: must be 0 to 100"))
    })
    .await;
    assert_eq!(plugin_status(&runtime, "ctl.next").state, PluginState::Running);
    // Abort: the next version's files go, the running version owns every key.
    std::fs::remove_file(d.join("ctl.next.wasm")).unwrap();
    std::fs::remove_file(d.join("ctl.next.toml")).unwrap();
    runtime.rescan().await;
    let versions = change_every_key(&server, 3);
    every_change_reconciled_by(
        &logs,
        "ctl",
        &versions,
        "the running version to reconcile every change after the abort",
    )
    .await;
    assert!(plugin_status(&runtime, "ctl").rollout.is_none());
    runtime.shutdown().await;
}

/// hpa-controller's shipped manifest with a 1 s sync and the given window.
fn hpa_manifest(stabilization_seconds: u32) -> String {
    include_str!("../../plugins/hpa-controller/manifest.toml").replace(
        "config = \"sync-seconds=5,stabilization-seconds=30\"",
        &format!("config = \"sync-seconds=1,stabilization-seconds={stabilization_seconds}\""),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_with_a_shorter_window_differs_only_on_scale_downs_and_persists_no_write() {
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "hpa", "hpa-controller.wasm", Some(&hpa_manifest(30)));
    let shadow = format!("{}\n[rollout]\nmode = \"shadow\"\n", hpa_manifest(5));
    install(dir.path(), "hpa.next", "hpa-controller.wasm", Some(&shadow));
    let (server, client) = quiet().await;
    let runtime = Runtime::start(client, RuntimeConfig::new(dir.path())).await.unwrap();
    until(
        "the shadow to run beside the running version",
        Duration::from_secs(60),
        || plugin_status(&runtime, "hpa").rollout.is_some(),
    )
    .await;

    // Scaling up, both versions write the same.
    // The shadow is answered the running version's reads of the metrics
    // API in the same call: the usage it decides on is the same.
    under_load(&server, 240, "a scale-up", || replicas(&server).0 >= 4).await;
    until("the shadow to compare a few calls", Duration::from_secs(30), || {
        plugin_status(&runtime, "hpa")
            .rollout
            .is_some_and(|report| report.total_compared() >= 3)
    })
    .await;
    let report = plugin_status(&runtime, "hpa").rollout.unwrap();
    assert!(report.differences.is_empty(), "{:#?}", report.differences);
    let scaled_to = replicas(&server).0;

    // Load falls: after 5 s the shadow would scale down; the running version
    // holds for 30 s.
    under_load(&server, 20, "the shadow to differ on the scale-down", || {
        plugin_status(&runtime, "hpa").rollout.is_some_and(|report| {
            report.differences.iter().any(|difference| {
                difference
                    .differences
                    .iter()
                    .any(|d| d.target == "patch apps/v1/Deployment/scale ns-0/app-0")
            })
        })
    })
    .await;
    let report = plugin_status(&runtime, "hpa").rollout.unwrap();
    for difference in &report.differences {
        for each in &difference.differences {
            let text = each.to_string();
            assert!(
                text.starts_with("only-shadow patch apps/v1/Deployment/scale")
                    || text.starts_with("only-shadow event about HorizontalPodAutoscaler/ns-0/app-0 SuccessfulRescale")
                    // The running version, holding, has no new status to write.
                    || text.starts_with("only-shadow patch autoscaling/v2/HorizontalPodAutoscaler/status")
                    || (text.starts_with("differs patch autoscaling/v2/HorizontalPodAutoscaler/status")
                        && text.contains(&format!("status.desiredReplicas: {scaled_to} → "))),
                "a difference that is not the shadow's scale-down: {text}"
            );
        }
    }
    assert_eq!(replicas(&server).0, scaled_to, "the running version holds for its 30 s");

    // The server holds no write of the shadow: its writes were dry runs.
    let shadow = plugin_status(&runtime, "hpa.next");
    assert!(shadow.writes > 0, "{:?}", (shadow.writes, shadow.write_errors));
    let deployment = server.store().get(&deployments(), Some("ns-0"), "app-0").unwrap();
    let managers: Vec<String> = deployment.value["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| entry["manager"].as_str().map(str::to_owned))
        .collect();
    assert!(managers.iter().all(|manager| !manager.contains("next")), "{managers:?}");
    let events = rescale_events(&server);
    assert!(!events.is_empty());
    assert!(
        events.iter().all(|event| !event["reportingController"]
            .as_str()
            .unwrap_or_default()
            .contains("next")),
        "an Event of the shadow persisted"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadows_that_loop_trap_flood_or_write_outside_their_grant_are_rolled_back_and_reach_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let shadow = |config: &str, extra: &str| {
        format!("config = \"{config}\"\n{extra}\n[failures]\nrestart-backoff-ms = 20\n[rollout]\nmode = \"shadow\"\n")
    };
    let recorder = "config = \"v1/Pod\"\n[limits]\nlog-lines-per-second = 1000000\n";
    let writes = "[[grant.write]]\nverbs = [\"create\", \"patch\"]\nresources = [\"v1/ConfigMap\"]\n";
    // Each running version records every pod delta; beside each, a shadow
    // that misbehaves.
    for (name, file, config, extra) in [
        ("looping", "hostile.wasm", "loop", "[limits]\ncall-timeout-ms = 100"),
        ("trapping", "hostile.wasm", "trap-every-3rd", ""),
        ("flooding", "writer.wasm", "flood:ns-0", writes),
        ("ungranted", "writer.wasm", "flood:ns-1", ""),
    ] {
        install(d, name, "delta-logger.wasm", Some(recorder));
        install(d, &format!("{name}.next"), file, Some(&shadow(config, extra)));
    }
    let workload = Workload::default().seed(3).size(2, 2, 2).changes_per_second(200.0);
    let (server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();
    for (name, reason) in [
        ("looping", "traps"),
        ("trapping", "traps"),
        ("flooding", "refused writes"),
        ("ungranted", "refused writes"),
    ] {
        until(
            &format!("the {name} shadow to be rolled back"),
            Duration::from_secs(60),
            || {
                plugin_status(&runtime, name)
                    .rollout
                    .and_then(|report| report.rolled_back)
                    .is_some_and(|why| why.contains(reason))
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    churn.abort();
    let pods = ResourceId::new("", "v1", "pods");
    for name in ["looping", "trapping", "flooding", "ungranted"] {
        let record = || {
            logs.of(name)
                .iter()
                .filter_map(|line| Logged::parse_delta_logger(line))
                .collect()
        };
        caught_up(&server, &pods, record).await;
        assert_record_matches_server(&record(), &server_changes(&server, &pods));
        let running = plugin_status(&runtime, name);
        assert_eq!((running.traps, running.errors, running.restarts), (0, 0, 0), "{name}");
        assert_eq!(
            plugin_status(&runtime, &format!("{name}.next")).state,
            PluginState::Quarantined
        );
    }
    // The flood was sent as dry runs only; the ungranted writes were refused.
    let flood = server.store().get(&config_maps(), Some("ns-0"), "flood");
    assert!(flood.is_err(), "a shadow's write persisted");
    let flooding = plugin_status(&runtime, "flooding.next");
    assert!(flooding.writes > 0, "no dry run reached the server");
    assert!(server.store().get(&config_maps(), Some("ns-1"), "flood").is_err());
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_version_that_does_not_load_leaves_every_key_to_the_running_version() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (server, client) = config_map_cluster().await;
    let logs = Logs::default();
    let runtime = running_controller(d, client, &logs).await;
    let canary = "mode = \"canary\"\npercent = 50\n";
    place_next(&runtime, d, "next", "", canary, b"\0asm but not a component").await;
    until(
        "the broken next version to be reported",
        Duration::from_secs(30),
        || {
            let next = plugin_status(&runtime, "ctl.next");
            next.state == PluginState::Failed && next.load_error.is_some()
        },
    )
    .await;
    assert!(plugin_status(&runtime, "ctl").rollout.is_none());
    let versions = change_every_key(&server, 1);
    every_change_reconciled_by(&logs, "ctl", &versions, "the running version to reconcile every change").await;
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_sends_no_request_and_its_requests_are_compared_with_the_running_version_s() {
    let (web, received) = kinformer_tests::http::serve().await;
    let origin = format!("http://{web}");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let manifest = |path: &str, rollout: bool| {
        let rollout = if rollout { "[rollout]\nmode = \"shadow\"\n" } else { "" };
        format!(
            "config = \"fetch={origin}{path}\"\n[grant.http]\nallow = [\"{origin}\"]\nnetworks = [\"127.0.0.1/32\"]\n\
             [limits]\nhttp-requests-per-second = 1000\nhttp-burst = 1000\nlog-lines-per-second = 1000000\n{rollout}"
        )
    };
    // A notifier and its shadow, the same; and one whose shadow posts elsewhere.
    install(d, "notify", "hostile.wasm", Some(&manifest("/hook?same", false)));
    install(d, "notify.next", "hostile.wasm", Some(&manifest("/hook?same", true)));
    install(d, "moved", "hostile.wasm", Some(&manifest("/hook?moved", false)));
    install(
        d,
        "moved.next",
        "hostile.wasm",
        Some(&manifest("/elsewhere?moved", true)),
    );
    let (_server, churn, client) = cluster(&Workload::default().seed(21).size(1, 1, 2)).await;
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();
    until("both shadows to compare calls", Duration::from_secs(60), || {
        ["notify", "moved"].iter().all(|name| {
            plugin_status(&runtime, name)
                .rollout
                .is_some_and(|report| report.total_compared() >= 5)
        })
    })
    .await;
    churn.abort();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Each delta announced once: the shadow's requests were answered with
    // the running version's responses, never sent.
    // Every request the server got is one the running version made (and
    // counted, once its exchange ended, whatever its outcome).
    let made = |runtime: &Runtime| -> u64 {
        let running = plugin_status(runtime, "notify");
        (running.http_by.iter())
            .filter(|((_, outcome), _)| matches!(*outcome, "ok" | "error" | "timeout" | "too-large"))
            .map(|(_, count)| *count)
            .sum()
    };
    until(
        "the running version's requests to be all the server got",
        Duration::from_secs(10),
        || received.count("?same") as u64 == made(&runtime),
    )
    .await;
    let running = plugin_status(&runtime, "notify");
    assert!(running.http_requests > 0, "{running:?}");
    let shadow = plugin_status(&runtime, "notify.next");
    assert!(shadow.http_requests > 0, "{shadow:?}");
    assert!(logs.of("notify.next").iter().any(|line| line == "fetch 200 5"));
    let report = running.rollout.unwrap();
    assert!(report.differences.is_empty(), "{:#?}", report.differences);
    assert!(report.compared.get("same").copied().unwrap_or(0) >= 5, "{report:?}");
    // The moved shadow's requests went nowhere, and are the difference.
    assert_eq!(received.count("/elsewhere"), 0, "{:?}", received.lines());
    let report = plugin_status(&runtime, "moved").rollout.unwrap();
    let texts: Vec<String> = report
        .differences
        .iter()
        .flat_map(|difference| difference.differences.iter().map(ToString::to_string))
        .collect();
    assert!(report.rolled_back.is_none(), "{report:?}");
    // The status names each request by its origin and path: a query may
    // carry a credential, and is shown as `?…`.
    assert!(
        texts
            .iter()
            .any(|text| text.starts_with(&format!("only-live GET http {origin}/hook?…")))
            && texts
                .iter()
                .any(|text| text.starts_with(&format!("only-shadow GET http {origin}/elsewhere?…"))),
        "{texts:#?}"
    );
    assert!(!texts.iter().any(|text| text.contains("moved")), "{texts:#?}");
    runtime.shutdown().await;
}
