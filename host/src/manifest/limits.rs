//! A plugin's limits and failure policy, with their defaults.
//!
//! Each limit is one row of the table below: its `Limits` field and type, its
//! manifest key, its unit, its default and the range a manifest may set, in
//! the manifest's units. The field, the manifest key, the default and the
//! range check are all made from that row. The operator sets them in the
//! plugin's manifest ([`crate::manifest`]); what is not set takes the default.
//!
//! Who enforces them: the plugin instance the call, memory, query and log
//! limits ([`crate::plugin`]); the runtime the queue, batch, failure and
//! loading ones ([`crate::runtime`]); the plugin's writer the write and read
//! ones ([`crate::apiserver`]); its outbound HTTP the `http-*` ones
//! ([`crate::outbound`]).

use std::ops::RangeInclusive;
use std::time::Duration;

use serde::Deserialize;

/// How a manifest's whole number becomes a limit's value.
trait Unit<T> {
    /// The largest number that converts exactly; every row's range ends at
    /// or below it (checked as the table compiles).
    const MAX: u64;
    fn value(number: u64) -> T;
}

/// Milliseconds, to a [`Duration`].
struct Millis;

/// MiB, to bytes.
struct Mib;

/// The number as it is.
struct Plain;

impl Unit<Duration> for Millis {
    const MAX: u64 = u64::MAX;
    fn value(number: u64) -> Duration {
        Duration::from_millis(number)
    }
}

impl Unit<u64> for Mib {
    const MAX: u64 = u64::MAX >> 20;
    fn value(number: u64) -> u64 {
        number << 20
    }
}

impl Unit<usize> for Mib {
    const MAX: u64 = usize::MAX as u64 >> 20;
    fn value(number: u64) -> usize {
        (number << 20) as usize
    }
}

impl Unit<u64> for Plain {
    const MAX: u64 = u64::MAX;
    fn value(number: u64) -> u64 {
        number
    }
}

impl Unit<usize> for Plain {
    const MAX: u64 = usize::MAX as u64;
    fn value(number: u64) -> usize {
        number as usize
    }
}

impl Unit<u32> for Plain {
    const MAX: u64 = u32::MAX as u64;
    fn value(number: u64) -> u32 {
        number as u32
    }
}

/// The value of a key of `[limits]`: its default when the manifest does not
/// set it, refused when it is out of range.
fn read<U: Unit<T>, T>(key: &str, set: Option<u64>, default: u64, range: RangeInclusive<u64>) -> Result<T, String> {
    let number = match set {
        None => default,
        Some(number) => super::in_range("limits", key, number, &range)?,
    };
    Ok(U::value(number))
}

/// Declares the limits, one row each:
/// `field: Type = Unit("manifest-key", default, min..=max);`, the default and
/// the range in the manifest's unit, under the field's doc.
macro_rules! limits {
    ($(
        $(#[doc = $doc:literal])*
        $field:ident: $type:ty = $unit:ident($key:literal, $default:expr, $range:expr);
    )*) => {
        /// A plugin's limits: each field's doc says its manifest key (in
        /// `[limits]`), its default and its range, in the manifest's unit.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Limits {
            $(
                $(#[doc = $doc])*
                #[doc = ""]
                #[doc = concat!(
                    "`", $key, "`: ", stringify!($default), " by default, ", stringify!($range), "."
                )]
                pub $field: $type,
            )*
        }

        impl Default for Limits {
            fn default() -> Self {
                Self { $($field: <$unit as Unit<$type>>::value($default),)* }
            }
        }

        /// The `[limits]` table of a manifest.
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct LimitsFile {
            $(
                #[serde(rename = $key)]
                $field: Option<u64>,
            )*
        }

        impl LimitsFile {
            /// The limits it sets, the defaults for the rest.
            pub(super) fn limits(self) -> Result<Limits, String> {
                Ok(Limits { $($field: read::<$unit, _>($key, self.$field, $default, $range)?,)* })
            }
        }

        // Each default within its range, each range within what its unit
        // converts exactly. (A range from 0 makes its first comparison
        // trivially true.)
        #[allow(unused_comparisons)]
        const _: () = {
            $(
                let range = $range;
                assert!(
                    *range.start() <= $default && $default <= *range.end(),
                    concat!("the default of ", $key, " is out of its range")
                );
                assert!(
                    *range.end() <= <$unit as Unit<$type>>::MAX,
                    concat!("the range of ", $key, " overflows its field")
                );
            )*
        };

        /// Every key of `[limits]` in the manifest's order, with its default
        /// and range, in the manifest's units.
        pub const KEYS: &[(&str, u64, RangeInclusive<u64>)] = &[$(($key, $default, $range),)*];
    };
}

