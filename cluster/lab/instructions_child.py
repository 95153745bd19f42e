"""The measured process of ``instructions``: one node's request path, delete flows in sequence,
callgrind's instrumentation on only around the measured ones.

Layer: cluster (the lab). Runs under ``valgrind --tool=callgrind --instr-atstart=no``,
started by ``cluster.lab.instructions`` as a file (``python -P FILE JOB``, never
``-m``) with ``PYTHONPATH`` the side's tree: the node (``nodes.serving.app.NodeApp``, its uvicorn
settings and protocol, the store) is that tree's, while this harness is the tool's own, the same
for every side, so its instructions cancel out of a ratio. It imports nothing of the bench
(the parent seeds the notes and hands them over in ``JOB``, a JSON file), so it runs against an
older tree too.

Each request goes either through the node's uvicorn protocol class (``config.http_protocol_class``:
httptools parsing, the response's head and body) on an in-memory transport, or (layer ``asgi``)
straight into the ASGI app as uvicorn would call it. No socket is between the harness and the
node; the store's Redis is a real one over loopback (its work is another process's). The
requests are made before the measured flows and the answers kept, then checked once the
instrumentation is off (round 1 offers the note and seals a ``requestState``, round 2 says
``deleted: true``): the harness's own work in the count is little more than handing bytes over.
The first wrong answer ends the process with exit 1 and says which. Prints one JSON line:
``{"flows": N, "failed": 0}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import uvloop
from uvicorn.server import ServerState

from nodes.sealing import new_nonce
from nodes.serving.app import NodeApp, NodeOptions
from nodes.serving.http_server import server_config
from nodes.serving.operator import OperatorOptions
from nodes.serving.settings import settings_for
from store.api import Confirmation
from store.client_factory import open_note_client
from store.notes import NoteStore

HOST, PORT = "127.0.0.1", 8000
"""The address the node believes it serves on (nothing listens there)."""

METRICS_PORT = 8001
"""The metrics port a ``METRICS=1`` side is told it has: requests to ``PORT`` get metered."""

PEER = ("127.0.0.1", 50000)
PROTOCOL_VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "wrk-flow", "version": "0.1"},
}
"""The per-request metadata the bench's wrk flow sends (``wrk_flow.lua``)."""

CALLGRIND_CONTROL_TIMEOUT_S = 60.0

HTTP_ENV = "NODE_HTTP"
"""``stock``: the node's requests go through uvicorn's own httptools protocol and request cycle
instead of the node server's (``node_config``), the one difference between two sides of the
same tree (``stock=TREE|NODE_HTTP=stock``)."""

DISCONNECT_AFTER_S = 30.0
"""An app that asks for more of a request than its one body gets a disconnect after this.
(The parent bounds the whole process; a request that hangs ends there.)"""


class FlowFailed(Exception):
    """A flow's answer was not the one a delete flow gives."""


@dataclass(frozen=True)
class Job:
    """What the parent hands over: the Redis, the notes to delete, how many flows of each kind."""

    redis_url: str
    prefix: str
    warmup: int
    flows: int
    layer: str
    """``protocol`` (the node behind its uvicorn protocol), ``asgi`` (the ASGI app alone) or
    ``store`` (no node: the store's work of each flow)."""
    metrics: bool
    instrument: bool
    targets: list[list[str]]
    """Per flow: bearer token, workspace URI, title, note id, tenant, principal."""

    @classmethod
    def load(cls, path: str) -> Job:
        """The job file the parent wrote."""
        with open(path, encoding="utf-8") as f:
            return cls(**json.load(f))


@dataclass(frozen=True)
class Request:
    """A request's head, made before the measured flows: the protocol's bytes (all but
    ``Content-Length``) and the ASGI scope's headers (all but ``content-length``)."""

    head: bytes
    headers: list[tuple[bytes, bytes]]


RoundTrip = Callable[[Request, bytes], Awaitable[tuple[int, bytes]]]
"""One request (its head, then its body) to the node: its status and body."""


def head_for(token: str) -> Request:
    """The head of a ``notes_delete`` call, as the bench's wrk flow sends it."""
    pairs = [
        (b"host", f"{HOST}:{PORT}".encode()),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", PROTOCOL_VERSION.encode()),
        (b"mcp-method", b"tools/call"),
        (b"mcp-name", b"notes_delete"),
        (b"authorization", b"Bearer " + token.encode()),
    ]
    head = b"POST /mcp HTTP/1.1\r\n" + b"".join(b"%s: %s\r\n" % p for p in pairs)
    return Request(head, pairs)


