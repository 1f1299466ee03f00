//! Next versions of a plugin: what a next version's manifest asks for
//! (`[rollout]`: a shadow or a canary), the stable split of keys between the
//! running and the next version, the comparison of the two versions' writes
//! for one input, and the rule that rolls a regressing next version back —
//! pure types, the clock passed in. The runtime wires them to two workers.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::apiserver::WriteRecord;

/// How a next version runs beside the running one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutMode {
    /// Same input as the running version; writes sent with `dryRun=All` and
    /// compared with the running version's.
    #[default]
    Shadow,
    /// Owns a share of the keys and writes for real.
    Canary,
}

impl std::fmt::Display for RolloutMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Shadow => "shadow",
            Self::Canary => "canary",
        })
    }
}

/// A next version's `[rollout]`: its mode, its share of the keys, and the
/// margins by which it may do worse than the running version within the
/// window before it is rolled back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RolloutPolicy {
    /// Shadow or canary.
    pub mode: RolloutMode,
    /// A canary's share of the keys, 0 to 100.
    pub percent: u8,
    /// The window the versions' calls are compared over.
    pub window: Duration,
    /// How many percentage points the next version's error rate (errors per
    /// call) may exceed the running version's.
    pub max_error_rate_increase: u32,
    /// How many more traps than the running version the next may have.
    pub max_trap_increase: u32,
    /// How many more refused writes than the running version the next may have.
    pub max_refusal_increase: u32,
    /// Calls of the next version within the window before its error rate counts.
    pub min_calls: u32,
}

impl Default for RolloutPolicy {
    fn default() -> Self {
        Self {
            mode: RolloutMode::Shadow,
            percent: 0,
            window: Duration::from_secs(60),
            max_error_rate_increase: 10,
            max_trap_increase: 1,
            max_refusal_increase: 5,
            min_calls: 10,
        }
    }
}

/// The suffix of a next version's file stem: `hpa.next.wasm` is the next
/// version of `hpa`.
pub const NEXT_SUFFIX: &str = ".next";

/// The plugin whose next version `name` is, if it is one.
#[must_use]
pub fn next_of(name: &str) -> Option<&str> {
    name.strip_suffix(NEXT_SUFFIX).filter(|plugin| !plugin.is_empty())
}

/// Where a key falls in the split, 0 to 99: a stable hash (FNV-1a) of the
/// key, the same in every process and release, so a key stays with one
/// version while the share stays the same, and raising the share only moves
/// keys to the next version.
#[must_use]
pub fn key_share(key: &str) -> u8 {
    (stable_hash(key) % 100) as u8
}

pub use kinformer_informers::stable_hash;

/// The Lease group of plugin `name`: a next version runs only where the
/// plugin it is the next version of runs, so both share the plugin's Lease.
#[must_use]
pub fn lease_group(name: &str) -> &str {
    next_of(name).unwrap_or(name)
}

/// True when a canary at `percent` owns `key`.
#[must_use]
pub fn next_owns(key: &str, percent: u8) -> bool {
    key_share(key) < percent
}

/// How the two versions' writes for one input compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The same writes (ignoring resourceVersions, timestamps and
    /// managedFields), or none from either.
    Same,
    /// Only the running version wrote to a target (`only-live` on the
    /// wire, as metrics and the status have always said).
    #[serde(rename = "only-live")]
    OnlyRunning,
    /// Only the next version wrote to a target.
    OnlyShadow,
    /// Both wrote to a target, with different bodies.
    Differs,
}

impl Verdict {
    /// Its name in metrics and the status.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Same => "same",
            Self::OnlyRunning => "only-live",
            Self::OnlyShadow => "only-shadow",
            Self::Differs => "differs",
        }
    }
}

/// One target (verb, resource and object) the two versions' writes differ on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// `verb resource key`.
    pub target: String,
    /// How they differ.
    pub outcome: Verdict,
    /// A compact diff, `path: running → next; ...`, when both wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.outcome.as_str(), self.target)?;
        if let Some(diff) = &self.diff {
            write!(f, ": {diff}")?;
        }
        Ok(())
    }
}

/// The comparison of two versions' writes for one input: the outcome of the
/// whole (the worst of its targets') and each target that is not the same.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Comparison {
    /// `Same` when every target is.
    pub outcome: Option<Verdict>,
    /// The targets that differ, in target order.
    pub differences: Vec<Difference>,
}

