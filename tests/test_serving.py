"""The production serving path: node processes on uvicorn, their timeouts and their SIGTERM drain.

Layer: tests. Node processes (``python -m nodes.serving.process``, as ``serve --processes`` starts
them) serve the demo fixture on the suite's own ``redis-server`` (whatever
``NOTES_CLUSTER_TEST_REDIS`` says) under a key prefix of the test's own. A slow client that stops
mid-headers or mid-body has its connection closed; a node sent SIGTERM under load from
several clients stops accepting, finishes what it had started, and exits 0: every create it
acknowledged is in the store, and the clients, refused or cut off, carry on on the other node.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
import redis
import trio
from mcp.client import ClientRequestContext
from prometheus_client.parser import text_string_to_metric_families

from cluster.serve import seed_demo_notes, start_process_nodes
from nodes.http import make_app
from nodes.protocol import Node
from nodes.serving.demo import ALICE_NOTES, DEMO_TENANT
from nodes.serving.settings import demo_settings
from store.client_factory import open_redis
from store.keys import TenantKeys
from store.notes import NoteStore
from tests.conftest import delete_prefix, new_prefix, suite_redis_url
from tests.harness import meta
from tests.own_redis import free_port, own_redis
from tests.test_legacy import ALICE_DOCS, deletions, legacy_sdk_client
from tests.test_sdk_interop import DELETE_ARGS, Elicitations, tps_reports

ALICE_TOKEN = "alice-demo-token"
START_TIMEOUT_S = 120.0
"""A hang guard for a node process to listen: ``node --workers 2`` took 47 s on two cores under
a load average of 13."""
SHORT_TIMEOUT_S = 1.0
"""The header and body timeouts the slow-client tests give their node."""
DRAIN_S = 5.0
CLIENTS = 4
MAX_CREATES = 2000
"""Per client: the bound on its loop (it normally stops long before, when the test is done)."""
SIGTERM_AFTER = 30
"""Acknowledged creates (all clients) before node A gets SIGTERM: the load is well under way."""
REQUEST_TIMEOUT_S = 10.0
"""Far above a create's latency: a client that waits this long saw a hang, which fails the test."""
pytestmark = pytest.mark.slow


@dataclass
class NodeProc:
    """A running node process and its URL."""

    proc: subprocess.Popen[bytes]
    url: str

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])


@contextmanager
def node_process(url: str, prefix: str, *extra: str) -> Iterator[NodeProc]:
    """One node process on a free port over the Redis at ``url``; SIGKILLed by pid if still
    running."""
    args = ["--redis", url, "--prefix", prefix, "--node-id", f"n-{prefix}", *extra]
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodes.serving.process", *args], stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        url = _read_url(proc)
        yield NodeProc(proc, url)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _read_url(proc: subprocess.Popen[bytes]) -> str:
    box: list[bytes] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(START_TIMEOUT_S)
    assert box, "node process printed no URL in time"
    assert box[0], "node process exited before it was ready"
    return box[0].decode().strip()


def _headers() -> dict[str, str]:
    return {
        "authorization": f"Bearer {ALICE_TOKEN}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "notes_create",
    }


def _create_body(title: str, request_id: int = 1) -> bytes:
    params = {
        "name": "notes_create",
        "arguments": {"workspaceUri": ALICE_NOTES, "title": title, "body": "drain"},
        "_meta": meta(),
    }
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message).encode()


def _raw_request(body: bytes, *, content_length: int | None = None) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in _headers().items())
    length = len(body) if content_length is None else content_length
    return f"POST /mcp HTTP/1.1\r\nhost: x\r\n{head}content-length: {length}\r\n\r\n".encode()


def _read_until_closed(sock: socket.socket, hang_s: float) -> bytes:
    """Everything the server sends until it closes the connection. ``hang_s`` only guards
    against a hang: a server that never closes raises ``TimeoutError`` there, failing the test."""
    sock.settimeout(hang_s)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.fixture
def serving_url() -> str:
    """The suite's own ``redis-server`` (shared by the session, never flushed)."""
    return suite_redis_url()


@pytest.fixture
def prefix(serving_url: str) -> Iterator[str]:
    """A key prefix of the test's own on ``serving_url``; its keys are deleted afterwards."""
    name = new_prefix()
    yield name
    delete_prefix(serving_url, name)


