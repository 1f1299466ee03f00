//! Outbound HTTP: the `wasi:http/outgoing-handler` a plugin calls, under the
//! allow-list of its manifest (`[grant.http]`), its `http-*` limits and the
//! host's address policy. Only a plugin whose manifest grants HTTP has
//! `wasi:http` linked at all; for the others its functions trap.
//!
//! Every request a plugin makes passes [`Outbound`], in this order, and is
//! refused at the first step it fails, with an error code the guest can tell
//! apart:
//!
//! 1. the plugin's request rate (a token, whether or not the request will be
//!    let through) and requests in flight are within its limits, else
//!    `connection-limit-reached`;
//! 2. the URL is on the plugin's allow-list ([`HttpGrant`]; the path compared
//!    as the server reads it), else `HTTP-request-denied` and no connection;
//! 3. the host resolves the name itself ([`Resolver`], within the connect
//!    timeout, a few lookups at once per plugin) and checks every address it
//!    resolves to ([`AddressPolicy`]: never metadata services, the API server
//!    or the host itself; loopback, link-local and private networks only as
//!    the grant's `networks` open them), else `destination-IP-prohibited`;
//! 4. it connects to the address it checked (no second lookup a DNS server
//!    could answer differently), within `http-connect-timeout-ms`; steps 3
//!    and 4 are the plugin's [`Dialer`], the one way the host connects for
//!    others (Handlers' module pulls connect through one too);
//! 5. request and response bodies are cut at `http-request-bytes` and
//!    `http-response-bytes`, and the whole exchange at `http-timeout-ms` or
//!    what the call has left, whichever is first: the host closes the
//!    connection then, whether or not the guest reads on.
//!
//! Proxies in the host's environment (`HTTPS_PROXY`, ...) are for the host's
//! own client; plugins' requests never go through them. Redirects are not
//! followed: a guest that follows one makes a new request, checked again.
//! Each request ends in one audit line (target `kinformer::audit`: plugin,
//! method, `scheme://host:port`, status, bytes, milliseconds, outcome and,
//! for a refusal, why; never the path, query or bodies), refusals at most
//! [`AUDIT_LINES`] per [`AUDIT_WINDOW`] and then one line counting the rest,
//! and one [`HttpRecord`] for the plugin's status and `/metrics`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

mod address;
mod allow;
mod audit;
mod dial;
mod follow;
mod mirror;
mod resolve;
mod send;

pub use address::{AddressPolicy, ApiSource, Forbidden, IpNet, METADATA, canonical, interface_addresses, ip_literal};
pub use allow::{AllowedUrl, Host, HttpGrant, Scheme, Target, UrlError, normalize_path};
pub use audit::{AUDIT_LINES, AUDIT_WINDOW};
pub use dial::{Connection, DialError, Dialer};
pub use follow::follow_api_server;
pub use resolve::{LOOKUPS_IN_FLIGHT, ResolveError, Resolver};
pub(crate) use send::RESPONSE_BUFFER_BYTES;

use crate::limits::Limits;
use crate::rate::TokenBucket;
use kinformer_informers::Recover as _;

/// How an outbound request ended, as the audit and `/metrics` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// A response was read to its end (whatever its status).
    Ok,
    /// Not on the allow-list: nothing was sent.
    Denied,
    /// To an address no plugin, or not this one, may reach: nothing was sent.
    Forbidden,
    /// Over the plugin's request rate or requests in flight.
    Throttled,
    /// Connecting, or the whole exchange, took too long.
    Timeout,
    /// A body was over its limit.
    TooLarge,
    /// Anything else: DNS, a refused connection, TLS, a protocol error, or a
    /// guest that dropped the response before its end.
    Error,
    /// Made by a shadow or in a replay, and not answered from the running
    /// version's responses or the recording: nothing was sent.
    NotSent,
}

