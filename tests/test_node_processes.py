"""Nodes hold nothing: kill one, or restart one mid-load, and no confirmation is lost or doubled.

Two ways to crash a node. ``notes-cluster serve --processes`` runs each node as its own OS
process (on the embedded store its parent serves over TCP, and on a real Redis); a node is
SIGKILLed between the rounds of a delete and another node finishes it. In process, a
``LocalCluster`` restarts nodes while the race workload runs, and the checker judges the history.
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from cluster.exit_codes import EXIT_CTRL_C
from cluster.local import InProcessTransport, LocalCluster, open_local_cluster
from cluster.targets.in_process import SIM_REPLAY_GRACE_MS, simulation_config
from loadgen.history import History, Op
from loadgen.run.pipeline import check_history, redis_offset_ms
from loadgen.run.target import StoreAccess
from loadgen.runner import RunSettings, run_load
from loadgen.tenants import tenants as tenant_names
from loadgen.transport import NodeDown
from nodes.headers import request_headers
from nodes.protocol import Reply
from nodes.serving.demo import ALICE_NOTES
from tests.harness import accept, meta, random_seed
from tests.own_redis import own_redis

ALICE_TOKEN = "alice-demo-token"
_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
NODES = 3
START_TIMEOUT_S = 120.0
"""Three node processes start one after another, each importing the whole stack: a hang guard,
generous because two cores under a second copy of the suite take over 30 s for it."""
REQUEST_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 60.0
"""A hang guard for a stop (drain, interpreter exit): two loaded cores took over 10 s for it."""


# --- serve --processes ---------------------------------------------------------------------------


def _free_base_port(n: int) -> int:
    """A port P such that P..P+n-1 were all free a moment ago."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + n > 65535:
            continue
        socks: list[socket.socket] = []
        try:
            for i in range(n):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", base + i))
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
        return base
    raise RuntimeError("no run of free ports")


