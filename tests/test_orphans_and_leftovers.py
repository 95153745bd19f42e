"""No child outlives a parent killed outright, and an interrupted load leaves no note behind.

SIGKILL gives a command no chance to stop anything: the ``redis-server`` processes of
``redis-cluster`` and ``bench`` must end by themselves (the kernel's parent-death signal armed by
``nodes.serving.lifeline.stop_with_parent``), and ``bench``'s node processes too (their lifeline
pipe). ``loadgen`` stopped by Ctrl-C mid-run must delete, through the nodes, the notes of the flows
it cut short: afterwards the store holds no key without a TTL that it did not hold before.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from cluster.exit_codes import EXIT_CTRL_C
from tests.cli_process import children, finish, kill_all, running, start, until
from tests.own_redis import OwnRedis, own_redis

pytestmark = pytest.mark.slow


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def test_redis_cluster_servers_end_when_the_command_is_killed(tmp_path: Path) -> None:
    proc = start(["redis-cluster", "--masters", "3"], tmp_path)
    pids: list[int] = []
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("redis://127.0.0.1:")
        pids = [int(proc.stdout.readline().split("pid")[1]) for _ in range(3)]
        assert all(running(pid) for pid in pids)
        os.kill(proc.pid, signal.SIGKILL)  # no handler runs, nothing is stopped by pid
        proc.communicate()
        until(lambda: not any(running(pid) for pid in pids), "end of the orphaned servers")
    finally:
        kill_all([proc.pid, *pids])


def test_bench_children_end_when_the_bench_is_killed(tmp_path: Path) -> None:
    proc = start(["bench", "--quick", "--out", str(tmp_path / "bench")], tmp_path)
    seen: list[int] = []

    def started() -> bool:
        seen[:] = _descendants(proc.pid)
        lines = [_cmdline(pid) for pid in seen]
        return any(b"redis-server" in c for c in lines) and any(
            b"nodes.serving.process" in c for c in lines
        )

    try:
        until(started, "the bench's redis-server and node processes", proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        until(lambda: not any(running(pid) for pid in seen), "end of the bench's children")
    finally:
        kill_all([proc.pid, *seen])


@pytest.fixture
def store() -> Iterator[OwnRedis]:
    with own_redis(None) as started:
        yield started


def _keys_without_ttl(url: str) -> set[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return {k for k in client.scan_iter(count=1000) if client.ttl(k) == -1}
    finally:
        client.close()


def test_an_interrupted_loadgen_deletes_the_notes_of_its_unfinished_flows(
    store: OwnRedis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTES_CLUSTER_STATE_KEY", base64.b64encode(os.urandom(32)).decode())
    url = f"redis://127.0.0.1:{store.port}/0"
    serve = start(["serve", "--demo", "--redis", url, "--nodes", "2", "--port", "0"], tmp_path)
    load = None
    try:
        assert serve.stdout is not None
        targets = [serve.stdout.readline().strip() for _ in range(2)]
        assert all(t.startswith("http://127.0.0.1:") for t in targets), targets
        before = _keys_without_ttl(url)
        run_dir = tmp_path / "run"
        args = ["loadgen", "--demo", "--target", ",".join(targets), "--redis", url]
        args += ["--flows", "100000", "--duration", "600", "--concurrency", "16"]
        load = start([*args, "--seed", "7", "--out", str(run_dir)], tmp_path)
        history = run_dir / "history.jsonl"

        def loading() -> bool:
            return history.exists() and history.stat().st_size > 20_000

        until(loading, "the load's first flows", load)
        # Mid-run: notes of flows in flight exist, without a TTL, beyond the demo's own.
        until(lambda: _keys_without_ttl(url) - before != set(), "notes of flows in flight", load)
        os.kill(load.pid, signal.SIGINT)
        code, _, err = finish(load)
        assert code == EXIT_CTRL_C, err
        assert "Traceback" not in err
        assert err.strip().splitlines()[-1] == "stopped by SIGINT"
        # The nodes' journal (a capped stream per tenant, the checker's evidence of every
        # mutation, deletions included) stays as after any run; nothing else may.
        left = {k for k in _keys_without_ttl(url) - before if not k.endswith(b":journal")}
        assert left == set(), f"the interrupted load left keys without a TTL: {sorted(left)[:10]}"
    finally:
        kill_all([serve.pid] + ([load.pid] if load is not None else []))
        for p in (serve, load):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()


_SERVER_PARENT = """
import sys, trio
from cluster.bench.procs import open_server_process

async def main() -> None:
    async with open_server_process(["cluster.lab.fixed_replies"]) as procs:
        print(procs.pids[0], procs.urls[0], flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


def test_a_bench_server_process_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _SERVER_PARENT],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    child = 0
    try:
        assert parent.stdout is not None
        pid, url = parent.stdout.readline().split()
        child = int(pid)
        assert url.startswith("http://127.0.0.1:"), url
        assert running(child)
        os.kill(parent.pid, signal.SIGKILL)  # the server is never told: its lifeline is
        parent.communicate()
        until(lambda: not running(child), "end of the orphaned server process")
    finally:
        kill_all([parent.pid] + ([child] if child else []))
