//! Row 13: outbound HTTP: a plugin's GETs to a local server, one after the
//! other, against the same GETs from a hyper client in the host's process.
//!
//! Both sides open a connection per request, as the host does for a plugin
//! (`wasi:http` has no connection pool): what the ratio shows is the cost of
//! the sandbox, the allow-list, the address check and the limits.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use crate::cluster::quiet_cluster;
use crate::consumers::kinformer_consumer;
use crate::rows::{Sizes, done_line};
use crate::table::{Samples, Table, Unit};

/// The plugin's name (its file stem), as its status shows it.
const PLUGIN: &str = "bench-fetch";

/// How long one side may take for its requests.
const STUCK: Duration = Duration::from_secs(300);

/// A server on loopback answering every request `200 hello`.
async fn web() -> anyhow::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let app = axum::Router::new().fallback(|| async { "hello" });
    let served = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((address, served))
}

/// kinformer: the plugin's `requests` GETs, timed by the plugin itself
/// (WASI's monotonic clock).
async fn kinformer_requests(url: &str, requests: usize) -> anyhow::Result<f64> {
    let server = quiet_cluster(1).await?;
    let client = kube::Client::try_from(server.client_config())?;
    let origin = url.trim_end_matches("/bench");
    let manifest = format!(
        "config = \"sequential={requests}@{url}\"\n[grant.http]\nallow = [\"{origin}\"]\nnetworks = [\"127.0.0.1/32\"]\n\
         [limits]\ncall-timeout-ms = 60000\nhttp-requests-per-second = 10000\nhttp-burst = 100000\n"
    );
    let plugin = (PLUGIN, plugin_artifacts::test_plugin("hostile.wasm"), manifest.as_str());
    let consumer = kinformer_consumer(client, &[plugin], &[]).await?;
    let runtime = consumer.runtime().context("kinformer's side has a runtime")?;
    let deadline = Instant::now() + STUCK;
    let (failed, nanos) = loop {
        if let Some(done) = done_line(runtime, PLUGIN, "sequential ")? {
            break done;
        }
        if Instant::now() > deadline {
            bail!("the plugin's {requests} requests took over {STUCK:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    consumer.stop().await;
    server.close().await;
    if failed > 0 {
        bail!("{failed} of the plugin's {requests} requests failed");
    }
    Ok(requests as f64 / (nanos / 1e9))
}

/// hyper: the same GETs, each on a connection of its own.
async fn hyper_requests(address: std::net::SocketAddr, requests: usize) -> anyhow::Result<f64> {
    let started = Instant::now();
    for _ in 0..requests {
        let stream = tokio::net::TcpStream::connect(address).await?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let driven = tokio::spawn(connection);
        let request = hyper::Request::get("/bench")
            .header(hyper::header::HOST, address.to_string())
            .body(Empty::<Bytes>::new())?;
        let response = sender.send_request(request).await?;
        if !response.status().is_success() {
            bail!("the server answered {}", response.status());
        }
        response.into_body().collect().await?;
        drop(sender);
        let _ = driven.await;
    }
    Ok(requests as f64 / started.elapsed().as_secs_f64())
}

/// Row 13: GETs per second, one after the other, from a plugin and from
/// hyper.
pub(super) async fn row(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    let requests = sizes.http_requests;
    eprintln!("row 13: {requests} GETs to a server on loopback, one after the other");
    let (address, served) = web().await?;
    let url = format!("http://{address}/bench");
    let (mut ours, mut theirs) = (Samples::default(), Samples::default());
    for _ in 0..repeat {
        ours.push(kinformer_requests(&url, requests).await?);
        theirs.push(hyper_requests(address, requests).await?);
    }
    served.abort();
    table.add(
        "13. outbound HTTP: GETs per second, one after the other, from a plugin (vs a hyper client, a connection per request)",
        ours.show(Unit::PerSecond),
        theirs.show(Unit::PerSecond),
        ours.median() / theirs.median(),
        "≥ 0.8×",
    );
    Ok(())
}
