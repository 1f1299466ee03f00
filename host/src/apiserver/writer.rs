//! Each plugin's writer: a write validated, admitted (leadership, the grant,
//! the plugin's bucket), sent over the [`Cluster`] and audited.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::WriteError;
use super::audit::{Audited, WriteObserver};
use super::connection::Cluster;
use super::events::{self, EventRecorder};
use super::request::{ObjectRef, Prepared, WriteRequest};
use crate::grant::{Grant, Verb, WriteMode};
use crate::limits::Limits;
use crate::rate::TokenBucket;
use kinformer_informers::Recover as _;

/// The longest field manager the API takes.
const MAX_FIELD_MANAGER_LEN: usize = 128;

/// One plugin's way to the cluster: every write checked against its grant,
/// rate-limited, sent, audited; and its uncached reads ([`Writer::read`]).
/// Clones share the buckets and the events.
#[derive(Clone)]
pub struct Writer {
    pub(super) inner: Arc<WriterInner>,
}

pub(super) struct WriterInner {
    pub(super) cluster: Cluster,
    pub(super) plugin: String,
    pub(super) field_manager: String,
    /// The `reportingController` of its events.
    pub(super) controller: String,
    pub(super) grant: Grant,
    pub(super) timeout: Duration,
    pub(super) dry_run: bool,
    pub(super) rate: u32,
    pub(super) bucket: Mutex<TokenBucket>,
    pub(super) events: Mutex<EventRecorder>,
    pub(super) observer: Option<WriteObserver>,
    /// Uncached reads: their rate, bucket and largest answer.
    pub(super) read_rate: u32,
    pub(super) reads: Mutex<TokenBucket>,
    pub(super) read_bytes: usize,
}

