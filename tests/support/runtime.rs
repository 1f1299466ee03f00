//! Helpers of the runtime and reload tests: a cluster with churn, plugins
//! installed into a directory, and records of deltas checked against the
//! server's change log.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiserver_sim::store::{EventType, ResourceId};
use apiserver_sim::workload::Workload;
use apiserver_sim::{ApiServer, SimConfig};
use kinformer::plugin::LogSink;
use kinformer::runtime::{PluginStatus, Runtime};

/// Every log line of every plugin, in the order each plugin wrote them.
#[derive(Debug, Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<(String, String)>>>);

impl Logs {
    /// The sink to give the runtime.
    pub fn sink(&self) -> LogSink {
        let lines = Arc::clone(&self.0);
        Arc::new(move |plugin, line| {
            lines.lock().unwrap().push((plugin.to_owned(), line.message.clone()));
        })
    }

    /// The lines of one plugin.
    pub fn of(&self, plugin: &str) -> Vec<String> {
        let lines = self.0.lock().unwrap();
        lines
            .iter()
            .filter(|(name, _)| name == plugin)
            .map(|(_, line)| line.clone())
            .collect()
    }
}

/// Writes plugin `file` (a component of `plugin_artifacts`) into `dir` as
/// `name.wasm`, with `manifest` as `name.toml` when given.
pub fn install(dir: &Path, name: &str, file: &str, manifest: Option<&str>) {
    let (_, bytes) = plugin_artifacts::ALL
        .iter()
        .chain(plugin_artifacts::TEST_PLUGINS)
        .find(|(artifact, _)| *artifact == file)
        .unwrap_or_else(|| panic!("no plugin {file}"));
    std::fs::write(dir.join(format!("{name}.wasm")), bytes).unwrap();
    if let Some(manifest) = manifest {
        std::fs::write(dir.join(format!("{name}.toml")), manifest).unwrap();
    }
}

/// Publishes a file the way careful tools do: write a hidden temporary file,
/// then rename it over the target.
pub fn publish(dir: &Path, name: &str, bytes: &[u8]) {
    let temporary = dir.join(format!(".{name}.tmp"));
    std::fs::write(&temporary, bytes).unwrap();
    std::fs::rename(&temporary, dir.join(name)).unwrap();
}

/// The manifest of a `writer.wasm` that floods ConfigMaps in `ns-0`, granted
/// create and patch there.
pub const FLOOD_MANIFEST: &str = "config = \"flood:ns-0\"\n\
     [[grant.write]]\nverbs = [\"create\", \"patch\"]\nresources = [\"v1/ConfigMap\"]\nnamespaces = [\"ns-0\"]\n";

/// A manifest with `config`, no log rate limit and quick restarts.
pub fn quick_manifest(config: &str) -> String {
    format!("config = \"{config}\"\n[limits]\nlog-lines-per-second = 1000000\n[failures]\nrestart-backoff-ms = 20\n")
}

/// The status of plugin `name` now.
pub fn plugin_status(runtime: &Runtime, name: &str) -> PluginStatus {
    status(&runtime.status(), name).clone()
}

/// The status of plugin `name` once the runtime lists it: each plugin is
/// loaded in a task of its own, listed when that task begins.
pub fn listed_status(runtime: &Runtime, name: &str) -> Option<PluginStatus> {
    runtime.status().into_iter().find(|status| status.name == name)
}

pub async fn cluster(workload: &Workload) -> (ApiServer, tokio::task::JoinHandle<()>, kube::Client) {
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let churn = server.start_workload(workload).unwrap();
    let client = kube::Client::try_from(server.client_config()).unwrap();
    (server, churn, client)
}

pub async fn until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn status<'a>(statuses: &'a [PluginStatus], name: &str) -> &'a PluginStatus {
    statuses
        .iter()
        .find(|status| status.name == name)
        .unwrap_or_else(|| panic!("no plugin {name}"))
}

