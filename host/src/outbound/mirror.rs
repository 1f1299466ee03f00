//! Outbound requests in a call mirrored to a shadow: a shadow never reaches
//! the outside world.
//!
//! A shadow's request is answered with the response the running version got
//! for the same request in the same call (method, URL, and body, by its
//! SHA-256), as its cache queries are ([`crate::plugin::SharedInputs`]); it is
//! never sent. A request the running version did not make is refused
//! (`HTTP-request-denied`, the audit line saying why), as is every request of
//! a shadow whose call is not mirrored. The running version's requests go out
//! as always, their bodies read whole first (within `http-request-bytes`) to
//! be named, and their responses kept for the shadow as its guest reads them.
//! Each request of either version, with what it asked for ([`Intent`]), is
//! compared like a write.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use wasmtime_wasi_http::{Error as HttpError, WasiBody};

use super::send::{self, Finish, Keep, Timeouts};
use super::{HttpRecord, Intent, Outcome, Sending, Shared, Target};
use crate::plugin::SharedInputs;

/// A request and its response, as `send_request` answers.
pub(super) type Answered = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

/// Sends, or answers, `request` in a call whose inputs are `inputs` (`None`
/// for a shadow's call that is not mirrored).
pub(super) async fn send_mirrored(
    shared: Arc<Shared>,
    request: http::Request<WasiBody>,
    timeouts: Timeouts,
    inputs: Option<SharedInputs>,
) -> Answered {
    let started = Instant::now();
    let method = request.method().to_string();
    let (parts, body) = request.into_parts();
    let origin = Target::parse(&parts.uri).map_or_else(|_| super::shown_origin(&parts.uri), |target| target.origin());
    let deadline = tokio::time::Instant::now() + timeouts.total();
    let body = match read(body, shared.limits.http_request_bytes, deadline).await {
        Ok(body) => body,
        Err(error) => {
            let outcome = Outcome::of(&error);
            shared.record(HttpRecord {
                method,
                origin,
                status: None,
                bytes: 0,
                elapsed: started.elapsed(),
                outcome,
                reason: Some("the request's body could not be read".into()),
                intent: None,
            });
            return Err(error);
        }
    };
    let intent = Intent::of(&method, &parts.uri, &body);
    let query = intent.query();
    let refuse = |outcome: Outcome, error: HttpError, reason: String| {
        shared.record(HttpRecord {
            method: method.clone(),
            origin: origin.clone(),
            status: None,
            bytes: 0,
            elapsed: started.elapsed(),
            outcome,
            reason: Some(reason),
            intent: Some(intent.clone()),
        });
        Err(error)
    };
    let (target, permit) = match shared.admit(&parts.uri) {
        Ok(admitted) => admitted,
        Err(refused) => {
            if let Some(SharedInputs::Record(call)) = &inputs {
                call.record(query, crate::plugin::Answer::Http(Err(Outcome::of(&refused.error))));
            }
            return refuse(Outcome::of(&refused.error), refused.error, refused.reason);
        }
    };
    let not_sent = |why: &str| {
        let who = if shared.sending == Sending::Replay {
            "replay makes no requests"
        } else {
            "a shadow makes no requests"
        };
        format!("not sent: {who}, and {why}")
    };
    match inputs {
        Some(SharedInputs::Record(call)) => {
            let request =
                http::Request::from_parts(parts, Full::new(body).map_err(|never| match never {}).boxed_unsync());
            let finish = Finish {
                shared: Arc::clone(&shared),
                method: method.clone(),
                origin: origin.clone(),
                started,
                intent: Some(intent.clone()),
                keep: Some(Keep {
                    call: Arc::clone(&call),
                    query: query.clone(),
                }),
            };
            match send::send(request, &target, &shared, timeouts, permit, finish).await {
                Ok(response) => Ok((response, Box::new(async { Ok(()) }))),
                Err(failure) => {
                    let outcome = failure.outcome();
                    call.record(query, crate::plugin::Answer::Http(Err(outcome)));
                    let reason = failure.reason().unwrap_or_default();
                    refuse(outcome, failure.error, reason)
                }
            }
        }
        Some(SharedInputs::Replay(call)) => {
            drop(permit);
            let answer = call
                .answer_async(&query, timeouts.total())
                .await
                .and_then(crate::plugin::Answer::http);
            let answered_by = match shared.sending {
                Sending::Replay => "the recording's answer",
                _ => "the running version's response",
            };
            match answer {
                Some(Ok(exchange)) => {
                    shared.record(HttpRecord {
                        method,
                        origin,
                        status: Some(exchange.status),
                        bytes: exchange.body.len() as u64,
                        elapsed: started.elapsed(),
                        outcome: Outcome::Ok,
                        reason: Some(format!("answered with {answered_by}, not sent")),
                        intent: Some(intent),
                    });
                    Ok((replayed(exchange)?, Box::new(async { Ok(()) })))
                }
                Some(Err(outcome)) => refuse(
                    outcome,
                    outcome.error(),
                    format!("ended as {answered_by} says, not sent"),
                ),
                None => {
                    let why = match shared.sending {
                        Sending::Replay => {
                            "the recording has no answer to it (record one with `kinformer record --plugin`)"
                        }
                        _ => "the running version made no such request in this call",
                    };
                    let message = not_sent(why);
                    refuse(
                        Outcome::NotSent,
                        HttpError::InternalError(Some(message.clone())),
                        message,
                    )
                }
            }
        }
        None => {
            drop(permit);
            let message = not_sent("this call of it is not mirrored from the running version");
            refuse(
                Outcome::NotSent,
                HttpError::InternalError(Some(message.clone())),
                message,
            )
        }
    }
}

/// A request's body, whole: at most `cap` bytes, by `deadline`.
async fn read(body: WasiBody, cap: u64, deadline: tokio::time::Instant) -> Result<Bytes, HttpError> {
    let capped = send::Capped::request(body, cap);
    match tokio::time::timeout_at(deadline, capped.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(HttpError::ConnectionTimeout),
    }
}

/// The running version's response, for the shadow: its body as far as the
/// running version read it, then an error if it did not read it all.
fn replayed(exchange: crate::plugin::HttpAnswer) -> Result<http::Response<WasiBody>, HttpError> {
    let mut response = http::Response::builder()
        .status(exchange.status)
        .body(())
        .map_err(|_| HttpError::HttpProtocolError)?;
    *response.headers_mut() = exchange.headers;
    let cut = (!exchange.complete).then_some(Err(HttpError::HttpProtocolError));
    let frames = std::iter::once(Ok(http_body::Frame::data(exchange.body))).chain(cut);
    let body: WasiBody = http_body_util::StreamBody::new(futures::stream::iter(frames)).boxed_unsync();
    Ok(response.map(|()| body))
}
