"""Header blocks are bounded on every server a node runs on.

Finding reproduced: four unauthenticated connections each sending an unfinished 50 MB header
raised a node process from 84 to 281 MB until the header timeout, because httptools buffers a
header of any length. Now past ``max_header_bytes`` (32 KiB by default) the node answers 431 and
closes the connection, whether the block is unfinished (checked as it arrives) or complete.

Checked on a node process (uvicorn with httptools, as ``serve --processes`` and ``notes-cluster
node`` run it) and on an in-process node (hypercorn's trio worker, as ``serve`` runs nodes in a
trio process); the legacy adapter is served by the same two servers. The header timeouts are set
far beyond the tests' life, so only the size bound can end a connection. The attack is smaller
than the finding's (a few MB a connection): the bound acts after one read past 32 KiB.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
import trio

from cluster.serve import serve_http_node
from nodes.http import DEFAULT_MAX_HEADER_BYTES, ServerTimeouts
from nodes.serving.settings import demo_settings

NEVER_S = 3600.0
"""The header (and, on hypercorn, idle) timeout the tests give their nodes: longer than any test,
so a connection that ends was ended by the size bound."""
ATTACKERS = 4
ATTACK_BYTES = 8 * 1024 * 1024
"""What each attacking connection would send of one header value, never finishing it."""
PEAK_GROWTH_BOUND = 8 * 1024 * 1024
"""How much a node process' peak memory may grow while four connections send 8 MB headers: the
bound keeps at most 32 KiB and one read of each; without it the node held all 32 MB."""
STEP_S = 60.0
"""Deadline of one exchange: a guard against a hang, not a measurement."""
CHUNK = 64 * 1024


@dataclass
class Served:
    """A node's address (and, for a node process, its pid)."""

    host: str
    port: int
    pid: int | None = None

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"


def request_with_header(value_bytes: int) -> bytes:
    """A complete ``GET /healthz`` whose ``x-pad`` header holds ``value_bytes`` bytes."""
    return (
        b"GET /healthz HTTP/1.1\r\nhost: node\r\nx-pad: "
        + b"a" * value_bytes
        + b"\r\nconnection: close\r\n\r\n"
    )


async def exchange(served: Served, payload: bytes) -> bytes:
    """Send ``payload`` on a fresh connection and read until the server closes it."""
    with trio.fail_after(STEP_S):
        stream = await trio.open_tcp_stream(served.host, served.port)
        async with stream:
            await stream.send_all(payload)
            answer = bytearray()
            try:
                while chunk := await stream.receive_some(CHUNK):
                    answer += chunk
            except trio.BrokenResourceError:
                pass
            return bytes(answer)


async def unfinished_header(served: Served, total: int) -> bytes:
    """Stream one header value of up to ``total`` bytes that never ends; return what the server
    answered once it ended the connection (it must: this client never would)."""
    answer = bytearray()
    with trio.fail_after(STEP_S):
        stream = await trio.open_tcp_stream(served.host, served.port)
        async with stream, trio.open_nursery() as nursery:

            async def read() -> None:
                try:
                    while chunk := await stream.receive_some(CHUNK):
                        answer.extend(chunk)
                except trio.BrokenResourceError:
                    pass
                nursery.cancel_scope.cancel()  # the server ended the connection

            nursery.start_soon(read)
            sent = 0
            try:
                await stream.send_all(b"GET /healthz HTTP/1.1\r\nhost: node\r\nx-pad: ")
                while sent < total:
                    await stream.send_all(b"a" * CHUNK)
                    sent += CHUNK
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            await trio.sleep_forever()  # until read() sees the server end it
    return bytes(answer)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def refused_or_cut(answer: bytes) -> bool:
    """431, or a connection reset before the answer could be read (the client was still
    sending when the server closed: a TCP reset may discard the 431)."""
    return answer == b"" or answer.startswith(b"HTTP/1.1 431 ")


async def still_serves(served: Served) -> None:
    async with httpx.AsyncClient(timeout=STEP_S) as client:
        response = await client.get(f"{served.base}/healthz")
    assert response.status_code == 200, response.text