class MemoryTransport(asyncio.Transport):
    """The connection's far end: what the node writes is kept; every write wakes the waiting
    harness, which looks for a complete response (head and ``Content-Length`` bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self.arrived = asyncio.Event()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.data += data
        self.arrived.set()

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        raise FlowFailed("the node closed the connection")

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": (HOST, PORT), "peername": PEER}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def response(self) -> tuple[int, bytes] | None:
        """The status and body of the response written so far, once it is complete."""
        data = bytes(self.data)
        end = data.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = data[:end].lower()
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            raise FlowFailed(f"a response without Content-Length: {head!r}")
        length = int(head[at + 17 :].split(b"\r\n", 1)[0])
        body = data[end + 4 : end + 4 + length]
        if len(body) < length:
            return None
        return int(head[9:12]), body


def protocol_call(config: Any, state: dict[str, Any]) -> RoundTrip:
    """Requests through the node's uvicorn protocol, on one kept-alive connection."""
    transport = MemoryTransport()
    protocol = config.http_protocol_class(
        config=config,
        server_state=ServerState(),
        app_state=state,
        _loop=asyncio.get_running_loop(),
    )
    protocol.connection_made(transport)

    async def call(request: Request, body: bytes) -> tuple[int, bytes]:
        transport.data.clear()
        transport.arrived.clear()
        length = b"content-length: %d\r\n\r\n" % len(body)
        protocol.data_received(request.head + length + body)
        while (answer := transport.response()) is None:
            transport.arrived.clear()
            await transport.arrived.wait()
        return answer

    return call


def asgi_call(app: Any, state: dict[str, Any]) -> RoundTrip:
    """Requests straight into the ASGI app, with the scope and messages uvicorn would give."""

    async def call(request: Request, body: bytes) -> tuple[int, bytes]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "server": (HOST, PORT),
            "client": PEER,
            "scheme": "http",
            "method": "POST",
            "root_path": "",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "query_string": b"",
            "headers": [*request.headers, (b"content-length", b"%d" % len(body))],
            "state": state.copy(),
        }
        sent = False
        status, chunks = 0, []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(DISCONNECT_AFTER_S)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await app(scope, receive, send)
        return status, b"".join(chunks)

    return call


STATE_SLOT = "@STATE@"
STATE_KEY = b'"requestState":"'


@dataclass(frozen=True)
class Flow:
    """One delete flow's requests, made before the measured flows (the harness's own work kept
    out of the count, as far as it can be): round 1's body whole, round 2's around the
    ``requestState`` round 1 returns."""

    target: list[str]
    request: Request
    first: bytes
    second: tuple[bytes, bytes]


def body(request_id: int, target: list[str], extra: dict[str, Any]) -> bytes:
    """A ``tools/call`` of ``notes_delete`` (the wrk flow's JSON, compact)."""
    workspace, title = target[1], target[2]
    params = {
        "name": "notes_delete",
        "arguments": {"workspaceUri": workspace, "title": title},
        **extra,
        "_meta": META,
    }
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message, separators=(",", ":")).encode()


def flow_for(target: list[str], request_id: int) -> Flow:
    """The requests of the flow that deletes ``target``."""
    answer = {"action": "accept", "content": {"noteId": target[3], "confirm": True}}
    extra = {"inputResponses": {"confirm_delete": answer}, "requestState": STATE_SLOT}
    before, after = body(request_id + 1, target, extra).split(STATE_SLOT.encode())
    return Flow(target, head_for(target[0]), body(request_id, target, {}), (before, after))


Answers = tuple[tuple[int, bytes], tuple[int, bytes]]


async def run_flow(call: RoundTrip, flow: Flow) -> Answers:
    """Both rounds; round 2 sends back the ``requestState`` round 1 sealed."""
    first = await call(flow.request, flow.first)
    at = first[1].find(STATE_KEY)
    if at < 0:
        check(flow, (first, (0, b"")))  # says what came instead
    start = at + len(STATE_KEY)
    state = first[1][start : first[1].index(b'"', start)]
    before, after = flow.second
    second = await call(flow.request, before + state + after)
    return first, second


def result_of(answer: tuple[int, bytes], round_no: int, title: str) -> dict[str, Any]:
    """The JSON-RPC result of one answer, or ``FlowFailed`` saying what came instead."""
    status, raw = answer
    try:
        result = json.loads(raw)["result"] if status == 200 else None
    except (ValueError, KeyError, TypeError):
        result = None
    if not isinstance(result, dict):
        raise FlowFailed(f"{title!r} round {round_no}: HTTP {status} {raw[:300]!r}")
    return result


def check(flow: Flow, answers: Answers) -> None:
    """Round 1 must offer the note and seal a state, round 2 must delete it."""
    title, note_id = flow.target[2], flow.target[3]
    first = result_of(answers[0], 1, title)
    state = first.get("requestState")
    if first.get("resultType") != "input_required" or not isinstance(state, str):
        raise FlowFailed(f"{title!r} round 1: not input_required: {first!r:.300}")
    if note_id not in json.dumps(first.get("inputRequests")):
        raise FlowFailed(f"{title!r} round 1: note {note_id} not offered: {first!r:.300}")
    second = result_of(answers[1], 2, title)
    if (second.get("structuredContent") or {}).get("deleted") is not True:
        raise FlowFailed(f"{title!r} round 2: not deleted: {second!r:.300}")


