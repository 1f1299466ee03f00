//! The connection writes go through, and each plugin's writer: its grant,
//! write bucket and events, the API calls, the audit.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams, Preconditions};
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

use super::WriteError;
use super::discovery::Discovery;
use super::events::{self, EventKey, EventRecorder, EventStep, SPAM_BURST, SPAM_REFILL};
use super::offline::Offline;
use super::request::{Body, EventType, ObjectRef, Prepared, Propagation, WriteRequest, cut};
use crate::grant::{Grant, Verb, WriteMode};
use crate::leader::Leadership;
use crate::limits::Limits;
use crate::rate::TokenBucket;

/// How much of an error message a record and an audit line keep.
const KEPT_MESSAGE_LEN: usize = 512;
/// How much of an object or patch a record keeps.
const KEPT_BODY_LEN: usize = 1024;
/// The longest field manager the API takes.
const MAX_FIELD_MANAGER_LEN: usize = 128;

/// The connection writes go through, shared by every plugin's [`Writer`]: the
/// client, the Tokio runtime that drives it, and the resource types discovery
/// resolved (or, offline, what answers in the server's place). Clones share
/// all of it.
#[derive(Clone)]
pub struct Cluster {
    connection: Connection,
    /// The `reportingInstance` of events: the host's name.
    instance: Arc<str>,
    /// Writes are sent only while this says the replica leads.
    leadership: Leadership,
}

/// Where writes go.
#[derive(Clone)]
enum Connection {
    /// The API server, through kube-rs.
    Api {
        client: kube::Client,
        runtime: tokio::runtime::Handle,
        discovery: Arc<Discovery>,
    },
    /// Nowhere: answered on the calling thread, never sent.
    Offline(Arc<Offline>),
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Writes through `client`, driven by the current Tokio runtime.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime.
    #[must_use]
    pub fn new(client: kube::Client) -> Self {
        Self::with_runtime(client, tokio::runtime::Handle::current())
    }

    /// Writes through `client`, driven by `runtime`.
    #[must_use]
    pub fn with_runtime(client: kube::Client, runtime: tokio::runtime::Handle) -> Self {
        Self::over(Connection::Api {
            client,
            runtime,
            discovery: Arc::default(),
        })
    }

    /// A cluster with no API server: every write its writers admit is
    /// answered by `offline` and never sent, and nothing waits (no runtime,
    /// no timeout, no leader). Their records keep whole bodies.
    #[must_use]
    pub fn offline(offline: Offline) -> Self {
        Self::over(Connection::Offline(Arc::new(offline)))
    }

    fn over(connection: Connection) -> Self {
        Self {
            connection,
            instance: "kinformer".into(),
            leadership: Leadership::always(),
        }
    }

    /// Names this host in the Events its writers record
    /// (`reportingInstance`), e.g. the pod's name; `kinformer` by default. A
    /// name that is empty, over 128 bytes or not printable ASCII is ignored.
    #[must_use]
    pub fn with_instance(mut self, instance: &str) -> Self {
        if !instance.is_empty() && instance.len() <= 128 && instance.chars().all(|c| c.is_ascii_graphic()) {
            self.instance = instance.into();
        }
        self
    }

    /// Sends writes only while `leadership` says this replica leads; others
    /// are refused as [`WriteError::Unavailable`] without being sent.
    #[must_use]
    pub fn with_leadership(mut self, leadership: Leadership) -> Self {
        self.leadership = leadership;
        self
    }

    /// The writer of plugin `plugin`: its grant, its write limits and mode;
    /// `observer` sees a record of every write it is asked for.
    #[must_use]
    pub fn writer(
        &self,
        plugin: &str,
        grant: Grant,
        limits: &Limits,
        mode: WriteMode,
        observer: Option<WriteObserver>,
    ) -> Writer {
        let field_manager: String = plugin
            .chars()
            .map(|c| if c.is_ascii_graphic() { c } else { '-' })
            .take(MAX_FIELD_MANAGER_LEN)
            .collect();
        Writer {
            inner: Arc::new(WriterInner {
                cluster: self.clone(),
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
            }),
        }
    }
}

/// Sees the record of every write a writer is asked for, on the thread that
/// asked. Keep it cheap.
pub type WriteObserver = Arc<dyn Fn(&WriteRecord) + Send + Sync>;

/// One write a plugin asked for and how it ended, as the audit line says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteRecord {
    /// `create`, `update`, `patch`, `apply` or `delete` (an event is a create
    /// or, when it repeats, a patch of an Event).
    pub verb: &'static str,
    /// `apiVersion/Kind[/subresource]`.
    pub resource: String,
    /// The object's key, `namespace/name` or `name`.
    pub key: String,
    /// `ok`, or the kind of error (`denied`, `throttled`, ...).
    pub outcome: &'static str,
    /// The error's message, cut short.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Sent with `dryRun=All`.
    pub dry_run: bool,
    /// The object or patch sent (or that would have been), cut at 1 KiB
    /// (whole for an [offline](Cluster::offline) cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

