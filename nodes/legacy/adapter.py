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
principal, is 404 (the client then initializes again); an ``MCP-Protocol-Version`` other than the
session's is 400. JSON-RPC errors of requests go with HTTP 200: to a legacy client a 404 means
"session gone".

Nothing of a session lives in a node's memory: a node can die between any two requests and the
next one, on any node, finds the session in the store. Only a call's open stream is tied to its
node, as HTTP ties it to its connection.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import trio

from nodes import errors
from nodes.http import LegacyRequest, Receive, Send
from nodes.legacy import wire
from nodes.legacy.bridge import LegacyCall, LegacyLimits, id_key
from nodes.legacy.stream import EventStream, StreamClosed
from nodes.protocol import Node
from nodes.tools.base import NodeCounters
from store.api import StoreUnavailable
from store.sessions import REQUEST_ID_PATTERN, SessionRecord, SessionStore

log = logging.getLogger("nodes.legacy")

SERVER_CAPABILITIES: dict[str, Any] = {"tools": {"listChanged": False}}
"""Declared once, at initialize."""


@dataclass(frozen=True)
class LegacyStatistics:
    """A snapshot of one adapter's counters."""

    sessions_opened: int
    sessions_ended: int
    calls: int
    streams: int
    answers_delivered: int
    answers_refused: int
    executions: int
    replays: int


