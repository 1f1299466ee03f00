//! The example plugins, built from `plugins/` as components, loaded and called
//! through the host's plugin path.

use std::sync::Arc;

use std::path::Path;

use kinformer::apiserver::{Cluster, Offline};
use kinformer::caches::Caches;
use kinformer::delta::{Delta, DeltaType};
use kinformer::grant::{Grant, WriteMode};
use kinformer::indexer::indexer;
use kinformer::limits::Limits;
use kinformer::manifest::Manifest;
use kinformer::object::CachedObject;
use kinformer::plugin::{Error, PluginEngine, PluginOptions};
use kinformer::runtime::PluginState;
use kinformer_tests::{engine, example, messages, object};
use kube::api::GroupVersionKind;
use serde_json::json;

fn pod(name: &str, rv: &str) -> Arc<CachedObject> {
    object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"), "resourceVersion": rv,
                     "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx", "resources": {"requests": {"cpu": "200m"}}}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
}

/// The PodMetrics of pod `name` of app `app` in `shop`, as metrics-server
/// answers it (usage in nanocores).
fn pod_metrics(name: &str, app: &str, cpu_millicores: u64) -> Arc<CachedObject> {
    object(json!({
        "apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": app}},
        "timestamp": "2026-12-04T10:00:00Z", "window": "15s",
        "containers": [{"name": "web", "usage": {"cpu": format!("{}n", cpu_millicores * 1_000_000), "memory": "10Mi"}}]
    }))
}

/// Loads `component`, which logs deltas as delta-logger does, and checks
/// what it logged of a batch of two types and of an update: the old
/// object's resourceVersion comes from the old object it was handed.
fn logs_added_updated_and_deleted_deltas(component: &kinformer::PluginComponent, name: &str) {
    let mut instance = component
        .instantiate(Caches::new(), PluginOptions::default())
        .expect("the plugin instantiates");

    let registration = instance.init("v1/Pod, apps/v1/Deployment").expect("init succeeds");
    assert_eq!(registration.name, name);
    let watched: Vec<_> = registration.subscriptions.iter().map(|s| s.gvk.clone()).collect();
    assert_eq!(
        watched,
        [
            GroupVersionKind::gvk("", "v1", "Pod"),
            GroupVersionKind::gvk("apps", "v1", "Deployment")
        ]
    );
    assert!(registration.subscriptions.iter().all(|s| s.deliver));

    let gvk = Arc::new(GroupVersionKind::gvk("", "v1", "Pod"));
    let deployments = Arc::new(GroupVersionKind::gvk("apps", "v1", "Deployment"));
    let deployment = object(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "9"}
    }));
    let (v1, v2) = (pod("web-0", "10"), pod("web-0", "11"));
    // A batch replayed across informers holds several types.
    let batch = [
        Delta::new(DeltaType::Added, deployments, deployment).in_initial_list(),
        Delta::new(DeltaType::Added, gvk.clone(), v1.clone()).in_initial_list(),
        Delta::updated(gvk.clone(), v1, v2.clone()),
    ];
    instance.handle(&batch).expect("the batch is handled");
    instance
        .handle(&[Delta::new(DeltaType::Deleted, gvk, v2)])
        .expect("the delete is handled");

    assert_eq!(
        messages(&instance),
        [
            "Added Deployment shop/web rv=9 (initial list)",
            "Added Pod shop/web-0 rv=10 (initial list)",
            "Updated Pod shop/web-0 rv=11 (was rv=10)",
            "Deleted Pod shop/web-0 rv=11",
        ]
    );
}

#[test]
fn delta_logger_logs_added_updated_and_deleted_deltas() {
    logs_added_updated_and_deleted_deltas(&example("delta-logger"), "delta-logger");
}

#[test]
fn a_plugin_of_the_first_world_version_is_served_as_it_was() {
    let component = engine().load_bytes("world-0-1", plugin_artifacts::WORLD_0_1).unwrap();
    logs_added_updated_and_deleted_deltas(&component, "world-0-1");
}

#[test]
fn delta_logger_refuses_a_malformed_config() {
    let mut instance = example("delta-logger")
        .instantiate(Caches::new(), PluginOptions::default())
        .unwrap();
    let error = instance.init("Pod").unwrap_err();
    assert!(
        matches!(&error, Error::Plugin { call: "init", message, .. } if message.contains("bad resource \"Pod\"")),
        "{error}"
    );
    // A plugin that refused to start is not called.
    let error = instance.handle(&[]).unwrap_err();
    assert!(
        error.to_string().contains("handle called before a successful init"),
        "{error}"
    );
}

