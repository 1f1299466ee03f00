//! kinformer against what a Rust user would otherwise pick — a kube-rs
//! `reflector` with the handler compiled in — on the same work, in the same
//! run, on the emulated API server. Prints a table of ratios.
//!
//! `cargo run --release -p kinformer-bench` runs every row; `--quick` runs them
//! with tiny sizes (what the test suite does to keep this from rotting).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand, ValueEnum};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kinformer::caches::Caches;
use kinformer::delta::{Delta, DeltaType};
use kinformer::indexer::indexer;
use kinformer::informer::{InformerKey, SharedInformerFactory};
use kinformer::object::CachedObject;
use kinformer::plugin::{LogSink, PluginEngine, PluginOptions, digest};
use kinformer::runtime::{BatchObserver, Runtime, RuntimeConfig};
use kinformer::sim::store::{Filter, PatchType, ResourceId};
use kinformer::sim::workload::Workload;
use kinformer::sim::{ApiServer, SimConfig};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt as _, watcher};

mod requests {
    include!("../../test-plugins/bench-probe/src/requests.rs");
}

/// kinformer against a kube-rs reflector, side by side.
#[derive(Debug, Parser)]
#[command(name = "kinformer-bench")]
struct Cli {
    /// Tiny sizes and one repetition: checks that every row runs.
    #[arg(long)]
    quick: bool,
    /// Repetitions per measurement (medians are reported, with min and max).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Only these rows (1-7).
    #[arg(long, value_delimiter = ',')]
    rows: Vec<u8>,
    #[command(subcommand)]
    child: Option<Child>,
}

#[derive(Debug, Subcommand)]
enum Child {
    /// (internal) Syncs the pods of a cluster in this process and reports time
    /// and resident memory as JSON.
    #[command(hide = true)]
    Sync {
        #[arg(long, value_enum)]
        side: Side,
        #[arg(long)]
        kubeconfig: PathBuf,
    },
    /// (internal) Consumes churn with one side in this process and reports CPU
    /// time and latencies as JSON.
    #[command(hide = true)]
    Churn {
        #[arg(long, value_enum)]
        side: Side,
        #[arg(long, value_enum)]
        work: Work,
        #[arg(long)]
        plugins: usize,
        #[arg(long)]
        updates: usize,
        #[arg(long)]
        kubeconfig: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Side {
    Kinformer,
    KubePod,
    KubeDynamic,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match cli.child {
        Some(Child::Sync { side, kubeconfig }) => return runtime.block_on(sync_child(side, &kubeconfig)),
        Some(Child::Churn {
            side,
            work,
            plugins,
            updates,
            kubeconfig,
        }) => return runtime.block_on(churn_child(side, work, plugins, updates, &kubeconfig)),
        None => {}
    }
    let rows: Vec<u8> = if cli.rows.is_empty() {
        (1..=7).collect()
    } else {
        cli.rows.clone()
    };
    let repeat = if cli.quick { 1 } else { cli.repeat.max(1) };
    let sizes = Sizes::new(cli.quick);
    let mut table = Table::default();
    runtime.block_on(async {
        if rows.iter().any(|row| [1, 2].contains(row)) {
            for &pods in &sizes.sync_pods {
                sync_rows(&mut table, pods, repeat).await?;
            }
        }
        if rows.contains(&3) {
            churn_rows(&mut table, &sizes, repeat).await?;
        }
        if rows.contains(&4) {
            work_row(&mut table, &sizes, repeat).await?;
        }
        if rows.contains(&5) {
            query_rows(&mut table, &sizes, repeat).await?;
        }
        if rows.contains(&6) {
            reload_rows(&mut table, &sizes, repeat).await?;
        }
        if rows.contains(&7) {
            isolation_row(&mut table, &sizes, repeat).await?;
        }
        anyhow::Ok(())
    })?;
    table.print();
    Ok(())
}

/// The sizes of every row.
struct Sizes {
    sync_pods: Vec<usize>,
    churn_pods: usize,
    churn_updates: usize,
    churn_rate: f64,
    query_pods: usize,
    query_calls: u32,
    reloads: usize,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                sync_pods: vec![200],
                churn_pods: 50,
                churn_updates: 300,
                churn_rate: 500.0,
                query_pods: 1000,
                query_calls: 20,
                reloads: 2,
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
            }
        }
    }
}

