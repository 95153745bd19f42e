"""One request's ASGI cycle on a node process's HTTP connection (the HTTP exchange's
own cost).

Layer: nodes (serving). The node server (``nodes.serving.http_server``) runs on uvicorn's
httptools protocol; this class takes the place of uvicorn's ``RequestResponseCycle``, the object
behind a request's ``receive`` and ``send``. It keeps that cycle's contract message for message
(the ASGI HTTP messages, ``100 Continue``, HEAD, 204 and 304 without a body, chunked encoding
when no length is declared, the Content-Length checks, ``Connection: close``, a 500 when the app
fails before its response starts, a closed connection when it fails after, flow control) and is
cheaper per request:

- a response that is not chunked leaves in one ``write``: its head is held until its first body
  message (or its end, for HEAD, 204 and 304) and goes out with it (uvicorn writes head and body
  apart: two system calls per response). A chunked response's head and every chunk leave at
  once, and a held head is written before the connection is closed for any reason;
- the body signal is a small slotted object, not an ``asyncio.Event`` (a Python class with a
  deque of waiters, a loop check per call), and a body that came in one piece is handed over as
  it came, with no copy through a ``bytearray``;
- each header name is checked against the token rule once (a bounded set of names seen valid),
  each value on every response (one regular-expression search).

Measured with ``python -m cluster.lab.instructions`` (docs/explanation/design-decisions.md, "The
request cycle"). The protocol class (``nodes.serving.http_server._TimedHttpToolsProtocol``)
builds the cycle, feeds it the body and starts its task; ``tests/test_node_server_internals.py``
and ``tests/test_response_cycle.py`` hold it to the contract.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

COPY_LIMIT = 65_536
"""Up to this body size a held head is joined to its body (one buffer, one ``write`` system
call); a larger body goes with it through ``writelines`` (uvloop: one ``writev``)."""
VALID_NAMES_KEPT = 256
"""Header names remembered as valid (an app could send ever-new names: bounded)."""

_NAME_REFUSED = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
"""A byte that cannot be in a header name (RFC 9110 token), as uvicorn checks it."""
_VALUE_REFUSED = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
"""A control byte other than a tab in a header value: CR and LF would split the response."""
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_INTERNAL_ERROR_HEADERS = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"content-length", b"21"),
    (b"connection", b"close"),
]
_DISCONNECT = {"type": "http.disconnect"}

_valid_names: set[bytes] = set()


def _check_header(name: bytes, value: bytes) -> None:
    if name not in _valid_names:
        if _NAME_REFUSED.search(name):
            raise RuntimeError("Invalid HTTP header name.")
        if len(_valid_names) < VALID_NAMES_KEPT:
            _valid_names.add(name)
    if _VALUE_REFUSED.search(value):
        raise RuntimeError("Invalid HTTP header value.")


_SPECIAL_NAMES = frozenset({b"content-length", b"transfer-encoding", b"connection"})
"""Header names the head's loop acts on (length, chunking, closing)."""

_defaults: tuple[object, bytes] = (None, b"")
"""The server's default headers last seen (uvicorn makes a new list every second, with the new
date) and their lines, made once per list: a response then copies one bytes object."""


