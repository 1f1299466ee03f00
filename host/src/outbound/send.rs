//! Sending one admitted request: a connection through the plugin's
//! [`Dialer`](super::Dialer) (resolve, check every address, connect to the
//! checked one, TLS), HTTP/1.1, with the bodies capped and the exchange timed.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::OwnedSemaphorePermit;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

use super::{DialError, Forbidden, HttpRecord, Outcome, ResolveError, Shared, Target};
use crate::limits::Limits;
use kinformer_informers::Recover as _;

/// The times one request is held to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    connect: Duration,
    /// From the start to the end of the response body.
    total: Duration,
}

impl Timeouts {
    /// The longest the whole exchange may take.
    pub(super) fn total(&self) -> Duration {
        self.total
    }

    /// The plugin's limits, shortened by what the guest asked for and by what
    /// its call has left (less a margin, so the guest gets a timeout error to
    /// handle rather than a call past its deadline).
    pub(super) fn new(limits: &Limits, options: Option<RequestOptions>, call_left: Duration) -> Self {
        let margin = (call_left / 10).min(Duration::from_millis(100));
        let left = call_left.saturating_sub(margin);
        let asked = |limit: Duration, asked: Option<Duration>| asked.map_or(limit, |asked| asked.min(limit));
        let options = options.unwrap_or_default();
        let total = limits.http_timeout.min(left);
        Self {
            connect: asked(limits.http_connect_timeout, options.connect_timeout).min(total),
            total,
        }
    }
}

/// Why a request admitted by the allow-list got no response.
pub(super) struct Failure {
    /// What the guest is answered.
    pub(super) error: HttpError,
    /// The address refused, and why.
    pub(super) forbidden: Option<(SocketAddr, Forbidden)>,
    /// What failed, in the host's words.
    detail: Option<String>,
}

impl Failure {
    /// How the request ended, as the audit and `/metrics` name it.
    pub(super) fn outcome(&self) -> Outcome {
        match self.forbidden {
            Some(_) => Outcome::Forbidden,
            None => Outcome::of(&self.error),
        }
    }

    /// The reason the audit line gives.
    pub(super) fn reason(&self) -> Option<String> {
        match self.forbidden {
            Some((address, forbidden)) => Some(format!("{address} is {}", forbidden.describe())),
            None => self.detail.clone(),
        }
    }
}

impl From<HttpError> for Failure {
    fn from(error: HttpError) -> Self {
        Self {
            error,
            forbidden: None,
            detail: None,
        }
    }
}

impl From<DialError> for Failure {
    /// What the guest is answered when no connection was made; the audit
    /// gets the host's words.
    fn from(error: DialError) -> Self {
        let dns = |rcode: &str| HttpError::DnsError {
            rcode: Some(rcode.into()),
            info_code: None,
        };
        let detail = Some(error.to_string());
        let error = match error {
            DialError::Forbidden { address, forbidden } => {
                return Self {
                    error: HttpError::DestinationIpProhibited,
                    forbidden: Some((address, forbidden)),
                    detail: None,
                };
            }
            DialError::Lookup(ResolveError::NotFound(_)) => dns("no such host"),
            DialError::Lookup(_) => dns("lookup failed"),
            DialError::ServerName(_) => dns("invalid DNS name"),
            DialError::NoAddress(_) => HttpError::DestinationNotFound,
            DialError::Connect { source, .. } => HttpError::Connect(source),
            DialError::Tls { source, .. } => HttpError::Tls(source),
            DialError::ConnectTimedOut(_) | DialError::TlsTimedOut(_) => HttpError::ConnectionTimeout,
        };
        Self {
            error,
            forbidden: None,
            detail,
        }
    }
}

/// What records the request once its response body ends (or is dropped).
pub(super) struct Finish {
    pub(super) shared: Arc<Shared>,
    pub(super) method: String,
    pub(super) origin: String,
    pub(super) started: Instant,
    /// What it asked for, when it is compared with a shadow's.
    pub(super) intent: Option<super::Intent>,
    /// Where its response is kept for a shadow.
    pub(super) keep: Option<Keep>,
}

