//! The pull side of the OCI distribution protocol, over connections the
//! host's address policy checked ([`Dialer`]): a manifest, a check that a
//! manifest is there (a `HEAD`), a blob, and the token a registry's Bearer
//! challenge asks for.
//!
//! Every request connects through the dialer, the first URL and each hop
//! after it alike: the name looked up on the host's resolver, every address
//! checked as a plugin's would be (with the tenant policy's `[registries]
//! networks` opened where a plugin has its grant's), the connection made to
//! the address checked. Then:
//!
//! | a server answers | the pull |
//! | --- | --- |
//! | a redirect (`301`, `302`, `303`, `307`, `308`) | follows it, at most [`MAX_REDIRECTS`] hops, each checked as the first; never from HTTPS to plain HTTP; credentials only to the first URL's origin |
//! | `401` with `WWW-Authenticate: Bearer realm=...` | asks the realm (checked as the first URL) for a token, once, with the pull secret's Basic credentials when there are some; then asks again with the token |
//! | `401` with `WWW-Authenticate: Basic` | asks again with the pull secret's credentials, once |
//! | a manifest over [`MANIFEST_BYTES`], a token answer over [`TOKEN_BYTES`] | refused at its `Content-Length`, or at the first byte past it |
//! | any other status but `2xx` | [`Error::Status`]: which request, and the status |
//!
//! Plain HTTP only to the registries the host lists as insecure
//! ([`super::PullConfig::insecure_registries`]), redirect targets and realms
//! included. A layer's `urls` (a "foreign" layer's other homes) are never
//! fetched: a blob comes from its repository or not at all.
//!
//! No [`Error`] carries what a server sent, neither a body, a header's text
//! nor a reason phrase: a status code, which request, and the host's own
//! words, with URLs shown without user info or query. The host's log has the
//! details of connection and TLS failures.

use base64::Engine as _;
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, HOST, LOCATION, USER_AGENT, WWW_AUTHENTICATE};
use http::{HeaderValue, Method, StatusCode, Uri};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Incoming;
use oci_client::manifest::{IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE};

use crate::outbound::{DialError, Dialer, Forbidden, Scheme, Target};

/// The most a manifest may be: containerd's cap.
pub const MANIFEST_BYTES: u64 = 4 << 20;
/// The most a token endpoint's answer may be.
pub const TOKEN_BYTES: u64 = 64 << 10;
/// The most redirects one request follows.
pub const MAX_REDIRECTS: usize = 3;

/// Which request of a pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `GET` of the manifest.
    Manifest,
    /// `HEAD` of the manifest by digest: do these credentials reach it.
    ManifestCheck,
    /// `GET` of a Bearer challenge's realm, for a token.
    Token,
    /// `GET` of the layer's blob.
    Blob,
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Manifest => "the manifest",
            Self::ManifestCheck => "the HEAD of the manifest",
            Self::Token => "the token request",
            Self::Blob => "the blob",
        })
    }
}

/// Why a request of a pull got no usable answer. Never a server's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A server answered a status other than `2xx` (or a redirect followed).
    #[error("the registry answered {status} to {request}")]
    Status {
        /// Which request.
        request: Request,
        /// The status code.
        status: u16,
    },
    /// Refused before it was sent: an address the policy refuses, plain
    /// HTTP to a registry not listed insecure, a downgrade from HTTPS, too
    /// many redirects.
    #[error("{0}")]
    Refused(String),
    /// An answer longer than its bound.
    #[error("{what} is over {limit} bytes")]
    TooLarge {
        /// `the manifest`, `the token answer`.
        what: &'static str,
        /// The bound.
        limit: u64,
    },
    /// No answer, or one that breaks the protocol (no connection, a cut
    /// stream, a challenge or token answer that cannot be read).
    #[error("{0}")]
    Unavailable(String),
}

impl Error {
    /// Whether asking again later may succeed: no answer, a server error,
    /// `408` or `429`; `401`, `403` and `404`, which a fixed pull secret or
    /// a push may mend. Refusals and answers over their bounds are final.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Status { status, .. } => matches!(status, 401 | 403 | 404 | 408 | 429) || *status >= 500,
            Self::Unavailable(_) => true,
            Self::Refused(_) | Self::TooLarge { .. } => false,
        }
    }
}

