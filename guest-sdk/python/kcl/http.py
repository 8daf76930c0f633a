"""Outbound HTTP from a processor, over ``wasi:http``::

    from kcl import http

    response = http.get("https://users.example.com/users/ana")
    if response.status == 200:
        profile = response.json()

A request blocks the processor until the answer's body is read (a processor
handles one batch at a time). The host sends it only to destinations the
operator allowed with ``kcl-host run --allow-outbound``; any other is refused
and raises ``HttpError`` whose ``code`` is ``HTTP-request-denied`` (the
host's log says which ``--allow-outbound`` would allow it).
"""

from __future__ import annotations

import json as _json
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from componentize_py_types import Err
from wit_world.imports import outgoing_handler as _handler
from wit_world.imports import streams as _streams
from wit_world.imports import wasi_http_types as _http

__all__ = ["HttpError", "Response", "get", "request"]

# WASI streams take at most this much per blocking write.
_WRITE_CHUNK = 4096
_READ_CHUNK = 64 * 1024

_METHODS = {
    "GET": _http.Method_Get(),
    "HEAD": _http.Method_Head(),
    "POST": _http.Method_Post(),
    "PUT": _http.Method_Put(),
    "DELETE": _http.Method_Delete(),
    "OPTIONS": _http.Method_Options(),
    "PATCH": _http.Method_Patch(),
}


class HttpError(Exception):
    """A request that got no answer: refused by the host, or failed on the way."""

    def __init__(self, url: str, code: str):
        super().__init__(f"{url}: {code}")
        self.url = url
        #: What failed, as wasi:http names it (``HTTP-request-denied``, ``connection-refused``, ...).
        self.code = code


@dataclass(frozen=True)
class Response:
    """An answer, whatever its status."""

    status: int
    #: Header names (lower case) and values, in the order received.
    headers: List[Tuple[str, bytes]]
    body: bytes

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name`` (any case), or ``None``."""
        name = name.lower()
        return next((value.decode("latin-1") for key, value in self.headers if key == name), None)

    def text(self) -> str:
        return self.body.decode()

    def json(self) -> Any:
        return _json.loads(self.body)


def get(url: str, headers: Sequence[Tuple[str, str]] = ()) -> Response:
    """``GET url``."""
    return request("GET", url, headers)


def request(method: str, url: str, headers: Sequence[Tuple[str, str]] = (), body: Optional[bytes] = None) -> Response:
    """Sends one request and reads its whole answer."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    method_name = method.upper()
    outgoing = _http.OutgoingRequest(_fields(url, headers))
    outgoing.set_method(_METHODS.get(method_name) or _http.Method_Other(method_name))
    outgoing.set_scheme(_http.Scheme_Https() if parts.scheme == "https" else _http.Scheme_Http())
    outgoing.set_authority(parts.netloc)
    outgoing.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    outgoing_body = outgoing.body()
    try:
        future = _handler.handle(outgoing, None)
    except Err as e:
        with outgoing_body:  # never sent: released as the error leaves
            raise HttpError(url, _code(e.value)) from None
    if body:
        with outgoing_body.write() as stream:
            for start in range(0, len(body), _WRITE_CHUNK):
                stream.blocking_write_and_flush(body[start:start + _WRITE_CHUNK])
    _http.OutgoingBody.finish(outgoing_body, None)
    with future:
        with future.subscribe() as ready:
            ready.block()
        # Ready now: Ok(the request's result), taken once.
        result = future.get().value
    if isinstance(result, Err):
        raise HttpError(url, _code(result.value))
    with result.value as response:
        with response.headers() as fields:
            received = fields.entries()
        status = response.status()
        return Response(status, [(name.lower(), value) for name, value in received], _read_all(url, response.consume()))


def _fields(url: str, headers: Sequence[Tuple[str, str]]) -> _http.Fields:
    """The request's headers; ``ValueError`` names one that cannot be sent."""
    fields = _http.Fields()
    for name, value in headers:
        try:
            fields.append(name, value.encode("latin-1"))
        except Err as e:
            with fields:
                why = "the host sets it" if isinstance(e.value, _http.HeaderError_Forbidden) else "not a valid header name or value"
                raise ValueError(f"header {name!r} of the request to {url} cannot be sent: {why}") from None
    return fields


def _read_all(url: str, incoming: _http.IncomingBody) -> bytes:
    chunks = []
    with incoming:
        with incoming.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(_READ_CHUNK))
                except Err as e:
                    if isinstance(e.value, _streams.StreamError_Closed):
                        break
                    raise HttpError(url, f"reading the body: {e.value}") from None
    return b"".join(chunks)


def _code(error) -> str:
    """``ErrorCode_HttpRequestDenied()`` → ``HTTP-request-denied``."""
    name = type(error).__name__.removeprefix("ErrorCode_")
    words = "".join(f"-{c.lower()}" if c.isupper() else c for c in name).lstrip("-")
    code = words.replace("http-", "HTTP-").replace("dns-", "DNS-").replace("tls-", "TLS-")
    detail = getattr(error, "value", None)
    return f"{code} ({detail})" if isinstance(detail, str) else code
