//! Outbound HTTP as a tenant would try it: a plugin reaches exactly what its
//! allow-list names, never loopback, cloud metadata or the API server under
//! another name, and a slow, endless or flooded server costs it only its own
//! requests. The host learns the API server's addresses under the RBAC
//! `kinformer rbac` prints, and without it asks again only with back-off.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::BTreeMap;
use std::time::Duration;

use apiserver_sim::workload::Workload;
use apiserver_sim::{ApiServer, SimConfig};
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kinformer::outbound::{AddressPolicy, follow_api_server};
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::http::serve;
use kinformer_tests::runtime::{Logs, cluster, install, plugin_status, until};

/// A manifest fetching `url` per delta, with these extra lines.
fn fetcher(mode: &str, url: &str, extra: &str) -> String {
    format!("config = \"{mode}={url}\"\n{extra}\n")
}

/// The first line of `plugin` that starts with `prefix`, once there is one.
async fn first_line(logs: &Logs, plugin: &str, prefix: &str) -> String {
    until(&format!("{plugin} to log {prefix:?}"), Duration::from_secs(30), || {
        logs.of(plugin).iter().any(|line| line.starts_with(prefix))
    })
    .await;
    logs.of(plugin)
        .into_iter()
        .find(|line| line.starts_with(prefix))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reaches_what_its_allow_list_names_and_nothing_else() {
    let (web, received) = serve().await;
    let port = web.port();
    let (server, churn, client) = cluster(&Workload::default().seed(3).size(1, 1, 2)).await;
    let api = server.address();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let listed = format!("[grant.http]\nallow = [\"http://127.0.0.1:{port}\"]\nnetworks = [\"127.0.0.1/32\"]");
    let plugins = [
        (
            "ungranted",
            fetcher("fetch", &format!("http://127.0.0.1:{port}/ok?ungranted"), ""),
        ),
        (
            "granted",
            fetcher("fetch", &format!("http://127.0.0.1:{port}/ok?granted"), &listed),
        ),
        (
            "other-host",
            fetcher(
                "fetch",
                &format!("http://127.0.0.1:{port}/ok?other-host"),
                "[grant.http]\nallow = [\"https://hooks.slack.com/services/\"]",
            ),
        ),
        (
            "by-name",
            fetcher(
                "fetch",
                &format!("http://localhost:{port}/ok?by-name"),
                &format!("[grant.http]\nallow = [\"http://localhost:{port}\"]"),
            ),
        ),
        (
            "decimal",
            fetcher(
                "fetch",
                &format!("http://2130706433:{port}/ok?decimal"),
                &format!("[grant.http]\nallow = [\"http://*:{port}\"]"),
            ),
        ),
        (
            "mapped",
            fetcher(
                "fetch",
                &format!("http://[::ffff:7f00:1]:{port}/ok?mapped"),
                &format!("[grant.http]\nallow = [\"http://*:{port}\"]"),
            ),
        ),
        (
            "metadata",
            fetcher(
                "fetch",
                "http://0xa9fea9fe/latest/meta-data/",
                "[grant.http]\nallow = [\"http://*\"]",
            ),
        ),
        (
            "api-server",
            fetcher(
                "fetch",
                &format!("http://127.0.0.1:{}/api?api-server", api.port()),
                &format!(
                    "[grant.http]\nallow = [\"http://127.0.0.1:{}\"]\nnetworks = [\"127.0.0.0/8\"]",
                    api.port()
                ),
            ),
        ),
        (
            "redirect",
            fetcher("fetch", &format!("http://127.0.0.1:{port}/redirect"), &listed),
        ),
        (
            "hang",
            fetcher(
                "fetch",
                &format!("http://127.0.0.1:{port}/hang"),
                &format!("{listed}\n[limits]\ncall-timeout-ms = 2000\nhttp-timeout-ms = 300"),
            ),
        ),
        (
            "endless",
            fetcher(
                "fetch",
                &format!("http://127.0.0.1:{port}/endless"),
                &format!("{listed}\n[limits]\ncall-timeout-ms = 5000\nhttp-response-bytes = 65536"),
            ),
        ),
    ];
    for (name, manifest) in &plugins {
        install(d, name, "hostile.wasm", Some(manifest));
    }
    install(d, "neighbour", "hostile.wasm", Some("config = \"record=n\"\n"));
    let logs = Logs::default();
    let uri: kinformer::http::Uri = server.url().parse().unwrap();
    let config = RuntimeConfig::new(d).log_sink(logs.sink()).api_server(&uri);
    let runtime = Runtime::start(client, config).await.unwrap();

    assert_eq!(first_line(&logs, "granted", "fetch").await, "fetch 200 5");
    for refused in ["other-host", "by-name", "decimal", "mapped", "metadata", "api-server"] {
        let line = first_line(&logs, refused, "fetch").await;
        assert!(line.starts_with("fetch error denied"), "{refused}: {line}");
    }
    // A redirect is a response: the guest sees it and is not taken along.
    assert_eq!(first_line(&logs, "redirect", "fetch").await, "fetch 302 0");
    let hang = first_line(&logs, "hang", "fetch").await;
    assert!(hang.starts_with("fetch error timeout"), "{hang}");
    // An endless body is cut at its limit and never read whole.
    first_line(&logs, "endless", "fetch error too-large").await;
    let endless = logs.of("endless");
    assert!(!endless.iter().any(|line| line.starts_with("fetch 200")), "{endless:?}");

    // Nothing refused reached the server; what was let through did.
    assert!(received.count("?granted") >= 1, "{:?}", received.lines());
    for refused in ["?ungranted", "?other-host", "?by-name", "?decimal", "?mapped"] {
        assert_eq!(
            received.count(refused),
            0,
            "{refused} reached the server: {:?}",
            received.lines()
        );
    }
    assert!(received.count("/hang") >= 1 && received.count("/endless") >= 1);

    // Each plugin's requests are counted by origin and outcome.
    let granted = plugin_status(&runtime, "granted");
    let origin = format!("http://127.0.0.1:{port}");
    // It fetches once per batch: under a burst of deltas its own rate may
    // throttle it, but the allow-list never refuses it.
    assert!(granted.http_requests >= 1, "{:?}", granted.http_by);
    assert!(
        granted
            .http_by
            .keys()
            .all(|(_, outcome)| matches!(*outcome, "ok" | "throttled")),
        "{:?}",
        granted.http_by
    );
    assert!(
        granted.http_by.contains_key(&(origin.clone(), "ok")),
        "{:?}",
        granted.http_by
    );
    // Without a grant there is no `wasi:http` to call: the call traps.
    until("the ungranted plugin to trap", Duration::from_secs(30), || {
        plugin_status(&runtime, "ungranted").traps >= 1
    })
    .await;
    let ungranted = plugin_status(&runtime, "ungranted");
    assert!(
        ungranted.http_requests == 0 && ungranted.http_by.is_empty(),
        "{ungranted:?}"
    );
    assert!(
        ungranted
            .last_error
            .as_deref()
            .is_some_and(|error| error.contains("outbound HTTP is not granted")),
        "{ungranted:?}"
    );
    // Each refusal is counted as what it was: off the list, or an address
    // no plugin may reach.
    let other_host = plugin_status(&runtime, "other-host");
    assert!(
        other_host.http_by.contains_key(&(origin.clone(), "denied")),
        "{other_host:?}"
    );
    for forbidden in ["decimal", "mapped", "api-server"] {
        let status = plugin_status(&runtime, forbidden);
        assert!(
            status.http_by.keys().any(|(_, outcome)| *outcome == "forbidden"),
            "{forbidden}: {status:?}"
        );
    }
    assert!(
        plugin_status(&runtime, "hang")
            .http_by
            .contains_key(&(origin.clone(), "timeout"))
    );
    assert!(
        plugin_status(&runtime, "endless")
            .http_by
            .contains_key(&(origin, "too-large"))
    );
    // And every other plugin kept running; the neighbour saw its deltas.
    for (name, _) in plugins.iter().filter(|(name, _)| *name != "ungranted") {
        let status = plugin_status(&runtime, name);
        assert_eq!(status.traps, 0, "{name} trapped: {status:?}");
    }
    assert!(!logs.of("neighbour").is_empty());
    runtime.shutdown().await;
    churn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_throttled_and_a_burst_capped_while_a_neighbour_handles_every_delta() {
    let (web, received) = serve().await;
    let port = web.port();
    let (_server, churn, client) = cluster(&Workload::default().seed(4).size(1, 1, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let listed = format!("[grant.http]\nallow = [\"http://127.0.0.1:{port}\"]\nnetworks = [\"127.0.0.1/32\"]");
    install(
        d,
        "flood",
        "hostile.wasm",
        Some(&fetcher(
            "flood",
            &format!("http://127.0.0.1:{port}/ok?flood"),
            &format!("{listed}\n[limits]\ncall-timeout-ms = 10000\nhttp-requests-per-second = 5\nhttp-burst = 10"),
        )),
    );
    install(
        d,
        "burst",
        "hostile.wasm",
        Some(&fetcher(
            "burst",
            &format!("1000@http://127.0.0.1:{port}/ok?burst"),
            &format!(
                "{listed}\n[limits]\ncall-timeout-ms = 20000\nhttp-requests-per-second = 10000\nhttp-burst = 100000\nhttp-concurrent = 8"
            ),
        )),
    );
    install(d, "neighbour", "hostile.wasm", Some("config = \"record=n\"\n"));
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();

    // The bucket lets its burst through, then refuses at once.
    let flood = first_line(&logs, "flood", "flood").await;
    assert!(flood.contains("\"throttled\": "), "{flood}");
    let ok: u32 = flood
        .split("\"ok\": ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!((10..=15).contains(&ok), "a burst of 10 at 5 per second: {flood}");
    // A thousand requests at once: eight in flight, the rest refused.
    let burst = first_line(&logs, "burst", "burst").await;
    assert!(
        burst.contains("\"ok\": 8") && burst.contains("\"throttled\": 992"),
        "{burst}"
    );
    assert!(received.count("?burst") >= 8);
    // The neighbour went on handling deltas all along.
    until("the neighbour's deltas", Duration::from_secs(10), || {
        logs.of("neighbour").len() >= 2
    })
    .await;
    runtime.shutdown().await;
    churn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notifier_posts_each_crash_loop_once_to_the_webhook_its_secret_names() {
    let (web, received) = serve().await;
    let workload = Workload::default()
        .seed(7)
        .size(1, 2, 3)
        .changes_per_second(100.0)
        .crash_loops(true);
    let (_server, churn, client) = cluster(&workload).await;
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), "ns-0");
    let url = format!("http://127.0.0.1:{}/services/T0/B0/x", web.port());
    secrets
        .create(
            &kube::api::PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some("slack".into()),
                    ..kube::api::ObjectMeta::default()
                },
                data: Some(BTreeMap::from([("url".to_owned(), ByteString(url.into_bytes()))])),
                ..Secret::default()
            },
        )
        .await
        .unwrap();
    // The example's manifest, pointed at the local webhook (loopback, which
    // its grant must open) and Secret.
    let manifest = include_str!("../../plugins/notifier/manifest.toml")
        .replace(
            "\"https://hooks.slack.com/services/\"]",
            &format!(
                "\"http://127.0.0.1:{}/services/\"]\nnetworks = [\"127.0.0.1/32\"]",
                web.port()
            ),
        )
        .replace("monitoring/slack", "ns-0/slack");
    assert!(manifest.contains("networks"), "{manifest}");
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "notifier", "notifier.wasm", Some(&manifest));
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(dir.path()).log_sink(logs.sink()))
        .await
        .unwrap();

    until("three notifications", Duration::from_secs(60), || {
        received.count("POST /services/T0/B0/x") >= 3
    })
    .await;
    let texts: Vec<String> = received
        .bodies("/services/")
        .iter()
        .map(|body| {
            serde_json::from_str::<serde_json::Value>(body).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let pods: Vec<&str> = texts
        .iter()
        .map(|text| {
            assert!(text.contains(" is crash-looping: container app restarted "), "{text}");
            text.split(' ').nth(2).unwrap()
        })
        .collect();
    let distinct: std::collections::BTreeSet<_> = pods.iter().collect();
    assert_eq!(distinct.len(), pods.len(), "a pod reported twice: {pods:?}");
    // The plugin logs after the webhook answered, so its lines may trail the
    // requests the webhook has already counted.
    until("three notified lines", Duration::from_secs(10), || {
        logs.of("notifier")
            .iter()
            .filter(|line| line.starts_with("notified: "))
            .count()
            >= 3
    })
    .await;
    let status = plugin_status(&runtime, "notifier");
    assert_eq!((status.http_errors, status.traps), (0, 0), "{:?}", status.http_by);
    runtime.shutdown().await;
    churn.abort();
}

/// A client that sends a token the emulation issued for the ServiceAccount
/// `default/name`, created here: RBAC applies to it, as to a host in a pod.
async fn service_account(server: &ApiServer, admin: &kube::Client, name: &str) -> kube::Client {
    let params = kube::api::PostParams::default();
    let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(admin.clone(), "default");
    let account = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    accounts.create(&params, &account).await.unwrap();
    let request: TokenRequest = serde_json::from_value(serde_json::json!({"spec": {}})).unwrap();
    let issued = accounts
        .create_subresource::<_, TokenRequest>("token", name, &params, &request)
        .await
        .unwrap();
    let mut config = server.client_config();
    let token = issued.status.and_then(|status| status.token).unwrap();
    config.auth_info.token = Some(token.into());
    kube::Client::try_from(config).unwrap()
}

/// Requests on the Service and on the EndpointSlices of `default`.
fn requests_for_addresses(server: &ApiServer) -> (u64, u64) {
    (
        server.requests_on("services", "default"),
        server.requests_on("endpointslices.discovery.k8s.io", "default"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_s_addresses_are_asked_for_with_back_off_without_rbac_and_learned_with_what_rbac_prints() {
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let admin = kube::Client::try_from(server.client_config()).unwrap();
    // The control plane's EndpointSlice, as kube-apiserver keeps it.
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["172.18.0.2"]}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    }))
    .unwrap();
    kube::Api::<EndpointSlice>::namespaced(admin.clone(), "default")
        .create(&kube::api::PostParams::default(), &slice)
        .await
        .unwrap();
    let host = service_account(&server, &admin, "host").await;

    // A host whose account may read neither: each list is refused.
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::start(host.clone(), RuntimeConfig::new(dir.path()))
        .await
        .unwrap();
    until(
        "the host to ask for the API server's addresses",
        Duration::from_secs(30),
        || {
            let (services, slices) = requests_for_addresses(&server);
            services >= 1 && slices >= 1
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (services, slices) = requests_for_addresses(&server);
    runtime.shutdown().await;
    // 800 ms doubling, each wait stretched by up to its length: at most four
    // lists in the 10 s after the first (at 0.8, 2.4 and 5.6 s at the
    // earliest; the next at 12 s). A back-off that starts over at each
    // attempt asks about once a second: seven or more.
    assert!(
        (1..=5).contains(&services) && (1..=5).contains(&slices),
        "{services} requests for the Service and {slices} for the EndpointSlices in 10 s"
    );

    // Granted the Role `kinformer rbac` prints for a host with no plugins
    // (and so for any), the host learns both.
    let empty = tempfile::tempdir().unwrap();
    let options = kinformer_cli::rbac::RbacOptions {
        service_account: "host".into(),
        service_account_namespace: "default".into(),
        ..kinformer_cli::rbac::RbacOptions::default()
    };
    let printed = kinformer_cli::rbac::rbac(empty.path(), &options).unwrap();
    let params = kube::api::PostParams::default();
    for document in printed.split("---\n") {
        let value: serde_yaml::Value = serde_yaml::from_str(document).unwrap();
        match value["kind"].as_str() {
            Some("Role") => {
                let role: Role = serde_yaml::from_value(value).unwrap();
                let roles = kube::Api::<Role>::namespaced(admin.clone(), "default");
                roles.create(&params, &role).await.unwrap();
            }
            Some("RoleBinding") => {
                let binding: RoleBinding = serde_yaml::from_value(value).unwrap();
                let bindings = kube::Api::<RoleBinding>::namespaced(admin.clone(), "default");
                bindings.create(&params, &binding).await.unwrap();
            }
            other => panic!("`kinformer rbac` for no plugins printed a {other:?}:\n{printed}"),
        }
    }
    let policy = AddressPolicy::default();
    let follower = follow_api_server(host, policy.clone());
    let expected: Vec<std::net::SocketAddr> =
        vec!["10.96.0.1:443".parse().unwrap(), "172.18.0.2:6443".parse().unwrap()];
    until(
        "the API server's Service and EndpointSlice to be learned",
        Duration::from_secs(30),
        || {
            let mut learned = policy.api_server();
            learned.sort_unstable();
            learned == expected
        },
    )
    .await;
    follower.abort();
}