/// One pull's conversation with one repository: its requests share the
/// token the registry gave, and nothing else does (so one tenant's token is
/// never offered on another's pull).
#[derive(Debug)]
pub struct Session {
    dialer: Dialer,
    /// `HOST:PORT`s spoken to over plain HTTP.
    insecure: Vec<String>,
    /// `scheme://REGISTRY`.
    base: String,
    repository: String,
    /// The pull secret's credentials, as a header.
    basic: Option<HeaderValue>,
    /// What the registry's challenge asked for: a Bearer token, or `basic`.
    authorization: Option<HeaderValue>,
    deadline: tokio::time::Instant,
}

/// A blob's answer, read by the caller chunk by chunk.
#[derive(Debug)]
pub struct Blob {
    /// Its `Content-Length`, when it has one.
    pub length: Option<u64>,
    body: Incoming,
}

impl Blob {
    /// The next chunk of its body; `None` at its end.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the stream breaks.
    pub async fn chunk(&mut self) -> Option<Result<Bytes, Error>> {
        loop {
            match self.body.frame().await? {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        return Some(Ok(data));
                    }
                }
                Err(error) => return Some(Err(Error::Unavailable(format!("the blob's stream broke: {error}")))),
            }
        }
    }
}

/// Where a request goes, for what a refusal says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    Registry,
    Realm,
    Redirect,
}

impl std::fmt::Display for Hop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Registry => "the registry at",
            Self::Realm => "the token realm at",
            Self::Redirect => "a redirect to",
        })
    }
}

impl Session {
    /// A session with `repository` of `registry` (`HOST[:PORT]`), over
    /// HTTPS unless `insecure` lists the registry, with the Basic
    /// credentials `basic` (user and password) when the registry asks for
    /// them, all of it by `deadline`.
    #[must_use]
    pub fn new(
        dialer: Dialer,
        insecure: &[String],
        registry: &str,
        repository: &str,
        basic: Option<(&str, &str)>,
        deadline: tokio::time::Instant,
    ) -> Self {
        let scheme = if insecure.iter().any(|listed| listed.eq_ignore_ascii_case(registry)) {
            "http"
        } else {
            "https"
        };
        let basic = basic.and_then(|(user, password)| {
            let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
            value.set_sensitive(true);
            Some(value)
        });
        Self {
            dialer,
            insecure: insecure.to_vec(),
            base: format!("{scheme}://{registry}"),
            repository: repository.to_owned(),
            basic,
            authorization: None,
            deadline,
        }
    }

    /// The manifest `reference` (a digest or a tag) names, its bytes as
    /// served, at most [`MANIFEST_BYTES`].
    ///
    /// # Errors
    ///
    /// [`Error`].
    pub async fn manifest(&mut self, reference: &str) -> Result<Vec<u8>, Error> {
        let path = format!("/v2/{}/manifests/{reference}", self.repository);
        let response = self.fetch(Method::GET, &path, Request::Manifest).await?;
        read_bounded(response, "the manifest", MANIFEST_BYTES).await
    }

    /// Whether these credentials reach the manifest of `digest` (a `HEAD`).
    ///
    /// # Errors
    ///
    /// [`Error`]: the status when they do not.
    pub async fn check_manifest(&mut self, digest: &str) -> Result<(), Error> {
        let path = format!("/v2/{}/manifests/{digest}", self.repository);
        self.fetch(Method::HEAD, &path, Request::ManifestCheck).await.map(drop)
    }

    /// The blob of `digest` (`sha256:HEX`, checked by the caller), to be read
    /// chunk by chunk.
    ///
    /// # Errors
    ///
    /// [`Error`].
    pub async fn blob(&mut self, digest: &str) -> Result<Blob, Error> {
        let path = format!("/v2/{}/blobs/{digest}", self.repository);
        let response = self.fetch(Method::GET, &path, Request::Blob).await?;
        Ok(Blob {
            length: content_length(&response),
            body: response.into_body(),
        })
    }

