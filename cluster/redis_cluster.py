"""A local Redis Cluster for tests and experiments: N masters (optionally one replica each) started
from the installed ``redis-server`` on free loopback ports, created with ``redis-cli --cluster``.

Layer: cluster. Starts and stops Redis processes; knows nothing of the store's keys, the nodes or
the load generator. Every server is stopped by pid (SIGTERM, then SIGKILL) and the temporary
directory removed when the context ends, on error too.

    with local_redis_cluster(masters=3, replicas=1) as rc:
        simulate(SimulateOptions(redis_url=rc.url))    # the URL is detected as a cluster
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from cluster.stopping import forward_stop_signals
from nodes.serving.lifeline import stop_with_parent

HOST = "127.0.0.1"
"""Loopback only: a test cluster must never listen on a reachable interface."""

START_TIMEOUT_S = 10.0
"""How long one ``redis-server`` may take to answer PING after it was started."""

CREATE_TIMEOUT_S = 30.0
"""How long ``redis-cli --cluster create`` may take (it waits for the nodes to agree)."""

READY_TIMEOUT_S = 20.0
"""How long the nodes may take, after creation, to all report ``cluster_state:ok``."""

STOP_TIMEOUT_S = 5.0
"""How long a server may take to exit on SIGTERM before it is killed."""

NODE_TIMEOUT_MS = 2_000
"""``cluster-node-timeout``: short, so a failover experiment does not wait long for a vote."""

CLUSTER_SLOTS = 16384


class RedisClusterError(RuntimeError):
    """The local cluster could not be started (the message says which step failed)."""


@dataclass(frozen=True)
class RedisClusterInfo:
    """A running local cluster. Ports are the client ports; each server's bus port is separate."""

    url: str
    """``redis://127.0.0.1:<first master port>``: any node is enough for a cluster client."""
    masters: tuple[int, ...]
    replicas: dict[int, int]
    """Replica port -> the port of the master it replicates."""
    pids: dict[int, int]
    """Port -> pid of its ``redis-server``."""
    directory: Path

    @property
    def ports(self) -> tuple[int, ...]:
        """Every server's client port, masters first."""
        return (*self.masters, *sorted(self.replicas))

    def node_url(self, port: int) -> str:
        """The URL of one server (a plain, single-node connection)."""
        return f"redis://{HOST}:{port}"


def redis_server_available() -> bool:
    """True when ``redis-server`` and ``redis-cli`` are on PATH."""
    return shutil.which("redis-server") is not None and shutil.which("redis-cli") is not None


def _free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports that were free a moment ago (all held open until chosen)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_for(what: str, timeout_s: float, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise RedisClusterError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(0.05)


def _client(port: int) -> redis.Redis:
    return redis.Redis(
        host=HOST, port=port, socket_timeout=2, socket_connect_timeout=2, decode_responses=True
    )


def _answers(port: int) -> bool:
    try:
        with _client(port) as c:
            return bool(c.ping())
    except redis.RedisError:
        return False


def _start_server(directory: Path, port: int, bus_port: int) -> subprocess.Popen[bytes]:
    # The bus port is chosen explicitly: the default (port + 10000) may be taken or past 65535.
    args = [
        "redis-server",
        "--port", str(port),
        "--bind", HOST,
        "--cluster-enabled", "yes",
        "--cluster-port", str(bus_port),
        "--cluster-config-file", f"nodes-{port}.conf",
        "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
        "--dir", str(directory),
        "--save", "",
        "--appendonly", "no",
        "--maxmemory-policy", "noeviction",
        "--repl-diskless-sync-delay", "0",
        "--repl-ping-replica-period", "1",
        "--logfile", f"redis-{port}.log",
        "--daemonize", "no",
    ]  # fmt: skip
    # A session of its own: a Ctrl-C meant for the caller must not stop the servers behind its
    # back; the caller stops them, by pid.
    return subprocess.Popen(  # noqa: S603 - fixed argv, no shell
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=stop_with_parent(),
    )


def _stop(procs: dict[int, subprocess.Popen[bytes]]) -> None:
    """SIGTERM every server, wait, then SIGKILL any survivor; reap them all."""
    for proc in procs.values():
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT_S)


