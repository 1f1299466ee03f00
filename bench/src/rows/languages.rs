//! Row 12: the same no-op plugin in Rust, Python and JavaScript: deltas per CPU-second on the churn stream, first compile, load from the compile cache, and memory per instance.

use std::collections::BTreeMap;

use anyhow::Context as _;

use crate::Child;
use crate::child::{LoadReport, run_to_end};
use crate::consumers::{Language, Side, Work};
use crate::rows::{Sizes, churn};
use crate::table::{Samples, Table, Unit};

/// What one language's probe measured, a sample per repetition.
#[derive(Debug, Default)]
struct Measured {
    /// Deltas per CPU-second of the consuming process.
    rate: Samples,
    /// Deltas per `handle` call: more than one when the plugin fell behind.
    per_call: Samples,
    /// Microseconds in `handle` per delta.
    handle: Samples,
    /// Compiling into an empty cache, ms.
    compile: Samples,
    /// The same, CPU-seconds.
    compile_cpu: Samples,
    /// Loading from the cache, instantiating and running `init`, ms.
    cached: Samples,
    /// Resident MiB each instance adds.
    instance: Samples,
    /// Linear memory of an instance, MiB.
    linear: Samples,
    /// Resident MiB of the loaded component: its compiled code.
    code: Samples,
}

const MIB: f64 = (1 << 20) as f64;

/// One language's probe: the churn in a child process, then a compile into an
/// empty cache and a load from it with instances, each in a fresh process.
async fn measure(language: Language, sizes: &Sizes, into: &mut Measured) -> anyhow::Result<()> {
    let churned = churn::run(Side::Kinformer, language, Work::Noop, 1, sizes).await?;
    into.rate.push(churned.rate);
    into.per_call.push(churned.deltas_per_call);
    into.handle.push(churned.handle_us);
    let component = language.probe_file()?;
    let cache = tempfile::tempdir()?;
    let load = |instances| Child::Load {
        component: component.clone(),
        cache: cache.path().to_owned(),
        // The compile's CPU time is counted in the process that compiles.
        in_process: true,
        instances,
        config: "noop".to_owned(),
    };
    let compiled: LoadReport = run_to_end(&load(0))?;
    let cached: LoadReport = run_to_end(&load(sizes.language_instances))?;
    let instances = cached.instances.context("the load child started no instances")?;
    into.compile.push(compiled.load_ms);
    into.compile_cpu.push(compiled.load_cpu_s);
    into.cached.push(cached.load_ms + instances.start_ms);
    into.instance.push(instances.rss_each / MIB);
    into.linear.push(instances.linear_memory as f64 / MIB);
    into.code.push((cached.rss as f64 - cached.rss_before as f64) / MIB);
    Ok(())
}

