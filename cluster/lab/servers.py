"""``notes-cluster bench-servers``: the HTTP servers side by side, in one run.

Layer: cluster (the lab). The figures behind docs/explanation/design-decisions.md ("The
HTTP server"): the same wrk client as the bench's HTTP points (``wrk``: ``wrk_flow.lua``, one
keep-alive connection per thread, pinned off the servers' core) drives, in alternating rounds of
short slots (in turn first, then last ...), one process per server and app
(``cluster.lab.server_variants``):

- the fixed-replies app (the HTTP server alone) on uvicorn with httptools and uvloop, granian,
  uvicorn with h11 on asyncio, and hypercorn's trio worker;
- one node over the real Redis on uvicorn (httptools, uvloop) and on granian.

Each slot reads the server process's CPU from ``/proc`` around the measured wrk run
(``http_scenarios.wrk_point``); a server's row sums its slots. A server that cannot start (granian
not installed) gets a row that says why instead of figures. Only ratios inside one run mean
anything: the machine is shared and noisy. The node rows run on the bench's Redis
(``context.bench_store``: a redis-server of its own, or a ``--redis`` database holding only the
bench's keys), cleared before, between and after the node slots.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import trio

from cluster.bench.context import Bench, BenchPlan, bench_store, machine, write_report
from cluster.bench.database import BENCH_PREFIX, BenchRedis
from cluster.bench.flows import SeededNote
from cluster.bench.http_scenarios import (
    PEER_CONCURRENCY,
    RATE_CAP,
    aggregate,
    wrk_point,
)
from cluster.bench.procs import ServerProcs, open_server_process, redis_server_pid
from cluster.bench.wrk import cpu_split, pin
from cluster.lab.fixed_replies import fixed_targets
from cluster.stopping import run_stoppable
from store.client_factory import redis_client

Log = Callable[[str], None]

QUICK_SLOT_S, QUICK_ROUNDS = 2.0, 3
FULL_SLOT_S, FULL_ROUNDS = 4.0, 4
"""Seconds per slot and rounds: quick mode takes about a minute on two cores."""


@dataclass(frozen=True)
class Side:
    """One server serving one app."""

    app: str
    server: str
    name: str

    @property
    def key(self) -> str:
        """Its name in the JSON."""
        return f"{self.app}:{self.server}"


SIDES = (
    Side("fixed", "uvicorn", "uvicorn, httptools, uvloop"),
    Side("fixed", "granian", "granian (uvloop)"),
    Side("fixed", "uvicorn-h11", "uvicorn, h11, asyncio"),
    Side("fixed", "hypercorn-trio", "hypercorn, trio worker"),
    Side("node", "uvicorn", "uvicorn, httptools, uvloop"),
    Side("node", "granian", "granian (uvloop)"),
)
APP_NAMES = {
    "fixed": "fixed replies (the HTTP server alone)",
    "node": "our node, 1 process, real Redis",
}


@dataclass(frozen=True)
class ServersOptions:
    """What ``notes-cluster bench-servers`` takes, plus knobs for tests (short slots)."""

    quick: bool = False
    redis_url: str | None = None
    """A user's Redis database (holding no keys but the bench's); None: a redis-server of the
    bench's own."""
    out_dir: Path = Path("runs/bench")
    slot_s: float | None = None
    rounds: int | None = None
    seed: int = 1

    @property
    def slot(self) -> float:
        """Seconds per slot (wrk runs whole seconds)."""
        return max(1.0, self.slot_s or (QUICK_SLOT_S if self.quick else FULL_SLOT_S))

    @property
    def round_count(self) -> int:
        """Rounds of slots."""
        return self.rounds or (QUICK_ROUNDS if self.quick else FULL_ROUNDS)

    def command(self) -> str:
        """The CLI command equivalent to these options (test knobs noted after it)."""
        cmd = "notes-cluster bench-servers" + (" --quick" if self.quick else "")
        cmd += f" --redis {self.redis_url}" if self.redis_url else ""
        cmd += f" --out {self.out_dir}"
        knobs = {"slot_s": self.slot_s, "rounds": self.rounds}
        given = {k: v for k, v in knobs.items() if v is not None}
        if given:
            cmd += "  # internal: " + ", ".join(f"{k}={v}" for k, v in given.items())
        return cmd


def _launch_args(side: Side, redis_url: str) -> list[str]:
    args = ["cluster.lab.server_variants", side.server, side.app]
    if side.app == "node":
        args += ["--redis", redis_url, "--prefix", BENCH_PREFIX]
    return args


async def _start(stack: AsyncExitStack, side: Side, redis_url: str) -> ServerProcs | str:
    """The side's server process, or why it is skipped."""
    if side.server == "granian" and importlib.util.find_spec("granian") is None:
        return "granian is not installed (pip install 'notes-cluster[bench]')"
    try:
        return await stack.enter_async_context(open_server_process(_launch_args(side, redis_url)))
    except (RuntimeError, trio.TooSlowError) as exc:
        return f"{side.server} did not start: {exc or type(exc).__name__}"


async def _targets(bench: Bench, side: Side, seconds: float) -> list[SeededNote]:
    c = PEER_CONCURRENCY
    if side.app == "fixed":
        return fixed_targets(bench.warmup(c) + max(200, int(seconds * RATE_CAP)))
    return await bench.targets(bench.client, c)


