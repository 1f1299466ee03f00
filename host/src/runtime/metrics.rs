//! The runtime's Prometheus metrics, read at scrape time from the counters the
//! runtime keeps anyway (each plugin's status, each informer's reflector, each
//! controller's workqueue, the leader election): nothing is counted twice.
//!
//! Names follow client-go where it has them (`workqueue_*` with the label
//! `name`, `leader_election_master_status`); the rest are `kinformer_*`.

use std::fmt::Write as _;
use std::sync::Weak;
use std::time::UNIX_EPOCH;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::status::{PluginState, PluginStatus};
use super::supervisor::Supervisor;
use crate::informer::InformerStats;
use crate::leader::LeaderStatus;
use crate::workqueue::{BUCKET_BOUNDS, DurationHistogram};

/// The labels of one series.
type Labels = Vec<(&'static str, String)>;

/// What a scrape reads: taken once, then encoded.
#[derive(Debug)]
struct Scrape {
    plugins: Vec<PluginStatus>,
    informers: Vec<InformerStats>,
    leader: Option<LeaderStatus>,
}

/// Reads the runtime's counters on each scrape.
#[derive(Debug)]
struct RuntimeCollector {
    supervisor: Weak<Supervisor>,
}

impl Collector for RuntimeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let Some(supervisor) = self.supervisor.upgrade() else {
            return Ok(());
        };
        let scrape = Scrape {
            plugins: supervisor.status(),
            informers: supervisor.factory.stats(),
            leader: supervisor.election.clone().map(|leadership| leadership.status()),
        };
        drop(supervisor);
        scrape.encode(&mut encoder)
    }
}

/// The registry `/metrics` encodes: the runtime's collector.
pub(super) fn registry(supervisor: Weak<Supervisor>) -> Registry {
    let mut registry = Registry::default();
    register(&mut registry, supervisor);
    registry
}

/// Adds the runtime's collector to `registry`.
pub(super) fn register(registry: &mut Registry, supervisor: Weak<Supervisor>) {
    registry.register_collector(Box::new(RuntimeCollector { supervisor }));
}

/// The metrics in Prometheus' text format.
pub(super) fn render(registry: &Registry) -> String {
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, registry).is_err() {
        text.clear();
        let _ = writeln!(text, "# the metrics could not be encoded");
    }
    text
}

/// One metric family: its name, help and type, then its series.
struct Family<'a, 'e> {
    encoder: &'a mut DescriptorEncoder<'e>,
}

impl Family<'_, '_> {
    fn counter(&mut self, name: &str, help: &str, series: impl IntoIterator<Item = (Labels, u64)>) -> std::fmt::Result {
        let mut metric = self.encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (labels, value) in series {
            ConstCounter::new(value).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn gauge(&mut self, name: &str, help: &str, series: impl IntoIterator<Item = (Labels, f64)>) -> std::fmt::Result {
        let mut metric = self.encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, value) in series {
            ConstGauge::new(value).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (Labels, DurationHistogram)>,
    ) -> std::fmt::Result {
        let mut metric = self
            .encoder
            .encode_descriptor(name, help, None, MetricType::Histogram)?;
        for (labels, histogram) in series {
            // Prometheus' buckets are cumulative and end with +Inf; the
            // histogram's are cumulative up to its last bound.
            let mut buckets: Vec<(f64, u64)> = BUCKET_BOUNDS
                .iter()
                .zip(histogram.buckets)
                .map(|(bound, count)| (bound.as_secs_f64(), count))
                .collect();
            buckets.push((f64::INFINITY, histogram.count));
            metric.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                histogram.sum.as_secs_f64(),
                histogram.count,
                &buckets,
                None,
            )?;
        }
        Ok(())
    }
}

fn plugin(status: &PluginStatus) -> Labels {
    vec![("plugin", status.name.clone())]
}

fn informer(stats: &InformerStats) -> Labels {
    let gvk = &stats.key.gvk;
    let api_version = if gvk.group.is_empty() {
        gvk.version.clone()
    } else {
        format!("{}/{}", gvk.group, gvk.version)
    };
    vec![
        ("api_version", api_version),
        ("kind", gvk.kind.clone()),
        (
            "namespace",
            if stats.key.namespace.is_none() && stats.key.namespaces.is_empty() {
                String::new()
            } else {
                stats.key.namespace_label()
            },
        ),
        ("label_selector", stats.key.label_selector.clone().unwrap_or_default()),
    ]
}

const STATES: [PluginState; 7] = [
    PluginState::Starting,
    PluginState::Running,
    PluginState::Restarting,
    PluginState::Quarantined,
    PluginState::Failed,
    PluginState::Stopped,
    PluginState::Standby,
];

impl Scrape {
    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let mut family = Family { encoder };
        let plugins = &self.plugins;
        let per_plugin = |value: fn(&PluginStatus) -> u64| plugins.iter().map(move |p| (plugin(p), value(p)));

