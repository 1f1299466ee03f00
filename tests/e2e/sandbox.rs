//! A tenant's plugin tried as an attacker would: it stays inside its memory
//! budget and its network, whatever it names and however it spells it. Each
//! test is one way out that the host closes (`docs/security.md` has a row for
//! each). Everything runs on loopback; names get their addresses from the
//! host's own resolver overrides, never from a real DNS server.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use apiserver_sim::workload::Workload;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::http::{serve, serve_on};
use kinformer_tests::runtime::{Logs, cluster, install, plugin_status, until};

const WAIT: Duration = Duration::from_secs(30);

/// A manifest running hostile in `mode`, allowed `allow` and opening
/// `networks`, with quick restarts and these extra lines.
fn manifest(mode: &str, allow: &[&str], networks: &[&str], extra: &str) -> String {
    let quoted = |items: &[&str]| {
        items
            .iter()
            .map(|item| format!("\"{item}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let http = if allow.is_empty() {
        String::new()
    } else {
        format!(
            "[grant.http]\nallow = [{}]\nnetworks = [{}]\n",
            quoted(allow),
            quoted(networks)
        )
    };
    format!("config = \"{mode}\"\n{http}[failures]\nrestart-backoff-ms = 20\n{extra}\n")
}

/// The first line of `plugin` that starts with `prefix`, once there is one.
async fn first_line(logs: &Logs, plugin: &str, prefix: &str) -> String {
    until(&format!("{plugin} to log {prefix:?}"), WAIT, || {
        logs.of(plugin).iter().any(|line| line.starts_with(prefix))
    })
    .await;
    logs.of(plugin)
        .into_iter()
        .find(|line| line.starts_with(prefix))
        .unwrap()
}

/// How many of `plugin`'s requests to `origin` ended in `outcome`.
fn count(runtime: &Runtime, plugin: &str, origin: &str, outcome: &str) -> u64 {
    plugin_status(runtime, plugin)
        .http_by
        .get(&(origin.to_owned(), outcome))
        .copied()
        .unwrap_or(0)
}

/// The IPv4 addresses of this machine that are not loopback.
fn own_addresses() -> Vec<IpAddr> {
    kinformer::outbound::interface_addresses()
        .into_iter()
        .filter(|ip| ip.is_ipv4() && !ip.is_loopback())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_state_a_plugin_makes_counts_against_its_memory_and_needs_a_grant() {
    let (_server, churn, client) = cluster(&Workload::default().seed(11).size(1, 1, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    install(d, "ungranted", "hostile.wasm", Some(&manifest("hoard", &[], &[], "")));
    install(
        d,
        "granted",
        "hostile.wasm",
        Some(&manifest(
            "hoard",
            &["https://hooks.example.com"],
            &[],
            // Time enough on a busy machine: the memory limit is what stops it.
            "[limits]\nmemory-mib = 32\ncall-timeout-ms = 20000\ncpu-millicores = 1000\n",
        )),
    );
    install(d, "neighbour", "hostile.wasm", Some("config = \"record=n\"\n"));
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();

    until("both hoarders to trap", WAIT, || {
        plugin_status(&runtime, "ungranted").traps >= 1 && plugin_status(&runtime, "granted").traps >= 1
    })
    .await;
    let ungranted = plugin_status(&runtime, "ungranted");
    let error = ungranted.last_error.unwrap_or_default();
    assert!(
        error.contains("[constructor]fields: outbound HTTP is not granted"),
        "{error}"
    );
    assert!(
        !logs.of("ungranted").iter().any(|line| line.starts_with("hoard")),
        "made header fields without a grant"
    );
    // Granted, it holds what fits in 32 MiB (a few hundred fields of 60 KiB),
    // then its call traps.
    let granted = plugin_status(&runtime, "granted");
    let error = granted.last_error.unwrap_or_default();
    assert!(
        error.contains("over its 32 MiB of memory (limits.memory-mib)"),
        "{error}"
    );
    assert!(error.contains("held by the host"), "{error}");
    let held: Vec<u64> = logs
        .of("granted")
        .iter()
        .filter_map(|line| line.strip_prefix("hoard ")?.parse().ok())
        .collect();
    assert!(held.iter().all(|&held| held < 600), "held past its budget: {held:?}");
    // The neighbour went on.
    assert!(!logs.of("neighbour").is_empty());
    assert_eq!(plugin_status(&runtime, "neighbour").traps, 0);
    runtime.shutdown().await;
    churn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_services_and_the_api_server_are_refused_however_they_are_named() {
    let (server, churn, client) = cluster(&Workload::default().seed(12).size(1, 1, 2)).await;
    let api = server.address();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let everything = ["0.0.0.0/0", "::/0"];
    let api_port = api.port();
    // Each is tried with every network opened: none of these ever opens.
    let cases: Vec<(&str, String)> = vec![
        ("aws-v6", "http://[fd00:ec2::254]/latest/meta-data/".into()),
        ("eks-pod-identity-v6", "http://[fd00:ec2::23]/v1/credentials".into()),
        ("gcp-v6", "http://[fd20:ce::254]/computeMetadata/v1/".into()),
        ("alibaba", "http://100.100.100.200/latest/meta-data/".into()),
        ("azure-wireserver", "http://168.63.129.16/machine".into()),
        ("nat64-metadata", "http://[64:ff9b::a9fe:a9fe]/".into()),
        ("by-name-metadata", "http://metadata.test/".into()),
        ("api-unspecified", format!("http://0.0.0.0:{api_port}/api")),
        ("api-zero", format!("http://0:{api_port}/api")),
        (
            "api-mapped-unspecified",
            format!("http://[::ffff:0.0.0.0]:{api_port}/api"),
        ),
        ("api-v6-loopback", format!("http://[::1]:{api_port}/api")),
        ("api-v6-unspecified", format!("http://[::]:{api_port}/api")),
        ("api-cluster-ip", "http://10.96.0.1:443/api".into()),
        ("api-by-name", format!("http://kubernetes.test:{api_port}/api")),
    ];
    let any_host = [
        "http://*".to_owned(),
        "http://*:443".to_owned(),
        format!("http://*:{api_port}"),
    ];
    let any_host: Vec<&str> = any_host.iter().map(String::as_str).collect();
    for (name, url) in &cases {
        install(
            d,
            name,
            "hostile.wasm",
            Some(&manifest(&format!("fetch={url}"), &any_host, &everything, "")),
        );
    }
    let logs = Logs::default();
    let uri: kinformer::http::Uri = server.url().parse().unwrap();
    let config = RuntimeConfig::new(d)
        .log_sink(logs.sink())
        .api_server(&uri)
        .resolve("metadata.test", ["fd00:ec2::254".parse().unwrap()])
        .resolve("kubernetes.test", [api.ip()]);
    let runtime = Runtime::start(client, config).await.unwrap();

    for (name, url) in &cases {
        let line = first_line(&logs, name, "fetch").await;
        assert!(line.starts_with("fetch error denied"), "{name} ({url}): {line}");
        let status = plugin_status(&runtime, name);
        assert!(
            status.http_by.keys().any(|(_, outcome)| *outcome == "forbidden"),
            "{name}: {status:?}"
        );
    }
    runtime.shutdown().await;
    churn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_is_refused_at_the_addresses_its_endpoints_rotate_to() {
    // A second address of the "API server", served here by the test server
    // (on loopback, as on a control-plane node, the server's port is what
    // is refused there).
    let (other, received) = serve_on("127.0.0.2").await;
    let (server, churn, client) = cluster(&Workload::default().seed(13).size(1, 1, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let origin = format!("http://{other}");
    install(
        d,
        "prober",
        "hostile.wasm",
        Some(&manifest(
            &format!("fetch={origin}/ok?probe"),
            &[&origin],
            &["127.0.0.0/8"],
            "",
        )),
    );
    let logs = Logs::default();
    let uri: kinformer::http::Uri = server.url().parse().unwrap();
    let config = RuntimeConfig::new(d).log_sink(logs.sink()).api_server(&uri);
    let runtime = Runtime::start(client.clone(), config).await.unwrap();

    // Before the cluster says so, the address is an ordinary opened one.
    assert_eq!(first_line(&logs, "prober", "fetch").await, "fetch 200 5");
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.2"]}],
        "ports": [{"name": "https", "port": other.port(), "protocol": "TCP"}],
    }))
    .unwrap();
    kube::Api::<EndpointSlice>::namespaced(client, "default")
        .create(&kube::api::PostParams::default(), &slice)
        .await
        .unwrap();
    // Then every port of it is refused, as the endpoints rotate to it.
    until("the new endpoint to be refused", WAIT, || {
        count(&runtime, "prober", &origin, "forbidden") >= 1
    })
    .await;
    let reached = received.count("?probe");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(received.count("?probe"), reached, "reached after its refusal");
    runtime.shutdown().await;
    churn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_resolves_to_a_private_address_is_refused_unless_its_network_is_opened() {
    let (web, received) = serve().await;
    let port = web.port();
    let (_server, churn, client) = cluster(&Workload::default().seed(14).size(1, 1, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (name, host, networks) in [
        ("cluster-service", "svc.internal", &[][..]),
        ("cluster-service-elsewhere", "svc.internal", &["192.168.0.0/16"][..]),
        ("loopback-by-name", "hooks.internal", &[][..]),
        ("opened", "hooks.internal", &["127.0.0.1/32"][..]),
    ] {
        let url = format!("http://{host}:{port}/ok?{name}");
        install(
            d,
            name,
            "hostile.wasm",
            Some(&manifest(
                &format!("fetch={url}"),
                &[&format!("http://{host}:{port}")],
                networks,
                "",
            )),
        );
    }
    let logs = Logs::default();
    let config = RuntimeConfig::new(d)
        .log_sink(logs.sink())
        .resolve("svc.internal", ["10.1.2.3".parse().unwrap()])
        .resolve("hooks.internal", ["127.0.0.1".parse().unwrap()]);
    let runtime = Runtime::start(client, config).await.unwrap();

    assert_eq!(first_line(&logs, "opened", "fetch").await, "fetch 200 5");
    for refused in ["cluster-service", "cluster-service-elsewhere", "loopback-by-name"] {
        let line = first_line(&logs, refused, "fetch").await;
        assert!(line.starts_with("fetch error denied"), "{refused}: {line}");
        assert_eq!(received.count(&format!("?{refused}")), 0);
    }
    let svc = format!("http://svc.internal:{port}");
    assert!(count(&runtime, "cluster-service", &svc, "forbidden") >= 1);
    runtime.shutdown().await;
    churn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_s_own_endpoints_are_out_of_reach_at_every_address() {
    let (_server, churn, client) = cluster(&Workload::default().seed(15).size(1, 1, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let logs = Logs::default();
    // As in a pod: the status endpoint on every address.
    let status: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let config = RuntimeConfig::new(d).log_sink(logs.sink()).status_address(status);
    let runtime = Runtime::start(client, config).await.unwrap();
    let port = runtime.status_address().unwrap().port();
    let mut targets = vec![format!("127.0.0.1:{port}")];
    targets.extend(
        own_addresses()
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port).to_string()),
    );
    for (i, target) in targets.iter().enumerate() {
        let url = format!("http://{target}/plugins");
        let allow = format!("http://{target}");
        std::fs::write(
            d.join(format!("spy-{i}.toml")),
            manifest(&format!("fetch={url}"), &[&allow], &["0.0.0.0/0", "::/0"], ""),
        )
        .unwrap();
        install(d, &format!("spy-{i}"), "hostile.wasm", None);
    }
    runtime.rescan().await;
    for (i, target) in targets.iter().enumerate() {
        let line = first_line(&logs, &format!("spy-{i}"), "fetch").await;
        assert!(line.starts_with("fetch error denied"), "{target}: {line}");
        let status = plugin_status(&runtime, &format!("spy-{i}"));
        assert!(
            status.http_by.keys().any(|(_, outcome)| *outcome == "forbidden"),
            "{status:?}"
        );
    }
    runtime.shutdown().await;
    churn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_take_tokens_too() {
    let (web, received) = serve().await;
    let port = web.port();
    let (_server, churn, client) = cluster(&Workload::default().seed(16).size(1, 1, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    install(
        d,
        "flood",
        "hostile.wasm",
        Some(&manifest(
            &format!("flood=http://127.0.0.1:{port}/not-listed"),
            &[&format!("http://127.0.0.1:{port}/listed")],
            &["127.0.0.1/32"],
            "[limits]\ncall-timeout-ms = 10000\nhttp-requests-per-second = 5\nhttp-burst = 10",
        )),
    );
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();
    let flood = first_line(&logs, "flood", "flood").await;
    // 50 refused requests: the burst's 10 denied, the rest throttled.
    let denied: u32 = flood
        .split("\"denied\": ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!((10..=15).contains(&denied), "{flood}");
    assert!(flood.contains("\"throttled\": "), "{flood}");
    assert!(received.lines().is_empty());
    runtime.shutdown().await;
    churn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_ends_an_exchange_whose_body_the_guest_never_reads() {
    let (web, received) = serve().await;
    let port = web.port();
    let (_server, churn, client) = cluster(&Workload::default().seed(17).size(1, 1, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let origin = format!("http://127.0.0.1:{port}");
    install(
        d,
        "holder",
        "hostile.wasm",
        Some(&manifest(
            &format!("hold={origin}/stall?holder"),
            &[&origin],
            &["127.0.0.1/32"],
            "[limits]\nhttp-timeout-ms = 300\nhttp-requests-per-second = 1\nhttp-burst = 1",
        )),
    );
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();
    assert_eq!(first_line(&logs, "holder", "hold").await, "hold 200");
    // The guest keeps the response and never reads: the host closes the
    // connection at the deadline all the same.
    until("the held connection to be closed", WAIT, || {
        received.closed("?holder") >= 1
    })
    .await;
    until("the request to be counted as timed out", WAIT, || {
        count(&runtime, "holder", &origin, "timeout") >= 1
    })
    .await;
    runtime.shutdown().await;
    churn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_walks_out_of_its_prefix_is_refused_however_it_is_encoded() {
    let (web, received) = serve().await;
    let port = web.port();
    let (_server, churn, client) = cluster(&Workload::default().seed(18).size(1, 1, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let prefix = format!("http://127.0.0.1:{port}/hooks/ok/");
    let paths = [
        ("inside", "send?inside"),
        ("semicolon", "..;/admin?semicolon"),
        ("encoded-slash", "..%2f..%2fadmin?encoded-slash"),
        ("twice-encoded", "%252e%252e/admin?twice-encoded"),
        ("encoded-dots", "%2e%2e/admin?encoded-dots"),
    ];
    for (name, path) in paths {
        install(
            d,
            name,
            "hostile.wasm",
            Some(&manifest(
                &format!("fetch={prefix}{path}"),
                &[&prefix],
                &["127.0.0.1/32"],
                "",
            )),
        );
    }
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(d).log_sink(logs.sink()))
        .await
        .unwrap();
    assert_eq!(first_line(&logs, "inside", "fetch").await, "fetch 200 5");
    for (name, _) in &paths[1..] {
        let line = first_line(&logs, name, "fetch").await;
        assert!(line.starts_with("fetch error denied"), "{name}: {line}");
        assert_eq!(received.count(&format!("?{name}")), 0, "{name} reached the server");
    }
    runtime.shutdown().await;
    churn.abort();
}