#[test]
fn hpa_advisor_queries_the_cache_for_the_target_pods() {
    // The caches the advisor reads: deployments and pods, as the informers keep them.
    let caches = Caches::new();
    let (deployments, deployment_writer) = indexer();
    let (pods, pod_writer) = indexer();
    caches.insert(GroupVersionKind::gvk("apps", "v1", "Deployment"), deployments);
    caches.insert(GroupVersionKind::gvk("", "v1", "Pod"), pods);
    // And the resource metrics API, which the advisor reads uncached: here a
    // cluster without a server answers reads from this cache.
    let (metrics, metrics_writer) = indexer();
    caches.insert(
        GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics"),
        metrics,
    );
    deployment_writer.apply(object(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "1"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {}}
    })));
    for (i, cpu) in [180, 190, 200].into_iter().enumerate() {
        pod_writer.apply(pod(&format!("web-{i}"), "2"));
        metrics_writer.apply(pod_metrics(&format!("web-{i}"), "web", cpu));
    }
    // A busy pod of another app in the namespace must not count.
    pod_writer.apply(object(json!({
        "metadata": {"name": "db-0", "namespace": "shop", "labels": {"app": "db"}},
        "spec": {"containers": [{"name": "db", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    })));
    metrics_writer.apply(pod_metrics("db-0", "db", 5000));

    // Granted as its manifest grants it: the metrics reads included.
    let manifest = Manifest::parse(
        Path::new("hpa-advisor.toml"),
        include_str!("../../plugins/hpa-advisor/manifest.toml"),
    )
    .unwrap();
    let writer = Cluster::offline(Offline::new(caches.clone(), 0)).writer(
        "hpa-advisor",
        manifest.grant.clone(),
        &manifest.limits,
        manifest.mode,
        None,
    );
    let options = PluginOptions::default().grant(manifest.grant).writer(writer);
    let mut instance = example("hpa-advisor").instantiate(caches, options).unwrap();
    let registration = instance.init("").unwrap();
    let delivered: Vec<_> = registration
        .subscriptions
        .iter()
        .map(|s| (s.gvk.kind.as_str(), s.deliver))
        .collect();
    assert_eq!(
        delivered,
        [("HorizontalPodAutoscaler", true), ("Deployment", false), ("Pod", false)]
    );

    let hpa_gvk = Arc::new(GroupVersionKind::gvk("autoscaling", "v2", "HorizontalPodAutoscaler"));
    let hpa = object(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "3"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 2, "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                              "target": {"type": "Utilization", "averageUtilization": 50}}}]}
    }));
    instance
        .handle(&[Delta::new(DeltaType::Added, hpa_gvk.clone(), hpa.clone())])
        .unwrap();
    // 570m used of 600m requested is 95%; at a 50% target, 3 pods become ceil(3 × 1.9) = 6.
    assert_eq!(
        messages(&instance),
        ["hpa shop/web: 3 ready pods of deployment web at 95% cpu (target 50%): would scale 3 -> 6"]
    );

    // One pod goes and the load falls on the other two: the minimum holds.
    pod_writer.delete("shop/web-2");
    metrics_writer.delete("shop/web-2");
    metrics_writer.apply(pod_metrics("web-0", "web", 10));
    metrics_writer.apply(pod_metrics("web-1", "web", 10));
    instance
        .handle(&[Delta::new(DeltaType::Sync, hpa_gvk.clone(), hpa.clone())])
        .unwrap();
    instance
        .handle(&[Delta::new(DeltaType::Deleted, hpa_gvk, hpa)])
        .unwrap();
    assert_eq!(
        messages(&instance)[1..],
        [
            "hpa shop/web: 2 ready pods of deployment web at 5% cpu (target 50%): would scale 3 -> 2",
            "hpa shop/web: deleted, nothing to scale",
        ]
    );
}

