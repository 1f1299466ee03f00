//! What a plugin takes from the cluster beyond its informers: settings from
//! Secrets and ConfigMaps (followed, and never shown), and uncached reads of
//! what no informer can watch (the resource metrics API), each only as
//! granted.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::BTreeMap;
use std::time::Duration;

use apiserver_sim::workload::Workload;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kinformer::PluginState;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::runtime::{Logs, cluster, install, listed_status, plugin_status, until};
use kube::api::{Api, ObjectMeta, PostParams};

fn secret(name: &str, url: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns-0".into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "url".to_owned(),
            ByteString(url.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

/// Waits until `plugin` has logged a line `matches` takes; on a timeout,
/// says what it did log and what its status is.
async fn logged_where(runtime: &Runtime, logs: &Logs, plugin: &str, what: &str, matches: impl Fn(&str) -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        while !logs.of(plugin).iter().any(|line| matches(line)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "{plugin} did not log {what}: it logged {:?}, status {:?}",
        logs.of(plugin).first(),
        listed_status(runtime, plugin).map(|status| (status.state, status.load_error))
    );
}

/// Waits until `plugin` has logged `line`.
async fn logged(runtime: &Runtime, logs: &Logs, plugin: &str, line: &str) {
    logged_where(runtime, logs, plugin, line, |logged| logged == line).await;
}

/// Waits until `plugin` is in `state`, and returns its load error.
async fn state(runtime: &Runtime, plugin: &str, state: PluginState) -> Option<String> {
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        while listed_status(runtime, plugin).is_none_or(|status| status.state != state) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "{plugin} is not {state:?}: {:?}",
        listed_status(runtime, plugin).map(|status| (status.state, status.load_error))
    );
    plugin_status(runtime, plugin).load_error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_follow_their_secret_and_configmap_and_their_values_show_nowhere_else() {
    let (_server, churn, client) = cluster(&Workload::default().seed(5).size(1, 1, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    install(
        d,
        "notify",
        "hostile.wasm",
        Some("config = \"env=SLACK_URL\"\n[env]\nSLACK_URL = { secret = \"ns-0/slack\", key = \"url\" }\n"),
    );
    install(
        d,
        "channel",
        "hostile.wasm",
        Some("config = \"env=CHANNEL\"\n[env]\nCHANNEL = { configmap = \"ns-0/team\", key = \"channel\" }\n"),
    );
    install(
        d,
        "literal",
        "hostile.wasm",
        Some("config = \"env=LEVEL\"\n[env]\nLEVEL = \"warn\"\n"),
    );
    let logs = Logs::default();
    let runtime = Runtime::start(client.clone(), RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "ns-0");
    let configmaps: Api<ConfigMap> = Api::namespaced(client, "ns-0");

    // Literal values need nothing; a missing Secret fails only its plugin.
    logged(&runtime, &logs, "literal", "env LEVEL=warn").await;
    let missing = state(&runtime, "notify", PluginState::Failed).await.unwrap();
    assert!(
        missing.contains("env SLACK_URL: Secret ns-0/slack not found"),
        "{missing}"
    );

    // Created: the plugin starts with the value.
    secrets
        .create(&PostParams::default(), &secret("slack", "https://hooks.example/first"))
        .await
        .unwrap();
    logged(&runtime, &logs, "notify", "env SLACK_URL=https://hooks.example/first").await;
    assert_eq!(plugin_status(&runtime, "notify").state, PluginState::Running);

    // Changed: the plugin is swapped in with the new value.
    secrets
        .replace("slack", &PostParams::default(), &{
            let mut changed = secrets.get("slack").await.unwrap();
            changed.data = secret("slack", "https://hooks.example/second").data;
            changed
        })
        .await
        .unwrap();
    logged(&runtime, &logs, "notify", "env SLACK_URL=https://hooks.example/second").await;

    // Too large: the new value is refused, saying which key, never what it
    // holds, and the running version goes on with the last good one (as
    // with a broken manifest).
    let running = plugin_status(&runtime, "notify").running_digest;
    let huge = format!(
        "https://hooks.example/{}",
        "x".repeat(kinformer::runtime::MAX_ENV_VALUE_BYTES)
    );
    let mut large = secrets.get("slack").await.unwrap();
    large.data = secret("slack", &huge).data;
    secrets.replace("slack", &PostParams::default(), &large).await.unwrap();
    until("the large value's refusal", Duration::from_secs(30), || {
        plugin_status(&runtime, "notify")
            .load_error
            .is_some_and(|error| error.contains("Secret ns-0/slack key \"url\": the value is"))
    })
    .await;
    let status = plugin_status(&runtime, "notify");
    assert_eq!(
        (status.state, status.running_digest),
        (PluginState::Running, running.clone())
    );
    assert!(!status.load_error.unwrap().contains("hooks.example"));

    // Deleted: said as missing; the running version keeps its environment.
    secrets.delete("slack", &Default::default()).await.unwrap();
    until("the deletion's refusal", Duration::from_secs(30), || {
        plugin_status(&runtime, "notify")
            .load_error
            .is_some_and(|error| error.contains("env SLACK_URL: Secret ns-0/slack not found"))
    })
    .await;
    let status = plugin_status(&runtime, "notify");
    assert_eq!((status.state, status.running_digest), (PluginState::Running, running));

    // A ConfigMap without the key, then with it.
    configmaps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("team".into()),
                    namespace: Some("ns-0".into()),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([("other".to_owned(), "x".to_owned())])),
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    until("the ConfigMap's answer", Duration::from_secs(30), || {
        plugin_status(&runtime, "channel")
            .load_error
            .is_some_and(|error| error.contains("ConfigMap ns-0/team has no key \"channel\""))
    })
    .await;
    let mut team = configmaps.get("team").await.unwrap();
    team.data = Some(BTreeMap::from([("channel".to_owned(), "#ops".to_owned())]));
    configmaps.replace("team", &PostParams::default(), &team).await.unwrap();
    logged(&runtime, &logs, "channel", "env CHANNEL=#ops").await;
    let channel = plugin_status(&runtime, "channel");
    assert_eq!(
        (channel.state, channel.load_error, channel.rejected_digest),
        (PluginState::Running, None, None)
    );

    // No status shows a value (what plugins log themselves aside).
    for status in runtime.status() {
        let shown = format!("{:?} {:?}", status.load_error, status.last_error);
        assert!(!shown.contains("hooks.example") && !shown.contains("#ops"), "{shown}");
    }
    runtime.shutdown().await;
    churn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_read_only_as_granted_and_an_absent_metrics_api_is_an_error_the_plugin_sees() {
    let (server, churn, client) = cluster(&Workload::default().seed(6).size(1, 1, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let read = "config = \"read=metrics.k8s.io/v1beta1/PodMetrics\"\n";
    install(d, "ungranted", "hostile.wasm", Some(read));
    install(
        d,
        "granted",
        "hostile.wasm",
        Some(&format!(
            "{read}[[grant.read]]\nresources = [\"metrics.k8s.io/v1beta1/PodMetrics\"]\n"
        )),
    );
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();

    logged(&runtime, &logs, "ungranted", "read error denied").await;
    logged_where(&runtime, &logs, "granted", "a list of PodMetrics", |line| {
        line.starts_with("read ") && line.ends_with(" items") && line != "read 0 items"
    })
    .await;

    // metrics-server gone: the plugin is told, and keeps running.
    server.metrics().set_available(false);
    logged(&runtime, &logs, "granted", "read error unavailable").await;
    let status = plugin_status(&runtime, "granted");
    assert_eq!((status.state, status.traps), (PluginState::Running, 0), "{status:?}");
    runtime.shutdown().await;
    churn.abort();
}

#[test]
fn check_prints_reads_http_and_where_settings_come_from_but_no_value() {
    let dir = tempfile::tempdir().unwrap();
    install(
        dir.path(),
        "notifier",
        "hostile.wasm",
        Some(
            "config = \"record=n\"\n\
             [grant.http]\nallow = [\"https://hooks.slack.com/services/\", \"http://alertmanager.monitoring.svc:9093\"]\n\
             [[grant.read]]\nresources = [\"metrics.k8s.io/v1beta1/PodMetrics\"]\n\
             [env]\nSLACK_URL = { secret = \"monitoring/slack\", key = \"url\" }\nLEVEL = \"a-literal-value\"\n",
        ),
    );
    install(dir.path(), "quiet", "hostile.wasm", Some("config = \"record=n\"\n"));
    let report = kinformer_cli::check::check(&dir.path().join("notifier.wasm"), None)
        .unwrap()
        .to_string();
    for line in [
        "  read get, list metrics.k8s.io/v1beta1/PodMetrics in every namespace (uncached, from the API server)\n",
        "  http to https://hooks.slack.com/services/\n",
        "  http to http://alertmanager.monitoring.svc:9093\n",
        "  env SLACK_URL from key url of Secret monitoring/slack\n",
        "  env LEVEL (set in the manifest)\n",
        "  writes nothing\n",
    ] {
        assert!(report.contains(line), "{line:?} in {report}");
    }
    assert!(!report.contains("a-literal-value"), "{report}");
    let quiet = kinformer_cli::check::check(&dir.path().join("quiet.wasm"), None)
        .unwrap()
        .to_string();
    assert!(quiet.contains("  makes no HTTP requests\n"), "{quiet}");
}
