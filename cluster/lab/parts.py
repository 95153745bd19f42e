"""``notes-cluster bench-parts``: what one node's CPU per flow is made of, in one run.

Layer: cluster (the lab). The figures the project chose its parts on, measured apart from the
user's benchmark (``notes-cluster bench``, ``cluster.bench``), whose machinery it reuses: the
bench's Redis (``context.bench_store``), its wrk client and its alternation of servers in short
slots (``http_scenarios.alternate``). Three scenarios:

1. parts    alternating slots, c8: ours (one node process on the store's own Redis client), the
            same node on coredis, and the fixed-replies app on the node's server settings
            (``fixed_replies``: the HTTP server alone). Read: the HTTP server's share of the
            node's CPU per flow (target ≤ 0.2) and ours ÷ ours on coredis (node + Redis);
2. metrics  metrics on ÷ off in one node process switching between the two (``metrics_switch``;
            target ≤ 1.03 of node + Redis CPU per flow);
3. clients  the Redis client alone: CPU µs per EVALSHA of coredis, the store's own client (and
            valkey-glide when installed), on uvloop and on trio (``redis_clients``).

``parts.md`` opens with the budget per flow of scenario 1's sides (``budget.side_budget``), each
with its Redis client's estimated share: scripts a flow ran × the client's µs per call alone.
Only ratios measured in this one run mean anything: the machine is shared and noisy.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import trio

from cluster.bench.budget import ratio, side_budget
from cluster.bench.context import (
    Bench,
    BenchOptions,
    Log,
    bench_store,
    machine,
    plan_for,
    write_report,
)
from cluster.bench.database import BENCH_PREFIX, BenchRedis
from cluster.bench.http_scenarios import (
    PEER_CONCURRENCY,
    PEER_ROUNDS,
    SlotServer,
    alternate,
    in_redis,
    slot_seconds,
)
from cluster.bench.procs import open_http_cluster, open_server_process, redis_server_pid
from cluster.lab.fixed_replies import fixed_targets
from cluster.lab.metrics_switch import metrics_switch
from cluster.lab.parts_report import render_parts_markdown
from cluster.lab.redis_clients import compare_clients
from cluster.stopping import run_stoppable
from nodes.serving.settings import settings_for
from store.client_factory import CLIENT_ENV, redis_client

PARTS = ("ours", "ours_coredis", "fixed")
PART_NAMES = {
    "ours": "ours, 1 node process",
    "ours_coredis": "ours, on coredis",
    "fixed": "fixed replies (HTTP server alone)",
}
REDIS_CLIENT = {"ours": "resp", "ours_coredis": "coredis"}
"""The Redis client each of our sides runs (``NOTES_CLUSTER_REDIS_CLIENT`` of its process)."""
NODE_BACKEND = "uvloop"
"""The event loop of the node processes: the client's µs per call are taken on it."""
CLIENT_CALLS_PER_S = 1_000
"""Calls per client, per point-second of the plan (quick: 3,000; full: 8,000; at least 300)."""
CLIENT_CONCURRENCY = 16

TARGET_HTTP_SERVER_SHARE = 0.2
TARGET_METRICS_COST = 1.03
"""A node with its metrics on costs at most 3% more CPU per flow than without."""


@dataclass(frozen=True)
class PartsOptions:
    """What ``notes-cluster bench-parts`` takes, plus knobs for tests (short points)."""

    quick: bool = False
    redis_url: str | None = None
    """A user's Redis database (holding no keys but the bench's); None: a redis-server of the
    lab's own."""
    out_dir: Path = Path("runs/bench")
    seconds_per_point: float | None = None
    seed: int = 1

    def command(self) -> str:
        """The CLI command equivalent to these options (test knobs noted after it)."""
        cmd = "notes-cluster bench-parts" + (" --quick" if self.quick else "")
        cmd += f" --redis {self.redis_url}" if self.redis_url else ""
        cmd += f" --out {self.out_dir}"
        knobs = {
            k: v
            for k, v in asdict(self).items()
            if k in ("seconds_per_point", "seed") and v != getattr(PartsOptions(), k)
        }
        if knobs:
            cmd += "  # internal: " + ", ".join(f"{k}={v}" for k, v in knobs.items())
        return cmd


def client_us_per_call(clients: list[dict[str, Any]] | None) -> dict[str, float]:
    """Each Redis client's CPU µs per ``EVALSHA`` on the node's event loop."""
    return {
        r["client"]: float(r["cpu_us_per_call"])
        for r in clients or ()
        if r["backend"] == NODE_BACKEND
    }


def part_budget(point: dict[str, Any], side: str, us_per_call: dict[str, float]) -> dict[str, Any]:
    """One column: the side's budget (``budget.side_budget``) and its Redis client's estimated
    share. The estimate multiplies the scripts a flow ran in Redis by the client's CPU µs per
    ``EVALSHA`` measured alone: it leaves out the few plain commands a flow sends and the
    client's own scheduling under load, so it is a floor, not a profile."""
    client = REDIS_CLIENT.get(side)
    column = side_budget(point, uses_redis=client is not None)
    us = us_per_call.get(client) if client else None
    scripts = column["redis_scripts_per_flow"] or 0.0
    estimate = round(scripts * us / 1000, 3) if us is not None else None
    return column | {
        "redis_client": client,
        "redis_client_us_per_call": us,
        "redis_client_ms_per_flow": estimate,
        "redis_client_share_of_server": ratio(estimate, column["server"]),
    }


