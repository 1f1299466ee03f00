//! The consumers of the pods: kinformer's runtime with plugins, and kube-rs reflectors with the handler compiled in.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::ValueEnum;
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kinformer::delta::{Delta, DeltaType};
use kinformer::informer::{InformerKey, SharedInformerFactory};
use kinformer::runtime::{BatchObserver, Runtime, RuntimeConfig};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt as _, watcher};

use crate::cluster::{SENT, now_ms, pods_gvk, sent_in_json};

mod requests {
    include!("../../test-plugins/bench-probe/src/requests.rs");
}

/// Who consumes: kinformer, a kube-rs reflector over typed pods or over
/// `DynamicObject`, or the floor: the least any consumer of the stream does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub(crate) enum Side {
    Kinformer,
    KubePod,
    KubeDynamic,
    Floor,
}

/// What a churn consumer's handler does with each pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Work {
    Noop,
    /// As `Noop`, with kinformer's plugins gathering deltas for 5 ms after a
    /// call (`batch-window-ms = 5`, the opt-in for throughput).
    NoopWindowed,
    Sum,
}

/// The bench-probe plugin's manifest for `work`.
pub(crate) fn manifest(work: Work) -> &'static str {
    match work {
        Work::Noop => "config = \"noop\"\n[limits]\nqueue-capacity = 1000000\n",
        Work::NoopWindowed => "config = \"noop\"\n[limits]\nqueue-capacity = 1000000\nbatch-window-ms = 5\n",
        Work::Sum => "config = \"sum\"\n[limits]\nqueue-capacity = 1000000\n",
    }
}

pub(crate) fn probe() -> &'static [u8] {
    plugin_artifacts::test_plugin("bench-probe.wasm")
}

/// The language of the probe plugin kinformer's side runs: bench-probe in
/// Rust, or the no-op plugin of `bench/plugins/` in Python or JavaScript,
/// which registers what bench-probe does and knows only `noop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub(crate) enum Language {
    Rust,
    Python,
    #[value(name = "javascript")]
    JavaScript,
}

impl Language {
    /// The probe's component file; a Python or JavaScript one is built by its
    /// SDK's build script first, unless a build newer than its sources is
    /// there (the one the tests use, under `target/guest-plugins`).
    pub(crate) fn probe_file(self) -> anyhow::Result<PathBuf> {
        use plugin_artifacts::guest;
        Ok(match self {
            Self::Rust => PathBuf::from(plugin_artifacts::BENCH_PROBE_PATH),
            Self::Python => guest::built(guest::Language::Python, guest::World::Plugin, "bench/plugins/noop-py")?,
            Self::JavaScript => guest::built(
                guest::Language::JavaScript,
                guest::World::Plugin,
                "bench/plugins/noop-js",
            )?,
        })
    }

    /// The probe's component.
    pub(crate) fn probe(self) -> anyhow::Result<Cow<'static, [u8]>> {
        Ok(match self {
            Self::Rust => Cow::Borrowed(probe()),
            guest => Cow::Owned(std::fs::read(guest.probe_file()?)?),
        })
    }
}

pub(crate) fn hostile() -> &'static [u8] {
    plugin_artifacts::test_plugin("hostile.wasm")
}

/// One side's cache of every pod, synced.
pub(crate) struct SyncedCache {
    pub(crate) objects: usize,
    /// The JSON kinformer keeps, after its transform; 0 for kube-rs, which keeps
    /// no JSON.
    pub(crate) cached_bytes: usize,
    _keep: Box<dyn std::any::Any>,
}

