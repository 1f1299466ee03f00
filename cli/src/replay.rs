//! `kinformer replay`: runs a plugin offline on a recording (see
//! [`crate::recording`]): no cluster, the plugin's grant, limits and config
//! from the manifest beside it, and a cache that answers from the recorded
//! state as of each delta.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context as _;
use kinformer::caches::Caches;
use kinformer::delta::{Delta, DeltaType};
use kinformer::indexer::{IndexLease, IndexerWriter, indexer};
use kinformer::manifest::Manifest;
use kinformer::plugin::{Error, LogLine, PluginEngine, PluginOptions};
use kinformer_selector::Selector;
use kube::api::GroupVersionKind;

use crate::recording::Recorded;

/// How a replay ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Deltas handed to the plugin.
    pub delivered: u64,
    /// Deltas for which `handle` returned an error.
    pub errors: u64,
    /// The trap that stopped the replay, if the plugin trapped.
    pub trap: Option<String>,
}

impl Outcome {
    /// The process's exit code: 0 when every delta was handled, 2 when
    /// `handle` returned errors, 3 when the plugin trapped.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match (&self.trap, self.errors) {
            (Some(_), _) => 3,
            (None, 0) => 0,
            (None, _) => 2,
        }
    }
}

/// The recorded resources' caches: one indexer per resource, written as the
/// replay advances.
struct RecordedCaches {
    caches: Caches,
    writers: Vec<(GroupVersionKind, IndexerWriter)>,
}

impl RecordedCaches {
    fn writer(&mut self, gvk: &GroupVersionKind) -> &IndexerWriter {
        if let Some(position) = self.writers.iter().position(|(known, _)| known == gvk) {
            return &self.writers[position].1;
        }
        let (reader, writer) = indexer();
        self.caches.insert(gvk.clone(), reader);
        self.writers.push((gvk.clone(), writer));
        &self.writers.last().expect("just pushed").1
    }
}

/// Replays `recording` into the plugin file `plugin` (with `config`, or its
/// manifest's), one delta per `handle` call, writing each of its log lines to
/// `out` as `LEVEL message`. A `handle` error is reported and the replay goes
/// on; a trap ends it.
///
/// # Errors
///
/// When the manifest is broken, the file is not a plugin component of the
/// `plugin` world, `init` fails, or writing to `out` fails.
pub fn replay(
    plugin: &Path,
    recording: &[Recorded],
    config: Option<&str>,
    engine: &PluginEngine,
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    let manifest = Manifest::for_plugin(plugin)?;
    let config = config.unwrap_or(&manifest.config);
    let bytes = kinformer::file::read_regular(plugin, manifest.limits.module_bytes)
        .with_context(|| format!("{}: cannot read the plugin file (limits.module-mib)", plugin.display()))?;
    let component = engine.load_file_bytes(plugin, &bytes)?;
    anyhow::ensure!(
        !component.is_controller(),
        "{}: a controller reconciles keys; replay runs plugins that handle deltas",
        plugin.display()
    );
    let lines: Arc<Mutex<Vec<LogLine>>> = Arc::default();
    let sink = Arc::clone(&lines);
    // A replay runs faster than the deltas came: its lines are not rate-limited.
    let mut limits = manifest.limits;
    limits.log_lines_per_second = u32::MAX;
    let options = PluginOptions::with_limits(limits)
        .grant(manifest.grant.clone())
        .log_sink(Arc::new(move |_plugin: &str, line: &LogLine| {
            sink.lock().unwrap_or_else(PoisonError::into_inner).push(line.clone());
        }));
    let mut caches = RecordedCaches {
        caches: Caches::new(),
        writers: Vec::new(),
    };
    let mut instance = component.instantiate(caches.caches.clone(), options)?;
    let print = |out: &mut dyn Write| -> std::io::Result<()> {
        for line in lines.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            writeln!(out, "{:>5} {}", line.level, line.message)?;
        }
        Ok(())
    };
    let registration = instance.init(config);
    print(&mut *out)?;
    let registration = registration.with_context(|| format!("{} refused to start", plugin.display()))?;
    let review = manifest.grant.review(&registration);
    for refusal in &review.refused {
        tracing::warn!(plugin = %plugin.display(), "refused: {refusal}");
    }

    // What the plugin is handed: its granted subscriptions, as the runtime's
    // informers and listeners would select them.
    let mut delivered: Vec<(GroupVersionKind, Option<String>, Selector)> = Vec::new();
    let mut _indexes: Vec<IndexLease> = Vec::new();
    for subscription in &review.subscriptions {
        let reader = caches.writer(&subscription.gvk).reader();
        if subscription.deliver {
            let selector = Selector::parse(subscription.label_selector.as_deref().unwrap_or(""))?;
            delivered.push((subscription.gvk.clone(), subscription.namespace.clone(), selector));
        }
        let mut aliases = std::collections::HashMap::new();
        for index in review.indexes.iter().filter(|index| index.gvk == subscription.gvk) {
            let lease = reader.lease_index(&index.field_path)?;
            aliases.insert(index.name.clone(), lease.name().to_owned());
            _indexes.push(lease);
        }
        caches.caches.insert(subscription.gvk.clone(), reader.aliased(aliases));
    }
    let scope = manifest.grant.namespaces();

    let mut outcome = Outcome::default();
    for recorded in recording {
        let writer = caches.writer(&recorded.gvk);
        let object = Arc::clone(&recorded.object);
        let delta = match recorded.delta_type {
            DeltaType::Deleted => {
                writer.delete(object.key());
                Delta::new(DeltaType::Deleted, Arc::clone(&recorded.gvk), object)
            }
            DeltaType::Updated => match writer.apply(Arc::clone(&object)) {
                Some(old) => Delta::updated(Arc::clone(&recorded.gvk), old, object),
                None => Delta::new(DeltaType::Added, Arc::clone(&recorded.gvk), object),
            },
            delta_type => {
                writer.apply(Arc::clone(&object));
                Delta::new(delta_type, Arc::clone(&recorded.gvk), object)
            }
        };
        let delta = if recorded.initial {
            delta.in_initial_list()
        } else {
            delta
        };
        let wanted = delivered.iter().any(|(gvk, namespace, selector)| {
            *gvk == *delta.gvk
                && namespace
                    .as_deref()
                    .is_none_or(|namespace| delta.object.namespace() == Some(namespace))
                && selector.matches(&delta.object.labels())
        });
        if !wanted || !scope.contains(&delta.object) {
            continue;
        }
        outcome.delivered += 1;
        let handled = instance.handle(std::slice::from_ref(&delta));
        print(&mut *out)?;
        match handled {
            Ok(()) => {}
            Err(Error::Plugin { message, .. }) => {
                outcome.errors += 1;
                writeln!(
                    out,
                    "ERROR handle returned an error on {} {}: {message}",
                    delta.delta_type,
                    delta.key()
                )?;
            }
            Err(error) => {
                let trap = kinformer::one_line(&error);
                writeln!(out, "ERROR trapped on {} {}: {trap}", delta.delta_type, delta.key())?;
                outcome.trap = Some(trap);
                break;
            }
        }
    }
    out.flush()?;
    Ok(outcome)
}