    /// `method` of `path` on the registry, answering one challenge; the
    /// answer when its status is `2xx`.
    async fn fetch(&mut self, method: Method, path: &str, request: Request) -> Result<http::Response<Incoming>, Error> {
        let url = parse_url(&format!("{}{path}", self.base))?;
        let mut challenged = false;
        loop {
            let authorization = self.authorization.clone();
            let response = self
                .follow(&method, &url, authorization, Hop::Registry, request)
                .await?;
            if response.status() == StatusCode::UNAUTHORIZED && !challenged {
                challenged = true;
                let header: Vec<String> = response
                    .headers()
                    .get_all(WWW_AUTHENTICATE)
                    .iter()
                    .filter_map(|value| value.to_str().ok().map(str::to_owned))
                    .collect();
                drop(response);
                if self.answer(challenge(&header)).await? {
                    continue;
                }
                return Err(Error::Status { request, status: 401 });
            }
            return success(response, request);
        }
    }

    /// Takes up a challenge: a Bearer token from its realm, or the Basic
    /// credentials. False when there is nothing to answer it with.
    async fn answer(&mut self, challenge: Option<Challenge>) -> Result<bool, Error> {
        match challenge {
            Some(Challenge::Bearer { realm, service, scope }) => {
                let scope = scope.unwrap_or_else(|| format!("repository:{}:pull", self.repository));
                let token = self.token(&realm, service.as_deref(), &scope).await?;
                self.authorization = Some(token);
                Ok(true)
            }
            Some(Challenge::Basic) if self.basic.is_some() => {
                self.authorization = self.basic.clone();
                Ok(true)
            }
            Some(Challenge::Basic) | None => Ok(false),
        }
    }

    /// A token from `realm` for `service` and `scope`, as the header to send.
    async fn token(&mut self, realm: &str, service: Option<&str>, scope: &str) -> Result<HeaderValue, Error> {
        let realm = parse_url(realm).map_err(|_| {
            Error::Unavailable("the registry's Bearer challenge names a realm that is not an http(s) URL".to_owned())
        })?;
        let mut query = service
            .map(|service| format!("service={}&", percent_encode(service)))
            .unwrap_or_default();
        query.push_str(&format!("scope={}", percent_encode(scope)));
        let joiner = if realm.query().is_some() { '&' } else { '?' };
        let url = parse_url(&format!("{realm}{joiner}{query}"))?;
        let response = self
            .follow(&Method::GET, &url, self.basic.clone(), Hop::Realm, Request::Token)
            .await?;
        let response = success(response, Request::Token)?;
        let body = read_bounded(response, "the token answer", TOKEN_BYTES).await?;
        #[derive(serde::Deserialize)]
        struct Answer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let unreadable = || Error::Unavailable("the token answer holds no token the host can send".to_owned());
        let answer: Answer = serde_json::from_slice(&body).map_err(|_| unreadable())?;
        let token = answer.token.or(answer.access_token).filter(|token| !token.is_empty());
        let mut value = token
            .and_then(|token| HeaderValue::from_str(&format!("Bearer {token}")).ok())
            .ok_or_else(unreadable)?;
        value.set_sensitive(true);
        Ok(value)
    }

    /// Sends `method` of `url`, following redirects ([`Hops`]); the first
    /// answer that is not one. `authorization` goes to `url`'s origin only.
    async fn follow(
        &self,
        method: &Method,
        url: &Uri,
        authorization: Option<HeaderValue>,
        hop: Hop,
        request: Request,
    ) -> Result<http::Response<Incoming>, Error> {
        let mut hops = Hops::new(url);
        let mut at = url.clone();
        let mut kind = hop;
        loop {
            let same_origin = origin(&at) == origin(url);
            let sent = if same_origin { authorization.clone() } else { None };
            let response = self.send(method, &at, sent, kind).await?;
            tracing::debug!(url = %redact(&at), status = response.status().as_u16(), "{request}");
            if !matches!(response.status().as_u16(), 301 | 302 | 303 | 307 | 308) {
                return Ok(response);
            }
            let location = response.headers().get(LOCATION).and_then(|value| value.to_str().ok());
            let Some(location) = location.map(str::to_owned) else {
                return Err(Error::Status {
                    request,
                    status: response.status().as_u16(),
                });
            };
            drop(response);
            at = hops.next(&at, &location, request)?;
            kind = Hop::Redirect;
        }
    }

