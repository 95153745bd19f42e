"""The node's uvicorn protocol (``nodes.serving.http_server``): the bounds it adds to uvicorn's own,
and the contract with uvicorn that they rely on.

Layer: tests. The protocol runs on a fake transport that records each write, on uvloop as in a
node process; the deadline tests run an in-process server on loopback with short timeouts.
What the protocol uses of uvicorn is checked by name (``hooks_missing``): a uvicorn without it
makes a node serve on uvicorn's own protocol with a log line, which is tested here too, in a
node process started as ``serve --processes`` starts one.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import uvicorn
import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from nodes.http import DEFAULT_MAX_HEADER_BYTES, ServerTimeouts
from nodes.serving.http_server import (
    NEEDED_HOOKS,
    WORKER_HEALTHCHECK_S,
    BoundedHttpToolsProtocol,
    hooks_missing,
    server_config,
)
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
) -> tuple[BoundedHttpToolsProtocol, FakeTransport, CountingLoop]:
    """The node's protocol on a fake transport (call from inside a running loop)."""
    config = server_config(app, host="127.0.0.1", port=0, timeouts=timeouts or ServerTimeouts())
    loop = CountingLoop(asyncio.get_running_loop())
    protocol = BoundedHttpToolsProtocol(config, ServerState(), {}, loop)  # type: ignore[arg-type]
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


# --- one write per response ---------------------------------------------------------------------


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
            assert body == BODY
        assert not transport.closed

    run(scenario)


def test_a_stream_s_head_and_chunks_leave_as_they_are_sent() -> None:
    step = asyncio.Event()

    async def stream(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        await step.wait()
        await send({"type": "http.response.body", "body": b""})

    async def scenario() -> None:
        protocol, transport, _ = connection(stream)
        protocol.data_received(GET)
        await settle()
        assert transport.writes[0].endswith(b"transfer-encoding: chunked\r\n\r\n")
        assert transport.writes[1] == b"3\r\none\r\n"
        step.set()
        await settle()
        assert transport.writes[-1] == b"0\r\n\r\n"

    run(scenario)


def test_a_head_response_and_an_app_that_fails_after_its_head_still_send_the_head() -> None:
    async def head_only(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-length", b"10")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if scope["method"] == "HEAD":
            await send({"type": "http.response.body", "body": b""})
            return
        raise RuntimeError("failed after its head")

    async def scenario() -> None:
        protocol, transport, _ = connection(head_only)
        protocol.data_received(b"HEAD / HTTP/1.1\r\nhost: x\r\n\r\n")
        await settle()
        assert transport.writes[-1].startswith(b"HTTP/1.1 200 OK\r\n")
        assert not transport.closed
        protocol.data_received(GET)
        await settle()
        assert transport.writes[-1].startswith(b"HTTP/1.1 200 OK\r\n")  # written on close
        assert transport.closed

    run(scenario)


# --- the idle bound after an early answer -------------------------------------------------------


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


# --- the contract with uvicorn ------------------------------------------------------------------


def test_the_installed_uvicorn_has_every_hook_the_protocol_needs() -> None:
    assert hooks_missing() == []
    assert issubclass(BoundedHttpToolsProtocol, HttpToolsProtocol)
    config = server_config(answer, host="127.0.0.1", port=0, timeouts=ServerTimeouts())
    assert config.http is BoundedHttpToolsProtocol


def test_the_supervisor_waits_long_for_a_worker_s_health_check() -> None:
    """uvicorn's supervisor kills a worker that has not answered its health check in 5 s: on a
    busy host a worker still importing the node took longer, and ``node --workers 2`` killed
    and restarted its workers until the test waiting for it gave up."""
    config = server_config(answer, host="127.0.0.1", port=0, timeouts=ServerTimeouts(), workers=2)
    assert config.timeout_worker_healthcheck == WORKER_HEALTHCHECK_S
    assert 10 * uvicorn.Config(answer).timeout_worker_healthcheck <= WORKER_HEALTHCHECK_S


def test_a_missing_hook_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    stores_no_pipeline = {**NEEDED_HOOKS, HttpToolsProtocol.on_body: ("pipeline",)}
    assert hooks_missing(stores_no_pipeline) == ["HttpToolsProtocol.on_body: pipeline"]
    monkeypatch.delattr(HttpToolsProtocol, "on_body")
    assert hooks_missing() == ["HttpToolsProtocol.on_body"]


def test_without_a_hook_the_config_falls_back_to_uvicorn_s_protocol_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delattr(HttpToolsProtocol, "on_body")
    with caplog.at_level(logging.WARNING, logger="nodes.serving.http_server"):
        config = server_config(answer, host="127.0.0.1", port=0, timeouts=ServerTimeouts())
    assert config.http == "httptools"
    assert "HttpToolsProtocol.on_body" in caplog.text
    assert "serving on uvicorn's own protocol" in caplog.text


FALLBACK_NODE = """
import sys
from uvicorn.supervisors import multiprocess
del multiprocess.Process.server  # as uvicorn 0.50 and older: a hook the node needs is absent
from nodes.serving.process import main
main(sys.argv[1:])
"""


def test_a_node_process_without_a_hook_serves_on_stock_uvicorn_and_logs_it(
    embedded_url: str,
) -> None:
    args = ["--redis", embedded_url, "--embedded", "--prefix", "nctfallback"]
    proc = subprocess.Popen(
        [sys.executable, "-c", FALLBACK_NODE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(STEP_S * 3)
        assert line, "the node process printed no URL in time"
        assert line[0], "the node process exited before it was ready"
        base = line[0].decode().strip().removesuffix("/mcp")
        assert httpx.get(f"{base}/healthz", timeout=STEP_S).status_code == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=STEP_S * 3)
    text = err.decode()
    assert "lacks what the node's HTTP protocol needs (Process.server)" in text, text
    assert proc.returncode == 0, text


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
        data = b"".join(transport.writes)
        bodies = [split(part)[1] for part in data.split(b"HTTP/1.1 ")[1:]]
        assert bodies == [b"/0", b"/1", b"/2"]
        assert protocol.server_state.total_requests == 3

    run(scenario)


def test_a_refused_header_block_waits_for_the_answers_parsed_before_it() -> None:
    """Pipelined: a request, then a block past the bound. The first is answered, then the 431,
    then the close; nothing after the refused block is parsed or run."""
    release = asyncio.Event()
    paths: list[str] = []

    async def slow(scope: Any, receive: Any, send: Any) -> None:
        paths.append(scope["path"])
        await receive()
        await release.wait()
        headers = [(b"content-length", str(len(BODY)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": BODY})

    async def scenario() -> None:
        protocol, transport, _ = connection(slow)
        big = b"GET /big HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * DEFAULT_MAX_HEADER_BYTES
        protocol.data_received(GET + big + b"\r\n\r\n" + GET)
        await settle()
        assert transport.writes == []
        assert not transport.closed
        release.set()
        await settle()
        data = b"".join(transport.writes)
        assert data.startswith(b"HTTP/1.1 200 "), data[:200]
        assert data.index(BODY) < data.index(b"HTTP/1.1 431 "), data[:400]
        assert transport.closed
        assert paths == ["/"]

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
