//! Row 10: the host's resident memory after compiling a large component,
//! against the same host loading it from the compile cache.

use std::path::Path;

use crate::Child;
use crate::child::{LoadReport, run_to_end};
use crate::table::{Samples, Table, Unit};

/// Row 10: each load runs in a fresh process; the first of each pair
/// compiles into an empty cache, the second loads from it.
pub(super) fn row(table: &mut Table, component: &Path, repeat: usize) -> anyhow::Result<()> {
    let size = std::fs::metadata(component)?.len();
    eprintln!(
        "row 10: resident memory after loading {} ({} MB)",
        component.display(),
        size / 1_000_000
    );
    let (mut compiled, mut cached) = (Samples::default(), Samples::default());
    for _ in 0..repeat {
        let cache = tempfile::tempdir()?;
        let load = Child::Load {
            component: component.to_owned(),
            cache: cache.path().to_owned(),
            instances: 0,
            config: String::new(),
        };
        compiled.push(run_to_end::<LoadReport>(&load)?.rss_mib());
        cached.push(run_to_end::<LoadReport>(&load)?.rss_mib());
    }
    table.add(
        format!(
            "10. resident memory after compiling a {} MB component (vs loading it from the cache)",
            size / 1_000_000
        ),
        compiled.show(Unit::Mib),
        cached.show(Unit::Mib),
        compiled.median() / cached.median(),
        "≤ 1.2×",
    );
    Ok(())
}
