//! `kinformer replay`: runs a plugin offline on a recording (see
//! [`crate::recording`]): no cluster, the plugin's grant, limits and config
//! from the manifest beside it, and a cache that answers from the recorded
//! state as of each delta.
//!
//! A plugin that handles deltas gets each delivered delta in a `handle` call
//! of its own. A controller gets what the host's controller would give it:
//! once the recording's initial lists are cached, every key they lead to is
//! reconciled once; then each live delta is cached and the keys it leads to
//! (the primary object, the controller owner of an owned object, the primary
//! objects a mapped object is indexed by) are reconciled, each once, in key
//! order. Errors are counted and the replay goes on; neither backoff nor
//! `requeue-after` is replayed.
//!
//! # Output
//!
//! One line per log line of the plugin, `LEVEL message` (the level right
//! aligned in five columns), and one per write it asked for, in the order
//! they happened:
//!
//! ```text
//!  INFO hpa ns-0/app-0: 2 ready pods of deployment app-0 at 120% cpu (target 60%): scaled 2 -> 4
//! WRITE patch apps/v1/Deployment/scale ns-0/app-0 {"spec":{"replicas":4}}
//! WRITE create v1/ConfigMap ns-1/settings denied: create v1/ConfigMap in namespace ns-1 is not granted to this plugin
//! ```
//!
//! A write's line is `WRITE verb resource key`, then the object or patch the
//! plugin sent (JSON, whole; nothing for a delete) when the write would be
//! made, or `outcome: message` when it would not (outside the grant, or
//! malformed). Nothing is sent: the manifest's write grant is checked as the
//! host checks it (with no write rate), and a write it admits is answered as
//! a server would plausibly answer it, from the recorded state as of the
//! current delta: the object with the write applied and a new
//! resourceVersion ([`kinformer::apiserver::Offline`]). Writes do not change
//! the recorded state. Then come the replay's own lines: `ERROR` when `handle`
//! or `reconcile` returned an error or the plugin trapped.
//!
//! # Settings and outbound HTTP
//!
//! The plugin runs with the environment `run` gives it: its manifest's
//! `[env]` literals, and the values of its Secret- and ConfigMap-backed
//! variables given with `--env NAME=VALUE` or `--env-from FILE` (a replay
//! reads no cluster; one not given is left unset, and said so). Its HTTP
//! requests are checked against its grant as the host checks them, and never
//! sent: each is answered from the recording's `Http` lines (`kinformer
//! record --plugin`), the same method, URL and body in order, or refused
//! with an error that says a replay makes no requests. Each is one line:
//!
//! ```text
//!  HTTP POST https://hooks.slack.com:443/services/T0: 200, answered from the recording
//!  HTTP GET http://127.0.0.1:9/x: not sent: replay makes no requests, and the recording has no answer to it (...)
//! ```
//!
//! # Comparing two versions
//!
//! [`compare`] pairs the calls of two replays of one recording (the same
//! delta handled, the same key reconciled) and compares the writes each
//! asked for as a running shadow's are compared
//! ([`kinformer::rollout::compare`]): `DIFF what: outcome target: diff` per
//! difference, so a CI job can gate a new version on recorded traffic.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use kinformer::apiserver::{Cluster, Offline, WriteRecord};
use kinformer::caches::Caches;
use kinformer::delta::{Delta, DeltaType};
use kinformer::indexer::{Indexer, IndexerWriter, indexer};
use kinformer::manifest::Manifest;
use kinformer::outbound::{AddressPolicy, HttpObserver, HttpRecord, Outbound};
use kinformer::plugin::{CallInputs, Error, LogLine, PluginEngine, PluginInstance, PluginOptions, RecordedHttp};
use kinformer::registration::ControllerSpec;
use kinformer::rollout::Comparison;
use kinformer::runtime::prepare;
use kinformer_selector::Selector;
use kube::api::GroupVersionKind;

use crate::recording::Recorded;
use kinformer::informers::Recover as _;