/// Syncs every pod with one side, with no handler.
pub(crate) async fn synced_cache(client: kube::Client, side: Side) -> anyhow::Result<SyncedCache> {
    match side {
        Side::Kinformer => {
            let factory = SharedInformerFactory::new(client);
            let informer = factory.informer(InformerKey::new(pods_gvk())).await?;
            while !informer.has_synced() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let all = informer.cache().list_all();
            Ok(SyncedCache {
                objects: all.len(),
                cached_bytes: all.iter().map(|object| object.json().len()).sum(),
                _keep: Box::new((factory, informer)),
            })
        }
        Side::KubePod => {
            let (reader, writer) = reflector::store::<Pod>();
            let task = tokio::spawn(reflect(kube::Api::<Pod>::all(client), writer).for_each(|_| async {}));
            reader.wait_until_ready().await?;
            Ok(SyncedCache {
                objects: reader.state().len(),
                cached_bytes: 0,
                _keep: Box::new((reader, task)),
            })
        }
        Side::Floor => bail!("the floor consumer keeps no cache"),
        Side::KubeDynamic => {
            let resource = ApiResource::erase::<Pod>(&());
            let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
            let reader = writer.as_reader();
            let api = kube::Api::<DynamicObject>::all_with(client, &resource);
            let task = tokio::spawn(reflect(api, writer).for_each(|_| async {}));
            reader.wait_until_ready().await?;
            Ok(SyncedCache {
                objects: reader.state().len(),
                cached_bytes: 0,
                _keep: Box::new((reader, task)),
            })
        }
    }
}

/// The stamped changes a handler saw, the latencies (ms) of those it timed,
/// and when the last timed one arrived.
#[derive(Debug, Default)]
pub(crate) struct Arrivals {
    /// For a timed handler the stamped changes; for the others every update,
    /// as every update in the churn is stamped.
    pub(crate) changes: usize,
    pub(crate) latencies: Vec<f64>,
    pub(crate) last: Option<Instant>,
}

impl Arrivals {
    /// Records a change stamped at `sent` (see [`crate::cluster::SENT`]).
    fn record(&mut self, sent: f64) {
        self.latencies.push(now_ms() - sent);
        self.changes += 1;
        self.last = Some(Instant::now());
    }
}

/// A consumer of the churn stream, synced and counting stamped changes.
pub(crate) struct Consumer {
    pub(crate) arrivals: Vec<Arc<Mutex<Arrivals>>>,
    runtime: Option<Runtime>,
    _keep: Vec<Box<dyn std::any::Any + Send>>,
}

