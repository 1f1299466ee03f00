//! `kubectl` against the emulated server: get, apply, delete and watch see the
//! same objects as the store.
//!
//! The test uses the `kubectl` on PATH, installs Debian's `kubernetes-client` when
//! there is none and it can, and otherwise skips with the reason printed.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use apiserver_sim::store::{PatchType, ResourceId, WriteOptions};
use apiserver_sim::{ApiServer, SimConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// `kubectl`, installed if missing and possible; `None` with the reason printed.
fn kubectl() -> Option<String> {
    let works = |program: &str| {
        Command::new(program)
            .args(["version", "--client"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works("kubectl") {
        return Some("kubectl".into());
    }
    let installed = Command::new("sh")
        .args([
            "-c",
            "apt-get install -y -q kubernetes-client || (apt-get update -q && apt-get install -y -q kubernetes-client)",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if installed && works("kubectl") {
        return Some("kubectl".into());
    }
    println!("skipped: no kubectl on PATH and `apt-get install kubernetes-client` failed");
    None
}

fn run(kubectl: &str, kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kubectl {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_applies_deletes_and_watches() {
    let Some(kubectl) = kubectl() else { return };
    // No controllers: the namespace holds only the ConfigMaps written here, not kube-root-ca.crt.
    let server = ApiServer::start(SimConfig::default().controllers(false)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let configmaps = ResourceId::new("", "v1", "configmaps");

    // apply -f creates, then patches; the store holds what kubectl sent.
    let apply = |mode: &str| {
        let manifest = dir.path().join("cm.yaml");
        std::fs::write(
            &manifest,
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  labels:\n    app: web\ndata:\n  mode: {mode}\n"),
        )
        .unwrap();
        let (kc, config) = (kubectl.clone(), kubeconfig.clone());
        tokio::task::spawn_blocking(move || run(&kc, &config, &["apply", "-f", manifest.to_str().unwrap()]))
    };
    let applied = apply("fast").await.unwrap();
    assert!(applied.contains("configmap/settings created"), "{applied}");
    assert_eq!(
        server
            .store()
            .get(&configmaps, Some("default"), "settings")
            .unwrap()
            .value["data"]["mode"],
        "fast"
    );
    let reapplied = apply("safe").await.unwrap();
    assert!(reapplied.contains("configmap/settings configured"), "{reapplied}");
    assert_eq!(
        server
            .store()
            .get(&configmaps, Some("default"), "settings")
            .unwrap()
            .value["data"]["mode"],
        "safe"
    );

    // get sees what the store holds, with label selectors.
    server
        .store()
        .create(
            &configmaps,
            Some("default"),
            json!({"metadata": {"name": "other", "labels": {"app": "db"}}}),
        )
        .unwrap();
    let (kc, config) = (kubectl.clone(), kubeconfig.clone());
    let listed =
        tokio::task::spawn_blocking(move || run(&kc, &config, &["get", "configmaps", "-l", "app=web", "-o", "json"]))
            .await
            .unwrap();
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let names: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["settings"]);
    let (kc, config) = (kubectl.clone(), kubeconfig.clone());
    let table = tokio::task::spawn_blocking(move || run(&kc, &config, &["get", "cm"]))
        .await
        .unwrap();
    assert!(table.contains("settings") && table.contains("other"), "{table}");

    // get -w prints changes made while it watches.
    let mut watch = tokio::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "configmaps", "-w", "-o", "name"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let watched = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen.push(line.clone());
            if seen.len() == 2 {
                // The initial list is printed: now change something.
                server
                    .store()
                    .patch(
                        &configmaps,
                        Some("default"),
                        "other",
                        PatchType::Merge,
                        json!({"data": {"x": "1"}}),
                        false,
                    )
                    .unwrap();
            }
            if seen.len() == 3 {
                return;
            }
        }
    })
    .await;
    watched.unwrap_or_else(|_| panic!("kubectl get -w printed only {seen:?}"));
    assert_eq!(seen, ["configmap/other", "configmap/settings", "configmap/other"]);
    watch.kill().await.unwrap();

    // delete removes it from the store.
    let (kc, config) = (kubectl.clone(), kubeconfig.clone());
    let deleted = tokio::task::spawn_blocking(move || run(&kc, &config, &["delete", "configmap", "settings"]))
        .await
        .unwrap();
    assert!(deleted.contains("deleted"), "{deleted}");
    assert!(server.store().get(&configmaps, Some("default"), "settings").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_server_side_scales_and_waits_for_a_rollout() {
    let Some(kubectl) = kubectl() else { return };
    let server = ApiServer::start(SimConfig::default().pod_start_delay(Duration::from_millis(20)))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let manifest = dir.path().join("deploy.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: app\n        image: registry.example/app:1.0\n",
    )
    .unwrap();
    let kubectl_run = |args: Vec<String>| {
        let (kc, config) = (kubectl.clone(), kubeconfig.clone());
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run(&kc, &config, &args)
        })
    };
    let args = |line: &str| line.split(' ').map(str::to_owned).collect::<Vec<_>>();

    let applied = kubectl_run(args(&format!("apply --server-side -f {}", manifest.display())))
        .await
        .unwrap();
    assert!(applied.contains("deployment.apps/web serverside-applied"), "{applied}");
    let deployments = ResourceId::new("apps", "v1", "deployments");
    let stored = server.store().get(&deployments, Some("default"), "web").unwrap();
    assert_eq!(stored.value["metadata"]["managedFields"][0]["operation"], "Apply");

    // kubectl scale finds deployments/scale in discovery and writes through it.
    let scaled = kubectl_run(args("scale deployment web --replicas=3")).await.unwrap();
    assert!(scaled.contains("deployment.apps/web scaled"), "{scaled}");
    let rolled_out = tokio::time::timeout(
        Duration::from_secs(60),
        kubectl_run(args("rollout status deployment/web --timeout=30s")),
    )
    .await
    .expect("kubectl rollout status never saw the rollout finish")
    .unwrap();
    assert!(rolled_out.contains("successfully rolled out"), "{rolled_out}");
    let pods = ResourceId::new("", "v1", "pods");
    assert_eq!(server.store().count(&pods), 3);
}

/// A pod written as the scheduler and kubelet leave it: on `node`, Running.
fn running_pod(server: &ApiServer, namespace: &str, name: &str, node: &str) {
    let pods = ResourceId::new("", "v1", "pods");
    server
        .store()
        .create(
            &pods,
            Some(namespace),
            json!({"metadata": {"name": name, "labels": {"app": "web"}},
                   "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1"}]}}),
        )
        .expect("the store takes the pod");
    server
        .store()
        .transaction(WriteOptions::default())
        .update(
            &pods,
            Some(namespace),
            name,
            json!({"status": {"phase": "Running", "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 0, "state": {"running": {}}}
            ]}}),
            true,
        )
        .expect("the store takes the pod's status");
}

/// The cells of `kubectl top`'s row for `name`.
fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&name))
        .unwrap_or_else(|| panic!("no row for {name} in:\n{table}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_prints_the_usage_of_pods_and_nodes() {
    let Some(kubectl) = kubectl() else { return };
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let nodes = ResourceId::new("", "v1", "nodes");
    for node in ["node-a", "node-b"] {
        server
            .store()
            .create(&nodes, None, json!({"metadata": {"name": node}}))
            .unwrap();
        server
            .store()
            .transaction(WriteOptions::default())
            .update(
                &nodes,
                None,
                node,
                json!({"status": {"capacity": {"cpu": "4", "memory": "8Gi"},
                                  "allocatable": {"cpu": "4", "memory": "8Gi"}}}),
                true,
            )
            .unwrap();
    }
    running_pod(&server, "default", "web-a", "node-a");
    running_pod(&server, "default", "web-b", "node-a");
    let metrics = server.metrics();
    metrics.set_pod_cpu("default", "web-a", 120);
    metrics.set_pod_memory("default", "web-a", 64 * 1024 * 1024);
    metrics.set_pod_cpu("default", "web-b", 80);
    metrics.set_pod_memory("default", "web-b", 32 * 1024 * 1024);

    let top = |args: &'static [&'static str]| {
        let (kc, config) = (kubectl.clone(), kubeconfig.clone());
        tokio::task::spawn_blocking(move || run(&kc, &config, args))
    };
    let pods = top(&["top", "pods", "-n", "default"]).await.unwrap();
    assert_eq!(row(&pods, "web-a"), ["web-a", "120m", "64Mi"], "{pods}");
    assert_eq!(row(&pods, "web-b"), ["web-b", "80m", "32Mi"], "{pods}");

    // A node: what it uses itself (100m, 512Mi) and what its pods use.
    let nodes = top(&["top", "nodes"]).await.unwrap();
    assert_eq!(row(&nodes, "node-a")[1..4], ["300m", "7%", "608Mi"], "{nodes}");
    assert_eq!(row(&nodes, "node-b")[1..4], ["100m", "2%", "512Mi"], "{nodes}");

    // kubectl get asks for a Table, with metrics-server's columns (CPU in
    // nanocores, a little under the 120m set).
    let table = top(&["get", "pods.metrics.k8s.io", "-n", "default"]).await.unwrap();
    assert!(table.starts_with("NAME"), "{table}");
    let cells = row(&table, "web-a");
    assert_eq!((cells[2], cells[3]), ("64Mi", "15s"), "{table}");
    assert!(cells[1].starts_with("119") && cells[1].ends_with('n'), "{table}");

    // metrics-server down: kubectl reports what the aggregator answered.
    server.metrics().set_available(false);
    let output = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["top", "pods", "-n", "default"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the server is currently unable to handle the request"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_the_api_servers_columns_and_apply_merges_containers_by_name() {
    let Some(kubectl) = kubectl() else { return };
    let server = ApiServer::start(SimConfig::default().controllers(false)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let kubectl_run = |args: Vec<String>| {
        let (kc, config) = (kubectl.clone(), kubeconfig.clone());
        tokio::task::spawn_blocking(move || run(&kc, &config, &args.iter().map(String::as_str).collect::<Vec<_>>()))
    };

    // The pod printer's columns and cells, as kube-apiserver prints them.
    running_pod(&server, "default", "web-a", "node-a");
    let pods = kubectl_run(vec!["get".into(), "pods".into()]).await.unwrap();
    let header: Vec<&str> = pods.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], "{pods}");
    assert_eq!(row(&pods, "web-a")[..4], ["web-a", "1/1", "Running", "0"], "{pods}");
    let namespaces = kubectl_run(vec!["get".into(), "namespace".into(), "default".into()])
        .await
        .unwrap();
    assert_eq!(row(&namespaces, "default")[..2], ["default", "Active"], "{namespaces}");

    // Client-side apply sends a strategic merge patch with `$setElementOrder`:
    // the containers merge by name, in the manifest's order, and no directive
    // is stored.
    let manifest = dir.path().join("deployment.yaml");
    let apply = |containers: &[&str]| {
        let containers: String = containers
            .iter()
            .map(|name| format!("      - name: {name}\n        image: {name}:1\n"))
            .collect();
        std::fs::write(
            &manifest,
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n{containers}"
            ),
        )
        .unwrap();
        kubectl_run(vec!["apply".into(), "-f".into(), manifest.display().to_string()])
    };
    apply(&["app", "proxy"]).await.unwrap();
    let deployments = ResourceId::new("apps", "v1", "deployments");
    // A field another writer set survives the next apply, which does not name it.
    server
        .store()
        .patch(
            &deployments,
            Some("default"),
            "web",
            PatchType::Strategic,
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "imagePullPolicy": "Always"}]}}}}),
            false,
        )
        .unwrap();
    apply(&["proxy", "app", "log"]).await.unwrap();
    let stored = server.store().get(&deployments, Some("default"), "web").unwrap();
    let spec = &stored.value["spec"]["template"]["spec"];
    let names: Vec<&str> = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|container| container["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["proxy", "app", "log"], "{spec}");
    assert_eq!(spec["containers"][1]["imagePullPolicy"], "Always", "{spec}");
    assert!(
        !stored.value.to_string().contains('$'),
        "a directive was stored: {}",
        stored.value
    );

    // get -w asks for Tables in the watch too: the columns head the first event.
    let mut watch = tokio::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "configmaps", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let configmaps = ResourceId::new("", "v1", "configmaps");
    let mut seen: Vec<Vec<String>> = Vec::new();
    let watched = tokio::time::timeout(Duration::from_secs(30), async {
        // The namespace holds no ConfigMap: kubectl prints nothing until the
        // first event, so write until it does.
        let mut written = 0;
        loop {
            if written < 2 {
                written += 1;
                server
                    .store()
                    .create(
                        &configmaps,
                        Some("default"),
                        json!({"metadata": {"name": format!("watched-{written}")}, "data": {"a": "1", "b": "2"}}),
                    )
                    .unwrap();
            }
            let Some(line) = lines.next_line().await.unwrap() else {
                break;
            };
            seen.push(line.split_whitespace().map(str::to_owned).collect());
            if seen.len() == 3 {
                break;
            }
        }
    })
    .await;
    watched.unwrap_or_else(|_| panic!("kubectl get -w printed only {seen:?}"));
    assert_eq!(seen[0], ["EVENT", "NAME", "DATA", "AGE"], "{seen:?}");
    assert_eq!(seen[1][..3], ["ADDED", "watched-1", "2"], "{seen:?}");
    assert_eq!(seen[2][..3], ["ADDED", "watched-2", "2"], "{seen:?}");
    watch.kill().await.unwrap();
}
