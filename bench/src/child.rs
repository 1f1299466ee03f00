//! The benchmark's child processes: one side syncs, consumes churn or reconciles alone in a process, and reports one JSON line.
//!
//! The parent spawns the benchmark's own executable with a hidden subcommand
//! ([`crate::Child`]). A churn child prints `ready` once it has synced, then its
//! report once it has seen every change. A control child prints `ready` once
//! it has reconciled every pod, then its report once the parent has written a
//! line to its stdin (the churn is written) and its reconciles have stopped. A
//! sync, fan-out or load child prints only its report.

use std::io::{BufRead as _, Write as _};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kinformer::caches::Caches;
use kinformer::delta::Delta;
use kinformer::plugin::PluginOptions;
use kinformer::runtime::Runtime;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::Child;
use crate::cluster::{cached_realistic_pods, client_for, pods_gvk};
use crate::consumers::{Consumer, Language, Side, Work, consumer, probes, synced_cache};
use crate::controllers::PodController;
use crate::table::Samples;

/// What a sync child reports.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SyncReport {
    pub(crate) sync_ms: f64,
    /// Resident bytes before the client connected and 200 ms after sync.
    pub(crate) rss_before: u64,
    pub(crate) rss_after: u64,
    /// Bytes allocated and not freed, at the same two moments.
    pub(crate) heap_before: usize,
    pub(crate) heap_after: usize,
    pub(crate) objects: usize,
    pub(crate) cached_bytes: usize,
}

/// What a churn child reports.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ChurnReport {
    /// CPU time spent from ready to the last change.
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) cpu_s: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) p50_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) p99_ms: f64,
    /// kinformer's plugins' deltas per `handle` call, from ready on; NaN for
    /// kube-rs.
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) deltas_per_call: f64,
    /// Microseconds kinformer's plugins spent in `handle` per delta (wall
    /// clock, pauses for their CPU share left out), from ready on; NaN for
    /// kube-rs.
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) handle_us: f64,
}

/// What kinformer's plugins have handled so far (nothing for kube-rs).
#[derive(Debug, Clone, Copy)]
struct Handled {
    deltas: u64,
    calls: u64,
    /// Time in `handle`, its pauses for the CPU share left out.
    busy: Duration,
}

impl Handled {
    fn of(consumer: &Consumer) -> Self {
        let statuses = consumer.runtime().map(Runtime::status).unwrap_or_default();
        Self {
            deltas: statuses.iter().map(|status| status.deltas).sum(),
            calls: statuses.iter().map(|status| status.batches).sum(),
            busy: statuses
                .iter()
                .map(|status| {
                    status
                        .handle_duration
                        .sum
                        .saturating_sub(Duration::from_millis(status.cpu_paused_ms))
                })
                .sum(),
        }
    }
}

/// What a control child reports: its reconciles and CPU time from ready to
/// the last reconcile it saw.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ControlReport {
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) cpu_s: f64,
    pub(crate) reconciles: u64,
}

/// JSON has no NaN: serde_json writes it as `null`, and this reads it back.
fn nan_if_null<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN))
}

/// In a sync child: syncs every pod with one side, reports a [`SyncReport`].
pub(crate) async fn sync(side: Side, kubeconfig: &Path) -> anyhow::Result<()> {
    let client = client_for(kubeconfig).await?;
    let (before, heap_before) = (resident_bytes(), crate::HEAP.allocated());
    let started = Instant::now();
    let cache = synced_cache(client, side).await?;
    let sync_ms = started.elapsed().as_secs_f64() * 1000.0;
    // Let allocator caches settle before reading the resident size.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = SyncReport {
        sync_ms,
        rss_before: before,
        rss_after: resident_bytes(),
        heap_before,
        heap_after: crate::HEAP.allocated(),
        objects: cache.objects,
        cached_bytes: cache.cached_bytes,
    };
    println!("{}", serde_json::to_string(&report)?);
    drop(cache);
    Ok(())
}

/// What a fan-out child reports.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FanoutReport {
    /// Milliseconds from start until every plugin handled every pod.
    pub(crate) sync_ms: f64,
    /// Resident bytes then.
    pub(crate) rss: u64,
}