/// Several measurements of one quantity.
#[derive(Debug, Clone, Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn push(&mut self, value: f64) {
        self.0.push(value);
    }

    fn median(&self) -> f64 {
        let mut sorted = self.0.clone();
        sorted.sort_by(f64::total_cmp);
        match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => f64::midpoint(sorted[n / 2 - 1], sorted[n / 2]),
        }
    }

    fn show(&self, unit: Unit) -> String {
        let min = self.0.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.0.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if self.0.len() > 1 {
            format!("{} ({}–{})", unit.show(self.median()), unit.show(min), unit.show(max))
        } else {
            unit.show(self.median())
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Unit {
    Millis,
    Micros,
    Mib,
    PerSecond,
}

impl Unit {
    fn show(self, value: f64) -> String {
        match self {
            Self::Millis => format!("{value:.0} ms"),
            Self::Micros => format!("{value:.2} µs"),
            Self::Mib => format!("{value:.0} MiB"),
            Self::PerSecond => format!("{value:.0}/s"),
        }
    }
}

/// One line of the result table.
struct Line {
    row: String,
    ours: String,
    theirs: String,
    ratio: f64,
    target: String,
}

#[derive(Default)]
struct Table(Vec<Line>);

fn show_ratio(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.2}×")
    } else {
        "–".into()
    }
}

impl Table {
    fn add(&mut self, row: impl Into<String>, ours: String, theirs: String, ratio: f64, target: impl Into<String>) {
        let line = Line {
            row: row.into(),
            ours,
            theirs,
            ratio,
            target: target.into(),
        };
        eprintln!(
            "  {} | {} | {} | {} | {}",
            line.row,
            line.ours,
            line.theirs,
            show_ratio(line.ratio),
            line.target
        );
        self.0.push(line);
    }

    fn print(&self) {
        println!("| row | kinformer | kube-rs | ratio | target |");
        println!("| --- | --- | --- | --- | --- |");
        for line in &self.0 {
            println!(
                "| {} | {} | {} | {} | {} |",
                line.row,
                line.ours,
                line.theirs,
                show_ratio(line.ratio),
                line.target
            );
        }
    }
}

fn pods_id() -> ResourceId {
    ResourceId::new("", "v1", "pods")
}

fn pods_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "Pod")
}

/// An emulated cluster holding about `pods` realistic pods (~10 KB with
/// managedFields), in deployments of 100 pods, and nothing changing.
async fn quiet_cluster(pods: usize) -> anyhow::Result<ApiServer> {
    let server = ApiServer::start(SimConfig::default()).await?;
    let deployments = pods.div_ceil(100).max(1);
    let per_deployment = pods.div_ceil(deployments);
    let workload = Workload::default()
        .size(1, deployments, per_deployment)
        .realistic_pods(true);
    tokio::task::block_in_place(|| workload.populate(server.store()).map(drop))
        .map_err(|error| anyhow::anyhow!("populating the cluster: {error}"))?;
    // The population's event history is not needed: watches start from lists.
    server.store().compact();
    Ok(server)
}

/// The pods' JSON as the server serves it: count and total bytes.
fn served_bytes(server: &ApiServer) -> anyhow::Result<(usize, usize)> {
    let (pods, _) = server
        .store()
        .snapshot(&pods_id(), &Filter::default())
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    Ok((pods.len(), pods.iter().map(|pod| pod.json.len()).sum()))
}

fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// A client for the cluster of a kubeconfig file.
async fn client_for(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// How a value is spelled on the command line.
fn arg_name(value: &impl ValueEnum) -> String {
    value
        .to_possible_value()
        .map(|value| value.get_name().to_owned())
        .unwrap_or_default()
}

/// In a child process: syncs every pod with one side, reports JSON.
async fn sync_child(side: Side, kubeconfig: &Path) -> anyhow::Result<()> {
    let client = client_for(kubeconfig).await?;
    let before = resident_bytes();
    let started = Instant::now();
    let (objects, cached_bytes, keep): (usize, usize, Box<dyn std::any::Any>) = match side {
        Side::Kinformer => {
            let factory = SharedInformerFactory::new(client);
            let informer = factory.informer(InformerKey::new(pods_gvk())).await?;
            while !informer.has_synced() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let cache = informer.cache();
            let all = cache.list_all();
            let bytes = all.iter().map(|object| object.json().len()).sum();
            (all.len(), bytes, Box::new((factory, informer)))
        }
        Side::KubePod => {
            let (reader, writer) = reflector::store::<Pod>();
            let stream = watcher(kube::Api::<Pod>::all(client), watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .applied_objects();
            let task = tokio::spawn(stream.for_each(|_| async {}));
            reader.wait_until_ready().await?;
            (reader.state().len(), 0, Box::new((reader, task)))
        }
        Side::KubeDynamic => {
            let resource = ApiResource::erase::<Pod>(&());
            let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
            let reader = writer.as_reader();
            let api = kube::Api::<DynamicObject>::all_with(client, &resource);
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .applied_objects();
            let task = tokio::spawn(stream.for_each(|_| async {}));
            reader.wait_until_ready().await?;
            (reader.state().len(), 0, Box::new((reader, task)))
        }
    };
    let sync_ms = started.elapsed().as_secs_f64() * 1000.0;
    // Let allocator caches settle before reading the resident size.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = resident_bytes();
    println!(
        "{}",
        serde_json::json!({"sync_ms": sync_ms, "rss_before": before, "rss_after": after,
                           "objects": objects, "cached_bytes": cached_bytes})
    );
    drop(keep);
    Ok(())
}

/// Rows 1 and 2: sync time, resident memory and memory per object, each side in
/// its own process, alternating.
async fn sync_rows(table: &mut Table, pods: usize, repeat: usize) -> anyhow::Result<()> {
    eprintln!("rows 1-2: {pods} realistic pods");
    let server = quiet_cluster(pods).await?;
    let (count, served) = served_bytes(&server)?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;
    let exe = std::env::current_exe()?;
    let sides = [Side::Kinformer, Side::KubePod, Side::KubeDynamic];
    let mut time: BTreeMap<&str, Samples> = BTreeMap::new();
    let mut rss: BTreeMap<&str, Samples> = BTreeMap::new();
    let mut per_object: BTreeMap<&str, Samples> = BTreeMap::new();
    let mut cached = 0;
    for _ in 0..repeat {
        for side in sides {
            let name = format!("{side:?}");
            let mut command = std::process::Command::new(&exe);
            command
                .args(["sync", "--side"])
                .arg(arg_name(&side))
                .arg("--kubeconfig")
                .arg(&kubeconfig);
            let output = tokio::task::block_in_place(|| command.output())?;
            if !output.status.success() {
                bail!("{name} sync failed: {}", String::from_utf8_lossy(&output.stderr));
            }
            let report: serde_json::Value = serde_json::from_slice(&output.stdout).context("child report")?;
            let number = |field: &str| report[field].as_f64().unwrap_or(f64::NAN);
            if number("objects") as usize != count {
                bail!("{name} synced {} of {count} pods", number("objects"));
            }
            let key: &str = match side {
                Side::Kinformer => "kinformer",
                Side::KubePod => "pod",
                Side::KubeDynamic => "dynamic",
            };
            time.entry(key).or_default().push(number("sync_ms"));
            rss.entry(key)
                .or_default()
                .push(number("rss_after") / f64::from(1 << 20));
            per_object
                .entry(key)
                .or_default()
                .push((number("rss_after") - number("rss_before")) / count as f64);
            if side == Side::Kinformer {
                cached = number("cached_bytes") as usize;
            }
        }
    }
    server.shutdown();
    let n = if pods >= 1000 {
        format!("{}k", pods / 1000)
    } else {
        pods.to_string()
    };
    for (theirs, label) in [("dynamic", "DynamicObject"), ("pod", "Pod")] {
        let ratio = time["kinformer"].median() / time[theirs].median();
        table.add(
            format!("1. sync {n} pods, time (vs `reflector` over {label})"),
            time["kinformer"].show(Unit::Millis),
            time[theirs].show(Unit::Millis),
            ratio,
            if theirs == "dynamic" { "≤ 0.5×" } else { "" },
        );
        let ratio = rss["kinformer"].median() / rss[theirs].median();
        table.add(
            format!("1. sync {n} pods, resident memory (vs {label})"),
            rss["kinformer"].show(Unit::Mib),
            rss[theirs].show(Unit::Mib),
            ratio,
            if theirs == "dynamic" { "≤ 0.2×" } else { "" },
        );
    }
    let raw = served as f64 / count as f64;
    let transformed = cached as f64 / count as f64;
    let ours = per_object["kinformer"].median();
    table.add(
        format!(
            "2. {n} pods: memory per object ÷ JSON as served ({:.1} KB)",
            raw / 1000.0
        ),
        format!("{:.2}×", ours / raw),
        format!(
            "{:.2}× (DynamicObject), {:.2}× (Pod)",
            per_object["dynamic"].median() / raw,
            per_object["pod"].median() / raw
        ),
        ours / per_object["dynamic"].median(),
        "",
    );
    table.add(
        format!(
            "2. {n} pods: memory per object ÷ JSON after the transform ({:.1} KB)",
            transformed / 1000.0
        ),
        format!("{:.2}×", ours / transformed),
        "–".into(),
        ours / transformed,
        "≤ 1.2×",
    );
    Ok(())
}

/// Milliseconds since the epoch, with a fraction: the stamp writers put on
/// objects and handlers compare with.
fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1000.0
}

const STAMP: &str = "\"bench/sent\":\"";

/// The stamp of an object's JSON, if it has one.
fn stamp(json: &str) -> Option<f64> {
    let start = json.find(STAMP)? + STAMP.len();
    json[start..].split('"').next()?.parse().ok()
}

/// Latencies (ms) and the time the last of `expected` stamped deltas arrived.
#[derive(Default)]
struct Arrivals {
    latencies: Vec<f64>,
    last: Option<Instant>,
}

impl Arrivals {
    fn record(&mut self, json: &str) {
        if let Some(sent) = stamp(json) {
            self.latencies.push(now_ms() - sent);
            self.last = Some(Instant::now());
        }
    }
}

fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
        .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

/// One run of the churn stream: (deltas per CPU-second, p50 ms, p99 ms).
type Churned = (f64, f64, f64);

fn probe() -> &'static [u8] {
    plugin_artifacts::test_plugin("bench-probe.wasm")
}