#[test]
fn hpa_advisor_without_a_metrics_grant_says_it_cannot_read_them() {
    let caches = Caches::new();
    let (deployments, deployment_writer) = indexer();
    let (pods, pod_writer) = indexer();
    caches.insert(GroupVersionKind::gvk("apps", "v1", "Deployment"), deployments);
    caches.insert(GroupVersionKind::gvk("", "v1", "Pod"), pods);
    deployment_writer.apply(object(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "1"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {}}
    })));
    pod_writer.apply(pod("web-0", "2"));
    let grant = Grant::default();
    let writer = Cluster::offline(Offline::new(caches.clone(), 0)).writer(
        "hpa-advisor",
        grant.clone(),
        &Limits::default(),
        WriteMode::Live,
        None,
    );
    let options = PluginOptions::default().grant(grant).writer(writer);
    let mut instance = example("hpa-advisor").instantiate(caches, options).unwrap();
    instance.init("").unwrap();
    let hpa = object(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "3"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                              "target": {"type": "Utilization", "averageUtilization": 50}}}]}
    }));
    let hpas = Arc::new(GroupVersionKind::gvk("autoscaling", "v2", "HorizontalPodAutoscaler"));
    instance.handle(&[Delta::new(DeltaType::Added, hpas, hpa)]).unwrap();
    let said = messages(&instance);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with("hpa shop/web: unable to get cpu metrics of shop/web: read denied:"),
        "{said:?}"
    );
}

#[test]
fn a_file_that_is_not_a_component_is_rejected_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (_, delta_logger) = plugin_artifacts::ALL[0];
    for (name, bytes) in [
        ("notes.wasm", b"these are not the bytes you are looking for".to_vec()),
        ("core-module.wasm", wat::parse_str("(module)").unwrap()),
        ("truncated.wasm", delta_logger[..delta_logger.len() / 2].to_vec()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let error = engine().load_file(&path).unwrap_err();
        assert!(matches!(error, Error::Compile { .. }), "{name}: {error:?}");
        assert!(error.to_string().contains(&path.display().to_string()), "{error}");
    }
    let missing = dir.path().join("missing.wasm");
    let error = engine().load_file(&missing).unwrap_err();
    assert!(error.to_string().contains("missing.wasm"), "{error}");
}

#[test]
fn a_plugin_holds_at_most_its_own_instances_and_none_of_another() {
    let engine = PluginEngine::new().unwrap();
    let load = |name: &str| {
        let (_, bytes) = plugin_artifacts::ALL
            .iter()
            .find(|(file, _)| file.strip_suffix(".wasm") == Some(name))
            .unwrap();
        engine.load_bytes(name, bytes).unwrap()
    };
    let (greedy, neighbour) = (load("delta-logger"), load("node-watcher"));
    let options = PluginOptions::with_limits(Limits {
        max_instances: 2,
        ..Limits::default()
    });
    let held: Vec<_> = (0..2)
        .map(|_| greedy.instantiate(Caches::new(), options.clone()).unwrap())
        .collect();
    let error = greedy.instantiate(Caches::new(), options.clone()).unwrap_err();
    assert!(matches!(error, Error::Instances { limit: 2, .. }), "{error:?}");
    assert!(error.to_string().contains("limits.max-instances"), "{error}");
    // The neighbour's share is its own.
    let neighbours: Vec<_> = (0..2)
        .map(|_| neighbour.instantiate(Caches::new(), options.clone()).unwrap())
        .collect();
    assert_eq!(engine.live_instances(), 4);
    // An instance dropped is a slot given back.
    drop(held);
    greedy.instantiate(Caches::new(), options).unwrap();
    drop(neighbours);
}

#[test]
fn a_call_that_loops_after_the_engine_sat_idle_still_ends_at_its_deadline() {
    // The epoch ticker parks when no call runs; a call must wake it.
    let engine = PluginEngine::new().unwrap();
    let hostile = engine
        .load_bytes("hostile", plugin_artifacts::test_plugin("hostile.wasm"))
        .unwrap();
    let options = PluginOptions::default().call_timeout(std::time::Duration::from_millis(200));
    let mut instance = hostile.instantiate(Caches::new(), options).unwrap();
    instance.init("loop").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));

    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let delta = Delta::new(
            DeltaType::Added,
            Arc::new(GroupVersionKind::gvk("", "v1", "Pod")),
            pod("web-1", "1"),
        );
        let _ = done.send(instance.handle(&[delta]));
    });
    let outcome = ended
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a looping call outlived its deadline by a minute");
    let error = outcome.unwrap_err();
    assert!(matches!(error, Error::Trap { .. }), "{error:?}");
    assert!(format!("{error:?}").contains("interrupt"), "{error:?}");
}

