"""One ``redis-server`` of a command's own, on a free loopback port, for as long as a context lasts.

Layer: cluster. Starts and stops one Redis process; knows nothing of the store's keys. Used where a
command needs a real Redis it may fill and flush without touching anyone's data (the benchmarks
by default). The server keeps nothing on disk, evicts nothing, and is stopped by pid (SIGTERM,
then SIGKILL) with its temporary folder removed when the context ends, on error too.

    with local_redis_server() as server:
        run_bench(..., server.url)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from nodes.serving.lifeline import stop_with_parent

HOST = "127.0.0.1"
"""Loopback only: a server of our own must never listen on a reachable interface."""

START_TIMEOUT_S = 10.0
"""How long ``redis-server`` may take to answer PING after it was started."""

STOP_TIMEOUT_S = 5.0
"""How long the server may take to exit on SIGTERM before it is killed."""


class RedisServerError(RuntimeError):
    """The server could not be started (the message says why and what to do)."""


@dataclass(frozen=True)
class LocalRedis:
    """A running server of our own."""

    port: int
    pid: int

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://{HOST}:{self.port}/0"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with redis.Redis(host=HOST, port=port, socket_timeout=1, socket_connect_timeout=1) as c:
            return bool(c.ping())
    except redis.RedisError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def local_redis_server(*extra: str) -> Iterator[LocalRedis]:
    """Start ``redis-server`` (``extra``: more of its arguments) on a free loopback port, wait
    for PING, yield it; stop it by pid on exit."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise RedisServerError(
            "redis-server is not installed (apt-get install redis-server), or give --redis URL"
        )
    directory = Path(tempfile.mkdtemp(prefix="notes-redis-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        for _ in range(3):  # the free port may be taken between the check and the bind
            port = _free_port()
            args = [
                exe,
                "--port", str(port),
                "--bind", HOST,
                "--save", "",
                "--appendonly", "no",
                "--maxmemory-policy", "noeviction",
                "--dir", str(directory),
                "--daemonize", "no",
            ]  # fmt: skip
            # A session of its own: a Ctrl-C meant for the command must not stop the server
            # behind its back; the command stops it, by pid.
            proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                [*args, *extra],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                # SIGTERM from the kernel should this process end without stopping it.
                preexec_fn=stop_with_parent(),
            )
            deadline = time.monotonic() + START_TIMEOUT_S
            while proc.poll() is None and not _answers(port):
                if time.monotonic() > deadline:
                    raise RedisServerError(f"redis-server on port {port} did not answer PING")
                time.sleep(0.05)
            if proc.poll() is None:
                break
            _stop(proc)  # reaped; try another port
        else:
            raise RedisServerError("redis-server exited at start three times")
        yield LocalRedis(port, proc.pid)
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(directory, ignore_errors=True)