/// Row 12: Python's and JavaScript's no-op plugins against Rust's, each
/// measurement in its own process, the languages taking turns.
pub(super) async fn rows(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    let languages = [Language::Rust, Language::Python, Language::JavaScript];
    let mut sizes_kb = BTreeMap::new();
    for language in languages {
        // Built (when stale) before anything is timed.
        let file = language.probe_file()?;
        sizes_kb.insert(language, std::fs::metadata(&file)?.len() as f64 / 1000.0);
    }
    eprintln!(
        "row 12: no-op plugins in {languages:?}: {} changes at {}/s to {} realistic pods; {} instances each",
        sizes.churn_updates, sizes.churn_rate, sizes.churn_pods, sizes.language_instances
    );
    let mut measured: BTreeMap<Language, Measured> = BTreeMap::new();
    for _ in 0..repeat {
        for language in languages {
            measure(language, sizes, measured.entry(language).or_default()).await?;
        }
    }
    let rust = &measured[&Language::Rust];
    let batch = kinformer::limits::Limits::default().max_batch;
    for language in [Language::Python, Language::JavaScript] {
        let guest = &measured[&language];
        let name = match language {
            Language::Python => "Python",
            _ => "JavaScript",
        };
        // A line of the table: `what`, the ratio of the medians `of` picks,
        // and each side as `show` writes it.
        let mut line = |what: String, of: fn(&Measured) -> &Samples, show: &dyn Fn(&Measured) -> String| {
            table.add(
                format!("12. no-op plugin in {name} (vs in Rust): {what}"),
                show(guest),
                show(rust),
                of(guest).median() / of(rust).median(),
                "",
            );
        };
        line("churn, deltas per CPU-second of the host".into(), |m| &m.rate, &|m| {
            m.rate.show(Unit::PerSecond)
        });
        line(
            "churn, time in `handle` per delta (deltas per call)".into(),
            |m| &m.handle,
            &|m| format!("{} ({:.1} a call)", m.handle.show(Unit::Micros), m.per_call.median()),
        );
        line(
            format!(
                "first compile ({:.1} MB component vs {:.0} KB)",
                sizes_kb[&language] / 1000.0,
                sizes_kb[&Language::Rust]
            ),
            |m| &m.compile,
            &|m| format!("{} (CPU {:.1} s)", m.compile.show(Unit::Millis), m.compile_cpu.median()),
        );
        line(
            "load from the compile cache, instantiate, init".into(),
            |m| &m.cached,
            &|m| m.cached.show(Unit::Millis),
        );
        line(
            format!("resident memory per instance after init and a batch of {batch} pod updates (its linear memory)"),
            |m| &m.instance,
            &|m| {
                format!(
                    "{} (linear {:.1} MiB)",
                    m.instance.show(Unit::MibTenths),
                    m.linear.median()
                )
            },
        );
        line(
            "resident memory of the compiled code, once per plugin".into(),
            |m| &m.code,
            &|m| m.code.show(Unit::MibTenths),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kinformer::plugin::{EngineOptions, PluginEngine};

    use crate::child::start_instances;
    use crate::cluster::{quiet_cluster, served_pods, write_paced};
    use crate::consumers::{Language, Work, compile_cache, probes};

    /// Each language's probe consumes the same toy churn in this process (the
    /// row runs it in child processes, which a test binary cannot be) and
    /// handles every delta, the initial list and each change, without an
    /// error; then instances of it start and each handles a full batch.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_languages_probe_handles_every_delta_at_toy_sizes() {
        let updates = 100;
        for language in [Language::Rust, Language::Python, Language::JavaScript] {
            let server = quiet_cluster(20).await.unwrap();
            let pods = served_pods(&server).unwrap().len() as u64;
            let client = kube::Client::try_from(server.client_config()).unwrap();
            let consumer = probes(client, language, Work::Noop, 1).await.unwrap();
            write_paced(&server, updates, 1000.0).await.unwrap();
            consumer.wait_for(updates).await.unwrap();
            let runtime = consumer.runtime().unwrap();
            let handled = || runtime.status().first().map_or(0, |status| status.deltas);
            let every = pods + updates as u64;
            tokio::time::timeout(Duration::from_secs(120), async {
                while handled() < every {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("the {language:?} probe handled {} of {every} deltas", handled()));
            let status = runtime.status().remove(0);
            assert_eq!(status.deltas, every, "{language:?}: {status:#?}");
            assert_eq!(
                (status.errors, status.traps, status.restarts),
                (0, 0, 0),
                "{language:?}: {status:#?}"
            );
            consumer.stop().await;
            server.close().await;

            let engine = PluginEngine::with_options(&EngineOptions {
                cache_dir: Some(compile_cache()),
                ..EngineOptions::default()
            })
            .unwrap();
            let component = engine.load_file(&language.probe_file().unwrap()).unwrap();
            let instances = start_instances(&component, 2, "noop").unwrap();
            assert!(instances.linear_memory > 0, "{language:?}: {instances:?}");
        }
    }
}