impl Comparison {
    /// The outcome, `Same` when neither wrote.
    #[must_use]
    pub fn outcome(&self) -> Verdict {
        self.outcome.unwrap_or(Verdict::Same)
    }
}

/// Compares what the running version and the next version wrote for
/// the same input. Writes are matched by target: verb, resource and object
/// (an Event by what it is about and its reason, since its name is made up
/// anew each time); the bodies are compared without resourceVersions,
/// timestamps and managedFields. Refused writes count as written: they are
/// what the version meant to do.
#[must_use]
pub fn compare(running: &[WriteRecord], next: &[WriteRecord]) -> Comparison {
    let mut targets: BTreeMap<String, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    // Repeats of an Event a version recorded before (a patch of its series):
    // the same intent as the other version's new Event about the same thing.
    let mut repeats = [0_usize; 2];
    for (side, records) in [(0, running), (1, next)] {
        for record in records {
            let mut body = record.body.as_deref().map(normalised).unwrap_or(Value::Null);
            if record.resource.ends_with("/Event")
                && let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut)
            {
                // Made up anew for each Event.
                metadata.remove("name");
            }
            let Some(target) = target(record, &body) else {
                repeats[side] += 1;
                continue;
            };
            let entry = targets.entry(target).or_default();
            if side == 0 {
                entry.0.push(body);
            } else {
                entry.1.push(body);
            }
        }
    }
    let mut comparison = Comparison::default();
    for (target, (running, next)) in targets {
        let event = target.starts_with(EVENT);
        let mut outcome = match (running.is_empty(), next.is_empty()) {
            (false, true) => Verdict::OnlyRunning,
            (true, false) => Verdict::OnlyShadow,
            _ if running == next => Verdict::Same,
            _ => Verdict::Differs,
        };
        let repeated = match outcome {
            Verdict::OnlyRunning => Some(1),
            Verdict::OnlyShadow => Some(0),
            _ => None,
        };
        if let Some(side) = repeated.filter(|side| event && repeats[*side] > 0) {
            repeats[side] -= 1;
            outcome = Verdict::Same;
        }
        comparison.outcome = comparison.outcome.max(Some(outcome));
        if outcome != Verdict::Same {
            let diff = (outcome == Verdict::Differs).then(|| {
                let (running, next) = (Value::Array(running), Value::Array(next));
                let (running, next) = match (running.as_array(), next.as_array()) {
                    (Some(r), Some(n)) if r.len() == 1 && n.len() == 1 => (r[0].clone(), n[0].clone()),
                    _ => (running, next),
                };
                diff(&running, &next)
            });
            comparison.differences.push(Difference { target, outcome, diff });
        }
    }
    comparison
}

/// How an Event's target begins.
const EVENT: &str = "event about ";

/// What a write is to: `verb resource key`; an Event, `event about
/// KIND/NAMESPACE/NAME REASON`, whichever way it is recorded; `None` for a
/// patch of an Event's series, which says only that the Event repeated.
fn target(record: &WriteRecord, body: &Value) -> Option<String> {
    if !record.resource.ends_with("/Event") {
        return Some(format!("{} {} {}", record.verb, record.resource, record.key));
    }
    let regarding = &body["regarding"];
    let about = [&regarding["kind"], &regarding["namespace"], &regarding["name"]]
        .iter()
        .filter_map(|part| part.as_str())
        .collect::<Vec<_>>()
        .join("/");
    match body["reason"].as_str() {
        Some(reason) if !about.is_empty() => Some(format!("{EVENT}{about} {reason}")),
        _ if record.verb == "patch" => None,
        _ => Some(format!("{} {} {}", record.verb, record.resource, record.key)),
    }
}

/// A body as compared: JSON without what changes from one write to the
/// next or names the version that wrote (resourceVersion, managedFields,
/// timestamps, an Event's counting series and reporting controller); text
/// as it is when it is not JSON (a body cut at 1 KiB).
fn normalised(body: &str) -> Value {
    let mut value = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
    strip(&mut value);
    value
}