fn hostile() -> &'static [u8] {
    plugin_artifacts::test_plugin("hostile.wasm")
}

/// A consumer of the churn stream, synced and counting stamped changes.
struct Consumer {
    arrivals: Vec<Arc<Mutex<Arrivals>>>,
    runtime: Option<Runtime>,
    _keep: Vec<Box<dyn std::any::Any + Send>>,
}

impl Consumer {
    /// Waits until every counted plugin saw `updates` stamped changes.
    async fn wait_for(&self, updates: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(300);
        while !self
            .arrivals
            .iter()
            .all(|arrivals| arrivals.lock().map(|a| a.latencies.len() >= updates).unwrap_or(false))
        {
            if Instant::now() > deadline {
                bail!("the consumer did not see all {updates} changes");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }

    async fn stop(self) {
        if let Some(runtime) = self.runtime {
            runtime.shutdown().await;
        }
    }
}

/// kinformer's side: `plugins` (name, component, manifest) in a runtime; the
/// arrivals of the `measured` ones are counted just before `handle`.
async fn kinformer_consumer(
    client: kube::Client,
    plugins: &[(&str, &[u8], &str)],
    measured: &[&str],
) -> anyhow::Result<Consumer> {
    let dir = tempfile::tempdir()?;
    for (name, bytes, manifest) in plugins {
        std::fs::write(dir.path().join(format!("{name}.wasm")), bytes)?;
        std::fs::write(dir.path().join(format!("{name}.toml")), manifest)?;
    }
    let arrivals: BTreeMap<String, Arc<Mutex<Arrivals>>> = measured
        .iter()
        .map(|name| ((*name).to_owned(), Arc::default()))
        .collect();
    let seen = arrivals.clone();
    let observer: BatchObserver = Arc::new(move |plugin: &str, batch: &[Delta]| {
        if let Some(arrivals) = seen.get(plugin)
            && let Ok(mut arrivals) = arrivals.lock()
        {
            for delta in batch.iter().filter(|delta| delta.delta_type == DeltaType::Updated) {
                arrivals.record(delta.object.json());
            }
        }
    });
    // Compiled once, then loaded from the cache: the runs measure deltas, not compiles.
    let mut config = RuntimeConfig::new(dir.path()).watch(false).observer(observer);
    config.engine.cache_dir = Some(std::env::temp_dir().join("kinformer-bench-cache"));
    let runtime = Runtime::start(client, config).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !runtime.all_running() {
        if Instant::now() > deadline {
            bail!("plugins did not start: {:?}", runtime.status());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(Consumer {
        arrivals: arrivals.into_values().collect(),
        runtime: Some(runtime),
        _keep: vec![Box::new(dir)],
    })
}

/// kube-rs's side: a watcher + reflector calling `handler` with each applied
/// object.
async fn kube_consumer<K>(
    client: kube::Client,
    api: impl FnOnce(kube::Client) -> kube::Api<K>,
    writer: reflector::store::Writer<K>,
    handler: impl Fn(&K) + Send + Sync + 'static,
) -> anyhow::Result<Consumer>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    let reader = writer.as_reader();
    let arrivals = Arc::new(Mutex::new(Arrivals::default()));
    let seen = Arc::clone(&arrivals);
    let stream = watcher(api(client), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    let task = tokio::spawn(stream.try_for_each(move |object| {
        handler(&object);
        if let Some(sent) = object.meta().annotations.as_ref().and_then(|a| a.get("bench/sent"))
            && let Ok(mut arrivals) = seen.lock()
        {
            arrivals.record(&format!("{STAMP}{sent}\""));
        }
        futures::future::ready(Ok(()))
    }));
    reader.wait_until_ready().await?;
    Ok(Consumer {
        arrivals: vec![arrivals],
        runtime: None,
        _keep: vec![Box::new(AbortOnDrop(task)), Box::new(reader)],
    })
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a churn consumer runs: which side, and which handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Work {
    Noop,
    Sum,
}

fn manifest(work: Work) -> &'static str {
    match work {
        Work::Noop => "config = \"noop\"\n[limits]\nqueue-capacity = 1000000\n",
        Work::Sum => "config = \"sum\"\n[limits]\nqueue-capacity = 1000000\n",
    }
}

/// Sets up one side's consumer of the churn stream.
async fn consumer(client: kube::Client, side: Side, work: Work, plugins: usize) -> anyhow::Result<Consumer> {
    match side {
        Side::Kinformer => {
            let names: Vec<String> = (0..plugins.max(1)).map(|i| format!("probe-{i}")).collect();
            let files: Vec<(&str, &[u8], &str)> = names
                .iter()
                .map(|name| (name.as_str(), probe(), manifest(work)))
                .collect();
            let measured: Vec<&str> = names.iter().map(String::as_str).collect();
            kinformer_consumer(client, &files, &measured).await
        }
        Side::KubePod => {
            let totals = Arc::new(Mutex::new(BTreeMap::new()));
            kube_consumer(
                client,
                kube::Api::<Pod>::all,
                reflector::store::Writer::default(),
                move |pod| match work {
                    Work::Noop => {
                        std::hint::black_box(pod);
                    }
                    Work::Sum => {
                        if let Ok(mut totals) = totals.lock() {
                            requests::add_requests(&mut totals, pod);
                        }
                    }
                },
            )
            .await
        }
        Side::KubeDynamic => {
            let resource = ApiResource::erase::<Pod>(&());
            let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
            kube_consumer(
                client,
                move |client| kube::Api::all_with(client, &resource),
                writer,
                |object| {
                    std::hint::black_box(object);
                },
            )
            .await
        }
    }
}

/// CPU time this process has used, from /proc (USER_HZ = 100 ticks a second).
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let fields: Vec<u64> = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|field| field.parse().ok())
                .collect();
            Some(fields.iter().sum::<u64>() as f64 / 100.0)
        })
        .unwrap_or(f64::NAN)
}