impl Outcome {
    /// `ok`, `denied`, `forbidden`, `throttled`, `timeout`, `too-large`,
    /// `error` or `not-sent`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Denied => "denied",
            Self::Forbidden => "forbidden",
            Self::Throttled => "throttled",
            Self::Timeout => "timeout",
            Self::TooLarge => "too-large",
            Self::Error => "error",
            Self::NotSent => "not-sent",
        }
    }

    /// The outcome [`Outcome::as_str`] names.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Ok,
            Self::Denied,
            Self::Forbidden,
            Self::Throttled,
            Self::Timeout,
            Self::TooLarge,
            Self::Error,
            Self::NotSent,
        ]
        .into_iter()
        .find(|outcome| outcome.as_str() == text)
    }

    /// True when the plugin's own grant or limits refused the request: what
    /// a rollout counts against a next version, as it counts refused writes.
    #[must_use]
    pub fn is_refusal(self) -> bool {
        matches!(self, Self::Denied | Self::Forbidden | Self::Throttled)
    }

    /// The error a request that ended so is answered with (for a shadow
    /// answered as its running version was).
    fn error(self) -> HttpError {
        match self {
            Self::Ok | Self::Error | Self::NotSent => HttpError::HttpProtocolError,
            Self::Denied => HttpError::HttpRequestDenied,
            Self::Forbidden => HttpError::DestinationIpProhibited,
            Self::Throttled => HttpError::ConnectionLimitReached,
            Self::Timeout => HttpError::HttpResponseTimeout,
            Self::TooLarge => HttpError::HttpResponseBodySize(None),
        }
    }

    fn of(error: &HttpError) -> Self {
        match error {
            HttpError::HttpRequestDenied => Self::Denied,
            HttpError::DestinationIpProhibited => Self::Forbidden,
            HttpError::ConnectionLimitReached => Self::Throttled,
            HttpError::ConnectionTimeout
            | HttpError::ConnectionReadTimeout
            | HttpError::HttpResponseTimeout
            | HttpError::DnsTimeout => Self::Timeout,
            HttpError::HttpRequestBodySize(_) | HttpError::HttpResponseBodySize(_) => Self::TooLarge,
            _ => Self::Error,
        }
    }
}

/// One outbound request a plugin made and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpRecord {
    /// `GET`, `POST`, ...
    pub method: String,
    /// `scheme://host:port` (never the path or query).
    pub origin: String,
    /// The response's status, when one came.
    pub status: Option<u16>,
    /// Bytes of response body read.
    pub bytes: u64,
    /// How long the request took, to the end of its response body.
    pub elapsed: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// Why it was refused, or what failed, when that is known (never shown
    /// to the plugin: the allow-list's entries, the kind of address).
    pub reason: Option<String>,
    /// What it asked for, when its call is compared with another version's
    /// (a rollout's shadow); never logged.
    pub intent: Option<Intent>,
}

/// What a request asked for, as a rollout compares two versions' requests:
/// method, URL, and the body's SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Intent {
    /// `GET`, `POST`, ...
    pub method: String,
    /// `scheme://host:port/path?query`.
    pub url: String,
    /// The SHA-256 of the body, in hex.
    pub body_sha256: String,
}

impl Intent {
    fn of(method: &str, uri: &http::Uri, body: &[u8]) -> Self {
        let url = match Target::parse(uri) {
            Ok(target) => format!(
                "{}{}",
                target.origin(),
                uri.path_and_query().map_or("/", http::uri::PathAndQuery::as_str)
            ),
            Err(_) => shown_origin(uri),
        };
        Self {
            method: method.to_owned(),
            url,
            body_sha256: crate::plugin::digest(body),
        }
    }

    /// The request as a recording names it: `METHOD URL SHA256`.
    #[must_use]
    pub fn request(&self) -> String {
        format!("{} {} {}", self.method, self.url, self.body_sha256)
    }

    /// The query a shadow's (or a replay's) same request is answered under.
    fn query(&self) -> String {
        crate::plugin::http_query(&self.request())
    }
}

/// Sees the record of every outbound request of a plugin. Keep it cheap.
pub type HttpObserver = Arc<dyn Fn(&HttpRecord) + Send + Sync>;

