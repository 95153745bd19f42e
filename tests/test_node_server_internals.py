"""The node's uvicorn protocol (``nodes.serving.http_server``): one write per complete response, one
deadline per connection, and the uvicorn internals both rely on.

Layer: tests. The protocol runs on a fake transport that records each write (a system call on a
real one), on uvloop as in a node process; the deadline tests run an in-process server on
loopback with short timeouts. The node's answers are a head and one body: they must leave in one
write, while a streaming response's head and chunks still leave as they are sent. The header,
body and idle bounds share one timer per connection: requests on a keep-alive connection arm
none. Should a uvicorn upgrade change what the protocol hooks, the checks below fail instead of
the cuts silently going away.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn
import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from nodes.http import ServerTimeouts
from nodes.serving.http_server import _TimedHttpToolsProtocol, server_config
from nodes.serving.response_cycle import ResponseCycle
from tests.own_redis import free_port

App = Callable[[Any, Any, Any], Awaitable[None]]
GET = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"
BODY = b'{"jsonrpc":"2.0","id":1,"result":{}}'
STEP_S = 10.0
"""A guard against a hang, not a measurement."""
SHORT_S = 0.3
"""The short bounds of the deadline tests."""


async def answer(scope: Any, receive: Any, send: Any) -> None:
    """A node-like answer: a head declaring the length, then the body in one message."""
    if scope["type"] != "http":
        return
    await receive()
    headers = [(b"content-length", str(len(BODY)).encode()), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY})


class FakeTransport(asyncio.Transport):
    """Records every write (``writelines`` is one write: uvloop sends it with one ``writev``)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.writes.append(b"".join(list_of_data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        addresses = {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}
        return addresses.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class CountingLoop:
    """The protocol's loop, counting the timers it schedules."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.timers = 0

    def call_later(self, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        self.timers += 1
        return self._loop.call_later(*args, **kwargs)

    def call_at(self, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        self.timers += 1
        return self._loop.call_at(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)


def connection(
    app: App, timeouts: ServerTimeouts | None = None
) -> tuple[_TimedHttpToolsProtocol, FakeTransport, CountingLoop]:
    """The node's protocol on a fake transport (call from inside a running loop)."""
    config = server_config(app, host="127.0.0.1", port=0, timeouts=timeouts or ServerTimeouts())
    loop = CountingLoop(asyncio.get_running_loop())
    protocol = _TimedHttpToolsProtocol(config, ServerState(), {}, _loop=loop)  # type: ignore[arg-type]
    transport = FakeTransport()
    protocol.connection_made(transport)
    return protocol, transport, loop


async def settle() -> None:
    """Let the request's task run until it waits on something the test controls."""
    for _ in range(20):
        await asyncio.sleep(0)


def run(test: Callable[[], Awaitable[None]]) -> None:
    """On uvloop, as a node process serves."""
    uvloop.run(asyncio.wait_for(test(), STEP_S))


def split(response: bytes) -> tuple[bytes, bytes]:
    head, separator, body = response.partition(b"\r\n\r\n")
    assert separator, response
    return head, body


# --- one write per complete response ----------------------------------------------------------


def test_a_complete_response_leaves_in_one_write() -> None:
    async def scenario() -> None:
        protocol, transport, _ = connection(answer)
        for _ in range(3):  # keep-alive: each response is one write
            before = len(transport.writes)
            protocol.data_received(GET)
            await settle()
            assert len(transport.writes) == before + 1, transport.writes[before:]
            head, body = split(transport.writes[-1])
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"content-length: %d" % len(BODY) in head
            assert body == BODY
        assert not transport.closed

    run(scenario)


def test_an_answered_request_is_freed_without_the_cyclic_collector() -> None:
    """A request's cycle (its signal, message dicts, held head) goes the moment its task ends:
    a reference cycle per request (a held head and the cycle holding each other, as they once
    did, or the cycle keeping the protocol's callback) leaves a few tens of objects per request
    to the cyclic collector."""

    async def scenario() -> None:
        protocol, transport, _ = connection(answer)
        gc.collect()
        gc.disable()
        try:
            protocol.data_received(GET)
            await settle()
            first = weakref.ref(protocol.cycle)
            protocol.data_received(GET)  # the next request replaces the protocol's own reference
            await settle()
            assert len(transport.writes) == 2
            assert first() is None, gc.get_referrers(first())
        finally:
            gc.enable()

    run(scenario)


def test_a_streaming_response_sends_its_head_and_each_chunk_as_they_come() -> None:
    """The legacy adapter's SSE: a head without a length, then chunks with pauses between."""
    steps = [asyncio.Event() for _ in range(3)]

    async def sse(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await steps[0].wait()
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await steps[1].wait()
        await send({"type": "http.response.body", "body": b"data: 2\n\n", "more_body": True})
        await steps[2].wait()
        await send({"type": "http.response.body", "body": b"data: 3\n\n", "more_body": False})

    async def scenario() -> None:
        protocol, transport, _ = connection(sse)
        protocol.data_received(GET)
        await settle()
        assert len(transport.writes) == 1, "the head is not held"
        assert b"transfer-encoding: chunked" in transport.writes[0]
        for i, step in enumerate(steps, 1):
            step.set()
            await settle()
            assert len(transport.writes) == 1 + i, f"chunk {i} is not held"
            assert b"data: %d\n\n" % i in transport.writes[-1]
        assert transport.writes[-1].endswith(b"0\r\n\r\n")

    run(scenario)


def test_a_declared_length_sent_in_chunks_has_its_head_go_with_the_first() -> None:
    second = asyncio.Event()

    async def two_chunks(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-length", b"6")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"abc", "more_body": True})
        await second.wait()
        await send({"type": "http.response.body", "body": b"def"})

    async def scenario() -> None:
        protocol, transport, _ = connection(two_chunks)
        protocol.data_received(GET)
        await settle()
        assert len(transport.writes) == 1
        assert split(transport.writes[0])[1] == b"abc"
        second.set()
        await settle()
        assert transport.writes[1:] == [b"def"]

    run(scenario)


def test_a_head_response_with_a_length_is_sent_when_it_completes() -> None:
    async def scenario() -> None:
        protocol, transport, _ = connection(answer)
        protocol.data_received(b"HEAD / HTTP/1.1\r\nhost: x\r\n\r\n")
        await settle()
        assert len(transport.writes) == 1
        head, body = split(transport.writes[0])
        assert b"content-length: %d" % len(BODY) in head
        assert body == b""
        protocol.data_received(GET)  # the connection carries on
        await settle()
        assert split(transport.writes[-1])[1] == BODY

    run(scenario)


@pytest.mark.parametrize("status", [202, 204, 304])
def test_an_empty_answer_leaves_in_one_write(status: int) -> None:
    async def empty(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [] if status != 202 else [(b"content-length", b"0")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    async def scenario() -> None:
        protocol, transport, _ = connection(empty)
        protocol.data_received(GET)
        await settle()
        assert len(transport.writes) == 1
        head, body = split(transport.writes[0])
        assert head.startswith(b"HTTP/1.1 %d " % status)
        assert b"transfer-encoding" not in head
        assert body == b""

    run(scenario)


def test_100_continue_is_not_held() -> None:
    async def scenario() -> None:
        protocol, transport, _ = connection(answer)
        protocol.data_received(
            b"POST / HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n"
        )
        await settle()
        assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
        protocol.data_received(b"{}")
        await settle()
        assert len(transport.writes) == 2
        assert split(transport.writes[1])[1] == BODY

    run(scenario)


def test_a_body_longer_than_declared_still_gets_the_head_and_a_closed_connection() -> None:
    """uvicorn's Content-Length check raises before the body's write: the held head leaves
    when the connection is closed, as it had left before."""

    async def too_long(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-length", b"1")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"too long"})

    async def scenario() -> None:
        protocol, transport, _ = connection(too_long)
        protocol.data_received(GET)
        await settle()
        assert transport.closed
        assert len(transport.writes) == 1
        assert split(transport.writes[0]) == (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1",
            b"",
        )

    run(scenario)


def test_a_body_of_any_bytes_like_type_goes_with_its_head() -> None:
    async def view(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-length", str(len(BODY)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": memoryview(BODY)})

    async def scenario() -> None:
        protocol, transport, _ = connection(view)
        protocol.data_received(GET)
        await settle()
        assert len(transport.writes) == 1
        assert split(transport.writes[0])[1] == BODY

    run(scenario)


def test_a_large_body_goes_with_its_head_in_one_writelines() -> None:
    large = b"x" * 200_000

    async def big(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-length", str(len(large)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": large})

    async def scenario() -> None:
        protocol, transport, _ = connection(big)
        protocol.data_received(GET)
        await settle()
        assert len(transport.writes) == 1
        assert split(transport.writes[0])[1] == large

    run(scenario)


# --- one timer per connection -----------------------------------------------------------------


def test_keep_alive_requests_arm_no_timer_each() -> None:
    """Header, body and idle bounds: one timer for the connection (uvicorn's own keep-alive
    timer is never armed), moved at most once here (the idle bound is shorter)."""

    async def scenario() -> None:
        protocol, transport, loop = connection(answer)
        for _ in range(20):
            protocol.data_received(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
            await settle()
            assert protocol.timeout_keep_alive_task is None
        assert len(transport.writes) == 20
        assert loop.timers <= 2, loop.timers
        protocol.connection_lost(None)

    run(scenario)


def test_a_request_answered_before_its_body_came_is_idle_once_the_body_is_in() -> None:
    """A refusal answers before reading the body; the body then arrives: the connection is
    idle from there and closed at the idle bound (uvicorn's keep-alive timer, armed at the
    response's end, was cancelled by the body's bytes and the connection held no deadline)."""

    async def refuse(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    async def scenario() -> None:
        timeouts = ServerTimeouts(headers_s=60.0, body_s=60.0, idle_s=SHORT_S)
        protocol, transport, _ = connection(refuse, timeouts)
        protocol.data_received(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n")
        await settle()
        assert transport.writes[0].startswith(b"HTTP/1.1 401 ")
        protocol.data_received(b"{}")
        await asyncio.sleep(3 * SHORT_S)
        assert transport.closed
        protocol.connection_lost(None)

    run(scenario)


# --- the uvicorn internals the protocol relies on ---------------------------------------------


def test_the_uvicorn_internals_hooked_are_there() -> None:
    """What ``_TimedHttpToolsProtocol`` uses of uvicorn: if an upgrade renames any of it, this
    fails rather than the node's requests silently going back to uvicorn's cycle."""
    for name in (
        "on_response_complete",
        "_unset_keepalive_if_required",
        "_should_upgrade",
        "on_headers_complete",
        "on_message_begin",
        "on_url",
        "on_header",
    ):
        assert callable(getattr(HttpToolsProtocol, name)), name
    assert issubclass(_TimedHttpToolsProtocol, HttpToolsProtocol)

    async def scenario() -> None:
        protocol, _, _ = connection(answer)
        assert isinstance(protocol.pipeline, type(protocol.pipeline))
        assert isinstance(protocol.tasks, set)
        assert hasattr(protocol.server_state, "total_requests")
        protocol.data_received(b"POST /a%20b?x=1 HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        cycle = protocol.cycle
        assert isinstance(cycle, ResponseCycle), "the node's requests run on its own cycle"
        assert cycle.on_response == protocol.on_response_complete
        assert len(protocol.tasks) == 1
        scope = cycle.scope
        assert (scope["method"], scope["path"], scope["raw_path"]) == ("POST", "/a b", b"/a%20b")
        assert scope["query_string"] == b"x=1"
        assert scope["headers"] == [(b"host", b"x"), (b"content-length", b"0")]
        await settle()
        assert protocol.server_state.total_requests == 1
        assert not protocol.tasks

    run(scenario)


def test_pipelined_requests_are_answered_in_order() -> None:
    """The pipelined path stays uvicorn's own (``on_response_complete`` defers to it)."""

    async def echo_path(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        body = scope["path"].encode()
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def scenario() -> None:
        protocol, transport, _ = connection(echo_path)
        requests = (b"GET /%d HTTP/1.1\r\nhost: x\r\n\r\n" % i for i in range(3))
        protocol.data_received(b"".join(requests))
        await settle()
        bodies = [split(w)[1] for w in transport.writes]
        assert bodies == [b"/0", b"/1", b"/2"]
        assert protocol.server_state.total_requests == 3

    run(scenario)


# --- the deadlines on a real socket -----------------------------------------------------------


@contextmanager
def served(timeouts: ServerTimeouts) -> Iterator[int]:
    """An in-process server of the node's protocol on loopback; yields its port."""
    port = free_port()
    config = server_config(answer, host="127.0.0.1", port=port, timeouts=timeouts)
    config.lifespan = "off"
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run)
    thread.start()
    try:
        deadline = time.monotonic() + STEP_S
        while not server.started:
            assert thread.is_alive(), "the server stopped before it listened"
            assert time.monotonic() < deadline, "the server did not start in time"
            time.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        thread.join(STEP_S)


def closed_after(sock: socket.socket, start: float) -> tuple[bytes, float]:
    """What the server sends until it closes, and how long after ``start`` (seconds; taken
    before the bytes that start the server's clock were sent, so a slow test process can only
    make the wait look longer, never shorter)."""
    sock.settimeout(STEP_S)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data, time.monotonic() - start


def test_each_bound_closes_on_its_own_deadline() -> None:
    timeouts = ServerTimeouts(headers_s=2 * SHORT_S, body_s=2 * SHORT_S, idle_s=SHORT_S)
    with served(timeouts) as port:
        # Idle: closed about SHORT_S after the response, not at the (later) header deadline.
        with socket.create_connection(("127.0.0.1", port)) as sock:
            start = time.monotonic()
            sock.sendall(GET)
            data, waited = closed_after(sock, start)
            assert split(data)[1] == BODY
            assert 0.95 * SHORT_S <= waited < STEP_S, waited
        # Headers: a later request's block is timed from its first byte, not the connection's.
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(GET)
            sock.settimeout(STEP_S)
            assert split(sock.recv(65536))[1] == BODY
            time.sleep(SHORT_S / 2)
            start = time.monotonic()
            sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n")  # unfinished
            data, waited = closed_after(sock, start)
            assert data == b""
            assert 1.9 * SHORT_S <= waited < STEP_S, waited
        # Body: headers promising a body that never comes get 408 and a close.
        with socket.create_connection(("127.0.0.1", port)) as sock:
            start = time.monotonic()
            sock.sendall(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n")
            data, waited = closed_after(sock, start)
            assert data.startswith(b"HTTP/1.1 408 ")
            assert 1.9 * SHORT_S <= waited < STEP_S, waited