/// Where the running version's response is kept for its shadow's same
/// request (see `mirror`).
pub(super) struct Keep {
    pub(super) call: Arc<crate::plugin::CallInputs>,
    pub(super) query: String,
}

/// Sends `request` to `target`; the response, whose body records the request
/// when it ends. The host ends the exchange at its deadline: the connection
/// is closed then, whether or not the guest is still reading.
pub(super) async fn send(
    request: http::Request<WasiBody>,
    target: &Target,
    shared: &Arc<Shared>,
    timeouts: Timeouts,
    permit: OwnedSemaphorePermit,
    finish: Finish,
) -> Result<http::Response<WasiBody>, Failure> {
    let deadline = tokio::time::Instant::now() + timeouts.total;
    let connection = shared.dialer.dial(target, timeouts.connect, deadline).await?;
    let (mut sender, connection) = tokio::time::timeout_at(deadline, connection.handshake())
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(|error| request_error(&error, deadline))?;
    let report = Arc::new(Mutex::new(None::<Report>));
    let at_deadline = Arc::clone(&report);
    tokio::spawn(async move {
        // Ends when the response body is done or dropped (its errors reach
        // the guest through the body), or at the deadline: then the
        // connection is dropped, and with it the socket.
        tokio::select! {
            _ = connection => {}
            () = tokio::time::sleep_until(deadline) => {
                let pending = at_deadline.lock().recover().take();
                if let Some(report) = pending {
                    report.record(Outcome::Timeout, 0);
                }
            }
        }
    });

    // The request line carries the path only; the Host header the authority.
    let (mut parts, body) = request.into_parts();
    parts.uri = http::Uri::builder()
        .path_and_query(parts.uri.path_and_query().map_or("/", |p| p.as_str()))
        .build()
        .map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let body = Capped::request(body, shared.limits.http_request_bytes).boxed_unsync();
    let request = http::Request::from_parts(parts, body);

    let response = tokio::time::timeout_at(deadline, sender.send_request(request))
        .await
        .map_err(|_| HttpError::HttpResponseTimeout)?
        .map_err(|error| request_error(&error, deadline))?;
    let status = response.status().as_u16();
    let kept = finish.keep.is_some().then(|| response.headers().clone());
    *report.lock().recover() = Some(Report {
        finish,
        status,
        _permit: permit,
    });
    Ok(response.map(|incoming| {
        Capped {
            inner: incoming
                .map_err(move |error| request_error(&error, deadline))
                .boxed_unsync(),
            cap: shared.limits.http_response_bytes,
            seen: 0,
            too_large: TooLarge::Response,
            deadline: Some(Box::pin(tokio::time::sleep_until(deadline))),
            report: Some(report),
            kept: kept.map(|headers| (headers, bytes::BytesMut::new())),
        }
        .boxed_unsync()
    }))
}

/// The most a response frame read for a plugin may hold: hyper's largest
/// read (its default `max_buf_size`), held for the guest until it reads it.
pub(crate) const RESPONSE_BUFFER_BYTES: usize = 8192 + 4096 * 100;

/// A hyper error as the guest sees it: a body over its cap keeps its code,
/// and whatever fails once the deadline has passed failed because of it (the
/// host closed the connection then, and hyper may see the close first).
fn request_error(error: &hyper::Error, deadline: tokio::time::Instant) -> HttpError {
    let capped = std::error::Error::source(error).and_then(|source| source.downcast_ref::<HttpError>());
    match capped {
        Some(HttpError::HttpRequestBodySize(size)) => HttpError::HttpRequestBodySize(*size),
        _ if error.is_timeout() || tokio::time::Instant::now() >= deadline => HttpError::HttpResponseTimeout,
        _ => HttpError::HttpProtocolError,
    }
}

