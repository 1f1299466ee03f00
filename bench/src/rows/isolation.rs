//! Row 7: isolation: a well-behaved plugin's throughput beside one that loops to its deadline on every call.

use anyhow::Context as _;
use apiserver_sim::ApiServer;

use crate::cluster::{quiet_cluster, warm_up, write_paced};
use crate::consumers::{Consumer, Work, hostile, kinformer_consumer, manifest, probe};
use crate::rows::Sizes;
use crate::table::{Samples, Table, Unit};

/// The looping plugin: a short deadline, and restarted however often it traps.
const LOOPING: &str =
    "config = \"loop\"\n[limits]\ncall-timeout-ms = 100\n[failures]\nmax-restarts = 1000000\nrestart-backoff-ms = 10\n";

/// Row 7: the well-behaved plugin's deltas/s beside the looping one, against alone.
pub(super) async fn row(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    eprintln!("row 7: isolation");
    warm_up(sizes.churn_pods, sizes.churn_updates).await?;
    let (mut alone, mut beside) = (Samples::default(), Samples::default());
    for _ in 0..repeat {
        for (samples, plugins) in [
            (&mut alone, vec![("good", probe(), manifest(Work::Noop))]),
            (
                &mut beside,
                vec![("good", probe(), manifest(Work::Noop)), ("looping", hostile(), LOOPING)],
            ),
        ] {
            let server = quiet_cluster(sizes.churn_pods).await?;
            let client = kube::Client::try_from(server.client_config())?;
            let consumer = kinformer_consumer(client, &plugins, &["good"]).await?;
            samples.push(saturated(&server, consumer, sizes.churn_updates).await?);
            server.close().await;
        }
    }
    table.add(
        "7. no-op plugin's deltas/s, writer flat out, beside a plugin looping to its deadline (vs alone)",
        beside.show(Unit::PerSecond),
        alone.show(Unit::PerSecond),
        beside.median() / alone.median(),
        "≥ 0.9×",
    );
    Ok(())
}

/// Wall-clock deltas/s of the consumer's counted plugins while this process
/// writes `updates` changes as fast as the server takes them.
pub(super) async fn saturated(server: &ApiServer, consumer: Consumer, updates: usize) -> anyhow::Result<f64> {
    let started = std::time::Instant::now();
    write_paced(server, updates, f64::INFINITY).await?;
    consumer.wait_for(updates).await?;
    let last = consumer
        .arrivals
        .iter()
        .filter_map(|arrivals| arrivals.lock().ok()?.last)
        .max()
        .context("no arrivals")?;
    consumer.stop().await;
    Ok(updates as f64 / last.duration_since(started).as_secs_f64())
}