async def the_bound_holds(served: Served) -> None:
    """The checks both servers pass."""
    under = DEFAULT_MAX_HEADER_BYTES - 1024
    assert status_of(await exchange(served, request_with_header(under))) == 200
    over = await exchange(served, request_with_header(DEFAULT_MAX_HEADER_BYTES + 1))
    assert status_of(over) == 431, over[:200]
    answers: list[bytes] = []

    async def attack() -> None:
        answers.append(await unfinished_header(served, ATTACK_BYTES))

    async with trio.open_nursery() as nursery:
        for _ in range(ATTACKERS):
            nursery.start_soon(attack)
    assert len(answers) == ATTACKERS
    assert all(refused_or_cut(a) for a in answers), [a[:80] for a in answers]
    await still_serves(served)


# --- a node process: uvicorn with httptools ---------------------------------------------------


@contextmanager
def node_process(redis_url: str) -> Iterator[Served]:
    """A node process over the embedded store; killed by pid on exit."""
    args = ["--redis", redis_url, "--embedded", "--prefix", "ncthdr", "--node-id", "hdr"]
    args += ["--headers-timeout", str(NEVER_S)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodes.serving.process", *args], stdout=subprocess.PIPE
    )
    try:
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(STEP_S)
        assert line, "the node process printed no URL in time"
        assert line[0], "the node process exited before it was ready"
        host_port = line[0].decode().strip().removeprefix("http://").removesuffix("/mcp")
        host, port = host_port.rsplit(":", 1)
        yield Served(host, int(port), proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def peak_memory(pid: int) -> int:
    """The process' peak resident memory in bytes (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
async def test_a_node_process_answers_431_past_the_header_bound_and_holds_no_more(
    embedded_url: str,
) -> None:
    with node_process(embedded_url) as served:
        assert served.pid is not None
        # Warm up (the first requests import and allocate what every later one reuses).
        await still_serves(served)
        await exchange(served, request_with_header(DEFAULT_MAX_HEADER_BYTES + 1))
        before = peak_memory(served.pid)
        await the_bound_holds(served)
        grown = peak_memory(served.pid) - before
        assert grown < PEAK_GROWTH_BOUND, f"peak memory grew by {grown} bytes"


def block_of_size(size: int) -> bytes:
    """A complete ``GET /healthz`` whose header block is ``size`` bytes as the bound counts
    them (``header_block_size``: the target, then ``name: value`` plus CRLF per line)."""
    fixed = [(b"host", b"node"), (b"connection", b"close")]
    used = len(b"/healthz") + sum(len(n) + len(v) + 4 for n, v in fixed)
    lines = []
    while used < size:
        value = b"b" * min(1000, size - used - len(b"x-h000") - 4)
        name = b"x-h%03d" % len(lines)
        lines.append((name, value))
        used += len(name) + len(value) + 4
    assert used == size
    head = b"".join(b"%s: %s\r\n" % pair for pair in [fixed[0], *lines, fixed[1]])
    return b"GET /healthz HTTP/1.1\r\n" + head + b"\r\n"


async def test_a_node_process_measures_a_complete_block_exactly(embedded_url: str) -> None:
    """A block of many headers that fits the bound exactly passes; one byte more is 431."""
    with node_process(embedded_url) as served:
        fits = block_of_size(DEFAULT_MAX_HEADER_BYTES)
        assert status_of(await exchange(served, fits)) == 200
        over = block_of_size(DEFAULT_MAX_HEADER_BYTES + 1)
        assert status_of(await exchange(served, over)) == 431


# --- an in-process node: hypercorn's trio worker ----------------------------------------------


@asynccontextmanager
async def hypercorn_node(redis_url: str, nursery: trio.Nursery) -> AsyncIterator[Served]:
    settings = demo_settings()
    settings = replace(settings, timeouts=ServerTimeouts(NEVER_S, NEVER_S, NEVER_S, 1.0))
    url: str = await nursery.start(
        lambda task_status: serve_http_node(
            settings,
            redis_url,
            embedded=True,
            host="127.0.0.1",
            port=0,
            node_id="hdr-trio",
            prefix="ncthdrtrio",
            task_status=task_status,
        )
    )
    host, port = url.removeprefix("http://").removesuffix("/mcp").rsplit(":", 1)
    yield Served(host, int(port))


async def test_an_in_process_node_answers_431_past_the_header_bound(
    embedded_url: str, nursery: trio.Nursery
) -> None:
    async with hypercorn_node(embedded_url, nursery) as served:
        await the_bound_holds(served)
        nursery.cancel_scope.cancel()
