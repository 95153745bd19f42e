"""Metrics on ÷ off, measured in one node process that switches between the two.

Layer: cluster (the lab; run by ``bench-parts``, ``parts``). One ``metrics_switch_node`` process
(the same node built twice, metrics off and on, the mode switched every window: off, on, on,
off, ...) serves the bench's wrk flow at the peer comparison's concurrency for several plan
seconds; the process records, per window, its own CPU, the requests it completed and Redis' CPU.
This module keeps the windows that lie wholly inside the measured wrk run, pairs each with its
neighbour of the other mode, and reads CPU per flow per mode over all of them:

- ``ratio_node_plus_redis``: metrics on ÷ off of node + Redis CPU per flow (the lab's
  target: ≤ 1.03);
- ``ratio_node``: the node's alone (Redis does the same work either way: the stricter figure);
- a 95% interval of each, from resampling the pairs (a percentile bootstrap, seeded by the
  bench's seed): how far another run of the same length could land.

Two node processes compared slot by slot (the way ``http_scenarios.alternate`` compares servers)
read 0.93 and 1.19 for the same code in two runs: between processes started once, the draw of
the process moves more than metrics do. Here both modes live in one process, side by side every
few hundred milliseconds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

import httpx
import trio

from cluster.bench.context import Bench, BenchPlan, bench_store
from cluster.bench.database import BENCH_PREFIX, BenchRedis
from cluster.bench.http_scenarios import PEER_CONCURRENCY, RATE_CAP
from cluster.bench.procs import open_http_cluster, redis_server_pid
from cluster.bench.wrk import cpu_split, pin, run_wrk
from cluster.lab.metrics_switch_node import MARK, WINDOWS
from cluster.stopping import run_stoppable
from nodes.serving.settings import ClusterSettings, settings_for
from store.client_factory import CLIENT_ENV, redis_client

MODULE = "cluster.lab.metrics_switch_node"
PLAN_SECONDS = 4
"""The measured run lasts this many of the plan's seconds per point (32 s in a full bench, 12 s
in a quick one), whole seconds (wrk's), two at least (a few pairs of windows)."""
MIN_SECONDS = 2
WINDOW_MS, GUARD_MS = 200, 20
WARM_S = 2
"""wrk's warm-up run: both modes served several windows each before the mark."""
EDGE_S = 0.25
"""A window is kept only when it starts this long after wrk started and ends this long before
it ended (wrk's own start and stop are not part of either mode)."""
RESAMPLES = 2_000


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def inside(windows: Sequence[dict[str, Any]], start_ns: int, end_ns: int) -> list[dict[str, Any]]:
    """The windows wholly inside [start + edge, end − edge] (one monotonic clock: Linux's
    CLOCK_MONOTONIC is the machine's, shared by every process)."""
    edge = int(EDGE_S * 1e9)
    return [w for w in windows if w["start_ns"] >= start_ns + edge and w["end_ns"] <= end_ns - edge]


def pairs(windows: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Adjacent windows of the two modes, each window in one pair at most, as (off, on)."""
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    i = 0
    while i + 1 < len(windows):
        a, b = windows[i], windows[i + 1]
        if a["mode"] != b["mode"]:
            out.append((a, b) if a["mode"] == "off" else (b, a))
            i += 2
        else:
            i += 1
    return out


def _per_request(windows: Sequence[dict[str, Any]], key: str) -> float:
    requests = sum(w["requests"] for w in windows)
    return sum(w[key] for w in windows) / requests if requests else 0.0


def ratios(chosen: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[float, float]:
    """(node + Redis, node alone): metrics on ÷ off of CPU per request over ``chosen``."""
    off = [p[0] for p in chosen]
    on = [p[1] for p in chosen]
    node_off, node_on = _per_request(off, "cpu_ns"), _per_request(on, "cpu_ns")
    redis_off, redis_on = _per_request(off, "redis_ns"), _per_request(on, "redis_ns")
    return (
        _ratio(node_on + redis_on, node_off + redis_off) or 0.0,
        _ratio(node_on, node_off) or 0.0,
    )


def interval(
    chosen: Sequence[tuple[dict[str, Any], dict[str, Any]]], seed: int
) -> tuple[list[float], list[float]]:
    """95% percentile-bootstrap intervals of both ratios, resampling the pairs."""
    rng = random.Random(seed)
    total: list[float] = []
    node: list[float] = []
    for _ in range(RESAMPLES):
        t, n = ratios([chosen[rng.randrange(len(chosen))] for _ in chosen])
        total.append(t)
        node.append(n)
    total.sort()
    node.sort()
    lo, hi = int(0.025 * RESAMPLES), int(0.975 * RESAMPLES) - 1
    return [round(total[lo], 3), round(total[hi], 3)], [round(node[lo], 3), round(node[hi], 3)]


def summarize(
    windows: Sequence[dict[str, Any]], requests_per_flow: float, seed: int
) -> dict[str, Any]:
    """Per mode: CPU ms per flow (node, Redis) and flows/s; the ratios and their intervals."""
    chosen = pairs(windows)
    if not chosen:
        raise RuntimeError("metrics switch: no pair of windows inside the measured run")
    per_mode: dict[str, Any] = {}
    for index, mode in enumerate(("off", "on")):
        side = [p[index] for p in chosen]
        flows = sum(w["requests"] for w in side) / requests_per_flow
        seconds = sum(w["seconds"] for w in side)
        per_mode[mode] = {
            "windows": len(side),
            "flows": round(flows),
            "flows_per_s": round(flows / seconds, 1) if seconds else 0.0,
            "node_ms_per_flow": round(_per_request(side, "cpu_ns") * requests_per_flow / 1e6, 4),
            "redis_ms_per_flow": round(_per_request(side, "redis_ns") * requests_per_flow / 1e6, 4),
        }
    total, node = ratios(chosen)
    total_ci, node_ci = interval(chosen, seed)
    return {
        "pairs": len(chosen),
        "modes": per_mode,
        "ratio_node_plus_redis": round(total, 3),
        "ratio_node_plus_redis_95": total_ci,
        "ratio_node": round(node, 3),
        "ratio_node_95": node_ci,
    }


async def metrics_switch(
    bench: Bench,
    settings: ClusterSettings,
    *,
    on_extra_us: float = 0.0,
    same: bool = False,
    seconds: int | None = None,
) -> dict[str, Any]:
    """Run the switching node under wrk; its windows summarized (``summarize``), with how the
    run went. ``on_extra_us``: a known CPU cost per request added to the metered mode;
    ``same``: both nodes without metrics (A/A); ``seconds``: the run's (default: from the
    plan)."""
    c = PEER_CONCURRENCY
    if seconds is None:
        seconds = max(MIN_SECONDS, round(PLAN_SECONDS * bench.plan.seconds))
    args = ["--window-ms", str(WINDOW_MS), "--guard-ms", str(GUARD_MS)]
    if same:
        args.append("--same")
    if bench.redis_pid is not None:
        args += ["--redis-pid", str(bench.redis_pid)]
    if on_extra_us:
        args += ["--on-extra-us", str(on_extra_us)]
    servers, _ = cpu_split()
    async with open_http_cluster(
        settings, 1, bench.url, BENCH_PREFIX, env={CLIENT_ENV: "resp"}, module=MODULE, args=args
    ) as procs:
        pin(procs.pids, servers)
        targets = await bench.targets(bench.client, c, RATE_CAP, seconds=seconds)
        warm = bench.warmup(c)
        await run_wrk(procs.urls, targets[:warm], bench.tokens, connections=c, seconds=WARM_S)
        control = procs.urls[0].removesuffix("/mcp")
        async with httpx.AsyncClient(base_url=control, timeout=30) as http:
            (await http.post(MARK)).raise_for_status()
            start_ns = time.monotonic_ns()
            result = await run_wrk(
                procs.urls, targets[warm:], bench.tokens, connections=c, seconds=seconds
            )
            end_ns = time.monotonic_ns()
            answer = (await http.get(WINDOWS)).raise_for_status().json()
    kept = inside(answer["windows"], start_ns, end_ns)
    out = summarize(kept, result.requests / max(1, result.flows), bench.seed)
    out |= {
        "seconds": seconds,
        "concurrency": c,
        "window_ms": WINDOW_MS,
        "guard_ms": GUARD_MS,
        "flows": result.flows,
        "failed": result.failures,
        "windows_recorded": len(answer["windows"]),
        "windows_kept": len(kept),
        "served": answer["served"],
        "on_extra_us": on_extra_us,
        "same": same,
    }
    bench.log(
        f"  metrics on ÷ off, one process switching: {out['ratio_node_plus_redis']:.3f} "
        f"(95% {out['ratio_node_plus_redis_95'][0]:.3f}–{out['ratio_node_plus_redis_95'][1]:.3f}),"
        f" node alone {out['ratio_node']:.3f}, {out['pairs']} pairs, {result.failures} failed"
    )
    return out


def main(argv: list[str] | None = None) -> None:
    """``python -m cluster.lab.metrics_switch [--seconds N] [--same]
    [--on-extra-us N]``: the measure alone, on a redis-server of its own; prints its JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m cluster.lab.metrics_switch",
        description="Metrics on ÷ off in one node process switching between the two.",
    )
    parser.add_argument("--seconds", type=int, default=32, help="the measured run (default 32)")
    parser.add_argument("--same", action="store_true", help="both without metrics: the A/A")
    parser.add_argument("--on-extra-us", type=float, default=0.0, help="known cost, metered")
    parser.add_argument("--seed", type=int, default=1)
    a = parser.parse_args(argv)
    if a.seconds < MIN_SECONDS:
        parser.error(f"--seconds must be at least {MIN_SECONDS}")

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    async def run(where: BenchRedis) -> dict[str, Any]:
        plan = BenchPlan(a.seconds / PLAN_SECONDS, (1,), (PEER_CONCURRENCY,), (), True, 0)
        async with redis_client(where.url) as client:
            pid = await redis_server_pid(client)
            bench = Bench(client, where.url, plan, log, pid, a.seed, own_redis=where.own)
            try:
                return await metrics_switch(
                    bench,
                    settings_for(None, True, None),
                    on_extra_us=a.on_extra_us,
                    same=a.same,
                    seconds=a.seconds,
                )
            finally:
                with trio.CancelScope(shield=True):
                    await bench.clear()

    with bench_store(None, log) as where:
        print(json.dumps(run_stoppable(partial(run, where)), indent=2))


if __name__ == "__main__":
    main()