/// In a child process: one side consumes `updates` stamped changes; reports
/// the CPU it spent and the latencies, as JSON.
async fn churn_child(side: Side, work: Work, plugins: usize, updates: usize, kubeconfig: &Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    let consumer = consumer(client_for(kubeconfig).await?, side, work, plugins).await?;
    let cpu = cpu_seconds();
    println!("ready");
    std::io::stdout().flush()?;
    consumer.wait_for(updates).await?;
    let cpu = cpu_seconds() - cpu;
    let mut latencies = Vec::new();
    for arrivals in &consumer.arrivals {
        latencies.extend(
            arrivals
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .latencies
                .iter()
                .copied(),
        );
    }
    println!(
        "{}",
        serde_json::json!({"cpu_s": cpu, "p50_ms": percentile(&latencies, 0.5), "p99_ms": percentile(&latencies, 0.99)})
    );
    consumer.stop().await;
    Ok(())
}

/// Runs one side in a child process against a cluster of `pods` pods while
/// this process writes `updates` changes at `rate` a second; returns
/// (deltas per CPU-second of the consumer, p50 ms, p99 ms).
async fn churn_run(side: Side, work: Work, plugins: usize, sizes: &Sizes) -> anyhow::Result<Churned> {
    use std::io::BufRead as _;
    let server = quiet_cluster(sizes.churn_pods).await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;
    let (side_name, work_name) = (arg_name(&side), arg_name(&work));
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["churn", "--side", &side_name, "--work", &work_name])
        .args([
            "--plugins",
            &plugins.to_string(),
            "--updates",
            &sizes.churn_updates.to_string(),
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut lines = std::io::BufReader::new(child.stdout.take().context("child stdout")?).lines();
    let ready = tokio::task::block_in_place(|| lines.next()).context("the consumer exited")??;
    if ready != "ready" {
        bail!("unexpected {ready:?}");
    }
    write_paced(&server, sizes.churn_updates, sizes.churn_rate).await?;
    let report = tokio::task::block_in_place(|| lines.next()).context("the consumer exited")??;
    let _ = tokio::task::block_in_place(|| child.wait());
    server.shutdown();
    let report: serde_json::Value = serde_json::from_str(&report)?;
    let number = |field: &str| report[field].as_f64().unwrap_or(f64::NAN);
    let delivered = (sizes.churn_updates * plugins.max(1)) as f64;
    Ok((delivered / number("cpu_s"), number("p50_ms"), number("p99_ms")))
}

/// Writes `updates` stamped changes at `rate` a second.
async fn write_paced(server: &ApiServer, updates: usize, rate: f64) -> anyhow::Result<()> {
    let store = server.store();
    let (pods, _) = store
        .snapshot(&pods_id(), &Filter::default())
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    let keys: Vec<(String, String)> = pods
        .iter()
        .map(|pod| (pod.namespace.clone().unwrap_or_default(), pod.name.clone()))
        .collect();
    let started = Instant::now();
    tokio::task::block_in_place(|| {
        for i in 0..updates {
            let due = started + Duration::from_secs_f64(i as f64 / rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let (namespace, name) = &keys[i % keys.len()];
            let patch = serde_json::json!({"metadata": {"annotations": {"bench/sent": format!("{:.3}", now_ms())}}});
            store
                .patch(&pods_id(), Some(namespace), name, PatchType::Merge, patch, false)
                .map_err(|error| anyhow::anyhow!("{error}"))?;
        }
        anyhow::Ok(())
    })
}

/// Row 3: steady churn: deltas per CPU-second of the consuming process, and
/// latency at a steady rate; 1 and 10 no-op plugins sharing one informer.
async fn churn_rows(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    eprintln!(
        "row 3: {} changes at {}/s to {} realistic pods",
        sizes.churn_updates, sizes.churn_rate, sizes.churn_pods
    );
    let mut results: BTreeMap<&str, Vec<Churned>> = BTreeMap::new();
    for _ in 0..repeat {
        for (key, side, plugins) in [
            ("one", Side::Kinformer, 1),
            ("ten", Side::Kinformer, 10),
            ("dynamic", Side::KubeDynamic, 1),
            ("pod", Side::KubePod, 1),
        ] {
            results
                .entry(key)
                .or_default()
                .push(churn_run(side, Work::Noop, plugins, sizes).await?);
        }
    }
    let rate = |key: &str| Samples(results[key].iter().map(|r| r.0).collect());
    let p50 = |key: &str| Samples(results[key].iter().map(|r| r.1).collect());
    let p99 = |key: &str| Samples(results[key].iter().map(|r| r.2).collect());
    for (theirs, label, target) in [("dynamic", "DynamicObject", "≥ 1.5×"), ("pod", "Pod", "≥ 1.0×")] {
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
    table.add(
        "3. churn, CPU per change, 10 no-op plugins on one informer vs 1",
        format!("{:.0} µs", cost("ten", 10.0) * 1e6),
        format!("{:.0} µs", cost("one", 1.0) * 1e6),
        cost("ten", 10.0) / cost("one", 1.0),
        "≤ 1.5×",
    );
    for (name, ours, theirs) in [("p50", p50("one"), p50("pod")), ("p99", p99("one"), p99("pod"))] {
        table.add(
            format!("3. churn, latency server write → handler, {name} (vs Pod reflector)"),
            ours.show(Unit::Millis),
            theirs.show(Unit::Millis),
            ours.median() / theirs.median(),
            "",
        );
    }
    Ok(())
}

/// Row 4: a handler that parses each pod and sums CPU requests per namespace.
async fn work_row(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    eprintln!("row 4: summing requests over {} changes", sizes.churn_updates);
    let (mut ours, mut theirs) = (Samples::default(), Samples::default());
    for _ in 0..repeat {
        ours.push(churn_run(Side::Kinformer, Work::Sum, 1, sizes).await?.0);
        theirs.push(churn_run(Side::KubePod, Work::Sum, 1, sizes).await?.0);
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

/// Row 5: cache queries from inside a plugin against kube-rs's `Store`.
async fn query_rows(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    let pods = sizes.query_pods;
    eprintln!("row 5: queries over {pods} realistic pods");
    let server = quiet_cluster(pods).await?;
    let (objects, _) = server
        .store()
        .snapshot(&pods_id(), &Filter::default())
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    server.shutdown();

    // kinformer: the Indexer, queried by the bench-probe plugin.
    let (cache, writer) = indexer();
    let transform = kinformer::object::Transform::default();
    for object in &objects {
        let json = std::str::from_utf8(&object.json)?;
        let cached = CachedObject::from_json(json)?.transformed(&transform)?;
        writer.apply(Arc::new(cached));
    }
    // ~100 pods: one deployment's.
    let selector = "app=app-3";
    let key = format!(
        "{}/{}",
        objects[0].namespace.clone().unwrap_or_default(),
        objects[0].name
    );
    let caches = Caches::new();
    caches.insert(pods_gvk(), cache.clone());
    let engine = PluginEngine::new()?;
    let component = engine.load_bytes("bench-probe", probe())?;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink_lines = Arc::clone(&lines);
    let sink: LogSink = Arc::new(move |_, line| {
        if let Ok(mut lines) = sink_lines.lock() {
            lines.push(line.message.clone());
        }
    });
    let (mut get, mut list, mut index) = (Samples::default(), Samples::default(), Samples::default());
    let mut listed = 0;
    for _ in 0..repeat {
        let options = PluginOptions {
            log_sink: Some(Arc::clone(&sink)),
            ..PluginOptions::default()
        }
        .call_timeout(Duration::from_secs(60));
        let mut instance = component.instantiate(caches.clone(), options)?;
        instance.init(&format!(
            "queries|{key}|{selector}|label:app|app-3|{}",
            sizes.query_calls
        ))?;
        let delta = Delta::new(DeltaType::Sync, Arc::new(pods_gvk()), Arc::clone(&cache.list_all()[0]));
        instance.handle(&[delta])?;
        let line = lines
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .pop()
            .context("the probe logged no timings")?;
        let field = |name: &str| -> f64 {
            line.split(' ')
                .find_map(|word| word.strip_prefix(&format!("{name}=")))
                .and_then(|value| value.parse().ok())
                .unwrap_or(f64::NAN)
        };
        get.push(field("get_ns") / 1000.0);
        list.push(field("list_ns") / 1000.0);
        index.push(field("index_ns") / 1000.0);
        listed = field("listed") as usize;
    }

    // kube-rs: a reflector Store of typed pods: get, and a filtered scan of state().
    let mut store_writer = reflector::store::Writer::<Pod>::default();
    for object in &objects {
        let pod: Pod = serde_json::from_slice(&object.json)?;
        store_writer.apply_watcher_event(&watcher::Event::Apply(pod));
    }
    let store = store_writer.as_reader();
    let reference = ObjectRef::<Pod>::new(&objects[0].name).within(objects[0].namespace.as_deref().unwrap_or_default());
    let calls = sizes.query_calls.max(1);
    let (mut native_get, mut native_scan) = (Samples::default(), Samples::default());
    let mut scanned = 0;
    for _ in 0..repeat {
        let started = Instant::now();
        for _ in 0..calls {
            std::hint::black_box(store.get(&reference));
        }
        native_get.push(started.elapsed().as_secs_f64() * 1e6 / f64::from(calls));
        let scans = (calls / 20).max(1);
        let started = Instant::now();
        for _ in 0..scans {
            scanned = store
                .state()
                .iter()
                .filter(|pod| {
                    pod.metadata
                        .labels
                        .as_ref()
                        .and_then(|labels| labels.get("app"))
                        .is_some_and(|app| app == "app-3")
                })
                .count();
        }
        native_scan.push(started.elapsed().as_secs_f64() * 1e6 / f64::from(scans));
    }
    if listed != scanned {
        bail!("the plugin listed {listed} pods, the scan found {scanned}");
    }
    let n = format!("{}k", pods / 1000);
    table.add(
        format!("5. get by key from a plugin, {n} pods (vs `Store::get`)"),
        get.show(Unit::Micros),
        native_get.show(Unit::Micros),
        get.median() / native_get.median(),
        "≤ 3 µs",
    );
    table.add(
        format!("5. label selector → {listed} of {n} pods, from a plugin (vs filtered `state()` scan)"),
        list.show(Unit::Micros),
        native_scan.show(Unit::Micros),
        native_scan.median() / list.median(),
        "≥ 20× faster",
    );
    table.add(
        format!("5. by index label:app → {listed} of {n} pods, from a plugin (vs filtered scan)"),
        index.show(Unit::Micros),
        native_scan.show(Unit::Micros),
        native_scan.median() / index.median(),
        "",
    );
    Ok(())
}

/// Row 6: reload latency, from `reconcile` (the watch's debounce excluded) to
/// the new version being live, compiling and with the precompiled cache.
async fn reload_rows(table: &mut Table, sizes: &Sizes, _repeat: usize) -> anyhow::Result<()> {
    eprintln!("row 6: {} reloads, cold and cached", sizes.reloads);
    let server = quiet_cluster(100).await?;
    let cache_dir = tempfile::tempdir()?;
    let mut results = [Samples::default(), Samples::default()];
    for (pass, samples) in results.iter_mut().enumerate() {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("probe.wasm");
        std::fs::write(&file, probe())?;
        std::fs::write(dir.path().join("probe.toml"), manifest(Work::Noop))?;
        let client = kube::Client::try_from(server.client_config())?;
        let config = RuntimeConfig::new(dir.path()).watch(false).cache_dir(cache_dir.path());
        let runtime = Runtime::start(client, config).await?;
        for reload in 1..=sizes.reloads {
            let bytes = plugin_artifacts::variant(probe(), reload as u8);
            let target = digest(&bytes);
            std::fs::write(&file, &bytes)?;
            let started = Instant::now();
            runtime.reconcile().await;
            while runtime
                .status()
                .first()
                .is_none_or(|status| status.running_digest.as_deref() != Some(target.as_str()))
            {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        runtime.shutdown().await;
        eprintln!("  pass {pass}: {:?}", samples.0);
    }
    server.shutdown();
    table.add(
        "6. reload: file complete → new version live, compiling (debounce excluded)",
        results[0].show(Unit::Millis),
        "– (restart the process)".into(),
        f64::NAN,
        "",
    );
    table.add(
        "6. reload: file complete → new version live, precompiled cache",
        results[1].show(Unit::Millis),
        "– (restart the process)".into(),
        f64::NAN,
        "≤ 20 ms",
    );
    Ok(())
}

/// Wall-clock deltas/s of the first consumer's plugins while this process
/// writes `updates` changes as fast as the server takes them.
async fn saturated(server: &ApiServer, consumer: Consumer, updates: usize) -> anyhow::Result<f64> {
    let started = Instant::now();
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

/// Row 7: a well-behaved plugin's throughput beside one that loops until its
/// deadline on every call, against alone.
async fn isolation_row(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    eprintln!("row 7: isolation");
    let looping = "config = \"loop\"\n[limits]\ncall-timeout-ms = 100\n[failures]\nmax-restarts = 1000000\nrestart-backoff-ms = 10\n";
    let (mut alone, mut beside) = (Samples::default(), Samples::default());
    for _ in 0..repeat {
        for (samples, plugins) in [
            (&mut alone, vec![("good", probe(), manifest(Work::Noop))]),
            (
                &mut beside,
                vec![("good", probe(), manifest(Work::Noop)), ("looping", hostile(), looping)],
            ),
        ] {
            let server = quiet_cluster(sizes.churn_pods).await?;
            let client = kube::Client::try_from(server.client_config())?;
            let consumer = kinformer_consumer(client, &plugins, &["good"]).await?;
            samples.push(saturated(&server, consumer, sizes.churn_updates).await?);
            server.shutdown();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The churn consumers, the query and the isolation rows at toy sizes: they
    /// run, and what they compare agrees (the query row checks the plugin's
    /// answer against the native scan's).
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
        };
        // Each side consumes the same stream in this process (the benchmark
        // runs them in child processes, which a test binary cannot be).
        for side in [Side::Kinformer, Side::KubePod, Side::KubeDynamic] {
            let server = quiet_cluster(sizes.churn_pods).await.unwrap();
            let client = kube::Client::try_from(server.client_config()).unwrap();
            let consumer = consumer(client, side, Work::Sum, 2).await.unwrap();
            let rate = saturated(&server, consumer, sizes.churn_updates).await.unwrap();
            assert!(rate > 0.0, "{side:?}: {rate}");
            server.shutdown();
        }
        let mut table = Table::default();
        query_rows(&mut table, &sizes, 1).await.unwrap();
        isolation_row(&mut table, &sizes, 1).await.unwrap();
        assert_eq!(table.0.len(), 3 + 1);
        assert!(
            table.0.iter().all(|line| !line.ours.contains("NaN")),
            "{:?}",
            table.0.iter().map(|l| &l.ours).collect::<Vec<_>>()
        );
    }
}
