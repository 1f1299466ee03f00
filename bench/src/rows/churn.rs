//! Rows 3 and 4: steady churn, each consumer in its own process while this one writes stamped changes.

use std::collections::BTreeMap;

use crate::Child;
use crate::child::{ChurnReport, ReadyChild};
use crate::cluster::{KubeconfigFile, quiet_cluster, warm_up, write_paced};
use crate::consumers::{Language, Side, Work};
use crate::rows::Sizes;
use crate::table::{Samples, Table, Unit};

/// One run of the churn stream, as the parent sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Churned {
    /// Deltas delivered (to every plugin) per CPU-second of the consumer.
    pub(super) rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// kinformer's plugins' deltas per `handle` call.
    pub(super) deltas_per_call: f64,
    /// Microseconds kinformer's plugins spent in `handle` per delta.
    pub(super) handle_us: f64,
}

/// Runs one side in a child process against a quiet cluster while this
/// process writes the churn at its steady rate; kinformer's side runs probes
/// in `language`.
pub(super) async fn run(
    side: Side,
    language: Language,
    work: Work,
    plugins: usize,
    sizes: &Sizes,
) -> anyhow::Result<Churned> {
    let server = quiet_cluster(sizes.churn_pods).await?;
    let kubeconfig = KubeconfigFile::new(&server)?;
    let child = ReadyChild::start(&Child::Churn {
        side,
        language,
        work,
        plugins,
        updates: sizes.churn_updates,
        kubeconfig: kubeconfig.path().to_owned(),
    })?;
    write_paced(&server, sizes.churn_updates, sizes.churn_rate).await?;
    let report: ChurnReport = child.report()?;
    server.close().await;
    let delivered = (sizes.churn_updates * plugins.max(1)) as f64;
    Ok(Churned {
        rate: delivered / report.cpu_s,
        p50_ms: report.p50_ms,
        p99_ms: report.p99_ms,
        deltas_per_call: report.deltas_per_call,
        handle_us: report.handle_us,
    })
}