@dataclass
class _Counters:
    sessions_opened: int = 0
    sessions_ended: int = 0
    calls: int = 0
    streams: int = 0
    answers_delivered: int = 0
    answers_refused: int = 0


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
    ``nodes.http.LegacyHandler``)."""

    def __init__(
        self, node: Node, sessions: SessionStore, limits: LegacyLimits | None = None
    ) -> None:
        self.node = node
        self.sessions = sessions
        self.limits = limits or LegacyLimits()
        self._counters = _Counters()
        self._tool_counters = NodeCounters()

    def statistics(self) -> LegacyStatistics:
        """A frozen snapshot of the counters."""
        c, t = self._counters, self._tool_counters
        return LegacyStatistics(
            c.sessions_opened,
            c.sessions_ended,
            c.calls,
            c.streams,
            c.answers_delivered,
            c.answers_refused,
            t.executions,
            t.replays,
        )

    def claims(self, http_method: str, headers: Mapping[str, str], message: object) -> bool:
        """Whether this request is the adapter's (see ``wire.claims``)."""
        return wire.claims(http_method, headers, message)

    async def serve(self, request: LegacyRequest, receive: Receive, send: Send) -> None:
        """Answer one claimed request."""
        try:
            await self._serve(request, send)
        except _Answer as answer:
            if answer.status >= 400 and answer.body is not None:
                # Fixed messages only (no client input, no session id): the reason, for the log.
                reason = answer.body.get("error", {}).get("message", "")
                log.info("legacy request refused: %s (status=%d)", reason, answer.status)
            await _send_json(send, answer.status, answer.body, answer.headers)
        except StoreUnavailable as exc:
            log.warning("store unavailable for a legacy request: %s", exc)
            body = wire.error_response(None, errors.outcome_unknown())
            await _send_json(send, 500, body)

    async def _serve(self, request: LegacyRequest, send: Send) -> None:
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
            await self._request(request, session, message, send)

    async def _session(self, request: LegacyRequest) -> SessionRecord:
        """The caller's session, its version header checked (400 / 404 otherwise)."""
        session_id = request.headers.get(wire.SESSION_HEADER)
        if session_id is None:
            raise _http_error(*_NO_SESSION_ID)
        session = await self.sessions.load(session_id)
        if session is None or session.principal != request.principal:
            # Another principal's session answers exactly as a missing one.
            raise _http_error(*_SESSION_NOT_FOUND)
        version = request.headers.get(wire.VERSION_HEADER)
        if version is not None and version != session.version:
            data = {"supported": [session.version], "requested": version}
            raise _http_error(400, errors.INVALID_PARAMS, "Unsupported protocol version", data)
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
        if not isinstance(requested, str):
            data = {"supported": [wire.LEGACY_VERSION], "requested": requested}
            exc = errors.invalid_params("Unsupported protocol version", data)
            await _send_json(send, 200, wire.error_response(request_id, exc))
            return
        if not isinstance(capabilities, dict) or not isinstance(client_info, dict):
            exc = errors.invalid_params("capabilities and clientInfo must be objects")
            await _send_json(send, 200, wire.error_response(request_id, exc))
            return
        # We speak one handshake version: the same if asked for, else our counter-offer, which
        # the client accepts or disconnects from.
        now_ms = self.node.config.node_clock_ms()
        session_id = await self.sessions.create(
            request.principal, wire.LEGACY_VERSION, capabilities, client_info, now_ms
        )
        self._counters.sessions_opened += 1
        config = self.node.config
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
        status = await self.sessions.deliver(session.session_id, request_id, json.dumps(message))
        if status == "no-session":
            raise _http_error(*_SESSION_NOT_FOUND)
        if status == "unknown":
            self._counters.answers_refused += 1
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
        elif method == "notifications/cancelled" and isinstance(params, dict):
            cancelled = params.get("requestId")
            if wire.valid_id(cancelled):
                await self.sessions.announce(session.session_id, "cancelled", id_key(cancelled))
        # Any other notification is acknowledged and ignored, as the spec lets a receiver do.
        await _send_json(send, 202, None)

    async def _request(
        self,
        request: LegacyRequest,
        session: SessionRecord,
        message: dict[str, Any],
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
                await self._tools_call(request, session, request_id, params, send)
                return
            if method == "ping":
                result: dict[str, Any] = {}
            elif method == "tools/list":
                if params.get("cursor") is not None:
                    raise errors.invalid_params("Invalid cursor: the tool list has a single page")
                result = {"tools": [t.definition() for t in self.node.tools.values()]}
            else:
                raise errors.method_not_found(str(method))
        except errors.JsonRpcError as exc:
            await _send_json(send, 200, wire.error_response(request_id, exc))
            return
        await _send_json(send, 200, wire.response(request_id, result))

    async def _tools_call(
        self,
        request: LegacyRequest,
        session: SessionRecord,
        request_id: object,
        params: dict[str, Any],
        send: Send,
    ) -> None:
        name = params.get("name")
        if not isinstance(name, str):
            raise errors.invalid_params("tools/call needs a string name")
        tool = self.node.tools.get(name)
        if tool is None:
            raise errors.invalid_params(f"Unknown tool: {name[:100]}")
        arguments = params.get("arguments", {})
        if not isinstance(arguments, dict):
            raise errors.invalid_params("arguments must be an object")
        self._counters.calls += 1
        stream = EventStream(send)
        call = LegacyCall(
            node=self.node,
            sessions=self.sessions,
            session=session,
            principal=request.principal,
            request_id=request_id,
            tool=tool,
            arguments=arguments,
            stream=stream,
            counters=self._tool_counters,
            limits=self.limits,
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keepalive, stream, nursery.cancel_scope)
            try:
                reply = await call.run()
                if stream.streaming:
                    self._counters.streams += 1
                await stream.finish(reply)
            except StreamClosed:
                # The client went away: nothing more is done for this call (an answer it sent
                # meanwhile finds no reader and expires with its request).
                log.info("legacy stream closed by the client (tool=%s)", name)
            nursery.cancel_scope.cancel()

    async def _keepalive(self, stream: EventStream, scope: trio.CancelScope) -> None:
        """Comment lines while the call waits; a failed write (client gone) ends the call."""
        while True:
            await trio.sleep(self.limits.keepalive_s)
            try:
                await stream.keepalive()
            except StreamClosed:
                log.info("legacy stream closed by the client")
                scope.cancel()
                return