/// Takes a token of `bucket`, or refuses as throttled: over the plugin's
/// `rate` of `what` per second.
pub(super) fn take_token(bucket: &Mutex<TokenBucket>, rate: u32, what: &str) -> Result<(), WriteError> {
    let taken = bucket.lock().recover().try_take(Instant::now());
    if taken {
        Ok(())
    } else {
        Err(WriteError::Throttled(format!(
            "over this plugin's rate of {rate} {what} per second"
        )))
    }
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("plugin", &self.inner.plugin)
            .field("dry_run", &self.inner.dry_run)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// The writer of plugin `plugin` on `cluster` (see [`Cluster::writer`]).
    pub(super) fn new(
        cluster: Cluster,
        plugin: &str,
        grant: Grant,
        limits: &Limits,
        mode: WriteMode,
        observer: Option<WriteObserver>,
    ) -> Self {
        let field_manager: String = plugin
            .chars()
            .map(|c| if c.is_ascii_graphic() { c } else { '-' })
            .take(MAX_FIELD_MANAGER_LEN)
            .collect();
        Self {
            inner: Arc::new(WriterInner {
                cluster,
                plugin: plugin.to_owned(),
                field_manager,
                controller: events::reporting_controller(plugin),
                grant,
                timeout: limits.write_timeout,
                dry_run: mode == WriteMode::DryRun,
                rate: limits.writes_per_second,
                bucket: Mutex::new(TokenBucket::new(
                    f64::from(limits.writes_per_second),
                    limits.write_burst,
                )),
                events: Mutex::default(),
                observer,
                read_rate: limits.reads_per_second,
                reads: Mutex::new(TokenBucket::new(f64::from(limits.reads_per_second), limits.read_burst)),
                read_bytes: limits.query_bytes,
            }),
        }
    }

    /// The plugin's name, its field manager.
    #[must_use]
    pub fn plugin(&self) -> &str {
        &self.inner.plugin
    }

    /// True when writes are sent with `dryRun=All`.
    #[must_use]
    pub fn is_dry_run(&self) -> bool {
        self.inner.dry_run
    }

    /// Writes, and returns the object as stored (`None` for a delete).
    ///
    /// # Errors
    ///
    /// [`WriteError::Invalid`] or [`WriteError::TooLarge`] for a malformed or
    /// oversized request, [`WriteError::Denied`] outside the grant,
    /// [`WriteError::Throttled`] over the plugin's rate, and what the API
    /// server answered ([`WriteError::from_kube`]); [`WriteError::Unavailable`]
    /// when no answer came within the write timeout.
    pub async fn write(&self, request: WriteRequest) -> Result<Option<String>, WriteError> {
        let verb = request.verb();
        let (resource, key) = request.shown_target();
        let prepared = match request.prepare() {
            Ok(prepared) => prepared,
            Err(error) => {
                let audited = Audited {
                    verb: verb.as_str(),
                    resource,
                    key,
                    body: None,
                };
                return self.audit(audited, Err(error));
            }
        };
        let audited = self.audited(&prepared);
        let result = match self.admit(verb, &prepared.target) {
            Ok(()) => self.timed(self.send(&prepared)).await,
            Err(error) => Err(error),
        };
        self.audit(audited, result)
    }

    /// [`Writer::write`], waiting on the runtime: for a thread that is not
    /// one of its async tasks, such as a plugin's worker.
    ///
    /// # Errors
    ///
    /// As [`Writer::write`].
    ///
    /// # Panics
    ///
    /// When called from an async task.
    pub fn write_blocking(&self, request: WriteRequest) -> Result<Option<String>, WriteError> {
        let writer = self.clone();
        self.wait_for(async move { writer.write(request).await })
    }

    /// The body as the write's record keeps it.
    pub(super) fn kept(&self, text: Option<&str>) -> Option<String> {
        self.inner.cluster.kept(text)
    }

    /// The record of a prepared write, before it is sent.
    pub(super) fn audited(&self, prepared: &Prepared) -> Audited {
        Audited {
            verb: prepared.verb.as_str(),
            resource: prepared.target.resource(),
            key: prepared.target.key(),
            body: self.kept(prepared.text.as_deref()),
        }
    }

    /// `send` under the plugin's write timeout.
    pub(super) async fn timed<T>(&self, send: impl Future<Output = Result<T, WriteError>>) -> Result<T, WriteError> {
        let inner = &self.inner;
        inner.cluster.timed(Some(&inner.plugin), inner.timeout, send).await
    }

    /// Sends a prepared write as this plugin.
    pub(super) async fn send(&self, prepared: &Prepared) -> Result<Option<String>, WriteError> {
        let inner = &self.inner;
        inner.cluster.send(prepared, inner.dry_run, &inner.field_manager).await
    }

    /// Runs `write` on the cluster's runtime and waits for its answer.
    pub(super) fn wait_for<T: Send + 'static>(
        &self,
        write: impl Future<Output = Result<T, WriteError>> + Send + 'static,
    ) -> Result<T, WriteError> {
        self.inner.cluster.wait_for(write)
    }

    /// Leadership, the grant, then the bucket: nothing is sent by a replica
    /// that does not lead or outside the grant, and a write over the rate is
    /// refused at once.
    pub(super) fn admit(&self, verb: Verb, target: &ObjectRef) -> Result<(), WriteError> {
        let inner = &self.inner;
        if !inner
            .cluster
            .leadership
            .leads(crate::rollout::lease_group(&inner.plugin))
        {
            return Err(WriteError::Unavailable(format!(
                "this replica is not the leader of plugin {}: its writes are held",
                inner.plugin
            )));
        }
        if !inner.grant.allows_write(
            verb,
            &target.gvk,
            target.subresource.as_deref(),
            target.namespace.as_deref(),
        ) {
            let place = match &target.namespace {
                Some(namespace) => format!("in namespace {namespace}"),
                None => "cluster-wide".to_owned(),
            };
            return Err(WriteError::Denied(format!(
                "{verb} {} {place} is not granted to this plugin",
                target.resource()
            )));
        }
        take_token(&inner.bucket, inner.rate, "writes")
    }
}

#[cfg(test)]
mod tests {
    use kube::api::GroupVersionKind;

    use super::*;
    use crate::apiserver::connection::KEPT_BODY_LEN;
    use crate::apiserver::{EventType, Offline, WriteRecord};
    use crate::grant::{Scope, WriteRule};
    use crate::leader::Leadership;