/// One delta as delta-logger logs it: `Added Pod ns/name rv=12 (initial list)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// `Added`, `Updated`, `Deleted`, ...
    pub delta: String,
    /// The object's key.
    pub key: String,
    /// Its resourceVersion.
    pub rv: u64,
    /// Whether it came in an initial list.
    pub initial: bool,
}

impl Logged {
    /// Parses delta-logger's line: `Added Pod ns/name rv=12 (initial list)`.
    pub fn parse_delta_logger(line: &str) -> Option<Self> {
        let mut words = line.split(' ');
        let delta = words.next()?.to_owned();
        let _kind = words.next()?;
        let key = words.next()?.to_owned();
        let rv = words.next()?.strip_prefix("rv=")?.parse().ok()?;
        Some(Self {
            delta,
            key,
            rv,
            initial: line.ends_with("(initial list)"),
        })
    }

    /// Parses the hostile plugin's `record=LABEL` line: `LABEL Added ns/name 12
    /// initial`; returns the label too.
    pub fn parse_record(line: &str) -> Option<(String, Self)> {
        let mut words = line.split(' ');
        let label = words.next()?.to_owned();
        let delta = words.next()?.to_owned();
        let key = words.next()?.to_owned();
        let rv = words.next()?.parse().ok()?;
        let initial = words.next() == Some("initial");
        Some((
            label,
            Self {
                delta,
                key,
                rv,
                initial,
            },
        ))
    }
}

/// The server's changes of a resource, per object: (delta type, resourceVersion).
pub fn server_changes(server: &ApiServer, resource: &ResourceId) -> BTreeMap<String, Vec<(String, u64)>> {
    let (events, _) = server.store().events_after(resource, 0, usize::MAX).unwrap();
    let mut changes: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
    for event in events {
        let delta = match event.event_type {
            EventType::Added => "Added",
            EventType::Modified => "Updated",
            EventType::Deleted => "Deleted",
        };
        changes
            .entry(event.object.key.clone())
            .or_default()
            .push((delta.to_owned(), event.resource_version));
    }
    changes
}

/// Asserts that a plugin's record of deltas is what the server did: per object,
/// the initial state (if any) then every later change, in order, none missing
/// and none twice; and no change after the record's live start is absent.
///
/// The server's changes count up to the last one the record holds: a watch
/// hands changes out in resourceVersion order, so every earlier one must be
/// there, while the emulation's kubelet and ReplicaSet controller may still
/// change pods after the record caught up and before the plugin stopped. That
/// the record reached the server's end is the caller's wait ([`caught_up`]).
pub fn assert_record_matches_server(record: &[Logged], server: &BTreeMap<String, Vec<(String, u64)>>) {
    let last_seen = record.iter().map(|logged| logged.rv).max().unwrap_or(0);
    let server: BTreeMap<&str, Vec<(String, u64)>> = server
        .iter()
        .filter_map(|(key, changes)| {
            let seen: Vec<_> = changes.iter().filter(|(_, rv)| *rv <= last_seen).cloned().collect();
            (!seen.is_empty()).then_some((key.as_str(), seen))
        })
        .collect();
    let mut per_key: BTreeMap<&str, Vec<&Logged>> = BTreeMap::new();
    for logged in record {
        per_key.entry(&logged.key).or_default().push(logged);
    }
    for (key, seen) in &per_key {
        let changes = server
            .get(*key)
            .unwrap_or_else(|| panic!("{key}: never changed on the server"));
        let first = seen[0];
        let start = changes
            .iter()
            .position(|(_, rv)| *rv == first.rv)
            .unwrap_or_else(|| panic!("{key}: rv {} is no change of the server: {changes:?}", first.rv));
        let (expected, live): (&[(String, u64)], &[&Logged]) = if first.initial {
            assert_eq!(first.delta, "Added", "{key}: {first:?}");
            (&changes[start + 1..], &seen[1..])
        } else {
            (&changes[start..], &seen[..])
        };
        assert!(live.iter().all(|logged| !logged.initial), "{key}: {seen:?}");
        let live: Vec<(String, u64)> = live.iter().map(|l| (l.delta.clone(), l.rv)).collect();
        assert_eq!(live, expected, "{key}: the plugin's changes differ from the server's");
    }
    let first_live = record
        .iter()
        .filter(|l| !l.initial)
        .map(|l| l.rv)
        .min()
        .unwrap_or(u64::MAX);
    for (key, changes) in &server {
        if changes.iter().any(|(_, rv)| *rv >= first_live) {
            assert!(
                per_key.contains_key(key),
                "{key}: changed after rv {first_live} but never delivered"
            );
        }
    }
}

