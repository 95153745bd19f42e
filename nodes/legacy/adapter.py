"""The legacy (2025-11-25) side of a dual-era node: sessions, the handshake and streamed calls.

Layer: node, legacy adapter. The HTTP app (``nodes.http``) hands it the requests it claims
(``claims``), already past the HTTP checks (Origin, bearer token, Accept, Content-Type, size,
JSON), and it answers them through ASGI ``send``:

    initialize                    mint a session in the store, bound to the principal; 200 JSON
                                  with ``Mcp-Session-Id`` (any other version is counter-offered)
    DELETE                        end the session (204); its open streams end too
    notifications/*               202: initialized, roots/list_changed (announced to every stream
                                  of the session), cancelled (of a call of this session)
    {id, result|error}            the client's answer to one of our requests: into the session's
                                  inbox, 202, whichever node holds the stream waiting for it
    ping, tools/list              200 JSON
    tools/call                    200 JSON, or an SSE stream when the call asks the client
                                  something (``nodes.legacy.bridge``)

A missing ``Mcp-Session-Id`` is 400; an unknown, expired or ended one, or one of another
principal, is 404 (the client then initializes again); any handshake-era ``MCP-Protocol-Version``
is taken on a session (see ``_session``). JSON-RPC errors of requests go with HTTP 200: to a
legacy client a 404 means "session gone".

Nothing of a session lives in a node's memory: a node can die between any two requests and the
next one, on any node, finds the session in the store. Only a call's open stream is tied to its
node, as HTTP ties it to its connection. A waiting call holds no Redis connection: the node's one
``InboxReader`` reads for all of them (``nodes.legacy.inbox``); a call whose client goes away
(``http.disconnect``, or a failed write) stops at once and leaves the reader.

Bounds (``NodeConfig.legacy``, ``nodes.config.LegacyCaps``): sessions per principal (the oldest
is ended), only the capabilities and client fields the node reads (capped), the inbox's length,
a cancellation's id and an answer's size, pending calls per session (over all nodes; a call
stays counted until it ends, its bound pushed back at each further round of questions) and per
node (refused with a JSON-RPC error). Run the adapter inside ``open_legacy_adapter``, which runs
its reader.

Drain (``shutdown``, on SIGTERM): new calls are refused and every waiting call's stream ends with
a retryable -32603 (``data.reason: "draining"``) for its request; nothing of a stopped call ran.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio

from nodes import errors
from nodes.http import LegacyRequest, Receive, Send
from nodes.legacy import wire
from nodes.legacy.bridge import (
    LegacyCall,
    LegacyLimits,
    draining,
    id_key,
    refusal_reason,
    store_unavailable_error,
)
from nodes.legacy.inbox import InboxReader
from nodes.legacy.stream import EventStream, StreamClosed
from nodes.protocol import Node
from store import randomness
from store.api import StoreUnavailable
from store.sessions import REQUEST_ID_PATTERN, SessionRecord, SessionStore

log = logging.getLogger("nodes.legacy")

SERVER_CAPABILITIES: dict[str, Any] = {"tools": {"listChanged": False}}
"""Declared once, at initialize."""

END_CALL_TIMEOUT_S = 2.0
"""How long a finished call may take to take itself off its session's pending list; past it the
entry lapses by itself when the call's bound passes."""


@dataclass(frozen=True)
class LegacyStatistics:
    """A snapshot of one adapter's counters (``waiting_calls`` and ``pending_calls`` are gauges:
    calls waiting for their client now, and calls open now)."""

    sessions_opened: int
    sessions_ended: int
    sessions_evicted: int
    calls: int
    streams: int
    pending_calls: int
    waiting_calls: int
    answers_delivered: int
    answers_refused: int
    refused_by_cap: int
    disconnects: int


@dataclass
class _Counters:
    sessions_opened: int = 0
    sessions_ended: int = 0
    sessions_evicted: int = 0
    calls: int = 0
    streams: int = 0
    answers_delivered: int = 0
    answers_refused: int = 0
    refused_by_cap: int = 0
    disconnects: int = 0