/// Which body a cap cuts.
#[derive(Debug, Clone, Copy)]
enum TooLarge {
    Request,
    Response,
}

/// Records the request when the response body ends or is dropped, or the
/// deadline passes, whichever is first; and holds its place among the
/// requests in flight until then.
struct Report {
    finish: Finish,
    status: u16,
    _permit: OwnedSemaphorePermit,
}

impl Report {
    fn record(self, outcome: Outcome, bytes: u64) {
        let finish = &self.finish;
        if let (Some(keep), false) = (&finish.keep, outcome == Outcome::Ok || outcome == Outcome::Error) {
            keep.call
                .record(keep.query.clone(), crate::plugin::Answer::Http(Err(outcome)));
        }
        finish.shared.record(HttpRecord {
            method: finish.method.clone(),
            origin: finish.origin.clone(),
            status: Some(self.status),
            bytes,
            elapsed: finish.started.elapsed(),
            outcome,
            reason: (outcome == Outcome::Timeout).then(|| "the exchange outlasted its deadline".to_owned()),
            intent: finish.intent.clone(),
        });
    }
}

/// A body cut at `cap` bytes and, for a response, at the request's deadline.
pub(super) struct Capped {
    inner: WasiBody,
    cap: u64,
    seen: u64,
    too_large: TooLarge,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    report: Option<Arc<Mutex<Option<Report>>>>,
    /// A response kept for a shadow: its headers and the body read so far.
    kept: Option<(http::HeaderMap, bytes::BytesMut)>,
}

impl Capped {
    pub(super) fn request(inner: WasiBody, cap: u64) -> Self {
        Self {
            inner,
            cap,
            seen: 0,
            too_large: TooLarge::Request,
            deadline: None,
            report: None,
            kept: None,
        }
    }

    /// Records the request once, with how it ended (unless its deadline
    /// recorded it first); a kept response is handed to the shadow.
    fn end(&mut self, outcome: Outcome) {
        let pending = self.report.take().and_then(|report| report.lock().recover().take());
        if let Some(report) = pending {
            if let (Some((headers, body)), Some(keep)) = (self.kept.take(), &report.finish.keep)
                && matches!(outcome, Outcome::Ok | Outcome::Error)
            {
                let exchange = crate::plugin::HttpAnswer::new(report.status, headers, body.freeze());
                let exchange = if outcome == Outcome::Ok {
                    exchange
                } else {
                    exchange.truncated()
                };
                keep.call
                    .record(keep.query.clone(), crate::plugin::Answer::Http(Ok(exchange)));
            }
            report.record(outcome, self.seen);
        }
    }
}

impl Body for Capped {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        if let Some(deadline) = &mut this.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            this.end(Outcome::Timeout);
            return Poll::Ready(Some(Err(HttpError::HttpResponseTimeout)));
        }
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match frame {
            None => {
                this.end(Outcome::Ok);
                Poll::Ready(None)
            }
            Some(Err(error)) => {
                this.end(Outcome::of(&error));
                Poll::Ready(Some(Err(error)))
            }
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    if let Some((_, kept)) = &mut this.kept {
                        kept.extend_from_slice(data);
                    }
                    this.seen += data.len() as u64;
                    if this.seen > this.cap {
                        let error = match this.too_large {
                            TooLarge::Request => HttpError::HttpRequestBodySize(Some(this.cap)),
                            TooLarge::Response => HttpError::HttpResponseBodySize(Some(this.cap)),
                        };
                        this.seen = this.cap;
                        this.end(Outcome::TooLarge);
                        return Poll::Ready(Some(Err(error)));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Capped {
    fn drop(&mut self) {
        // A guest that stops reading early: the request still gets its line.
        let outcome = if self.inner.is_end_stream() {
            Outcome::Ok
        } else {
            Outcome::Error
        };
        self.end(outcome);
    }
}