        // Informers.
        let informers = &self.informers;
        let per_informer = |value: fn(&InformerStats) -> u64| informers.iter().map(move |i| (informer(i), value(i)));
        family.gauge(
            "kinformer_informer_objects",
            "Objects in the informer's cache.",
            informers.iter().map(|i| (informer(i), i.objects as f64)),
        )?;
        family.gauge(
            "kinformer_informer_synced",
            "1 once the informer's first list is in its cache.",
            informers.iter().map(|i| (informer(i), f64::from(u8::from(i.synced)))),
        )?;
        family.counter(
            "kinformer_informer_lists",
            "Lists completed: the first and every relist.",
            per_informer(|i| i.lists),
        )?;
        family.counter(
            "kinformer_informer_watch_restarts",
            "Watches that failed and were started again (after a backoff, by a re-watch or relist).",
            per_informer(|i| i.watch_errors),
        )?;
        family.counter(
            "kinformer_informer_watch_gone",
            "Watches that ended with 410 Gone and were followed by a relist.",
            per_informer(|i| i.gone),
        )?;
        family.gauge(
            "kinformer_informer_last_sync_timestamp_seconds",
            "When the informer's last list completed, in seconds since the Unix epoch.",
            informers.iter().filter_map(|i| {
                let since = i.last_sync?.duration_since(UNIX_EPOCH).ok()?;
                Some((informer(i), since.as_secs_f64()))
            }),
        )?;

