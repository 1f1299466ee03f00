//! Row 5: cache queries from inside a plugin against kube-rs's `Store`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use kinformer::caches::Caches;
use kinformer::delta::{Delta, DeltaType};
use kinformer::indexer::indexer;
use kinformer::object::CachedObject;
use kinformer::plugin::{LogSink, PluginEngine, PluginOptions};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;

use crate::cluster::{pods_gvk, quiet_cluster, served_pods};
use crate::consumers::probe;
use crate::rows::{Sizes, logged_number};
use crate::table::{Samples, Table, Unit, count};

/// Row 5: get by key, a label selector and an index lookup, each side over the
/// same pods.
pub(super) async fn rows(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    let pods = sizes.query_pods;
    eprintln!("row 5: queries over {pods} realistic pods");
    let server = quiet_cluster(pods).await?;
    let objects = served_pods(&server)?;
    server.close().await;

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
        let field = |name: &str| logged_number(&line, name).unwrap_or(f64::NAN);
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
    let n = count(pods);
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
