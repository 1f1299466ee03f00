//! Controllers end to end: a plugin of the controller world reconciling replica
//! sets from their own and their pods' changes, through errors and hot swaps,
//! under churn on the emulated API server.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::BTreeMap;
use std::time::Duration;

use apiserver_sim::ApiServer;
use apiserver_sim::store::{Filter, ListOptions, ResourceId};
use apiserver_sim::workload::Workload;
use kinformer::plugin::digest;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::runtime::{Logs, cluster, plugin_status, publish, quick_manifest, until};
use plugin_artifacts::variant;

fn reconciler() -> Vec<u8> {
    plugin_artifacts::test_plugin("reconciler.wasm").to_vec()
}

/// What the server holds, as the reconciler reports it: per replica set key,
/// `RV/PODS-RV` (its resourceVersion and its pods' highest one).
fn server_states(server: &ApiServer) -> BTreeMap<String, String> {
    let list = |resource: &str, group: &str| {
        let id = ResourceId::new(group, "v1", resource);
        server
            .store()
            .list(&id, &Filter::default(), &ListOptions::default())
            .unwrap()
            .items
    };
    let pods = list("pods", "");
    list("replicasets", "apps")
        .iter()
        .map(|replica_set| {
            let newest = pods
                .iter()
                .filter(|pod| pod.namespace == replica_set.namespace)
                .filter(|pod| {
                    pod.value["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|owners| owners.iter().any(|owner| owner["name"] == replica_set.name.as_str()))
                })
                .map(|pod| pod.resource_version)
                .max()
                .unwrap_or(0);
            (
                replica_set.key.clone(),
                format!("{}/{newest}", replica_set.resource_version),
            )
        })
        .collect()
}

/// The last reconcile of each key in the log: (label, state).
fn last_reconciles(logs: &Logs, name: &str) -> BTreeMap<String, (String, String)> {
    let mut last = BTreeMap::new();
    for line in logs.of(name) {
        let words: Vec<&str> = line.split(' ').collect();
        if let [label, "reconcile", key, state] = words[..] {
            last.insert(key.to_owned(), (label.to_owned(), state.to_owned()));
        }
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_swaps_under_churn_lose_no_key_and_the_last_version_reconciles_every_final_state() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let versions = [reconciler(), variant(&reconciler(), 1)];
    publish(d, "ctl.toml", quick_manifest("v0").as_bytes());
    publish(d, "ctl.wasm", &versions[0]);

    let workload = Workload::default().seed(21).size(3, 4, 3).changes_per_second(500.0);
    let (server, churn, client) = cluster(&workload).await;
    let logs = Logs::default();
    // Each swap is one rescan of the test's: a watch could also rescan
    // between the manifest's write and the component's, a swap of its own.
    let config = RuntimeConfig::new(d).log_sink(logs.sink()).watch(false);
    let runtime = Runtime::start(client, config).await.unwrap();
    until("the controller to reconcile", Duration::from_secs(30), || {
        !last_reconciles(&logs, "ctl").is_empty()
    })
    .await;

    let swaps = 20_u64;
    for swap in 1..=swaps {
        let version = &versions[(swap % 2) as usize];
        publish(d, "ctl.toml", quick_manifest(&format!("v{swap}")).as_bytes());
        publish(d, "ctl.wasm", version);
        runtime.rescan().await;
        let expected = digest(version);
        until(&format!("swap {swap} to go live"), Duration::from_secs(30), || {
            let status = plugin_status(&runtime, "ctl");
            status.running_digest.as_deref() == Some(expected.as_str()) && status.reloads >= swap
        })
        .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    churn.abort();
    // Let the last writes of the churn land before reading the final state.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let finals = server_states(&server);
    assert!(finals.len() >= 12, "{finals:?}");
    let last_label = format!("v{swaps}");
    until(
        "the last version to reconcile every final state",
        Duration::from_secs(30),
        || {
            let last = last_reconciles(&logs, "ctl");
            finals
                .iter()
                .all(|(key, state)| last.get(key) == Some(&(last_label.clone(), state.clone())))
        },
    )
    .await;
    let status = plugin_status(&runtime, "ctl");
    assert_eq!(status.reloads, swaps, "{status:#?}");
    assert_eq!((status.traps, status.errors), (0, 0), "{status:#?}");
    // Many deltas, few reconciles: keys queued several times were reconciled once.
    assert!(status.reconciles > 0);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_reconcile_is_retried_until_it_succeeds_and_requeue_after_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Every 2nd reconcile fails; every success asks to be requeued in 50 ms.
    publish(
        d,
        "ctl.toml",
        quick_manifest("flaky,fail-every=2,requeue-ms=50").as_bytes(),
    );
    publish(d, "ctl.wasm", &reconciler());
    let workload = Workload::default().seed(3).size(1, 2, 2).changes_per_second(0.0);
    let (server, churn, client) = cluster(&workload).await;
    churn.abort();
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();
    let finals = server_states(&server);
    assert_eq!(finals.len(), 2);
    // With nothing changing, each key is reconciled again and again: by the
    // retries after errors and by the requeue after each success.
    until("each key to be reconciled five times", Duration::from_secs(30), || {
        let lines = logs.of("ctl");
        finals.keys().all(|key| {
            lines
                .iter()
                .filter(|line| line.contains(&format!(" reconcile {key} ")))
                .count()
                >= 5
        })
    })
    .await;
    let status = plugin_status(&runtime, "ctl");
    assert!(status.errors >= 4, "{status:#?}");
    assert_eq!(status.traps, 0);
    let last = last_reconciles(&logs, "ctl");
    for (key, state) in &finals {
        assert_eq!(last.get(key), Some(&("flaky".to_owned(), state.clone())));
    }
    runtime.shutdown().await;
}