        // Plugins.
        family.gauge(
            "kinformer_plugin_state",
            "1 for the plugin's state, 0 for the others.",
            plugins.iter().flat_map(|p| {
                STATES.iter().map(move |state| {
                    let mut labels = plugin(p);
                    labels.push(("state", state.as_str().to_owned()));
                    (labels, f64::from(u8::from(p.state == *state)))
                })
            }),
        )?;
        family.gauge(
            "kinformer_plugin_quarantined",
            "1 while the plugin is quarantined after failing too often.",
            plugins
                .iter()
                .map(|p| (plugin(p), f64::from(u8::from(p.state == PluginState::Quarantined)))),
        )?;
        family.counter("kinformer_plugin_deltas", "Deltas handled.", per_plugin(|p| p.deltas))?;
        family.counter(
            "kinformer_plugin_outside_grant_deltas",
            "Deltas of subscribed resources not delivered: outside the plugin's granted namespaces.",
            per_plugin(|p| p.outside_grant),
        )?;
        family.counter(
            "kinformer_plugin_batches",
            "Successful handle calls.",
            per_plugin(|p| p.batches),
        )?;
        family.counter(
            "kinformer_plugin_errors",
            "Handle or reconcile calls that returned an error.",
            per_plugin(|p| p.errors),
        )?;
        family.counter(
            "kinformer_plugin_retries",
            "Batches delivered again after an error.",
            per_plugin(|p| p.retries),
        )?;
        family.counter(
            "kinformer_plugin_skipped_deltas",
            "Deltas skipped after errors.",
            per_plugin(|p| p.skipped),
        )?;
        family.counter(
            "kinformer_plugin_traps",
            "Traps, deadline overruns and memory-limit hits.",
            per_plugin(|p| p.traps),
        )?;
        family.counter(
            "kinformer_plugin_cpu_paused_milliseconds",
            "Time the plugin was paused for its CPU share (limits.cpu-millicores).",
            per_plugin(|p| p.cpu_paused_ms),
        )?;
        family.counter(
            "kinformer_plugin_restarts",
            "Fresh instances started after a failure.",
            per_plugin(|p| p.restarts),
        )?;
        family.counter(
            "kinformer_plugin_reloads",
            "Next versions swapped in.",
            per_plugin(|p| p.reloads),
        )?;
        family.counter(
            "kinformer_plugin_rollbacks",
            "Versions swapped in and replaced by the previous one after failing.",
            per_plugin(|p| p.rollbacks),
        )?;
        family.counter(
            "kinformer_plugin_reconciles",
            "Keys a controller reconciled.",
            per_plugin(|p| p.reconciles),
        )?;
        family.counter(
            "kinformer_plugin_catch_ups",
            "Times a queue of the plugin overflowed and caught up from the cache.",
            per_plugin(|p| p.catch_ups),
        )?;
        family.gauge(
            "kinformer_plugin_memory_bytes",
            "Bytes of memory the plugin's instance holds as its memory limit counts them (linear memories, tables, host-side resources), as of its last call.",
            plugins.iter().map(|p| (plugin(p), p.memory_bytes as f64)),
        )?;
        family.gauge(
            "kinformer_plugin_queued_deltas",
            "Deltas waiting in the plugin's queues.",
            plugins.iter().map(|p| (plugin(p), p.queued as f64)),
        )?;
        family.histogram(
            "kinformer_plugin_handle_duration_seconds",
            "How long the plugin's handle calls took.",
            plugins.iter().map(|p| (plugin(p), p.handle_duration)),
        )?;
        family.counter(
            "kinformer_plugin_writes",
            "Writes the plugin asked for, by verb and outcome (ok, throttled, denied, conflict, ...).",
            plugins.iter().flat_map(|p| {
                p.writes_by.iter().map(|((verb, outcome), count)| {
                    let mut labels = plugin(p);
                    labels.push(("verb", (*verb).to_owned()));
                    labels.push(("outcome", (*outcome).to_owned()));
                    (labels, *count)
                })
            }),
        )?;

        family.counter(
            "kinformer_plugin_http_requests",
            "Outbound HTTP requests the plugin made, by scheme://host:port and outcome (ok, denied, throttled, timeout, too-large, error).",
            plugins.iter().flat_map(|p| {
                p.http_by.iter().map(|((origin, outcome), count)| {
                    let mut labels = plugin(p);
                    labels.push(("host", origin.clone()));
                    labels.push(("outcome", (*outcome).to_owned()));
                    (labels, *count)
                })
            }),
        )?;