/// How a replay ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Deltas handed to the plugin (for a controller: that it subscribed to).
    pub delivered: u64,
    /// Keys a controller reconciled.
    pub reconciles: u64,
    /// Calls of `handle` or `reconcile` that returned an error.
    pub errors: u64,
    /// The trap that stopped the replay, if the plugin trapped.
    pub trap: Option<String>,
    /// Deltas of subscribed resources not handed over: their namespace is
    /// outside the grant's `namespaces`.
    pub outside_grant: u64,
    /// Each call in order, `handle` of a delta (`Added ns/name`) or
    /// `reconcile` of a key, with the writes it asked for.
    pub calls: Vec<(String, Vec<WriteRecord>)>,
}

impl Replayed {
    /// The replay's last line: what was handed over, what the grant hid, and
    /// how the calls went.
    #[must_use]
    pub fn summary(&self, recorded: usize) -> String {
        let mut line = format!("replayed {} deltas of {recorded}", self.delivered);
        if self.reconciles > 0 {
            line.push_str(&format!(", {} reconciles", self.reconciles));
        }
        line.push_str(&format!(": {} errors", self.errors));
        if self.trap.is_some() {
            line.push_str(", trapped");
        }
        if self.outside_grant > 0 {
            line.push_str(&format!(
                "; {} deltas were in namespaces outside the plugin's grant (grant.namespaces) and not handed over",
                self.outside_grant
            ));
        }
        line
    }

    /// The process's exit code: 0 when every delta was handled (every key
    /// reconciled), 2 when `handle` or `reconcile` returned errors, 3 when
    /// the plugin trapped.
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

    /// Caches the recorded delta; the delta as the host would deliver it.
    fn apply(&mut self, recorded: &Recorded) -> Delta {
        let writer = self.writer(&recorded.gvk);
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
        if recorded.initial {
            delta.in_initial_list()
        } else {
            delta
        }
    }
}

/// A line of the replay's output, in the order things happened: a log line
/// or a write of the plugin, or the replay's word on a call that failed.
enum Printed {
    Log(LogLine),
    Write(WriteRecord),
    Http(HttpRecord),
    Failed(String),
}

impl std::fmt::Display for Printed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Log(line) => write!(f, "{:>5} {}", line.level, line.message),
            Self::Write(record) => {
                write!(f, "WRITE {} {} {}", record.verb, record.resource, record.key)?;
                match (&record.message, &record.body) {
                    (Some(message), _) => write!(f, " {}: {message}", record.outcome),
                    (None, Some(body)) => write!(f, " {body}"),
                    (None, None) => Ok(()),
                }
            }
            Self::Http(record) => {
                let url = record
                    .intent
                    .as_ref()
                    .map_or(record.origin.as_str(), |intent| intent.url.as_str());
                write!(f, " HTTP {} {url}: ", record.method)?;
                match (record.status, &record.reason) {
                    (Some(status), Some(reason)) => write!(f, "{status}, {reason}"),
                    (Some(status), None) => write!(f, "{status}"),
                    (None, Some(reason)) => write!(f, "{}: {reason}", record.outcome.as_str()),
                    (None, None) => write!(f, "{}", record.outcome.as_str()),
                }
            }
            Self::Failed(line) => write!(f, "ERROR {line}"),
        }
    }
}

/// The lines printed so far and not yet written out.
type Lines = Arc<Mutex<Vec<Printed>>>;

/// Replays `recording` into the plugin file `plugin` (with `config`, or its
/// manifest's), writing each of its log lines and writes to `out` (see the
/// module docs). A `handle` or `reconcile` error is reported and the replay
/// goes on; a trap ends it.
///
/// # Errors
///
/// When the manifest is broken, the file is not a plugin component, `init`
/// fails, a controller's primary resource is not granted, or writing to `out`
/// fails.
pub fn replay(
    plugin: &Path,
    recording: &[Recorded],
    config: Option<&str>,
    engine: &PluginEngine,
    out: &mut impl Write,
) -> anyhow::Result<Replayed> {
    let setup = Setup {
        config: config.map(str::to_owned),
        ..Setup::default()
    };
    replay_with(plugin, recording, &setup, engine, out)
}

/// What a replay gives the plugin besides the recording.
#[derive(Debug, Default)]
pub struct Setup {
    /// The config string passed to `init` (default: the manifest's).
    pub config: Option<String>,
    /// Values of the plugin's Secret- and ConfigMap-backed variables, by name.
    pub env: Vec<(String, String)>,
    /// How its outbound HTTP is answered.
    pub http: Http,
}

