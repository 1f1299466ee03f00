//! The host at a glance: one row per plugin (state, version, rates, errors,
//! CPU share, rollout, Lease) and one per informer, as the status page
//! (`GET /`) and `kinformer status` show it, and as `GET /overview` serves it
//! in JSON.
//!
//! Built from what the runtime keeps anyway ([`PluginStatus`],
//! [`InformerStats`], [`LeaderStatus`]) by a pure function with the time
//! passed in. Rates (deltas per second, CPU in calls) come from `Rates`:
//! samples of the counters taken when an overview is asked for, at most one a
//! second, so a page refreshed by many viewers costs no more than one.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::status::PluginStatus;
use super::supervisor::Supervisor;
use crate::informer::InformerStats;
use crate::leader::LeaderStatus;
use kinformer_informers::Recover as _;

/// Rates are taken over about this long: the newest sample at least this
/// old is the baseline.
const RATE_WINDOW: Duration = Duration::from_secs(10);
/// Samples closer together than this are not kept, and a baseline must be at
/// least this old.
const MIN_SPAN: Duration = Duration::from_secs(1);
/// A sample older than this says nothing about now: without a newer one, no
/// rate is shown.
const MAX_AGE: Duration = Duration::from_secs(120);
/// The last error as the page shows it: at most this many bytes.
const ERROR_LEN: usize = 512;

/// The host at a glance. May be a moment stale: each part is read on its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Overview {
    /// When it was taken, in seconds since the Unix epoch.
    pub taken_unix_s: u64,
    /// How many seconds the rates span; `None` until a second overview is
    /// asked for at least a second after the first.
    pub rate_span_s: Option<f64>,
    /// This replica in leader election; `None` without leader election.
    pub replica: Option<Replica>,
    /// Every plugin, by name.
    pub plugins: Vec<PluginRow>,
    /// Every informer the plugins share.
    pub informers: Vec<InformerRow>,
}

/// This replica's part in leader election.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Replica {
    /// Its identity in the Leases.
    pub identity: String,
    /// `single` (one Lease for every writer) or `per-plugin`.
    pub mode: String,
    /// The Leases it holds, as `namespace/name`.
    pub leases: Vec<String>,
    /// Per plugin: the replicas seen alive, this one included.
    pub replicas: usize,
    /// Per plugin: how many writing plugins it leads at most.
    pub share: usize,
}

/// One plugin at a glance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[non_exhaustive]
pub struct PluginRow {
    /// Its name (the file stem).
    pub name: String,
    /// `Running`, `Starting`, `Standby`, `Failed`, ...
    pub state: String,
    /// The version the running plugin registered.
    pub version: Option<String>,
    /// The running version's digest, its first 12 hex digits.
    pub digest: Option<String>,
    /// Deltas handled.
    pub deltas: u64,
    /// Deltas handled per second, lately.
    pub deltas_per_second: Option<f64>,
    /// Keys a controller reconciled.
    pub reconciles: u64,
    /// Calls that returned an error.
    pub errors: u64,
    /// Traps, deadline overruns and memory-limit hits.
    pub traps: u64,
    /// Fresh instances started after a failure.
    pub restarts: u64,
    /// Deltas waiting in its queues.
    pub queued: usize,
    /// The last error of a running version, or why it could not be loaded;
    /// sanitised (no control or bidirectional characters) and capped. Not
    /// escaped for HTML: the page does that.
    pub last_error: Option<String>,
    /// Its CPU share, in thousandths of a core (`limits.cpu-millicores`; 0
    /// until a version runs).
    pub cpu_millicores: u32,
    /// Thousandths of a core it spent in calls, lately.
    pub cpu_used_millicores: Option<f64>,
    /// Milliseconds it was paused for its CPU share, in all.
    pub cpu_paused_ms: u64,
    /// Its next version's rollout, if one runs beside it.
    pub rollout: Option<RolloutRow>,
    /// Its Lease, when it writes and the replicas elect per plugin.
    pub lease: Option<LeaseRow>,
}