/// One plugin's outbound HTTP: its allow-list, limits, buckets and observer,
/// shared by its instances. Cheap to clone.
#[derive(Clone)]
pub struct Outbound {
    shared: Arc<Shared>,
    /// What the current call has left: a request may not outlast it.
    call_left: Duration,
    /// The current call's inputs, when they are shared with a shadow.
    inputs: Option<crate::plugin::SharedInputs>,
}

struct Shared {
    plugin: String,
    grant: HttpGrant,
    /// Connects under the address policy, with the grant's networks opened.
    dialer: Dialer,
    limits: Limits,
    bucket: Mutex<TokenBucket>,
    in_flight: Arc<tokio::sync::Semaphore>,
    audit: Mutex<audit::Gate>,
    observer: Option<HttpObserver>,
    /// Whether requests are sent (see `mirror`).
    sending: Sending,
    /// Inputs every call shares when it has none of its own: the answers a
    /// replay gives, or where `record` keeps them.
    standing: Option<crate::plugin::SharedInputs>,
}

/// Whether a plugin's requests go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sending {
    /// They do, under the plugin's grant.
    Live,
    /// A rollout's shadow: never; answered as the running version was.
    Shadow,
    /// A replay: never; answered from the recording.
    Replay,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("plugin", &self.shared.plugin)
            .field("grant", &self.shared.grant)
            .finish_non_exhaustive()
    }
}

impl Outbound {
    /// The outbound HTTP of plugin `plugin`: requests `grant` allows, to
    /// addresses `policy` allows, within the `http-*` limits; `observer` sees
    /// a record of each. Names are looked up with the system's resolver.
    #[must_use]
    pub fn new(
        plugin: &str,
        grant: HttpGrant,
        policy: AddressPolicy,
        limits: &Limits,
        observer: Option<HttpObserver>,
    ) -> Self {
        Self::with_resolver(plugin, grant, policy, Resolver::default(), limits, observer)
    }

    /// As [`Outbound::new`], looking names up with `resolver`.
    #[must_use]
    pub fn with_resolver(
        plugin: &str,
        grant: HttpGrant,
        policy: AddressPolicy,
        resolver: Resolver,
        limits: &Limits,
        observer: Option<HttpObserver>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                plugin: plugin.to_owned(),
                dialer: Dialer::new(policy, resolver).with_networks(grant.networks().iter().copied()),
                grant,
                limits: *limits,
                bucket: Mutex::new(TokenBucket::new(
                    f64::from(limits.http_requests_per_second),
                    limits.http_burst,
                )),
                in_flight: Arc::new(tokio::sync::Semaphore::new(limits.http_concurrent as usize)),
                audit: Mutex::new(audit::Gate::default()),
                observer,
                sending: Sending::Live,
                standing: None,
            }),
            call_left: Duration::ZERO,
            inputs: None,
        }
    }

    /// Makes this the outbound HTTP of a rollout's shadow: its requests are
    /// answered with the running version's responses and never sent.
    #[must_use]
    pub fn shadow(self) -> Self {
        self.changed(|shared| shared.sending = Sending::Shadow)
    }

    /// Makes this the outbound HTTP of a replay: its requests are answered
    /// from `answers` (each answer once, to the same method, URL and body)
    /// and never sent; one without an answer is refused, saying so.
    #[must_use]
    pub fn replaying(self, answers: Arc<crate::plugin::CallInputs>) -> Self {
        self.changed(|shared| {
            shared.sending = Sending::Replay;
            shared.standing = Some(crate::plugin::SharedInputs::Replay(answers));
        })
    }

    /// Keeps every response into `answers`, for a replay to answer from.
    #[must_use]
    pub fn recording(self, answers: Arc<crate::plugin::CallInputs>) -> Self {
        self.changed(|shared| shared.standing = Some(crate::plugin::SharedInputs::Record(answers)))
    }

    fn changed(self, change: impl FnOnce(&mut Shared)) -> Self {
        match Arc::try_unwrap(self.shared) {
            Ok(mut shared) => {
                change(&mut shared);
                Self {
                    shared: Arc::new(shared),
                    ..self
                }
            }
            Err(shared) => {
                tracing::error!(plugin = %shared.plugin, "an outbound already shared cannot be changed");
                Self { shared, ..self }
            }
        }
    }

    /// True when the plugin's grant allows some request: only then is
    /// `wasi:http` linked for it.
    #[must_use]
    pub fn is_granted(&self) -> bool {
        !self.shared.grant.is_empty()
    }

    /// Sets what the current call has left, and its inputs when they are
    /// shared with a shadow, before a host call that may send.
    pub(crate) fn set_call(&mut self, left: Duration, inputs: Option<&crate::plugin::SharedInputs>) {
        self.call_left = left;
        self.inputs = inputs.cloned();
    }
}

