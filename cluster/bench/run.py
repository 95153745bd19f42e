"""``notes-cluster bench``: delete flows per second, side by side, in one run.

Layer: cluster (the bench). Starts clusters (in-process and as HTTP node processes), the SDK
peer (``peer_sdk``), seeds the store directly (``seeding``) and drives every server with the
same loop (``flows``); those modules sit beside this one in ``cluster.bench``.
Scenarios:

1. flows   completed two-round ``notes_delete`` flows/s and latency, in-process (embedded store
           and real Redis) and over HTTP (node processes, real Redis), per cluster size and
           concurrency;
2. ceiling the store alone: ``read_notes`` + ``confirm`` per flow through ``NoteStore``, no MCP,
           and ``redis-benchmark`` EVALSHA; the in-process cluster as a fraction of it;
3. peer    the same flow on the official MCP Python SDK under uvicorn, in memory and on the same
           Redis, alternating with ours (1 node) in short slots at concurrency 8: flows/s ratio
           and server CPU per flow;
4. sizes   flows/s and p50 with 1k .. 1M other notes stored;
5. steady  the race workload (``simulate``, 3 in-process nodes on the same Redis, c64): flows/s
           in the last tenth of the run against the first tenth.

``bench.md`` opens with the budget per flow (``budget``): scenario 3's sides as columns, CPU of
the server process, Redis and the load client. What a node's CPU is made of (the HTTP server
alone, the Redis client alone, metrics on ÷ off) is measured by the lab's ``bench-parts``
(``cluster.lab.parts``), not here.

Only ratios measured in this one run mean anything: the machine is shared and noisy. The bench
runs on a ``redis-server`` of its own (``database``), emptied before, between and after points;
given ``--redis``, on a database it refuses unless it holds only the bench's keys, and deletes only
those (prefix ``ncbench``).
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

from cluster.bench.budget import budget
from cluster.bench.context import (
    MAX_RATE,
    Bench,
    BenchOptions,
    BenchPlan,
    Log,
    bench_store,
    command_line,
    machine,
    plan_for,
    write_report,
)
from cluster.bench.database import BENCH_PREFIX, BenchRedis
from cluster.bench.flows import SeededNote
from cluster.bench.flows import transport_flow as mcp_flow
from cluster.bench.http_scenarios import (
    PEER_CONCURRENCY,
    http_points,
    peer_comparison,
    peer_summary,
)
from cluster.bench.procs import redis_server_pid
from cluster.bench.report import render_markdown
from cluster.bench.seeding import (
    dbsize,
    raw_flow,
    redis_benchmark_evalsha,
    seed_filler,
)
from cluster.local import InProcessTransport, open_local_cluster
from cluster.stopping import run_stoppable
from cluster.targets.simulate import SimulateOptions, simulate
from loadgen.runner import RunSettings
from loadgen.workload import tenants_for
from nodes.config import NodeConfig
from nodes.scope import Scope
from nodes.sealing import KeyRing
from nodes.serving.demo import DEMO_GRANTS, DEMO_SERVER_NAME, DEMO_WORKSPACES
from nodes.serving.load_fixture import with_load_scope
from nodes.serving.settings import ClusterSettings, settings_for
from store.client_factory import redis_client
from store.notes import NoteStore

SIZE_NODES = 2
"""Cluster size of the stored-notes scenario (in-process, real Redis)."""
STEADY_NODES = 3
STEADY_CONCURRENCY = 64
STEADY_MAX_S = 900.0
"""The steady-state run's time bound: generous, so its flow count ends it, not time."""
EMBEDDED_MAX_RATE = 1_000
"""Flows/s a point of the embedded store is seeded for (``MAX_RATE`` for Redis): it is slower
to seed and to serve."""

TARGET_CEILING_FRACTION = 0.35
TARGET_PEER_THROUGHPUT = 2.0
TARGET_PEER_CPU = 1 / 3
TARGET_STEADY_RATIO = 0.8


