//! Rows 1 and 2: sync time, resident memory and memory per object, each side in its own process.

use std::collections::BTreeMap;

use anyhow::bail;

use crate::Child;
use crate::child::{FanoutReport, SyncReport, run_to_end};
use crate::cluster::{KubeconfigFile, quiet_cluster, served_pods};
use crate::consumers::Side;
use crate::table::{Samples, Table, Unit, count};

/// Rows 1 and 2 for a cluster of `pods` pods, the sides alternating.
pub(super) async fn rows(table: &mut Table, pods: usize, repeat: usize) -> anyhow::Result<()> {
    eprintln!("rows 1-2: {pods} realistic pods");
    let server = quiet_cluster(pods).await?;
    let served = served_pods(&server)?;
    let (pods_served, bytes_served) = (served.len(), served.iter().map(|pod| pod.json.len()).sum::<usize>());
    drop(served);
    let kubeconfig = KubeconfigFile::new(&server)?;
    let mut time: BTreeMap<Side, Samples> = BTreeMap::new();
    let mut rss: BTreeMap<Side, Samples> = BTreeMap::new();
    let mut per_object: BTreeMap<Side, Samples> = BTreeMap::new();
    let mut heap_per_object: BTreeMap<Side, Samples> = BTreeMap::new();
    let mut cached = 0;
    for _ in 0..repeat {
        for side in [Side::Kinformer, Side::KubePod, Side::KubeDynamic] {
            let report: SyncReport = run_to_end(&Child::Sync {
                side,
                kubeconfig: kubeconfig.path().to_owned(),
            })?;
            if report.objects != pods_served {
                bail!("{side:?} synced {} of {pods_served} pods", report.objects);
            }
            time.entry(side).or_default().push(report.sync_ms);
            rss.entry(side)
                .or_default()
                .push(report.rss_after as f64 / f64::from(1 << 20));
            per_object
                .entry(side)
                .or_default()
                .push((report.rss_after as f64 - report.rss_before as f64) / pods_served as f64);
            heap_per_object
                .entry(side)
                .or_default()
                .push((report.heap_after as f64 - report.heap_before as f64) / pods_served as f64);
            if side == Side::Kinformer {
                cached = report.cached_bytes;
            }
        }
    }
    server.close().await;
    let n = count(pods);
    let ours = Side::Kinformer;
    for (theirs, label) in [(Side::KubeDynamic, "DynamicObject"), (Side::KubePod, "Pod")] {
        table.add(
            format!("1. sync {n} pods, time (vs `reflector` over {label})"),
            time[&ours].show(Unit::Millis),
            time[&theirs].show(Unit::Millis),
            time[&ours].median() / time[&theirs].median(),
            if theirs == Side::KubeDynamic { "≤ 0.5×" } else { "" },
        );
        table.add(
            format!("1. sync {n} pods, resident memory (vs {label})"),
            rss[&ours].show(Unit::Mib),
            rss[&theirs].show(Unit::Mib),
            rss[&ours].median() / rss[&theirs].median(),
            if theirs == Side::KubeDynamic { "≤ 0.2×" } else { "" },
        );
    }
    let raw = bytes_served as f64 / pods_served as f64;
    let transformed = cached as f64 / pods_served as f64;
    let per_object = |side: Side| per_object[&side].median();
    table.add(
        format!(
            "2. {n} pods: memory per object ÷ JSON as served ({:.1} KB)",
            raw / 1000.0
        ),
        format!("{:.2}×", per_object(ours) / raw),
        format!(
            "{:.2}× (DynamicObject), {:.2}× (Pod)",
            per_object(Side::KubeDynamic) / raw,
            per_object(Side::KubePod) / raw
        ),
        per_object(ours) / per_object(Side::KubeDynamic),
        "",
    );
    table.add(
        format!(
            "2. {n} pods: memory per object ÷ JSON after the transform ({:.1} KB)",
            transformed / 1000.0
        ),
        format!("{:.2}×", per_object(ours) / transformed),
        "–".into(),
        per_object(ours) / transformed,
        "≤ 1.2×",
    );
    let heap_per_object = |side: Side| heap_per_object[&side].median();
    table.add(
        format!("2. {n} pods: live heap per object (counting allocator) ÷ JSON after the transform"),
        format!("{:.2}×", heap_per_object(ours) / transformed),
        format!(
            "{:.2}× (DynamicObject), {:.2}× (Pod)",
            heap_per_object(Side::KubeDynamic) / transformed,
            heap_per_object(Side::KubePod) / transformed
        ),
        heap_per_object(ours) / transformed,
        "",
    );
    Ok(())
}

/// Row 11: kinformer's resident memory with `plugins` no-op plugins
/// subscribed to `pods` realistic pods, once each has handled every pod.
pub(super) async fn fanout_row(table: &mut Table, pods: usize, plugins: usize, repeat: usize) -> anyhow::Result<()> {
    eprintln!("row 11: {pods} realistic pods, {plugins} plugins");
    let server = quiet_cluster(pods).await?;
    let served = served_pods(&server)?.len() as u64;
    let kubeconfig = KubeconfigFile::new(&server)?;
    let (mut rss, mut time) = (Samples::default(), Samples::default());
    for _ in 0..repeat {
        let report: FanoutReport = run_to_end(&Child::Fanout {
            plugins,
            pods: served,
            kubeconfig: kubeconfig.path().to_owned(),
        })?;
        rss.push(report.rss as f64 / f64::from(1 << 20));
        time.push(report.sync_ms);
    }
    server.close().await;
    table.add(
        format!(
            "11. {} realistic pods, {plugins} no-op plugins subscribed: resident memory once all handled every pod (time to that)",
            count(pods)
        ),
        format!("{} ({})", rss.show(Unit::Mib), time.show(Unit::Millis)),
        "–".to_owned(),
        rss.median() / 1024.0,
        "≤ 1 GiB",
    );
    Ok(())
}