/// Waits until a plugin's record holds the server's latest change of `resource`.
pub async fn caught_up(server: &ApiServer, resource: &ResourceId, mut record: impl FnMut() -> Vec<Logged>) {
    // The emulation's controllers may still change objects after the
    // workload stops: the last change is read again at each look.
    let last = || {
        server_changes(server, resource)
            .values()
            .flatten()
            .map(|(_, rv)| *rv)
            .max()
            .unwrap()
    };
    until(
        "the plugin to reach the server's last change",
        Duration::from_secs(20),
        || {
            let last = last();
            record().iter().any(|logged| logged.rv == last)
        },
    )
    .await;
}

/// GET `path` from a status address over HTTP/1.0: the status code and the
/// body; `None` while nothing answers there.
pub async fn http_get(address: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// A record of deltas spanning versions of a plugin, split into generations:
/// each starts with the initial list its version received.
#[derive(Debug)]
pub struct Generations {
    /// How many generations the record holds.
    pub count: usize,
    /// The labels of the versions' stretches, in order.
    pub stretches: Vec<String>,
    /// The first generation's initial list, then every live delta of every
    /// generation: one record, to check against the server.
    pub combined: Vec<Logged>,
}

impl Generations {
    /// Splits `record` (each delta with the label of the version that logged
    /// it) and asserts what a swap promises: each generation is one version's
    /// contiguous stretch; each initial list is exactly the state its
    /// predecessor had been handed, and the live deltas go on where the
    /// predecessor stopped.
    pub fn of(record: &[(String, Logged)]) -> Self {
        let starts: Vec<usize> = (0..record.len())
            .filter(|&i| record[i].1.initial && (i == 0 || !record[i - 1].1.initial))
            .collect();
        let mut state: BTreeMap<String, u64> = BTreeMap::new();
        let mut combined: Vec<Logged> = Vec::new();
        let mut stretches: Vec<String> = Vec::new();
        for (n, &start) in starts.iter().enumerate() {
            let end = starts.get(n + 1).copied().unwrap_or(record.len());
            let generation = &record[start..end];
            let label = &generation[0].0;
            assert!(
                generation.iter().all(|(other, _)| other == label),
                "versions interleaved: {generation:?}"
            );
            if stretches.last() != Some(label) {
                assert!(!stretches.contains(label), "{label} handled deltas in two stretches");
                stretches.push(label.clone());
            }
            let initial: BTreeMap<String, u64> = generation
                .iter()
                .take_while(|(_, logged)| logged.initial)
                .map(|(_, logged)| (logged.key.clone(), logged.rv))
                .collect();
            if n == 0 {
                combined.extend(generation.iter().take_while(|(_, l)| l.initial).map(|(_, l)| l.clone()));
                state.clone_from(&initial);
            } else {
                assert_eq!(initial, state, "{label} did not start from its predecessor's state");
            }
            for (_, logged) in generation.iter().skip(initial.len()) {
                assert!(!logged.initial, "{label}: {logged:?}");
                if logged.delta == "Deleted" {
                    state.remove(&logged.key);
                } else {
                    state.insert(logged.key.clone(), logged.rv);
                }
                combined.push(logged.clone());
            }
        }
        Self {
            count: starts.len(),
            stretches,
            combined,
        }
    }
}
