"""Streamable HTTP (MCP 2026-07-28): a plain ASGI 3 app around ``Node.handle``.

Backend-neutral (anyio): the same app runs on asyncio, where node processes serve it with uvicorn
(httptools, uvloop: ``nodes.serving.http_server``), and on trio, where ``serve_node`` serves it with
hypercorn's trio worker for nodes that live inside a trio process (simulations, tests).

Layer: node, transport shell. It decides only what HTTP alone can decide, in this order: path
(404), method (405, ``Allow: POST``), Origin (403; a loopback connection also accepts the node's
own loopback origins, ``nodes.loopback``), bearer token (401; none at all acts as the table's
anonymous demo principal where one is set, on loopback connections only), Accept (406), Content-Type
(415), size (413), JSON syntax (-32700), batches and nesting depth (-32600). It then hands the
decoded object, the principal and the lowercased headers to the core and writes the core's Reply
back: JSON with the Reply's status, or an empty body when the Reply has none (202).

It must not know MCP methods, params, tools, protocol versions or the store: comparing headers with
the body and every other JSON-RPC error belong to the core (``nodes.protocol``, ``nodes.headers``).
Besides the MCP endpoint it routes ``GET|POST /setup/<token>`` to ``nodes.setup_page`` (the page
behind ``notes_setup``'s URL-mode elicitation), which answers HTML of its own and reads its body
only once it knows the caller: no route reads a body before authentication.
It never mints or reads ``Mcp-Session-Id`` and never answers with SSE (the core has no progress to
stream), so ``X-Accel-Buffering`` is not needed. The one exception is an injected
``LegacyHandler`` (the 2025-11-25 adapter, ``nodes.legacy``, which this module does not import):
the requests it claims after the HTTP checks (``initialize``, a handshake-era version header with
no modern ``_meta``, DELETE with a session id) are handed to it with ``send``, and it may stream.
No Starlette: the HTTP stack is a large share of the CPU budget, so a request costs one header
dict, one ``json`` decode and one encode.

Accept rule: like the SDK's SSE mode, Accept must cover both ``application/json`` and
``text/event-stream``; RFC 9110 wildcards count (``*/*``, ``application/*``, ``text/*``) and a
range with ``q=0`` does not.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from itertools import chain
from typing import Any, Protocol, cast, runtime_checkable

import anyio
import anyio.abc
import orjson
import sniffio
from hypercorn.config import Config
from hypercorn.typing import Framework

from nodes import errors, json_strict
from nodes.auth import TokenTable
from nodes.loopback import is_own_loopback_origin, loopback_server
from nodes.protocol import Node, Reply, RequestContext
from nodes.setup_page import SERVICE_UNAVAILABLE_PAGE, SetupPages
from store.fast_init import slot_init

log = logging.getLogger("nodes.http")

DEFAULT_ENDPOINT = "/mcp"
DEFAULT_MAX_BODY_BYTES = 1_048_576
"""One JSON-RPC message per POST; our largest legitimate one (a 64 KiB note body) is far below."""
DEFAULT_MAX_JSON_DEPTH = 64
"""Our messages nest about ten deep; the cap bounds the depth walk for hostile bodies."""
DRAIN_MAX_BYTES = 16 * 1_048_576
"""A refused body (413) up to this size is read and dropped before the answer goes out. A client
sends its whole body before it reads, and a server that closes while it still sends makes its
TCP stack reset the connection, often dropping the answer unread; reading the rest keeps the
connection (and its answer) whole, within the body timeout. A body declared or grown past this
is answered at once, with ``Connection: close``."""
DEFAULT_BODY_TIMEOUT_S = 10.0
"""Longest wait for a request's whole body once its headers arrived. A 1 MiB body crosses a
slow link in well under that; a client that promises a body and goes silent (slow loris) is
answered 408 and its connection closed, so it cannot hold a slot and buffers for long."""
DEFAULT_HEADERS_TIMEOUT_S = 10.0
"""Longest wait for a request's complete header block, from the connection's first byte or the
previous response (enforced by the server: ``nodes.serving.http_server``)."""
DEFAULT_IDLE_TIMEOUT_S = 5.0
"""How long a keep-alive connection may sit idle between requests before the server closes it."""
DEFAULT_MAX_HEADER_BYTES = 32_768
"""Largest request header block (request target plus header lines, 32 KiB), answered 431 past
it. Our clients send a few hundred bytes (a bearer token, Origin, the Mcp-* headers); the bound
keeps a client that streams an endless header from making the server buffer it."""
MAX_HEADER_BYTES_RANGE = (1_024, 1_048_576)
"""What a configuration may set ``max_header_bytes`` to."""
DEFAULT_DRAIN_TIMEOUT_S = 10.0
"""On SIGTERM: how long in-flight requests may take to finish once the node stopped accepting;
past it they are cancelled and their clients see the connection drop (outcome unknown)."""


@dataclass(frozen=True)
class ServerTimeouts:
    """The serving path's time bounds (seconds), each a setting with a safe default."""

    headers_s: float = DEFAULT_HEADERS_TIMEOUT_S
    body_s: float = DEFAULT_BODY_TIMEOUT_S
    idle_s: float = DEFAULT_IDLE_TIMEOUT_S
    drain_s: float = DEFAULT_DRAIN_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("headers_s", "body_s", "idle_s", "drain_s"):
            if not 0 < getattr(self, name) <= 3600:
                raise ValueError(f"timeouts: {name} must be in (0, 3600] seconds")


