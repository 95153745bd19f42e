"""Refusals that must not cost a client its other answers, on both servers a node runs on.

Layer: tests. A node process (uvicorn with httptools, ``nodes.serving.http_server``) and an
in-process node (hypercorn's trio worker) over the embedded store:

- a client that pipelines a ``notes_create`` and then a request whose header block is past the
  bound gets the create's own answer first, then the 431 (the create ran: taking the 431 as its
  answer would make the client send it again);
- a body past the size bound is answered 413 on a connection that stays whole: the rest of the
  body is read and dropped, so a client still sending (a slow link, a loaded machine: forced
  here by a pause after the first part) reads its 413 instead of a reset, and the same
  connection serves its next request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
import trio

from nodes.http import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_HEADER_BYTES
from nodes.serving.demo import ALICE_NOTES
from tests.harness import meta
from tests.test_header_bound import Served, hypercorn_node, node_process

ALICE_TOKEN = "alice-demo-token"
STEP_S = 60.0
"""Deadline of one exchange: a guard against a hang, not a measurement."""
LARGE_BODY = 5 * 1024 * 1024
"""The refused body of the finding: five times the node's 1 MiB bound."""
PAUSE_S = 0.5
"""The client's pause after the first part of a large body: a server that answers and closes
at once has closed by then, and the rest of the body meets a closed socket (a reset)."""
CHUNK = 64 * 1024


def post(body: bytes, *, length: int | None = None, request_id: int = 1) -> bytes:
    """The head of a ``tools/call`` POST carrying ``body`` (``length``: the declared size)."""
    headers = {
        "host": "node",
        "authorization": f"Bearer {ALICE_TOKEN}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "notes_create",
        "content-length": str(len(body) if length is None else length),
    }
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"POST /mcp HTTP/1.1\r\n{head}\r\n".encode()


def create(title: str, request_id: int) -> bytes:
    """A whole ``notes_create`` request."""
    params = {
        "name": "notes_create",
        "arguments": {"workspaceUri": ALICE_NOTES, "title": title, "body": "pipelined"},
        "_meta": meta(),
    }
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    body = json.dumps(message).encode()
    return post(body, request_id=request_id) + body


def oversized_get() -> bytes:
    pad = b"a" * (DEFAULT_MAX_HEADER_BYTES + 1)
    return b"GET /healthz HTTP/1.1\r\nhost: node\r\nx-pad: " + pad + b"\r\n\r\n"


def responses(data: bytes) -> list[tuple[int, bytes]]:
    """Each complete response in ``data`` (heads with Content-Length): status and body."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, data[:200]
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        fields = dict(line.lower().split(b": ", 1) for line in lines[1:])
        length = int(fields[b"content-length"])
        out.append((status, rest[:length]))
        data = rest[length:]
    return out


async def read_until_closed(stream: trio.SocketStream) -> bytes:
    answer = bytearray()
    while chunk := await stream.receive_some(CHUNK):
        answer += chunk
    return bytes(answer)


async def read_one(stream: trio.SocketStream) -> tuple[int, bytes]:
    """One whole response on a connection that stays open."""
    data = bytearray()
    while True:
        chunk = await stream.receive_some(CHUNK)
        assert chunk, f"the server closed the connection; read {bytes(data[:200])!r}"
        data += chunk
        head, sep, rest = bytes(data).partition(b"\r\n\r\n")
        if sep:
            length = int(
                dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:])[
                    b"content-length"
                ]
            )
            if len(rest) >= length:
                return responses(bytes(data))[0]


async def pipelined_create_then_oversized_header(served: Served, title: str) -> None:
    with trio.fail_after(STEP_S):
        stream = await trio.open_tcp_stream(served.host, served.port)
        async with stream:
            await stream.send_all(create(title, 7) + oversized_get())
            answers = responses(await read_until_closed(stream))
    assert [status for status, _ in answers] == [200, 431], answers
    created = json.loads(answers[0][1])
    assert created["id"] == 7, created
    assert created["result"]["structuredContent"]["title"] == title, created


async def large_body_then_next_request(served: Served) -> None:
    with trio.fail_after(STEP_S):
        stream = await trio.open_tcp_stream(served.host, served.port)
        async with stream:
            await stream.send_all(post(b"", length=LARGE_BODY) + b" " * CHUNK)
            await trio.sleep(PAUSE_S)
            sent = CHUNK
            while sent < LARGE_BODY:
                part = min(CHUNK * 8, LARGE_BODY - sent)
                await stream.send_all(b" " * part)
                sent += part
            status, body = await read_one(stream)
            assert status == 413, body
            await stream.send_all(b"GET /healthz HTTP/1.1\r\nhost: node\r\n\r\n")
            status, body = await read_one(stream)
            assert status == 200, body


async def declared_beyond_the_drain_bound_is_refused_at_once(served: Served) -> None:
    from nodes.http import DRAIN_MAX_BYTES

    with trio.fail_after(STEP_S):
        stream = await trio.open_tcp_stream(served.host, served.port)
        async with stream:
            await stream.send_all(post(b"", length=DRAIN_MAX_BYTES + 1))
            answers = responses(await read_until_closed(stream))
    assert [status for status, _ in answers] == [413], answers


@pytest.fixture
def process_node(embedded_url: str) -> Iterator[Served]:
    with node_process(embedded_url) as served:
        yield served


@asynccontextmanager
async def trio_node(embedded_url: str) -> AsyncIterator[Served]:
    async with trio.open_nursery() as nursery, hypercorn_node(embedded_url, nursery) as served:
        yield served
        nursery.cancel_scope.cancel()


async def test_a_node_process_answers_a_pipelined_create_before_the_431(
    process_node: Served,
) -> None:
    await pipelined_create_then_oversized_header(process_node, "pipelined before 431 (uvicorn)")


async def test_an_in_process_node_answers_a_pipelined_create_before_the_431(
    embedded_url: str,
) -> None:
    async with trio_node(embedded_url) as served:
        await pipelined_create_then_oversized_header(served, "pipelined before 431 (hypercorn)")


async def test_a_node_process_answers_413_to_a_slow_large_body_and_keeps_the_connection(
    process_node: Served,
) -> None:
    assert LARGE_BODY > DEFAULT_MAX_BODY_BYTES
    await large_body_then_next_request(process_node)
    await declared_beyond_the_drain_bound_is_refused_at_once(process_node)


async def test_an_in_process_node_answers_413_to_a_slow_large_body_and_keeps_the_connection(
    embedded_url: str,
) -> None:
    async with trio_node(embedded_url) as served:
        await large_body_then_next_request(served)
        await declared_beyond_the_drain_bound_is_refused_at_once(served)