/// Row 3: deltas per CPU-second of the consuming process, and latency at a
/// steady rate; 1 and 10 no-op plugins sharing one informer.
pub(super) async fn rows(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    eprintln!(
        "row 3: {} changes at {}/s to {} realistic pods",
        sizes.churn_updates, sizes.churn_rate, sizes.churn_pods
    );
    warm_up(sizes.churn_pods, sizes.churn_updates).await?;
    let mut results: BTreeMap<&str, Vec<Churned>> = BTreeMap::new();
    for _ in 0..repeat {
        for (key, side, work, plugins) in [
            ("one", Side::Kinformer, Work::Noop, 1),
            ("ten", Side::Kinformer, Work::Noop, 10),
            ("one windowed", Side::Kinformer, Work::NoopWindowed, 1),
            ("ten windowed", Side::Kinformer, Work::NoopWindowed, 10),
            ("dynamic", Side::KubeDynamic, Work::Noop, 1),
            ("pod", Side::KubePod, Work::Noop, 1),
            ("floor", Side::Floor, Work::Noop, 1),
        ] {
            results
                .entry(key)
                .or_default()
                .push(run(side, Language::Rust, work, plugins, sizes).await?);
        }
    }
    let samples = |key: &str, of: fn(&Churned) -> f64| results[key].iter().map(of).collect::<Samples>();
    let rate = |key: &str| samples(key, |churned| churned.rate);
    let per_delta = |key: &str| samples(key, |churned| 1e6 / churned.rate);
    table.add(
        "3. churn, CPU per delta, 1 no-op plugin (vs the floor: frame each event, parse envelope and metadata borrowed)",
        per_delta("one").show(Unit::Micros),
        per_delta("floor").show(Unit::Micros),
        per_delta("one").median() / per_delta("floor").median(),
        "≤ 1.6×",
    );
    for (theirs, label, target) in [("dynamic", "DynamicObject", "≥ 3×"), ("pod", "Pod", "≥ 2×")] {
        table.add(
            format!("3. churn, deltas per CPU-second, 1 no-op plugin (vs {label} reflector + closure)"),
            rate("one").show(Unit::PerSecond),
            rate(theirs).show(Unit::PerSecond),
            rate("one").median() / rate(theirs).median(),
            target,
        );
    }
    // Ten plugins get ten times the deltas: the cost per change, ten against one.
    let cost = |key: &str, plugins: f64| plugins / rate(key).median();
    for (one, ten, how, target) in [
        ("one", "ten", "", "≤ 1.3×"),
        ("one windowed", "ten windowed", ", batch window 5 ms", ""),
    ] {
        table.add(
            format!("3. churn, CPU per change, 10 no-op plugins on one informer vs 1{how}"),
            format!("{:.0} µs", cost(ten, 10.0) * 1e6),
            format!("{:.0} µs", cost(one, 1.0) * 1e6),
            cost(ten, 10.0) / cost(one, 1.0),
            target,
        );
    }
    for (name, ours, theirs, target) in [
        (
            "p50",
            samples("one", |c| c.p50_ms),
            samples("pod", |c| c.p50_ms),
            "≤ 1.0×",
        ),
        (
            "p99",
            samples("one", |c| c.p99_ms),
            samples("pod", |c| c.p99_ms),
            "≤ 1.1×",
        ),
    ] {
        table.add(
            format!("3. churn, latency server write → handler, {name} (vs Pod reflector)"),
            ours.show(Unit::Millis),
            theirs.show(Unit::Millis),
            ours.median() / theirs.median(),
            target,
        );
    }
    // What a batch window buys and costs: the same plugin, gathering deltas 5 ms after a call.
    table.add(
        "3. churn, CPU per delta, 1 no-op plugin, batch window 5 ms (vs the default, each delta at once)",
        per_delta("one windowed").show(Unit::Micros),
        per_delta("one").show(Unit::Micros),
        per_delta("one windowed").median() / per_delta("one").median(),
        "",
    );
    table.add(
        "3. churn, latency server write → handler, p50, batch window 5 ms (vs the default)",
        samples("one windowed", |c| c.p50_ms).show(Unit::Millis),
        samples("one", |c| c.p50_ms).show(Unit::Millis),
        samples("one windowed", |c| c.p50_ms).median() / samples("one", |c| c.p50_ms).median(),
        "",
    );
    table.add(
        "3. churn, deltas per handle call, 1 no-op plugin, batch window 5 ms (vs the default)",
        format!("{:.1}", samples("one windowed", |c| c.deltas_per_call).median()),
        format!("{:.1}", samples("one", |c| c.deltas_per_call).median()),
        samples("one windowed", |c| c.deltas_per_call).median() / samples("one", |c| c.deltas_per_call).median(),
        "",
    );
    Ok(())
}

/// Row 4: a handler that parses each pod and sums CPU requests per namespace.
pub(super) async fn work_row(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    eprintln!("row 4: summing requests over {} changes", sizes.churn_updates);
    warm_up(sizes.churn_pods, sizes.churn_updates).await?;
    let (mut ours, mut theirs) = (Samples::default(), Samples::default());
    for _ in 0..repeat {
        ours.push(run(Side::Kinformer, Language::Rust, Work::Sum, 1, sizes).await?.rate);
        theirs.push(run(Side::KubePod, Language::Rust, Work::Sum, 1, sizes).await?.rate);
    }
    table.add(
        "4. parse each pod, sum CPU requests per namespace: deltas per CPU-second (vs native on Pod reflector)",
        ours.show(Unit::PerSecond),
        theirs.show(Unit::PerSecond),
        ours.median() / theirs.median(),
        "≥ 0.67× (≤ 1.5× the cost)",
    );
    Ok(())
}
