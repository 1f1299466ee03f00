//! Outbound HTTP: the `wasi:http/outgoing-handler` a plugin calls, under the
//! allow-list of its manifest (`[grant.http]`), its `http-*` limits and the
//! host's address policy.
//!
//! Every request a plugin makes passes [`Outbound`], in this order, and is
//! refused at the first step it fails, with an error code the guest can tell
//! apart:
//!
//! 1. the URL is on the plugin's allow-list ([`HttpGrant`]), else
//!    `HTTP-request-denied` and no connection;
//! 2. the plugin's request rate and requests in flight are within its limits,
//!    else `connection-limit-reached`;
//! 3. the host resolves the name itself and checks every address it resolves
//!    to ([`AddressPolicy`]: no loopback, link-local or API server unless the
//!    operator listed that IP literal), else `destination-IP-prohibited`;
//! 4. it connects to the address it checked (no second lookup a DNS server
//!    could answer differently), within `http-connect-timeout-ms`;
//! 5. request and response bodies are cut at `http-request-bytes` and
//!    `http-response-bytes`, and the whole exchange at `http-timeout-ms` or
//!    what the call has left, whichever is first.
//!
//! Redirects are not followed: a guest that follows one makes a new request,
//! checked again. Each request ends in one audit line (target
//! `kinformer::audit`: plugin, method, `scheme://host:port`, status, bytes,
//! milliseconds, outcome; never the path, query or bodies) and one
//! [`HttpRecord`] for the plugin's status and `/metrics`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

mod address;
mod allow;
mod send;

pub use address::{AddressPolicy, Forbidden, canonical, ip_literal};
pub use allow::{AllowedUrl, Host, HttpGrant, Scheme, Target, UrlError};

use crate::limits::Limits;
use crate::rate::TokenBucket;

/// How an outbound request ended, as the audit and `/metrics` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// A response was read to its end (whatever its status).
    Ok,
    /// Not on the allow-list, or to a forbidden address: nothing was sent.
    Denied,
    /// Over the plugin's request rate or requests in flight.
    Throttled,
    /// Connecting, or the whole exchange, took too long.
    Timeout,
    /// A body was over its limit.
    TooLarge,
    /// Anything else: DNS, a refused connection, TLS, a protocol error, or a
    /// guest that dropped the response before its end.
    Error,
}

impl Outcome {
    /// `ok`, `denied`, `throttled`, `timeout`, `too-large` or `error`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Denied => "denied",
            Self::Throttled => "throttled",
            Self::Timeout => "timeout",
            Self::TooLarge => "too-large",
            Self::Error => "error",
        }
    }

    fn of(error: &HttpError) -> Self {
        match error {
            HttpError::HttpRequestDenied | HttpError::DestinationIpProhibited => Self::Denied,
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
}

struct Shared {
    plugin: String,
    grant: HttpGrant,
    policy: AddressPolicy,
    limits: Limits,
    bucket: Mutex<TokenBucket>,
    in_flight: Arc<tokio::sync::Semaphore>,
    observer: Option<HttpObserver>,
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
    /// a record of each.
    #[must_use]
    pub fn new(
        plugin: &str,
        grant: HttpGrant,
        policy: AddressPolicy,
        limits: &Limits,
        observer: Option<HttpObserver>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                plugin: plugin.to_owned(),
                grant,
                policy,
                limits: *limits,
                bucket: Mutex::new(TokenBucket::new(
                    f64::from(limits.http_requests_per_second),
                    limits.http_burst,
                )),
                in_flight: Arc::new(tokio::sync::Semaphore::new(limits.http_concurrent as usize)),
                observer,
            }),
            call_left: Duration::ZERO,
        }
    }

    /// Sets what the current call has left, before a host call that may send.
    pub(crate) fn set_call_left(&mut self, left: Duration) {
        self.call_left = left;
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
        let started = std::time::Instant::now();
        let method = request.method().to_string();
        let admitted = shared.admit(request.uri());
        let (target, entry_ip, permit) = match admitted {
            Ok(admitted) => admitted,
            Err((origin, error)) => {
                shared.record(HttpRecord {
                    method,
                    origin,
                    status: None,
                    bytes: 0,
                    elapsed: started.elapsed(),
                    outcome: Outcome::of(&error),
                });
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
            };
            match send::send(
                request,
                &target,
                entry_ip,
                &shared.policy,
                &limits,
                timeouts,
                permit,
                finish,
            )
            .await
            {
                Ok(response) => Ok((
                    response,
                    Box::new(async { Ok(()) }) as Box<dyn Future<Output = _> + Send>,
                )),
                Err(error) => {
                    shared.record(HttpRecord {
                        method,
                        origin,
                        status: None,
                        bytes: 0,
                        elapsed: started.elapsed(),
                        outcome: Outcome::of(&error),
                    });
                    Err(error)
                }
            }
        })
    }
}

impl Shared {
    /// Steps 1 and 2: the allow-list, then the rate and the requests in
    /// flight. A refusal carries the origin the audit names.
    #[allow(clippy::type_complexity, reason = "a private step's three answers")]
    fn admit(
        &self,
        uri: &http::Uri,
    ) -> Result<(Target, Option<std::net::IpAddr>, tokio::sync::OwnedSemaphorePermit), (String, HttpError)> {
        let target = Target::parse(uri).map_err(|_| (shown_origin(uri), HttpError::HttpRequestDenied))?;
        let origin = target.origin();
        let Some(entry) = self.grant.allowing(&target) else {
            return Err((origin, HttpError::HttpRequestDenied));
        };
        let listed = entry.listed_ip();
        let taken = self
            .bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_take(tokio::time::Instant::now());
        if !taken {
            return Err((origin, HttpError::ConnectionLimitReached));
        }
        let permit = Arc::clone(&self.in_flight)
            .try_acquire_owned()
            .map_err(|_| (origin, HttpError::ConnectionLimitReached))?;
        Ok((target, listed, permit))
    }

    /// The audit line and the observer's record.
    fn record(&self, record: HttpRecord) {
        let ms = record.elapsed.as_millis() as u64;
        let status = record.status.map(i64::from).unwrap_or(-1);
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
            _ => tracing::warn!(
                target: "kinformer::audit",
                plugin = %self.plugin,
                method = %record.method,
                origin = %record.origin,
                status,
                bytes = record.bytes,
                ms,
                outcome = record.outcome.as_str(),
                "http request refused or failed"
            ),
        }
        if let Some(observer) = &self.observer {
            observer(&record);
        }
    }
}

/// The addresses a URL's host resolves to, with its port (the scheme's when
/// it names none): how the host learns the API server's addresses.
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
fn shown_origin(uri: &http::Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("?");
    let host = uri.host().unwrap_or("?");
    let host: String = host.chars().take(253).filter(|c| !c.is_control()).collect();
    match uri.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    }
}