impl WriteRecord {
    /// True when the write was done (or, in dry run, validated).
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.outcome == "ok"
    }
}

/// One plugin's way to the cluster: every write checked against its grant,
/// rate-limited, sent, audited. Clones share the bucket and the events.
#[derive(Clone)]
pub struct Writer {
    inner: Arc<WriterInner>,
}

struct WriterInner {
    cluster: Cluster,
    plugin: String,
    field_manager: String,
    /// The `reportingController` of its events.
    controller: String,
    grant: Grant,
    timeout: Duration,
    dry_run: bool,
    rate: u32,
    bucket: Mutex<TokenBucket>,
    events: Mutex<EventRecorder>,
    observer: Option<WriteObserver>,
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

/// What a write sends, for the audit: verb, resource, key and body.
struct Audited {
    verb: &'static str,
    resource: String,
    key: String,
    body: Option<String>,
}

impl Writer {
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
        let audited = Audited {
            verb: verb.as_str(),
            resource: prepared.target.resource(),
            key: prepared.target.key(),
            body: self.kept(prepared.text.as_deref()),
        };
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

    /// Records an `events.k8s.io/v1` Event about `regarding` in its namespace
    /// (`default` for a cluster-scoped object), as `kinformer/<plugin>`. A
    /// repeat within ten minutes of the last patches the Event's series
    /// instead; more than 25 events about one object, then more than one per
    /// five minutes, are throttled. Needs `create` on `events.k8s.io/v1/Event`.
    ///
    /// # Errors
    ///
    /// As [`Writer::write`].
    pub async fn record_event(
        &self,
        regarding: ObjectRef,
        event_type: EventType,
        reason: String,
        action: String,
        note: String,
    ) -> Result<(), WriteError> {
        let key = match EventKey::new(regarding.clone(), event_type, reason, action, note) {
            Ok(key) => key,
            Err(error) => {
                let audited = Audited {
                    verb: "create",
                    resource: "events.k8s.io/v1/Event".into(),
                    key: cut(&regarding.key(), 80).to_owned(),
                    body: None,
                };
                return self.audit(audited, Err(error));
            }
        };
        let namespace = key.namespace().to_owned();
        let events = ObjectRef::new(
            GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            Some(&namespace),
            "",
        );
        if let Err(error) = self.admit(Verb::Create, &events) {
            let audited = Audited {
                verb: "create",
                resource: events.resource(),
                key: format!("{namespace}/"),
                body: None,
            };
            return self.audit(audited, Err(error));
        }
        let started = Instant::now();
        let step = self.events().step(&key, started);
        let (name, count) = match step {
            EventStep::Throttled => {
                let error = WriteError::Throttled(format!(
                    "more than {SPAM_BURST} events about {}, then more than one per {} minutes",
                    key.regarding.key(),
                    SPAM_REFILL.as_secs() / 60
                ));
                let audited = Audited {
                    verb: "create",
                    resource: events.resource(),
                    key: format!("{namespace}/"),
                    body: None,
                };
                return self.audit(audited, Err(error));
            }
            EventStep::Create => (None, 1),
            EventStep::Bump { name, count } => (Some(name), count),
        };
        if let Some(name) = name {
            let now = Timestamp::now();
            let mut target = events.clone();
            target.name = name;
            let patch = events::series_patch(count, now);
            let prepared = Prepared {
                verb: Verb::Patch,
                target: target.clone(),
                force: false,
                text: Some(patch.to_string()),
                body: Body::Merge(patch),
            };
            let result = self.timed(self.send(&prepared)).await;
            match result {
                Err(WriteError::NotFound(_)) => self.events().forget(&key),
                result => {
                    if result.is_ok() {
                        self.events().bumped(&key, count, started);
                    }
                    let audited = Audited {
                        verb: "patch",
                        resource: target.resource(),
                        key: target.key(),
                        body: self.kept(prepared.text.as_deref()),
                    };
                    return self.audit(audited, result.map(|_| ()));
                }
            }
        }
        let now = Timestamp::now();
        let mut target = events;
        target.name = events::event_name(&key.regarding.name, now);
        let event = events::new_event(
            &key,
            &target.name,
            &self.inner.controller,
            &self.inner.cluster.instance,
            now,
        );
        let prepared = Prepared {
            verb: Verb::Create,
            target: target.clone(),
            force: false,
            text: Some(event.to_string()),
            body: Body::Object(event),
        };
        let result = self.timed(self.send(&prepared)).await;
        if result.is_ok() && !self.inner.dry_run {
            self.events().created(&key, &target.name, started);
        }
        let audited = Audited {
            verb: "create",
            resource: target.resource(),
            key: target.key(),
            body: self.kept(prepared.text.as_deref()),
        };
        self.audit(audited, result.map(|_| ()))
    }