limits! {
    /// The longest one `init` or `handle` call may run.
    call_timeout: Duration = Millis("call-timeout-ms", 1000, 10..=60_000);
    /// The plugin's share of CPU, in thousandths of one core; 1000 is no limit.
    cpu_millicores: u32 = Plain("cpu-millicores", 250, 10..=FULL_CORE_MILLICORES as u64);
    /// The most memory of one instance, in bytes: all its linear memories
    /// and tables, and what the host holds for it (see `plugin::limiter`).
    memory_bytes: usize = Mib("memory-mib", 64, 1..=MAX_MEMORY_MIB);
    /// Objects per cache query.
    query_objects: usize = Plain("query-objects", 1000, 1..=100_000);
    /// Bytes of JSON per cache query.
    query_bytes: usize = Plain("query-bytes", 16 << 20, 1024..=1 << 30);
    /// Log lines per second.
    log_lines_per_second: u32 = Plain("log-lines-per-second", 200, 1..=1_000_000);
    /// Deltas queued per handler before catch-up mode.
    queue_capacity: usize = Plain("queue-capacity", 4096, 1..=1 << 20);
    /// Deltas per `handle` call at most.
    max_batch: usize = Plain("max-batch", 64, 1..=4096);
    /// After a `handle` call, how long the deltas that arrive are gathered
    /// into the next batch before it is handed out. Zero (the default) hands
    /// each out at once, as client-go and kube-rs hand each event to their
    /// handlers, and batches only what queued while a call ran; a window
    /// trades latency for fewer calls, for plugins bound by throughput.
    batch_window: Duration = Millis("batch-window-ms", 0, 0..=100);
    /// Writes to the cluster per second, once the burst is spent.
    writes_per_second: u32 = Plain("writes-per-second", 10, 1..=10_000);
    /// Writes let through at once when the plugin has not written for a while.
    write_burst: u32 = Plain("write-burst", 20, 1..=100_000);
    /// The longest one write may wait for the API server (discovery included).
    write_timeout: Duration = Millis("write-timeout-ms", 10_000, 10..=300_000);
    /// The largest plugin file read, in bytes.
    module_bytes: u64 = Mib("module-mib", 128, 1..=MAX_MODULE_MIB);
    /// The longest a plugin file may take to compile.
    compile_timeout: Duration = Millis("compile-timeout-ms", 120_000, 100..=3_600_000);
    /// The longest the plugin's caches may take to sync when it starts.
    sync_timeout: Duration = Millis("sync-timeout-ms", 120_000, 100..=3_600_000);
    /// Resources the plugin may subscribe to (watched or cached).
    max_subscriptions: usize = Plain("max-subscriptions", 16, 1..=256);
    /// Indexes the plugin may declare.
    max_indexes: usize = Plain("max-indexes", 16, 0..=256);
    /// Instances of the plugin alive at once (the running one, a new version
    /// being started, a restart).
    max_instances: usize = Plain("max-instances", 4, 2..=16);
    /// Uncached reads from the API server per second, once the burst is spent.
    reads_per_second: u32 = Plain("reads-per-second", 5, 1..=10_000);
    /// Uncached reads let through at once after a quiet spell.
    read_burst: u32 = Plain("read-burst", 10, 1..=100_000);
    /// The longest an outbound HTTP request may take to connect (DNS included).
    http_connect_timeout: Duration = Millis("http-connect-timeout-ms", 2000, 10..=60_000);
    /// The longest an outbound HTTP request may take in all, its response body
    /// included; never longer than the call it is made in has left.
    http_timeout: Duration = Millis("http-timeout-ms", 10_000, 10..=300_000);
    /// The largest outbound request body, in bytes.
    http_request_bytes: u64 = Plain("http-request-bytes", 1 << 20, 0..=64 << 20);
    /// The largest response body a plugin may read, in bytes; the rest is cut.
    http_response_bytes: u64 = Plain("http-response-bytes", 1 << 20, 0..=64 << 20);
    /// Outbound HTTP requests per second, once the burst is spent.
    http_requests_per_second: u32 = Plain("http-requests-per-second", 5, 1..=10_000);
    /// Outbound HTTP requests let through at once after a quiet spell.
    http_burst: u32 = Plain("http-burst", 10, 1..=100_000);
    /// Outbound HTTP requests in flight at once.
    http_concurrent: u32 = Plain("http-concurrent", 4, 1..=1024);
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