/// How a replayed plugin's outbound HTTP is answered.
#[derive(Debug, Default)]
pub enum Http {
    /// None: every request is refused, saying a replay makes no requests.
    #[default]
    Refused,
    /// From these recorded answers, each once.
    Recorded(Vec<RecordedHttp>),
    /// Sent for real under the plugin's grant, never to `policy`'s
    /// addresses; every answer kept into `into` (`kinformer record --plugin`).
    Live {
        /// The addresses no request reaches (the API server's).
        policy: AddressPolicy,
        /// Where the answers are kept.
        into: Arc<CallInputs>,
    },
}

/// The plugin's environment for a replay: its manifest's literals, and the
/// values `given` for its Secret- and ConfigMap-backed variables. Those not
/// given are left out, each said in a line of `missing`.
fn replay_env(manifest: &Manifest, given: &[(String, String)], missing: &mut Vec<String>) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for var in &manifest.env {
        let value = match &var.value {
            kinformer::manifest::EnvValue::Literal(value) => Some(value.clone()),
            kinformer::manifest::EnvValue::Secret(key) | kinformer::manifest::EnvValue::ConfigMap(key) => {
                let found = given
                    .iter()
                    .find(|(name, _)| *name == var.name)
                    .map(|(_, value)| value.clone());
                if found.is_none() {
                    missing.push(format!(
                        "{} (key {} of {}/{}) is not set: a replay reads no cluster; give it with --env {}=VALUE or --env-from FILE",
                        var.name, key.key, key.namespace, key.name, var.name
                    ));
                }
                found
            }
        };
        if let Some(value) = value {
            env.push((var.name.clone(), value));
        }
    }
    env
}

