//! `kinformer run` when things go wrong: credentials that may not list a
//! resource (retried with client-go's back-off, said in sentences an operator
//! reads, the other plugins served meanwhile), an account that may not read
//! the API server's addresses (said once), a plugin that puts a credential in
//! a URL (never logged), a shutdown that comes while a plugin takes a minute
//! to compile, and a corporate proxy in the environment.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiserver_sim::{ApiServer, SimConfig};

/// `kinformer run` on `d/plugins` against `server`, logging to `d/run.log`.
fn run(server: &ApiServer, d: &Path, extra: &[&str]) -> Child {
    run_as(server, "host", d, extra)
}

/// [`run`] with `token`: the cluster's admin unless the server issued it.
fn run_as(server: &ApiServer, token: &str, d: &Path, extra: &[&str]) -> Child {
    let kubeconfig = d.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_with_token(token)).unwrap();
    Command::new(env!("CARGO_BIN_EXE_kinformer"))
        .arg("run")
        .arg("--plugins")
        .arg(d.join("plugins"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--status-addr", "127.0.0.1:0"])
        .args(extra)
        .env("KINFORMER_LOG", "info")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("run.log")).unwrap())
        .spawn()
        .unwrap()
}

/// An HTTP proxy on loopback that tunnels every `CONNECT` to `upstream`,
/// whatever it names, and keeps each `CONNECT`'s target.
async fn tunnel_to(upstream: std::net::SocketAddr) -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let targets: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = Arc::clone(&targets);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let kept = Arc::clone(&kept);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                kept.lock().unwrap().push(line);
                let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_ok()
                {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (address, targets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_reaches_its_cluster_through_the_environment_s_proxy_and_plugins_never_do() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let churn = server
        .start_workload(&apiserver_sim::workload::Workload::default().seed(9).size(1, 1, 2))
        .unwrap();
    let (proxy, tunnelled) = tunnel_to(server.address()).await;
    let web = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let web_address = web.local_addr().unwrap();
    let fetched = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&fetched);
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        while let Ok((mut stream, _)) = web.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await;
        }
    });
    let plugins = d.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(
        plugins.join("fetcher.wasm"),
        plugin_artifacts::test_plugin("hostile.wasm"),
    )
    .unwrap();
    std::fs::write(
        plugins.join("fetcher.toml"),
        format!(
            "config = \"fetch=http://{web_address}/direct\"\n[grant.http]\nallow = [\"http://{web_address}\"]\nnetworks = [\"127.0.0.1/32\"]\n"
        ),
    )
    .unwrap();
    // The cluster's address is only reachable through the proxy.
    let kubeconfig = d.join("kubeconfig");
    let unreachable = format!("http://192.0.2.1:{}", server.address().port());
    std::fs::write(
        &kubeconfig,
        server
            .kubeconfig_with_token("host")
            .replace(&server.url(), &unreachable),
    )
    .unwrap();
    let proxy_url = format!("http://{proxy}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kinformer"))
        .arg("run")
        .arg("--plugins")
        .arg(&plugins)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env("HTTP_PROXY", &proxy_url)
        .env("HTTPS_PROXY", &proxy_url)
        .env("NO_PROXY", "example.com")
        .env("KINFORMER_LOG", "info")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("run.log")).unwrap())
        .spawn()
        .unwrap();
    let reached = tokio::time::timeout(Duration::from_secs(60), async {
        while fetched.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    churn.abort();
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    assert!(reached.is_ok(), "the plugin never fetched:\n{log}");
    let tunnelled = tunnelled.lock().unwrap().clone();
    assert!(
        !tunnelled.is_empty() && tunnelled.iter().all(|line| line.starts_with("CONNECT 192.0.2.1:")),
        "the host's client went round the proxy, or the plugin through it: {tunnelled:?}\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_list_backs_off_exponentially_and_is_logged_in_sentences() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plugins = d.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(plugins.join("configs.wasm"), plugin_artifacts::DELTA_LOGGER).unwrap();
    std::fs::write(plugins.join("configs.toml"), "config = \"v1/ConfigMap\"\n").unwrap();
    std::fs::write(plugins.join("pods.wasm"), plugin_artifacts::DELTA_LOGGER).unwrap();
    std::fs::write(plugins.join("pods.toml"), "config = \"v1/Pod\"\n").unwrap();

    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    server.faults().forbid("configmaps");
    let cache = d.join("cache");
    let mut child = run(&server, d, &["--cache-dir", cache.to_str().unwrap()]);
    let log = d.join("run.log");

    // 800 ms doubling with jitter up to twice each wait: the 60 s hold at
    // most 7 attempts (waits 0.8 + 1.6 + 3.2 + 6.4 + 12.8 + 25.6 = 50.4 s),
    // at least 5 (1.6 + 3.2 + 6.4 + 12.8 = 24 s, and the next wait ends
    // within 49.6 s). A watcher retrying once a second makes about 60.
    let first = tokio::time::timeout(Duration::from_secs(30), async {
        while server.faults().denied("configmaps") == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(first.is_ok(), "the host never listed ConfigMaps");
    tokio::time::sleep(Duration::from_secs(60)).await;
    let attempts = server.faults().denied("configmaps");
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!((4..=8).contains(&attempts), "{attempts} list attempts in 60 s:\n{text}");

    assert!(!text.contains("Status {") && !text.contains("Some("), "{text}");
    let failures: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("list ConfigMap: forbidden (403): configmaps is forbidden: User "))
        .collect();
    assert!(
        failures.first().is_some_and(|line| line.contains("; retrying in ")),
        "{text}"
    );
    // Repeats are summarised: fewer lines than attempts, the later ones counting.
    assert!(failures.len() < usize::try_from(attempts).unwrap(), "{text}");
    assert!(
        failures.iter().any(|line| line.contains("; failed 4 times since ")),
        "{text}"
    );
    // The plugin on Pods, which the host may list, was served meanwhile.
    assert!(
        text.lines()
            .any(|line| line.contains("initial list synced") && line.contains("resource=\"Pod\"")),
        "{text}"
    );
}

/// The lines of `d/run.log`, once one contains each of `parts`.
async fn logged(d: &Path, parts: &[&str]) -> String {
    let log = || std::fs::read_to_string(d.join("run.log")).unwrap_or_default();
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        while !log().lines().any(|line| parts.iter().all(|part| line.contains(part))) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(found.is_ok(), "no line with {parts:?}:\n{}", log());
    log()
}

/// The body of `GET path` from the host's status endpoint, whose address its
/// log names.
async fn status_page(log: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let address = log
        .split("plugin status at http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no status address in:\n{log}"));
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{path}: {response}");
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_in_a_plugin_s_url_reaches_neither_the_log_nor_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let churn = server
        .start_workload(&apiserver_sim::workload::Workload::default().seed(5).size(1, 1, 2))
        .unwrap();
    let plugins = d.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(
        plugins.join("leaky.wasm"),
        plugin_artifacts::test_plugin("hostile.wasm"),
    )
    .unwrap();
    // A URL the allow-list refuses for its user info, with a token in its
    // query too.
    std::fs::write(
        plugins.join("leaky.toml"),
        "config = \"fetch=http://user:SECRET@127.0.0.1:9/hook?token=SECRET\"\n\
         [grant.http]\nallow = [\"http://127.0.0.1:9\"]\nnetworks = [\"127.0.0.1/32\"]\n",
    )
    .unwrap();
    let mut child = run(&server, d, &[]);
    let log = logged(d, &["http request refused or failed", "leaky"]).await;
    let pages = [
        status_page(&log, "/plugins").await,
        status_page(&log, "/overview").await,
        status_page(&log, "/metrics").await,
    ];
    let _ = child.kill();
    let _ = child.wait();
    churn.abort();
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    let refused = log
        .lines()
        .find(|line| line.contains("http request refused or failed"))
        .unwrap();
    // The audit still says what was refused, and why.
    assert!(
        refused.contains("http://127.0.0.1:9") && refused.contains("http://…@127.0.0.1:9/hook?…"),
        "{refused}"
    );
    assert!(!log.contains("SECRET"), "{log}");
    for page in pages {
        assert!(!page.contains("SECRET"), "{page}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_that_may_not_read_the_api_server_s_addresses_is_told_once_and_asks_with_back_off() {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("plugins")).unwrap();
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let admin = kube::Client::try_from(server.client_config()).unwrap();
    let params = kube::api::PostParams::default();
    let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(admin, "default");
    let account = serde_json::from_value(serde_json::json!({"metadata": {"name": "host"}})).unwrap();
    accounts.create(&params, &account).await.unwrap();
    let request: TokenRequest = serde_json::from_value(serde_json::json!({"spec": {}})).unwrap();
    let issued = accounts
        .create_subresource::<_, TokenRequest>("token", "host", &params, &request)
        .await
        .unwrap();
    let token = issued.status.and_then(|status| status.token).unwrap();
    let mut child = run_as(&server, &token, d, &[]);
    logged(d, &["cannot read the EndpointSlices of default/kubernetes"]).await;
    logged(d, &["cannot read the Service default/kubernetes"]).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let services = server.requests_on("services", "default");
    let slices = server.requests_on("endpointslices.discovery.k8s.io", "default");
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    // Asked for again with back-off (800 ms doubling: at most five lists in
    // the first 12 s, against a dozen at once a second)...
    assert!(
        (2..=5).contains(&services) && (2..=5).contains(&slices),
        "{services} lists of the Service and {slices} of the EndpointSlices:\n{log}"
    );
    // ...and said once each, at WARN, with the permission and what the host
    // does without it.
    for (objects, permission) in [
        (
            "the Service default/kubernetes",
            "list and watch on services (core) in namespace default",
        ),
        (
            "the EndpointSlices of default/kubernetes",
            "list and watch on endpointslices (discovery.k8s.io) in namespace default",
        ),
    ] {
        let said: Vec<&str> = log
            .lines()
            .filter(|line| line.contains(&format!("cannot read {objects}")))
            .collect();
        assert_eq!(said.len(), 1, "{said:#?}");
        assert!(
            said[0].contains("WARN")
                && said[0].contains("forbidden (403)")
                && said[0].contains(permission)
                && said[0].contains("`kinformer rbac`")
                && said[0].contains("refused the API server at the addresses its kubeconfig names"),
            "{}",
            said[0]
        );
    }
}

/// A component whose compile takes about a minute here: `functions` copies of
/// one long function in a core module, in a component. Encoded by hand: the
/// text format of that many functions would take longer to parse than to run
/// the test.
fn slow_to_compile(functions: u32) -> Vec<u8> {
    fn leb(mut value: u32, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    fn section(id: u8, content: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        leb(u32::try_from(content.len()).unwrap(), out);
        out.extend_from_slice(content);
    }
    // (local i32) then 200 times: x * k ^ acc -> acc; then acc.
    let mut body = vec![0x01, 0x01, 0x7f];
    for k in 0..200_u8 {
        body.extend_from_slice(&[0x20, 0x00, 0x41, k % 60, 0x6c, 0x20, 0x01, 0x73, 0x21, 0x01]);
    }
    body.extend_from_slice(&[0x20, 0x01, 0x0b]);
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f], &mut module);
    let mut declared = Vec::new();
    leb(functions, &mut declared);
    declared.extend(std::iter::repeat_n(0, usize::try_from(functions).unwrap()));
    section(3, &declared, &mut module);
    let mut code = Vec::new();
    leb(functions, &mut code);
    for _ in 0..functions {
        leb(u32::try_from(body.len()).unwrap(), &mut code);
        code.extend_from_slice(&body);
    }
    section(10, &code, &mut module);
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    section(1, &module, &mut component);
    component
}

/// SIGTERM once `slow` is compiling: the host exits within 5 s, the compile
/// unfinished, whether it ran in a child process (`--cache-dir`: the child is
/// ended) or in the host's own (`--no-cache`: abandoned).
async fn shutdown_during_a_long_compile(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plugins = d.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    // About 4 ms a function in a compile process here: a minute or more.
    std::fs::write(plugins.join("slow.wasm"), slow_to_compile(15_000)).unwrap();
    std::fs::write(plugins.join("pods.wasm"), plugin_artifacts::DELTA_LOGGER).unwrap();
    std::fs::write(plugins.join("pods.toml"), "config = \"v1/Pod\"\n").unwrap();
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let mut child = run(&server, d, extra);
    let log = || std::fs::read_to_string(d.join("run.log")).unwrap_or_default();
    let compiling = |text: &str| {
        text.lines()
            .any(|line| line.contains("compiling plugin") && line.contains("plugin=\"slow\""))
    };
    let started = Instant::now();
    while !compiling(&log()) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never compiled:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let signalled = Instant::now();
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if signalled.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("still running 20 s after SIGTERM:\n{}", log());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // A bound on behaviour, not a speed: without the fix the host waits for
    // the compile (a minute or more), with it the stop takes about a second.
    let took = signalled.elapsed();
    let text = log();
    assert!(
        took <= Duration::from_secs(5),
        "exited {took:?} after SIGTERM ({exited}):\n{text}"
    );
    assert!(
        !text
            .lines()
            .any(|line| line.contains("compiled plugin") && line.contains("plugin=\"slow\"")),
        "the compile was quicker than the test assumes:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_ends_a_compile_process_that_runs_long() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cache_dir = cache.to_str().unwrap();
    shutdown_during_a_long_compile(&["--cache-dir", cache_dir]).await;
    // The compile process went with the host, not left compiling.
    let compiling = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| std::fs::read(entry.ok()?.path().join("environ")).ok())
        .filter(|environ| {
            environ
                .split(|byte| *byte == 0)
                .any(|variable| variable == format!("KINFORMER_COMPILE_INTO={cache_dir}").as_bytes())
        })
        .count();
    assert_eq!(compiling, 0, "a compile process outlived the host");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_abandons_a_long_compile_in_the_hosts_process() {
    shutdown_during_a_long_compile(&["--no-cache"]).await;
}
