"""``simulate --workers``: no worker outlives its parent, and a failed worker fails the run.

Each test starts a real run (two worker processes on the real Redis, far more flows than it
will finish) as a subprocess, waits until both workers are in their run, then plants the cause:
SIGKILL of the parent (nobody left to stop the workers: they must notice themselves); SIGTERM
of the parent or Ctrl-C to its group (it stops them and says so); SIGKILL of one worker (the
parent fails at once).
Every loop is bounded by ``GIVE_UP_S``, far below the run's own ``--duration``, so a worker that
ignored its parent's end would fail the test instead of ending with the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.cli import EXIT_CTRL_C, EXIT_NOT_CARRIED_OUT
from cluster.targets.in_process import drop_keys
from loadgen.run.folder import PIDS_FILE
from store.client_factory import sync_client
from store.journal import scan_keys
from tests.conftest import require_real_redis

GIVE_UP_S = 90.0
"""Bound of every wait below; the run itself would last ``RUN_DURATION_S``."""

RUN_DURATION_S = 900
"""The run's ``--duration``: far beyond ``GIVE_UP_S``, so only a stop can end it in time."""


class Run:
    """A ``simulate --workers 2`` subprocess and what its ``workers.json`` says."""

    def __init__(self, url: str, run_dir: Path) -> None:
        self.url, self.run_dir = url, run_dir
        args = ["simulate", "--redis", url, "--workers", "2", "--flows", "1000000"]
        args += ["--duration", str(RUN_DURATION_S), "--concurrency", "4", "--seed", "21"]
        args += ["--out", str(run_dir)]
        code = "from cluster.cli import main; main()"
        self.parent = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a process group of its own, as a shell gives a command
        )
        self.pids: dict[str, Any] = {}
        self.stderr: str | None = None

    def output(self) -> str:
        """The run's stderr, once every process holding it (parent and workers) has ended."""
        if self.stderr is None:
            _, self.stderr = self.parent.communicate(timeout=GIVE_UP_S)
        return self.stderr

    def wait_for_workers(self) -> list[int]:
        """The workers' pids, once both are running and inside their run (own folder made)."""
        _until(lambda: (self.run_dir / PIDS_FILE).exists(), "workers.json", self.parent)
        self.pids = json.loads((self.run_dir / PIDS_FILE).read_text(encoding="utf-8"))
        workers: list[int] = self.pids["workers"]
        assert self.pids["parent"] == self.parent.pid
        assert len(workers) == 2

        def started() -> bool:
            return all((self.run_dir / f"worker-{k}").is_dir() for k in (0, 1))

        _until(started, "both workers' folders", self.parent)
        assert all(_running(pid) for pid in workers), "a worker ended before the test acted"
        return workers

    def cleanup(self) -> None:
        """Kill whatever is left (only when the test already failed) and drop the run's keys."""
        for pid in [self.parent.pid, *self.pids.get("workers", [])]:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        if self.parent.poll() is None:
            self.parent.kill()
        self.output()
        if "prefix" in self.pids:
            drop_keys(self.url, self.pids["prefix"])


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    started = Run(require_real_redis(), tmp_path / "run")
    try:
        yield started
    finally:
        started.cleanup()


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (pid 1 may be slow to reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _until(done: Callable[[], bool], what: str, parent: subprocess.Popen[str] | None) -> None:
    """Poll ``done`` every 0.1 s; fail (with the parent's output) after ``GIVE_UP_S``."""
    deadline = time.monotonic() + GIVE_UP_S
    while not done():
        if parent is not None and parent.poll() is not None:
            out, err = parent.communicate()
            pytest.fail(f"the run ended (exit {parent.returncode}) before {what}: {err}{out}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {GIVE_UP_S} s")
        time.sleep(0.1)


def _keys(url: str, prefix: str) -> list[Any]:
    client = sync_client(url)
    try:
        return list(scan_keys(client, f"{prefix}:*"))
    finally:
        client.close()


@pytest.mark.slow
def test_workers_stop_by_themselves_when_the_parent_is_killed(run: Run) -> None:
    workers = run.wait_for_workers()
    run.parent.send_signal(signal.SIGKILL)
    run.parent.wait(timeout=GIVE_UP_S)
    _until(lambda: not any(_running(pid) for pid in workers), "end of the orphaned workers", None)
    err = run.output()
    for k in (0, 1):  # each stopped on seeing its parent gone, not by some crash
        assert f"worker {k}: its parent process {run.parent.pid} is gone: run stopped" in err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("send", "name"),
    [
        (lambda pid: os.kill(pid, signal.SIGTERM), "SIGTERM"),  # a supervisor stops the parent
        (lambda pid: os.killpg(pid, signal.SIGINT), "SIGINT"),  # Ctrl-C: the whole group
    ],
    ids=["sigterm-parent", "ctrl-c-group"],
)
def test_a_stop_signal_stops_the_workers_and_says_so(
    run: Run, send: Callable[[int], None], name: str
) -> None:
    workers = run.wait_for_workers()
    send(run.parent.pid)
    err = run.output()
    # Ctrl-C is 130; SIGTERM means the run could not be carried out (4): never a verdict's code.
    expected = EXIT_CTRL_C if name == "SIGINT" else EXIT_NOT_CARRIED_OUT
    assert run.parent.returncode == expected, err
    assert f"stopped by {name}: workers stopped, no verdict" in err
    assert "Traceback" not in err
    assert not any(_running(pid) for pid in workers)
    assert _keys(run.url, run.pids["prefix"]) == []  # the parent dropped the run's keys


@pytest.mark.slow
def test_a_killed_worker_fails_the_run_at_once(run: Run) -> None:
    workers = run.wait_for_workers()
    os.kill(workers[1], signal.SIGKILL)
    err = run.output()
    assert run.parent.returncode == EXIT_NOT_CARRIED_OUT, err  # no verdict: not carried out
    assert f"worker-1 (pid {workers[1]}) failed: killed by SIGKILL" in err
    assert "the other workers were stopped; no verdict" in err
    assert "Traceback" not in err
    assert not _running(workers[0])