/// How a next version compares with the running one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RolloutRow {
    /// `shadow` or `canary`.
    pub mode: String,
    /// A canary's share of the keys, in percent.
    pub percent: u8,
    /// The next version's digest.
    pub next_digest: String,
    /// Calls whose writes were compared, by outcome (`same`, `differs`,
    /// `only-live`, `only-shadow`).
    pub compared: BTreeMap<String, u64>,
    /// Errors and traps of the running version (`liveFailures` on the
    /// wire, as the overview has always said).
    #[serde(rename = "liveFailures")]
    pub running_failures: u64,
    /// Errors and traps of the next version.
    pub next_failures: u64,
    /// The newest difference, `key: outcome target: diff`.
    pub last_difference: Option<String>,
    /// Why the next version was rolled back, if it was.
    pub rolled_back: Option<String>,
}

/// A plugin's Lease.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LeaseRow {
    /// `namespace/name`.
    pub name: String,
    /// Its holder as last seen; `None`: free.
    pub holder: Option<String>,
    /// This replica holds it.
    pub held_here: bool,
}

/// One informer at a glance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct InformerRow {
    /// `apiVersion/Kind`, e.g. `apps/v1/Deployment`.
    pub resource: String,
    /// The namespaces it lists, `(all)` for every one.
    pub namespace: String,
    /// Its label and field selectors, if any.
    pub selector: Option<String>,
    /// Objects in its cache.
    pub objects: usize,
    /// Its first list is in the cache.
    pub synced: bool,
    /// Lists completed: the first and every relist.
    pub lists: u64,
    /// Watches that failed and were started again.
    pub watch_restarts: u64,
    /// Of those, how many ended with 410 Gone.
    pub gone: u64,
    /// When its last list completed, in seconds since the Unix epoch.
    pub last_list_unix_s: Option<u64>,
}

/// The counters rates are taken from, per plugin.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Counters {
    deltas: u64,
    busy: Duration,
}

#[derive(Debug)]
struct Sample {
    at: Instant,
    counters: BTreeMap<String, Counters>,
}

/// Recent samples of each plugin's counters, for its rates. Owned by the
/// status address; each overview adds at most one sample a second.
#[derive(Debug, Default)]
pub(super) struct Rates {
    samples: VecDeque<Sample>,
}

/// A plugin's rates: deltas per second, and thousandths of a core in calls.
type PluginRates = BTreeMap<String, (f64, f64)>;

impl Rates {
    /// Samples `plugins` at `now`; returns their rates since the baseline
    /// sample, and the seconds those span (none without a baseline).
    fn observe(&mut self, now: Instant, plugins: &[PluginStatus]) -> (PluginRates, Option<f64>) {
        let counters: BTreeMap<String, Counters> = plugins
            .iter()
            .map(|plugin| {
                let counters = Counters {
                    deltas: plugin.deltas,
                    busy: plugin.handle_duration.sum,
                };
                (plugin.name.clone(), counters)
            })
            .collect();
        let age = |sample: &Sample| now.saturating_duration_since(sample.at);
        self.samples.retain(|sample| age(sample) <= MAX_AGE);
        let baseline = self
            .samples
            .iter()
            .rev()
            .find(|sample| age(sample) >= RATE_WINDOW)
            .or_else(|| self.samples.iter().find(|sample| age(sample) >= MIN_SPAN));
        let (rates, span) = match baseline {
            None => (PluginRates::new(), None),
            Some(baseline) => {
                let span = age(baseline).as_secs_f64();
                let rates = counters
                    .iter()
                    .filter_map(|(name, now)| {
                        let then = baseline.counters.get(name)?;
                        // A version swapped in counts on from where the one
                        // before stopped; a plugin unloaded and loaded again
                        // starts over: no rate across that.
                        let deltas = now.deltas.checked_sub(then.deltas)?;
                        let busy = now.busy.checked_sub(then.busy)?;
                        Some((name.clone(), (deltas as f64 / span, busy.as_secs_f64() * 1000.0 / span)))
                    })
                    .collect();
                (rates, Some(span))
            }
        };
        if self.samples.back().is_none_or(|last| age(last) >= MIN_SPAN) {
            self.samples.push_back(Sample { at: now, counters });
        }
        // Samples older than the newest one past the window are no baseline
        // any more.
        while self.samples.len() > 1 && self.samples.get(1).is_some_and(|next| age(next) >= RATE_WINDOW) {
            self.samples.pop_front();
        }
        (rates, span)
    }
}