@pytest.fixture
def slow_client_node(serving_url: str, prefix: str) -> Iterator[NodeProc]:
    """A node with one-second header and body timeouts."""
    t = str(SHORT_TIMEOUT_S)
    with node_process(serving_url, prefix, "--headers-timeout", t, "--body-timeout", t) as node:
        yield node


def test_headers_promising_a_megabyte_then_silence_get_408_and_a_closed_connection(
    slow_client_node: NodeProc,
) -> None:
    with socket.create_connection(("127.0.0.1", slow_client_node.port)) as sock:
        sock.sendall(_raw_request(b"", content_length=1_000_000))
        data = _read_until_closed(sock, hang_s=10 * SHORT_TIMEOUT_S)
    assert data.startswith(b"HTTP/1.1 408 ")
    assert b"connection: close" in data.lower()


def test_a_header_block_left_unfinished_gets_the_connection_closed(
    slow_client_node: NodeProc,
) -> None:
    with socket.create_connection(("127.0.0.1", slow_client_node.port)) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ")
        data = _read_until_closed(sock, hang_s=10 * SHORT_TIMEOUT_S)
    assert data == b""


def test_a_connection_that_never_sends_a_byte_gets_closed(slow_client_node: NodeProc) -> None:
    with socket.create_connection(("127.0.0.1", slow_client_node.port)) as sock:
        data = _read_until_closed(sock, hang_s=10 * SHORT_TIMEOUT_S)
    assert data == b""


def _note_exists(url: str, prefix: str, note_id: str) -> bool:
    with redis.Redis.from_url(url) as client:
        return bool(client.exists(TenantKeys(prefix, DEMO_TENANT).note(note_id)))


def _wait_until(ready: Callable[[], bool], what: str, timeout_s: float = START_TIMEOUT_S) -> None:
    """Poll ``ready`` until it holds; fail, naming ``what``, if it has not by the deadline."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def _in_flight(metrics_port: int) -> float:
    """The node's ``notes_requests_in_flight`` gauge, read from its metrics endpoint."""
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=REQUEST_TIMEOUT_S).text
    for family in text_string_to_metric_families(text):
        if family.name == "notes_requests_in_flight":
            return float(family.samples[0].value)
    raise AssertionError("the node exports no notes_requests_in_flight")