fn strip(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.retain(|key, _| !ignored(key));
            fields.values_mut().for_each(strip);
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// Fields that differ between two writes of the same intent.
fn ignored(key: &str) -> bool {
    matches!(
        key,
        "resourceVersion" | "managedFields" | "uid" | "series" | "time" | "reportingController" | "reportingInstance"
    ) || key.ends_with("Timestamp")
        || key.ends_with("Time")
}

/// The most paths a diff names.
const DIFF_PATHS: usize = 8;
/// The most characters of a value a diff shows.
const DIFF_VALUE_CHARS: usize = 60;

/// A compact diff of two JSON values: `path: running → next` for each leaf that
/// differs (`∅` for a missing one), at most eight of them.
#[must_use]
pub fn diff(running: &Value, next: &Value) -> String {
    let mut paths = Vec::new();
    walk(String::new(), Some(running), Some(next), &mut paths);
    let more = paths.len().saturating_sub(DIFF_PATHS);
    paths.truncate(DIFF_PATHS);
    let mut text = paths.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    text
}

fn walk(path: String, running: Option<&Value>, next: Option<&Value>, out: &mut Vec<String>) {
    match (running, next) {
        (Some(Value::Object(l)), Some(Value::Object(n))) => {
            let mut keys: Vec<&String> = l.keys().chain(n.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                walk(path, l.get(key), n.get(key), out);
            }
        }
        (Some(Value::Array(l)), Some(Value::Array(n))) if l.len() == n.len() => {
            for (index, (l, n)) in l.iter().zip(n).enumerate() {
                walk(format!("{path}[{index}]"), Some(l), Some(n), out);
            }
        }
        (l, n) if l == n => {}
        (l, n) => {
            let show = |value: Option<&Value>| {
                value.map_or_else(
                    || "∅".to_owned(),
                    |value| {
                        let text = value.to_string();
                        match text.char_indices().nth(DIFF_VALUE_CHARS) {
                            Some((at, _)) => format!("{}…", &text[..at]),
                            None => text,
                        }
                    },
                )
            };
            let path = if path.is_empty() { "body".to_owned() } else { path };
            out.push(format!("{path}: {} → {}", show(l), show(n)));
        }
    }
}

/// Which of the two versions a call was made by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The running version.
    Running,
    /// The next version.
    Next,
}

/// How one call (a `handle` of a batch, a `reconcile` of a key) went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// It returned success.
    Ok,
    /// It returned an error.
    Error,
    /// It trapped, overran its deadline or hit its memory limit.
    Trap,
}

/// A version's calls within the window.
#[derive(Debug, Clone, Default)]
struct Tally {
    /// When each call ended, and how; oldest first.
    calls: VecDeque<(Instant, Call)>,
    /// When each refused write happened; oldest first.
    refusals: VecDeque<Instant>,
}

impl Tally {
    fn forget_before(&mut self, start: Option<Instant>) {
        let Some(start) = start else { return };
        while self.calls.front().is_some_and(|(at, _)| *at < start) {
            self.calls.pop_front();
        }
        while self.refusals.front().is_some_and(|at| *at < start) {
            self.refusals.pop_front();
        }
    }

    fn count(&self, kind: Call) -> usize {
        self.calls.iter().filter(|(_, call)| *call == kind).count()
    }

    /// Errors and traps per call, in percent.
    fn error_percent(&self) -> f64 {
        if self.calls.is_empty() {
            return 0.0;
        }
        let failed = self.calls.len() - self.count(Call::Ok);
        100.0 * failed as f64 / self.calls.len() as f64
    }
}

/// The rule that rolls a next version back: within the window, its error
/// rate, its traps or its refused writes exceed the running version's by
/// more than the policy's margins.
#[derive(Debug, Clone)]
pub struct Regression {
    policy: RolloutPolicy,
    running: Tally,
    next: Tally,
}

impl Regression {
    /// Nothing counted yet, under `policy`.
    #[must_use]
    pub fn new(policy: RolloutPolicy) -> Self {
        Self {
            policy,
            running: Tally::default(),
            next: Tally::default(),
        }
    }

    fn tally(&mut self, role: Role) -> &mut Tally {
        match role {
            Role::Running => &mut self.running,
            Role::Next => &mut self.next,
        }
    }