    /// [`Writer::record_event`], waiting on the runtime: for a thread that is
    /// not one of its async tasks, such as a plugin's worker.
    ///
    /// # Errors
    ///
    /// As [`Writer::record_event`].
    ///
    /// # Panics
    ///
    /// When called from an async task.
    pub fn record_event_blocking(
        &self,
        regarding: ObjectRef,
        event_type: EventType,
        reason: String,
        action: String,
        note: String,
    ) -> Result<(), WriteError> {
        let writer = self.clone();
        self.wait_for(async move { writer.record_event(regarding, event_type, reason, action, note).await })
    }

    /// Runs `write` as a task of the runtime and waits for its answer. The
    /// calling thread sleeps until the write is done and is woken once;
    /// polling the request itself (`Handle::block_on`), it would be woken at
    /// each step of the exchange, which shows in the benchmark's row 9.
    ///
    /// Offline, nothing waits: the write is done on the calling thread.
    fn wait_for<T: Send + 'static>(
        &self,
        write: impl Future<Output = Result<T, WriteError>> + Send + 'static,
    ) -> Result<T, WriteError> {
        let runtime = match &self.inner.cluster.connection {
            Connection::Api { runtime, .. } => runtime,
            Connection::Offline(_) => {
                let mut write = std::pin::pin!(write);
                let mut context = std::task::Context::from_waker(std::task::Waker::noop());
                return match write.as_mut().poll(&mut context) {
                    std::task::Poll::Ready(answer) => answer,
                    std::task::Poll::Pending => Err(WriteError::Unavailable(
                        "an offline write waited for something: a host bug".into(),
                    )),
                };
            }
        };
        let (answer, answered) = tokio::sync::oneshot::channel();
        runtime.spawn(async move {
            let _ = answer.send(write.await);
        });
        answered
            .blocking_recv()
            .unwrap_or_else(|_| Err(WriteError::Unavailable("the host is shutting down".into())))
    }

    /// The body as the write's record keeps it: cut at [`KEPT_BODY_LEN`],
    /// whole offline.
    fn kept(&self, text: Option<&str>) -> Option<String> {
        let text = text?;
        let limit = match self.inner.cluster.connection {
            Connection::Api { .. } => KEPT_BODY_LEN,
            Connection::Offline(_) => usize::MAX,
        };
        let kept = cut(text, limit);
        Some(if kept.len() < text.len() {
            format!("{kept}…")
        } else {
            kept.to_owned()
        })
    }

