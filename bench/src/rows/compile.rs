//! Row 10: the host's resident memory after compiling a large component,
//! against the same host loading it from the compile cache.

use std::path::Path;

use crate::Child;
use crate::child::{LoadReport, run_to_end};
use crate::table::{Samples, Table, Unit};

/// Row 10: each load runs in a fresh process; the first of each pair
/// compiles into an empty cache, the second loads from it. The host compiles
/// in a compile process, as `kinformer run` does; for comparison, a third
/// load compiles in the host's own process.
pub(super) fn row(table: &mut Table, component: &Path, repeat: usize) -> anyhow::Result<()> {
    let size = std::fs::metadata(component)?.len();
    eprintln!(
        "row 10: resident memory after loading {} ({} MB)",
        component.display(),
        size / 1_000_000
    );
    let (mut compiled, mut cached, mut in_process) = (Samples::default(), Samples::default(), Samples::default());
    let (mut compile_ms, mut cached_ms) = (Samples::default(), Samples::default());
    for _ in 0..repeat {
        let load = |cache: &Path, in_process| Child::Load {
            component: component.to_owned(),
            cache: cache.to_owned(),
            in_process,
            instances: 0,
            config: String::new(),
        };
        let cache = tempfile::tempdir()?;
        let report = run_to_end::<LoadReport>(&load(cache.path(), false))?;
        compiled.push(report.rss_mib());
        compile_ms.push(report.load_ms);
        let report = run_to_end::<LoadReport>(&load(cache.path(), false))?;
        cached.push(report.rss_mib());
        cached_ms.push(report.load_ms);
        let fresh = tempfile::tempdir()?;
        in_process.push(run_to_end::<LoadReport>(&load(fresh.path(), true))?.rss_mib());
    }
    let megabytes = size / 1_000_000;
    table.add(
        format!(
            "10. resident memory after compiling a {megabytes} MB component in a compile process (vs loading it from the cache)"
        ),
        compiled.show(Unit::Mib),
        cached.show(Unit::Mib),
        compiled.median() / cached.median(),
        "≤ 1.2×",
    );
    table.add(
        "10. the same, compiled in the host's own process (vs loading it from the cache)",
        in_process.show(Unit::Mib),
        cached.show(Unit::Mib),
        in_process.median() / cached.median(),
        "",
    );
    table.add(
        format!("10. time to load a {megabytes} MB component: compiling (vs from the cache)"),
        compile_ms.show(Unit::Millis),
        cached_ms.show(Unit::Millis),
        compile_ms.median() / cached_ms.median(),
        "",
    );
    Ok(())
}
