//! Outbound HTTP from plugins written in Python and JavaScript, built from
//! source with their SDK's build: a request the allow-list names reaches the
//! server, one it does not is refused as `denied` before any connection.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::time::Duration;

use apiserver_sim::workload::Workload;
use k8s_openapi::api::core::v1::Secret;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::guest::{Language, World, compile_cache, component, root};
use kinformer_tests::http::serve;
use kinformer_tests::runtime::{Logs, cluster, plugin_status, publish, quick_manifest, until};

/// The line `plugin` logged about its fetch, once there is one.
async fn fetch_line(logs: &Logs, plugin: &str) -> String {
    let fetched = || logs.of(plugin).into_iter().find(|line| line.starts_with("fetch "));
    // The first run compiles an 18 MB component beside the other tests.
    until(
        &format!("{plugin} to log its fetch (did the plugin start?)"),
        Duration::from_secs(300),
        || fetched().is_some(),
    )
    .await;
    fetched().unwrap()
}

/// Runs the test plugin in `source` three times: `granted`, whose allow-list
/// names the test server; `unlisted`, whose allow-list names another; and
/// `ungranted`, with no `[grant.http]`. Each fetches `/ok` once. The refused
/// fetch is logged as a line starting with `refused`; the ungranted plugin,
/// which has no `wasi:http` to call, traps.
async fn granted_and_ungranted(language: Language, source: &str, refused: &str) {
    let (web, received) = serve().await;
    let port = web.port();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let wasm = component(language, World::Plugin, &root().join("test-plugins").join(source));
    let origin = format!("http://127.0.0.1:{port}");
    // The granted copy's GREETING comes from a Secret, the other's is literal.
    let granted = format!(
        "{}[grant.http]\nallow = [\"{origin}\"]\nnetworks = [\"127.0.0.1/32\"]\n[env]\nGREETING = {{ secret = \"ns-0/greeting\", key = \"text\" }}\n",
        quick_manifest(&format!("{origin}/ok?{source}-granted"))
    );
    publish(d, "granted.toml", granted.as_bytes());
    publish(d, "granted.wasm", &wasm);
    let ungranted = format!(
        "{}[env]\nGREETING = \"plain\"\n",
        quick_manifest(&format!("{origin}/ok?{source}-ungranted"))
    );
    publish(d, "ungranted.toml", ungranted.as_bytes());
    publish(d, "ungranted.wasm", &wasm);
    let unlisted = format!(
        "{}[grant.http]\nallow = [\"https://hooks.example.com\"]\n[env]\nGREETING = \"plain\"\n",
        quick_manifest(&format!("{origin}/ok?{source}-unlisted"))
    );
    publish(d, "unlisted.toml", unlisted.as_bytes());
    publish(d, "unlisted.wasm", &wasm);
    let (_server, churn, client) = cluster(&Workload::default().seed(5).size(1, 1, 2)).await;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "greeting", "namespace": "ns-0"},
        "data": {"text": "ZnJvbS1hLXNlY3JldA=="}, // from-a-secret
    }))
    .unwrap();
    kube::Api::<Secret>::namespaced(client.clone(), "ns-0")
        .create(&kube::api::PostParams::default(), &secret)
        .await
        .unwrap();
    let logs = Logs::default();
    let config = RuntimeConfig::new(d).log_sink(logs.sink()).cache_dir(compile_cache());
    let runtime = Runtime::start(client, config).await.unwrap();

    assert_eq!(fetch_line(&logs, "granted").await, "fetch 200 5");
    // Settings reach the language's own environment.
    assert!(logs.of("granted").contains(&"env GREETING=from-a-secret".to_owned()));
    assert!(logs.of("ungranted").contains(&"env GREETING=plain".to_owned()));
    let line = fetch_line(&logs, "unlisted").await;
    assert!(line.starts_with(refused), "{line}");
    until("the ungranted plugin to trap", Duration::from_secs(30), || {
        plugin_status(&runtime, "ungranted").traps >= 1
    })
    .await;
    let ungranted = plugin_status(&runtime, "ungranted");
    let error = ungranted.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("outbound HTTP is not granted to this plugin ([grant.http]"),
        "{ungranted:#?}"
    );

    // The granted request reached the server; the refused one never did.
    assert_eq!(
        received.count(&format!("?{source}-granted")),
        1,
        "{:?}",
        received.lines()
    );
    for refused in ["ungranted", "unlisted"] {
        assert_eq!(
            received.count(&format!("?{source}-{refused}")),
            0,
            "a refused request reached the server: {:?}",
            received.lines()
        );
    }
    // The host counted each by origin and outcome.
    let granted = plugin_status(&runtime, "granted");
    assert!(granted.http_by.contains_key(&(origin.clone(), "ok")), "{granted:#?}");
    let unlisted = plugin_status(&runtime, "unlisted");
    assert_eq!(unlisted.http_requests, 0, "{unlisted:#?}");
    assert!(unlisted.http_by.contains_key(&(origin, "denied")), "{unlisted:#?}");
    assert!(ungranted.http_by.is_empty(), "{ungranted:#?}");
    for plugin in [&granted, &unlisted] {
        assert_eq!((plugin.traps, plugin.errors), (0, 0), "{plugin:#?}");
    }
    runtime.shutdown().await;
    churn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_reaches_what_its_allow_list_names_and_is_denied_the_rest() {
    granted_and_ungranted(Language::Python, "py-fetch", "fetch error denied: ").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_plugin_reaches_what_its_allow_list_names_and_is_denied_the_rest() {
    // `fetch()` rejects with a `TypeError` whatever the host's reason: the
    // host's count of the plugin's requests says it was `denied`.
    granted_and_ungranted(Language::JavaScript, "js-fetch", "fetch error TypeError: ").await;
}
