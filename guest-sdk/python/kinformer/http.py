"""Calls HTTP services outside the cluster, within the operator's allow-list
(``[grant.http] allow = [...]`` in the manifest; none by default).

A request goes through ``wasi:http/outgoing-handler``; the host checks its
URL against the allow-list, the plugin's request rate and requests in
flight, and every address the name resolves to (never loopback, link-local
or the API server, unless the operator listed that IP literal), then
connects to the address it checked. Bodies are capped and the whole exchange
is bounded by the plugin's ``http-timeout-ms`` and what its call has left.
Redirects are not followed: a ``3xx`` is a response like any other. Each call
blocks until the whole response is read::

    import os
    import kinformer
    from kinformer import http

    # The webhook's URL is a setting: `[env] SLACK_URL = { secret = "monitoring/slack", key = "url" }`.
    response = http.post(os.environ["SLACK_URL"], json={"text": "pod shop/web-0 is crash-looping"})
    if not response.is_success:
        kinformer.warn(f"the webhook answered {response.status}")

A request that got no response raises an :class:`HttpError` (a
:class:`kinformer.PluginError`): let through ``handle`` or ``reconcile``, it
fails the call and the host retries.
"""

import json as _json

from componentize_py_types import Err

from . import PluginError
from wit_world.imports import http_types as _http
from wit_world.imports import outgoing_handler as _outgoing
from wit_world.imports import streams as _streams

__all__ = ["HttpError", "Response", "request", "get", "post"]

# `blocking-write-and-flush` takes at most 4096 bytes a call.
_WRITE_CHUNK = 4096
_READ_CHUNK = 64 * 1024


class HttpError(PluginError):
    """Why a request got no response. :attr:`kind` is one of:

    - ``denied``: not on the plugin's allow-list, or to an address no plugin
      may reach; nothing was sent;
    - ``throttled``: over the plugin's request rate or requests in flight;
      try later;
    - ``timeout``: connecting, or the whole exchange, took too long;
    - ``too-large``: the request or response body is over the plugin's limit;
    - ``invalid-url``: the URL, method or a header is malformed;
    - ``failed``: anything else (DNS, a refused connection, TLS, the protocol).
    """

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __str__(self):
        return f"http {self.kind}: {self.message}"


