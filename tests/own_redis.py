"""A ``redis-server`` of a test's own on a free loopback port, stopped by pid.

For tests that kill, pause or replicate a server: never the shared one at 6379.
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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.ci import in_ci


@dataclass(frozen=True)
class OwnRedis:
    """One running server."""

    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def require_redis_server() -> None:
    """Skip (fail under CI) when ``redis-server`` is not installed."""
    if shutil.which("redis-server") is None:
        if in_ci():
            pytest.fail("CI needs redis-server")
        pytest.skip("redis-server is not installed")


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL (if still running) and reap."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@contextmanager
def own_redis(directory: Path | None, *extra: str) -> Iterator[OwnRedis]:
    """Start a server (``extra``: more ``redis-server`` arguments, e.g. ``--maxmemory 2mb``),
    wait for PING, yield it; kill it by pid on exit. Its data folder goes under ``directory``,
    or, when that is None (a module-scoped fixture has no ``tmp_path``), in a temporary folder
    removed on exit."""
    require_redis_server()
    port = free_port()
    if directory is None:
        data = Path(tempfile.mkdtemp(prefix="notes-own-redis-"))
    else:
        data = directory / f"redis-{port}"
        data.mkdir(parents=True)
    args = [
        "redis-server",
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--maxmemory-policy", "noeviction",
        "--dir", str(data),
        *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(port=port, socket_timeout=1).ping():
                    break
            except redis.RedisError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield OwnRedis(port, proc)
    finally:
        stop(proc)
        if directory is None:
            shutil.rmtree(data, ignore_errors=True)
    assert not Path(f"/proc/{proc.pid}").exists()