    /// One request on a connection of its own, made through the dialer.
    async fn send(
        &self,
        method: &Method,
        url: &Uri,
        authorization: Option<HeaderValue>,
        hop: Hop,
    ) -> Result<http::Response<Incoming>, Error> {
        let target = Target::parse(url)
            .map_err(|_| Error::Refused(format!("{hop} {}: not an http(s) URL the host reaches", redact(url))))?;
        if target.scheme == Scheme::Http && !self.plain_http(&target) {
            return Err(Error::Refused(format!(
                "{hop} {}:{}: plain HTTP, and it is not an insecure registry (--insecure-registry), refused",
                target.host, target.port
            )));
        }
        let left = self.deadline.saturating_duration_since(tokio::time::Instant::now());
        let connection = self
            .dialer
            .dial(&target, left, self.deadline)
            .await
            .map_err(|error| dial_error(error, hop, &target))?;
        let unavailable =
            |error: hyper::Error| Error::Unavailable(format!("{hop} {}:{}: {error}", target.host, target.port));
        let (mut sender, connection) = connection.handshake::<Empty<Bytes>>().await.map_err(unavailable)?;
        let deadline = self.deadline;
        tokio::spawn(async move {
            // Ends with the exchange (the answer read or dropped), or at the
            // pull's deadline: then the socket is closed.
            tokio::select! {
                _ = connection => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        });
        let authority = url.authority().map_or("", http::uri::Authority::as_str);
        let mut builder = http::Request::builder()
            .method(method.clone())
            .uri(url.path_and_query().map_or("/", http::uri::PathAndQuery::as_str))
            .header(HOST, authority)
            .header(USER_AGENT, concat!("kinformer/", env!("CARGO_PKG_VERSION")));
        if hop != Hop::Realm {
            // The manifests a pull reads: OCI's image manifest, Docker's v2.
            builder = builder.header(ACCEPT, format!("{OCI_IMAGE_MEDIA_TYPE}, {IMAGE_MANIFEST_MEDIA_TYPE}"));
        }
        if let Some(authorization) = authorization {
            builder = builder.header(AUTHORIZATION, authorization);
        }
        let request = builder
            .body(Empty::<Bytes>::new())
            .map_err(|_| Error::Refused(format!("{hop} {}: not a request the host can send", redact(url))))?;
        sender.send_request(request).await.map_err(unavailable)
    }

    /// Whether `target` is a registry spoken to over plain HTTP.
    fn plain_http(&self, target: &Target) -> bool {
        let host_port = format!("{}:{}", target.host, target.port);
        self.insecure.iter().any(|listed| {
            listed.eq_ignore_ascii_case(&host_port)
                || (target.port == Scheme::Http.default_port() && listed.eq_ignore_ascii_case(&target.host.to_string()))
        })
    }
}

/// The redirects one request followed: how many, and whether it went over
/// HTTPS, which it then never leaves.
#[derive(Debug)]
struct Hops {
    followed: usize,
    https: bool,
}

impl Hops {
    fn new(first: &Uri) -> Self {
        Self {
            followed: 0,
            https: first.scheme() == Some(&http::uri::Scheme::HTTPS),
        }
    }

    /// Where a redirect from `from` to `location` leads.
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] past [`MAX_REDIRECTS`] or from HTTPS to plain
    /// HTTP; [`Error::Unavailable`] for a location that is not a URL.
    fn next(&mut self, from: &Uri, location: &str, request: Request) -> Result<Uri, Error> {
        self.followed += 1;
        if self.followed > MAX_REDIRECTS {
            return Err(Error::Refused(format!(
                "{request}: more than {MAX_REDIRECTS} redirects, refused"
            )));
        }
        let next = resolve(from, location)
            .and_then(|next| next.parse::<Uri>().ok())
            .ok_or_else(|| Error::Unavailable(format!("{request}: a redirect to a location that is not a URL")))?;
        let next = parse_url(&next.to_string())?;
        let https = next.scheme() == Some(&http::uri::Scheme::HTTPS);
        if self.https && !https {
            return Err(Error::Refused(format!(
                "{request}: a redirect from HTTPS to {}, refused",
                redact(&next)
            )));
        }
        self.https = https;
        Ok(next)
    }
}

