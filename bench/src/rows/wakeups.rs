//! Row 14: what a thread per plugin would cost per delta, against calling
//! several plugins from one thread, as the plugins' pool does. Ten instances of
//! the no-op probe are handed the same paced updates of realistic pods through
//! listeners of one shared processor, as an informer hands them out: from ten
//! threads, each woken per delta, and from one thread that calls the ten one
//! after the other (what the pool does with short calls); one instance on its
//! own thread is the baseline. No cluster and no decoding: the
//! process's CPU time is the handoff and the calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kinformer::caches::Caches;
use kinformer::delta::Delta;
use kinformer::limits::Limits;
use kinformer::plugin::{EngineOptions, PluginComponent, PluginEngine, PluginInstance, PluginOptions};
use kinformer::processor::{Listener, ListenerOptions, SharedProcessor};

use crate::child::cpu_seconds;
use crate::cluster::{cached_realistic_pods, pods_gvk};
use crate::consumers::{compile_cache, probe};
use crate::rows::Sizes;
use crate::table::{Samples, Table, Unit};

/// Pods whose updates are handed out, two states each, at most.
const PODS: usize = 100;

/// How long a plugin waits for its next delta before the run is taken as failed.
const QUIET: Duration = Duration::from_secs(10);

/// Who calls the plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Calls {
    /// Each plugin on its own thread, woken per delta.
    OwnThreads,
    /// Every plugin on one thread, one after the other.
    OneThread,
}

/// Row 14: CPU per change of ten no-op plugins on their own threads and on one
/// thread, each against one plugin.
pub(super) async fn row(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    let (updates, rate) = (sizes.churn_updates, sizes.churn_rate);
    eprintln!("row 14: {updates} updates at {rate}/s, handed to no-op plugins in this process");
    let measured = tokio::task::spawn_blocking(move || measure(updates, rate, repeat)).await??;
    let [one, own, shared] = measured.map(|samples| {
        samples
            .values()
            .iter()
            .map(|cpu| cpu * 1e6 / updates as f64)
            .collect::<Samples>()
    });
    for (ten, how) in [
        (&own, "each on its own thread, woken per delta (a thread per plugin)"),
        (
            &shared,
            "called one after the other on one thread (as the plugins' pool)",
        ),
    ] {
        table.add(
            format!("14. handoff and calls only: CPU per change, 10 no-op plugins {how} (vs 1 on its own thread)"),
            ten.show(Unit::Micros),
            one.show(Unit::Micros),
            ten.median() / one.median(),
            "",
        );
    }
    Ok(())
}

/// Process CPU seconds of each run: one plugin, ten on their own threads, ten
/// on one thread, `repeat` times each.
fn measure(updates: usize, rate: f64, repeat: usize) -> anyhow::Result<[Samples; 3]> {
    let engine = PluginEngine::with_options(&EngineOptions {
        cache_dir: Some(compile_cache()),
        ..EngineOptions::default()
    })?;
    let component = engine.load_bytes("probe", probe())?;
    // Every state is handed out at least twice, so each run goes round them.
    let deltas = updates_of_realistic_pods((updates / 4).clamp(1, PODS))?;
    let mut measured: [Samples; 3] = Default::default();
    for _ in 0..repeat {
        for (samples, plugins, calls) in [
            (0, 1, Calls::OwnThreads),
            (1, 10, Calls::OwnThreads),
            (2, 10, Calls::OneThread),
        ] {
            measured[samples].push(run(&component, plugins, calls, &deltas, updates, rate)?);
        }
    }
    Ok(measured)
}