#[test]
fn a_component_of_another_world_is_rejected_naming_the_world() {
    let cases = [
        ("empty", "(component)"),
        ("wrong-import", r#"(component (import "evil:net/socket" (func)))"#),
    ];
    for (name, wat) in cases {
        let error = engine().load_bytes(name, &wat::parse_str(wat).unwrap()).unwrap_err();
        assert!(matches!(error, Error::Link { .. }), "{name}: {error:?}");
        let message = error.to_string();
        assert!(message.starts_with(&format!("{name}:")), "{message}");
        assert!(message.contains("kinformer:plugin/plugin@0.2.0"), "{message}");
        assert!(message.contains("kinformer:plugin/plugin@0.1.0"), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_the_example_plugins_against_the_emulated_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    kinformer_cli::demo::write_plugins(&plugins, plugin_artifacts::ALL).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut config =
        kinformer_cli::demo::DemoConfig::new(&plugins, &kubeconfig).duration(std::time::Duration::from_secs(4));
    // Every line, not only the status's recent ones: plugins load one after
    // another, and the first ones log much while the others compile.
    let all_logs = kinformer_tests::runtime::Logs::default();
    config.runtime = config.runtime.log_sink(all_logs.sink());
    let plugins = kinformer_cli::demo::run(&config).await.unwrap();
    assert!(
        std::fs::read_to_string(&kubeconfig)
            .unwrap()
            .contains("server: http://127.0.0.1:")
    );
    let logs = |name: &str| -> Vec<String> {
        let status = plugins
            .iter()
            .find(|status| status.name == name)
            .expect("plugin loaded");
        assert_eq!(status.state, PluginState::Stopped, "{status:#?}");
        assert_eq!((status.traps, status.errors), (0, 0), "{status:#?}");
        all_logs.of(name)
    };

    // The workload runs 2 namespaces of 2 deployments of about 3 pods (it
    // scales them): the logger first gets each pod once as its initial list,
    // then live changes.
    let pod_deltas = logs("delta-logger");
    let initial: Vec<_> = pod_deltas
        .iter()
        .take_while(|line| line.ends_with("(initial list)"))
        .collect();
    let keys: std::collections::BTreeSet<_> = initial.iter().map(|line| line.split(' ').nth(2)).collect();
    assert!(initial.len() >= 10 && keys.len() == initial.len(), "{pod_deltas:#?}");
    assert!(
        pod_deltas[initial.len()..]
            .iter()
            .all(|line| !line.ends_with("(initial list)")),
        "{pod_deltas:#?}"
    );
    assert!(
        initial
            .iter()
            .all(|line| line.starts_with("Added Pod ns-") || line.starts_with("Added Pod shop/")),
        "{initial:#?}"
    );
    assert!(
        pod_deltas.len() > 12,
        "no live pod deltas after the initial list: {pod_deltas:#?}"
    );

    // The demo's tenant: its Handler runs delta-logger on its namespace's
    // pods only, as plugin `shop.pod-logger`.
    let tenant = logs("shop.pod-logger");
    assert!(
        tenant.iter().any(|line| line.starts_with("Added Pod shop/storefront-")),
        "{tenant:#?}"
    );
    assert!(tenant.iter().all(|line| !line.contains(" ns-")), "{tenant:#?}");

    // Every HPA of the workload was evaluated, and since delivery waits for the
    // pod and deployment caches to sync, the first evaluation already finds pods.
    let advice = logs("hpa-advisor");
    for hpa in ["ns-0/app-0", "ns-0/app-1", "ns-1/app-0", "ns-1/app-1"] {
        let first = advice.iter().find(|line| line.starts_with(&format!("hpa {hpa}: ")));
        assert!(
            first.is_some_and(|line| line.contains("would scale")),
            "{hpa}: {advice:#?}"
        );
    }
    // The node index answered for pods.
    assert!(logs("node-watcher").iter().any(|line| line.contains(" pods on node-")));
}

#[test]
fn the_readme_plugin_is_the_node_watcher_example() {
    let readme = include_str!("../../README.md");
    let snippet = readme
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README has a rust block");
    let source = include_str!("../../plugins/node-watcher/src/lib.rs");
    assert!(
        source.ends_with(snippet),
        "README's plugin differs from plugins/node-watcher"
    );
}