    /// A cluster whose server never answers: whatever reaches it is
    /// `unavailable`, so the outcome tells how far a write got.
    fn unreachable() -> Cluster {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        Cluster::new(kube::Client::try_from(config).unwrap())
    }

    fn records() -> (WriteObserver, Arc<Mutex<Vec<WriteRecord>>>) {
        let records: Arc<Mutex<Vec<WriteRecord>>> = Arc::default();
        let kept = Arc::clone(&records);
        let observer: WriteObserver = Arc::new(move |record: &WriteRecord| kept.lock().unwrap().push(record.clone()));
        (observer, records)
    }

    fn scale(namespace: &str) -> WriteRequest {
        WriteRequest::Patch {
            target: ObjectRef::new(
                GroupVersionKind::gvk("apps", "v1", "Deployment"),
                Some(namespace),
                "web",
            )
            .subresource("scale"),
            patch_type: super::super::PatchType::Merge,
            patch: r#"{"spec":{"replicas":3}}"#.into(),
        }
    }

    #[tokio::test]
    async fn a_replica_that_does_not_lead_sends_nothing_and_abandons_writes_when_leading_ends() {
        let rule = WriteRule::new([Verb::Patch], ["apps/v1/Deployment/scale"], Scope::only(["shop"])).unwrap();
        let (switch, leadership) = Leadership::manual(false);
        let limits = Limits {
            write_burst: 1,
            writes_per_second: 1,
            ..Limits::default()
        };
        // A server that takes connections and never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", silent.local_addr().unwrap());
        let cluster = Cluster::new(kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap());
        let writer = cluster.with_leadership(leadership).writer(
            "scaler",
            Grant::default().with_writes([rule]),
            &limits,
            WriteMode::Live,
            None,
        );
        let held = writer.write(scale("shop")).await.unwrap_err();
        assert_eq!(held.kind(), "unavailable");
        assert!(held.message().contains("not the leader"), "{held}");
        // Nothing was sent, so no token was taken: the one token of the burst
        // serves the first write once it leads (discovery first), whose answer
        // never comes; it is abandoned when leading ends.
        switch.send_modify(|status| status.leading = true);
        let pending = tokio::spawn({
            let writer = writer.clone();
            async move { writer.write(scale("shop")).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        switch.send_modify(|status| status.leading = false);
        let abandoned = tokio::time::timeout(Duration::from_secs(5), pending)
            .await
            .expect("a write in flight was not abandoned when leading ended")
            .unwrap()
            .unwrap_err();
        assert_eq!(abandoned.kind(), "unavailable");
        assert!(abandoned.message().contains("stopped leading"), "{abandoned}");
    }

    #[tokio::test]
    async fn denied_writes_send_nothing_and_take_no_token_and_the_bucket_throttles_the_rest() {
        let rule = WriteRule::new([Verb::Patch], ["apps/v1/Deployment/scale"], Scope::only(["shop"])).unwrap();
        let limits = Limits {
            writes_per_second: 1,
            write_burst: 2,
            ..Limits::default()
        };
        let (observer, records) = records();
        let writer = unreachable().writer(
            "scaler",
            Grant::default().with_writes([rule]),
            &limits,
            WriteMode::Live,
            Some(observer),
        );
        let mut outcomes = Vec::new();
        for namespace in ["payments", "payments", "shop", "payments", "shop", "shop"] {
            let outcome = match writer.write(scale(namespace)).await {
                Ok(_) => "ok",
                Err(error) => error.kind(),
            };
            outcomes.push(outcome);
        }
        assert_eq!(
            outcomes,
            ["denied", "denied", "unavailable", "denied", "unavailable", "throttled"]
        );
        let records = records.lock().unwrap();
        assert_eq!(records.len(), 6);
        assert_eq!(records[0].resource, "apps/v1/Deployment/scale");
        assert_eq!(records[0].key, "payments/web");
        assert_eq!(
            records[0].message.as_deref(),
            Some("patch apps/v1/Deployment/scale in namespace payments is not granted to this plugin")
        );
        assert_eq!(records[2].body.as_deref(), Some(r#"{"spec":{"replicas":3}}"#));
        assert!(records.iter().all(|record| !record.dry_run && record.verb == "patch"));
    }

    #[test]
    fn an_offline_cluster_answers_what_the_grant_admits_on_the_calling_thread_and_keeps_whole_bodies() {
        let rule = WriteRule::new([Verb::Patch], ["v1/ConfigMap"], Scope::only(["shop"])).unwrap();
        let (observer, records) = records();
        let offline = Cluster::offline(Offline::new(crate::caches::Caches::new(), 0));
        let writer = offline.writer(
            "p",
            Grant::default().with_writes([rule]),
            &Limits::default(),
            WriteMode::Live,
            Some(observer),
        );
        let settings = |namespace: &str| {
            ObjectRef::new(
                GroupVersionKind::gvk("", "v1", "ConfigMap"),
                Some(namespace),
                "settings",
            )
        };
        let long = serde_json::json!({"data": {"big": "x".repeat(4000)}}).to_string();
        let patch = |target: ObjectRef| WriteRequest::Patch {
            target,
            patch_type: super::super::PatchType::Merge,
            patch: long.clone(),
        };
        let stored = writer.write_blocking(patch(settings("shop"))).unwrap().unwrap();
        assert!(stored.contains(&"x".repeat(4000)), "{stored}");
        let denied = writer.write_blocking(patch(settings("kube-system"))).unwrap_err();
        assert_eq!(denied.kind(), "denied");
        let records = records.lock().unwrap();
        assert_eq!(records[0].outcome, "ok");
        assert_eq!(records[0].body.as_deref(), Some(long.as_str()));
        assert_eq!(records[1].outcome, "denied");
    }

    #[tokio::test]
    async fn a_record_keeps_the_first_kilobyte_of_the_body() {
        let (observer, records) = records();
        let writer = unreachable().writer(
            "p",
            Grant::default(),
            &Limits::default(),
            WriteMode::Live,
            Some(observer),
        );
        let long = format!(r#"{{"data":"{}"}}"#, "é".repeat(2000));
        let mut request = scale("shop");
        if let WriteRequest::Patch { patch, .. } = &mut request {
            patch.clone_from(&long);
        }
        assert_eq!(writer.write(request).await.unwrap_err().kind(), "denied");
        let body = records.lock().unwrap()[0].body.clone().unwrap();
        assert!(
            body.len() <= KEPT_BODY_LEN + '…'.len_utf8() && body.ends_with('…'),
            "{body}"
        );
    }

    #[tokio::test]
    async fn events_need_a_grant_to_create_events_in_the_objects_namespace() {
        let pod = ObjectRef::new(GroupVersionKind::gvk("", "v1", "Pod"), Some("shop"), "web-0");
        let node = ObjectRef::new(GroupVersionKind::gvk("", "v1", "Node"), None, "node-1");
        let event = |writer: Writer, regarding: ObjectRef| async move {
            writer
                .record_event(
                    regarding,
                    EventType::Normal,
                    "Seen".into(),
                    "Look".into(),
                    String::new(),
                )
                .await
                .map_err(|error| error.kind())
        };
        let nothing = unreachable().writer("p", Grant::default(), &Limits::default(), WriteMode::Live, None);
        assert_eq!(event(nothing, pod.clone()).await, Err("denied"));
        let rule = WriteRule::new([Verb::Create], ["events.k8s.io/v1/Event"], Scope::only(["shop"])).unwrap();
        let granted = unreachable().writer(
            "p",
            Grant::default().with_writes([rule]),
            &Limits::default(),
            WriteMode::Live,
            None,
        );
        assert_eq!(event(granted.clone(), pod).await, Err("unavailable"));
        // A cluster-scoped object's events live in `default`.
        assert_eq!(event(granted.clone(), node).await, Err("denied"));
        let mut bad = ObjectRef::new(GroupVersionKind::gvk("", "v1", "Pod"), Some("shop"), "web-0");
        bad.name = "../x".into();
        assert_eq!(event(granted, bad).await, Err("invalid"));
    }
}
