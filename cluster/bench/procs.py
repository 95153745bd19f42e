"""The benchmark's processes: CPU time from ``/proc``, our node processes, and the SDK peer.

Layer: cluster (the bench). Reads ``utime + stime`` of server processes before and after a
point, so CPU per flow is measured on the servers alone (the load generator's own CPU is not
counted). Every process started here is stopped by its pid when its context exits, on error too.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import coredis
import trio

from cluster.child_processes import open_with_lifeline, read_url_line
from cluster.serve import NODE_PROCESS_MODULE, start_node_processes
from nodes.serving.operator import OperatorOptions
from nodes.serving.settings import ClusterSettings

CLK_TCK = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 60.0
"""How long a server process may take to print its URL (imports dominate; seconds normally)."""


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of process ``pid`` (all its threads), None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name may hold spaces or parentheses: the fields start after the last ")".
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def total_cpu(pids: Sequence[int]) -> float:
    """Summed CPU seconds of ``pids`` (a process that vanished counts as zero)."""
    return sum(cpu_seconds(p) or 0.0 for p in pids)


async def redis_server_pid(client: coredis.Redis[str]) -> int | None:
    """The Redis server's pid when it runs on this machine (readable in /proc), else None."""
    info = await client.info("server")
    pid = int(str(info.get("process_id", 0) or 0))
    return pid if _command_name(pid).startswith("redis") else None


def _command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="ascii").strip()
    except OSError:
        return ""


@dataclass
class Cpu:
    """CPU seconds of this process, of server processes and of redis-server, at one instant.
    (The HTTP points' load client, wrk, is another process: its CPU comes from its exit.)"""

    process: float
    servers: float
    redis: float

    @classmethod
    def now(cls, servers: Sequence[int], redis_pid: int | None) -> Cpu:
        """Read the clocks."""
        return cls(
            time.process_time(),
            total_cpu(servers),
            total_cpu([redis_pid]) if redis_pid else 0.0,
        )

    def per_flow_ms(
        self, before: Cpu, flows: int, client_s: float | None = None
    ) -> dict[str, float]:
        """Milliseconds of CPU per completed flow since ``before``. ``client`` is the load
        client's: ``client_s`` when it ran in a process of its own, else this process's."""
        n = max(1, flows)
        process = round((self.process - before.process) * 1000 / n, 3)
        return {
            "bench_process": process,
            "client": process if client_s is None else round(client_s * 1000 / n, 3),
            "servers": round((self.servers - before.servers) * 1000 / n, 3),
            "redis": round((self.redis - before.redis) * 1000 / n, 3),
        }


@dataclass(frozen=True)
class ServerProcs:
    """The URLs a set of server processes answer at, and their pids."""

    urls: list[str]
    pids: list[int]


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set in this process while the block runs (children started in it inherit it)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@asynccontextmanager
async def open_http_cluster(
    settings: ClusterSettings,
    nodes: int,
    redis_url: str,
    prefix: str,
    *,
    ops: OperatorOptions | None = None,
    env: Mapping[str, str] | None = None,
    module: str = NODE_PROCESS_MODULE,
    args: Sequence[str] = (),
) -> AsyncIterator[ServerProcs]:
    """``nodes`` node processes on free loopback ports over ``redis_url``, their keys under
    ``prefix``; stopped on exit (``start_node_processes`` stops each child by its pid when
    cancelled). The pids are of these nodes only, so clusters open side by side (the peer
    comparison's) each count their own. ``ops`` turns their metrics on; ``env`` is added to
    their environment (e.g. the Redis client they use); ``module`` is what each runs
    (``nodes.serving.process``, or a module taking its command line and ``args`` after it)."""
    async with trio.open_nursery() as nursery:
        with _environment(env or {}), trio.fail_after(START_TIMEOUT_S * nodes):
            started = await start_node_processes(
                nursery, settings, redis_url, count=nodes, embedded=False, prefix=prefix, ops=ops,
                module=module, module_args=args,
            )  # fmt: skip
        try:
            yield ServerProcs([n.url for n in started], [n.pid for n in started])
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_server_process(args: list[str]) -> AsyncIterator[ServerProcs]:
    """Run ``python -m <args>``, which prints its URL when ready; kill it by pid on exit. The
    child watches a lifeline (``cluster.lifeline_child``): it stops by itself should this
    process be killed before it could stop the child."""
    async with open_with_lifeline(
        lambda fd: [sys.executable, "-m", "cluster.lifeline_child", str(fd), *args]
    ) as proc:
        try:
            assert proc.stdout is not None
            with trio.fail_after(START_TIMEOUT_S):
                url = await read_url_line(proc.stdout, "server process")
            yield ServerProcs([url], [proc.pid])
        finally:
            if proc.returncode is None:
                proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