        // Next versions beside running ones.
        let rollouts: Vec<(&PluginStatus, &crate::rollout::RolloutReport)> =
            plugins.iter().filter_map(|p| Some((p, p.rollout.as_ref()?))).collect();
        family.counter(
            "kinformer_rollout_compared",
            "Calls a shadow made too, by how its writes compared with the running version's (same, differs, only-live, only-shadow) or skipped when the shadow was behind.",
            rollouts.iter().flat_map(|(p, report)| {
                let outcomes = ["same", "differs", "only-live", "only-shadow"]
                    .map(|outcome| (outcome, report.compared.get(outcome).copied().unwrap_or(0)));
                outcomes
                    .into_iter()
                    .chain([("skipped", report.skipped)])
                    .map(move |(outcome, count)| {
                        let mut labels = plugin(p);
                        labels.push(("outcome", outcome.to_owned()));
                        (labels, count)
                    })
            }),
        )?;
        family.counter(
            "kinformer_rollout_calls",
            "Calls in a rollout, by version (live, next) and outcome (ok, error, trap).",
            rollouts.iter().flat_map(|(p, report)| {
                [("live", report.running), ("next", report.next)]
                    .into_iter()
                    .flat_map(move |(version, counts)| {
                        let ok = counts.calls.saturating_sub(counts.errors + counts.traps);
                        [("ok", ok), ("error", counts.errors), ("trap", counts.traps)].map(|(outcome, count)| {
                            let mut labels = plugin(p);
                            labels.push(("version", version.to_owned()));
                            labels.push(("outcome", outcome.to_owned()));
                            (labels, count)
                        })
                    })
            }),
        )?;
        family.gauge(
            "kinformer_rollout_rolled_back",
            "1 once the next version was rolled back for doing worse than the running one.",
            rollouts
                .iter()
                .map(|(p, report)| (plugin(p), f64::from(u8::from(report.rolled_back.is_some())))),
        )?;

        // Controllers' workqueues, as client-go names them.
        let queues: Vec<(Labels, crate::workqueue::WorkQueueStats)> = plugins
            .iter()
            .filter_map(|p| Some((vec![("name", p.name.clone())], p.workqueue?)))
            .collect();
        family.gauge(
            "workqueue_depth",
            "Current depth of the workqueue.",
            queues.iter().map(|(labels, q)| (labels.clone(), q.depth as f64)),
        )?;
        family.counter(
            "workqueue_adds",
            "Adds handled by the workqueue.",
            queues.iter().map(|(labels, q)| (labels.clone(), q.adds)),
        )?;
        family.counter(
            "workqueue_retries",
            "Retries handled by the workqueue.",
            queues.iter().map(|(labels, q)| (labels.clone(), q.retries)),
        )?;
        family.histogram(
            "workqueue_queue_duration_seconds",
            "How long an item stays in the workqueue before being requested.",
            queues.iter().map(|(labels, q)| (labels.clone(), q.queue_latency)),
        )?;
        family.histogram(
            "workqueue_work_duration_seconds",
            "How long processing an item from the workqueue takes.",
            queues.iter().map(|(labels, q)| (labels.clone(), q.work_duration)),
        )?;
        family.gauge(
            "workqueue_unfinished_work_seconds",
            "Seconds of work in progress not yet observed by work_duration.",
            queues
                .iter()
                .map(|(labels, q)| (labels.clone(), q.unfinished_work.as_secs_f64())),
        )?;
        family.gauge(
            "workqueue_longest_running_processor_seconds",
            "How long the longest running processor of the workqueue has been running.",
            queues
                .iter()
                .map(|(labels, q)| (labels.clone(), q.longest_running_processor.as_secs_f64())),
        )?;

        // Leader election, as client-go reports it.
        family.gauge(
            "leader_election_master_status",
            "1 while this replica leads on the Lease `name`, 0 otherwise.",
            self.leader.iter().flat_map(|leader| {
                let single = (leader.mode == crate::leader::LeaseMode::Single).then(|| {
                    (
                        vec![("name", leader.lease.clone())],
                        f64::from(u8::from(leader.leading)),
                    )
                });
                // Per plugin: one Lease each.
                let (namespace, prefix) = leader.lease.split_once('/').unwrap_or(("", &leader.lease));
                let plugins = leader.plugins.keys().map(move |plugin| {
                    let lease = crate::leader::plugin_lease_name(prefix, plugin);
                    (
                        vec![("name", format!("{namespace}/{lease}"))],
                        f64::from(u8::from(leader.leads.contains(plugin))),
                    )
                });
                single.into_iter().chain(plugins)
            }),
        )?;
        Ok(())
    }
}