/// [`replay`] with `setup`: the plugin's config, the values of its
/// settings, and how its HTTP requests are answered.
///
/// # Errors
///
/// As [`replay`].
pub fn replay_with(
    plugin: &Path,
    recording: &[Recorded],
    setup: &Setup,
    engine: &PluginEngine,
    out: &mut impl Write,
) -> anyhow::Result<Replayed> {
    let manifest = Manifest::for_plugin(plugin)?;
    let config = setup.config.as_deref().unwrap_or(&manifest.config);
    let bytes = crate::check::read_plugin(plugin, &manifest)?;
    let component = engine.load_file_bytes(plugin, &bytes)?;
    let printed: Lines = Arc::default();
    // A replay runs faster than the deltas came: neither its lines nor its
    // writes are rate-limited (a rate of 0 is none).
    let mut limits = manifest.limits;
    limits.log_lines_per_second = u32::MAX;
    limits.writes_per_second = 0;
    let mut caches = RecordedCaches {
        caches: Caches::new(),
        writers: Vec::new(),
    };
    let last_version = recording
        .iter()
        .filter_map(|recorded| recorded.object.resource_version().parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    let writes = Arc::clone(&printed);
    let call_writes: Arc<Mutex<Vec<WriteRecord>>> = Arc::default();
    let this_call = Arc::clone(&call_writes);
    let writer = Cluster::offline(Offline::new(caches.caches.clone(), last_version)).writer(
        component.name(),
        manifest.grant.clone(),
        &limits,
        manifest.mode,
        Some(Arc::new(move |record: &WriteRecord| {
            lock(&writes).push(Printed::Write(record.clone()));
            lock(&this_call).push(record.clone());
        })),
    );
    let logs = Arc::clone(&printed);
    let requests = Arc::clone(&printed);
    let observer: HttpObserver = Arc::new(move |record: &HttpRecord| {
        lock(&requests).push(Printed::Http(record.clone()));
    });
    let grant = manifest.grant.http().clone();
    let outbound = match &setup.http {
        Http::Refused => Outbound::new(
            component.name(),
            grant,
            AddressPolicy::default(),
            &limits,
            Some(observer),
        )
        .replaying(CallInputs::answering([])),
        Http::Recorded(answers) => Outbound::new(
            component.name(),
            grant,
            AddressPolicy::default(),
            &limits,
            Some(observer),
        )
        .replaying(CallInputs::answering(answers.iter().cloned())),
        Http::Live { policy, into } => {
            Outbound::new(component.name(), grant, policy.clone(), &limits, Some(observer)).recording(Arc::clone(into))
        }
    };
    let mut missing = Vec::new();
    let env = replay_env(&manifest, &setup.env, &mut missing);
    for line in missing {
        writeln!(out, " WARN {line}")?;
    }
    let options = PluginOptions::with_limits(limits)
        .grant(manifest.grant.clone())
        .writer(writer)
        .outbound(outbound)
        .env(env)
        .log_sink(Arc::new(move |_plugin: &str, line: &LogLine| {
            lock(&logs).push(Printed::Log(line.clone()));
        }));
    let mut instance = component.instantiate(caches.caches.clone(), options)?;
    let print = |out: &mut dyn Write| -> std::io::Result<()> {
        for line in lock(&printed).drain(..) {
            writeln!(out, "{line}")?;
        }
        Ok(())
    };
    let registration = instance.init(config);
    print(&mut *out)?;
    let registration = registration.with_context(|| format!("{} refused to start", plugin.display()))?;
    let cannot_start = || format!("{} cannot start", plugin.display());
    let review =
        prepare::review(component.name(), &manifest.grant, &registration, &limits).with_context(cannot_start)?;

    // What the plugin is handed: its granted subscriptions, as the runtime's
    // informers and listeners would select them, from the caches the runtime
    // would give it.
    let mut delivered: Vec<(GroupVersionKind, Option<String>, Selector)> = Vec::new();
    for subscription in review.subscriptions.iter().filter(|subscription| subscription.deliver) {
        let selector = Selector::parse(subscription.label_selector.as_deref().unwrap_or(""))?;
        delivered.push((subscription.gvk.clone(), subscription.namespace.clone(), selector));
    }
    let queried = caches.caches.clone();
    let wiring = prepare::wire(&registration, &review, &manifest.grant, &queried, |_, subscription| {
        caches.writer(&subscription.gvk).reader()
    })
    .with_context(cannot_start)?;
    let scope = manifest.grant.namespaces();
    let _indexes = wiring.indexes;
    let mut target = match wiring.controller {
        None => Target::Handler,
        Some((spec, primary)) => Target::Controller {
            spec,
            primary,
            initial: BTreeSet::new(),
        },
    };

    lock(&call_writes).clear();
    let mut run = Run {
        instance,
        printed: Arc::clone(&printed),
        call_writes,
        outcome: Replayed::default(),
    };
    for recorded in recording {
        if !recorded.initial {
            // The initial lists are over: their keys are reconciled with the
            // state they left, before the first live delta changes it.
            target.finish(&mut run);
            if run.outcome.trap.is_some() {
                break;
            }
        }
        let delta = caches.apply(recorded);
        let wanted = delivered.iter().any(|(gvk, namespace, selector)| {
            *gvk == *delta.gvk
                && namespace
                    .as_deref()
                    .is_none_or(|namespace| delta.object.namespace() == Some(namespace))
                && selector.matches(&delta.object.labels())
        });
        if !wanted {
            continue;
        }
        if !scope.contains(&delta.object) {
            run.outcome.outside_grant += 1;
            continue;
        }
        run.outcome.delivered += 1;
        target.deliver(&mut run, &delta);
        print(&mut *out)?;
        if run.outcome.trap.is_some() {
            break;
        }
    }
    target.finish(&mut run);
    print(&mut *out)?;
    out.flush()?;
    Ok(run.outcome)
}

/// What the replay calls: `handle`, or a controller's `reconcile` for the
/// keys each delta leads to.
enum Target {
    Handler,
    Controller {
        spec: ControllerSpec,
        primary: Indexer,
        /// The keys of the initial lists, reconciled once they are all cached.
        initial: BTreeSet<String>,
    },
}

impl Target {
    /// Hands the plugin one delta.
    fn deliver(&mut self, run: &mut Run, delta: &Delta) {
        match self {
            Self::Handler => {
                let handled = run.instance.handle(std::slice::from_ref(delta));
                let what = format!("{} {}", delta.delta_type, delta.key());
                run.settle(handled, "handle", &what);
                run.called(what);
            }
            Self::Controller { spec, primary, initial } => {
                let keys = kinformer::runtime::keys_for(delta, spec, primary);
                if delta.initial_list {
                    initial.extend(keys);
                } else {
                    run.reconcile(keys);
                }
            }
        }
    }

    /// Reconciles the keys of the initial lists, if not done yet.
    fn finish(&mut self, run: &mut Run) {
        if let Self::Controller { initial, .. } = self {
            run.reconcile(std::mem::take(initial));
        }
    }
}

/// The instance being replayed into, and how it fares.
struct Run {
    instance: PluginInstance,
    printed: Lines,
    /// The writes of the call being made.
    call_writes: Arc<Mutex<Vec<WriteRecord>>>,
    outcome: Replayed,
}

impl Run {
    /// Reconciles each key, until one traps.
    fn reconcile(&mut self, keys: impl IntoIterator<Item = String>) {
        for key in keys {
            if self.outcome.trap.is_some() {
                return;
            }
            self.outcome.reconciles += 1;
            let reconciled = self.instance.reconcile(&key).map(|_requeue_after| ());
            self.settle(reconciled, "reconcile", &format!("key {key}"));
            self.called(key);
        }
    }

    /// Records the call just made and the writes it asked for.
    fn called(&mut self, what: String) {
        let writes = std::mem::take(&mut *lock(&self.call_writes));
        self.outcome.calls.push((what, writes));
    }

    /// Counts an error or a trap of `call` on `what`, and says so.
    fn settle(&mut self, result: Result<(), Error>, call: &str, what: &str) {
        let line = match result {
            Ok(()) => return,
            Err(Error::Plugin { message, .. }) => {
                self.outcome.errors += 1;
                format!("{call} returned an error on {what}: {message}")
            }
            Err(error) => {
                let trap = kinformer::one_line(&error);
                let line = format!("trapped on {what}: {trap}");
                self.outcome.trap = Some(trap);
                line
            }
        };
        lock(&self.printed).push(Printed::Failed(line));
    }
}

/// Two versions' replays of one recording, call by call.
#[derive(Debug, Default)]
pub struct Compared {
    /// Calls compared, by outcome.
    pub outcomes: std::collections::BTreeMap<&'static str, u64>,
    /// The calls whose writes differ: what was called, and how.
    pub differences: Vec<(String, Comparison)>,
}

impl Compared {
    /// One line per difference, `DIFF what: outcome target[: diff]`.
    #[must_use]
    pub fn lines(&self) -> Vec<String> {
        self.differences
            .iter()
            .flat_map(|(what, comparison)| {
                comparison
                    .differences
                    .iter()
                    .map(move |difference| format!("DIFF {what}: {difference}"))
            })
            .collect()
    }

    /// The last line: calls compared and how.
    #[must_use]
    pub fn summary(&self) -> String {
        let count = |outcome: &str| self.outcomes.get(outcome).copied().unwrap_or(0);
        let total: u64 = self.outcomes.values().sum();
        format!(
            "compared {total} calls: {} same, {} differ, {} only in the first, {} only in the second",
            count("same"),
            count("differs"),
            count("only-live"),
            count("only-shadow")
        )
    }

    /// 0 when every call wrote the same, 1 otherwise.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.differences.is_empty())
    }
}

/// Compares the writes of two replays of one recording, call by call: a
/// call of the first is paired with the same call (same delta, same key) of
/// the second, in order; a call only one of them made compares with none.
#[must_use]
pub fn compare(first: &Replayed, second: &Replayed) -> Compared {
    let mut others: std::collections::BTreeMap<&str, std::collections::VecDeque<&[WriteRecord]>> =
        std::collections::BTreeMap::new();
    for (what, writes) in &second.calls {
        others.entry(what.as_str()).or_default().push_back(writes);
    }
    let mut compared = Compared::default();
    let mut record = |what: &str, comparison: Comparison| {
        *compared.outcomes.entry(comparison.outcome().as_str()).or_default() += 1;
        if !comparison.differences.is_empty() {
            compared.differences.push((what.to_owned(), comparison));
        }
    };
    for (what, writes) in &first.calls {
        let other = others
            .get_mut(what.as_str())
            .and_then(std::collections::VecDeque::pop_front);
        record(what, kinformer::rollout::compare(writes, other.unwrap_or_default()));
    }
    for (what, left) in others {
        for writes in left {
            record(what, kinformer::rollout::compare(&[], writes));
        }
    }
    compared
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().recover()
}