def parts_summary(
    block: dict[str, Any], switch: dict[str, Any], clients: list[dict[str, Any]]
) -> dict[str, Any]:
    """The budget per flow of each side, and the ratios the targets are judged on."""
    us_per_call = client_us_per_call(clients)
    sides = {side: part_budget(block[side], side, us_per_call) for side in PARTS}
    base = sides["ours"]["server_plus_redis"]
    for column in sides.values():
        column["vs_ours"] = ratio(column["server_plus_redis"], base)
    return {
        "concurrency": block["concurrency"],
        "slot_s": block["slot_s"],
        "rounds": len(block["rounds"]),
        "sides": sides,
        "http_server_share_of_node": ratio(sides["fixed"]["server"], sides["ours"]["server"]),
        "own_client_over_coredis": ratio(
            sides["ours"]["server_plus_redis"], sides["ours_coredis"]["server_plus_redis"]
        ),
        "metrics_on_over_off": switch["ratio_node_plus_redis"],
        "metrics_on_over_off_95": switch["ratio_node_plus_redis_95"],
        "metrics_node_on_over_off": switch["ratio_node"],
        "redis_client_backend": NODE_BACKEND,
        "redis_client_us_per_call": us_per_call,
    }


def targets(budget: dict[str, Any]) -> dict[str, bool]:
    """Each target's verdict on this run's figures."""
    return {
        "http_server_at_most_0.2_of_node": (budget["http_server_share_of_node"] or 99)
        <= TARGET_HTTP_SERVER_SHARE,
        "metrics_on_at_most_1.03_of_off": (budget["metrics_on_over_off"] or 99)
        <= TARGET_METRICS_COST,
        "own_client_below_coredis": (budget["own_client_over_coredis"] or 99) < 1,
    }


async def _parts(bench: Bench) -> dict[str, Any]:
    """Scenario 1: ours, ours on coredis and the HTTP server alone, alternating."""
    c = PEER_CONCURRENCY
    settings = settings_for(None, True, None)

    async def fixed(count: int) -> list[Any]:
        return fixed_targets(count)

    async with (
        open_http_cluster(settings, 1, bench.url, BENCH_PREFIX, env={CLIENT_ENV: "resp"}) as ours,
        open_http_cluster(
            settings, 1, bench.url, BENCH_PREFIX, env={CLIENT_ENV: "coredis"}
        ) as coredis,
        open_server_process(["cluster.lab.fixed_replies"]) as replies,
    ):
        servers = {
            "ours": SlotServer(PART_NAMES["ours"], ours, in_redis(bench, c)),
            "ours_coredis": SlotServer(PART_NAMES["ours_coredis"], coredis, in_redis(bench, c)),
            "fixed": SlotServer(PART_NAMES["fixed"], replies, fixed),
        }
        return await alternate(bench, servers, c, slot_seconds(bench))


async def _clients(bench: Bench) -> list[dict[str, Any]]:
    """Scenario 3, in a thread of its own (each candidate runs its own event loop)."""
    calls = max(300, int(bench.plan.seconds * CLIENT_CALLS_PER_S))
    run = partial(compare_clients, bench.url, calls=calls, concurrency=CLIENT_CONCURRENCY)
    rows = await trio.to_thread.run_sync(run)
    for row in rows:
        bench.log(
            f"   {row['client']:8} {row['backend']:6} {row['cpu_us_per_call']:8.1f} µs/call "
            f"({row['vs_coredis']}x coredis)"
        )
    return rows


async def _run(options: PartsOptions, log: Log, where: BenchRedis) -> dict[str, Any]:
    plan = plan_for(BenchOptions(quick=options.quick, seconds_per_point=options.seconds_per_point))
    async with redis_client(where.url) as client:
        pid = await redis_server_pid(client)
        bench = Bench(client, where.url, plan, log, pid, options.seed, own_redis=where.own)
        info = await client.info("server")
        try:
            log("1. ours, ours on coredis and the HTTP server alone, alternating")
            block = await _parts(bench)
            log("2. metrics on ÷ off: one node process switching between the two")
            switch = await metrics_switch(bench, settings_for(None, True, None))
            log("3. the Redis client alone: CPU per EVALSHA")
            clients = await _clients(bench)
        finally:
            with trio.CancelScope(shield=True):
                await bench.clear()
    budget = parts_summary(block, switch, clients)
    return {
        "command": options.command(),
        "mode": "quick" if options.quick else "full",
        "machine": machine(info),
        "settings": {
            "seconds_per_point": plan.seconds,
            "concurrency": PEER_CONCURRENCY,
            "rounds": PEER_ROUNDS,
            "seed": options.seed,
            "redis_url": options.redis_url,
        },
        "scenarios": {"parts": block, "metrics_switch": switch, "clients": clients},
        "budget": budget,
        "targets": targets(budget),
    }


def run_bench_parts(options: PartsOptions, log: Log) -> dict[str, Any]:
    """Run the three scenarios; write ``parts.json`` and ``parts.md`` into ``out_dir``."""
    started = time.perf_counter()
    with bench_store(options.redis_url, log) as where:  # refused before anything is said
        log(f"bench-parts ({'quick' if options.quick else 'full'})")
        result = run_stoppable(partial(_run, options, log, where))
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    write_report(result, render_parts_markdown(result), options.out_dir / "parts", log)
    return result
