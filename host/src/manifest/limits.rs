//! A plugin's limits and failure policy, with their defaults.
//!
//! The operator sets them in the plugin's manifest ([`crate::manifest`]); what
//! is not set takes the default written here, once. The plugin instance enforces
//! the call, memory, query and log limits ([`crate::plugin`]); the runtime the
//! queue, batch, failure and loading ones ([`crate::runtime`]); the plugin's
//! writer the write and read ones ([`crate::apiserver`]); its outbound HTTP the
//! `http-*` ones ([`crate::outbound`]).

use std::time::Duration;

use serde::Deserialize;

/// A plugin's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest one `init` or `handle` call may run.
    pub call_timeout: Duration,
    /// The plugin's share of CPU, in thousandths of one core; 1000 is no limit.
    pub cpu_millicores: u32,
    /// The most memory of one instance, in bytes: all its linear memories
    /// and tables, and what the host holds for it (see `plugin::limiter`).
    pub memory_bytes: usize,
    /// Objects per cache query.
    pub query_objects: usize,
    /// Bytes of JSON per cache query.
    pub query_bytes: usize,
    /// Log lines per second.
    pub log_lines_per_second: u32,
    /// Deltas queued per handler before catch-up mode.
    pub queue_capacity: usize,
    /// Deltas per `handle` call at most.
    pub max_batch: usize,
    /// After a `handle` call, how long the deltas that arrive are gathered
    /// into the next batch before it is handed out. Zero (the default) hands
    /// each out at once, as client-go and kube-rs hand each event to their
    /// handlers, and batches only what queued while a call ran; a window
    /// trades latency for fewer calls, for plugins bound by throughput.
    pub batch_window: Duration,
    /// Writes to the cluster per second, once the burst is spent.
    pub writes_per_second: u32,
    /// Writes let through at once when the plugin has not written for a while.
    pub write_burst: u32,
    /// The longest one write may wait for the API server (discovery included).
    pub write_timeout: Duration,
    /// The largest plugin file read, in bytes.
    pub module_bytes: u64,
    /// The longest a plugin file may take to compile.
    pub compile_timeout: Duration,
    /// The longest the plugin's caches may take to sync when it starts.
    pub sync_timeout: Duration,
    /// Resources the plugin may subscribe to (watched or cached).
    pub max_subscriptions: usize,
    /// Indexes the plugin may declare.
    pub max_indexes: usize,
    /// Instances of the plugin alive at once (the running one, a new version
    /// being started, a restart).
    pub max_instances: usize,
    /// Uncached reads from the API server per second, once the burst is spent.
    pub reads_per_second: u32,
    /// Uncached reads let through at once after a quiet spell.
    pub read_burst: u32,
    /// The longest an outbound HTTP request may take to connect (DNS included).
    pub http_connect_timeout: Duration,
    /// The longest an outbound HTTP request may take in all, its response body
    /// included; never longer than the call it is made in has left.
    pub http_timeout: Duration,
    /// The largest outbound request body, in bytes.
    pub http_request_bytes: u64,
    /// The largest response body a plugin may read, in bytes; the rest is cut.
    pub http_response_bytes: u64,
    /// Outbound HTTP requests per second, once the burst is spent.
    pub http_requests_per_second: u32,
    /// Outbound HTTP requests let through at once after a quiet spell.
    pub http_burst: u32,
    /// Outbound HTTP requests in flight at once.
    pub http_concurrent: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(1),
            cpu_millicores: 250,
            memory_bytes: 64 << 20,
            query_objects: 1000,
            query_bytes: 16 << 20,
            log_lines_per_second: 200,
            queue_capacity: 4096,
            max_batch: 64,
            batch_window: Duration::ZERO,
            writes_per_second: 10,
            write_burst: 20,
            write_timeout: Duration::from_secs(10),
            module_bytes: 128 << 20,
            compile_timeout: Duration::from_secs(120),
            sync_timeout: Duration::from_secs(120),
            max_subscriptions: 16,
            max_indexes: 16,
            max_instances: 4,
            reads_per_second: 5,
            read_burst: 10,
            http_connect_timeout: Duration::from_secs(2),
            http_timeout: Duration::from_secs(10),
            http_request_bytes: 1 << 20,
            http_response_bytes: 1 << 20,
            http_requests_per_second: 5,
            http_burst: 10,
            http_concurrent: 4,
        }
    }
}

/// What to do with a batch the plugin rejects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// Deliver it again, with backoff, up to `retries` times; then skip it.
    Retry,
    /// Skip it (counted and logged).
    Skip,
}

/// How failures are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailurePolicy {
    /// A batch `handle` returned an error for.
    pub on_error: OnError,
    /// Deliveries of one batch after the first, when retrying.
    pub retries: u32,
    /// The first retry's delay; it doubles per retry.
    pub retry_backoff: Duration,
    /// The first restart's delay after a trap; it doubles per restart, to 30 s.
    pub restart_backoff: Duration,
    /// Traps within the window that quarantine the plugin.
    pub max_restarts: u32,
    /// The window traps are counted in.
    pub restart_window: Duration,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        Self {
            on_error: OnError::Retry,
            retries: 5,
            retry_backoff: Duration::from_millis(100),
            restart_backoff: Duration::from_millis(200),
            max_restarts: 5,
            restart_window: Duration::from_secs(300),
        }
    }
}

/// The longest restart delay.
pub const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(30);

/// A whole core: a CPU share of this much is no limit.
pub const FULL_CORE_MILLICORES: u32 = 1000;

/// The most memory a manifest may grant, in MiB.
pub const MAX_MEMORY_MIB: u64 = 1024;

/// The largest plugin file a manifest may allow, in MiB.
pub const MAX_MODULE_MIB: u64 = 1024;

/// The largest object or patch a plugin may send in one write, in bytes; the
/// API server's own limit on a request body is 3 MiB.
pub const MAX_WRITE_BYTES: usize = 1 << 20;
