//! Fault injection: the failures a real API server and network produce, on demand.
//!
//! Every fault is counted, so a test can assert that what it injected happened.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

/// The fault switches and counters of one server. Shared by its handlers.
#[derive(Debug)]
pub struct Faults {
    close_watches: watch::Sender<u64>,
    expire_next_watch: AtomicBool,
    fail_remaining: AtomicU64,
    fail_code: AtomicU16,
    hang_watches: watch::Sender<bool>,
    latency_ms: AtomicU64,
    /// Resources (plural names) and where requests on them are forbidden.
    forbidden: std::sync::Mutex<std::collections::BTreeMap<String, Forbidden>>,
    /// Requests refused as forbidden, by resource.
    denied: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// Bearer tokens whose requests hang: clients cut off from the server.
    cut_off: watch::Sender<std::collections::BTreeSet<String>>,
    counts: Counters,
}

#[derive(Debug, Default)]
struct Counters {
    watches_closed: AtomicU64,
    expired_watches: AtomicU64,
    failed_requests: AtomicU64,
    hangs: AtomicU64,
    delayed_requests: AtomicU64,
    held_requests: AtomicU64,
}

/// How many times each fault happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultCounts {
    /// Open watches closed by [`Faults::close_watches`].
    pub watches_closed: u64,
    /// Watches answered with 410 Gone by [`Faults::expire_next_watch`].
    pub expired_watches: u64,
    /// Requests answered with an injected error status (or forbidden).
    pub failed_requests: u64,
    /// Times watches were hung by [`Faults::hang_watches`].
    pub hangs: u64,
    /// Requests delayed by injected latency.
    pub delayed_requests: u64,
    /// Requests held because their client was cut off ([`Faults::cut_off`]).
    pub held_requests: u64,
}

/// Where requests on a resource are forbidden.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Forbidden {
    Everywhere,
    /// In these namespaces, and across all namespaces.
    In(std::collections::BTreeSet<String>),
    /// Everywhere but in these namespaces.
    OutsideOf(std::collections::BTreeSet<String>),
}

impl Forbidden {
    fn forbids(&self, namespace: Option<&str>) -> bool {
        match (self, namespace) {
            (Self::Everywhere, _) | (Self::In(_) | Self::OutsideOf(_), None) => true,
            (Self::In(namespaces), Some(namespace)) => namespaces.contains(namespace),
            (Self::OutsideOf(namespaces), Some(namespace)) => !namespaces.contains(namespace),
        }
    }
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            close_watches: watch::channel(0).0,
            expire_next_watch: AtomicBool::new(false),
            fail_remaining: AtomicU64::new(0),
            fail_code: AtomicU16::new(500),
            hang_watches: watch::channel(false).0,
            latency_ms: AtomicU64::new(0),
            forbidden: std::sync::Mutex::default(),
            denied: std::sync::Mutex::default(),
            cut_off: watch::channel(std::collections::BTreeSet::new()).0,
            counts: Counters::default(),
        }
    }
}

impl Faults {
    /// Closes every open watch, as a restarting server or a dropped connection does.
    pub fn close_watches(&self) {
        let open = self.close_watches.receiver_count() as u64;
        self.counts.watches_closed.fetch_add(open, Ordering::Relaxed);
        self.close_watches.send_modify(|generation| *generation += 1);
    }

    /// Answers the next watch request with a 410 Gone `ERROR` event.
    pub fn expire_next_watch(&self) {
        self.expire_next_watch.store(true, Ordering::SeqCst);
    }

    /// Answers the next `count` API requests with `code` (429 or 500).
    pub fn fail_next_requests(&self, count: u64, code: u16) {
        self.fail_code.store(code, Ordering::SeqCst);
        self.fail_remaining.store(count, Ordering::SeqCst);
    }

    /// Hangs (`true`) or resumes (`false`) every watch: a hung watch stays open but
    /// sends nothing, not even bookmarks.
    pub fn hang_watches(&self, hang: bool) {
        if hang && !*self.hang_watches.borrow() {
            self.counts.hangs.fetch_add(1, Ordering::Relaxed);
        }
        self.hang_watches.send_replace(hang);
    }

    /// Answers every request on `resource` (a plural name, `configmaps`) with
    /// 403 Forbidden, as a server whose RBAC denies the client that resource
    /// does; `allow` lifts it.
    pub fn forbid(&self, resource: &str) {
        self.forbidden_set().insert(resource.to_owned(), Forbidden::Everywhere);
    }

    /// Answers requests on `resource` in `namespace` with 403 Forbidden, as
    /// RBAC does for a client whose Roles leave that namespace out; requests
    /// across all namespaces are forbidden with it, as RBAC forbids them to a
    /// client that may not read every namespace.
    pub fn forbid_in(&self, resource: &str, namespace: &str) {
        let mut forbidden = self.forbidden_set();
        let entry = forbidden
            .entry(resource.to_owned())
            .or_insert_with(|| Forbidden::In(std::collections::BTreeSet::new()));
        if let Forbidden::In(namespaces) = entry {
            namespaces.insert(namespace.to_owned());
        }
    }

