"""Node CPU per flow of two (or more) copies of the code, side by side: an A/B of a cut.

Layer: cluster (the lab). Each side is one node process whose ``PYTHONPATH`` is a tree
of this project (a worktree, or a copy of ``cluster``, ``nodes`` and ``store``), with extra
environment if asked (``METRICS=1`` turns its metrics port on). The sides alternate in slots of
the bench's wrk flow (``http_scenarios.wrk_point``: warm-up, then a measured run, CPU from
``/proc``), in turn first and then in reverse order, on a Redis of the run's own (or ``--redis``,
refused when it holds keys the bench did not write). Printed: every slot, then per side the
summed CPU per flow and the median of its per-round ratio to the first side.

    python -m cluster.lab.ab_nodes --rounds 12 --slot 3 \\
        before=/work/wt/main after=/work/wt/mine "on=/work/wt/mine|METRICS=1"
"""

from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio

from cluster.bench.context import Bench, BenchOptions, plan_for
from cluster.bench.database import BENCH_PREFIX, bench_redis
from cluster.bench.http_scenarios import PEER_CONCURRENCY, aggregate, wrk_point
from cluster.bench.procs import ServerProcs, open_http_cluster, redis_server_pid
from cluster.bench.wrk import cpu_split, pin
from cluster.exit_codes import exit_code_for_signal
from cluster.stopping import Stopped, forwarding_stop_signals, run_stoppable
from nodes.serving.operator import OperatorOptions
from nodes.serving.settings import settings_for
from store.client_factory import CLIENT_ENV, redis_client


@dataclass(frozen=True)
class Side:
    """One node process: its name, the code it runs and its environment."""

    name: str
    pythonpath: str
    env: dict[str, str] = field(default_factory=dict)
    metrics: bool = False


def parse_side(text: str) -> Side:
    """``NAME=PYTHONPATH[|KEY=VALUE,...]``; ``METRICS=1`` turns the side's metrics on."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"{text!r}: expected NAME=PYTHONPATH[|KEY=VALUE,...]")
    path, _, extra = rest.partition("|")
    # PYTHONSAFEPATH: the node runs as ``python -m``, which would put the working directory
    # first on sys.path, and a tree of this project there (a run from a checkout) would shadow
    # the side's own: every side would run the same code.
    env = {CLIENT_ENV: "resp", "PYTHONPATH": path, "PYTHONSAFEPATH": "1"}
    metrics = False
    for pair in filter(None, extra.split(",")):
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"{pair!r}: expected KEY=VALUE")
        if key == "METRICS":
            metrics = value not in ("", "0")
        else:
            env[key] = value
    return Side(name, path, env, metrics)


async def run_ab(
    sides: list[Side], rounds: int, slot_s: float, url: str, own: bool
) -> dict[str, list[dict[str, Any]]]:
    """Every side's points, slot by slot (see the module docstring)."""
    settings = settings_for(None, True, None)
    plan = plan_for(BenchOptions(quick=True, seconds_per_point=slot_s))
    points: dict[str, list[dict[str, Any]]] = {s.name: [] for s in sides}
    async with redis_client(url) as client:
        bench = Bench(client, url, plan, print, await redis_server_pid(client), 1, own_redis=own)
        servers, _ = cpu_split()
        try:
            async with AsyncExitStack() as stack:
                procs: dict[str, ServerProcs] = {}
                for side in sides:
                    ops = OperatorOptions(metrics_port=0) if side.metrics else None
                    procs[side.name] = await stack.enter_async_context(
                        open_http_cluster(settings, 1, url, BENCH_PREFIX, env=side.env, ops=ops)
                    )
                    pin(procs[side.name].pids, servers)
                for r in range(rounds):
                    for side in sides if r % 2 == 0 else list(reversed(sides)):
                        targets = await bench.targets(client, PEER_CONCURRENCY)
                        point = await wrk_point(
                            bench, procs[side.name], targets, PEER_CONCURRENCY, slot_s
                        )
                        points[side.name].append(point)
                        cpu = point["cpu_ms_per_flow"]
                        print(
                            f"round {r + 1} {side.name:12} {point['flows_per_s']:8.1f} flows/s "
                            f"node {cpu['servers']:.3f} redis {cpu['redis']:.3f} ms/flow "
                            f"failed {point['failed']}"
                        )
        finally:
            with trio.CancelScope(shield=True):
                await bench.clear()
    return points


def summary(points: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Per side: CPU per flow over all its slots, and its ratio to the first side."""
    names = list(points)
    base = points[names[0]]
    base_node = aggregate(base)["cpu_ms_per_flow"]["servers"]
    lines = []
    for name in names:
        pts = points[name]
        ratios = [
            p["cpu_ms_per_flow"]["servers"] / max(1e-9, b["cpu_ms_per_flow"]["servers"])
            for p, b in zip(pts, base, strict=True)
        ]
        cpu = aggregate(pts)["cpu_ms_per_flow"]
        node = cpu["servers"]
        lines.append(
            f"{name:12} node {node:.3f} redis {cpu['redis']:.3f} ms/flow; node ÷ "
            f"{names[0]}: summed {node / max(1e-9, base_node):.3f}, median of "
            f"rounds {statistics.median(ratios):.3f} ({min(ratios):.2f} to {max(ratios):.2f})"
        )
    return lines


def main() -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sides", nargs="+", type=parse_side, metavar="NAME=PYTHONPATH[|K=V,...]")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--slot", type=float, default=3.0, help="seconds per measured slot")
    parser.add_argument("--redis", default=None, help="default: a redis-server of its own")
    a = parser.parse_args()
    try:
        with forwarding_stop_signals(), bench_redis(a.redis) as where:
            points = run_stoppable(partial(run_ab, a.sides, a.rounds, a.slot, where.url, where.own))
    except Stopped as exc:
        sys.exit(exit_code_for_signal(exc.signum))
    for line in summary(points):
        print(line)


if __name__ == "__main__":
    main()