/// Takes the runtime's overview now; an empty one once the runtime is gone.
pub(super) type Source = Arc<dyn Fn() -> Overview + Send + Sync>;

/// The overview of the runtime `supervisor` runs, with rates from the
/// overviews taken before by the same source.
pub(super) fn source(supervisor: Weak<Supervisor>) -> Source {
    let rates = Mutex::new(Rates::default());
    Arc::new(move || {
        let Some(supervisor) = supervisor.upgrade() else {
            return Overview::default();
        };
        let plugins = supervisor.status();
        let informers = supervisor.factory.stats();
        let leader = supervisor.election.as_ref().map(crate::leader::Leadership::status);
        drop(supervisor);
        let mut rates = rates.lock().recover();
        overview(
            &plugins,
            &informers,
            leader.as_ref(),
            &mut rates,
            Instant::now(),
            SystemTime::now(),
        )
    })
}

/// The overview of `plugins`, `informers` and `leader` at `now` (also the
/// time rates are sampled at) and `wall` (the clock the page shows).
pub(super) fn overview(
    plugins: &[PluginStatus],
    informers: &[InformerStats],
    leader: Option<&LeaderStatus>,
    rates: &mut Rates,
    now: Instant,
    wall: SystemTime,
) -> Overview {
    let (plugin_rates, rate_span_s) = rates.observe(now, plugins);
    let mut rows: Vec<PluginRow> = plugins
        .iter()
        .map(|plugin| {
            let rate = plugin_rates.get(&plugin.name);
            PluginRow {
                name: plugin.name.clone(),
                state: plugin.state.as_str().to_owned(),
                version: plugin
                    .registration
                    .as_ref()
                    .map(|registration| registration.version.clone()),
                digest: plugin
                    .running_digest
                    .as_deref()
                    .map(|digest| digest[..12.min(digest.len())].to_owned()),
                deltas: plugin.deltas,
                deltas_per_second: rate.map(|(deltas, _)| *deltas),
                reconciles: plugin.reconciles,
                errors: plugin.errors,
                traps: plugin.traps,
                restarts: plugin.restarts,
                queued: plugin.queued,
                last_error: plugin
                    .last_error
                    .as_deref()
                    .or(plugin.load_error.as_deref())
                    .map(|error| crate::text::sanitize(error, ERROR_LEN)),
                cpu_millicores: plugin.cpu_millicores,
                cpu_used_millicores: rate.map(|(_, busy)| *busy),
                cpu_paused_ms: plugin.cpu_paused_ms,
                rollout: plugin.rollout.as_ref().map(rollout_row),
                lease: leader.and_then(|leader| lease_row(leader, &plugin.name)),
            }
        })
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    let mut informers: Vec<InformerRow> = informers.iter().map(informer_row).collect();
    informers.sort_by(|a, b| (&a.resource, &a.namespace).cmp(&(&b.resource, &b.namespace)));
    Overview {
        taken_unix_s: unix_seconds(wall),
        rate_span_s,
        replica: leader.map(replica),
        plugins: rows,
        informers,
    }
}

/// A span of time as the overview writes it: `42s`, `3m05s`, `1h02m`, `3d04h`.
#[must_use]
pub fn duration_text(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        3600..86_400 => format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60),
        _ => format!("{}d{:02}h", seconds / 86_400, seconds % 86_400 / 3600),
    }
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

