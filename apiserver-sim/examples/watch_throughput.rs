//! How fast the emulated server streams watch events to one client.
//!
//! ```sh
//! cargo run --release -p apiserver-sim --example watch_throughput -- 200000
//! ```
//!
//! Writes N small configmap changes, then reads them back over one raw HTTP watch
//! (replay from the log), and again while a writer produces them live; prints
//! events per second for both.

use std::time::Instant;

use apiserver_sim::store::{PatchType, ResourceId};
use apiserver_sim::{ApiServer, SimConfig};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let events: usize = std::env::args().nth(1).map_or(Ok(200_000), |n| n.parse())?;
    let server = ApiServer::start(SimConfig::default().compaction_window(events * 2)).await?;
    let configmaps = ResourceId::new("", "v1", "configmaps");
    for i in 0..100 {
        server.store().create(
            &configmaps,
            Some("default"),
            json!({"metadata": {"name": format!("cm-{i}")}, "data": {"v": "initial"}}),
        )?;
    }
    let start_rv = server.store().resource_version();
    let write = |count: usize| {
        for i in 0..count {
            let name = format!("cm-{}", i % 100);
            server
                .store()
                .patch(
                    &configmaps,
                    Some("default"),
                    &name,
                    PatchType::Merge,
                    json!({"data": {"v": i.to_string()}}),
                    false,
                )
                .expect("the patch applies");
        }
    };

    // Replay: every event is in the log before the watch starts.
    let started = Instant::now();
    write(events);
    let wrote = started.elapsed();
    let started = Instant::now();
    let read = read_events(&server.url(), start_rv, events).await?;
    let replay = started.elapsed();
    println!(
        "wrote {events} changes in {:.2}s ({:.0}/s); replayed {read} watch events in {:.2}s: {:.0} events/s",
        wrote.as_secs_f64(),
        events as f64 / wrote.as_secs_f64(),
        replay.as_secs_f64(),
        read as f64 / replay.as_secs_f64()
    );

    // Live: the watch follows a writer.
    let live_rv = server.store().resource_version();
    let url = server.url();
    let started = Instant::now();
    let reader = tokio::spawn(async move { read_events(&url, live_rv, events).await });
    tokio::task::yield_now().await;
    write(events);
    let read = reader.await??;
    let live = started.elapsed();
    println!(
        "live: {read} events written and streamed in {:.2}s: {:.0} events/s end to end",
        live.as_secs_f64(),
        read as f64 / live.as_secs_f64()
    );
    Ok(())
}

/// Opens a raw HTTP/1.0 watch (so the body is not chunked) from `rv` and counts
/// event lines until `want`.
async fn read_events(url: &str, rv: u64, want: usize) -> anyhow::Result<usize> {
    let address = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!("GET /api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv} HTTP/1.0\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut buf = vec![0; 1 << 20];
    let mut head = Vec::new();
    let mut lines = 0;
    while lines < want {
        let n = stream.read(&mut buf).await?;
        anyhow::ensure!(n > 0, "the watch closed after {lines} events");
        let mut body = &buf[..n];
        if head.len() < 4 || !head.ends_with(b"\r\n\r\n") {
            // Still in the response head: skip to the blank line.
            let mut consumed = 0;
            for byte in body {
                head.push(*byte);
                consumed += 1;
                if head.ends_with(b"\r\n\r\n") {
                    break;
                }
            }
            body = &body[consumed..];
        }
        lines += body.iter().filter(|b| **b == b'\n').count();
    }
    Ok(want)
}