    /// Counts a call of `role` that ended at `now`, and the writes it had refused.
    pub fn record(&mut self, role: Role, call: Call, refusals: usize, now: Instant) {
        let tally = self.tally(role);
        tally.calls.push_back((now, call));
        tally.refusals.extend(std::iter::repeat_n(now, refusals));
    }

    /// Why the next version should be rolled back at `now`, if it should.
    pub fn judge(&mut self, now: Instant) -> Option<String> {
        let start = now.checked_sub(self.policy.window);
        self.running.forget_before(start);
        self.next.forget_before(start);
        let window_s = self.policy.window.as_secs();
        let (running, next) = (&self.running, &self.next);
        let traps = (next.count(Call::Trap), running.count(Call::Trap));
        if traps.0 > traps.1 + self.policy.max_trap_increase as usize {
            return Some(format!(
                "{} traps against the running version's {} within {window_s} s (rollout.max-trap-increase = {})",
                traps.0, traps.1, self.policy.max_trap_increase
            ));
        }
        let refusals = (next.refusals.len(), running.refusals.len());
        if refusals.0 > refusals.1 + self.policy.max_refusal_increase as usize {
            return Some(format!(
                "{} refused writes against the running version's {} within {window_s} s (rollout.max-refusal-increase = {})",
                refusals.0, refusals.1, self.policy.max_refusal_increase
            ));
        }
        let rates = (next.error_percent(), running.error_percent());
        if next.calls.len() >= self.policy.min_calls as usize
            && rates.0 > rates.1 + f64::from(self.policy.max_error_rate_increase)
        {
            return Some(format!(
                "error rate {:.0}% of {} calls against the running version's {:.0}% within {window_s} s (rollout.max-error-rate-increase = {} points)",
                rates.0,
                next.calls.len(),
                rates.1,
                self.policy.max_error_rate_increase
            ));
        }
        None
    }
}

/// One version's calls in a rollout, for the status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct VersionCounts {
    /// Calls made (`handle` batches or reconciled keys).
    pub calls: u64,
    /// Calls that returned an error.
    pub errors: u64,
    /// Calls that trapped.
    pub traps: u64,
    /// Writes refused.
    pub refusals: u64,
}

impl VersionCounts {
    /// Counts one call.
    pub fn record(&mut self, call: Call, refusals: usize) {
        self.calls += 1;
        self.errors += u64::from(call == Call::Error);
        self.traps += u64::from(call == Call::Trap);
        self.refusals += refusals as u64;
    }
}

/// The differences kept per plugin for the status.
pub const KEPT_DIFFERENCES: usize = 20;

/// A difference for one input, as the status keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyDifference {
    /// The key reconciled, or the first object of the batch handled.
    pub key: String,
    /// How the writes differ.
    pub differences: Vec<Difference>,
}

/// A rollout as the status shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RolloutReport {
    /// Shadow or canary.
    pub mode: RolloutMode,
    /// A canary's share of the keys.
    pub percent: u8,
    /// The next version's digest.
    pub next_digest: String,
    /// When the rollout (of this next version) started, in seconds since the
    /// Unix epoch.
    pub since_unix_s: u64,
    /// Inputs whose writes were compared, by outcome (a shadow's).
    pub compared: BTreeMap<&'static str, u64>,
    /// Inputs the shadow did not get to in time to compare (it was behind).
    pub skipped: u64,
    /// The running version's calls (`live` on the wire, as the status has
    /// always said).
    #[serde(rename = "live")]
    pub running: VersionCounts,
    /// The next version's calls.
    pub next: VersionCounts,
    /// The last differences, newest last.
    pub differences: VecDeque<KeyDifference>,
    /// Why the next version was rolled back, if it was.
    pub rolled_back: Option<String>,
}

impl RolloutReport {
    /// Counts a comparison for `key`, keeping it when it is a difference.
    pub fn record(&mut self, key: &str, comparison: &Comparison) {
        *self.compared.entry(comparison.outcome().as_str()).or_default() += 1;
        if !comparison.differences.is_empty() {
            if self.differences.len() == KEPT_DIFFERENCES {
                self.differences.pop_front();
            }
            self.differences.push_back(KeyDifference {
                key: key.to_owned(),
                differences: comparison.differences.clone(),
            });
        }
    }