/// `location` (absolute, scheme-relative, absolute-path or relative) read
/// against `base`, as text.
fn resolve(base: &Uri, location: &str) -> Option<String> {
    let location = location.trim();
    if location.contains("://") {
        return Some(location.to_owned());
    }
    let scheme = base.scheme_str()?;
    let authority = base.authority()?.as_str();
    let url = if let Some(rest) = location.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        let directory = base.path().rsplit_once('/').map_or("", |(directory, _)| directory);
        format!("{scheme}://{authority}{directory}/{location}")
    };
    Some(url)
}

/// An absolute `http(s)` URL.
fn parse_url(text: &str) -> Result<Uri, Error> {
    let url: Uri = text
        .parse()
        .map_err(|_| Error::Unavailable("a URL that does not parse".to_owned()))?;
    match (url.scheme_str(), url.authority()) {
        (Some("http" | "https"), Some(_)) => Ok(url),
        _ => Err(Error::Refused(format!("{}: not an http(s) URL, refused", redact(&url)))),
    }
}

/// `scheme://host:port`, for telling origins apart.
fn origin(url: &Uri) -> Option<String> {
    Target::parse(url).ok().map(|target| target.origin())
}

/// A URL as errors and logs show it: no user info, no query, no fragment,
/// and at most 200 characters of path.
fn redact(url: &Uri) -> String {
    let scheme = url.scheme_str().unwrap_or("?");
    let authority = url.authority().map_or("?", http::uri::Authority::as_str);
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let path: String = url.path().chars().take(200).collect();
    format!("{scheme}://{host}{path}")
}

/// A refused connection in the pull's words.
fn dial_error(error: DialError, hop: Hop, target: &Target) -> Error {
    match error {
        DialError::Forbidden { address, forbidden } => {
            Error::Refused(format!("{hop} {address}, {}, refused", address_class(forbidden)))
        }
        DialError::Tls { address, source } => {
            // Its text may name what the server's certificate says.
            tracing::warn!(address = %address, error = %source, "a registry's TLS handshake failed");
            Error::Unavailable(format!(
                "{hop} {address}: the TLS handshake failed (see the host's log)"
            ))
        }
        other => Error::Unavailable(format!("{hop} {}:{}: {other}", target.host, target.port)),
    }
}

/// What kind of address a pull may not reach, and what would open it.
fn address_class(forbidden: Forbidden) -> String {
    let class = match forbidden {
        Forbidden::Loopback => "a loopback address",
        Forbidden::LinkLocal => "a link-local address",
        Forbidden::Private => "a private address",
        other => return other.describe().to_owned(),
    };
    format!("{class} the tenant policy's [registries] networks do not open")
}

/// The answer when its status is `2xx`.
fn success(response: http::Response<Incoming>, request: Request) -> Result<http::Response<Incoming>, Error> {
    if response.status().is_success() {
        Ok(response)
    } else {
        Err(Error::Status {
            request,
            status: response.status().as_u16(),
        })
    }
}

fn content_length(response: &http::Response<Incoming>) -> Option<u64> {
    response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse().ok())
}

/// The body of `response`, refused at a `Content-Length` over `limit` before
/// a byte of it is read, or at the first byte past `limit`.
async fn read_bounded(response: http::Response<Incoming>, what: &'static str, limit: u64) -> Result<Vec<u8>, Error> {
    let too_large = Error::TooLarge { what, limit };
    if content_length(&response).is_some_and(|length| length > limit) {
        return Err(too_large);
    }
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| Error::Unavailable(format!("{what}: the stream broke: {error}")))?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() as u64 + data.len() as u64 > limit {
                return Err(too_large);
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// A challenge of `WWW-Authenticate` a pull can answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Challenge {
    /// Ask `realm` for a token.
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
    /// Send the Basic credentials.
    Basic,
}