impl Consumer {
    /// Waits until every counted plugin saw `updates` stamped changes.
    pub(crate) async fn wait_for(&self, updates: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(300);
        while !self
            .arrivals
            .iter()
            .all(|arrivals| arrivals.lock().map(|a| a.changes >= updates).unwrap_or(false))
        {
            if Instant::now() > deadline {
                bail!("the consumer did not see all {updates} changes");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }

    /// kinformer's runtime; `None` for kube-rs.
    pub(crate) fn runtime(&self) -> Option<&Runtime> {
        self.runtime.as_ref()
    }

    pub(crate) async fn stop(self) {
        if let Some(runtime) = self.runtime {
            runtime.shutdown().await;
        }
    }
}

/// Sets up one side's consumer of the churn stream; kinformer's runs
/// `plugins` bench-probe plugins on one informer.
pub(crate) async fn consumer(client: kube::Client, side: Side, work: Work, plugins: usize) -> anyhow::Result<Consumer> {
    match side {
        Side::Kinformer => probes(client, Language::Rust, work, plugins).await,
        Side::KubePod => {
            let totals = Arc::new(Mutex::new(BTreeMap::new()));
            kube_consumer(
                client,
                kube::Api::<Pod>::all,
                reflector::store::Writer::default(),
                move |pod| match work {
                    Work::Noop | Work::NoopWindowed => {
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
        Side::Floor => floor_consumer(client).await,
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

/// kinformer's side with `plugins` probes in `language` on one informer,
/// each counted.
pub(crate) async fn probes(
    client: kube::Client,
    language: Language,
    work: Work,
    plugins: usize,
) -> anyhow::Result<Consumer> {
    let component = language.probe()?;
    let names: Vec<String> = (0..plugins.max(1)).map(|i| format!("probe-{i}")).collect();
    let files: Vec<(&str, &[u8], &str)> = names
        .iter()
        .map(|name| (name.as_str(), &*component, manifest(work)))
        .collect();
    let measured: Vec<&str> = names.iter().map(String::as_str).collect();
    kinformer_consumer(client, &files, &measured).await
}

/// kinformer's side: `plugins` (name, component, manifest) in a runtime; the
/// arrivals of the `measured` ones are counted just before `handle`, and
/// timed for the first of them only: a stamp is read once per change, as on
/// kube-rs's side, however many plugins handle it.
pub(crate) async fn kinformer_consumer(
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
    let timed = measured.first().map(|name| (*name).to_owned());
    let observer: BatchObserver = Arc::new(move |plugin: &str, batch: &[Delta]| {
        if let Some(arrivals) = seen.get(plugin)
            && let Ok(mut arrivals) = arrivals.lock()
        {
            let changes = batch.iter().filter(|delta| delta.delta_type == DeltaType::Updated);
            if timed.as_deref() == Some(plugin) {
                for sent in changes.filter_map(|delta| sent_in_json(delta.object.json())) {
                    arrivals.record(sent);
                }
            } else {
                arrivals.changes += changes.count();
            }
        }
    });
    // Compiled once, then loaded from the cache: the runs measure deltas, not compiles.
    let mut config = RuntimeConfig::new(dir.path()).watch(false).observer(observer);
    config.engine.cache_dir = Some(compile_cache());
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

/// The compile cache of kinformer's consumers: each component is compiled
/// once per machine.
pub(crate) fn compile_cache() -> PathBuf {
    std::env::temp_dir().join("kinformer-bench-cache")
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
    let task = tokio::spawn(reflect(api(client), writer).try_for_each(move |object| {
        handler(&object);
        if let Some(sent) = object.meta().annotations.as_ref().and_then(|a| a.get(SENT))
            && let Ok(sent) = sent.parse()
            && let Ok(mut arrivals) = seen.lock()
        {
            arrivals.record(sent);
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

/// The floor: one watch of every pod from the listed resourceVersion, each
/// event framed in a reused buffer and parsed no further than any JSON
/// consumer must (the envelope and the object's identity, borrowed), then
/// dropped. No cache, no reconnects: the least CPU this stream costs.
async fn floor_consumer(client: kube::Client) -> anyhow::Result<Consumer> {
    use futures::AsyncBufReadExt as _;

    #[derive(serde::Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow, rename = "type")]
        kind: &'a str,
        #[serde(borrow)]
        object: Object<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Object<'a> {
        #[serde(borrow)]
        metadata: Meta<'a>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta<'a> {
        #[serde(borrow, default)]
        name: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        namespace: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        uid: Option<&'a str>,
        #[serde(borrow)]
        resource_version: &'a str,
    }

    let pods = kube::core::Request::new("/api/v1/pods");
    let listed: serde_json::Value = client
        .request(pods.list(&kube::api::ListParams::default().limit(1))?)
        .await?;
    let version = listed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let watch = pods.watch(&kube::api::WatchParams::default().timeout(290), &version)?;
    let mut lines = client.request_stream(watch).await?;
    let arrivals = Arc::new(Mutex::new(Arrivals::default()));
    let seen = Arc::clone(&arrivals);
    let task = tokio::spawn(async move {
        let mut line = Vec::with_capacity(16 * 1024);
        loop {
            line.clear();
            if !matches!(lines.read_until(b'\n', &mut line).await, Ok(read) if read > 0) {
                break;
            }
            let Ok(event) = serde_json::from_slice::<Envelope<'_>>(&line) else {
                continue;
            };
            std::hint::black_box((
                &event.kind,
                &event.object.metadata.name,
                &event.object.metadata.namespace,
            ));
            std::hint::black_box((event.object.metadata.uid, event.object.metadata.resource_version));
            if event.kind == "MODIFIED"
                && let Ok(text) = std::str::from_utf8(&line)
                && let Some(sent) = sent_in_json(text)
                && let Ok(mut arrivals) = seen.lock()
            {
                arrivals.record(sent);
            }
        }
    });
    Ok(Consumer {
        arrivals: vec![arrivals],
        runtime: None,
        _keep: vec![Box::new(AbortOnDrop(task))],
    })
}

/// kube-rs's side as its users write it: a watcher with the default backoff,
/// into a reflector's store, yielding each applied object.
fn reflect<K>(
    api: kube::Api<K>,
    writer: reflector::store::Writer<K>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
}

/// A spawned task, aborted when this is dropped.
pub(crate) struct AbortOnDrop<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