/// The boxed future `send_request` answers with.
type Sent = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl WasiHttpHooks for Outbound {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_done: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Sent {
        let shared = Arc::clone(&self.shared);
        let inputs = self.inputs.clone().or_else(|| shared.standing.clone());
        if shared.sending != Sending::Live || inputs.is_some() {
            let timeouts = send::Timeouts::new(&shared.limits, options, self.call_left);
            return Box::new(mirror::send_mirrored(shared, request, timeouts, inputs));
        }
        let started = std::time::Instant::now();
        let method = request.method().to_string();
        let (target, permit) = match shared.admit(request.uri()) {
            Ok(admitted) => admitted,
            Err(refused) => {
                shared.record(HttpRecord {
                    method,
                    origin: refused.origin,
                    status: None,
                    bytes: 0,
                    elapsed: started.elapsed(),
                    outcome: Outcome::of(&refused.error),
                    reason: Some(refused.reason),
                    intent: None,
                });
                let error = refused.error;
                return Box::new(async move { Err(error) });
            }
        };
        let limits = shared.limits;
        let timeouts = send::Timeouts::new(&limits, options, self.call_left);
        Box::new(async move {
            let origin = target.origin();
            let finish = send::Finish {
                shared: Arc::clone(&shared),
                method: method.clone(),
                origin: origin.clone(),
                started,
                intent: None,
                keep: None,
            };
            match send::send(request, &target, &shared, timeouts, permit, finish).await {
                Ok(response) => Ok((
                    response,
                    Box::new(async { Ok(()) }) as Box<dyn Future<Output = _> + Send>,
                )),
                Err(failure) => {
                    shared.record(HttpRecord {
                        method,
                        origin,
                        status: None,
                        bytes: 0,
                        elapsed: started.elapsed(),
                        outcome: failure.outcome(),
                        reason: failure.reason(),
                        intent: None,
                    });
                    Err(failure.error)
                }
            }
        })
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        OUTGOING_CHUNK_BYTES
    }
}

/// The most a plugin's request body buffers on the host per write: what a
/// pending body holds before the guest must wait (see the memory budget in
/// `plugin::limiter`).
pub(crate) const OUTGOING_CHUNK_BYTES: usize = 64 * 1024;

/// A request refused before anything was sent.
pub(super) struct Refused {
    pub(super) origin: String,
    pub(super) error: HttpError,
    pub(super) reason: String,
}

impl Shared {
    /// Steps 1 and 2: the rate and the requests in flight, then the
    /// allow-list. A refused request takes its token too: a plugin that
    /// floods refused requests is throttled like one that floods good ones.
    fn admit(&self, uri: &http::Uri) -> Result<(Target, tokio::sync::OwnedSemaphorePermit), Refused> {
        let target = Target::parse(uri);
        let origin = target.as_ref().map_or_else(|_| shown_origin(uri), Target::origin);
        let taken = self.bucket.lock().recover().try_take(tokio::time::Instant::now());
        if !taken {
            return Err(Refused {
                origin,
                error: HttpError::ConnectionLimitReached,
                reason: format!(
                    "over {} requests a second (limits.http-requests-per-second)",
                    self.limits.http_requests_per_second
                ),
            });
        }
        let permit = Arc::clone(&self.in_flight).try_acquire_owned().map_err(|_| Refused {
            origin: origin.clone(),
            error: HttpError::ConnectionLimitReached,
            reason: format!(
                "{} requests in flight already (limits.http-concurrent)",
                self.limits.http_concurrent
            ),
        })?;
        let target = target.map_err(|error| Refused {
            origin: origin.clone(),
            error: HttpError::HttpRequestDenied,
            reason: error.to_string(),
        })?;
        if self.grant.allowing(&target).is_none() {
            return Err(Refused {
                origin,
                error: HttpError::HttpRequestDenied,
                reason: self.not_listed(&target),
            });
        }
        Ok((target, permit))
    }

