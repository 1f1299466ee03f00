//! What each plugin is doing and has done: its state, digests and counters,
//! kept by the supervisor and the worker, and served as JSON over HTTP.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Serialize, Serializer};

use crate::apiserver::WriteRecord;
use crate::outbound::{HttpRecord, Outcome};
use crate::plugin::{LogLine, plugin_name};
use crate::registration::Registration;
use crate::workqueue::{DurationHistogram, WorkQueueStats};
use kinformer_informers::Recover as _;

/// Where a plugin is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum PluginState {
    /// Compiling, starting or waiting for its caches to sync.
    Starting,
    /// Handling deltas.
    Running,
    /// Waiting to start a fresh instance after a failure.
    Restarting,
    /// Failed too often; no longer run.
    Quarantined,
    /// Could not be loaded (broken file or manifest, refused `init`), and no
    /// earlier version runs.
    Failed,
    /// Stopped by the host.
    Stopped,
    /// Writes to the cluster, and waits for this replica to lead (leader
    /// election).
    Standby,
}

impl PluginState {
    /// Its name, as the status, the metrics and the page show it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "Starting",
            Self::Running => "Running",
            Self::Restarting => "Restarting",
            Self::Quarantined => "Quarantined",
            Self::Failed => "Failed",
            Self::Stopped => "Stopped",
            Self::Standby => "Standby",
        }
    }
}

/// How recent log lines a status keeps.
pub(super) const STATUS_LOG_LINES: usize = 256;
/// How many dry-run writes a status keeps.
pub(super) const STATUS_INTENTS: usize = 32;

/// What one plugin is doing and has done.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PluginStatus {
    /// The plugin's name (its file stem).
    pub name: String,
    /// Its file.
    pub file: PathBuf,
    /// The SHA-256 digest of the file as last read from the directory.
    #[serde(serialize_with = "short_digest")]
    pub desired_digest: Option<String>,
    /// The digest of the version handling deltas; `None` until one does.
    #[serde(serialize_with = "short_digest")]
    pub running_digest: Option<String>,
    /// A digest that failed to load or was rolled back; not retried until the
    /// file changes.
    #[serde(serialize_with = "short_digest")]
    pub rejected_digest: Option<String>,
    /// Where it is.
    pub state: PluginState,
    /// What the running version registered.
    #[serde(rename = "version", serialize_with = "registered_version")]
    pub registration: Option<Registration>,
    /// Subscriptions and indexes refused by its grant, and why.
    pub refused: Vec<String>,
    /// True when the running version gets no delta at all: it is no
    /// controller and subscribes to nothing its grant lets it watch.
    pub handles_nothing: bool,
    /// Why the last load or reload failed, if it did.
    pub load_error: Option<String>,
    /// Deltas handled.
    pub deltas: u64,
    /// Keys a controller reconciled (successfully or not).
    pub reconciles: u64,
    /// Keys waiting in a controller's workqueue.
    pub queue_depth: usize,
    /// `handle` calls that succeeded.
    pub batches: u64,
    /// `handle` calls that returned an error.
    pub errors: u64,
    /// Batches delivered again after an error.
    pub retries: u64,
    /// Deltas skipped after errors.
    pub skipped: u64,
    /// Traps, deadline overruns and memory-limit hits.
    pub traps: u64,
    /// Milliseconds the plugin was paused for its CPU share (`cpu-millicores`).
    pub cpu_paused_ms: u64,
    /// The running version's CPU share, in thousandths of a core
    /// (`limits.cpu-millicores`); 0 until a version runs.
    pub cpu_millicores: u32,
    /// Fresh instances started after a failure.
    pub restarts: u64,
    /// Next versions (file or manifest) swapped in.
    pub reloads: u64,
    /// Deltas of the resources it subscribed to that it was not handed: in
    /// namespaces outside its grant's `namespaces`.
    pub outside_grant: u64,
    /// Versions swapped in and replaced by the previous one after failing, and next
    /// versions rolled back for doing worse than the running one.
    pub rollbacks: u64,
    /// A next version beside this one, and how the two compare.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutReport>,
    /// The last error of a running version, if any.
    pub last_error: Option<String>,
    /// Writes done (in dry-run mode: validated by the server).
    pub writes: u64,
    /// Writes refused or failed, throttled ones aside.
    pub write_errors: u64,
    /// Writes refused for the plugin's write rate (or the server's).
    pub throttled: u64,
    /// The last write refused or failed (throttling aside), as
    /// `VERB RESOURCE KEY: MESSAGE` (e.g. the API server's `403`).
    pub last_write_error: Option<String>,
    /// Writes by verb and outcome (`ok`, `throttled`, `denied`, ...).
    #[serde(skip)]
    pub writes_by: BTreeMap<(&'static str, &'static str), u64>,
    /// Outbound HTTP requests that got a response read to its end.
    pub http_requests: u64,
    /// Outbound HTTP requests refused (denied, throttled) or failed.
    pub http_errors: u64,
    /// Outbound HTTP requests by `scheme://host:port` and outcome; origins
    /// past the first 32 count under `other`.
    #[serde(skip)]
    pub http_by: BTreeMap<(String, &'static str), u64>,
    /// How long its `handle` calls took.
    #[serde(skip)]
    pub handle_duration: DurationHistogram,
    /// Bytes of memory its instance holds, as `limits.memory-mib` counts
    /// them (linear memories, tables, and what the host holds for it), as of
    /// its last call.
    pub memory_bytes: usize,
    /// Deltas waiting in its queues, read when the status is.
    pub queued: usize,
    /// Times one of its queues overflowed and caught up from the cache.
    pub catch_ups: u64,
    /// Its running version's queues, from which `queued` and `catch_ups`
    /// are read.
    #[serde(skip)]
    pub queues: Vec<crate::processor::QueueProbe>,
    /// A controller's workqueue, as of its last reconcile.
    #[serde(skip)]
    pub workqueue: Option<WorkQueueStats>,
    /// The last dry-run writes, oldest first: what the plugin would have done.
    pub intents: VecDeque<WriteRecord>,
    /// The plugin's most recent log lines, across restarts, oldest first.
    #[serde(skip)]
    pub recent_logs: VecDeque<LogLine>,
}