def _refuses(port: int) -> bool:
    """True once nothing accepts a connection on ``port`` (an accepted probe is closed at once)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT_S).close()
    except ConnectionRefusedError:
        return True
    return False


def test_sigterm_finishes_a_request_already_in_flight_and_refuses_new_connections(
    serving_url: str, prefix: str
) -> None:
    metrics_port = free_port()
    extra = ("--drain-timeout", str(DRAIN_S), "--metrics-port", str(metrics_port))
    with node_process(serving_url, prefix, *extra) as node:
        body = _create_body("in flight at SIGTERM")
        with socket.create_connection(("127.0.0.1", node.port)) as sock:
            # Headers and half the body: SIGTERM lands once the app holds the request (the
            # in-flight gauge says so), waiting for the rest of its body.
            sock.sendall(_raw_request(body) + body[:10])
            _wait_until(lambda: _in_flight(metrics_port) == 1, "the app holds the request")
            node.proc.send_signal(signal.SIGTERM)
            _wait_until(lambda: _refuses(node.port), "the node refuses new connections")
            assert node.proc.poll() is None, "the node exited with a request in flight"
            sock.sendall(body[10:])
            data = _read_until_closed(sock, hang_s=2 * DRAIN_S)
        assert node.proc.wait(timeout=2 * DRAIN_S) == 0
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"connection: close" in head.lower()
    note_id = json.loads(payload)["result"]["structuredContent"]["noteId"]
    assert _note_exists(serving_url, prefix, note_id)


@dataclass
class _Client:
    """One load client: creates notes on node A until A fails it, then on node B, until told to
    stop (at most MAX_CREATES)."""

    index: int
    urls: list[str]
    stop: threading.Event
    acknowledged: list[str] = field(default_factory=list)
    moved: threading.Event = field(default_factory=threading.Event)
    hangs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self, ack_count: list[int], lock: threading.Lock) -> None:
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
            for i in range(MAX_CREATES):
                if self.stop.is_set():
                    return
                reply = self._create(http, _create_body(f"drain {self.index}-{i}", i + 1))
                if reply is None:
                    return
                result: dict[str, Any] = reply.json().get("result") or {}
                if reply.status_code != 200 or result.get("isError"):
                    self.errors.append(reply.text[:200])
                    return
                self.acknowledged.append(result["structuredContent"]["noteId"])
                with lock:
                    ack_count[0] += 1

    def _create(self, http: httpx.Client, body: bytes) -> httpx.Response | None:
        """One create, retried on node B when node A refuses or drops the connection."""
        while True:
            target = 1 if self.moved.is_set() else 0
            try:
                return http.post(self.urls[target], content=body, headers=_headers())
            except httpx.TimeoutException as exc:
                self.hangs.append(repr(exc))
                return None
            except httpx.TransportError as exc:
                if target == 1:
                    self.errors.append(repr(exc))
                    return None
                self.moved.set()  # retry the same create elsewhere


def test_sigterm_under_load_loses_no_acknowledged_create_and_clients_move_on(
    serving_url: str, prefix: str
) -> None:
    drain = ("--drain-timeout", str(DRAIN_S))
    stop = threading.Event()
    with (
        node_process(serving_url, prefix, *drain) as a,
        node_process(serving_url, prefix, *drain) as b,
    ):
        clients = [_Client(i, [a.url, b.url], stop) for i in range(CLIENTS)]
        acks, lock = [0], threading.Lock()
        threads = [threading.Thread(target=c.run, args=(acks, lock)) for c in clients]
        for t in threads:
            t.start()
        try:
            _wait_until(lambda: acks[0] >= SIGTERM_AFTER, f"{SIGTERM_AFTER} creates", 60)
            a.proc.send_signal(signal.SIGTERM)
            assert a.proc.wait(timeout=2 * DRAIN_S) == 0
            for c in clients:
                c.moved.wait(timeout=30)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
    for c in clients:
        assert c.hangs == [], f"client {c.index} waited on a hung request: {c.hangs}"
        assert c.errors == [], f"client {c.index}: {c.errors}"
        assert c.moved.is_set(), f"client {c.index} never had to leave node A"
    acked = [n for c in clients for n in c.acknowledged]
    lost = [n for n in acked if not _note_exists(serving_url, prefix, n)]
    assert sum(len(c.acknowledged) for c in clients) > SIGTERM_AFTER
    assert lost == []


async def test_drain_asks_the_legacy_handler_to_end_its_streams() -> None:
    class Legacy:
        ended = 0

        def claims(self, http_method: str, headers: Any, message: object) -> bool:
            return False

        async def respond(self, request: Any, receive: Any, send: Any) -> None:
            raise AssertionError("not called")

        async def shutdown(self) -> None:
            self.ended += 1

    legacy = Legacy()
    settings = demo_settings()
    app = make_app(Node(settings.node, None), settings.tokens, legacy=legacy)  # type: ignore[arg-type]
    await app.drain()
    assert legacy.ended == 1


async def test_the_app_answers_408_itself_when_no_server_bounds_the_body() -> None:
    settings = demo_settings()
    app = make_app(Node(settings.node, None), settings.tokens, body_timeout_s=0.05)  # type: ignore[arg-type]
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [(k.encode(), v.encode()) for k, v in _headers().items()],
    }

    async def silent_client() -> dict[str, Any]:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with trio.fail_after(5):
        await app(scope, silent_client, send)
    assert sent[0]["status"] == 408
    assert (b"connection", b"close") in sent[0]["headers"]


def _write_config(tmp: Path) -> Path:
    key = tmp / "k1.key"
    key.write_text(base64.b64encode(os.urandom(32)).decode())
    digest = hashlib.sha256(ALICE_TOKEN.encode()).hexdigest()
    path = tmp / "cluster.toml"
    path.write_text(
        f"""server_name = "serving-test"