def _notes_cluster() -> str:
    """The console script next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("notes-cluster")
    exe = str(beside) if beside.exists() else shutil.which("notes-cluster")
    assert exe is not None, "the notes-cluster console script is not installed"
    return exe


def _default_sigint() -> None:
    # A shell's background job inherits SIGINT ignored, and Python then never turns it into
    # KeyboardInterrupt: give the serve process the default so SIGINT stops it as Ctrl-C does.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _lines(stream: IO[bytes]) -> queue.Queue[str | None]:
    """Lines of ``stream`` as a thread reads them (None at end of file)."""
    out: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for raw in stream:
            out.put(raw.decode("utf-8", "replace").rstrip("\n"))
        out.put(None)

    threading.Thread(target=pump, name="serve-stdout", daemon=True).start()
    return out


def _alive(pid: int) -> bool:
    """True while any thread of ``pid`` exists and is not a zombie. The main thread alone is not
    enough: after SIGKILL it may be a zombie while another thread is still exiting, and the
    process's sockets (a node's listening port) close only when the last thread is gone."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in threads:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
            return True
    return False


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """Poll until every pid is gone; return those still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _node_pids(serve_pid: int) -> dict[int, int]:
    """port -> pid of the ``nodes.serving.process`` children of the serve process."""
    found = subprocess.run(
        ["pgrep", "-P", str(serve_pid)], capture_output=True, text=True, timeout=5, check=False
    )
    out: dict[int, int] = {}
    for pid in (int(p) for p in found.stdout.split()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if "nodes.serving.process" in argv and "--port" in argv:
            out[int(argv[argv.index("--port") + 1])] = pid
    return out


@dataclass
class Served:
    """A running ``notes-cluster serve --processes`` and what the test learned of it."""

    proc: subprocess.Popen[bytes]
    urls: list[str]
    node_pids: dict[int, int]
    stderr: Path
    returncode: int | None = None
    leftovers: list[int] = field(default_factory=list)


@contextlib.contextmanager
def serve_processes(redis_url: str | None, tmp: Path) -> Iterator[Served]:
    """Start ``serve --demo --nodes 3 --processes`` on free ports; stop it (SIGINT, then SIGKILL
    for it and its nodes) however the test ends, recording its exit code and leftover nodes."""
    base = _free_base_port(NODES)
    args = [_notes_cluster(), "serve", "--demo", "--nodes", str(NODES), "--port", str(base)]
    args += ["--processes", *(["--redis", redis_url] if redis_url else [])]
    stderr = tmp / "serve.stderr"
    with stderr.open("wb") as err:
        ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=err,
            preexec_fn=_default_sigint if ignored else None,
        )
    served = Served(proc, [], {}, stderr)
    try:
        assert proc.stdout is not None
        lines = _lines(proc.stdout)
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(served.urls) < NODES:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"serve printed {served.urls} in {START_TIMEOUT_S} s: {_tail(stderr)}")
            if line is None:
                pytest.fail(f"serve exited ({proc.poll()}) before it was ready: {_tail(stderr)}")
            if line.startswith("http://"):
                served.urls.append(line.strip())
        served.node_pids = _node_pids(proc.pid)
        yield served
    finally:
        _stop(served)


def _stop(served: Served) -> None:
    proc = served.proc
    known = list(served.node_pids.values()) or list(_node_pids(proc.pid).values())
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)
    served.returncode = proc.returncode
    served.leftovers = _wait_gone(known, STOP_TIMEOUT_S)
    for pid in served.leftovers:  # our own grandchildren: never leave them running
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:]


def _delete_call(request_id: int, **retry: Any) -> dict[str, Any]:
    """alice's ``notes_delete`` of her demo "TPS report" (``retry``: the MRTR round 2 fields)."""
    params = {
        "name": "notes_delete",
        "arguments": {"workspaceUri": ALICE_NOTES, "title": "TPS report"},
        "_meta": meta(),
        **retry,
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def _post(client: httpx.Client, url: str, msg: dict[str, Any]) -> dict[str, Any]:
    params = msg["params"]
    headers = request_headers(msg["method"], params, params["_meta"][_VERSION_KEY])
    headers |= {
        "authorization": f"Bearer {ALICE_TOKEN}",
        "accept": "application/json, text/event-stream",
    }
    response = client.post(url, json=msg, headers=headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def _refuses(url: str) -> bool:
    """True when nothing accepts a connection at the URL's port any more."""
    port = urlsplit(url).port
    assert port is not None
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("store", ["embedded", "redis"])
def test_a_node_process_killed_between_the_rounds_does_not_stop_another_from_finishing(
    store: str, tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack:
        # ``serve --demo`` seeds under the fixed prefix ``nc``: a server of this test's own, so
        # no other test or run shares those keys, and nothing is flushed anywhere.
        redis_url = None if store == "embedded" else stack.enter_context(own_redis(tmp_path)).url
        with (
            serve_processes(redis_url, tmp_path) as served,
            httpx.Client(timeout=REQUEST_TIMEOUT_S) as client,
        ):
            urls = served.urls
            ports = [int(urlsplit(u).port or 0) for u in urls]
            assert len(set(urls)) == NODES
            assert sorted(served.node_pids) == sorted(ports), served.node_pids

            first = _post(client, urls[0], _delete_call(1))
            assert first["resultType"] == "input_required", first
            form = first["inputRequests"]["confirm_delete"]
            options = form["params"]["requestedSchema"]["properties"]["noteId"]["oneOf"]
            assert len(options) == 3  # the demo's three TPS reports
            note_id = options[0]["const"]

            node0 = served.node_pids[ports[0]]
            os.kill(node0, signal.SIGKILL)
            assert _wait_gone([node0], STOP_TIMEOUT_S) == [], "node 0 survived SIGKILL"

            retry = {"requestState": first["requestState"], "inputResponses": accept(note_id)}
            second = _post(client, urls[1], _delete_call(2, **retry))
            assert second["resultType"] == "complete"
            assert second["structuredContent"] == {"deleted": True, "noteId": note_id}

            # The same answer on the third node learns the recorded outcome; nothing more goes.
            again = _post(client, urls[2], _delete_call(3, **retry))
            assert again["structuredContent"] == {"deleted": True, "noteId": note_id}
            assert again["_meta"]["dev.notes-cluster/replay"] is True

            assert _refuses(urls[0])
            with (
                httpx.Client(timeout=REQUEST_TIMEOUT_S) as fresh,
                pytest.raises(httpx.ConnectError),
            ):
                fresh.post(urls[0], json=_delete_call(4))
            assert served.proc.poll() is None, "serve died with its node"
        assert served.leftovers == [], f"node processes left behind: {served.leftovers}"
        # Stopped with Ctrl-C (SIGINT): 130, the code the README gives Ctrl-C, after a clean stop.
        assert served.returncode == EXIT_CTRL_C, _tail(served.stderr)
        assert "stopped" in _tail(served.stderr)


# --- restarts under load, in process -------------------------------------------------------------

RESTARTS = 5
RESTART_GAP_S = (0.15, 0.45)
"""Seconds between restarts, drawn from the seed."""
BY_DESIGN_INFO = frozenset({"response lost", "cut short", "timeout"})
"""Unknown outcomes the workload makes on purpose (lost_response, timeout_retry flows)."""


@dataclass
class Restart:
    """One restart of one node, by the history's wall clock (ms)."""

    node: int
    from_ms: int
    to_ms: int


@dataclass(frozen=True)
class Down:
    """A request the transport refused with NodeDown: to which node, from when to when (ms)."""

    node: int
    from_ms: int
    to_ms: int
    reason: str


@dataclass
class TrackingTransport:
    """The in-process transport, counting each node's requests in flight and every NodeDown."""

    inner: InProcessTransport
    in_flight: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    downs: list[Down] = field(default_factory=list)

    @property
    def node_count(self) -> int:
        """As the inner transport."""
        return self.inner.node_count

    async def send(self, node_index: int, principal: str, message: dict[str, Any]) -> Reply:
        """Deliver through the inner transport."""
        self.in_flight[node_index] += 1
        sent_ms = int(time.time() * 1000)
        try:
            return await self.inner.send(node_index, principal, message)
        except NodeDown as exc:
            self.downs.append(Down(node_index, sent_ms, int(time.time() * 1000), str(exc)))
            raise
        finally:
            self.in_flight[node_index] -= 1


async def _restart_while_busy(
    cluster: LocalCluster,
    transport: TrackingTransport,
    rng: random.Random,
    done: trio.Event,
    restarts: list[Restart],
) -> None:
    """Restart a random node a few times, each time while it has a request in flight."""
    for _ in range(RESTARTS):
        await trio.sleep(rng.uniform(*RESTART_GAP_S))
        node = rng.randrange(NODES)
        while transport.in_flight[node] == 0:
            if done.is_set():
                return
            await trio.sleep(0.001)
        from_ms = int(time.time() * 1000)
        await cluster.restart_node(node)
        restarts.append(Restart(node, from_ms, int(time.time() * 1000)))


def _unexpected_fails(history: History) -> list[str]:
    """Every fail that is not a refusal the workload asked for (-32602 to a no_mutation
    confirm, to a reused idempotency key, to a misused cursor or state). Invokes and
    completions pair first in first out per process, flow and f; the concurrent duplicates of
    a flow differ only in their node, which does not matter here."""
    pending: dict[tuple[int, int, str], list[Op]] = defaultdict(list)
    bad = []
    for op in history.ops:
        key = (op.process, op.flow, op.f)
        if op.type == "invoke":
            pending[key].append(op)
            continue
        invoke = pending[key].pop(0)
        asked_for = (
            (invoke.f == "confirm" and invoke.value.get("expect") == "no_mutation")
            or invoke.value.get("expect") == "key_conflict"  # a key reused with other arguments
            or "misuse" in invoke.value  # a cursor or state used where it does not belong
        )
        if op.type == "fail" and not (asked_for and op.value.get("code") == -32602):
            bad.append(f"fail {invoke.f} {invoke.kind} at {invoke.index}: {op.value}")
    assert not any(pending.values()), "an operation never completed"
    return bad


def _unexplained_downs(downs: list[Down], restarts: list[Restart]) -> list[Down]:
    """NodeDown answers from a node that was not restarting while the request was out."""
    return [
        d
        for d in downs
        if not any(
            r.node == d.node and d.from_ms <= r.to_ms and d.to_ms >= r.from_ms for r in restarts
        )
    ]


@pytest.mark.slow
async def test_nodes_restarted_mid_load_lose_no_answer_and_double_no_deletion() -> None:
    seed = random_seed()
    settings = RunSettings(flows=120, duration_s=30, concurrency=8, seed=seed)
    config = simulation_config(2.0, settings.tenants)
    tenants = tenant_names(settings.tenants)
    history = History()
    restarts: list[Restart] = []
    with trio.fail_after(90):
        async with open_local_cluster(
            config, NODES, replay_grace_ms=SIM_REPLAY_GRACE_MS
        ) as cluster:
            url = cluster.redis_url
            offset = await trio.to_thread.run_sync(redis_offset_ms, url)
            transport = TrackingTransport(InProcessTransport(cluster))
            done = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    _restart_while_busy, cluster, transport, random.Random(seed), done, restarts
                )
                stats = await run_load(
                    transport,
                    config.key_ring,
                    config.server_name,
                    settings,
                    history,
                    redis_offset_ms=offset,
                )
                done.set()
            store = StoreAccess(url, "nc", tuple(tenants), SIM_REPLAY_GRACE_MS)
            result = await check_history(history, store)

    print(f"restarts {restarts}; NodeDown {len(transport.downs)}; counts {result.counts}")
    assert len(stats.samples) == settings.flows, f"seed {seed}"
    assert cluster.restarts == len(restarts) >= 1, f"seed {seed}: no restart happened"
    assert any("mid-request" in d.reason for d in transport.downs), f"seed {seed}: none cut"
    assert result.status == "valid", (seed, [v for v in result.verdicts if v.status != "valid"])
    assert {v.name: v.status for v in result.verdicts}["info_resolved"] == "valid"
    assert _unexpected_fails(history) == [], f"seed {seed}"
    # Every unknown outcome is one the workload made on purpose or a NodeDown, and every NodeDown
    # came from a node while it restarted: nothing else went wrong.
    reasons = Counter(op.value.get("reason") for op in history.ops if op.type == "info")
    assert set(reasons) <= BY_DESIGN_INFO | {"unreachable: NodeDown"}, f"seed {seed}: {reasons}"
    assert reasons["unreachable: NodeDown"] == len(transport.downs), f"seed {seed}"
    assert _unexplained_downs(transport.downs, restarts) == [], f"seed {seed}: {restarts}"
    # A flow whose round 1 never came back had a request to a restarting node.
    asked = {op.flow for op in history.ops if op.f == "ask" and "nonce" in op.value}
    hit = {op.flow for op in history.ops if op.value.get("reason") == "unreachable: NodeDown"}
    assert set(range(settings.flows)) - asked <= hit, f"seed {seed}"
    assert sum(not s.completed for s in stats.samples) <= len(hit), f"seed {seed}"