/// In a fan-out child: kinformer's runtime with `plugins` no-op plugins on
/// the pods, until each has handled all `pods`; reports a [`FanoutReport`].
pub(crate) async fn fanout(plugins: usize, pods: u64, kubeconfig: &Path) -> anyhow::Result<()> {
    let client = client_for(kubeconfig).await?;
    let started = Instant::now();
    let consumer = consumer(client, Side::Kinformer, Work::Noop, plugins).await?;
    let runtime = consumer.runtime().context("kinformer's consumer has a runtime")?;
    let deadline = Instant::now() + Duration::from_secs(900);
    while !runtime.status().iter().all(|plugin| plugin.deltas >= pods) {
        if Instant::now() > deadline {
            bail!("the plugins did not handle every pod: {:?}", runtime.status());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sync_ms = started.elapsed().as_secs_f64() * 1000.0;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = FanoutReport {
        sync_ms,
        rss: resident_bytes(),
    };
    println!("{}", serde_json::to_string(&report)?);
    consumer.stop().await;
    Ok(())
}

/// In a churn child: one side consumes `updates` stamped changes, kinformer's
/// with probes in `language`; reports a [`ChurnReport`].
pub(crate) async fn churn(
    side: Side,
    language: Language,
    work: Work,
    plugins: usize,
    updates: usize,
    kubeconfig: &Path,
) -> anyhow::Result<()> {
    let client = client_for(kubeconfig).await?;
    let consumer = match (side, language) {
        (_, Language::Rust) => consumer(client, side, work, plugins).await?,
        (Side::Kinformer, guest) => probes(client, guest, work, plugins).await?,
        (side, guest) => bail!("{side:?} runs no plugins, in {guest:?} or any language"),
    };
    let cpu = cpu_seconds();
    let at_ready = Handled::of(&consumer);
    println!("ready");
    std::io::stdout().flush()?;
    consumer.wait_for(updates).await?;
    let cpu = cpu_seconds() - cpu;
    let mut latencies = Samples::default();
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
    let handled = Handled::of(&consumer);
    let deltas = (handled.deltas - at_ready.deltas) as f64;
    let report = ChurnReport {
        cpu_s: cpu,
        p50_ms: latencies.percentile(0.5),
        p99_ms: latencies.percentile(0.99),
        deltas_per_call: deltas / (handled.calls - at_ready.calls) as f64,
        handle_us: (handled.busy.saturating_sub(at_ready.busy)).as_secs_f64() * 1e6 / deltas,
    };
    println!("{}", serde_json::to_string(&report)?);
    consumer.stop().await;
    Ok(())
}

/// In a control child: one side reconciles every pod, then the churn until the
/// parent says it is written and the reconciles stop; reports a
/// [`ControlReport`].
pub(crate) async fn control(side: Side, pods: u64, kubeconfig: &Path) -> anyhow::Result<()> {
    let controller = PodController::start(client_for(kubeconfig).await?, side).await?;
    let ready = controller.idle(pods).await?;
    let cpu = cpu_seconds();
    println!("ready");
    std::io::stdout().flush()?;
    // A line, or the end of stdin: the parent has written every change.
    tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new())).await??;
    let done = controller.idle(ready.reconciles).await?;
    let report = ControlReport {
        cpu_s: done.cpu_s - cpu,
        reconciles: done.reconciles - ready.reconciles,
    };
    println!("{}", serde_json::to_string(&report)?);
    controller.stop().await;
    Ok(())
}

/// What a load child reports.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct LoadReport {
    /// Milliseconds the load took (compiling, or reading the cache).
    pub(crate) load_ms: f64,
    /// CPU-seconds the load took, on every thread of the process.
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) load_cpu_s: f64,
    /// Resident bytes before the load, with the engine set up.
    pub(crate) rss_before: u64,
    /// Resident bytes 200 ms after the load.
    pub(crate) rss: u64,
    /// With instances: what they cost.
    pub(crate) instances: Option<InstancesReport>,
}

impl LoadReport {
    pub(crate) fn rss_mib(&self) -> f64 {
        self.rss as f64 / f64::from(1 << 20)
    }
}

/// What a load child reports of the instances it started.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct InstancesReport {
    /// Milliseconds to instantiate the first instance and run its `init`.
    pub(crate) start_ms: f64,
    /// Resident bytes each instance after the first added, once it ran
    /// `init` and handled one full batch.
    pub(crate) rss_each: f64,
    /// Bytes of linear memory the first instance holds then.
    pub(crate) linear_memory: u64,
}

/// In a load child: compiles `component` with a plugin engine caching in
/// `cache` (or loads it from there), in a compile process as `kinformer run`
/// does unless `in_process`, then starts `instances` instances of it (none
/// for 0) and reports a [`LoadReport`].
pub(crate) fn load(
    component: &Path,
    cache: &Path,
    in_process: bool,
    instances: usize,
    config: &str,
) -> anyhow::Result<()> {
    let engine = kinformer::plugin::PluginEngine::with_options(&kinformer::plugin::EngineOptions {
        cache_dir: Some(cache.to_owned()),
        compile_process: if in_process {
            None
        } else {
            Some(std::env::current_exe()?)
        },
        ..Default::default()
    })?;
    let rss_before = resident_bytes();
    let (started, cpu) = (Instant::now(), cpu_seconds());
    let loaded = engine.load_file(component)?;
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let load_cpu_s = cpu_seconds() - cpu;
    std::thread::sleep(Duration::from_millis(200));
    let rss = resident_bytes();
    let instances = match instances {
        0 => None,
        instances => Some(start_instances(&loaded, instances, config)?),
    };
    let report = LoadReport {
        load_ms,
        load_cpu_s,
        rss_before,
        rss,
        instances,
    };
    println!("{}", serde_json::to_string(&report)?);
    drop(loaded);
    Ok(())
}

