//! The connection writes go through, shared by every plugin's writer: the
//! client, the Tokio runtime that drives it, what discovery resolved, and how
//! a prepared write becomes an API request (or, offline, an answer).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use serde::Serialize;
use serde_json::Value;

use super::WriteError;
use super::audit::WriteObserver;
use super::discovery::Discovery;
use super::offline::Offline;
use super::reader::ReadRequest;
use super::request::{Body, Prepared, Propagation, cut};
use super::writer::Writer;
use crate::grant::{Grant, Identity, Verb, WriteMode};
use crate::leader::Leadership;
use crate::limits::Limits;

/// How much of an object or patch a record keeps.
pub(super) const KEPT_BODY_LEN: usize = 1024;

/// The connection writes go through, shared by every plugin's [`Writer`]: the
/// client, the Tokio runtime that drives it, and the resource types discovery
/// resolved (or, offline, what answers in the server's place). Clones share
/// all of it.
#[derive(Clone)]
pub struct Cluster {
    connection: Connection,
    /// The `reportingInstance` of events: the host's name.
    pub(super) instance: Arc<str>,
    /// Writes are sent only while this says the replica leads.
    pub(super) leadership: Leadership,
    /// Whom requests are sent as, when not the host itself.
    identity: Option<Arc<Identity>>,
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
            identity: None,
        }
    }

    /// Sends every request (writes, Events, uncached reads) as `identity`,
    /// by impersonation: the API server's RBAC answers for that user, and
    /// its `403` is the plugin's error, never the host's.
    #[must_use]
    pub fn impersonating(mut self, identity: Identity) -> Self {
        self.identity = Some(Arc::new(identity));
        self
    }

    /// Adds the impersonation headers, when requests go as someone else.
    pub(super) fn sign<B>(&self, request: &mut http::Request<B>) -> Result<(), WriteError> {
        match &self.identity {
            Some(identity) => identity.impersonate(request).map_err(|_| {
                WriteError::Invalid(format!("cannot impersonate {:?}: not a header value", identity.user()))
            }),
            None => Ok(()),
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
        Writer::new(self.clone(), plugin, grant, limits, mode, observer)
    }

    /// Runs `write` as a task of the runtime and waits for its answer. The
    /// calling thread sleeps until the write is done and is woken once;
    /// polling the request itself (`Handle::block_on`), it would be woken at
    /// each step of the exchange, which shows in the benchmark's row 9.
    ///
    /// Offline, nothing waits: the write is done on the calling thread.
    pub(super) fn wait_for<T: Send + 'static>(
        &self,
        write: impl Future<Output = Result<T, WriteError>> + Send + 'static,
    ) -> Result<T, WriteError> {
        let runtime = match &self.connection {
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
        // A plugin's thread: the other plugins go on meanwhile.
        crate::runtime::pool::leave();
        answered
            .blocking_recv()
            .unwrap_or_else(|_| Err(WriteError::Unavailable("the host is shutting down".into())))
    }

    /// The body as the write's record keeps it: cut at [`KEPT_BODY_LEN`],
    /// whole offline.
    pub(super) fn kept(&self, text: Option<&str>) -> Option<String> {
        let text = text?;
        let limit = match self.connection {
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

    /// `send` under `timeout`; a write of the plugin `writer` is abandoned
    /// (its request cancelled) if this replica stops leading it meanwhile.
    pub(super) async fn timed<T>(
        &self,
        writer: Option<&str>,
        timeout: Duration,
        send: impl Future<Output = Result<T, WriteError>>,
    ) -> Result<T, WriteError> {
        if let Connection::Offline(_) = self.connection {
            return send.await;
        }
        let mut leadership = self.leadership.clone();
        let lost = async {
            match writer {
                Some(plugin) => leadership.lost(crate::rollout::lease_group(plugin)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            sent = tokio::time::timeout(timeout, send) => sent.unwrap_or_else(|_| {
                Err(WriteError::Unavailable(format!(
                    "no answer from the API server within {} ms",
                    timeout.as_millis()
                )))
            }),
            () = lost => Err(WriteError::Unavailable(
                "this replica stopped leading: the write was abandoned".to_owned(),
            )),
        }
    }

    /// Sends an uncached read.
    pub(super) async fn read(&self, request: &ReadRequest) -> Result<Option<String>, WriteError> {
        match &self.connection {
            Connection::Api { client, discovery, .. } => super::reader::send(self, client, discovery, request).await,
            Connection::Offline(offline) => offline.read(request),
        }
    }

    /// Sends a prepared write, `dry_run` or not, as `field_manager`; the
    /// object as stored, as the server wrote it
    /// (`None` for a delete).
    pub(super) async fn send(
        &self,
        prepared: &Prepared,
        dry_run: bool,
        field_manager: &str,
    ) -> Result<Option<String>, WriteError> {
        let (client, discovery) = match &self.connection {
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
            dry_run,
            field_manager: Some(field_manager.to_owned()),
        };
        let patch_params = |force: bool| PatchParams {
            dry_run,
            force,
            field_manager: Some(field_manager.to_owned()),
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
                    dry_run,
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
            (Body::Object(_), Verb::Patch | Verb::Delete | Verb::Get | Verb::List) => {
                return Err(WriteError::Invalid("an object is not a patch".into()));
            }
        };
        let mut built = built.map_err(|error| WriteError::Invalid(error.to_string()))?;
        // What kube's own `Api` methods tag their requests with, for its tracing.
        built.extensions_mut().insert(prepared.verb.as_str());
        self.sign(&mut built)?;
        // The answer is handed on as the server wrote it: no parse, no re-serialisation.
        let stored = client
            .request_text(built)
            .await
            .map_err(|error| WriteError::from_kube(&error))?;
        Ok((prepared.verb != Verb::Delete).then_some(stored))
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