impl PluginStatus {
    pub(crate) fn new(file: &Path) -> Self {
        Self {
            name: plugin_name(file),
            file: file.to_owned(),
            desired_digest: None,
            running_digest: None,
            rejected_digest: None,
            state: PluginState::Starting,
            registration: None,
            refused: Vec::new(),
            handles_nothing: false,
            load_error: None,
            deltas: 0,
            reconciles: 0,
            queue_depth: 0,
            batches: 0,
            errors: 0,
            retries: 0,
            skipped: 0,
            traps: 0,
            cpu_paused_ms: 0,
            cpu_millicores: 0,
            restarts: 0,
            reloads: 0,
            outside_grant: 0,
            rollbacks: 0,
            rollout: None,
            last_error: None,
            writes: 0,
            write_errors: 0,
            throttled: 0,
            last_write_error: None,
            writes_by: BTreeMap::new(),
            http_requests: 0,
            http_errors: 0,
            http_by: BTreeMap::new(),
            handle_duration: DurationHistogram::default(),
            memory_bytes: 0,
            queued: 0,
            catch_ups: 0,
            queues: Vec::new(),
            workqueue: None,
            intents: VecDeque::new(),
            recent_logs: VecDeque::new(),
        }
    }

    /// Counts a write, and keeps it among the intents when it was a dry run.
    pub(super) fn record_write(&mut self, record: &WriteRecord) {
        match record.outcome {
            "ok" => self.writes += 1,
            "throttled" => self.throttled += 1,
            outcome => {
                self.write_errors += 1;
                let message = record.message.as_deref().unwrap_or(outcome);
                self.last_write_error = Some(format!("{} {} {}: {message}", record.verb, record.resource, record.key));
            }
        }
        *self.writes_by.entry((record.verb, record.outcome)).or_default() += 1;
        if record.dry_run {
            if self.intents.len() == STATUS_INTENTS {
                self.intents.pop_front();
            }
            self.intents.push_back(record.clone());
        }
    }
}

