"""Running ``notes-cluster`` as a process of its own, as a shell or a supervisor would.

For the tests of stop signals and exit codes: the command runs in a process group of its own
(``start_new_session``, as a shell gives a job), so a signal sent to it reaches only it and its
children. Every wait polls with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

GIVE_UP_S = 90.0
"""Bound of every wait: a stop that works takes a few seconds, a broken one never ends."""


SIGINT_DISPOSITIONS = ("default", "ignored")
"""How a command may inherit SIGINT: at the default (a terminal's foreground job), or ignored (a
shell script's background job, ``cmd &``). Stop signals must work under both."""


def start(
    args: list[str], cwd: Path, *, stdout: int = subprocess.PIPE, sigint: str = "default"
) -> subprocess.Popen[str]:
    """``notes-cluster ARGS`` in ``cwd``, in a process group of its own, started with SIGINT
    at ``sigint`` (one of ``SIGINT_DISPOSITIONS``) whatever the test process inherited."""
    code = "from cluster.cli import main; main()"
    disposition = {"default": signal.SIG_DFL, "ignored": signal.SIG_IGN}[sigint]
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, disposition),
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    """Wait for the command; its exit code, stdout and stderr."""
    out, err = proc.communicate(timeout=GIVE_UP_S)
    return proc.returncode, out or "", err


def run(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run ``notes-cluster ARGS`` to its end."""
    return finish(start(args, cwd))


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s living child processes (from ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def until(done: Callable[[], bool], what: str, proc: subprocess.Popen[str] | None = None) -> None:
    """Poll ``done`` every 50 ms; fail after ``GIVE_UP_S`` or when ``proc`` ended first."""
    deadline = time.monotonic() + GIVE_UP_S
    while not done():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the command ended (exit {proc.returncode}) before {what}: {err}{out}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {GIVE_UP_S} s")
        time.sleep(0.05)


def kill_all(pids: list[int]) -> None:
    """SIGKILL whatever of ``pids`` still runs (only after a test already failed)."""
    for pid in pids:
        if running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def error_lines(err: str) -> list[str]:
    """The lines of ``err`` that are not the run's own progress lines."""
    return [line for line in err.splitlines() if line.strip()]