[state_keys]
active = "k1"
k1 = "file:{key}"
[workspaces]
"{ALICE_NOTES}" = "{DEMO_TENANT}"
[principals.alice]
token_sha256 = ["{digest}"]
grants = ["{ALICE_NOTES}"]
[timeouts]
drain = 3
""",
        encoding="utf-8",
    )
    return path


def test_the_production_entry_serves_with_two_workers_and_stops_cleanly_on_sigterm(
    tmp_path: Path,
) -> None:
    # ``node`` keeps the store's fixed prefix ``nc``: a server of this test's own.
    with own_redis(tmp_path) as server:
        exe = Path(sys.executable).with_name("notes-cluster")
        command = [str(exe), "node", "--config", str(_write_config(tmp_path)), "--workers", "2"]
        command += ["--redis", server.url, "--log-level", "WARNING"]
        proc, port = start_when_ready(command, tmp_path / "node.out")
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            body = _create_body("from production")
            reply = httpx.post(url, content=body, headers=_headers(), timeout=REQUEST_TIMEOUT_S)
            assert reply.status_code == 200
            note_id = reply.json()["result"]["structuredContent"]["noteId"]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=START_TIMEOUT_S) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        assert _note_exists(server.url, "nc", note_id)


PORT_TAKEN = "address already in use"
"""What a node says when its port was taken between ``free_port`` releasing it and the node
binding it (another job's connection can take it meanwhile): it is started again on another."""


def start_when_ready(command: list[str], out: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``command --port P`` (a ``node``) on a free port, its output to ``out``, and
    return the process and P once its ``/readyz`` answers 200 (a worker serves and the store
    is ready). A node that exits first fails the test at once with its output;
    ``START_TIMEOUT_S`` only guards against a hang."""
    for _ in range(3):
        port = free_port()
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                [*command, "--port", str(port)], stdout=sink, stderr=subprocess.STDOUT
            )
        try:
            if _ready(proc, port, out):
                return proc, port
        except BaseException:
            proc.kill()
            proc.wait(timeout=10)
            raise
        output = out.read_text(errors="replace")
        if PORT_TAKEN not in output.lower():
            raise AssertionError(
                f"the node exited {proc.returncode} before it was ready:\n{output}"
            )
    raise AssertionError(f"three free ports were taken before the node bound them:\n{output}")


def _ready(proc: subprocess.Popen[bytes], port: int, out: Path) -> bool:
    """Poll ``/readyz`` until it answers 200 (True) or the process exits (False)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while proc.poll() is None:
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=REQUEST_TIMEOUT_S)
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
            pass  # not listening yet, or a worker not serving yet
        except httpx.TimeoutException:
            pass  # listening (the supervisor's socket), no worker has accepted yet
        else:
            if answer.status_code == 200:
                return True
        if time.monotonic() > deadline:
            output = out.read_text(errors="replace")
            raise AssertionError(f"the node was not ready in {START_TIMEOUT_S} s:\n{output}")
        time.sleep(0.1)
    return False


async def test_the_sdk_in_legacy_mode_deletes_across_node_processes(
    serving_url: str, prefix: str
) -> None:
    """The 2025-11-25 adapter on the production serving path: its stream on one uvicorn node
    process, the client's answers posted to the others."""
    url = serving_url
    await seed_demo_notes(url, False, prefix=prefix)
    async with open_redis(url) as client, trio.open_nursery() as nursery:
        store = NoteStore(client, prefix=prefix)
        urls = await start_process_nodes(
            nursery, demo_settings(), url, count=3, embedded=False, prefix=prefix
        )
        before = await tps_reports(store)

        async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
            return types.ListRootsResult(roots=[types.Root(uri=ALICE_DOCS)])  # type: ignore[arg-type]

        callback = Elicitations("accept")
        async with legacy_sdk_client(
            urls, elicitation_callback=callback, list_roots_callback=list_roots
        ) as (sdk, rotation):
            result = await sdk.call_tool("notes_delete", DELETE_ARGS)
        picked = next(k for k, v in before.items() if v == 1_719_835_200_000)
        assert result.structured_content == {"deleted": True, "noteId": picked}
        assert await deletions(store, picked) == 1
        call = next(h for h in rotation.hops if h.method == "tools/call")
        answers = [h for h in rotation.hops if h.method == "answer"]
        assert answers
        assert all(h.node != call.node for h in answers)
        nursery.cancel_scope.cancel()