impl PluginStatus {
    /// Counts an outbound HTTP request by origin and outcome.
    pub(super) fn record_http(&mut self, record: &HttpRecord) {
        match record.outcome {
            Outcome::Ok => self.http_requests += 1,
            _ => self.http_errors += 1,
        }
        let known = self.http_by.keys().any(|(origin, _)| *origin == record.origin);
        let distinct = self
            .http_by
            .keys()
            .map(|(origin, _)| origin)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let origin = if known || distinct < STATUS_HTTP_ORIGINS {
            record.origin.clone()
        } else {
            "other".to_owned()
        };
        *self.http_by.entry((origin, record.outcome.as_str())).or_default() += 1;
    }
}

/// How many distinct origins a status counts HTTP requests by.
pub(super) const STATUS_HTTP_ORIGINS: usize = 32;

pub(super) type SharedStatus = Arc<Mutex<PluginStatus>>;

pub(super) fn update<R>(status: &SharedStatus, f: impl FnOnce(&mut PluginStatus) -> R) -> R {
    f(&mut status.lock().recover())
}

/// A digest as the status shows it: its first 12 hex digits.
fn short_digest<S: Serializer>(digest: &Option<String>, serializer: S) -> Result<S::Ok, S::Error> {
    digest
        .as_deref()
        .map(|digest| &digest[..12.min(digest.len())])
        .serialize(serializer)
}

/// The version the running plugin registered with.
fn registered_version<S: Serializer>(registration: &Option<Registration>, serializer: S) -> Result<S::Ok, S::Error> {
    registration
        .as_ref()
        .map(|registration| registration.version.as_str())
        .serialize(serializer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_json_shows_short_digests_and_the_registered_version() {
        let mut status = PluginStatus::new(Path::new("/plugins/shop.wasm"));
        status.running_digest = Some("0123456789abcdef0123".into());
        status.registration = Some(Registration {
            name: "shop".into(),
            version: "1.2.0".into(),
            subscriptions: Vec::new(),
            indexes: Vec::new(),
            controller: None,
        });
        status.deltas = 7;
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["name"], "shop");
        assert_eq!(json["state"], "Starting");
        assert_eq!(json["runningDigest"], "0123456789ab");
        assert_eq!(json["desiredDigest"], serde_json::Value::Null);
        assert_eq!(json["version"], "1.2.0");
        assert_eq!(json["deltas"], 7);
        assert!(json.get("recentLogs").is_none());
    }

    fn record(outcome: &'static str, dry_run: bool, key: &str) -> WriteRecord {
        WriteRecord {
            verb: "patch",
            resource: "apps/v1/Deployment/scale".into(),
            key: key.into(),
            outcome,
            message: (outcome != "ok").then(|| "why".to_owned()),
            dry_run,
            body: Some(r#"{"spec":{"replicas":3}}"#.into()),
        }
    }

    #[test]
    fn writes_are_counted_and_the_last_dry_runs_kept_as_intents() {
        let mut status = PluginStatus::new(Path::new("/plugins/scaler.wasm"));
        for outcome in ["ok", "ok", "throttled", "denied", "conflict"] {
            status.record_write(&record(outcome, false, "a/web"));
        }
        assert_eq!((status.writes, status.throttled, status.write_errors), (2, 1, 2));
        assert!(status.intents.is_empty());
        for i in 0..STATUS_INTENTS + 3 {
            status.record_write(&record("ok", true, &format!("a/web-{i}")));
        }
        assert_eq!(status.intents.len(), STATUS_INTENTS);
        assert_eq!(status.intents[0].key, "a/web-3");
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["writes"], 2 + STATUS_INTENTS as u64 + 3);
        assert_eq!(json["writeErrors"], 2);
        assert_eq!(
            json["intents"][0],
            serde_json::json!({
                "verb": "patch",
                "resource": "apps/v1/Deployment/scale",
                "key": "a/web-3",
                "outcome": "ok",
                "dryRun": true,
                "body": "{\"spec\":{\"replicas\":3}}",
            })
        );
    }
}