def _create(masters: list[int], replicas: int) -> None:
    cmd = [
        "redis-cli",
        "--cluster", "create",
        *(f"{HOST}:{p}" for p in masters),
        "--cluster-replicas", str(replicas),
        "--cluster-yes",
    ]  # fmt: skip
    try:
        done = subprocess.run(  # noqa: S603 - fixed argv, no shell
            cmd, capture_output=True, text=True, timeout=CREATE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise RedisClusterError(f"redis-cli --cluster create timed out: {exc}") from exc
    if done.returncode != 0:
        raise RedisClusterError(f"redis-cli --cluster create failed: {done.stdout}{done.stderr}")


def _replicas_online(port: int) -> int:
    """How many replicas of the master on ``port`` finished their initial sync."""
    with _client(port) as c:
        info = c.info("replication")
    return sum(
        1 for k, v in info.items() if k.startswith("slave") and dict(v).get("state") == "online"
    )


def _slot_ranges_with_replicas(port: int) -> list[int]:
    """Replicas listed for each slot range by ``CLUSTER SLOTS`` as the node on ``port`` sees it.
    Redis lists a replica only once its replication offset is past 0 (hence the short
    ``repl-ping-replica-period``: the pings move it on an idle cluster); clients find replicas
    here."""
    with _client(port) as c:
        ranges = c.execute_command("CLUSTER", "SLOTS")
    if isinstance(ranges, dict):  # pragma: no cover - redis-py may parse the reply
        return [len(nodes) - 1 for nodes in ranges.values()]
    return [len(r) - 3 for r in ranges]


def _cluster_ready(ports: list[int], masters: int) -> bool:
    """Every node reports state ok and all slots served, knows every other node, sees
    ``masters`` masters and every other node as a replica (replicas attach after the slots),
    and lists every replica in CLUSTER SLOTS (after its initial sync)."""
    per_master = (len(ports) - masters) // masters
    for port in ports:
        try:
            with _client(port) as c:
                info = str(c.execute_command("CLUSTER", "INFO"))
            seen_masters, seen_replicas = _roles(port)
            if port in seen_masters and _replicas_online(port) != per_master:
                return False
            if any(n != per_master for n in _slot_ranges_with_replicas(port)):
                return False
        except redis.RedisError:
            return False
        if len(seen_masters) != masters or len(seen_replicas) != len(ports) - masters:
            return False
        fields = dict(line.strip().split(":", 1) for line in info.splitlines() if ":" in line)
        if (
            fields.get("cluster_state") != "ok"
            or int(fields.get("cluster_slots_ok", 0)) != CLUSTER_SLOTS
            or int(fields.get("cluster_known_nodes", 0)) != len(ports)
        ):
            return False
    return True


def _roles(port: int) -> tuple[list[int], dict[int, int]]:
    """(master ports, replica port -> master port) from ``CLUSTER NODES`` as one node sees it."""
    with _client(port) as c:
        text = c.execute_command("CLUSTER", "NODES")
    if isinstance(text, bytes):  # pragma: no cover - decode_responses is on
        text = text.decode()
    port_of: dict[str, int] = {}
    master_of: dict[int, str] = {}
    masters: list[int] = []
    for line in str(text).splitlines():
        parts = line.split()
        node_id, address, flags, master_id = parts[0], parts[1], parts[2], parts[3]
        node_port = int(address.split("@", 1)[0].rsplit(":", 1)[1])
        port_of[node_id] = node_port
        if "master" in flags.split(","):
            masters.append(node_port)
        else:
            master_of[node_port] = master_id
    return masters, {r: port_of[m] for r, m in master_of.items()}


@contextlib.contextmanager
def local_redis_cluster(masters: int = 3, replicas: int = 0) -> Iterator[RedisClusterInfo]:
    """Start a Redis Cluster of ``masters`` masters with ``replicas`` replicas each, wait until
    every node reports ``cluster_state:ok`` with all slots covered, yield it, stop it."""
    if masters < 3:
        raise ValueError("a Redis Cluster needs at least 3 masters")
    if replicas < 0:
        raise ValueError("replicas must be >= 0")
    if not redis_server_available():
        raise RedisClusterError("redis-server and redis-cli must be on PATH")
    n = masters * (1 + replicas)
    directory = Path(tempfile.mkdtemp(prefix="notes-redis-cluster-"))
    procs: dict[int, subprocess.Popen[bytes]] = {}
    try:
        free = _free_ports(2 * n)
        ports, bus_ports = free[:n], free[n:]
        for port, bus_port in zip(ports, bus_ports, strict=True):
            procs[port] = _start_server(directory, port, bus_port)
        for port, proc in procs.items():
            _wait_for(
                f"redis-server on port {port}",
                START_TIMEOUT_S,
                lambda p=port, pr=proc: pr.poll() is not None or _answers(p),  # type: ignore[misc]
            )
            if proc.poll() is not None:
                raise RedisClusterError(f"redis-server on port {port} exited ({proc.returncode})")
        # redis-cli makes the first ``masters`` addresses masters and the rest their replicas.
        _create(ports, replicas)
        _wait_for(
            "cluster_state:ok and every replica attached, on every node",
            READY_TIMEOUT_S,
            lambda: _cluster_ready(ports, masters),
        )
        master_ports, replica_map = _roles(ports[0])
        ordered = tuple(p for p in ports if p in master_ports)
        yield RedisClusterInfo(
            url=f"redis://{HOST}:{ordered[0]}",
            masters=ordered,
            replicas=replica_map,
            pids={port: proc.pid for port, proc in procs.items()},
            directory=directory,
        )
    finally:
        _stop(procs)
        shutil.rmtree(directory, ignore_errors=True)


def main(masters: int = 3, replicas: int = 0, echo: Callable[[str], None] = print) -> None:
    """Run a local cluster until interrupted (Ctrl-C, SIGTERM or SIGHUP: every server is
    stopped, then ``KeyboardInterrupt`` goes on; ``cluster.stopping.received_signal`` says which
    signal it was), printing its URL and layout."""
    forward_stop_signals()
    with local_redis_cluster(masters, replicas) as rc:
        echo(rc.url)
        for port in rc.masters:
            echo(f"master  {HOST}:{port}  pid {rc.pids[port]}")
        for port, master in sorted(rc.replicas.items()):
            echo(f"replica {HOST}:{port}  pid {rc.pids[port]}  of {HOST}:{master}")
        while True:
            time.sleep(3600)
