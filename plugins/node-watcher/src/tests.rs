//! The handler's logic, natively: no wasmtime, an in-memory cache.
#![allow(clippy::unwrap_used, reason = "tests fail by panicking")]

use kinformer_sdk::Gvk;
use kinformer_sdk::testing::Harness;
use serde_json::{Value, json};

use super::NodeWatcher;

fn pod(name: &str, node: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}}, "spec": {"nodeName": node}})
}

#[test]
fn each_delta_counts_the_pods_on_its_node_from_the_cache() {
    let mut plugin = Harness::<NodeWatcher>::init("").unwrap();
    let pods = Gvk::new("", "v1", "Pod");
    plugin.add(&pods, pod("web-0", "node-1")).unwrap();
    plugin.add(&pods, pod("web-1", "node-1")).unwrap();
    plugin.add(&pods, pod("web-2", "node-2")).unwrap();
    plugin.update(&pods, pod("web-2", "node-1")).unwrap();
    plugin.delete(&pods, "shop/web-0").unwrap();
    assert_eq!(
        plugin.take_logs(),
        [
            "Added shop/web-0: 1 pods on node-1",
            "Added shop/web-1: 2 pods on node-1",
            "Added shop/web-2: 1 pods on node-2",
            "Updated shop/web-2: 3 pods on node-1",
            "Deleted shop/web-0: 2 pods on node-1",
        ]
    );
}

#[test]
fn the_harness_answers_queries_as_the_host_does() {
    let mut plugin = Harness::<NodeWatcher>::init("").unwrap();
    let pods = Gvk::new("", "v1", "Pod");
    plugin.insert(&pods, pod("web-0", "node-1"));
    plugin.insert(
        &pods,
        json!({"metadata": {"name": "db-0", "namespace": "data", "labels": {"app": "db"}}}),
    );
    let web = kinformer_sdk::cache::list(&pods)
        .label_selector("app in (web)")
        .fetch()
        .unwrap();
    assert_eq!(web.objects.len(), 1);
    let limited = kinformer_sdk::cache::list(&pods).limit(1).fetch().unwrap();
    assert!(limited.truncated);
    assert_eq!(
        kinformer_sdk::cache::index_values(&pods, "namespace").unwrap(),
        ["data", "shop"]
    );
    assert_eq!(kinformer_sdk::cache::index_values(&pods, "node").unwrap(), ["node-1"]);
    assert!(kinformer_sdk::cache::by_index(&pods, "zone", "a", 0).is_err());
    let deployments = Gvk::new("apps", "v1", "Deployment");
    assert!(kinformer_sdk::cache::get(&deployments, "shop/web").is_err());
    assert!(
        kinformer_sdk::cache::list(&pods)
            .label_selector("app in")
            .fetch()
            .is_err()
    );
}
