//! Hot reload from the plugin directory, end to end: the directory watch, the
//! swap between two batches, rejections, rollbacks and unloading, under churn on
//! the emulated API server.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::time::Duration;

use apiserver_sim::store::ResourceId;
use apiserver_sim::workload::Workload;
use kinformer::plugin::digest;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::runtime::{
    Generations, Logged, Logs, assert_record_matches_server, caught_up, cluster, listed_status, plugin_status, publish,
    quick_manifest, server_changes, until,
};
use plugin_artifacts::variant;

/// The hostile test plugin's component.
fn hostile() -> Vec<u8> {
    plugin_artifacts::test_plugin("hostile.wasm").to_vec()
}

/// Waits until `name` runs the file with `digest`, reloaded `reloads` times.
async fn running(runtime: &Runtime, name: &str, digest: &str, reloads: u64) {
    until(
        &format!("{name} to run {}", &digest[..12]),
        // Generous: on two busy cores, a swap waits for its compile and its
        // initial list behind every other test's plugins.
        Duration::from_secs(90),
        || {
            listed_status(runtime, name)
                .is_some_and(|status| status.running_digest.as_deref() == Some(digest) && status.reloads >= reloads)
        },
    )
    .await;
}

/// The records of the `record=LABEL` plugin, with their labels.
fn records(logs: &Logs, name: &str) -> Vec<(String, Logged)> {
    logs.of(name)
        .iter()
        .filter_map(|line| Logged::parse_record(line))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_swaps_under_churn_hand_every_delta_to_exactly_one_version() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let versions = [hostile(), variant(&hostile(), 1)];
    let digests = [digest(&versions[0]), digest(&versions[1])];
    publish(d, "rec.toml", quick_manifest("record=v0").as_bytes());
    publish(d, "rec.wasm", &versions[0]);

    let workload = Workload::default().seed(11).size(4, 5, 4).changes_per_second(2000.0);
    let (server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();
    running(&runtime, "rec", &digests[0], 0).await;

    for swap in 1..=50_u64 {
        let version = (swap % 2) as usize;
        publish(d, "rec.toml", quick_manifest(&format!("record=v{swap}")).as_bytes());
        publish(d, "rec.wasm", &versions[version]);
        running(&runtime, "rec", &digests[version], swap).await;
        // Let the new version handle some live deltas before the next swap.
        let handled = plugin_status(&runtime, "rec").deltas;
        until("live deltas after the swap", Duration::from_secs(10), || {
            plugin_status(&runtime, "rec").deltas > handled + 100
        })
        .await;
    }
    churn.abort();
    let pods = ResourceId::new("", "v1", "pods");
    caught_up(&server, &pods, || {
        records(&logs, "rec").into_iter().map(|(_, logged)| logged).collect()
    })
    .await;
    let status = runtime.shutdown().await;
    let rec = status.iter().find(|status| status.name == "rec").unwrap();
    assert_eq!((rec.traps, rec.rollbacks, rec.errors), (0, 0, 0), "{rec:#?}");

    let generations = Generations::of(&records(&logs, "rec"));
    assert!(generations.count >= 51, "{} generations", generations.count);
    assert_eq!(generations.stretches.len(), 51, "{:?}", generations.stretches);
    assert_record_matches_server(&generations.combined, &server_changes(&server, &pods));
    let live = generations.combined.iter().filter(|logged| !logged.initial).count();
    assert!(live > 1000, "only {live} live deltas");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_are_rejected_while_the_running_version_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = hostile();
    let next = variant(&good, 2);
    publish(d, "rec.toml", quick_manifest("record=good").as_bytes());
    publish(d, "rec.wasm", &good);
    let workload = Workload::default().seed(12).size(2, 2, 3).changes_per_second(100.0);
    let (_server, churn, client) = cluster(&workload).await;
    let runtime = Runtime::start(client, RuntimeConfig::new(d)).await.unwrap();
    running(&runtime, "rec", &digest(&good), 0).await;

    // Written slowly, in chunks, straight into place: never loaded half-way.
    let path = d.join("rec.wasm");
    let mut file = std::fs::File::create(&path).unwrap();
    for chunk in next.chunks(next.len() / 8 + 1) {
        use std::io::Write as _;
        file.write_all(chunk).unwrap();
        file.flush().unwrap();
        tokio::time::sleep(Duration::from_millis(120)).await;
        let status = plugin_status(&runtime, "rec");
        assert_eq!(status.running_digest, Some(digest(&good)), "{status:#?}");
    }
    drop(file);
    running(&runtime, "rec", &digest(&next), 1).await;

    let world = b"(component (import \"evil:net/socket\" (func)))";
    let cases: [(&str, Vec<u8>, &str); 3] = [
        (
            "truncated",
            next[..next.len() / 2].to_vec(),
            "not a loadable WebAssembly component",
        ),
        (
            "not wasm",
            b"#!/bin/sh\necho hello\n".to_vec(),
            "not a loadable WebAssembly component",
        ),
        (
            "wrong world",
            wat::parse_bytes(world).unwrap().into_owned(),
            "implements none of kinformer:plugin/plugin@0.2.0, kinformer:plugin/plugin@0.1.0",
        ),
    ];
    for (case, bytes, cause) in cases {
        publish(d, "rec.wasm", &bytes);
        until(
            &format!("the {case} file to be rejected"),
            Duration::from_secs(10),
            || plugin_status(&runtime, "rec").rejected_digest == Some(digest(&bytes)),
        )
        .await;
        let status = plugin_status(&runtime, "rec");
        assert!(
            status.load_error.as_deref().unwrap_or_default().contains(cause),
            "{case}: {status:#?}"
        );
        assert_eq!(status.running_digest, Some(digest(&next)), "{case}");
        let handled = status.deltas;
        until("the running version to go on", Duration::from_secs(10), || {
            plugin_status(&runtime, "rec").deltas > handled
        })
        .await;
    }
    // Not retried until the file changes.
    let rejected = plugin_status(&runtime, "rec");
    runtime.rescan().await;
    assert_eq!(plugin_status(&runtime, "rec").reloads, rejected.reloads);
    churn.abort();
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_fails_init_or_traps_at_once_is_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = hostile();
    publish(d, "rec.toml", quick_manifest("record=good").as_bytes());
    publish(d, "rec.wasm", &good);
    let workload = Workload::default().seed(13).size(2, 2, 3).changes_per_second(100.0);
    let (_server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    let config = RuntimeConfig::new(d).watch(false).log_sink(logs.sink());
    let runtime = Runtime::start(client, config).await.unwrap();
    running(&runtime, "rec", &digest(&good), 0).await;

    // Refuses in init: never swapped in.
    let refusing = variant(&good, 3);
    publish(d, "rec.toml", quick_manifest("refuse").as_bytes());
    publish(d, "rec.wasm", &refusing);
    runtime.rescan().await;
    let status = plugin_status(&runtime, "rec");
    assert_eq!(status.running_digest, Some(digest(&good)));
    assert_eq!(status.rejected_digest, Some(digest(&refusing)));
    assert!(status.load_error.unwrap_or_default().contains("refusing to start"));
    assert_eq!(status.reloads, 0);

    // Traps on its first deltas: swapped in, then rolled back.
    let trapping = variant(&good, 4);
    publish(d, "rec.toml", quick_manifest("trap-every-3rd").as_bytes());
    publish(d, "rec.wasm", &trapping);
    runtime.rescan().await;
    until("the rollback", Duration::from_secs(20), || {
        plugin_status(&runtime, "rec").rollbacks == 1
    })
    .await;
    running(&runtime, "rec", &digest(&good), 1).await;
    let status = plugin_status(&runtime, "rec");
    assert_eq!(status.rejected_digest, Some(digest(&trapping)));
    assert_eq!((status.reloads, status.traps), (1, 2), "{status:#?}");
    // The restored version handles deltas again, and the failed file is not
    // retried until it changes.
    let handled = logs.of("rec").len();
    until("the restored version to handle deltas", Duration::from_secs(10), || {
        logs.of("rec")[handled..]
            .iter()
            .any(|line| line.starts_with("good Updated"))
    })
    .await;
    runtime.rescan().await;
    assert_eq!(plugin_status(&runtime, "rec").reloads, 1);
    churn.abort();
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_reloads_leave_one_instance_and_unloading_releases_everything() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    publish(d, "rec.toml", quick_manifest("record=0").as_bytes());
    publish(d, "rec.wasm", &hostile());
    let workload = Workload::default().seed(14).size(2, 2, 3).changes_per_second(100.0);
    let (_server, churn, client) = cluster(&workload).await;
    let runtime = Runtime::start(client, RuntimeConfig::new(d).watch(false))
        .await
        .unwrap();
    running(&runtime, "rec", &digest(&hostile()), 0).await;
    let informers = runtime.running_informers();
    assert_eq!((runtime.live_instances(), informers), (1, 1));

    // Manifest-only changes: a new instance each time, no recompiling.
    for reload in 1..=200_u64 {
        publish(d, "rec.toml", quick_manifest(&format!("record={reload}")).as_bytes());
        runtime.rescan().await;
        running(&runtime, "rec", &digest(&hostile()), reload).await;
    }
    until("old instances to be dropped", Duration::from_secs(5), || {
        runtime.live_instances() == 1
    })
    .await;
    assert_eq!(runtime.running_informers(), informers);

    // Removing the file drains and unloads the plugin and frees its informer.
    std::fs::remove_file(d.join("rec.wasm")).unwrap();
    runtime.rescan().await;
    assert!(runtime.status().is_empty());
    until("the instance and informer to go", Duration::from_secs(5), || {
        runtime.live_instances() == 0 && runtime.running_informers() == 0
    })
    .await;
    churn.abort();
    runtime.shutdown().await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_style_symlink_swap_reloads_the_plugin() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The layout kubelet gives a mounted ConfigMap: files are links through `..data`.
    let first = d.join("..2026_12_02_first");
    std::fs::create_dir(&first).unwrap();
    std::fs::write(first.join("rec.wasm"), hostile()).unwrap();
    symlink("..2026_12_02_first", d.join("..data")).unwrap();
    symlink("..data/rec.wasm", d.join("rec.wasm")).unwrap();
    let workload = Workload::default().seed(15).size(1, 1, 2).changes_per_second(20.0);
    let (_server, churn, client) = cluster(&workload).await;
    let runtime = Runtime::start(client, RuntimeConfig::new(d)).await.unwrap();
    running(&runtime, "rec", &digest(&hostile()), 0).await;

    let next = variant(&hostile(), 5);
    let second = d.join("..2026_12_02_second");
    std::fs::create_dir(&second).unwrap();
    std::fs::write(second.join("rec.wasm"), &next).unwrap();
    symlink("..2026_12_02_second", d.join("..data_tmp")).unwrap();
    std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
    running(&runtime, "rec", &digest(&next), 1).await;
    assert_eq!(runtime.status().len(), 1, "hidden entries are not plugins");
    churn.abort();
    runtime.shutdown().await;
}