def _default_lines(headers: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    """The response lines of the server's default headers (``name: value`` CR LF each), made
    once per list of them; None when one must go through the head's loop (an invalid one, or
    one it acts on), which then takes them all."""
    global _defaults
    seen, block = _defaults  # one tuple: read whole even if another thread replaces it
    if headers is seen:
        return block
    lines = []
    for name, value in headers:
        try:
            _check_header(name, value)
        except RuntimeError:
            return None  # the loop refuses it, with its own words
        name = name.lower()
        if name in _SPECIAL_NAMES:
            return None
        lines.append(b"%s: %s\r\n" % (name, value))
    block = b"".join(lines)
    _defaults = (headers, block)  # the list held: its id is never another's while cached
    return block


def _nothing() -> None:
    pass


class BodySignal:
    """Set when body bytes, the body's end or a disconnect arrived (the protocol sets it; the
    cycle's ``receive`` waits for it and clears it). The cycle's ``message_event``, with the
    three methods of an ``asyncio.Event`` the protocol and the cycle use."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiters = self._waiters
        if waiters:
            self._waiters = None
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> None:
        if self._set:
            return
        # A future per waiter: cancelling one waiter must not cancel the others.
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = [waiter]
        else:
            self._waiters.append(waiter)
        try:
            await waiter
        finally:
            waiters = self._waiters
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)


class ResponseCycle:
    """One request's ``receive`` and ``send`` on its connection (see the module docstring).

    The protocol reads and writes ``body``, ``more_body``, ``message_event``, ``keep_alive``,
    ``disconnected``, ``response_started`` and ``response_complete`` as it does uvicorn's cycle,
    and calls ``run_asgi``; ``on_response`` is called once the response is complete."""

    __slots__ = (
        "__weakref__",  # a cycle can be watched going away (tests: no reference cycle)
        "_head",
        "access_log",
        "access_logger",
        "body",
        "chunked_encoding",
        "default_headers",
        "disconnected",
        "expected_content_length",
        "flow",
        "keep_alive",
        "logger",
        "message_event",
        "more_body",
        "on_response",
        "response_complete",
        "response_started",
        "scope",
        "transport",
        "waiting_for_100_continue",
    )

    def __init__(
        self,
        scope: dict[str, Any],
        transport: asyncio.Transport,
        flow: FlowControl,
        logger: logging.Logger,
        access_logger: logging.Logger,
        access_log: bool,
        default_headers: Sequence[tuple[bytes, bytes]],
        expect_100_continue: bool,
        keep_alive: bool,
        on_response: Callable[[], None],
    ) -> None:
        self.scope = scope
        self.transport = transport
        self.flow = flow
        self.logger = logger
        self.access_logger = access_logger
        self.access_log = access_log
        self.default_headers = default_headers
        self.message_event = BodySignal()
        self.on_response = on_response
        self.disconnected = False
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        self.body: bytes | bytearray = b""
        """The request body received and not yet handed to the app."""
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.chunked_encoding: bool | None = None
        self.expected_content_length = 0
        self._head: bytes | None = None
        """The head of a response that is not chunked, until it leaves with the body."""

    def add_body(self, data: bytes) -> int:
        """Body bytes from the parser; the size now waiting for the app."""
        body = self.body
        if not body:
            self.body = data
            return len(data)
        if type(body) is bytes:  # a second piece: from now on one growing buffer
            body = bytearray(body)
            self.body = body
        body += data
        return len(body)

    async def run_asgi(self, app: Callable[..., Any]) -> None:
        """Run the app for this request; what it leaves wrong is logged and answered as
        uvicorn does (500 before the response started, the connection closed after)."""
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            self.logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                await self._send_500()
            else:
                self.close_connection()
        else:
            if result is not None:
                self.logger.error("ASGI callable should return None, but returned '%s'.", result)
                self.close_connection()
            elif not self.response_started and not self.disconnected:
                self.logger.error("ASGI callable returned without starting response.")
                await self._send_500()
            elif not self.response_complete and not self.disconnected:
                self.logger.error("ASGI callable returned without completing response.")
                self.close_connection()
        finally:
            # The protocol holds this cycle until the next request: no reference back to it.
            self.on_response = _nothing

    async def _send_500(self) -> None:
        await self.send(
            {"type": "http.response.start", "status": 500, "headers": _INTERNAL_ERROR_HEADERS}
        )
        await self.send({"type": "http.response.body", "body": b"Internal Server Error"})

    def close_connection(self) -> None:
        """Close the connection, a held head written first."""
        self._flush()
        self.transport.close()

    def _flush(self) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self.transport.write(head)

    async def receive(self) -> dict[str, Any]:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(_CONTINUE)
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            self.flow.resume_reading()
            event = self.message_event
            if not event.is_set():  # no coroutine to await when the body is already in
                await event.wait()
            event.clear()
        if self.disconnected or self.response_complete:
            return _DISCONNECT.copy()
        body = self.body
        self.body = b""
        if type(body) is not bytes:
            body = bytes(body)
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: dict[str, Any]) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        if not self.response_started:
            self._start(message)
        elif not self.response_complete:
            self._body(message)
        else:
            raise RuntimeError(
                f"Unexpected ASGI message '{message['type']}' sent, after response already "
                "completed."
            )

    def _start(self, message: dict[str, Any]) -> None:
        if message["type"] != "http.response.start":
            raise RuntimeError(
                f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
            )
        self.response_started = True
        self.waiting_for_100_continue = False
        status = message["status"]
        scope = self.scope
        if self.access_log:
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(scope),  # type: ignore[arg-type]
                scope["method"],
                get_path_with_query_string(scope),  # type: ignore[arg-type]
                scope["http_version"],
                status,
            )
        content = [STATUS_LINE[status]]
        append = content.append
        close_sent = False
        defaults = _default_lines(self.default_headers)
        if defaults is None:
            groups: Sequence[Any] = (self.default_headers, message.get("headers", ()))
        else:
            append(defaults)
            groups = (message.get("headers", ()),)
        for headers in groups:
            for name, value in headers:
                _check_header(name, value)
                name = name.lower()
                if name == b"content-length" and self.chunked_encoding is None:
                    self.expected_content_length = int(value.decode())
                    self.chunked_encoding = False
                elif name == b"transfer-encoding" and value.lower() == b"chunked":
                    self.expected_content_length = 0
                    self.chunked_encoding = True
                elif name == b"connection" and b"close" in [
                    token.lower().strip() for token in value.split(b",")
                ]:
                    self.keep_alive = False
                    close_sent = True
                append(b"%s: %s\r\n" % (name, value))
        if not self.keep_alive and not close_sent:
            append(b"connection: close\r\n")
        if self.chunked_encoding is None and scope["method"] != "HEAD" and status not in (204, 304):
            self.chunked_encoding = True  # neither a length nor chunked declared
            append(b"transfer-encoding: chunked\r\n")
        append(b"\r\n")
        head = b"".join(content)
        if self.chunked_encoding:
            self.transport.write(head)
        else:
            self._head = head

    def _body(self, message: dict[str, Any]) -> None:
        if message["type"] != "http.response.body":
            raise RuntimeError(
                f"Expected ASGI message 'http.response.body', but got '{message['type']}'."
            )
        body = message.get("body", b"")
        more_body = message.get("more_body", False)
        transport = self.transport
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
        elif self.chunked_encoding:
            chunk = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            transport.write(chunk if more_body else chunk + b"0\r\n\r\n")
        else:
            size = len(body)
            if size > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= size
            head = self._head
            if head is not None:
                self._head = None
                if size <= COPY_LIMIT:
                    transport.write(b"".join((head, body)))  # body: any bytes-like
                else:
                    transport.writelines((head, body))
            elif size:
                transport.write(body)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self._flush()  # HEAD, 204, 304: the head alone
            self.message_event.set()
            if not self.keep_alive:
                transport.close()
            self.on_response()