/// Updates that alternate between two states of each of `pods` realistic
/// pods, so a listener hands every one out, round after round.
fn updates_of_realistic_pods(pods: usize) -> anyhow::Result<Vec<Delta>> {
    let gvk = Arc::new(pods_gvk());
    let firsts = cached_realistic_pods(pods)?;
    // The same pods again, each a state of its own.
    let seconds: Vec<_> = firsts.iter().map(|first| Arc::new((**first).clone())).collect();
    let there = firsts.iter().zip(&seconds).map(|(first, second)| (second, first));
    let back = firsts.iter().zip(&seconds);
    Ok(there
        .chain(back)
        .map(|(old, new)| Delta::updated(Arc::clone(&gvk), Arc::clone(old), Arc::clone(new)))
        .collect())
}

/// Hands `updates` deltas to `plugins` fresh instances at `rate` per second;
/// the process's CPU seconds from the first delta until every plugin handled
/// the last.
fn run(
    component: &PluginComponent,
    plugins: usize,
    calls: Calls,
    deltas: &[Delta],
    updates: usize,
    rate: f64,
) -> anyhow::Result<f64> {
    let (cache, _writer) = kinformer::indexer::indexer();
    let processor = Arc::new(SharedProcessor::new(pods_gvk(), cache));
    let mut consumers = Vec::with_capacity(plugins);
    for at in 0..plugins {
        let mut instance = component.instantiate(
            Caches::new(),
            PluginOptions::with_limits(Limits {
                max_instances: plugins,
                ..Limits::default()
            }),
        )?;
        instance.init("noop")?;
        let mut listener = processor.add_listener(&format!("probe-{at}"), &ListenerOptions::default());
        // Its initial list, of an empty cache: the deltas after it are queued.
        anyhow::ensure!(listener.try_next_batch(1).is_none(), "the cache is not empty");
        consumers.push((instance, listener));
    }
    let runtime = tokio::runtime::Handle::current();
    let threads: Vec<std::thread::JoinHandle<anyhow::Result<()>>> = match calls {
        Calls::OwnThreads => consumers
            .into_iter()
            .map(|consumer| {
                let runtime = runtime.clone();
                std::thread::spawn(move || serve(&runtime, vec![consumer], updates))
            })
            .collect(),
        Calls::OneThread => vec![std::thread::spawn(move || serve(&runtime, consumers, updates))],
    };
    let (started, cpu) = (Instant::now(), cpu_seconds());
    for (at, delta) in deltas.iter().cycle().take(updates).enumerate() {
        let due = started + Duration::from_secs_f64(at as f64 / rate);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        processor.distribute(delta);
    }
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("a plugin thread panicked"))??;
    }
    Ok(cpu_seconds() - cpu)
}

/// Calls each plugin with every delta its listener hands out until each has
/// handled `updates`, waiting as a plugin's worker does when none is ready.
/// It waits on a plugin that has handled the fewest, the last of them: a
/// delta reaches the listeners one after the other, so while they are drained
/// a later listener may get a delta that an earlier one gets only after its
/// turn. Only one that is behind is sure to get another.
fn serve(
    runtime: &tokio::runtime::Handle,
    mut consumers: Vec<(PluginInstance, Listener)>,
    updates: usize,
) -> anyhow::Result<()> {
    let mut handled = vec![0; consumers.len()];
    while handled.iter().any(|&count| count < updates) {
        let behind = (0..handled.len())
            .rev()
            .min_by_key(|&at| handled[at])
            .context("no plugins")?;
        let (_, listener) = &mut consumers[behind];
        let next = runtime.block_on(async { tokio::time::timeout(QUIET, listener.next_batch(1)).await });
        let next = next.with_context(|| format!("no delta for {QUIET:?}: {handled:?} of {updates} handled"))?;
        let mut waited = Some(next.context("the processor removed the listener")?);
        for (at, (instance, listener)) in consumers.iter_mut().enumerate() {
            let mut next = if at == behind { waited.take() } else { None };
            while let Some(batch) = next.take().or_else(|| listener.try_next_batch(1)) {
                instance.handle(&batch)?;
                handled[at] += batch.len();
            }
        }
    }
    Ok(())
}