async def _rounds(bench: Bench, options: ServersOptions) -> dict[str, Any]:
    """Start every server, then alternate them in rounds of slots; a row per server."""
    servers_cpus, _ = cpu_split()
    rounds: list[dict[str, Any]] = []
    async with AsyncExitStack() as stack:
        procs: dict[str, ServerProcs | str] = {}
        for side in SIDES:
            procs[side.key] = found = await _start(stack, side, bench.url)
            if isinstance(found, str):
                bench.log(f"  {side.app} on {side.name}: skipped, {found}")
            else:
                pin(found.pids, servers_cpus)
        running = [s for s in SIDES if not isinstance(procs[s.key], str)]
        for r in range(options.round_count):
            row: dict[str, Any] = {}
            for side in running if r % 2 == 0 else list(reversed(running)):
                served = procs[side.key]
                assert not isinstance(served, str)
                targets = await _targets(bench, side, options.slot)
                point = {"label": f"round {r + 1}: {APP_NAMES[side.app]} on {side.name}"}
                point |= await wrk_point(bench, served, targets, PEER_CONCURRENCY, options.slot)
                row[side.key] = bench.record(point)
            rounds.append(row)
    return {"rounds": rounds, "rows": [_row(s, procs[s.key], rounds) for s in SIDES]}


def _row(side: Side, served: ServerProcs | str, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"key": side.key, "app": side.app, "server": side.name}
    if isinstance(served, str):
        return row | {"skipped": served}
    return row | aggregate([r[side.key] for r in rounds])


def _ratios(rows: list[dict[str, Any]]) -> None:
    """Each measured row against uvicorn (httptools, uvloop) serving the same app."""
    base = {r["app"]: r for r in rows if r["key"].endswith(":uvicorn") and "skipped" not in r}
    for row in rows:
        ref = base.get(row["app"])
        if "skipped" in row or ref is None:
            continue
        cpu, ref_cpu = row["cpu_ms_per_flow"]["servers"], ref["cpu_ms_per_flow"]["servers"]
        row["cpu_vs_uvicorn"] = round(cpu / ref_cpu, 3) if ref_cpu > 0 else None
        rate, ref_rate = row["flows_per_s"], ref["flows_per_s"]
        row["flows_vs_uvicorn"] = round(rate / ref_rate, 3) if ref_rate > 0 else None


async def _run(options: ServersOptions, log: Log, where: BenchRedis) -> dict[str, Any]:
    plan = BenchPlan(
        seconds=options.slot,
        nodes=(1,),
        concurrencies=(PEER_CONCURRENCY,),
        sizes=(),
        peer=False,
        steady_flows=0,
    )
    async with redis_client(where.url) as client:
        pid = await redis_server_pid(client)
        bench = Bench(client, where.url, plan, log, pid, options.seed, own_redis=where.own)
        info = await client.info("server")
        try:
            measured = await _rounds(bench, options)
        finally:
            with trio.CancelScope(shield=True):
                await bench.clear()
    _ratios(measured["rows"])
    return {
        "command": options.command(),
        "mode": "quick" if options.quick else "full",
        "machine": machine(info),
        "settings": {
            "slot_s": options.slot,
            "rounds": options.round_count,
            "concurrency": PEER_CONCURRENCY,
            "workers_per_server": 1,
            "http_client": "wrk (wrk_flow.lua), one connection per thread, pinned off the "
            "servers' core where the machine has two or more",
            "redis_url": options.redis_url,
        },
        **measured,
    }


def render_servers_markdown(result: dict[str, Any]) -> str:
    """The run as a markdown table, one row per server and app."""
    s = result["settings"]
    lines = [
        "# HTTP servers side by side",
        "",
        f"Command: `{result['command']}`",
        "",
        f"wrk, c={s['concurrency']}, one worker per server, {s['rounds']} alternated rounds of "
        f"{s['slot_s']:g} s; CPU of the server process per two-request flow (`/proc`), "
        "p50 per request. Only ratios within this run count: the machine is shared.",
        "",
        "| app | server | CPU ms/flow | ÷ uvicorn | flows/s | ÷ uvicorn | p50 ms | Redis ms/flow |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        app = APP_NAMES[row["app"]]
        if "skipped" in row:
            lines.append(f"| {app} | {row['server']} | skipped: {row['skipped']} | | | | | |")
            continue
        cpu = row["cpu_ms_per_flow"]
        # The fixed replies touch no Redis: what the shared server spent then is others' load.
        redis = f"{cpu['redis']:.3f}" if row["app"] == "node" else "none"
        lines.append(
            f"| {app} | {row['server']} | {cpu['servers']:.3f} | {_x(row.get('cpu_vs_uvicorn'))} "
            f"| {row['flows_per_s']:,.0f} | {_x(row.get('flows_vs_uvicorn'))} "
            f"| {row['p50_ms']:.2f} | {redis} |"
        )
    return "\n".join(lines) + "\n"


def _x(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:.2f}"


def run_bench_servers(options: ServersOptions, log: Log) -> dict[str, Any]:
    """Run the comparison; write ``servers.json`` and ``servers.md`` into ``out_dir``."""
    started = time.perf_counter()
    with bench_store(options.redis_url, log) as where:  # refused before anything is said
        log(f"bench-servers: {options.round_count} rounds of {options.slot:g} s slots")
        result = run_stoppable(partial(_run, options, log, where))
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    write_report(result, render_servers_markdown(result), options.out_dir / "servers", log)
    return result
