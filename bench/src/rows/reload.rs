//! Row 6: reload latency, from `reconcile` to the new version being live, compiling and from the precompiled cache.

use std::time::{Duration, Instant};

use kinformer::plugin::digest;
use kinformer::runtime::{Runtime, RuntimeConfig};

use crate::cluster::quiet_cluster;
use crate::consumers::{Work, manifest, probe};
use crate::rows::Sizes;
use crate::table::{Samples, Table, Unit};

/// Row 6: the first pass compiles each version, the second finds it in the
/// cache the first filled; the watch's debounce is excluded.
pub(super) async fn rows(table: &mut Table, sizes: &Sizes) -> anyhow::Result<()> {
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
            runtime.rescan().await;
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
        eprintln!("  pass {pass}: {:?}", samples.values());
    }
    server.close().await;
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
