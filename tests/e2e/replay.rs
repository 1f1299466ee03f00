//! `kinformer record` and `kinformer replay`: a recording of the emulation's
//! workload, replayed offline into the plugin that ran live, prints what the
//! live run printed; a controller replayed prints the writes it would make,
//! and makes none; a plugin that traps on replay says so in its exit code.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use apiserver_sim::store::ResourceId;
use apiserver_sim::workload::Workload;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_cli::recording::{self, parse_resource};
use kinformer_cli::replay::{Http, Replayed, Setup, compare, replay, replay_with};
use kinformer_tests::engine;
use kinformer_tests::guest::{Language, World, compile_cache, component, root};
use kinformer_tests::runtime::{Logged, Logs, caught_up, cluster, install, server_changes, until};
use serde_json::json;

/// Replays `recording` (JSON lines) into `plugin`; returns the outcome and
/// the lines it printed.
fn printed(plugin: &Path, recording: &[u8], config: Option<&str>) -> (Replayed, Vec<String>) {
    let deltas = recording::read(recording).unwrap();
    let mut out = Vec::new();
    let outcome = replay(plugin, &deltas, config, engine(), &mut out).unwrap();
    let printed = String::from_utf8(out).unwrap();
    (outcome, printed.lines().map(str::to_owned).collect())
}

/// Replays `recording` (JSON lines) into `plugin`; returns the outcome and
/// the messages it logged.
fn replayed(plugin: &str, recording: &[u8], config: &str) -> (Replayed, Vec<String>) {
    let (outcome, lines) = printed(Path::new(plugin), recording, Some(config));
    let messages = lines
        .iter()
        .map(|line| line.trim_start().split_once(' ').unwrap().1.to_owned())
        .collect();
    (outcome, messages)
}