/// The challenge a pull answers among `WWW-Authenticate` header values:
/// a Bearer one with a realm before a Basic one; `None` when there is
/// neither.
fn challenge(values: &[impl AsRef<str>]) -> Option<Challenge> {
    let parsed: Vec<(String, Vec<(String, String)>)> =
        values.iter().flat_map(|value| challenges(value.as_ref())).collect();
    let bearer = parsed.iter().find_map(|(scheme, params)| {
        let param = |name: &str| {
            params
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        };
        let realm = param("realm").filter(|realm| !realm.is_empty())?;
        scheme.eq_ignore_ascii_case("bearer").then(|| Challenge::Bearer {
            realm,
            service: param("service"),
            scope: param("scope"),
        })
    });
    bearer.or_else(|| {
        parsed
            .iter()
            .any(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
            .then_some(Challenge::Basic)
    })
}

/// The challenges of one header value (RFC 9110 section 11.6.1): each a
/// scheme and its `name=value` parameters (names lower case, values
/// unquoted). Reading stops at what does not parse.
fn challenges(value: &str) -> Vec<(String, Vec<(String, String)>)> {
    let is_token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    let mut found: Vec<(String, Vec<(String, String)>)> = Vec::new();
    let mut rest = value;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        let end = rest.find(|c: char| !is_token(c)).unwrap_or(rest.len());
        if end == 0 {
            return found;
        }
        let token = &rest[..end];
        let after = rest[end..].trim_start_matches([' ', '\t']);
        match (after.strip_prefix('='), found.last_mut()) {
            (Some(value), Some((_, params))) => {
                let value = value.trim_start_matches([' ', '\t']);
                let (parsed, remaining) = match value.strip_prefix('"') {
                    Some(quoted) => match unquote(quoted) {
                        Some(unquoted) => unquoted,
                        None => return found,
                    },
                    None => {
                        let end = value.find([',', ' ', '\t']).unwrap_or(value.len());
                        (value[..end].to_owned(), &value[end..])
                    }
                };
                params.push((token.to_ascii_lowercase(), parsed));
                rest = remaining;
            }
            _ => {
                found.push((token.to_owned(), Vec::new()));
                rest = after;
            }
        }
    }
}

/// A quoted string's value (its opening quote already taken) and what
/// follows its closing quote; `None` when it does not close.
fn unquote(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((index, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[index + 1..])),
            '\\' => value.push(chars.next()?.1),
            c => value.push(c),
        }
    }
    None
}

