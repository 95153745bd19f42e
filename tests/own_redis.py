"""A ``redis-server`` of a test's own on a free loopback port (and, when asked, a Unix domain
socket), stopped by pid.

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
    unix_path: Path | None = None
    """The Unix domain socket it also listens on (``own_redis(..., unix_socket=...)``)."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def unix_url(self) -> str:
        """``unix:///PATH`` of its socket (database 0)."""
        if self.unix_path is None:
            raise ValueError("this server listens on no Unix domain socket")
        return f"unix://{self.unix_path}"


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
def short_folder() -> Iterator[Path]:
    """A temporary folder with a short path, removed on exit: a Unix socket's path must fit
    in 107 bytes, which a test's ``tmp_path`` may not leave room for."""
    folder = Path(tempfile.mkdtemp(prefix="nc-sock-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def own_redis(
    directory: Path | None,
    *extra: str,
    unix_socket: Path | bool = False,
    port: int | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[OwnRedis]:
    """Start a server (``extra``: more ``redis-server`` arguments, e.g. ``--maxmemory 2mb``),
    wait for PING, yield it; kill it by pid on exit. Its data folder goes under ``directory``,
    or, when that is None (a module-scoped fixture has no ``tmp_path``), in a temporary folder
    removed on exit. ``unix_socket``: also listen on a Unix domain socket (mode 700), at that
    path, or (True) in a short temporary folder removed on exit. ``port``: the port to take
    instead of a free one; with the same ``directory`` (and ``unix_socket``) it restarts a
    stopped server on its data. ``env``: the server's environment (default: the test's)."""
    require_redis_server()
    port = free_port() if port is None else port
    if directory is None:
        data = Path(tempfile.mkdtemp(prefix="notes-own-redis-"))
    else:
        data = directory / f"redis-{port}"
        data.mkdir(parents=True, exist_ok=port is not None)
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
    socket_folder: Path | None = None
    unix_path: Path | None = None
    if unix_socket is True:
        socket_folder = Path(tempfile.mkdtemp(prefix="nc-sock-"))
        unix_path = socket_folder / "redis.sock"
    elif isinstance(unix_socket, Path):
        unix_path = unix_socket
    if unix_path is not None:
        args += ["--unixsocket", str(unix_path), "--unixsocketperm", "700"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
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
        yield OwnRedis(port, proc, unix_path)
    finally:
        stop(proc)
        if directory is None:
            shutil.rmtree(data, ignore_errors=True)
        if socket_folder is not None:
            shutil.rmtree(socket_folder, ignore_errors=True)
    assert not Path(f"/proc/{proc.pid}").exists()
