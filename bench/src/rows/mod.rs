//! The rows of the table, numbered as in docs/benchmarks.md: each sets up its cluster, measures both sides and adds its lines.

mod churn;
mod compile;
mod controller;
mod isolation;
mod languages;
mod outbound;
mod query;
mod reload;
mod sync;
mod wakeups;
mod writes;

use crate::table::Table;

/// The sizes of every row.
#[derive(Debug)]
pub(crate) struct Sizes {
    sync_pods: Vec<usize>,
    churn_pods: usize,
    churn_updates: usize,
    churn_rate: f64,
    query_pods: usize,
    query_calls: u32,
    reloads: usize,
    write_patches: usize,
    fanout_pods: usize,
    /// Instances of each language's no-op plugin whose memory row 12 divides.
    language_instances: usize,
    /// GETs of row 13.
    http_requests: usize,
}

impl Sizes {
    /// The real sizes, or with `quick` tiny ones that only check every row runs.
    pub(crate) fn new(quick: bool) -> Self {
        if quick {
            Self {
                sync_pods: vec![200],
                churn_pods: 50,
                churn_updates: 300,
                churn_rate: 500.0,
                query_pods: 1000,
                query_calls: 20,
                reloads: 2,
                write_patches: 50,
                fanout_pods: 200,
                language_instances: 2,
                http_requests: 50,
            }
        } else {
            Self {
                sync_pods: vec![10_000, 100_000],
                churn_pods: 1000,
                churn_updates: 20_000,
                churn_rate: 2000.0,
                query_pods: 100_000,
                query_calls: 2000,
                reloads: 5,
                write_patches: 5000,
                fanout_pods: 150_000,
                language_instances: 8,
                http_requests: 2000,
            }
        }
    }
}

/// What plugin `name` logged when its timed work was done, in its line
/// starting `prefix` with `failed=N ns=T`: `(failed, ns)`; an error once the
/// plugin failed.
fn done_line(runtime: &kinformer::runtime::Runtime, name: &str, prefix: &str) -> anyhow::Result<Option<(u64, f64)>> {
    use anyhow::Context as _;
    let statuses = runtime.status();
    let status = statuses
        .iter()
        .find(|status| status.name == name)
        .with_context(|| format!("the runtime has no plugin {name}"))?;
    if status.errors > 0 || status.traps > 0 || status.load_error.is_some() {
        anyhow::bail!("plugin {name} failed: {:?} {:?}", status.load_error, status.last_error);
    }
    let Some(line) = status.recent_logs.iter().find(|line| line.message.starts_with(prefix)) else {
        return Ok(None);
    };
    let field =
        |field: &str| logged_number(&line.message, field).with_context(|| format!("no {field} in {:?}", line.message));
    Ok(Some((field("failed")? as u64, field("ns")?)))
}

/// The number a plugin logged as `NAME=NUMBER` among the words of `line`.
fn logged_number(line: &str, name: &str) -> Option<f64> {
    line.split(' ')
        .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
        .and_then(|value| value.parse().ok())
}

