//! Row 9: writes through the host: a plugin's merge patches, one after the other, against the same patches from a kube-rs client.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::cluster::quiet_cluster;
use crate::consumers::kinformer_consumer;
use crate::rows::{Sizes, done_line};
use crate::table::{Samples, Table, Unit};

/// The writer plugin's name (its file stem), as its status shows it.
const PLUGIN: &str = "bench-writer";

/// The namespace both sides write in.
const NAMESPACE: &str = "ns-0";

/// How long one side may take for its writes.
const STUCK: Duration = Duration::from_secs(300);

/// The writer test plugin's manifest: `patches` merge patches of one ConfigMap,
/// granted exactly those, with the highest rate limit a manifest may set.
fn manifest(patches: usize) -> String {
    format!(
        "config = \"bench={patches}:{NAMESPACE}\"\n\
         [[grant.write]]\nverbs = [\"create\", \"patch\"]\nresources = [\"v1/ConfigMap\"]\nnamespaces = [\"{NAMESPACE}\"]\n\
         [limits]\nwrites-per-second = 10000\nwrite-burst = 10000\n"
    )
}

/// kinformer: the writer plugin creates its ConfigMap, then patches it
/// `patches` times, timing the patches itself (WASI's monotonic clock).
async fn kinformer_patches(patches: usize) -> anyhow::Result<f64> {
    let server = quiet_cluster(10).await?;
    let client = kube::Client::try_from(server.client_config())?;
    let manifest = manifest(patches);
    let plugin = (PLUGIN, plugin_artifacts::test_plugin("writer.wasm"), manifest.as_str());
    let consumer = kinformer_consumer(client, &[plugin], &[]).await?;
    let runtime = consumer.runtime().context("kinformer's side has a runtime")?;
    let deadline = Instant::now() + STUCK;
    // Polled slowly: this process's CPU is the writes' as well.
    let (failed, nanos) = loop {
        if let Some(done) = done_line(runtime, PLUGIN, "bench ")? {
            break done;
        }
        if Instant::now() > deadline {
            bail!("the plugin's {patches} patches took over {STUCK:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if failed > 0 {
        bail!("{failed} of the plugin's writes failed: {:?}", runtime.status());
    }
    let last = written_annotation(&server, "bench").await?;
    consumer.stop().await;
    server.close().await;
    check_last(&last, patches)?;
    Ok(patches as f64 / (nanos / 1e9))
}

/// kube-rs: the same create and patches from a client on the same kind of
/// cluster, with the same field manager, timed from the create's answer to the
/// last patch's.
async fn kube_patches(patches: usize) -> anyhow::Result<f64> {
    let server = quiet_cluster(10).await?;
    let client = kube::Client::try_from(server.client_config())?;
    let api = kube::Api::<ConfigMap>::namespaced(client, NAMESPACE);
    let mut object = ConfigMap::default();
    object.metadata.name = Some("bench".into());
    let post = PostParams {
        field_manager: Some(PLUGIN.into()),
        ..PostParams::default()
    };
    api.create(&post, &object).await?;
    let params = PatchParams {
        field_manager: Some(PLUGIN.into()),
        ..PatchParams::default()
    };
    let started = Instant::now();
    for write in 0..patches {
        let patch = json!({"metadata": {"annotations": {"writes": write.to_string()}}});
        api.patch("bench", &params, &Patch::Merge(&patch)).await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let last = written_annotation(&server, "bench").await?;
    server.close().await;
    check_last(&last, patches)?;
    Ok(patches as f64 / elapsed)
}

/// The `writes` annotation of ConfigMap `name`, as the server holds it.
async fn written_annotation(server: &apiserver_sim::ApiServer, name: &str) -> anyhow::Result<String> {
    let client = kube::Client::try_from(server.client_config())?;
    let object = kube::Api::<ConfigMap>::namespaced(client, NAMESPACE).get(name).await?;
    Ok(object
        .metadata
        .annotations
        .and_then(|annotations| annotations.get("writes").cloned())
        .unwrap_or_default())
}

/// Every patch landed: the last one's counter is on the server.
fn check_last(last: &str, patches: usize) -> anyhow::Result<()> {
    let expected = patches.saturating_sub(1).to_string();
    if last != expected {
        bail!("the server's ConfigMap says writes={last:?}, not {expected:?}: patches were lost");
    }
    Ok(())
}

/// Row 9: merge patches per second, one after the other, through a plugin's
/// granted writes and from a kube-rs client.
pub(super) async fn row(table: &mut Table, sizes: &Sizes, repeat: usize) -> anyhow::Result<()> {
    let patches = sizes.write_patches;
    eprintln!("row 9: {patches} merge patches of one ConfigMap, one after the other");
    let (mut ours, mut theirs) = (Samples::default(), Samples::default());
    for _ in 0..repeat {
        ours.push(kinformer_patches(patches).await?);
        theirs.push(kube_patches(patches).await?);
    }
    table.add(
        "9. writes: merge patches per second, one after the other, from a plugin (vs a kube-rs `Api::patch` loop)",
        ours.show(Unit::PerSecond),
        theirs.show(Unit::PerSecond),
        ours.median() / theirs.median(),
        "≥ 0.9×",
    );
    Ok(())
}