fn rollout_row(report: &crate::rollout::RolloutReport) -> RolloutRow {
    let mode = match report.mode {
        crate::rollout::RolloutMode::Shadow => "shadow",
        crate::rollout::RolloutMode::Canary => "canary",
    };
    RolloutRow {
        mode: mode.to_owned(),
        percent: report.percent,
        next_digest: report.next_digest.clone(),
        compared: report
            .compared
            .iter()
            .map(|(outcome, count)| ((*outcome).to_owned(), *count))
            .collect(),
        running_failures: report.running.errors + report.running.traps,
        next_failures: report.next.errors + report.next.traps,
        last_difference: report.differences.back().and_then(|last| {
            let first = last.differences.first()?;
            let text = match &first.diff {
                Some(diff) => format!("{}: {first}: {diff}", last.key),
                None => format!("{}: {first}", last.key),
            };
            Some(crate::text::sanitize(&text, ERROR_LEN))
        }),
        rolled_back: report.rolled_back.clone(),
    }
}

/// The Lease of `plugin` (or of the plugin it is the next version of), when
/// the replicas elect per plugin and it writes.
fn lease_row(leader: &LeaderStatus, plugin: &str) -> Option<LeaseRow> {
    if leader.mode == crate::leader::LeaseMode::Single {
        return None;
    }
    let group = crate::rollout::lease_group(plugin);
    let holder = leader.plugins.get(group)?;
    let (namespace, prefix) = leader.lease.split_once('/').unwrap_or(("", &leader.lease));
    Some(LeaseRow {
        name: format!("{namespace}/{}", crate::leader::plugin_lease_name(prefix, group)),
        holder: holder.clone(),
        held_here: leader.leads.contains(group),
    })
}

fn replica(leader: &LeaderStatus) -> Replica {
    let leases = if leader.mode == crate::leader::LeaseMode::Single {
        if leader.leading {
            vec![leader.lease.clone()]
        } else {
            Vec::new()
        }
    } else {
        let (namespace, prefix) = leader.lease.split_once('/').unwrap_or(("", &leader.lease));
        leader
            .leads
            .iter()
            .map(|plugin| format!("{namespace}/{}", crate::leader::plugin_lease_name(prefix, plugin)))
            .collect()
    };
    Replica {
        identity: leader.identity.clone(),
        mode: leader.mode.as_str().to_owned(),
        leases,
        replicas: leader.replicas,
        share: leader.share,
    }
}