    /// Why `target` is on no entry of the allow-list, naming the entries
    /// (for the host's log only, never the plugin).
    fn not_listed(&self, target: &Target) -> String {
        let entries: Vec<String> = self.grant.entries().iter().map(ToString::to_string).collect();
        let entries = if entries.is_empty() {
            "no [grant.http]".to_owned()
        } else {
            format!("allow = {entries:?}")
        };
        if normalize_path(&target.path).is_none() {
            format!("its path cannot be read one way only; {entries}")
        } else {
            format!("not on the allow-list; {entries}")
        }
    }

    /// The audit line and the observer's record.
    fn record(&self, record: HttpRecord) {
        let ms = record.elapsed.as_millis() as u64;
        let status = record.status.map(i64::from).unwrap_or(-1);
        let reason = record.reason.as_deref().unwrap_or("");
        match record.outcome {
            Outcome::Ok => tracing::info!(
                target: "kinformer::audit",
                plugin = %self.plugin,
                method = %record.method,
                origin = %record.origin,
                status,
                bytes = record.bytes,
                ms,
                outcome = record.outcome.as_str(),
                "http request"
            ),
            outcome => {
                let now = std::time::Instant::now();
                let gate = self.audit.lock().recover().pass(now, outcome);
                if let Some(summary) = gate.summary {
                    tracing::warn!(
                        target: "kinformer::audit",
                        plugin = %self.plugin,
                        "http: {summary}"
                    );
                }
                if gate.log {
                    tracing::warn!(
                        target: "kinformer::audit",
                        plugin = %self.plugin,
                        method = %record.method,
                        origin = %record.origin,
                        status,
                        bytes = record.bytes,
                        ms,
                        outcome = record.outcome.as_str(),
                        reason,
                        "http request refused or failed"
                    );
                }
            }
        }
        if let Some(observer) = &self.observer {
            observer(&record);
        }
    }
}

/// The addresses a URL's host resolves to, with its port (the scheme's when
/// it names none): how the host learns the API server's addresses from its
/// kubeconfig, once, as it starts.
#[must_use]
pub fn resolve_url(url: &http::Uri) -> Vec<std::net::SocketAddr> {
    use std::net::ToSocketAddrs as _;
    let Some(host) = url.host() else { return Vec::new() };
    let port = url
        .port_u16()
        .unwrap_or(if url.scheme_str() == Some("http") { 80 } else { 443 });
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match ip_literal(host) {
        Some(ip) => vec![std::net::SocketAddr::new(ip, port)],
        None => (host, port)
            .to_socket_addrs()
            .map(Iterator::collect)
            .unwrap_or_default(),
    }
}

/// The API server's address in a pod, from the variables the kubelet sets.
#[must_use]
pub fn in_cluster_api_server() -> Vec<std::net::SocketAddr> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").ok();
    let port = std::env::var("KUBERNETES_SERVICE_PORT").ok();
    match (host, port.and_then(|port| port.parse::<u16>().ok())) {
        (Some(host), Some(port)) => ip_literal(&host)
            .map(|ip| vec![std::net::SocketAddr::new(ip, port)])
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The origin of a URL the allow-list could not read, as far as it goes.
pub(super) fn shown_origin(uri: &http::Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("?");
    let host = uri.host().unwrap_or("?");
    let host: String = host.chars().take(253).filter(|c| !c.is_control()).collect();
    match uri.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    }
}