class _Answer(Exception):
    """Raised to answer at once with a complete HTTP response."""

    def __init__(
        self, status: int, body: Mapping[str, Any] | None, headers: list[tuple[bytes, bytes]]
    ) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers


def _http_error(status: int, code: int, message: str, data: Any = None) -> _Answer:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _Answer(status, {"jsonrpc": "2.0", "id": None, "error": error}, [])


_NO_SESSION_ID = (400, errors.INVALID_REQUEST, "Bad Request: Mcp-Session-Id header is required")
_SESSION_NOT_FOUND = (404, errors.INVALID_REQUEST, "Session not found")


def _request_id(message: object) -> object:
    """The id of a request message, for an error answer (None when it has no valid one)."""
    if isinstance(message, dict) and "method" in message and wire.valid_id(message.get("id")):
        return message["id"]
    return None


async def _send_json(
    send: Send,
    status: int,
    body: Mapping[str, Any] | None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    data = b"" if body is None else wire.encode(body)
    out = [(b"content-length", str(len(data)).encode("ascii")), *(headers or [])]
    if data:
        out.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": data})


class LegacyAdapter:
    """Serves legacy clients for ``node`` with sessions in ``sessions`` (implements
    ``nodes.http.LegacyHandler``). Serve only inside ``open_legacy_adapter``."""

    def __init__(
        self, node: Node, sessions: SessionStore, limits: LegacyLimits | None = None
    ) -> None:
        self.node = node
        self.sessions = sessions
        self.limits = limits or LegacyLimits()
        self.caps = node.config.legacy
        sessions.inbox_max_entries = self.caps.inbox_max_entries
        self.reader = InboxReader(
            sessions, block_ms=self.limits.inbox_block_ms, poll_s=self.limits.inbox_poll_s
        )
        self._counters = _Counters()
        self._pending = 0
        self._idle = anyio.Event()
        """Set by the last open call to end once ``shutdown`` began."""

    def statistics(self) -> LegacyStatistics:
        """A frozen snapshot of the counters."""
        c = self._counters
        return LegacyStatistics(
            sessions_opened=c.sessions_opened,
            sessions_ended=c.sessions_ended,
            sessions_evicted=c.sessions_evicted,
            calls=c.calls,
            streams=c.streams,
            pending_calls=self._pending,
            waiting_calls=self.reader.statistics().watching,
            answers_delivered=c.answers_delivered,
            answers_refused=c.answers_refused,
            refused_by_cap=c.refused_by_cap,
            disconnects=c.disconnects,
        )

    async def shutdown(self) -> None:
        """The node drains (``nodes.http.Drainable``): new ``tools/call`` requests are refused
        (-32603, ``data: {"retryable": true, "reason": "draining"}``), and every call waiting
        for its client ends its stream with that error now (a call running a round finishes it
        first). Returns once no call is open."""
        if not self.reader.draining:
            log.info("legacy adapter draining: %d calls open", self._pending)
        self.reader.drain()
        if self._pending:
            await self._idle.wait()

    def claims(self, http_method: str, headers: Mapping[str, str], message: object) -> bool:
        """Whether this request is the adapter's (see ``wire.claims``)."""
        return wire.claims(http_method, headers, message)

    async def respond(self, request: LegacyRequest, receive: Receive, send: Send) -> None:
        """Answer one claimed request."""
        try:
            await self._serve(request, receive, send)
        except _Answer as answer:
            if answer.status >= 400 and answer.body is not None:
                # Fixed messages only (no client input, no session id): the reason, for the log.
                reason = answer.body.get("error", {}).get("message", "")
                log.info("legacy request refused: %s (status=%d)", reason, answer.status)
            await _send_json(send, answer.status, answer.body, answer.headers)
        except StoreUnavailable as exc:
            log.warning("store error answering a legacy request: %s", exc)
            body = wire.error_response(_request_id(request.message), store_unavailable_error(exc))
            await _send_json(send, 500, body)

    async def _serve(self, request: LegacyRequest, receive: Receive, send: Send) -> None:
        if request.method == "DELETE":
            session = await self._session(request)
            if await self.sessions.end(session.session_id):
                self._counters.sessions_ended += 1
            await _send_json(send, 204, None)
            return
        message = request.message
        assert isinstance(message, dict)  # wire.claims admits only objects
        if message.get("method") == "initialize":
            await self._initialize(request, message, send)
            return
        session = await self._session(request)
        if "method" not in message:
            await self._answer_from_client(session, message, send)
        elif "id" not in message:
            await self._notification(session, message, send)
        else:
            await self._request(request, session, message, receive, send)

    async def _session(self, request: LegacyRequest) -> SessionRecord:
        """The caller's session (400 without a session id, 404 for an unknown one).

        Its requests may name any handshake-era version in ``MCP-Protocol-Version`` (the only
        ones ``wire.claims`` routes here): the spec asks for the negotiated one with a SHOULD,
        the answers are 2025-11-25's whichever is named, and the TypeScript SDK's server (and
        the conformance suite's ``server-sse-multiple-streams`` scenario, which sends
        2025-03-26 on a 2025-11-25 session) accept them all. An unknown version is not routed
        here: the modern path answers it."""
        session_id = request.headers.get(wire.SESSION_HEADER)
        if session_id is None:
            raise _http_error(*_NO_SESSION_ID)
        session = await self.sessions.load(session_id)
        if session is None or session.principal != request.principal:
            # Another principal's session answers exactly as a missing one.
            raise _http_error(*_SESSION_NOT_FOUND)
        return session

    async def _initialize(
        self, request: LegacyRequest, message: dict[str, Any], send: Send
    ) -> None:
        request_id = message.get("id")
        if not wire.valid_id(request_id):
            raise _http_error(
                400, errors.INVALID_REQUEST, "Invalid Request: initialize needs an id"
            )
        params = message.get("params")
        if not isinstance(params, dict):
            params = {}
        requested = params.get("protocolVersion")
        capabilities = params.get("capabilities", {})
        client_info = params.get("clientInfo", {})
        exc: errors.JsonRpcError | None
        if not isinstance(requested, str):
            data = {"supported": [wire.LEGACY_VERSION], "requested": requested}
            exc = errors.invalid_params("Unsupported protocol version", data)
        elif not isinstance(capabilities, dict) or not isinstance(client_info, dict):
            exc = errors.invalid_params("capabilities and clientInfo must be objects")
        else:
            exc = None
        if exc is not None:
            log.info("legacy initialize refused: %s", refusal_reason(exc))
            await _send_json(send, 200, wire.error_response(request_id, exc))
            return
        # We speak one handshake version: the same if asked for, else our counter-offer, which
        # the client accepts or disconnects from. Only what the node reads is stored, capped.
        config = self.node.config
        session_id, evicted = await self.sessions.create(
            request.principal,
            wire.LEGACY_VERSION,
            wire.stored_capabilities(capabilities),
            wire.stored_client_info(client_info, self.caps.client_text_max_chars),
            config.node_clock_ms(),
            self.caps.sessions_per_principal,
        )
        self._counters.sessions_opened += 1
        if evicted:
            self._counters.sessions_evicted += evicted
            log.info("legacy sessions ended past the per-principal cap: %d", evicted)
        result: dict[str, Any] = {
            "protocolVersion": wire.LEGACY_VERSION,
            "capabilities": SERVER_CAPABILITIES,
            "serverInfo": {"name": config.server_name, "version": config.server_version},
        }
        if config.instructions:
            result["instructions"] = config.instructions
        headers = [(wire.SESSION_HEADER.encode("ascii"), session_id.encode("ascii"))]
        await _send_json(send, 200, wire.response(request_id, result), headers)

    async def _answer_from_client(
        self, session: SessionRecord, message: dict[str, Any], send: Send
    ) -> None:
        """A response to a request some node sent this client: into the session's inbox."""
        request_id = message.get("id")
        answered = ("result" in message) != ("error" in message)
        if not answered or not isinstance(request_id, str):
            raise _http_error(400, errors.INVALID_REQUEST, "Invalid Request")
        if not REQUEST_ID_PATTERN.fullmatch(request_id):
            self._counters.answers_refused += 1
            raise _http_error(400, errors.INVALID_REQUEST, "No open request has this id")
        body = json.dumps(message, separators=(",", ":"))
        limit = self.caps.answer_max_bytes
        too_large = len(body.encode("utf-8", "surrogatepass")) > limit
        if too_large:
            # The request is answered with an error in its stead: its call ends now, refused.
            body = json.dumps(wire.error_response(request_id, _ANSWER_TOO_LARGE))
        status = await self.sessions.deliver(session.session_id, request_id, body)
        if status == "no-session":
            raise _http_error(*_SESSION_NOT_FOUND)
        if status == "unknown" or too_large:
            self._counters.answers_refused += 1
            if too_large:
                message_text = f"Answer too large (limit {limit} bytes); its request was refused"
                raise _http_error(400, errors.INVALID_PARAMS, message_text)
            raise _http_error(400, errors.INVALID_REQUEST, "No open request has this id")
        # A copy of an answer already taken is accepted too (retries are normal) and dropped.
        if status == "ok":
            self._counters.answers_delivered += 1
        await _send_json(send, 202, None)

    async def _notification(
        self, session: SessionRecord, message: dict[str, Any], send: Send
    ) -> None:
        method = message.get("method")
        params = message.get("params")
        if method == "notifications/initialized":
            await self.sessions.mark_initialized(session.session_id)
        elif method == "notifications/roots/list_changed":
            await self.sessions.announce(session.session_id, "roots_changed")
        elif method == "notifications/cancelled":
            cancelled = params.get("requestId") if isinstance(params, dict) else None
            limit = self.caps.request_id_max_chars
            if not wire.valid_cancel_id(cancelled, limit):
                text = (
                    "Invalid params: requestId must be an integer or a string of at most "
                    f"{limit} characters"
                )
                raise _http_error(400, errors.INVALID_PARAMS, text)
            await self.sessions.announce(session.session_id, "cancelled", id_key(cancelled))
        # Any other notification is acknowledged and ignored, as the spec lets a receiver do.
        await _send_json(send, 202, None)

    async def _request(
        self,
        request: LegacyRequest,
        session: SessionRecord,
        message: dict[str, Any],
        receive: Receive,
        send: Send,
    ) -> None:
        request_id = message["id"]
        if not wire.valid_id(request_id):
            raise _http_error(400, errors.INVALID_REQUEST, "Invalid Request: bad id")
        method = message.get("method")
        params = message.get("params", {})
        try:
            if not isinstance(params, dict):
                raise errors.invalid_params("params must be an object")
            if method == "tools/call":
                await self._tools_call(request, session, request_id, params, receive, send)
                return
            if method == "ping":
                result: dict[str, Any] = {}
            elif method == "tools/list":
                result = {"tools": self.node.list_tools(params)}
            else:
                raise errors.method_not_found(str(method))
        except errors.JsonRpcError as exc:
            log.info("legacy request refused: %s", refusal_reason(exc))
            await _send_json(send, 200, wire.error_response(request_id, exc))
            return
        await _send_json(send, 200, wire.response(request_id, result))

    async def _tools_call(
        self,
        request: LegacyRequest,
        session: SessionRecord,
        request_id: object,
        params: dict[str, Any],
        receive: Receive,
        send: Send,
    ) -> None:
        prepared = self.node.prepare_call(params, request.principal, session.capabilities)
        if self.reader.draining:
            log.info("legacy call refused: the node is draining")
            raise draining()
        if self._pending >= self.caps.pending_calls_per_node:
            self._counters.refused_by_cap += 1
            log.info("legacy call refused: %d pending on this node", self._pending)
            raise _too_many("on this node", self.caps.pending_calls_per_node)
        call_id = randomness.token_urlsafe(12)
        now_ms = self.node.config.node_clock_ms()
        begun = await self.sessions.begin_call(
            session.session_id,
            call_id,
            now_ms,
            now_ms + int(self._call_bound_s() * 1000),
            self.caps.pending_calls_per_session,
        )
        if begun is None:
            raise _http_error(*_SESSION_NOT_FOUND)
        if not begun:
            self._counters.refused_by_cap += 1
            log.info("legacy call refused: its session has the most pending calls allowed")
            raise _too_many("in this session", self.caps.pending_calls_per_session)
        self._counters.calls += 1
        self._pending += 1
        try:
            call = LegacyCall(
                node=self.node,
                call=prepared,
                sessions=self.sessions,
                reader=self.reader,
                session=session,
                request_id=request_id,
                stream=EventStream(send),
                limits=self.limits,
                keep_counted=partial(self._keep_call, session.session_id, call_id),
            )
            await self._stream(call, receive)
        finally:
            # Counted open until it is off its session's list: a drain waits for that too.
            await self._end_call(session.session_id, call_id)
            self._pending -= 1
            if not self._pending and self.reader.draining:
                self._idle.set()

    def _call_bound_s(self) -> float:
        """How long a call may stay pending: its answer wait, roots included, plus a margin."""
        wait = self.limits.answer_timeout_s
        if wait is None:
            wait = self.node.config.state_ttl_ms / 1000
        return wait + self.limits.roots_timeout_s + 60.0

    async def _keep_call(self, session_id: str, call_id: str) -> None:
        """Keep the call counted for one more round's wait (``_call_bound_s`` from now)."""
        until_ms = self.node.config.node_clock_ms() + int(self._call_bound_s() * 1000)
        try:
            kept = await self.sessions.keep_call(session_id, call_id, until_ms)
        except StoreUnavailable as exc:
            log.warning("legacy call's bound on its session's list not pushed back: %s", exc)
            return
        if not kept:
            log.warning("legacy call no longer on its session's list (its bound had passed)")

    async def _end_call(self, session_id: str, call_id: str) -> None:
        with anyio.move_on_after(END_CALL_TIMEOUT_S, shield=True):
            try:
                await self.sessions.end_call(session_id, call_id)
            except StoreUnavailable as exc:
                log.warning("legacy call not taken off its session's list: %s", exc)

    async def _stream(self, call: LegacyCall, receive: Receive) -> None:
        """Run ``call``, its answer on its stream; the client's going away ends it at once."""
        stream = call.stream
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._keepalive, stream, tg.cancel_scope)
            tg.start_soon(self._until_disconnect, receive, tg.cancel_scope)
            try:
                reply = await call.run()
                if stream.streaming:
                    self._counters.streams += 1
                await stream.finish(reply)
            except StreamClosed:
                # The client went away: nothing more is done for this call (an answer it sent
                # meanwhile finds no reader and expires with its request).
                self._counters.disconnects += 1
                log.info("legacy stream closed by the client (tool=%s)", call.call.tool)
            tg.cancel_scope.cancel()

    async def _keepalive(self, stream: EventStream, scope: anyio.CancelScope) -> None:
        """Comment lines while the call waits; a failed write (client gone) ends the call."""
        while True:
            await anyio.sleep(self.limits.keepalive_s)
            try:
                await stream.keepalive()
            except StreamClosed:
                self._counters.disconnects += 1
                log.info("legacy stream closed by the client")
                scope.cancel()
                return

    async def _until_disconnect(self, receive: Receive, scope: anyio.CancelScope) -> None:
        """End the call when the server reports the client gone (ASGI ``http.disconnect``)."""
        while (await receive())["type"] != "http.disconnect":
            pass
        self._counters.disconnects += 1
        log.info("legacy client disconnected; its call stops")
        scope.cancel()


_ANSWER_TOO_LARGE = errors.invalid_params("Answer too large")


def _too_many(where: str, limit: int) -> errors.JsonRpcError:
    """The refusal of a call past a pending-calls cap (nothing was started)."""
    return errors.JsonRpcError(
        errors.INTERNAL_ERROR if where == "on this node" else errors.INVALID_REQUEST,
        f"Too many pending calls {where} (limit {limit}); retry when one has finished",
        {"limit": limit, "retryable": True},
    )


@asynccontextmanager
async def open_legacy_adapter(
    node: Node, sessions: SessionStore, limits: LegacyLimits | None = None
) -> AsyncIterator[LegacyAdapter]:
    """A ``LegacyAdapter`` with its inbox reader running until the block exits."""
    adapter = LegacyAdapter(node, sessions, limits)
    async with anyio.create_task_group() as tg:
        await tg.start(adapter.reader.run)
        yield adapter
        tg.cancel_scope.cancel()