/// delta-logger's lines of one kind, parsed.
fn of_kind<'a>(lines: impl IntoIterator<Item = &'a String>, kind: &str) -> Vec<Logged> {
    lines
        .into_iter()
        .filter(|line| line.split(' ').nth(1) == Some(kind))
        .filter_map(|line| Logged::parse_delta_logger(line))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_replayed_into_delta_logger_prints_what_the_live_run_printed() {
    let dir = tempfile::tempdir().unwrap();
    let config = "v1/Pod,apps/v1/Deployment";
    let manifest = format!("config = \"{config}\"\n[limits]\nlog-lines-per-second = 1000000\n");
    install(dir.path(), "live", "delta-logger.wasm", Some(&manifest));
    let workload = Workload::default().seed(21).size(2, 2, 3).changes_per_second(200.0);
    let (server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let runtime = Runtime::start(client.clone(), RuntimeConfig::new(dir.path()).log_sink(logs.sink()))
        .await
        .unwrap();
    until("delta-logger to run", Duration::from_secs(30), || runtime.all_running()).await;

    // Record while the live plugin runs, from after it started to after the churn stopped.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let resources = [
        parse_resource("v1/Pod").unwrap(),
        parse_resource("apps/v1/Deployment").unwrap(),
    ];
    let recorder = tokio::spawn(async move {
        let mut out = Vec::new();
        let stop = async {
            let _ = stopped.await;
        };
        recording::record(client, &resources, None, &mut out, stop)
            .await
            .unwrap();
        out
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    churn.abort();
    let pods = ResourceId::new("", "v1", "pods");
    let live_pods = || of_kind(&logs.of("live"), "Pod");
    caught_up(&server, &pods, live_pods).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.send(()).unwrap();
    let recorded = recorder.await.unwrap();
    runtime.shutdown().await;

    let (outcome, replayed) = replayed(plugin_artifacts::DELTA_LOGGER_PATH, &recorded, config);
    assert_eq!(
        (outcome.errors, outcome.trap.as_deref(), outcome.exit_code()),
        (0, None, 0)
    );
    assert_eq!(outcome.delivered as usize, replayed.len());
    let live = logs.of("live");
    for (kind, resource) in [
        ("Pod", pods),
        ("Deployment", ResourceId::new("apps", "v1", "deployments")),
    ] {
        let replayed = of_kind(&replayed, kind);
        // The initial list: every object the server had when recording began.
        let initial: BTreeMap<&str, u64> = replayed
            .iter()
            .filter(|logged| logged.initial)
            .map(|logged| (logged.key.as_str(), logged.rv))
            .collect();
        assert!(!initial.is_empty(), "{kind}: no initial state recorded");
        let changes = server_changes(&server, &resource);
        for (key, rv) in &initial {
            assert!(changes[*key].iter().any(|(_, at)| at == rv), "{key} at rv {rv}");
        }
        // Then exactly the lines the live run printed from the recording's start.
        let replayed_live: Vec<&Logged> = replayed.iter().filter(|logged| !logged.initial).collect();
        assert!(!replayed_live.is_empty(), "{kind}: no live deltas recorded");
        let start = replayed_live[0].rv;
        let live_run = of_kind(&live, kind);
        let live_run: Vec<&Logged> = live_run
            .iter()
            .filter(|logged| !logged.initial && logged.rv >= start)
            .collect();
        assert_eq!(replayed_live, live_run, "{kind}: replay and live run differ");
    }
}

#[test]
fn a_plugin_that_traps_on_replay_exits_non_zero() {
    let pod = |name: &str, rv: u32| {
        format!(
            r#"{{"type":"Added","apiVersion":"v1","kind":"Pod","object":{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"shop","uid":"u-{name}","resourceVersion":"{rv}"}}}}}}"#
        )
    };
    let recording: String = (1..=5).map(|n| pod(&format!("web-{n}"), n) + "\n").collect();

    let (outcome, messages) = replayed(plugin_artifacts::HOSTILE_PATH, recording.as_bytes(), "trap-every-3rd");
    assert_eq!(outcome.delivered, 3, "{messages:#?}");
    assert_eq!(outcome.exit_code(), 3);
    let trap = outcome.trap.unwrap();
    assert!(trap.contains("unreachable"), "{trap}");
    assert!(
        messages.iter().any(|line| line.contains("trapping on delta 3")),
        "{messages:#?}"
    );
    assert!(
        messages.last().unwrap().starts_with("trapped on Added shop/web-3"),
        "{messages:#?}"
    );

    let (outcome, _) = replayed(plugin_artifacts::HOSTILE_PATH, recording.as_bytes(), "reject");
    assert_eq!((outcome.delivered, outcome.errors, outcome.exit_code()), (5, 5, 2));

    let (outcome, messages) = replayed(plugin_artifacts::DELTA_LOGGER_PATH, recording.as_bytes(), "v1/Pod");
    assert_eq!((outcome.delivered, outcome.exit_code()), (5, 0));
    assert_eq!(messages[2], "Added Pod shop/web-3 rv=3");
}

/// Records the initial state of a quiet emulated cluster whose one deployment
/// (`ns-0/app-0`, 2 pods, an HPA targeting 60% cpu) runs at 120% of its
/// pods' cpu requests, as their PodMetrics say.
async fn loaded_cluster_recording() -> (apiserver_sim::ApiServer, Vec<u8>) {
    cluster_recording(240).await
}

/// A recording of a quiet cluster whose 2 pods each use `millicores` of
/// their 200m request.
async fn cluster_recording(millicores: u32) -> (apiserver_sim::ApiServer, Vec<u8>) {
    let workload = Workload::default().seed(7).size(1, 1, 2).changes_per_second(0.0);
    let (server, churn, client) = cluster(&workload).await;
    churn.abort();
    let pods = ResourceId::new("", "v1", "pods");
    let (running, _) = server.store().snapshot(&pods, &Default::default()).unwrap();
    assert_eq!(running.len(), 2);
    for pod in running {
        server
            .metrics()
            .set_pod_cpu(pod.namespace.as_deref().unwrap(), &pod.name, millicores);
    }
    // PodMetrics cannot be watched: the recorder lists them.
    let resources = [
        "autoscaling/v2/HorizontalPodAutoscaler",
        "apps/v1/Deployment",
        "v1/Pod",
        "metrics.k8s.io/v1beta1/PodMetrics",
    ]
    .map(|r| parse_resource(r).unwrap());
    let mut out = Vec::new();
    let stop = tokio::time::sleep(Duration::from_millis(500));
    tokio::time::timeout(
        Duration::from_secs(30),
        recording::record(client, &resources, None, &mut out, stop),
    )
    .await
    .expect("the recorder never synced its informers")
    .unwrap();
    (server, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_replayed_prints_the_writes_it_would_make_and_makes_none() {
    let (server, recorded) = loaded_cluster_recording().await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = include_str!("../../plugins/hpa-controller/manifest.toml");
    install(dir.path(), "hpa", "hpa-controller.wasm", Some(manifest));
    let plugin = dir.path().join("hpa.wasm");

    let (outcome, lines) = printed(&plugin, &recorded, None);
    assert_eq!(
        (outcome.errors, outcome.trap.as_deref(), outcome.exit_code()),
        (0, None, 0),
        "{lines:#?}"
    );
    assert_eq!(outcome.reconciles, 1, "the one HPA, once: {lines:#?}");
    // 2 pods at 120% against a 60% target: 4 replicas.
    let writes: Vec<&str> = lines.iter().filter_map(|line| line.strip_prefix("WRITE ")).collect();
    assert_eq!(
        writes[0], r#"patch apps/v1/Deployment/scale ns-0/app-0 {"spec":{"replicas":4}}"#,
        "{lines:#?}"
    );
    let event = writes[1]
        .strip_prefix("create events.k8s.io/v1/Event ns-0/app-0.")
        .unwrap();
    let (_, event) = event.split_once(' ').unwrap();
    let event: serde_json::Value = serde_json::from_str(event).unwrap();
    assert_eq!(event["reason"], "SuccessfulRescale", "{event:#}");
    let status = writes[2]
        .strip_prefix("patch autoscaling/v2/HorizontalPodAutoscaler/status ns-0/app-0 ")
        .unwrap();
    let status: serde_json::Value = serde_json::from_str(status).unwrap();
    assert_eq!(status["status"]["desiredReplicas"], 4, "{status:#}");
    assert_eq!(writes.len(), 3, "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|line| line.starts_with(" INFO hpa ns-0/app-0: ") && line.ends_with("scaled 2 -> 4")),
        "{lines:#?}"
    );
    let deployment = server
        .store()
        .get(&ResourceId::new("apps", "v1", "deployments"), Some("ns-0"), "app-0")
        .unwrap();
    assert_eq!(deployment.value["spec"]["replicas"], 2, "a replay wrote to the cluster");

    // Without its write grant, the same replay is refused its writes, and
    // each failed reconcile counts as an error.
    let read_only = &manifest[..manifest.find("[[grant.write]]").unwrap()];
    std::fs::write(dir.path().join("hpa.toml"), read_only).unwrap();
    let (outcome, lines) = printed(&plugin, &recorded, None);
    assert_eq!(
        (outcome.reconciles, outcome.errors, outcome.exit_code()),
        (1, 1, 2),
        "{lines:#?}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.starts_with("WRITE "))
            .collect::<Vec<_>>(),
        [
            "WRITE patch apps/v1/Deployment/scale ns-0/app-0 denied: patch apps/v1/Deployment/scale in namespace ns-0 is not granted to this plugin"
        ]
    );
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("ERROR reconcile returned an error on key ns-0/app-0: "),
        "{lines:#?}"
    );
    assert!(last.contains("denied"), "{last}");
}

/// One line of a recording: `type` of an object of `api_version`/`kind`
/// named `namespace/name` at `rv`, controlled by replica set `owner`.
fn recorded_line(
    delta: &str,
    initial: bool,
    (api_version, kind): (&str, &str),
    name: &str,
    rv: u32,
    owner: Option<&str>,
) -> String {
    let owners: Vec<serde_json::Value> = owner
        .into_iter()
        .map(|owner| json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": format!("u-{owner}"), "controller": true}))
        .collect();
    let line = json!({"type": delta, "initial": initial, "apiVersion": api_version, "kind": kind, "object": {
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": "shop", "uid": format!("u-{name}"), "resourceVersion": rv.to_string(), "ownerReferences": owners}
    }});
    format!("{line}\n")
}

#[test]
fn a_replayed_controller_reconciles_the_keys_each_delta_leads_to_as_the_host_would() {
    let replica_set = ("apps/v1", "ReplicaSet");
    let pod = ("v1", "Pod");
    let recording: String = [
        recorded_line("Added", true, replica_set, "web", 1, None),
        recorded_line("Added", true, pod, "web-a", 2, Some("web")),
        // Live: an owned pod changes, a pod of a replica set never seen
        // appears, the replica set goes.
        recorded_line("Updated", false, pod, "web-a", 3, Some("web")),
        recorded_line("Added", false, pod, "db-a", 4, Some("db")),
        recorded_line("Deleted", false, replica_set, "web", 5, None),
    ]
    .concat();

    // The initial lists' keys once, with the state they left; then each
    // live delta's keys, with the state as of that delta.
    let (outcome, messages) = replayed(plugin_artifacts::RECONCILER_PATH, recording.as_bytes(), "t");
    assert_eq!(
        messages,
        [
            "t reconcile shop/web 1/2",
            "t reconcile shop/web 1/3",
            "t reconcile shop/db gone",
            "t reconcile shop/web gone"
        ]
    );
    assert_eq!((outcome.delivered, outcome.reconciles, outcome.exit_code()), (5, 4, 0));

    // Every second reconcile fails: counted, said, and the replay goes on.
    let (outcome, messages) = replayed(
        plugin_artifacts::RECONCILER_PATH,
        recording.as_bytes(),
        "t,fail-every=2",
    );
    assert_eq!(
        (outcome.reconciles, outcome.errors, outcome.exit_code()),
        (4, 2, 2),
        "{messages:#?}"
    );
    let failed: Vec<&String> = messages
        .iter()
        .filter(|line| line.starts_with("reconcile returned an error on key shop/"))
        .collect();
    assert_eq!(failed.len(), 2, "{messages:#?}");
}

#[test]
fn a_javascript_writer_replayed_prints_its_writes_and_sees_a_refused_one_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let source = root().join("test-plugins").join("js-writer");
    let plugin = dir.path().join("stamper.wasm");
    std::fs::write(&plugin, component(Language::JavaScript, World::Writer, &source)).unwrap();
    let manifest = "[grant]\nresources = [\"v1/ConfigMap\"]\n\n\
                    [[grant.write]]\nverbs = [\"patch\"]\nresources = [\"v1/ConfigMap\"]\nnamespaces = [\"shop\"]\n";
    std::fs::write(dir.path().join("stamper.toml"), manifest).unwrap();
    let config_map = ("v1", "ConfigMap");
    let recording = [
        recorded_line("Added", true, config_map, "settings", 11, None),
        recorded_line("Updated", false, config_map, "settings", 12, None),
    ]
    .concat();
    let deltas = recording::read(recording.as_bytes()).unwrap();
    let options = kinformer::plugin::EngineOptions {
        cache_dir: Some(compile_cache()),
        ..kinformer::plugin::EngineOptions::default()
    };
    let engine = kinformer::plugin::PluginEngine::with_options(&options).unwrap();
    let mut out = Vec::new();
    let outcome = replay(&plugin, &deltas, None, &engine, &mut out).unwrap();
    let printed = String::from_utf8(out).unwrap();
    let denied = "delete v1/ConfigMap in namespace kube-system is not granted to this plugin";
    let expected: Vec<String> = [11, 12]
        .into_iter()
        .flat_map(|rv| {
            [
                format!(r#"WRITE patch v1/ConfigMap shop/settings [{{"op":"add","path":"/metadata/annotations","value":{{"seen":"{rv}"}}}}]"#),
                // Answered after the recording's newest resourceVersion, one per write made.
                format!(" INFO stamped shop/settings, stored at rv {}", rv + 2),
                format!("WRITE delete v1/ConfigMap kube-system/settings denied: {denied}"),
                format!(" WARN refused (denied): write denied: {denied}"),
            ]
        })
        .collect();
    assert_eq!(printed.lines().collect::<Vec<_>>(), expected);
    assert_eq!((outcome.delivered, outcome.errors, outcome.exit_code()), (2, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_compare_prints_where_two_controller_versions_write_differently_and_nothing_for_one() {
    // 2 pods at 65% of their request against a 60% target: 8% over, within
    // the default tolerance of 10%, outside one of 5%.
    let (_server, recorded) = cluster_recording(130).await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = include_str!("../../plugins/hpa-controller/manifest.toml");
    install(dir.path(), "hpa", "hpa-controller.wasm", Some(manifest));
    let tight = manifest.replace("stabilization-seconds=30", "stabilization-seconds=30,tolerance=0.05");
    install(dir.path(), "tight", "hpa-controller.wasm", Some(&tight));
    let deltas = recording::read(&recorded[..]).unwrap();
    let run = |name: &str| {
        let plugin = dir.path().join(format!("{name}.wasm"));
        replay(&plugin, &deltas, None, engine(), &mut std::io::sink()).unwrap()
    };
    let (running, next) = (run("hpa"), run("tight"));

    let compared = compare(&running, &next);
    let lines = compared.lines();
    assert_eq!(compared.exit_code(), 1, "{lines:#?}");
    assert!(
        lines.contains(&"DIFF ns-0/app-0: only-shadow patch apps/v1/Deployment/scale ns-0/app-0".to_owned()),
        "{lines:#?}"
    );
    assert!(
        lines.contains(
            &"DIFF ns-0/app-0: only-shadow event about HorizontalPodAutoscaler/ns-0/app-0 SuccessfulRescale".to_owned()
        ),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|line| line
            .starts_with("DIFF ns-0/app-0: differs patch autoscaling/v2/HorizontalPodAutoscaler/status ns-0/app-0: ")
            && line.contains("status.desiredReplicas: 2 → 3")),
        "{lines:#?}"
    );
    assert_eq!(
        compared.summary(),
        "compared 1 calls: 0 same, 1 differ, 0 only in the first, 0 only in the second"
    );

    let again = compare(&running, &run("hpa"));
    assert!(again.lines().is_empty(), "{:#?}", again.lines());
    assert_eq!((again.exit_code(), again.outcomes.get("same")), (0, Some(&1)));
}

/// Two pod deltas in namespace `shop`.
fn two_pods() -> Vec<kinformer_cli::recording::Recorded> {
    let pod = ("v1", "Pod");
    let recording = [
        recorded_line("Added", true, pod, "web-a", 1, None),
        recorded_line("Added", false, pod, "web-b", 2, None),
    ]
    .concat();
    recording::read(recording.as_bytes()).unwrap()
}

/// Replays `deltas` into hostile (`config`, `manifest`) with `setup`; the
/// lines printed.
fn replayed_with(manifest: &str, deltas: &[kinformer_cli::recording::Recorded], setup: &Setup) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "probe", "hostile.wasm", Some(manifest));
    let mut out = Vec::new();
    replay_with(&dir.path().join("probe.wasm"), deltas, setup, engine(), &mut out).unwrap();
    String::from_utf8(out).unwrap().lines().map(str::to_owned).collect()
}

#[test]
fn a_replay_sets_the_manifest_s_env_and_the_values_given_for_secrets() {
    let manifest =
        "config = \"env=TOKEN\"\n[env]\nTOKEN = { secret = \"shop/api\", key = \"token\" }\nMODE = \"literal\"\n";
    let unset = replayed_with(manifest, &two_pods(), &Setup::default());
    assert!(
        unset[0].contains(
            "TOKEN (key token of shop/api) is not set: a replay reads no cluster; give it with --env TOKEN=VALUE"
        ),
        "{unset:#?}"
    );
    assert!(unset.contains(&" INFO env TOKEN unset".to_owned()), "{unset:#?}");
    let given = Setup {
        env: vec![("TOKEN".into(), "s3cret".into())],
        ..Setup::default()
    };
    let lines = replayed_with(manifest, &two_pods(), &given);
    assert!(lines.contains(&" INFO env TOKEN=s3cret".to_owned()), "{lines:#?}");
    let literal = replayed_with(
        &manifest.replace("env=TOKEN", "env=MODE"),
        &two_pods(),
        &Setup::default(),
    );
    assert!(literal.contains(&" INFO env MODE=literal".to_owned()), "{literal:#?}");
}

#[test]
fn a_replay_answers_http_from_what_record_kept_and_never_sends() {
    // The server runs on a runtime of its own; the replays, like the
    // command's, on this thread.
    let server = tokio::runtime::Runtime::new().unwrap();
    let (web, received) = server.block_on(kinformer_tests::http::serve());
    let origin = format!("http://{web}");
    let manifest = format!(
        "config = \"fetch={origin}/ok?replayed\"\n[grant.http]\nallow = [\"{origin}\"]\nnetworks = [\"127.0.0.1/32\"]\n"
    );
    // Without answers: refused, saying a replay sends nothing.
    let refused = replayed_with(&manifest, &two_pods(), &Setup::default());
    assert!(
        refused.iter().any(|line| line.starts_with(&format!(
            " HTTP GET {origin}/ok?replayed: not-sent: not sent: replay makes no requests"
        ))),
        "{refused:#?}"
    );
    assert!(
        refused
            .iter()
            .any(|line| line.contains("fetch error failed") && line.contains("replay makes no requests")),
        "{refused:#?}"
    );
    assert_eq!(received.count("?replayed"), 0);

    // Recorded live (as `record --plugin` does), then answered from it.
    let into = std::sync::Arc::new(kinformer::plugin::CallInputs::default());
    let deltas = two_pods();
    let live = Setup {
        http: Http::Live {
            policy: kinformer::outbound::AddressPolicy::default(),
            into: std::sync::Arc::clone(&into),
        },
        ..Setup::default()
    };
    let lines = replayed_with(&manifest, &deltas, &live);
    assert!(lines.contains(&" INFO fetch 200 5".to_owned()), "{lines:#?}");
    assert_eq!(received.count("?replayed"), 2);
    let answers = into.http_answers();
    assert_eq!(answers.len(), 2, "{answers:#?}");
    let mut file = Vec::new();
    recording::write_http(&mut file, &answers).unwrap();
    let kept = recording::read_recording(&file[..]).unwrap().http;
    assert_eq!(kept, answers, "an Http line reads back as written");

    let answered = Setup {
        http: Http::Recorded(kept[..1].to_vec()),
        ..Setup::default()
    };
    let lines = replayed_with(&manifest, &two_pods(), &answered);
    assert_eq!(
        lines.iter().filter(|line| *line == " INFO fetch 200 5").count(),
        1,
        "one answer, used once: {lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|line| line.contains("200, answered with the recording's answer, not sent")),
        "{lines:#?}"
    );
    assert_eq!(received.count("?replayed"), 2, "a replay sent a request");
}