    /// Allows requests on `resource` only in `namespaces`, as a client bound
    /// by RoleBindings in those namespaces alone is: cluster-wide requests
    /// and requests in any other namespace are forbidden.
    pub fn confine<'a>(&self, resource: &str, namespaces: impl IntoIterator<Item = &'a str>) {
        let namespaces = namespaces.into_iter().map(str::to_owned).collect();
        self.forbidden_set()
            .insert(resource.to_owned(), Forbidden::OutsideOf(namespaces));
    }

    /// Lifts [`Faults::forbid`], [`Faults::forbid_in`] and [`Faults::confine`]
    /// of `resource`.
    pub fn allow(&self, resource: &str) {
        self.forbidden_set().remove(resource);
    }

    /// How many requests on `resource` were refused as forbidden.
    #[must_use]
    pub fn denied(&self, resource: &str) -> u64 {
        self.denied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(resource)
            .copied()
            .unwrap_or_default()
    }

    fn forbidden_set(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, Forbidden>> {
        self.forbidden.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a request on `resource` in `namespace` (`None`: across all
    /// namespaces, or a cluster-scoped resource) would be forbidden, as an
    /// access review asks; nothing is counted.
    pub(crate) fn forbids(&self, resource: &str, namespace: Option<&str>) -> bool {
        self.forbidden_set()
            .get(resource)
            .is_some_and(|rule| rule.forbids(namespace))
    }

    /// Whether a request on `resource` in `namespace` (`None`: across all
    /// namespaces, or a cluster-scoped resource) is forbidden, counted as a
    /// failed request when it is.
    pub(crate) fn is_forbidden(&self, resource: &str, namespace: Option<&str>) -> bool {
        let forbidden = self.forbids(resource, namespace);
        if forbidden {
            self.counts.failed_requests.fetch_add(1, Ordering::Relaxed);
            *self
                .denied
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(resource.to_owned())
                .or_default() += 1;
        }
        forbidden
    }

    /// Cuts off (`true`) or reconnects (`false`) the client that sends
    /// `Authorization: Bearer TOKEN`, as a network partition between it and
    /// the server does: each of its requests hangs, unanswered, until the
    /// client gives up or the cut is lifted (its watches already open go on).
    pub fn cut_off(&self, token: &str, cut: bool) {
        self.cut_off.send_modify(|tokens| {
            if cut {
                tokens.insert(token.to_owned());
            } else {
                tokens.remove(token);
            }
        });
    }

    /// Holds a request of `token` while that client is cut off.
    pub(crate) async fn hold_if_cut_off(&self, token: &str) {
        let mut cut = self.cut_off.subscribe();
        if cut.borrow().contains(token) {
            self.counts.held_requests.fetch_add(1, Ordering::Relaxed);
            let _ = cut.wait_for(|tokens| !tokens.contains(token)).await;
        }
    }

    /// Delays every response by `latency`.
    pub fn set_latency(&self, latency: Duration) {
        self.latency_ms.store(latency.as_millis() as u64, Ordering::SeqCst);
    }

    /// The counters.
    #[must_use]
    pub fn counts(&self) -> FaultCounts {
        let c = &self.counts;
        FaultCounts {
            watches_closed: c.watches_closed.load(Ordering::Relaxed),
            expired_watches: c.expired_watches.load(Ordering::Relaxed),
            failed_requests: c.failed_requests.load(Ordering::Relaxed),
            hangs: c.hangs.load(Ordering::Relaxed),
            delayed_requests: c.delayed_requests.load(Ordering::Relaxed),
            held_requests: c.held_requests.load(Ordering::Relaxed),
        }
    }

    /// The latency to add to this request, counted when non-zero.
    pub(crate) fn take_latency(&self) -> Option<Duration> {
        let ms = self.latency_ms.load(Ordering::SeqCst);
        (ms > 0).then(|| {
            self.counts.delayed_requests.fetch_add(1, Ordering::Relaxed);
            Duration::from_millis(ms)
        })
    }

    /// The status code to fail this request with, if a failure is pending.
    pub(crate) fn take_failure(&self) -> Option<u16> {
        self.fail_remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()
            .map(|_| {
                self.counts.failed_requests.fetch_add(1, Ordering::Relaxed);
                self.fail_code.load(Ordering::SeqCst)
            })
    }

    /// Whether this watch must answer 410 Gone.
    pub(crate) fn take_expiry(&self) -> bool {
        let expire = self.expire_next_watch.swap(false, Ordering::SeqCst);
        if expire {
            self.counts.expired_watches.fetch_add(1, Ordering::Relaxed);
        }
        expire
    }

    /// A receiver that changes when watches must close.
    pub(crate) fn closing(&self) -> watch::Receiver<u64> {
        self.close_watches.subscribe()
    }

    /// A receiver of the hang switch.
    pub(crate) fn hanging(&self) -> watch::Receiver<bool> {
        self.hang_watches.subscribe()
    }
}
