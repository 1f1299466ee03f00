//! A host whose credentials reach only some namespaces (RoleBindings in its
//! tenants' namespaces, no ClusterRole): plugins granted those namespaces, or
//! a host confined to them, list and watch each namespace on its own and never
//! across namespaces.

use std::time::Duration;

use apiserver_sim::workload::Workload;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::runtime::{Logs, cluster, install, plugin_status, until};

/// The namespaces of the keys `name` logged deltas for.
fn namespaces_seen(logs: &Logs, name: &str) -> std::collections::BTreeSet<String> {
    logs.of(name)
        .iter()
        .filter_map(|line| {
            line.split(' ')
                .nth(2)?
                .split_once('/')
                .map(|(namespace, _)| namespace.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_granted_two_namespaces_sync_on_credentials_that_reach_only_those() {
    let workload = Workload::default().seed(11).size(3, 1, 2).changes_per_second(40.0);
    let (server, churn, client) = cluster(&workload).await;
    // As RBAC answers a ServiceAccount bound by RoleBindings in ns-0 and ns-1.
    server.faults().confine("pods", ["ns-0", "ns-1"]);
    server.faults().confine("deployments", ["ns-0", "ns-1"]);

    let dir = tempfile::tempdir().unwrap();
    let both = "config = \"v1/Pod,apps/v1/Deployment\"\n[grant]\nnamespaces = [\"ns-0\", \"ns-1\"]\n";
    install(dir.path(), "team-a", "delta-logger.wasm", Some(both));
    install(dir.path(), "team-b", "delta-logger.wasm", Some(both));
    let one = "config = \"v1/Pod\"\n[grant]\nnamespaces = [\"ns-1\"]\n";
    install(dir.path(), "team-c", "delta-logger.wasm", Some(one));
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(dir.path()).log_sink(logs.sink()))
        .await
        .unwrap();
    until("every plugin running", Duration::from_secs(30), || {
        ["team-a", "team-b", "team-c"]
            .iter()
            .all(|name| plugin_status(&runtime, name).state == kinformer::runtime::PluginState::Running)
    })
    .await;
    // Each sees live changes in its namespaces, from the lists and the watches.
    until("live deltas in both namespaces", Duration::from_secs(30), || {
        let live = |namespace: &str| {
            logs.of("team-a")
                .iter()
                .any(|line| line.contains(&format!(" {namespace}/")) && !line.ends_with("(initial list)"))
        };
        live("ns-0") && live("ns-1")
    })
    .await;
    until("team-c's deltas", Duration::from_secs(30), || {
        !logs.of("team-c").is_empty()
    })
    .await;
    let expected: std::collections::BTreeSet<String> = ["ns-0".to_owned(), "ns-1".to_owned()].into();
    assert_eq!(namespaces_seen(&logs, "team-a"), expected);
    assert_eq!(namespaces_seen(&logs, "team-b"), expected);
    assert_eq!(namespaces_seen(&logs, "team-c"), ["ns-1".to_owned()].into());
    // Nothing was asked across namespaces or in ns-2: RBAC would have refused it.
    assert_eq!(server.faults().denied("pods"), 0);
    assert_eq!(server.faults().denied("deployments"), 0);
    runtime.shutdown().await;

    // A host confined to the two namespaces runs a plugin granted every one.
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "anyone", "delta-logger.wasm", Some("config = \"v1/Pod\"\n"));
    let logs = Logs::default();
    let client = kube::Client::try_from(server.client_config()).unwrap();
    let config = RuntimeConfig::new(dir.path())
        .namespace("ns-0")
        .namespace("ns-1")
        .log_sink(logs.sink());
    let runtime = Runtime::start(client, config).await.unwrap();
    until("the confined host's deltas", Duration::from_secs(30), || {
        namespaces_seen(&logs, "anyone").len() == 2
    })
    .await;
    assert_eq!(namespaces_seen(&logs, "anyone"), expected);
    assert_eq!(server.faults().denied("pods"), 0);
    runtime.shutdown().await;
    churn.abort();
}
