//! Call HTTP services outside the cluster, within the operator's allow-list
//! (`[grant.http] allow = [...]` in the manifest; none by default).
//!
//! A request goes through `wasi:http/outgoing-handler`; the host checks its
//! URL against the allow-list, the plugin's request rate and requests in
//! flight, and every address the name resolves to (never loopback, link-local
//! or the API server, unless the operator listed that IP literal), then
//! connects to the address it checked. Bodies are capped and the whole
//! exchange is bounded by the plugin's `http-timeout-ms` and what its call has
//! left. Redirects are not followed: a `3xx` is a response like any other.
//!
//! # Examples
//!
//! ```no_run
//! use kinformer_sdk::http::Request;
//! use serde_json::json;
//!
//! # fn run() -> kinformer_sdk::Result<()> {
//! // The webhook's URL is a setting: `[env] SLACK_URL = { secret = "monitoring/slack", key = "url" }`.
//! let url = std::env::var("SLACK_URL")?;
//! let response = Request::post(&url).json(&json!({"text": "pod shop/web-0 is crash-looping"}))?.send()?;
//! if !response.is_success() {
//!     kinformer_sdk::warn!("the webhook answered {}", response.status());
//! }
//! # Ok(()) }
//! ```

use std::fmt;

/// Why a request got no response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// Not on the plugin's allow-list, or to an address no plugin may reach:
    /// nothing was sent.
    Denied(String),
    /// Over the plugin's request rate or requests in flight: try later.
    Throttled(String),
    /// Connecting, or the whole exchange, took too long.
    Timeout(String),
    /// The request or response body is over the plugin's limit.
    TooLarge(String),
    /// The URL is malformed.
    InvalidUrl(String),
    /// Anything else: DNS, a refused connection, TLS, the protocol.
    Failed(String),
}

impl HttpError {
    /// What went wrong.
    #[must_use]
    pub fn message(&self) -> &str {
        match self {
            Self::Denied(message)
            | Self::Throttled(message)
            | Self::Timeout(message)
            | Self::TooLarge(message)
            | Self::InvalidUrl(message)
            | Self::Failed(message) => message,
        }
    }

    /// `denied`, `throttled`, `timeout`, `too-large`, `invalid-url` or `failed`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Denied(_) => "denied",
            Self::Throttled(_) => "throttled",
            Self::Timeout(_) => "timeout",
            Self::TooLarge(_) => "too-large",
            Self::InvalidUrl(_) => "invalid-url",
            Self::Failed(_) => "failed",
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http {}: {}", self.kind(), self.message())
    }
}

impl std::error::Error for HttpError {}

/// An HTTP request to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Request {
    /// A request of `method` (`GET`, `POST`, ...) to `url`.
    #[must_use]
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            method: method.to_owned(),
            url: url.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A `GET` of `url`.
    #[must_use]
    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    /// A `POST` to `url`.
    #[must_use]
    pub fn post(url: &str) -> Self {
        Self::new("POST", url)
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.as_bytes().to_vec()));
        self
    }

    /// Sets the body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and its `content-type`.
    ///
    /// # Errors
    ///
    /// When `value` does not serialise.
    pub fn json<T: serde::Serialize + ?Sized>(self, value: &T) -> Result<Self, serde_json::Error> {
        let body = serde_json::to_vec(value)?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Sends the request and reads the whole response.
    ///
    /// # Errors
    ///
    /// See [`HttpError`]; a response of any status is no error.
    pub fn send(self) -> Result<Response, HttpError> {
        let url = Url::parse(&self.url)?;
        #[cfg(target_arch = "wasm32")]
        return wasi::send(&self, &url);
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = url;
            Err(HttpError::Failed(
                "outbound HTTP needs the kinformer host (build for wasm32-wasip2)".into(),
            ))
        }
    }
}

/// A response, read whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Response {
    /// The status code.
    #[must_use]
    pub fn status(&self) -> u16 {
        self.status
    }

    /// True for a `2xx` status.
    #[must_use]
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first value of header `name` (any case), if it is text.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
    }

    /// The body.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.body
    }

    /// The body as text (invalid UTF-8 replaced).
    #[must_use]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    ///
    /// # Errors
    ///
    /// When it is not JSON of type `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Performs a `GET` of `url`.
///
/// # Errors
///
/// See [`HttpError`].
pub fn get(url: &str) -> Result<Response, HttpError> {
    Request::get(url).send()
}

/// `scheme://authority/path?query`, split as `wasi:http` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url<'a> {
    https: bool,
    authority: &'a str,
    path_with_query: String,
}

impl<'a> Url<'a> {
    fn parse(url: &'a str) -> Result<Self, HttpError> {
        let invalid = || HttpError::InvalidUrl(format!("{url:?}: want http(s)://host[:port][/path]"));
        let (scheme, rest) = url.split_once("://").ok_or_else(invalid)?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(invalid()),
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path_with_query) = rest.split_at(split);
        if authority.is_empty() {
            return Err(invalid());
        }
        Ok(Self {
            https,
            authority,
            path_with_query: match path_with_query {
                "" => "/".to_owned(),
                query if query.starts_with('?') => format!("/{query}"),
                path => path.to_owned(),
            },
        })
    }
}

#[cfg(target_arch = "wasm32")]
mod wasi {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
    use wasip2::io::streams::StreamError;

    use super::{HttpError, Request, Response, Url};

    /// Bytes read per stream call.
    const CHUNK: u64 = 64 * 1024;