ACCEPT_CACHE_SIZE = 64
"""Distinct Accept values remembered with their answer (a client could send many: bounded)."""
REALM = "notes-cluster"
"""The ``realm`` of our ``WWW-Authenticate`` challenges."""

ASGIScope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[ASGIScope, Receive, Send], Awaitable[None]]

_CREDENTIAL_HEADERS = ("authorization", "cookie")
"""Removed before the headers reach the core: it needs the principal, never the secret."""


def header_block_size(target: bytes, headers: Iterable[tuple[bytes, bytes]]) -> int:
    """The size a header block is held to: the request target plus each ``name: value`` line
    (the request line's method and version, and the blank line, are a few bytes more)."""
    if not isinstance(headers, list):
        headers = list(headers)
    # Every name and value's length summed in C: no generator step per header.
    return len(target) + 4 * len(headers) + sum(map(len, chain.from_iterable(headers)))


def header_bound(app: ASGIApp, max_header_bytes: int) -> ASGIApp:
    """``app`` behind a check of each request's header block (``header_block_size``): past
    ``max_header_bytes`` it answers 431 itself. For servers that bound only the unparsed
    buffer (hypercorn's h11: a larger block that arrives in one read passes it)."""

    async def bounded(scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            target = scope.get("raw_path") or b""
            if header_block_size(target, scope["headers"]) > max_header_bytes:
                body = HEADER_BLOCK_TOO_LARGE % max_header_bytes
                headers = [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ]
                await send({"type": "http.response.start", "status": 431, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return bounded


HEADER_BLOCK_TOO_LARGE = b"request header block larger than %d bytes"
"""The body of every 431 answer (the bound filled in)."""


@slot_init  # a cheaper __init__: built on every request
@dataclass(frozen=True, slots=True)
class _Answer:
    """One complete HTTP response."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


class _Rejected(Exception):
    """Raised by a check to answer at once with ``answer``."""

    def __init__(self, answer: _Answer) -> None:
        super().__init__(answer.status)
        self.answer = answer


class _ClientGone(Exception):
    """The client disconnected before its body arrived: nobody is left to answer."""


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""ASCII output: a lone surrogate echoed from a request cannot break the UTF-8 encoding."""


def _rpc_error(exc: errors.JsonRpcError, *headers: tuple[bytes, bytes]) -> _Answer:
    body = {"jsonrpc": "2.0", "id": None, "error": exc.to_dict()}
    return _Answer(exc.http_status, _ENCODER.encode(body).encode("ascii"), headers)


def _http_error(status: int, message: str, *headers: tuple[bytes, bytes]) -> _Answer:
    """An HTTP-level rejection, with a JSON-RPC error body as the SDK sends (code -32600)."""
    answer = _rpc_error(errors.invalid_request(message))
    return _Answer(status, answer.body, headers)


_NOT_FOUND = _http_error(404, "Not Found")
_METHOD_NOT_ALLOWED = _http_error(405, "Method Not Allowed: use POST", (b"allow", b"POST"))
_FORBIDDEN_ORIGIN = _http_error(403, "Forbidden: Origin not allowed")
_UNAUTHENTICATED = _http_error(
    401,
    "Unauthorized: a bearer token is required",
    (b"www-authenticate", f'Bearer realm="{REALM}"'.encode("ascii")),
)
_INVALID_TOKEN = _http_error(
    401,
    "Unauthorized: invalid bearer token",
    (b"www-authenticate", f'Bearer realm="{REALM}", error="invalid_token"'.encode("ascii")),
)
_NOT_ACCEPTABLE = _http_error(
    406, "Not Acceptable: Accept must include application/json and text/event-stream"
)
_UNSUPPORTED_MEDIA = _http_error(
    415, "Unsupported Media Type: Content-Type must be application/json"
)
_TOO_LARGE = _http_error(413, "Payload Too Large")
_TOO_LARGE_CLOSE = _http_error(413, "Payload Too Large", (b"connection", b"close"))
_BODY_TIMEOUT = _http_error(
    408, "Request Timeout: the body did not arrive in time", (b"connection", b"close")
)
_BATCH = _rpc_error(errors.invalid_request("Invalid Request: batches are not supported"))
_TOO_DEEP = _rpc_error(errors.invalid_request("Invalid Request: JSON nested too deeply"))
_INTERNAL = _rpc_error(errors.JsonRpcError(errors.INTERNAL_ERROR, "Internal error"))
_JSON_TYPE = (b"content-type", b"application/json")


_KNOWN_HEADER_NAMES = {
    name.encode("latin-1"): name
    for name in (
        "accept",
        "accept-encoding",
        "authorization",
        "connection",
        "content-length",
        "content-type",
        "cookie",
        "host",
        "last-event-id",
        "mcp-method",
        "mcp-name",
        "mcp-protocol-version",
        "mcp-session-id",
        "origin",
        "user-agent",
    )
}
"""Header names as servers hand them over (lowercase bytes) to the key ``_header_dict`` makes of
them, so the common names skip a decode and a lowercase; any other name takes the full path."""


def _header_dict(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Lowercased names, latin-1 values; repeated headers joined with ", " (RFC 9110)."""
    out: dict[str, str] = {}
    known = _KNOWN_HEADER_NAMES.get
    for name, value in raw:
        key = known(name)
        if key is None:
            key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key in out:
            text = f"{out[key]}, {text}"
        out[key] = text
    return out


HEADERS_SCOPE_KEY = "nodes.http.headers"
"""Where the app leaves a request's header dict (``_header_dict``) in its scope, once made:
middleware that labels requests after the app (metrics) reads it instead of the raw list."""


def _zero_quality(params: str) -> bool:
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                return float(value) == 0
            except ValueError:
                return False
    return False


@lru_cache(maxsize=ACCEPT_CACHE_SIZE)
def accepts_json_and_sse(accept: str) -> bool:
    """Whether an Accept value covers both ``application/json`` and ``text/event-stream``.
    Cached: clients send the same few values on every request."""
    json_ok = sse_ok = False
    for item in accept.split(","):
        media, _, params = item.partition(";")
        media = media.strip().lower()
        if params and _zero_quality(params):
            continue
        if media == "*/*":
            return True
        if media in ("application/json", "application/*"):
            json_ok = True
        elif media in ("text/event-stream", "text/*"):
            sse_ok = True
    return json_ok and sse_ok


def is_json_content_type(content_type: str | None) -> bool:
    """Whether a Content-Type is ``application/json`` (parameters such as charset allowed)."""
    if content_type is None:
        return False
    if content_type == "application/json":  # what clients send: no partition, strip, lower
        return True
    return content_type.partition(";")[0].strip().lower() == "application/json"


def deeper_than(value: object, limit: int) -> bool:
    """Whether decoded JSON nests objects/arrays more than ``limit`` deep (iterative walk)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            children: Iterable[object] = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


async def _send(send: Send, answer: _Answer) -> None:
    body = answer.body
    extra = answer.headers
    length = (b"content-length", str(len(body)).encode("ascii"))
    if not extra:  # the core's replies: JSON or empty
        headers = [length, _JSON_TYPE] if body else [length]
    else:
        headers = [length, *extra]
        if body and not any(name == b"content-type" for name, _ in extra):
            headers.append(_JSON_TYPE)
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    # Nothing to set up: the node and its store are built (and closed) by the caller.
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


@dataclass(frozen=True)
class LegacyRequest:
    """A request the legacy handler claimed, past the HTTP checks (for a POST: Origin, token,
    Accept, Content-Type, size, JSON; for a DELETE: Origin and token)."""

    method: str
    principal: str
    headers: Mapping[str, str]
    """Lowercased, credentials removed."""
    message: object
    """The decoded JSON-RPC message (None for a DELETE)."""


class LegacyHandler(Protocol):
    """The 2025-11-25 adapter, injected by whoever builds the app."""

    def claims(self, http_method: str, headers: Mapping[str, str], message: object) -> bool:
        """Whether the request is a legacy one (``message`` is None for a DELETE)."""
        ...

    async def respond(self, request: LegacyRequest, receive: Receive, send: Send) -> None:
        """Answer the request through ``send`` (possibly streaming)."""
        ...


@runtime_checkable
class Drainable(Protocol):
    """A legacy handler that can end its open streams when the node drains (SIGTERM)."""

    async def shutdown(self) -> None:
        """End every open stream cleanly and refuse new ones; return when they have ended."""
        ...


Route = Callable[[ASGIScope, Receive], Awaitable["_Answer | LegacyRequest"]]
"""One route's handler: the request's scope and receive, the whole answer back."""


class RequestMeter(Protocol):
    """What counts the app's HTTP requests (``nodes.metrics.NodeMetrics``), told by the app
    itself (``StreamableHTTPApp.meter``) instead of through a middleware: a middleware is a
    coroutine frame and a ``send`` wrapper per request, about a percent of a node's CPU."""

    in_flight_now: int
    """Requests being answered now."""

    def count(self, scope: ASGIScope, status: int) -> None:
        """One request answered with HTTP ``status`` (0: no response started)."""
        ...


class StreamableHTTPApp:
    """The ASGI callable ``make_app`` returns: routes, the HTTP checks, and the drain hook."""

    def __init__(
        self,
        node: Node,
        tokens: TokenTable,
        endpoint: str,
        allowed_origins: frozenset[str],
        max_body_bytes: int,
        max_json_depth: int,
        legacy: LegacyHandler | None = None,
        body_timeout_s: float | None = DEFAULT_BODY_TIMEOUT_S,
    ) -> None:
        self.node = node
        self.legacy = legacy
        self.tokens = tokens
        self.endpoint = endpoint
        self.allowed_origins = allowed_origins
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth
        self.body_timeout_s = body_timeout_s
        self.setup = SetupPages(node.config, node.store, tokens)
        self.routes: dict[str, Route] = {endpoint: self._mcp}
        """Exact paths to handlers; add a route by adding an entry (before serving)."""
        self.meter: RequestMeter | None = None
        """Counts every HTTP request from its start to its answer's end (set before serving:
        ``nodes.metrics.with_metrics``)."""

    async def drain(self) -> None:
        """Called when the node stops (SIGTERM), once it no longer accepts connections: ends
        the legacy handler's open streams, so their connections close and in-flight requests
        alone decide how long the drain takes."""
        if isinstance(self.legacy, Drainable):
            await self.legacy.shutdown()

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
            return
        if kind != "http":
            # A WebSocket upgrade: closing before accepting makes the server answer 403.
            await send({"type": "websocket.close", "code": 1008})
            return
        meter = self.meter
        if meter is None:
            await self._respond(scope, receive, send)
            return
        meter.in_flight_now += 1
        status = 0
        try:
            status = await self._respond(scope, receive, send)
        finally:
            meter.in_flight_now -= 1
            meter.count(scope, status)

    async def _respond(self, scope: ASGIScope, receive: Receive, send: Send) -> int:
        """Answer one HTTP request; the status of the response started (0: none)."""
        try:
            route = self.routes.get(scope["path"])
            if route is not None:
                answer = await route(scope, receive)
            elif SetupPages.handles(scope["path"]):
                answer = await self._setup_page(scope, receive)
            else:
                answer = _NOT_FOUND
        except _Rejected as exc:
            answer = exc.answer
        except _ClientGone:
            return 0
        except Exception:
            log.exception("unexpected error answering %s %s", scope["method"], scope["path"])
            answer = _INTERNAL
        if isinstance(answer, LegacyRequest):
            return await self._serve_legacy(answer, receive, send)
        await _send(send, answer)
        return answer.status

    async def _serve_legacy(self, request: LegacyRequest, receive: Receive, send: Send) -> int:
        status = 0

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        assert self.legacy is not None
        try:
            await self.legacy.respond(request, receive, tracked)
        except Exception:
            log.exception("unexpected error answering a legacy request")
            if not status:
                await _send(send, _INTERNAL)
                return _INTERNAL.status
        return status

    async def _mcp(self, scope: ASGIScope, receive: Receive) -> _Answer | LegacyRequest:
        """The MCP endpoint: the HTTP checks in order, then the core (or the legacy handler)."""
        if scope["method"] != "POST":
            if self.legacy is not None and scope["method"] == "DELETE":
                headers = _header_dict(scope["headers"])
                if self.legacy.claims("DELETE", headers, None):
                    principal = self._authenticate(headers, scope.get("server"))
                    for name in _CREDENTIAL_HEADERS:
                        headers.pop(name, None)
                    return LegacyRequest("DELETE", principal, headers, None)
            return _METHOD_NOT_ALLOWED
        headers = _header_dict(scope["headers"])
        scope[HEADERS_SCOPE_KEY] = headers  # type: ignore[index]  # for the metrics
        principal = self._authenticate(headers, scope.get("server"))
        if not accepts_json_and_sse(headers.get("accept", "")):
            return _NOT_ACCEPTABLE
        if not is_json_content_type(headers.get("content-type")):
            return _UNSUPPORTED_MEDIA
        message = self._decode(await self._read_body(headers.get("content-length"), receive))
        for name in _CREDENTIAL_HEADERS:
            headers.pop(name, None)
        if self.legacy is not None and self.legacy.claims("POST", headers, message):
            return LegacyRequest("POST", principal, headers, message)
        reply = await self.node.handle(message, RequestContext(principal, headers))
        return _from_reply(reply)

    async def _setup_page(self, scope: ASGIScope, receive: Receive) -> _Answer:
        """A setup page; it reads its body (a small form) only once it knows the caller."""
        headers = _header_dict(scope["headers"])

        async def read_body(limit: int) -> bytes:
            return await self._read_body(headers.get("content-length"), receive, limit)

        try:
            page = await self.setup.answer(scope["method"], scope["path"], headers, read_body)
        except (_Rejected, _ClientGone):
            raise
        except Exception:
            # Not the generic handler: it would log the path, and the path holds the link.
            log.exception("setup page failed")
            page = SERVICE_UNAVAILABLE_PAGE
        return _Answer(page.status, page.body, page.headers)

    def _authenticate(self, headers: Mapping[str, str], server: Sequence[object] | None) -> str:
        """The principal; the Origin check comes first (a browser page must not probe tokens).
        ``server`` is the ASGI scope's ``(host, port)`` the request reached."""
        origin = headers.get("origin")
        if (
            origin is not None
            and origin not in self.allowed_origins
            and not is_own_loopback_origin(origin, server)
        ):
            raise _Rejected(_FORBIDDEN_ORIGIN)
        authorization = headers.get("authorization")
        anonymous = self.tokens.anonymous
        if authorization is None and anonymous is not None and loopback_server(server) is not None:
            return anonymous
        principal = self.tokens.authenticate(authorization)
        if principal is None:
            raise _Rejected(_UNAUTHENTICATED if authorization is None else _INVALID_TOKEN)
        return principal

    async def _read_body(
        self, declared: str | None, receive: Receive, limit: int | None = None
    ) -> bytes:
        """The whole body, refused with 413 from Content-Length up front or while counting
        (``limit``: at most the node's ``max_body_bytes``), and with 408 (connection closed)
        when it takes longer than the body timeout. A refused body is read to its end first
        (up to ``DRAIN_MAX_BYTES``), so the client finds its 413 on an open connection."""
        limit = self.max_body_bytes if limit is None else min(limit, self.max_body_bytes)
        refused = False
        # Bounded before int(): a thousand-digit Content-Length is simply too large.
        if declared is not None and declared.isdecimal():
            if len(declared) > 18 or int(declared) > DRAIN_MAX_BYTES:
                raise _Rejected(_TOO_LARGE_CLOSE)
            refused = int(declared) > limit
        if self.body_timeout_s is None:  # no deadline asked of the app
            return await self._receive_body(receive, limit, refused)
        try:
            with anyio.fail_after(self.body_timeout_s):
                return await self._receive_body(receive, limit, refused)
        except TimeoutError:
            raise _Rejected(_BODY_TIMEOUT) from None

    async def _receive_body(self, receive: Receive, limit: int, refused: bool) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise _ClientGone
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                refused = True
                if size > DRAIN_MAX_BYTES:
                    raise _Rejected(_TOO_LARGE_CLOSE)
            if not refused:
                chunks.append(chunk)
            if not message.get("more_body", False):
                if refused:
                    raise _Rejected(_TOO_LARGE)
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _decode(self, body: bytes) -> object:
        """One JSON-RPC object; anything else is rejected with -32700 or -32600."""
        try:
            message = json_strict.decode(body)
        except RecursionError:
            # Nested deeper than the interpreter's recursion limit, so far beyond ours.
            raise _Rejected(_TOO_DEEP) from None
        except ValueError as exc:
            # Bad syntax or UTF-8, duplicate keys, numbers out of range, NaN, lone surrogates.
            parse = errors.JsonRpcError(errors.PARSE_ERROR, json_strict.parse_error_message(exc))
            raise _Rejected(_rpc_error(parse)) from None
        if isinstance(message, list):
            raise _Rejected(_BATCH)
        # Each level of nesting needs a bracket, so few brackets cannot nest too deep.
        limit = self.max_json_depth
        if body.count(b"{") + body.count(b"[") > limit and deeper_than(message, limit):
            raise _Rejected(_TOO_DEEP)
        return message


_SSE_HEADERS = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)
"""A response stream's headers; ``X-Accel-Buffering: no`` keeps proxies from holding it."""


def _from_reply(reply: Reply) -> _Answer:
    if reply.body is None:
        return _Answer(reply.status, b"")
    if reply.notifications:
        # Request-scoped notifications go first on a response stream, then the response.
        events = [*reply.notifications, reply.body]
        stream = b"".join(b"event: message\ndata: " + encode_json(e) + b"\n\n" for e in events)
        return _Answer(reply.status, stream, _SSE_HEADERS)
    return _Answer(reply.status, encode_json(reply.body))


def encode_json(value: object) -> bytes:
    """Compact JSON bytes: orjson (UTF-8) on the hot path; the ASCII encoder for what orjson
    refuses (a lone surrogate echoed from a request, an integer beyond 64 bits), so a reply is
    always valid UTF-8 and never an error. Non-finite floats never reach a reply: the decoder
    refuses them in requests and the core makes none."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return _ENCODER.encode(value).encode("ascii")


def make_app(
    node: Node,
    tokens: TokenTable,
    *,
    endpoint: str = DEFAULT_ENDPOINT,
    allowed_origins: frozenset[str] = frozenset(),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    legacy: LegacyHandler | None = None,
    body_timeout_s: float | None = DEFAULT_BODY_TIMEOUT_S,
) -> StreamableHTTPApp:
    """The ASGI 3 app serving ``node`` at ``POST endpoint`` for the principals in ``tokens``
    (and legacy clients through ``legacy``, when given). ``body_timeout_s`` bounds each body
    read with a deadline of the app's own; None when the server enforces it."""
    if not endpoint.startswith("/"):
        raise ValueError("endpoint must be a path starting with '/'")
    if max_body_bytes < 1 or max_json_depth < 1:
        raise ValueError("max_body_bytes and max_json_depth must be positive")
    if body_timeout_s is not None and body_timeout_s <= 0:
        raise ValueError("body_timeout_s must be positive")
    return StreamableHTTPApp(
        node,
        tokens,
        endpoint,
        frozenset(allowed_origins),
        max_body_bytes,
        max_json_depth,
        legacy,
        body_timeout_s,
    )


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve_node(
    node: Node,
    tokens: TokenTable,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    endpoint: str = DEFAULT_ENDPOINT,
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    sockets: Sequence[socket.socket] = (),
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
    wrap: Callable[[ASGIApp], ASGIApp] | None = None,
    **app_kwargs: Any,
) -> None:
    """Serve ``node`` over Streamable HTTP with hypercorn's trio worker until cancelled: for
    nodes that live inside a trio process (simulations, tests). Node processes run the same app
    on uvicorn instead (``nodes.serving.http_server``).

    Reports the endpoint URL with the port actually bound (``port=0`` picks a free one), e.g.
    ``http://127.0.0.1:54321/mcp``. ``app_kwargs`` go to ``make_app``; ``wrap`` (e.g. health
    endpoints and metrics, ``nodes.serving.operator``) wraps the app in middleware.

    Bounds: a header block larger than ``max_header_bytes`` is answered 431 (h11 refuses an
    unfinished one past it as it arrives, ``header_bound`` a complete one), and the whole header
    block must arrive within ``idle_timeout_s`` of the connection's start or the previous
    response (hypercorn's idle timer runs until a request's headers are parsed). ``sockets``:
    further listening sockets the same server serves (handed over: the server closes them),
    with the same bounds; the app tells them apart by ``scope["server"]`` (metrics).
    """
    app: ASGIApp = make_app(node, tokens, endpoint=endpoint, **app_kwargs)
    if wrap is not None:
        app = wrap(app)
    await serve_app(
        node,
        app,
        host=host,
        port=port,
        endpoint=endpoint,
        idle_timeout_s=idle_timeout_s,
        max_header_bytes=max_header_bytes,
        sockets=sockets,
        task_status=task_status,
    )


async def serve_app(
    node: Node,
    app: ASGIApp,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    endpoint: str = DEFAULT_ENDPOINT,
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    sockets: Sequence[socket.socket] = (),
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """``serve_node`` for an app already built (``make_app``, in its middleware)."""
    if sniffio.current_async_library() != "trio":
        raise RuntimeError("serve_node runs hypercorn's trio worker: serve from a trio process")
    from hypercorn.trio import serve

    app = header_bound(app, max_header_bytes)
    config = Config()
    config.bind = [_bind(host, port)] + [f"fd://{s.detach()}" for s in sockets]
    config.accesslog = None
    config.keep_alive_timeout = idle_timeout_s
    config.h11_max_incomplete_size = max_header_bytes
    config.h2_max_header_list_size = max_header_bytes
    # A Logger instance, not "-": hypercorn then leaves handlers to the application's logging.
    config.errorlog = logging.getLogger("hypercorn.error")
    config.include_server_header = False
    async with anyio.create_task_group() as tg:
        # hypercorn binds, then reports ["http://host:port"] read back from getsockname().
        binds: list[str] = await tg.start(partial(serve, cast(Framework, app), config, mode="asgi"))
        base = binds[0]
        if node.config.public_url is None:
            # Links to this node's setup pages (notes_setup) name the address actually bound.
            node.config = replace(node.config, public_url=base)
        task_status.started(f"{base}{endpoint}")