/// Starts `count` instances of `component`, each running `init` with `config`
/// then handling one full batch (the default `max-batch`) of updates to
/// realistic pods. Resident memory is read with the first instance running
/// (so the code it touched is counted once) and again with all of them.
/// Calls have no CPU share and a long deadline: this measures their cost.
pub(crate) fn start_instances(
    component: &kinformer::plugin::PluginComponent,
    count: usize,
    config: &str,
) -> anyhow::Result<InstancesReport> {
    let limits = kinformer::limits::Limits {
        cpu_millicores: 1000,
        call_timeout: Duration::from_secs(60),
        max_instances: count,
        ..kinformer::limits::Limits::default()
    };
    let gvk = Arc::new(pods_gvk());
    let batch: Vec<Delta> = cached_realistic_pods(limits.max_batch)?
        .into_iter()
        .map(|object| Delta::updated(Arc::clone(&gvk), Arc::clone(&object), object))
        .collect();
    let start = || {
        let mut instance = component.instantiate(Caches::new(), PluginOptions::with_limits(limits))?;
        instance.init(config)?;
        anyhow::Ok(instance)
    };
    let started = Instant::now();
    let mut first = start()?;
    let start_ms = started.elapsed().as_secs_f64() * 1e3;
    first.handle(&batch)?;
    std::thread::sleep(Duration::from_millis(200));
    let one = resident_bytes();
    let mut more = Vec::new();
    for _ in 1..count {
        let mut instance = start()?;
        instance.handle(&batch)?;
        more.push(instance);
    }
    std::thread::sleep(Duration::from_millis(200));
    let all = resident_bytes();
    Ok(InstancesReport {
        start_ms,
        rss_each: (all as f64 - one as f64) / more.len().max(1) as f64,
        linear_memory: first.memory_bytes() as u64,
    })
}

/// Runs a child that prints one report (sync, fan-out, load) to the end and
/// reads its report.
pub(crate) fn run_to_end<R: DeserializeOwned>(child: &Child) -> anyhow::Result<R> {
    let mut command = child.command()?;
    let output = tokio::task::block_in_place(|| command.output())?;
    if !output.status.success() {
        bail!("{child:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    serde_json::from_slice(&output.stdout).context("child report")
}

/// A churn or control child that has said `ready` and will print one report.
#[derive(Debug)]
pub(crate) struct ReadyChild {
    process: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl ReadyChild {
    /// Starts a child and waits until it is ready.
    pub(crate) fn start(child: &Child) -> anyhow::Result<Self> {
        let mut process = child.command()?.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        let stdin = process.stdin.take();
        let mut lines = std::io::BufReader::new(process.stdout.take().context("child stdout")?).lines();
        let ready = tokio::task::block_in_place(|| lines.next()).context("the consumer exited")??;
        if ready != "ready" {
            bail!("unexpected {ready:?}");
        }
        Ok(Self { process, stdin, lines })
    }

    /// Tells the child that every change is written (a control child waits
    /// for this; a churn child counts the changes itself).
    pub(crate) fn written(&mut self) -> anyhow::Result<()> {
        let mut stdin = self.stdin.take().context("told twice")?;
        writeln!(stdin, "written")?;
        Ok(())
    }

    /// Waits for the child's report.
    pub(crate) fn report<R: DeserializeOwned>(mut self) -> anyhow::Result<R> {
        let report = tokio::task::block_in_place(|| self.lines.next()).context("the consumer exited")??;
        drop(self.stdin.take());
        let _ = tokio::task::block_in_place(|| self.process.wait());
        Ok(serde_json::from_str(&report)?)
    }
}

/// This process's resident size, from /proc.
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// CPU time this process has used, from /proc (USER_HZ = 100 ticks a second).
pub(crate) fn cpu_seconds() -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_churn_report_with_no_latencies_reads_back_as_nan() {
        let report = ChurnReport {
            cpu_s: 1.5,
            p50_ms: f64::NAN,
            p99_ms: 2.0,
            deltas_per_call: f64::NAN,
            handle_us: f64::NAN,
        };
        let read: ChurnReport = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(read.cpu_s, 1.5);
        assert!(read.p50_ms.is_nan());
        assert_eq!(read.p99_ms, 2.0);
    }
}