/// Runs the `selected` rows (all when none are), each measurement `repeat`
/// times, into a table.
pub(crate) async fn run(
    selected: &[u8],
    sizes: &Sizes,
    repeat: usize,
    component: Option<&std::path::Path>,
) -> anyhow::Result<Table> {
    let wanted = |row: u8| selected.is_empty() || selected.contains(&row);
    let mut table = Table::default();
    if wanted(1) || wanted(2) {
        for &pods in &sizes.sync_pods {
            sync::rows(&mut table, pods, repeat).await?;
        }
    }
    if wanted(3) {
        churn::rows(&mut table, sizes, repeat).await?;
    }
    if wanted(4) {
        churn::work_row(&mut table, sizes, repeat).await?;
    }
    if wanted(5) {
        query::rows(&mut table, sizes, repeat).await?;
    }
    if wanted(6) {
        reload::rows(&mut table, sizes).await?;
    }
    if wanted(7) {
        isolation::row(&mut table, sizes, repeat).await?;
    }
    if wanted(8) {
        controller::rows(&mut table, sizes, repeat).await?;
    }
    if wanted(9) {
        writes::row(&mut table, sizes, repeat).await?;
    }
    if wanted(11) {
        sync::fanout_row(&mut table, sizes.fanout_pods, 10, repeat).await?;
    }
    if wanted(10) {
        match component {
            Some(component) => compile::row(&mut table, component, repeat)?,
            None => eprintln!("row 10: skipped: no large component (--component FILE)"),
        }
    }
    if wanted(12) {
        languages::rows(&mut table, sizes, repeat).await?;
    }
    if wanted(13) {
        outbound::row(&mut table, sizes, repeat).await?;
    }
    if wanted(14) {
        wakeups::row(&mut table, sizes, repeat).await?;
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cluster::{quiet_cluster, served_pods, write_paced};
    use crate::consumers::{Side, Work, consumer};
    use crate::controllers::PodController;

    /// The churn consumers, the controllers, the query, isolation, write and
    /// wakeup rows at toy sizes: they run, and what they compare agrees (the query row
    /// checks the plugin's answer against the native scan's; each controller
    /// reconciles every pod, then at least once per pod changed).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_rows_run_at_toy_sizes() {
        let sizes = Sizes {
            sync_pods: vec![],
            churn_pods: 20,
            churn_updates: 100,
            churn_rate: 1000.0,
            query_pods: 300,
            query_calls: 5,
            reloads: 1,
            write_patches: 20,
            fanout_pods: 0,
            language_instances: 0,
            http_requests: 0,
        };
        // Each side consumes the same stream in this process (the benchmark
        // runs them in child processes, which a test binary cannot be).
        for side in [Side::Kinformer, Side::KubePod, Side::KubeDynamic] {
            let server = quiet_cluster(sizes.churn_pods).await.unwrap();
            let client = kube::Client::try_from(server.client_config()).unwrap();
            let consumer = consumer(client, side, Work::Sum, 2).await.unwrap();
            let rate = isolation::saturated(&server, consumer, sizes.churn_updates)
                .await
                .unwrap();
            assert!(rate > 0.0, "{side:?}: {rate}");
            server.close().await;
        }
        for side in [Side::Kinformer, Side::KubePod, Side::KubeDynamic] {
            let server = quiet_cluster(sizes.churn_pods).await.unwrap();
            let pods = served_pods(&server).unwrap().len() as u64;
            let client = kube::Client::try_from(server.client_config()).unwrap();
            let controller = PodController::start(client, side).await.unwrap();
            let ready = tokio::time::timeout(Duration::from_secs(120), controller.idle(pods))
                .await
                .unwrap_or_else(|_| panic!("the {side:?} controller never reconciled all {pods} pods"))
                .unwrap();
            write_paced(&server, sizes.churn_updates, sizes.churn_rate)
                .await
                .unwrap();
            let done = tokio::time::timeout(Duration::from_secs(120), controller.idle(ready.reconciles))
                .await
                .unwrap_or_else(|_| panic!("the {side:?} controller kept reconciling after the churn"))
                .unwrap();
            // Every pod changed, so each was reconciled at least once after its
            // last change, however the queue merged the changes.
            let churned = done.reconciles - ready.reconciles;
            let changed = pods.min(sizes.churn_updates as u64);
            assert!(
                churned >= changed,
                "{side:?} reconciled {churned} times after {} changes to {changed} pods",
                sizes.churn_updates
            );
            controller.stop().await;
            server.close().await;
        }
        let mut table = Table::default();
        query::rows(&mut table, &sizes, 1).await.unwrap();
        isolation::row(&mut table, &sizes, 1).await.unwrap();
        // Each side checks that its last patch is on the server.
        writes::row(&mut table, &sizes, 1).await.unwrap();
        // Every plugin handles every delta, or the row fails.
        wakeups::row(&mut table, &sizes, 1).await.unwrap();
        assert_eq!(table.lines().len(), 3 + 1 + 1 + 2);
        assert!(
            table.lines().iter().all(|line| !line.ours.contains("NaN")),
            "{:?}",
            table.lines().iter().map(|l| &l.ours).collect::<Vec<_>>()
        );
    }
}