/// `text` with every byte but the URL's unreserved ones percent-encoded.
fn percent_encode(text: &str) -> String {
    use std::fmt::Write as _;
    text.bytes()
        .fold(String::with_capacity(text.len()), |mut encoded, byte| {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                encoded.push(char::from(byte));
            } else {
                let _infallible = write!(encoded, "%{byte:02X}");
            }
            encoded
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Uri {
        text.parse().unwrap()
    }

    #[test]
    fn a_bearer_challenge_is_read_with_its_realm_service_and_scope() {
        let header = r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull""#;
        assert_eq!(
            challenge(&[header]),
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/nginx:pull".into()),
            })
        );
        // Any case, spaces around `=`, commas and escapes inside quotes, a
        // token value.
        let header = r#"bearer Realm = "https://r.example.com/t?a=1,2" , scope="a\"b",service=plain"#;
        assert_eq!(
            challenge(&[header]),
            Some(Challenge::Bearer {
                realm: "https://r.example.com/t?a=1,2".into(),
                service: Some("plain".into()),
                scope: Some("a\"b".into()),
            })
        );
    }

    #[test]
    fn bearer_wins_over_basic_and_what_cannot_be_answered_is_none() {
        let both = r#"Basic realm="Registry", Bearer realm="https://r.example.com/token""#;
        assert!(
            matches!(challenge(&[both]), Some(Challenge::Bearer { realm, .. }) if realm == "https://r.example.com/token")
        );
        assert!(matches!(
            challenge(&[r#"Basic realm="x""#, r#"Bearer realm="https://r/t""#]),
            Some(Challenge::Bearer { .. })
        ));
        assert_eq!(challenge(&[r#"Basic realm="Registry Realm""#]), Some(Challenge::Basic));
        for unanswerable in [
            "Bearer",
            r#"Bearer realm="""#,
            r#"Bearer service="x""#,
            r#"Digest realm="x", nonce="y""#,
            r#"Bearer realm="https://never-closed"#,
            "=garbage",
            "",
        ] {
            assert_eq!(challenge(&[unanswerable]), None, "{unanswerable}");
        }
    }

    #[test]
    fn redirects_are_followed_three_times_never_down_to_plain_http() {
        let start = url("https://r.example.com/v2/shop/h/blobs/sha256:aa");
        let mut hops = Hops::new(&start);
        let cdn = hops
            .next(&start, "https://cdn.example.net/x?sig=1", Request::Blob)
            .unwrap();
        assert_eq!(cdn, url("https://cdn.example.net/x?sig=1"));
        let relative = hops.next(&cdn, "y/z", Request::Blob).unwrap();
        assert_eq!(relative, url("https://cdn.example.net/y/z"));
        let absolute = hops.next(&relative, "//other.example.net/a", Request::Blob).unwrap();
        assert_eq!(absolute, url("https://other.example.net/a"));
        let fourth = hops.next(&absolute, "/b", Request::Blob).unwrap_err();
        assert_eq!(
            fourth,
            Error::Refused("the blob: more than 3 redirects, refused".into())
        );
        assert!(!fourth.is_transient());

        let mut hops = Hops::new(&start);
        let down = hops
            .next(
                &start,
                "http://user:pw@10.0.0.5:8080/admin/users?token=s",
                Request::Blob,
            )
            .unwrap_err();
        assert_eq!(
            down,
            Error::Refused("the blob: a redirect from HTTPS to http://10.0.0.5:8080/admin/users, refused".into())
        );
        let plain = url("http://127.0.0.1:5000/v2/");
        let mut hops = Hops::new(&plain);
        assert_eq!(
            hops.next(&plain, "/v2/x", Request::Manifest).unwrap(),
            url("http://127.0.0.1:5000/v2/x")
        );
        assert!(matches!(
            hops.next(&plain, "ftp://x/y", Request::Manifest),
            Err(Error::Refused(_))
        ));
    }

    #[test]
    fn urls_are_shown_without_user_info_or_query() {
        assert_eq!(
            redact(&url("https://user:s3cret@r.example.com:5000/token?scope=x&secret=y#f")),
            "https://r.example.com:5000/token"
        );
        assert_eq!(
            redact(&url("http://169.254.169.254/latest/meta-data/")),
            "http://169.254.169.254/latest/meta-data/"
        );
        let long = format!("https://r.example.com/{}", "a".repeat(500));
        assert_eq!(redact(&url(&long)).len(), "https://r.example.com".len() + 200);
    }

    #[test]
    fn errors_say_the_request_and_status_and_which_are_final() {
        let missing = Error::Status {
            request: Request::Blob,
            status: 404,
        };
        assert_eq!(missing.to_string(), "the registry answered 404 to the blob");
        assert!(missing.is_transient());
        for (status, transient) in [
            (401, true),
            (403, true),
            (429, true),
            (503, true),
            (400, false),
            (406, false),
        ] {
            let error = Error::Status {
                request: Request::Manifest,
                status,
            };
            assert_eq!(error.is_transient(), transient, "{status}");
        }
        let refused = |address: &str, forbidden: Forbidden, hop: Hop| {
            let address: std::net::SocketAddr = address.parse().unwrap();
            let target = Target::parse(&url(&format!("http://{address}/"))).unwrap();
            dial_error(DialError::Forbidden { address, forbidden }, hop, &target).to_string()
        };
        assert_eq!(
            refused("169.254.169.254:80", Forbidden::Metadata, Hop::Redirect),
            "a redirect to 169.254.169.254:80, a cloud metadata service, refused"
        );
        assert_eq!(
            refused("127.0.0.2:4000", Forbidden::Loopback, Hop::Realm),
            "the token realm at 127.0.0.2:4000, a loopback address the tenant policy's [registries] networks do \
             not open, refused"
        );
        assert_eq!(
            Error::TooLarge {
                what: "the manifest",
                limit: MANIFEST_BYTES
            }
            .to_string(),
            "the manifest is over 4194304 bytes"
        );
    }

    #[test]
    fn a_token_request_encodes_its_service_and_scope() {
        assert_eq!(percent_encode("repository:shop/h:pull"), "repository%3Ashop%2Fh%3Apull");
        assert_eq!(percent_encode("a b&c=d~"), "a%20b%26c%3Dd~");
    }
}
