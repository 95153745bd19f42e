"""Every long-running command stops cleanly on SIGTERM, SIGINT and SIGHUP, and no child outlives
its parent.

``serve --processes`` is a parent of node processes: a supervisor's SIGTERM (or a closed
terminal's SIGHUP) must stop every node, found here by pid from ``/proc``, and end the command
with 0; a parent killed outright (SIGKILL: no chance to stop anything) must still leave no node
serving, because each node watches its lifeline pipe. ``simulate`` on a Redis of the test's own
is a run: a stop signal ends it with its documented code (130 for Ctrl-C, 4 for SIGTERM and
SIGHUP), one line saying so, no traceback, and not one key left in the store.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from cluster.exit_codes import EXIT_CTRL_C, EXIT_NOT_CARRIED_OUT, EXIT_VALID
from tests.cli_process import (
    SIGINT_DISPOSITIONS,
    children,
    finish,
    kill_all,
    running,
    start,
    until,
)
from tests.own_redis import OwnRedis, free_port, own_redis

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[OwnRedis]:
    """A Redis of this module's own (the runs here are interrupted on purpose)."""
    with own_redis(None) as started:
        yield started


class Serve:
    """``serve --demo --processes --nodes 2`` on free ports, and its node processes' pids."""

    def __init__(self, cwd: Path) -> None:
        args = ["serve", "--demo", "--processes", "--nodes", "2", "--port", "0"]
        self.proc = start(args, cwd)
        assert self.proc.stdout is not None
        self.urls = [self.proc.stdout.readline().strip() for _ in range(2)]
        assert all(u.startswith("http://127.0.0.1:") for u in self.urls), self.urls
        until(lambda: len(children(self.proc.pid)) >= 2, "two node processes", self.proc)
        self.nodes = children(self.proc.pid)

    def node_processes(self) -> list[int]:
        """The node processes (the children running ``nodes.serving.process``)."""
        return [pid for pid in self.nodes if b"nodes.serving.process" in _cmdline(pid)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[Serve]:
    started = Serve(tmp_path)
    try:
        yield started
    finally:
        kill_all([started.proc.pid, *started.nodes])
        if started.proc.poll() is None:
            started.proc.kill()
        started.proc.communicate()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_to_serve_processes_stops_every_node_process(
    serving: Serve, signum: signal.Signals
) -> None:
    nodes = serving.node_processes()
    assert len(nodes) == 2, serving.nodes
    os.kill(serving.proc.pid, signum)
    code, _, err = finish(serving.proc)
    assert code == EXIT_VALID, err  # a server asked to stop has done its job
    assert "Traceback" not in err
    assert f"stopped by {signum.name}" in err
    # The parent waited for its nodes: none is left, not even as a zombie of pid 1.
    assert [pid for pid in nodes if running(pid)] == []


def test_node_processes_stop_by_themselves_when_serve_is_killed(serving: Serve) -> None:
    nodes = serving.node_processes()
    assert len(nodes) == 2, serving.nodes
    os.kill(serving.proc.pid, signal.SIGKILL)  # no handler runs: only the lifeline tells them
    serving.proc.wait()
    until(lambda: not any(running(pid) for pid in nodes), "end of the orphaned node processes")


def _keys_without_ttl(url: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return [k for k in client.scan_iter(count=1000) if client.ttl(k) == -1]
    finally:
        client.close()


def _dbsize(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.dbsize())
    finally:
        client.close()


@pytest.mark.parametrize(
    ("signum", "code", "db"),
    [
        (signal.SIGINT, EXIT_CTRL_C, 3),
        (signal.SIGTERM, EXIT_NOT_CARRIED_OUT, 4),
        (signal.SIGHUP, EXIT_NOT_CARRIED_OUT, 5),
    ],
    ids=["ctrl-c", "sigterm", "sighup"],
)
def test_a_stop_signal_ends_a_simulation_with_its_code_and_leaves_no_key(
    server: OwnRedis, tmp_path: Path, signum: signal.Signals, code: int, db: int
) -> None:
    url = f"redis://127.0.0.1:{server.port}/{db}"
    run_dir = tmp_path / "run"
    args = ["simulate", "--redis", url, "--flows", "200000", "--duration", "600"]
    proc = start([*args, "--seed", "5", "--out", str(run_dir)], tmp_path)
    history = run_dir / "history.jsonl"
    until(lambda: history.exists() and history.stat().st_size > 0, "the run's first ops", proc)
    assert _dbsize(url) > 0  # the run wrote to the store: there is something to clean up
    os.kill(proc.pid, signum)
    got, _, err = finish(proc)
    assert got == code, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"stopped by {signum.name}"
    assert _dbsize(url) == 0, "the interrupted run left keys behind"
    assert _keys_without_ttl(url) == []
    marker = (run_dir / "INCOMPLETE").read_text(encoding="utf-8")
    assert f"stopped by {signum.name}" in marker


def test_node_processes_of_one_parent_get_one_lifeline_each_and_no_write_end() -> None:
    """The lifeline only works while the parent holds the only write end: a node process that
    inherited a write end (its own or a sibling's) would wait for itself for ever."""
    from nodes.serving.lifeline import open_lifeline

    read_end, write_end = open_lifeline()
    try:
        child = subprocess.run(
            ["ls", "-l", "/proc/self/fd"],
            pass_fds=(read_end,),
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    fds = child.stdout
    assert f" {read_end} -> pipe:" in fds
    assert f" {write_end} -> " not in fds


def _spawned_workers(pid: int) -> list[int]:
    """``pid``'s worker processes started by multiprocessing (not its resource tracker)."""
    return [
        c
        for c in children(pid)
        if b"multiprocessing" in _cmdline(c) and b"resource_tracker" not in _cmdline(c)
    ]


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGKILL], ids=["sighup", "sigkill"])
def test_node_workers_stop_with_their_supervisor_whatever_ended_it(
    server: OwnRedis, tmp_path: Path, signum: signal.Signals
) -> None:
    from tests.test_serving import _write_config

    port = free_port()
    args = ["node", "--config", str(_write_config(tmp_path)), "--port", str(port)]
    args += ["--workers", "2", "--redis", server.url, "--log-level", "WARNING"]
    proc = start(args, tmp_path)
    workers: list[int] = []
    try:
        until(lambda: len(_spawned_workers(proc.pid)) == 2 and _healthy(port), "2 workers", proc)
        workers = _spawned_workers(proc.pid)
        os.kill(proc.pid, signum)
        code, _, err = finish(proc)
        if signum == signal.SIGHUP:  # stopped, as on SIGTERM (uvicorn alone restarts workers)
            assert code == EXIT_VALID, err
            assert "Traceback" not in err
        # SIGKILL: nobody told them; the kernel's parent-death signal did.
        until(lambda: not any(running(pid) for pid in workers), "end of the workers")
    finally:
        kill_all([proc.pid, *workers])
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("sigint", SIGINT_DISPOSITIONS)
def test_redis_cluster_stops_its_servers_on_sigterm(tmp_path: Path, sigint: str) -> None:
    proc = start(["redis-cluster", "--masters", "3"], tmp_path, sigint=sigint)
    pids: list[int] = []
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("redis://127.0.0.1:"), url
        pids = [int(proc.stdout.readline().split("pid")[1]) for _ in range(3)]
        assert all(running(pid) for pid in pids)
        os.kill(proc.pid, signal.SIGTERM)
        code, _, err = finish(proc)
        assert code == EXIT_VALID, err  # a server's normal end
        assert "stopped by SIGTERM" in err
        assert "Traceback" not in err
        assert [pid for pid in pids if running(pid)] == []
    finally:  # a command that ignored SIGTERM must not outlive its failed test
        kill_all([proc.pid, *pids])


@pytest.mark.parametrize("sigint", SIGINT_DISPOSITIONS)
def test_failover_experiment_stops_its_redis_servers_on_sigterm(
    tmp_path: Path, sigint: str
) -> None:
    out = tmp_path / "failover"
    args = ["failover-experiment", "--scenarios", "baseline", "--duration", "60"]
    proc = start([*args, "--out", str(out)], tmp_path, sigint=sigint)
    servers: list[int] = []

    def loading() -> bool:
        history = out / "baseline-wait0" / "history.jsonl"
        return history.exists() and history.stat().st_size > 0

    try:
        until(loading, "the first run's load", proc)
        servers = [c for c in children(proc.pid) if b"redis-server" in _cmdline(c)]
        assert len(servers) == 6  # 3 masters, 3 replicas
        os.kill(proc.pid, signal.SIGTERM)
        code, _, err = finish(proc)
        assert code == EXIT_NOT_CARRIED_OUT, err
        assert err.strip().splitlines()[-1] == "stopped by SIGTERM"
        assert "Traceback" not in err
        assert [pid for pid in servers if running(pid)] == []
        assert "stopped by SIGTERM" in (out / "INCOMPLETE").read_text(encoding="utf-8")
    finally:
        kill_all([proc.pid, *servers])


def test_forwarding_makes_an_inherited_ignored_sigint_a_keyboard_interrupt_and_puts_it_back() -> (
    None
):
    """A script's background job (``cmd &``) starts with SIGINT ignored: the SIGINT a forwarded
    SIGTERM raises again must still become ``KeyboardInterrupt`` there, and the block leaves the
    process's own disposition as it found it (a command invoked inside a test process)."""
    from cluster.stopping import forwarding_stop_signals

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with forwarding_stop_signals():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


_MID_CODE = """
import signal, sys, trio
from cluster.stopping import Stopped, forwarding_stop_signals, run_stoppable

steps = []

async def work():
    with trio.CancelScope():  # a scope entered when the signal comes
        signal.raise_signal(signal.SIGTERM)  # the handler runs before the next bytecode
        steps.append("went on to its checkpoint")
        await trio.sleep(30)
    steps.append("never")

with forwarding_stop_signals():
    try:
        run_stoppable(work, on_stop=None)
    except Stopped as exc:
        steps.append(str(exc))
    except BaseException as exc:
        steps.append(type(exc).__name__)
print(steps)
"""


def test_a_stop_signal_inside_a_run_is_a_cancellation_at_the_next_checkpoint() -> None:
    """Inside a trio run a stop signal must never be a ``KeyboardInterrupt`` raised at whatever
    bytecode the task is at: one landing between a ``with`` block's ``__enter__`` and its body
    leaves a cancel scope entered for good ("Cancel scope stack corrupted", seen once in a
    failover run stopped by SIGTERM). Under ``run_stoppable`` the code goes on to its next
    checkpoint, is cancelled there, and ``Stopped`` says which signal came. (With a plain
    ``trio.run`` the forwarded SIGTERM is a ``KeyboardInterrupt`` on the very next line:
    the output would be ``['KeyboardInterrupt']``.)"""
    done = subprocess.run(
        ["python", "-c", _MID_CODE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['went on to its checkpoint', 'stopped by SIGTERM']"


# trio.run calls that may stay bare, and why (every other one is a run_stoppable)
_BARE_TRIO_RUNS = {
    "cluster/stopping.py": "run_stoppable itself",
    "cluster/targets/workers.py": "a worker process: SIGINT and SIGHUP ignored, its parent "
    "stops it",
    "cluster/lab/redis_clients.py": "runs in a thread (signals reach the main one)",
    "cluster/lab/server_variants.py": "a bench child server, stopped by its parent",
}


def test_every_trio_run_outside_the_listed_places_is_stoppable() -> None:
    """A bare ``trio.run`` in a command's path would take a forwarded stop signal as a
    ``KeyboardInterrupt`` anywhere in its code (see the test above)."""
    import ast

    root = Path(__file__).resolve().parent.parent
    bare: dict[str, int] = {}
    for package in ("cluster", "loadgen", "nodes", "store"):
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "run"
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "trio"
                ):
                    name = path.relative_to(root).as_posix()
                    bare[name] = bare.get(name, 0) + 1
    assert "cluster/stopping.py" in bare  # the scan finds what it looks for
    assert sorted(set(bare) - set(_BARE_TRIO_RUNS)) == []