    fn events(&self) -> std::sync::MutexGuard<'_, EventRecorder> {
        self.inner.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Leadership, the grant, then the bucket: nothing is sent by a replica
    /// that does not lead or outside the grant, and a write over the rate is
    /// refused at once.
    fn admit(&self, verb: Verb, target: &ObjectRef) -> Result<(), WriteError> {
        let inner = &self.inner;
        if !inner.cluster.leadership.is_leading() {
            return Err(WriteError::Unavailable(
                "this replica is not the leader: its writes are held".to_owned(),
            ));
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
        let taken = inner
            .bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_take(Instant::now());
        if taken {
            Ok(())
        } else {
            Err(WriteError::Throttled(format!(
                "over this plugin's rate of {} writes per second",
                inner.rate
            )))
        }
    }

    /// `send` under the write timeout, abandoned (its request cancelled) if
    /// this replica stops leading meanwhile.
    async fn timed<T>(&self, send: impl Future<Output = Result<T, WriteError>>) -> Result<T, WriteError> {
        if let Connection::Offline(_) = self.inner.cluster.connection {
            return send.await;
        }
        let timeout = self.inner.timeout;
        let mut leadership = self.inner.cluster.leadership.clone();
        tokio::select! {
            sent = tokio::time::timeout(timeout, send) => sent.unwrap_or_else(|_| {
                Err(WriteError::Unavailable(format!(
                    "no answer from the API server within {} ms",
                    timeout.as_millis()
                )))
            }),
            () = leadership.lost() => Err(WriteError::Unavailable(
                "this replica stopped leading: the write was abandoned".to_owned(),
            )),
        }
    }

    /// Sends a prepared write; the object as stored, as the server wrote it
    /// (`None` for a delete).
    async fn send(&self, prepared: &Prepared) -> Result<Option<String>, WriteError> {
        let inner = &self.inner;
        let (client, discovery) = match &inner.cluster.connection {
            Connection::Api { client, discovery, .. } => (client, discovery),
            Connection::Offline(offline) => return offline.answer(prepared),
        };
        let target = &prepared.target;
        let resource = discovery.resolve(client, target).await?;
        let request = kube::core::Request::new(<DynamicObject as kube::Resource>::url_path(
            &resource,
            target.namespace.as_deref(),
        ));
        let post = PostParams {
            dry_run: inner.dry_run,
            field_manager: Some(inner.field_manager.clone()),
        };
        let patch_params = |force: bool| PatchParams {
            dry_run: inner.dry_run,
            force,
            field_manager: Some(inner.field_manager.clone()),
            field_validation: None,
        };
        let name = target.name.as_str();
        let subresource = target.subresource.as_deref();
        let built = match (&prepared.body, prepared.verb) {
            (Body::Object(object), Verb::Create) => request.create(&post, dynamic(object)?),
            (Body::Object(object), Verb::Update) => match subresource {
                None => request.replace(name, &post, dynamic(object)?),
                Some(subresource) => request.replace_subresource(subresource, name, &post, object.to_string().into()),
            },
            (Body::Object(object), Verb::Apply) => patch(
                &request,
                subresource,
                name,
                &patch_params(prepared.force),
                &Patch::Apply(object),
            ),
            (Body::Merge(merge), _) => patch(&request, subresource, name, &patch_params(false), &Patch::Merge(merge)),
            (Body::Json(json), _) => patch(
                &request,
                subresource,
                name,
                &patch_params(false),
                &Patch::<Value>::Json(json.clone()),
            ),
            (Body::Delete(options), _) => {
                let params = DeleteParams {
                    dry_run: inner.dry_run,
                    preconditions: (options.uid.is_some() || options.resource_version.is_some()).then(|| {
                        Preconditions {
                            uid: options.uid.clone(),
                            resource_version: options.resource_version.clone(),
                        }
                    }),
                    propagation_policy: options.propagation.map(|propagation| match propagation {
                        Propagation::Orphan => kube::api::PropagationPolicy::Orphan,
                        Propagation::Background => kube::api::PropagationPolicy::Background,
                        Propagation::Foreground => kube::api::PropagationPolicy::Foreground,
                    }),
                    ..DeleteParams::default()
                };
                request.delete(name, &params)
            }
            (Body::Object(_), Verb::Patch | Verb::Delete) => {
                return Err(WriteError::Invalid("an object is not a patch".into()));
            }
        };
        let mut built = built.map_err(|error| WriteError::Invalid(error.to_string()))?;
        // What kube's own `Api` methods tag their requests with, for its tracing.
        built.extensions_mut().insert(prepared.verb.as_str());
        // The answer is handed on as the server wrote it: no parse, no re-serialisation.
        let stored = client
            .request_text(built)
            .await
            .map_err(|error| WriteError::from_kube(&error))?;
        Ok((prepared.verb != Verb::Delete).then_some(stored))
    }

    /// Logs the audit line and tells the observer.
    fn audit<T>(&self, audited: Audited, result: Result<T, WriteError>) -> Result<T, WriteError> {
        let inner = &self.inner;
        let record = WriteRecord {
            verb: audited.verb,
            resource: audited.resource,
            key: audited.key,
            outcome: result.as_ref().map_or_else(WriteError::kind, |_| "ok"),
            message: result
                .as_ref()
                .err()
                .map(|error| cut(error.message(), KEPT_MESSAGE_LEN).to_owned()),
            dry_run: inner.dry_run,
            body: audited.body,
        };
        match &record.message {
            None => tracing::info!(
                target: "kinformer::audit",
                plugin = %inner.plugin,
                verb = record.verb,
                resource = %record.resource,
                key = %record.key,
                outcome = record.outcome,
                dry_run = record.dry_run,
                "write"
            ),
            Some(message) => tracing::info!(
                target: "kinformer::audit",
                plugin = %inner.plugin,
                verb = record.verb,
                resource = %record.resource,
                key = %record.key,
                outcome = record.outcome,
                dry_run = record.dry_run,
                error = %message,
                "write"
            ),
        }
        if let Some(observer) = &inner.observer {
            observer(&record);
        }
        result
    }
}

/// The bytes of an object to create or replace, its metadata checked first
/// (as kube's typed `Api` would).
fn dynamic(object: &Value) -> Result<Vec<u8>, WriteError> {
    serde::Deserialize::deserialize(object)
        .map(|_: DynamicObject| object.to_string().into_bytes())
        .map_err(|error| WriteError::Invalid(format!("the object's metadata is malformed: {error}")))
}

/// The request patching an object or its subresource.
fn patch<P: Serialize + std::fmt::Debug>(
    request: &kube::core::Request,
    subresource: Option<&str>,
    name: &str,
    params: &PatchParams,
    patch: &Patch<P>,
) -> Result<http::Request<Vec<u8>>, kube::core::request::Error> {
    match subresource {
        None => request.patch(name, params, patch),
        Some(subresource) => request.patch_subresource(subresource, name, params, patch),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::{Scope, WriteRule};

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