    /// Bytes written per `blocking-write-and-flush`: WASI allows at most
    /// 4096 in one call.
    const WRITE_CHUNK: usize = 4096;

    pub(super) fn send(request: &Request, url: &Url<'_>) -> Result<Response, HttpError> {
        // A body known whole goes with its length, not chunked: some webhook
        // endpoints and proxies refuse chunked requests.
        let mut headers = request.headers.clone();
        if !request.body.is_empty() && !headers.iter().any(|(name, _)| name == "content-length") {
            headers.push(("content-length".into(), request.body.len().to_string().into_bytes()));
        }
        let headers = Fields::from_list(&headers)
            .map_err(|error| HttpError::InvalidUrl(format!("a header is not allowed: {error:?}")))?;
        let outgoing = OutgoingRequest::new(headers);
        let method = match request.method.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "OPTIONS" => Method::Options,
            other => Method::Other(other.to_owned()),
        };
        let invalid = |what: &str| HttpError::InvalidUrl(format!("{}: the {what} is not valid", request.url));
        outgoing.set_method(&method).map_err(|()| invalid("method"))?;
        let scheme = if url.https { Scheme::Https } else { Scheme::Http };
        outgoing.set_scheme(Some(&scheme)).map_err(|()| invalid("scheme"))?;
        outgoing
            .set_authority(Some(url.authority))
            .map_err(|()| invalid("host"))?;
        outgoing
            .set_path_with_query(Some(&url.path_with_query))
            .map_err(|()| invalid("path"))?;
        let body = outgoing.body().map_err(|()| failed("the request body was taken"))?;
        let future = outgoing_handler::handle(outgoing, None).map_err(|code| error(&code))?;
        {
            let stream = body.write().map_err(|()| failed("the request body was taken"))?;
            for chunk in request.body.chunks(WRITE_CHUNK) {
                if let Err(problem) = stream.blocking_write_and_flush(chunk) {
                    drop(stream);
                    return Err(response_error(&future).unwrap_or_else(|| stream_error(problem)));
                }
            }
        }
        OutgoingBody::finish(body, None).map_err(|code| error(&code))?;

        future.subscribe().block();
        let response = match future.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(code))) => return Err(error(&code)),
            Some(Err(())) | None => return Err(failed("the response was already taken")),
        };
        let status = response.status();
        let headers = response.headers().entries();
        let incoming = response.consume().map_err(|()| failed("the response body was taken"))?;
        let mut body = Vec::new();
        {
            let stream = incoming.stream().map_err(|()| failed("the response body was taken"))?;
            loop {
                match stream.blocking_read(CHUNK) {
                    Ok(chunk) => body.extend_from_slice(&chunk),
                    Err(StreamError::Closed) => break,
                    Err(problem) => return Err(stream_error(problem)),
                }
            }
        }
        Ok(Response { status, headers, body })
    }

    /// The response's error, when the request failed while its body was sent.
    fn response_error(future: &wasip2::http::types::FutureIncomingResponse) -> Option<HttpError> {
        future.subscribe().block();
        match future.get() {
            Some(Ok(Err(code))) => Some(error(&code)),
            _ => None,
        }
    }

    fn stream_error(problem: StreamError) -> HttpError {
        match problem {
            StreamError::Closed => failed("the connection closed early"),
            StreamError::LastOperationFailed(io) => match wasip2::http::types::http_error_code(&io) {
                Some(code) => error(&code),
                None => body_error(&io.to_debug_string()),
            },
        }
    }

    /// A body stream's error, which the host hands over as text only: its
    /// first line names the error code.
    fn body_error(text: &str) -> HttpError {
        let message = text.lines().next().unwrap_or_default().to_owned();
        if message.contains("body size exceeds limit") {
            HttpError::TooLarge(message)
        } else if message.contains("timeout") {
            HttpError::Timeout(message)
        } else {
            HttpError::Failed(message)
        }
    }

    fn failed(message: &str) -> HttpError {
        HttpError::Failed(message.to_owned())
    }

    fn error(code: &ErrorCode) -> HttpError {
        let message = format!("{code:?}");
        match code {
            ErrorCode::HttpRequestDenied | ErrorCode::DestinationIpProhibited => HttpError::Denied(message),
            ErrorCode::ConnectionLimitReached => HttpError::Throttled(message),
            ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionReadTimeout
            | ErrorCode::ConnectionWriteTimeout
            | ErrorCode::HttpResponseTimeout
            | ErrorCode::DnsTimeout => HttpError::Timeout(message),
            ErrorCode::HttpRequestBodySize(_) | ErrorCode::HttpResponseBodySize(_) => HttpError::TooLarge(message),
            ErrorCode::HttpRequestUriInvalid | ErrorCode::HttpRequestMethodInvalid => HttpError::InvalidUrl(message),
            _ => HttpError::Failed(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_splits_into_scheme_authority_and_path() {
        let url = Url::parse("https://hooks.slack.com/services/T0/B0?x=1#frag").unwrap();
        assert_eq!(
            url,
            Url {
                https: true,
                authority: "hooks.slack.com",
                path_with_query: "/services/T0/B0?x=1".into()
            }
        );
        assert_eq!(Url::parse("http://10.0.0.1:9093").unwrap().path_with_query, "/");
        assert_eq!(Url::parse("http://a:1?q").unwrap().path_with_query, "/?q");
        assert!(Url::parse("ftp://x/").is_err());
        assert!(Url::parse("https:///path").is_err());
        assert!(Url::parse("hooks.slack.com").is_err());
    }
}