fn informer_row(stats: &InformerStats) -> InformerRow {
    let key = &stats.key;
    let gvk = &key.gvk;
    let resource = if gvk.group.is_empty() {
        format!("{}/{}", gvk.version, gvk.kind)
    } else {
        format!("{}/{}/{}", gvk.group, gvk.version, gvk.kind)
    };
    let selector = [key.label_selector.as_deref(), key.field_selector.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    InformerRow {
        resource,
        namespace: key.namespace_label(),
        selector: (!selector.is_empty()).then_some(selector),
        objects: stats.objects,
        synced: stats.synced,
        lists: stats.lists,
        watch_restarts: stats.watch_errors,
        gone: stats.gone,
        last_list_unix_s: stats.last_sync.map(unix_seconds),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::runtime::PluginState;

    fn plugin(name: &str, deltas: u64, busy_ms: u64) -> PluginStatus {
        let mut status = PluginStatus::new(Path::new(&format!("/plugins/{name}.wasm")));
        status.deltas = deltas;
        status.handle_duration.sum = Duration::from_millis(busy_ms);
        status
    }

    #[test]
    fn rates_need_a_sample_a_second_old_then_span_about_the_window() {
        let mut rates = Rates::default();
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(rates.observe(at(0), &[plugin("a", 0, 0)]), (PluginRates::new(), None));
        // Half a second later: no baseline yet, and no second sample kept.
        assert_eq!(rates.observe(at(500), &[plugin("a", 50, 0)]).1, None);
        assert_eq!(rates.samples.len(), 1);
        // Two seconds in: 200 deltas over 2 s, 500 ms of calls over 2 s.
        let (rate, span) = rates.observe(at(2000), &[plugin("a", 200, 500)]);
        assert_eq!(span, Some(2.0));
        assert_eq!(rate["a"], (100.0, 250.0));
        // Asked every 100 ms for a minute: at most one sample a second, and
        // the rate spans the window, not the minute.
        let mut last = None;
        for step in 21..620 {
            last = Some(rates.observe(at(step * 100), &[plugin("a", step * 10, 0)]));
        }
        assert!(rates.samples.len() <= 12, "{} samples kept", rates.samples.len());
        let (rate, span) = last.unwrap();
        let span = span.unwrap();
        assert!((10.0..12.0).contains(&span), "rates over {span} s");
        assert!((rate["a"].0 - 100.0).abs() < 1e-6, "{rate:?}");
    }

    #[test]
    fn an_old_baseline_gives_no_rate_and_a_plugin_that_started_over_has_none() {
        let mut rates = Rates::default();
        let start = Instant::now();
        rates.observe(start, &[plugin("a", 10, 0)]);
        let later = start + MAX_AGE + Duration::from_secs(1);
        assert_eq!(rates.observe(later, &[plugin("a", 99, 0)]).1, None);
        let (rate, span) = rates.observe(later + MIN_SPAN, &[plugin("a", 5, 0), plugin("b", 3, 0)]);
        assert_eq!(span, Some(1.0));
        assert!(rate.is_empty(), "{rate:?}");
    }

    #[test]
    fn rows_carry_state_version_error_and_the_plugins_lease() {
        let mut writer = plugin("scaler", 7, 0);
        writer.state = PluginState::Running;
        writer.running_digest = Some("0123456789abcdef".into());
        writer.last_error = Some("bad\u{202e}thing".into());
        writer.cpu_millicores = 250;
        let mut next = plugin("scaler.next", 0, 0);
        next.state = PluginState::Failed;
        next.load_error = Some("scaler.next.toml: broken".into());
        let mut leader = LeaderStatus::single("pod-a".into(), "kinformer/kinformer".into(), true);
        leader.mode = crate::leader::LeaseMode::PerPlugin;
        leader.leads = ["scaler".to_owned()].into();
        leader.plugins = [("scaler".to_owned(), Some("pod-a".to_owned()))].into();
        leader.replicas = 2;
        leader.share = 1;
        let mut informer = InformerStats::new(
            crate::informer::InformerKey::new(kube::api::GroupVersionKind::gvk("apps", "v1", "Deployment"))
                .label_selector("app=web"),
        );
        informer.objects = 3;
        informer.synced = true;
        informer.lists = 2;
        informer.watch_errors = 1;
        informer.gone = 1;
        informer.last_sync = Some(UNIX_EPOCH + Duration::from_secs(42));
        let overview = overview(
            &[next, writer],
            &[informer],
            Some(&leader),
            &mut Rates::default(),
            Instant::now(),
            UNIX_EPOCH + Duration::from_secs(100),
        );
        assert_eq!(overview.taken_unix_s, 100);
        let names: Vec<&str> = overview.plugins.iter().map(|row| row.name.as_str()).collect();
        assert_eq!(names, ["scaler", "scaler.next"]);
        let scaler = &overview.plugins[0];
        assert_eq!(
            (scaler.state.as_str(), scaler.digest.as_deref(), scaler.cpu_millicores),
            ("Running", Some("0123456789ab"), 250)
        );
        assert_eq!(scaler.last_error.as_deref(), Some("bad\u{fffd}thing"));
        let lease = LeaseRow {
            name: "kinformer/kinformer-scaler".into(),
            holder: Some("pod-a".into()),
            held_here: true,
        };
        assert_eq!(scaler.lease.as_ref(), Some(&lease));
        let next = &overview.plugins[1];
        assert_eq!(next.last_error.as_deref(), Some("scaler.next.toml: broken"));
        assert_eq!(
            next.lease.as_ref(),
            Some(&lease),
            "a next version runs under its plugin's Lease"
        );
        let replica = overview.replica.unwrap();
        assert_eq!(replica.leases, ["kinformer/kinformer-scaler"]);
        let informer = &overview.informers[0];
        assert_eq!(informer.resource, "apps/v1/Deployment");
        assert_eq!(informer.namespace, "(all)");
        assert_eq!(informer.selector.as_deref(), Some("app=web"));
        assert_eq!(informer.last_list_unix_s, Some(42));
    }
}