    /// Inputs compared.
    #[must_use]
    pub fn total_compared(&self) -> u64 {
        self.compared.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn write(verb: &'static str, resource: &str, key: &str, body: Value) -> WriteRecord {
        WriteRecord {
            verb,
            resource: resource.into(),
            key: key.into(),
            outcome: "ok",
            message: None,
            dry_run: false,
            body: Some(body.to_string()),
        }
    }

    fn scale(replicas: u64) -> WriteRecord {
        write(
            "patch",
            "apps/v1/Deployment/scale",
            "ns/app",
            json!({"spec": {"replicas": replicas}}),
        )
    }

    #[test]
    fn a_key_keeps_its_side_and_raising_the_share_only_moves_keys_to_the_next_version() {
        let keys: Vec<String> = (0..1000).map(|i| format!("ns-{}/app-{i}", i % 7)).collect();
        let owned = |percent| keys.iter().filter(|key| next_owns(key, percent)).count();
        assert_eq!(owned(0), 0);
        assert_eq!(owned(100), 1000);
        let twenty = owned(20);
        assert!((150..=250).contains(&twenty), "{twenty} of 1000 at 20%");
        for key in &keys {
            assert_eq!(key_share(key), key_share(key));
            if next_owns(key, 10) {
                assert!(next_owns(key, 20), "{key} moved back to the running version");
            }
        }
    }

    #[test]
    fn the_same_writes_compare_same_whatever_their_resource_versions_and_timestamps() {
        let running = write(
            "patch",
            "autoscaling/v2/HorizontalPodAutoscaler/status",
            "ns/app",
            json!({"metadata": {"resourceVersion": "5"}, "status": {"desiredReplicas": 3, "lastScaleTime": "2026-01-01T00:00:00Z"}}),
        );
        let next = write(
            "patch",
            "autoscaling/v2/HorizontalPodAutoscaler/status",
            "ns/app",
            json!({"metadata": {"resourceVersion": "9"}, "status": {"desiredReplicas": 3, "lastScaleTime": "2026-01-01T00:00:07Z"}}),
        );
        let comparison = compare(&[running], &[next]);
        assert_eq!(comparison.outcome(), Verdict::Same);
        assert!(comparison.differences.is_empty());
        assert_eq!(compare(&[], &[]).outcome(), Verdict::Same, "neither wrote");
    }

    #[test]
    fn different_bodies_differ_with_a_diff_of_the_changed_paths() {
        let comparison = compare(&[scale(4)], &[scale(2)]);
        assert_eq!(comparison.outcome(), Verdict::Differs);
        assert_eq!(
            comparison.differences,
            [Difference {
                target: "patch apps/v1/Deployment/scale ns/app".into(),
                outcome: Verdict::Differs,
                diff: Some("spec.replicas: 4 → 2".into()),
            }]
        );
    }

    #[test]
    fn a_write_of_one_version_only_is_only_running_or_only_shadow_and_the_worst_outcome_wins() {
        assert_eq!(compare(&[scale(4)], &[]).outcome(), Verdict::OnlyRunning);
        assert_eq!(compare(&[], &[scale(4)]).outcome(), Verdict::OnlyShadow);
        let status = write(
            "patch",
            "autoscaling/v2/HorizontalPodAutoscaler/status",
            "ns/app",
            json!({}),
        );
        let comparison = compare(&[scale(4), status.clone()], &[scale(3), status]);
        assert_eq!(comparison.outcome(), Verdict::Differs);
        assert_eq!(comparison.differences.len(), 1);
    }

    #[test]
    fn events_match_by_what_they_are_about_and_why_not_by_their_made_up_names() {
        let event = |name: &str, note: &str| {
            write(
                "create",
                "events.k8s.io/v1/Event",
                &format!("ns/{name}"),
                json!({"metadata": {"name": name}, "reason": "Scaled", "reportingController": name,
                       "regarding": {"kind": "Deployment", "namespace": "ns", "name": "app"},
                       "note": note, "eventTime": "x"}),
            )
        };
        assert_eq!(
            compare(&[event("app.1", "to 4")], &[event("app.2", "to 4")]).outcome(),
            Verdict::Same
        );
        let differs = compare(&[event("app.1", "to 4")], &[event("app.2", "to 2")]);
        assert_eq!(differs.differences[0].target, "event about Deployment/ns/app Scaled");
        assert_eq!(
            differs.differences[0].diff.as_deref(),
            Some("note: \"to 4\" → \"to 2\"")
        );
        // The running version bumps the series of the Event it recorded
        // before; a shadow, whose Events persist nothing, records it anew.
        let repeat = write(
            "patch",
            "events.k8s.io/v1/Event",
            "ns/app.1",
            json!({"series": {"count": 2}}),
        );
        assert_eq!(
            compare(std::slice::from_ref(&repeat), &[event("app.2", "to 4")]).outcome(),
            Verdict::Same
        );
        assert_eq!(
            compare(&[repeat], &[]).outcome(),
            Verdict::Same,
            "a repeat alone says nothing new"
        );
    }

    #[test]
    fn a_diff_names_missing_fields_and_stops_after_a_few_paths() {
        let running = json!({"a": 1, "b": {"c": [1, 2]}});
        let next = json!({"b": {"c": [1, 3]}, "d": "x"});
        assert_eq!(diff(&running, &next), "a: 1 → ∅; b.c[1]: 2 → 3; d: ∅ → \"x\"");
        let many: serde_json::Map<String, Value> = (0..12).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let text = diff(&Value::Object(many), &json!({}));
        assert!(text.ends_with("; and 4 more"), "{text}");
    }

    fn policy() -> RolloutPolicy {
        RolloutPolicy {
            min_calls: 6,
            ..RolloutPolicy::default()
        }
    }

    #[test]
    fn a_next_version_failing_a_third_of_its_calls_is_rolled_back_once_it_made_enough() {
        let mut rule = Regression::new(policy());
        let now = Instant::now();
        for i in 1..=5 {
            rule.record(Role::Running, Call::Ok, 0, now);
            let call = if i % 3 == 0 { Call::Error } else { Call::Ok };
            rule.record(Role::Next, call, 0, now);
            assert_eq!(rule.judge(now), None, "judged after {i} calls");
        }
        rule.record(Role::Next, Call::Error, 0, now);
        let reason = rule.judge(now).expect("a third of the calls failed");
        assert!(reason.starts_with("error rate 33% of 6 calls"), "{reason}");
    }

    #[test]
    fn errors_the_running_version_has_as_well_do_not_count_against_the_next() {
        let mut rule = Regression::new(policy());
        let now = Instant::now();
        for _ in 0..10 {
            rule.record(Role::Running, Call::Error, 0, now);
            rule.record(Role::Next, Call::Error, 0, now);
        }
        assert_eq!(rule.judge(now), None);
    }

    #[test]
    fn traps_and_refusals_past_their_margins_roll_back_and_old_ones_age_out_of_the_window() {
        let mut rule = Regression::new(policy());
        let start = Instant::now();
        rule.record(Role::Next, Call::Trap, 0, start);
        assert_eq!(rule.judge(start), None, "one trap is within the margin");
        rule.record(Role::Next, Call::Trap, 0, start);
        assert!(rule.judge(start).is_some_and(|reason| reason.starts_with("2 traps")));
        let later = start + Duration::from_secs(61);
        assert_eq!(rule.judge(later), None, "the traps left the window");
        rule.record(Role::Next, Call::Ok, 6, later);
        assert!(
            rule.judge(later)
                .is_some_and(|reason| reason.starts_with("6 refused writes"))
        );
    }

    #[test]
    fn a_report_counts_every_comparison_and_keeps_the_last_differences() {
        let mut report = RolloutReport::default();
        for i in 0..30 {
            report.record(&format!("ns/app-{i}"), &compare(&[scale(4)], &[scale(2)]));
        }
        report.record("ns/same", &compare(&[scale(4)], &[scale(4)]));
        assert_eq!(report.total_compared(), 31);
        assert_eq!(report.compared["differs"], 30);
        assert_eq!(report.differences.len(), KEPT_DIFFERENCES);
        assert_eq!(report.differences.back().unwrap().key, "ns/app-29");
    }

    #[test]
    fn a_next_version_is_named_after_the_plugin_it_follows() {
        assert_eq!(next_of("hpa.next"), Some("hpa"));
        assert_eq!(next_of("hpa"), None);
        assert_eq!(next_of(".next"), None);
    }
}