def _node_config() -> NodeConfig:
    return NodeConfig(
        server_name=DEMO_SERVER_NAME,
        scope=with_load_scope(Scope.build(DEMO_WORKSPACES, DEMO_GRANTS)),
        key_ring=KeyRing.generate(),
    )


async def _inprocess(bench: Bench, embedded: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    store = "embedded" if embedded else "redis"
    for n in bench.plan.nodes:
        async with open_local_cluster(
            _node_config(),
            n,
            redis_url=None if embedded else bench.url,
            prefix=BENCH_PREFIX,
            seed=False,
        ) as cluster:
            transport = InProcessTransport(cluster)
            client = redis_client(cluster.redis_url)
            async with client:
                for c in bench.plan.concurrencies:
                    rate = EMBEDDED_MAX_RATE if embedded else MAX_RATE
                    targets = await bench.targets(client, c, rate)
                    label = f"in-process {store} {n} node(s) c{c}"
                    point = {"transport": "inprocess", "store": store, "nodes": n}
                    point |= {"concurrency": c, "label": label}
                    point |= await bench.measure([mcp_flow(transport)], n, targets, c)
                    out.append(bench.record(point))
    return out


async def _ceiling(bench: Bench) -> list[dict[str, Any]]:
    store = NoteStore(bench.client, prefix=BENCH_PREFIX)
    out: list[dict[str, Any]] = []
    for c in bench.plan.concurrencies:
        targets = await bench.targets(bench.client, c)

        async def flow(target: SeededNote, first: int, second: int) -> str | None:
            return await raw_flow(store, target)

        point: dict[str, Any] = {"label": f"raw scripts c{c}", "concurrency": c}
        point |= await bench.measure([flow], 1, targets, c)
        out.append(bench.record(point))
    return out


async def _redis_benchmark(bench: Bench) -> dict[str, Any] | None:
    c = bench.plan.concurrencies[0]
    targets = await bench.targets(bench.client, 1)
    n = max(1_000, int(bench.plan.seconds * 20_000))
    return await redis_benchmark_evalsha(bench.client, bench.url, targets[0], BENCH_PREFIX, c, n)


async def _sizes(bench: Bench) -> list[dict[str, Any]]:
    n = min(SIZE_NODES, max(bench.plan.nodes))
    c = bench.plan.concurrencies[0]
    out: list[dict[str, Any]] = []
    for size in bench.plan.sizes:
        await bench.clear()
        bench.log(f"  seeding {size} stored notes")
        await seed_filler(bench.client, BENCH_PREFIX, size)
        targets = await bench.seed_point(bench.client, c)
        keys = await dbsize(bench.client)
        memory = await bench.client.info("memory")
        async with open_local_cluster(
            _node_config(), n, redis_url=bench.url, prefix=BENCH_PREFIX, seed=False
        ) as cluster:
            transport = InProcessTransport(cluster)
            point: dict[str, Any] = {"label": f"{size} stored notes", "stored_notes": size}
            point |= {"nodes": n, "concurrency": c, "keys": keys}
            point["redis_used_memory_mb"] = round(int(str(memory["used_memory"])) / 2**20, 1)
            point |= await bench.measure([mcp_flow(transport)], n, targets, c)
        out.append(bench.record(point))
    return out


async def _steady(bench: Bench) -> dict[str, Any]:
    """The race workload as ``notes-cluster simulate`` runs it, on the bench's Redis: flows/s in
    the last tenth of the run against the first. Its run folder (the history, ~4 KB a flow) is
    a temporary one, deleted afterwards."""
    flows = bench.plan.steady_flows
    await bench.clear()  # no stored notes left from the sizes scenario
    with tempfile.TemporaryDirectory(prefix="notes-cluster-steady-") as run_dir:
        options = SimulateOptions(
            nodes=STEADY_NODES,
            redis_url=bench.url,
            prefix=f"{BENCH_PREFIX}steady",
            run_dir=Path(run_dir),
            settings=RunSettings(
                flows=flows,
                duration_s=STEADY_MAX_S,
                concurrency=STEADY_CONCURRENCY,
                seed=bench.seed,
                tenants=tenants_for(flows),
            ),
            workers=1,
            keep_history=False,
        )
        sim = await simulate(options)
    tally = sim.stats.tally
    rates = tally.tenth_rates()
    first, last = rates["first_tenth"], rates["last_tenth"]
    out: dict[str, Any] = {
        "flows": flows,
        "completed": tally.completed,
        "verdict": sim.result.status,
        "first_tenth_flows_per_s": round(first, 1),
        "last_tenth_flows_per_s": round(last, 1),
        "last_over_first": _ratio(last, first),
        "elapsed_s": round(sim.stats.elapsed_s, 1),
        "seed": bench.seed,
        "concurrency": STEADY_CONCURRENCY,
    }
    bench.log(
        f"  {flows} flows, {sim.result.status.upper()}: {first:.0f} flows/s in the first tenth, "
        f"{last:.0f} in the last (× {out['last_over_first']})"
    )
    return out


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b > 0 else None


def _ceiling_fractions(
    flows: list[dict[str, Any]], ceiling: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    out = []
    for row in ceiling:
        c = row["concurrency"]
        ours = [
            p
            for p in flows
            if p["transport"] == "inprocess" and p["store"] == "redis" and p["concurrency"] == c
        ]
        if not ours:
            continue
        best = max(ours, key=lambda p: p["flows_per_s"])
        out.append(
            {
                "concurrency": c,
                "ceiling_flows_per_s": row["flows_per_s"],
                "cluster_flows_per_s": best["flows_per_s"],
                "cluster_nodes": best["nodes"],
                "fraction": _ratio(best["flows_per_s"], row["flows_per_s"]),
            }
        )
    return out


async def _run(
    options: BenchOptions, plan: BenchPlan, log: Log, where: BenchRedis
) -> dict[str, Any]:
    settings = settings_for(None, True, None)
    async with redis_client(where.url) as client:
        pid = await redis_server_pid(client)
        bench = Bench(client, where.url, plan, log, pid, options.seed, own_redis=where.own)
        info = await client.info("server")
        try:
            log("1. delete flows: in-process, embedded store")
            flows = await _inprocess(bench, embedded=True)
            log("1. delete flows: in-process, real Redis")
            flows += await _inprocess(bench, embedded=False)
            log("2. store ceiling: raw read_notes + confirm scripts")
            ceiling = await _ceiling(bench)
            evalsha = await _redis_benchmark(bench)
            log("1. delete flows: HTTP node processes, real Redis")
            flows += await http_points(bench, settings)
            peer = await _peer_scenario(bench, settings)
            sizes = None
            if plan.sizes:
                log("4. cost per flow by stored notes")
                sizes = await _sizes(bench)
            steady = None
            if plan.steady_flows:
                log("5. steady state: the race workload, first tenth against last tenth")
                steady = await _steady(bench)
        finally:
            with trio.CancelScope(shield=True):
                await bench.clear()
    report = _report(options, plan, info, flows, ceiling, evalsha, peer, sizes, steady)
    report["scenarios"]["budget"] = budget(peer)
    return report


async def _peer_scenario(bench: Bench, settings: ClusterSettings) -> dict[str, Any] | None:
    """Scenario 3, when the plan has it and the SDK is installed."""
    if not bench.plan.peer:
        return None
    if importlib.util.find_spec("mcp") is None:
        bench.log("3. the SDK peer: skipped, the mcp package is not installed")
        return None
    bench.log("3. the SDK peer and ours, alternating")
    return peer_summary(await peer_comparison(bench, settings))


def _report(
    options: BenchOptions,
    plan: BenchPlan,
    info: dict[str, Any],
    flows: list[dict[str, Any]],
    ceiling: list[dict[str, Any]],
    evalsha: dict[str, Any] | None,
    peer: dict[str, Any] | None,
    sizes: list[dict[str, Any]] | None,
    steady: dict[str, Any] | None,
) -> dict[str, Any]:
    fractions = _ceiling_fractions(flows, ceiling)
    return {
        "command": command_line(options),
        "mode": "quick" if options.quick else "full",
        "machine": machine(info),
        "settings": {
            "seconds_per_point": plan.seconds,
            "nodes": list(plan.nodes),
            "concurrencies": list(plan.concurrencies),
            "sizes": list(plan.sizes),
            "peer": plan.peer,
            "peer_concurrency": PEER_CONCURRENCY,
            "steady_flows": plan.steady_flows,
            "http_client": "wrk (Lua flow script), one connection per thread, pinned off the "
            "servers' core where the machine has two or more",
            "seed": options.seed,
            "redis_url": options.redis_url,
            "flows_per_point_cap": plan.cap(),
            "flows_per_point_cap_embedded": plan.cap(EMBEDDED_MAX_RATE),
        },
        "scenarios": {
            "flows": {"points": flows},
            "ceiling": {
                "points": ceiling,
                "redis_benchmark": evalsha,
                "fractions": fractions,
                "target": TARGET_CEILING_FRACTION,
            },
            "peer": peer,
            "sizes": _size_summary(sizes),
            "steady": steady,
        },
        "targets": _targets(fractions, peer, steady),
    }


def _size_summary(sizes: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    if not sizes:
        return None
    first, last = sizes[0], sizes[-1]
    return {
        "points": sizes,
        "flows_ratio_largest_to_smallest": _ratio(last["flows_per_s"], first["flows_per_s"]),
        "p50_ratio_largest_to_smallest": _ratio(last["p50_ms"], first["p50_ms"]),
    }


def _targets(
    fractions: list[dict[str, Any]], peer: dict[str, Any] | None, steady: dict[str, Any] | None
) -> dict[str, bool | None]:
    """Each target's verdict (None: its scenario did not run)."""
    return {
        "ceiling_fraction_at_least_0.35": all(
            (f["fraction"] or 0) >= TARGET_CEILING_FRACTION for f in fractions
        )
        if fractions
        else None,
        "peer_throughput_at_least_2": None
        if peer is None
        else (peer["throughput_ratio_vs_peer_memory"] or 0) >= TARGET_PEER_THROUGHPUT,
        "peer_cpu_at_most_one_third": None
        if peer is None
        else (peer["cpu_ratio_vs_peer_memory"] or 99) <= TARGET_PEER_CPU,
        "steady_last_tenth_at_least_0.8_of_first": None
        if steady is None
        else (steady["last_over_first"] or 0) >= TARGET_STEADY_RATIO,
    }


def run_bench(options: BenchOptions, log: Log) -> dict[str, Any]:
    """Run every scenario in one go; write ``bench.json`` and ``bench.md`` into ``out_dir``."""
    plan = plan_for(options)
    started = time.perf_counter()
    with bench_store(options.redis_url, log) as where:  # refused before anything is said
        log(f"bench ({'quick' if options.quick else 'full'}): {plan.seconds:g} s per point")
        result = run_stoppable(partial(_run, options, plan, log, where))
    result["scenarios"]["deterministic"] = _deterministic(options, plan, log)
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    write_report(result, render_markdown(result), options.out_dir / "bench", log)
    return result


def _deterministic(options: BenchOptions, plan: BenchPlan, log: Log) -> dict[str, Any]:
    """Deterministic simulation against today's, side by side (``cluster.deterministic.bench``);
    on the embedded store, whatever store the rest of the bench ran on."""
    from cluster.deterministic.bench import (
        FULL_FLOWS,
        QUICK_FLOWS,
        SWARM_FLOWS,
        SWARM_SEEDS,
        side_by_side,
        swarm_scaling,
    )

    log("deterministic simulation against simulate (embedded store, one process):")
    flows = min(plan.steady_flows, QUICK_FLOWS if options.quick else FULL_FLOWS)
    out = side_by_side(flows, options.seed, log)
    out["swarm"] = swarm_scaling(SWARM_SEEDS, min(SWARM_FLOWS, flows), options.seed, log)
    return out
