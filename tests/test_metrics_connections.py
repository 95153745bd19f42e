"""The metrics port is served like the node: no thread per connection, the header bound and the
header timeout.

Finding reproduced: prometheus-client's threaded HTTP server started one thread per connection
and timed none out: 300 half-sent requests made 302 threads, 50 still open after 75 s. Now the
node's own server listens on the metrics port too (uvicorn in a node process, hypercorn's trio
worker in process): many half-sent requests add no thread, each is closed by the header timeout
(the client here never finishes one), a header block past the bound is answered 431, and the
metrics are still served meanwhile.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from cluster.serve import serve_http_node
from nodes.http import DEFAULT_MAX_HEADER_BYTES, ServerTimeouts
from nodes.serving.operator import OperatorOptions
from nodes.serving.settings import demo_settings
from tests.own_redis import free_port
from tests.test_header_bound import Served, exchange, request_with_header, status_of

HALF_SENT = 120
"""Connections that each send half a request to the metrics port and then nothing."""
THREAD_SLACK = 4
"""Threads a server may start on its own while the test runs (a resolver, a pool worker): the
old server started one per connection, HALF_SENT here."""
TIMEOUT_S = 1.0
"""The header timeout (uvicorn) or idle timeout (hypercorn: its idle timer runs until a
request's headers are parsed) the nodes get."""
STEP_S = 60.0
"""Deadline of one step: a guard against a hang, not a measurement."""


async def open_half_sent(port: int) -> list[trio.SocketStream]:
    streams = []
    for _ in range(HALF_SENT):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /metrics HTTP/1.1\r\nhost: metrics\r\nx-slow: ")
        streams.append(stream)
    return streams


async def closed_by_the_server(stream: trio.SocketStream) -> bool:
    """Wait (within the guard) until the server ends the connection; True when it did."""
    with trio.move_on_after(STEP_S):
        try:
            while await stream.receive_some(4096):
                pass
        except trio.BrokenResourceError:
            pass
        return True
    return False


async def scrape(port: int) -> set[str]:
    async with httpx.AsyncClient(timeout=STEP_S) as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200, response.text
    return {f.name for f in text_string_to_metric_families(response.text)}


async def the_metrics_port_is_bounded(port: int, count: Callable[[], int]) -> None:
    """The checks both servers pass; ``count()`` counts the serving process' threads."""
    assert "notes_requests" in await scrape(port)
    before = count()
    streams = await open_half_sent(port)
    try:
        assert "notes_requests" in await scrape(port), "served beside the half-sent requests"
        during = count()
        assert during - before <= THREAD_SLACK, (before, during)
        served = Served("127.0.0.1", port)
        over = await exchange(served, request_with_header(DEFAULT_MAX_HEADER_BYTES + 1))
        assert status_of(over) == 431, over[:200]
        with trio.fail_after(STEP_S * 2):
            ended = [await closed_by_the_server(s) for s in streams]
        assert all(ended), f"{ended.count(False)} half-sent requests still open"
    finally:
        for stream in streams:
            await stream.aclose()
    assert "notes_requests" in await scrape(port)


# --- a node process: uvicorn ------------------------------------------------------------------


@contextmanager
def node_process_with_metrics(redis_url: str, metrics_port: int) -> Iterator[tuple[int, str]]:
    """A node process over the embedded store with metrics on ``metrics_port``; yields its pid
    and its MCP URL."""
    args = ["--redis", redis_url, "--embedded", "--prefix", "nctmet", "--node-id", "met"]
    args += ["--headers-timeout", str(TIMEOUT_S), "--metrics-port", str(metrics_port)]
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
        yield proc.pid, line[0].decode().strip()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
async def test_a_node_process_serves_metrics_without_a_thread_per_connection(
    embedded_url: str,
) -> None:
    port = free_port()
    with node_process_with_metrics(embedded_url, port) as (pid, _):
        await the_metrics_port_is_bounded(port, partial(threads_of, pid))


async def test_a_node_process_serves_metrics_on_its_metrics_port_only_and_counts_the_other(
    embedded_url: str,
) -> None:
    """The node process's server hands the metrics port's connections to the metrics endpoint
    (``port_apps``; the app no longer checks each request's port): any path there is the
    metrics, never the node, and the MCP port never serves the metrics but is counted."""
    port = free_port()
    with node_process_with_metrics(embedded_url, port) as (_, url):
        base = url.removesuffix("/mcp")
        async with httpx.AsyncClient(timeout=STEP_S) as client:
            for method, path in (("POST", "/mcp"), ("GET", "/healthz"), ("GET", "/anything")):
                reply = await client.request(method, f"http://127.0.0.1:{port}{path}", json={})
                assert reply.status_code == 200, (method, path)
                assert "# TYPE notes_requests_total counter" in reply.text, (method, path)
            before = requests_total(await client.get(f"http://127.0.0.1:{port}/metrics"))
            for _ in range(3):
                assert (await client.get(f"{base}/metrics")).status_code == 404
                assert (await client.post(url, json={"jsonrpc": "2.0"})).status_code == 401
            assert (await client.get(f"{base}/healthz")).json() == {"status": "ok"}
            after = requests_total(await client.get(f"http://127.0.0.1:{port}/metrics"))
    assert after - before == 6  # the MCP port's six; its health probe and the scrapes are not


def requests_total(reply: httpx.Response) -> float:
    """The sum of ``notes_requests_total`` in a scrape."""
    families = text_string_to_metric_families(reply.text)
    return sum(s.value for f in families if f.name == "notes_requests" for s in f.samples)


# --- an in-process node: hypercorn's trio worker ----------------------------------------------


async def test_an_in_process_node_serves_metrics_without_a_thread_per_connection(
    embedded_url: str, nursery: trio.Nursery
) -> None:
    settings = replace(demo_settings(), timeouts=ServerTimeouts(TIMEOUT_S, 10.0, TIMEOUT_S, 1.0))
    port = free_port()
    ops = OperatorOptions(metrics_port=port)
    await nursery.start(
        partial(serve_http_node, settings, embedded_url, embedded=True, host="127.0.0.1",
                port=0, node_id="met-trio", prefix="nctmettrio", ops=ops)
    )  # fmt: skip
    await the_metrics_port_is_bounded(port, threading.active_count)
    nursery.cancel_scope.cancel()