def instrument(on: bool) -> None:
    """Turn callgrind's instrumentation of this process on or off."""
    subprocess.run(  # noqa: S603 - fixed argv, no shell
        ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],  # noqa: S607
        check=True,
        capture_output=True,
        timeout=CALLGRIND_CONTROL_TIMEOUT_S,
    )


def node_config(job: Job) -> Any:
    """The uvicorn settings of the node, built as ``nodes.serving.process`` builds them."""
    settings = settings_for(None, True, None)
    ops = (
        OperatorOptions(metrics_host=HOST, metrics_port=METRICS_PORT)
        if job.metrics
        else OperatorOptions()
    )
    options = NodeOptions(
        redis_url=job.redis_url,
        node_id="instructions",
        prefix=job.prefix,
        public_url=f"http://{HOST}:{PORT}",
        ops=ops,
        server_times_bodies=True,
    )
    config = server_config(
        NodeApp(settings, options),
        host=HOST,
        port=PORT,
        timeouts=settings.timeouts,
        max_header_bytes=settings.max_header_bytes,
    )
    if os.environ.get(HTTP_ENV) == "stock":
        config.http = "httptools"  # uvicorn's HttpToolsProtocol, read by config.load()
    return config


async def measure(call: RoundTrip, job: Job) -> int:
    """Warm up, then the measured flows with the instrumentation on; every answer checked.
    The count of measured flows."""
    flows = [flow_for(t, 2 * i) for i, t in enumerate(job.targets)]
    warm, measured = flows[: job.warmup], flows[job.warmup : job.warmup + job.flows]
    for f in warm:
        check(f, await run_flow(call, f))
    answers = []
    if job.instrument:
        instrument(True)
    for f in measured:
        answers.append(await run_flow(call, f))
    if job.instrument:
        instrument(False)
    for f, a in zip(measured, answers, strict=True):
        check(f, a)
    return len(answers)


async def store_flow(store: Any, target: list[str]) -> None:
    """The store's work of one delete flow, as the node asks it (round 1's ``find``, round 2's
    ``confirm``), or ``FlowFailed``. ``seeding.raw_flow`` does the same for the bench's ceiling;
    this copy keeps the harness the tool's own whatever the side's tree holds (see the module)."""
    _, workspace, title, _, tenant, principal = target
    snap = await store.find(tenant, workspace, title, 51)
    if len(snap.notes) != 1:
        raise FlowFailed(f"{title!r}: find gave {len(snap.notes)} notes")
    note = snap.notes[0]
    out = await store.confirm(
        Confirmation(
            tenant=tenant,
            nonce=new_nonce(),
            action="accept",
            answer_digest="0" * 64,
            exp_ms=snap.redis_now_ms + 300_000,
            note_id=note.note_id,
            expected_version=note.version,
            title=title,
            workspace=workspace,
            principal=principal,
            tool="notes_delete",
        )
    )
    if out.status != "executed":
        raise FlowFailed(f"{title!r}: confirm said {out.status}")


async def measure_store(job: Job) -> int:
    """The store's part of each flow alone, on the client a node opens; checked as it goes (a
    failure ends the run, and there is nothing to keep for later)."""
    targets = job.targets[: job.warmup + job.flows]
    async with open_note_client(job.redis_url, client_name="instructions") as client:
        store = NoteStore(client, prefix=job.prefix)
        for target in targets[: job.warmup]:
            await store_flow(store, target)
        if job.instrument:
            instrument(True)
        for target in targets[job.warmup :]:
            await store_flow(store, target)
        if job.instrument:
            instrument(False)
    return len(targets) - job.warmup


async def run(job: Job) -> int:
    """Start the node (uvicorn's lifespan), measure, stop it (``store``: no node)."""
    if job.layer == "store":
        return await measure_store(job)
    config = node_config(job)
    config.load()
    lifespan = config.lifespan_class(config)
    await lifespan.startup()
    if lifespan.should_exit:
        raise FlowFailed("the node's lifespan startup failed")
    try:
        state = lifespan.state
        if job.layer == "asgi":
            return await measure(asgi_call(config.loaded_app, state), job)
        return await measure(protocol_call(config, state), job)
    finally:
        await lifespan.shutdown()


def main() -> None:
    """``instructions_child.py JOB``: run the job, print the JSON line."""
    job = Job.load(sys.argv[1])
    try:
        flows = uvloop.run(run(job))
    except FlowFailed as exc:
        print(f"instructions: a flow failed: {exc}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"flows": flows, "failed": 0}), flush=True)


if __name__ == "__main__":
    main()