class Response:
    """A response, read whole: :attr:`status`, :attr:`headers` (a list of
    ``(lowercase name, bytes)``) and :attr:`body` (bytes)."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def is_success(self):
        """True for a ``2xx`` status."""
        return 200 <= self.status < 300

    def header(self, name):
        """The first value of header ``name`` (any case) as text, or ``None``."""
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value.decode("utf-8", "replace")
        return None

    @property
    def text(self):
        """The body as text (invalid UTF-8 replaced)."""
        return self.body.decode("utf-8", "replace")

    def json(self):
        """The body parsed as JSON."""
        return _json.loads(self.body)

    def __repr__(self):
        return f"Response({self.status}, {len(self.body)} bytes)"


def request(method, url, headers=None, body=None, json=None):
    """Sends a request of ``method`` (``GET``, ``POST``, ...) to ``url``
    (``http(s)://host[:port][/path][?query]``) and reads the whole response.

    ``headers`` is a dict or a list of pairs, values ``str`` or ``bytes``;
    ``body`` is ``bytes`` or ``str`` (sent as UTF-8); ``json`` is a value sent
    as a JSON body with its ``content-type``. A response of any status is no
    error; a request that got no response raises :class:`HttpError`.
    """
    fields = [(name.lower(), _bytes(value)) for name, value in _pairs(headers)]
    if json is not None:
        fields.append(("content-type", b"application/json"))
        body = _json.dumps(json, separators=(",", ":"))
    body = _bytes(body or b"")
    if body and not any(name == "content-length" for name, _ in fields):
        fields.append(("content-length", str(len(body)).encode()))
    return _send(method, url, fields, body)


def get(url, headers=None):
    """A ``GET`` of ``url``; see :func:`request`."""
    return request("GET", url, headers)


def post(url, body=None, headers=None, json=None):
    """A ``POST`` of ``body`` (or of ``json``, as JSON) to ``url``; see :func:`request`."""
    return request("POST", url, headers, body, json)


def _pairs(headers):
    if headers is None:
        return []
    return list(headers.items()) if isinstance(headers, dict) else list(headers)


def _bytes(value):
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _split(url):
    """``(https, authority, path_with_query)`` of ``url``, as ``wasi:http`` takes it."""
    scheme, sep, rest = url.partition("://")
    authority, path = rest.split("#", 1)[0], "/"
    for i, c in enumerate(authority):
        if c in "/?":
            authority, path = authority[:i], authority[i:]
            break
    if not sep or scheme.lower() not in ("http", "https") or not authority:
        raise HttpError("invalid-url", f"{url!r}: want http(s)://host[:port][/path]")
    if path.startswith("?"):
        path = "/" + path
    return scheme.lower() == "https", authority, path


_METHODS = {
    "GET": _http.Method_Get,
    "HEAD": _http.Method_Head,
    "POST": _http.Method_Post,
    "PUT": _http.Method_Put,
    "DELETE": _http.Method_Delete,
    "PATCH": _http.Method_Patch,
    "OPTIONS": _http.Method_Options,
}


def _send(method, url, fields, body):
    https, authority, path = _split(url)
    try:
        headers = _http.Fields.from_list(fields)
    except Err as err:
        raise HttpError("invalid-url", f"a header is not allowed: {err.value}") from None
    outgoing = _http.OutgoingRequest(headers)
    method = method.upper()
    verb = _METHODS[method]() if method in _METHODS else _http.Method_Other(method)
    for what, setter, value in [
        ("method", outgoing.set_method, verb),
        ("scheme", outgoing.set_scheme, _http.Scheme_Https() if https else _http.Scheme_Http()),
        ("host", outgoing.set_authority, authority),
        ("path", outgoing.set_path_with_query, path),
    ]:
        try:
            setter(value)
        except Err:
            raise HttpError("invalid-url", f"{url}: the {what} is not valid") from None
    outgoing_body = outgoing.body()
    # Resources are released in the order wasi:http requires: a child (a
    # stream, a body) before its parent.
    with _call(_outgoing.handle, outgoing, None) as future:
        try:
            with outgoing_body.write() as stream:
                for start in range(0, len(body), _WRITE_CHUNK):
                    stream.blocking_write_and_flush(body[start : start + _WRITE_CHUNK])
        except Err as err:
            raise _response_error(future) or _stream_error(err.value) from None
        _call(_http.OutgoingBody.finish, outgoing_body, None)
        with future.subscribe() as ready:
            ready.block()
        answer = future.get()
        if answer is None or isinstance(answer, Err):
            raise HttpError("failed", "the response was already taken")
        if isinstance(answer.value, Err):
            raise _error(answer.value.value)
        with answer.value.value as response:
            with response.headers() as fields:
                response_headers = fields.entries()
            with response.consume() as incoming:
                with incoming.stream() as stream:
                    chunks = []
                    while True:
                        try:
                            chunks.append(stream.blocking_read(_READ_CHUNK))
                        except Err as err:
                            if isinstance(err.value, _streams.StreamError_Closed):
                                break
                            raise _stream_error(err.value) from None
            return Response(response.status(), response_headers, b"".join(chunks))


def _call(function, *args):
    """``function(*args)``, its ``ErrorCode`` raised as an :class:`HttpError`."""
    try:
        return function(*args)
    except Err as err:
        raise _error(err.value) from None


def _response_error(future):
    """The response's error, when the request failed while its body was sent."""
    with future.subscribe() as ready:
        ready.block()
    answer = future.get()
    if answer is not None and not isinstance(answer, Err) and isinstance(answer.value, Err):
        return _error(answer.value.value)
    return None


def _stream_error(problem):
    if isinstance(problem, _streams.StreamError_Closed):
        return HttpError("failed", "the connection closed early")
    code = _http.http_error_code(problem.value)
    if code is not None:
        return _error(code)
    # The host hands a body stream's error over as text: its first line
    # names the error code.
    message = problem.value.to_debug_string().split("\n", 1)[0]
    if "body size exceeds limit" in message:
        return HttpError("too-large", message)
    if "timeout" in message:
        return HttpError("timeout", message)
    return HttpError("failed", message)


_KINDS = {
    _http.ErrorCode_HttpRequestDenied: "denied",
    _http.ErrorCode_DestinationIpProhibited: "denied",
    _http.ErrorCode_ConnectionLimitReached: "throttled",
    _http.ErrorCode_ConnectionTimeout: "timeout",
    _http.ErrorCode_ConnectionReadTimeout: "timeout",
    _http.ErrorCode_ConnectionWriteTimeout: "timeout",
    _http.ErrorCode_HttpResponseTimeout: "timeout",
    _http.ErrorCode_DnsTimeout: "timeout",
    _http.ErrorCode_HttpRequestBodySize: "too-large",
    _http.ErrorCode_HttpResponseBodySize: "too-large",
    _http.ErrorCode_HttpRequestUriInvalid: "invalid-url",
    _http.ErrorCode_HttpRequestMethodInvalid: "invalid-url",
}


def _error(code):
    """The :class:`HttpError` for a ``wasi:http`` ``ErrorCode``, classified
    as the Rust SDK does."""
    name = type(code).__name__.removeprefix("ErrorCode_")
    value = getattr(code, "value", None)
    return HttpError(_KINDS.get(type(code), "failed"), name if value is None else f"{name}({value})")
