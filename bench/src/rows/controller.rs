//! Row 8: controllers: a no-op controller plugin's reconciles per CPU-second against kube-rs's `Controller`, each in its own process while this one writes the churn.

use std::collections::BTreeMap;

use crate::Child;
use crate::child::{ControlReport, ReadyChild};
use crate::cluster::{KubeconfigFile, quiet_cluster, served_pods, warm_up, write_paced};
use crate::consumers::Side;
use crate::rows::Sizes;
use crate::table::{Samples, Table, Unit};

/// One run of the churn stream through a controller, as the parent sees it.
#[derive(Debug, Clone, Copy)]
struct Reconciled {
    /// Reconciles per CPU-second of the controller's process.
    rate: f64,
    /// Reconciles per change written.
    per_change: f64,
}

/// Runs one side's controller in a child process against a quiet cluster
/// while this process writes the churn at its steady rate.
async fn run(side: Side, sizes: &Sizes) -> anyhow::Result<Reconciled> {
    let server = quiet_cluster(sizes.churn_pods).await?;
    let pods = served_pods(&server)?.len() as u64;
    let kubeconfig = KubeconfigFile::new(&server)?;
    let mut child = ReadyChild::start(&Child::Control {
        side,
        pods,
        kubeconfig: kubeconfig.path().to_owned(),
    })?;
    write_paced(&server, sizes.churn_updates, sizes.churn_rate).await?;
    child.written()?;
    let report: ControlReport = child.report()?;
    server.close().await;
    Ok(Reconciled {
        rate: report.reconciles as f64 / report.cpu_s,
        per_change: report.reconciles as f64 / sizes.churn_updates as f64,
    })
}

/// Row 8: reconciles per CPU-second of a no-op reconcile of every pod, and
/// reconciles per change (each side's queue merges the changes of a key
/// waiting for its reconcile in its own way).
pub(super) async fn rows(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    eprintln!(
        "row 8: no-op controllers, {} changes at {}/s to {} realistic pods",
        sizes.churn_updates, sizes.churn_rate, sizes.churn_pods
    );
    warm_up(sizes.churn_pods, sizes.churn_updates).await?;
    let mut results: BTreeMap<Side, Vec<Reconciled>> = BTreeMap::new();
    for _ in 0..repeat {
        for side in [Side::Kinformer, Side::KubePod, Side::KubeDynamic] {
            results.entry(side).or_default().push(run(side, sizes).await?);
        }
    }
    let samples = |side: Side, of: fn(&Reconciled) -> f64| results[&side].iter().map(of).collect::<Samples>();
    let rate = |side: Side| samples(side, |reconciled| reconciled.rate);
    let ours = Side::Kinformer;
    for (theirs, label, target) in [
        (Side::KubePod, "Pod", "≥ 1.0×"),
        (Side::KubeDynamic, "DynamicObject", ""),
    ] {
        table.add(
            format!(
                "8. controller, no-op reconcile of every pod: reconciles per CPU-second (vs `Controller` over {label})"
            ),
            rate(ours).show(Unit::PerSecond),
            rate(theirs).show(Unit::PerSecond),
            rate(ours).median() / rate(theirs).median(),
            target,
        );
    }
    let per_change = |side: Side| samples(side, |reconciled| reconciled.per_change);
    table.add(
        "8. controller, reconciles per change (each side deduplicates queued keys its own way)",
        per_change(ours).show(Unit::Plain),
        format!(
            "{:.2} (Pod), {:.2} (DynamicObject)",
            per_change(Side::KubePod).median(),
            per_change(Side::KubeDynamic).median()
        ),
        per_change(ours).median() / per_change(Side::KubePod).median(),
        "",
    );
    Ok(())
}
