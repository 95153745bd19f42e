"""The benchmark's HTTP scenarios: node processes, and ours beside the SDK peer, driven by wrk.

Layer: cluster (the bench). Every HTTP point runs the same light client (``wrk``:
wrk and a Lua script, pinned off the servers' core) and reads CPU per completed flow for the
servers, Redis and the client separately. The peer comparison alternates three servers in short
slots (``alternate``), so a burst of background load on the shared machine hits them alike:

- ours: one node process (uvicorn, httptools, uvloop) over the real Redis, on the store's own
  Redis client (``NOTES_CLUSTER_REDIS_CLIENT=resp``);
- the SDK peer with its notes in memory, as it is deployed on one node;
- the SDK peer with its notes in the same Redis, through the same scripts.

What a node's CPU is made of (the HTTP server alone, the Redis client, metrics on ÷ off) is the
lab's (``cluster.lab.parts``, ``notes-cluster bench-parts``), which alternates its own servers
with ``alternate``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.bench.context import Bench
from cluster.bench.database import BENCH_PREFIX, scripts_run
from cluster.bench.flows import SeededNote
from cluster.bench.procs import (
    Cpu,
    ServerProcs,
    open_http_cluster,
    open_server_process,
)
from cluster.bench.seeding import memory_targets
from cluster.bench.wrk import WrkResult, cpu_split, pin, run_wrk
from nodes.serving.settings import ClusterSettings
from store.client_factory import CLIENT_ENV

PEER_CONCURRENCY = 8
PEER_ROUNDS = 4
"""The servers alternate (in turn first, then last ...) in this many rounds of slots."""
MIN_SLOT_S = 1.0
"""wrk runs whole seconds."""
SIDES = ("ours", "peer_memory", "peer_redis")
SIDE_NAMES = {
    "ours": "ours, 1 node process",
    "peer_memory": "SDK peer, notes in memory",
    "peer_redis": "SDK peer, notes in Redis",
}
RATE_CAP = 4_000
"""Flows/s a slot is supplied for: above what one process reaches on two cores."""


def _point(result: WrkResult, cpu: dict[str, float]) -> dict[str, Any]:
    elapsed = max(result.elapsed_s, 1e-9)
    return {
        "flows": result.flows,
        "failed": result.failures,
        "elapsed_s": round(result.elapsed_s, 3),
        "flows_per_s": round(result.flows / elapsed, 1),
        "p50_ms": round(result.p50_ms, 3),
        "p99_ms": round(result.p99_ms, 3),
        "max_ms": round(result.max_ms, 3),
        "latency": "per request (a flow is two)",
        "first_error": f"{result.failures} flows failed" if result.failures else None,
        "cpu_ms_per_flow": cpu,
    }


async def wrk_point(
    bench: Bench,
    procs: ServerProcs,
    targets: Sequence[SeededNote],
    concurrency: int,
    seconds: float,
) -> dict[str, Any]:
    """Warm up on the first targets, then one measured wrk run with the CPU it cost and the
    Redis scripts it ran per flow (every client of the server counts: on a ``--redis`` server
    shared with others, an upper bound)."""
    warm = bench.warmup(concurrency)
    tokens = bench.tokens
    await run_wrk(procs.urls, targets[:warm], tokens, connections=concurrency, seconds=1)
    scripts = await scripts_run(bench.client)
    before = Cpu.now(procs.pids, bench.redis_pid)
    result = await run_wrk(
        procs.urls, targets[warm:], tokens, connections=concurrency, seconds=seconds
    )
    after = Cpu.now(procs.pids, bench.redis_pid)
    scripts = await scripts_run(bench.client) - scripts
    point = _point(result, after.per_flow_ms(before, result.flows, result.client_cpu_s))
    point["redis_scripts_per_flow"] = round(scripts / max(1, result.flows), 3)
    return point


def slot_flows(bench: Bench, concurrency: int, seconds: float) -> int:
    """Flows one slot of ``seconds`` is supplied for, its warm-up included."""
    return bench.warmup(concurrency) + max(200, int(seconds * RATE_CAP))


def slot_seconds(bench: Bench) -> float:
    """One slot of an alternation: half a point (wrk runs whole seconds, one at least)."""
    return max(MIN_SLOT_S, bench.plan.seconds / 2)


SlotTargets = Callable[[int], Awaitable[list[SeededNote]]]
"""The notes a slot of so many flows deletes."""


@dataclass(frozen=True)
class SlotServer:
    """One server of an alternation: its running process(es), its label, its slots' notes."""

    label: str
    procs: ServerProcs
    targets: SlotTargets


def in_redis(bench: Bench, concurrency: int) -> SlotTargets:
    """Notes seeded in the bench's Redis, afresh for every slot."""

    async def targets(count: int) -> list[SeededNote]:
        return await bench.targets(bench.client, concurrency)

    return targets


async def alternate(
    bench: Bench, servers: Mapping[str, SlotServer], concurrency: int, slot: float
) -> dict[str, Any]:
    """The servers in slots of ``slot`` seconds, ``PEER_ROUNDS`` rounds (in turn first, then in
    reverse order, ...): every slot, and per server its slots as one (``aggregate``)."""
    cores, _ = cpu_split()
    for server in servers.values():
        pin(server.procs.pids, cores)
    order = tuple(servers)
    rounds: list[dict[str, Any]] = []
    for r in range(PEER_ROUNDS):
        row: dict[str, Any] = {}
        for side in order if r % 2 == 0 else tuple(reversed(order)):
            server = servers[side]
            targets = await server.targets(slot_flows(bench, concurrency, slot))
            point = {"label": f"round {r + 1}: {server.label} c{concurrency}"}
            point |= await wrk_point(bench, server.procs, targets, concurrency, slot)
            row[side] = bench.record(point)
        rounds.append(row)
    out: dict[str, Any] = {"rounds": rounds, "slot_s": slot, "concurrency": concurrency}
    for side in order:
        out[side] = aggregate([row[side] for row in rounds])
    return out


async def http_points(bench: Bench, settings: ClusterSettings) -> list[dict[str, Any]]:
    """Flows/s over HTTP, per node count and concurrency, node processes over the real Redis."""
    servers, _ = cpu_split()
    out: list[dict[str, Any]] = []
    for n in bench.plan.nodes:
        async with open_http_cluster(settings, n, bench.url, BENCH_PREFIX) as procs:
            pin(procs.pids, servers)
            for c in bench.plan.concurrencies:
                targets = await bench.targets(bench.client, c)
                point: dict[str, Any] = {"transport": "http", "store": "redis", "nodes": n}
                point |= {"concurrency": c, "label": f"HTTP redis {n} node process(es) c{c}"}
                point |= await wrk_point(bench, procs, targets, c, bench.plan.seconds)
                out.append(bench.record(point))
    return out


async def peer_comparison(bench: Bench, settings: ClusterSettings) -> dict[str, Any]:
    """Ours and the SDK peer (in memory, in Redis), alternating in slots."""
    c = PEER_CONCURRENCY
    slot = slot_seconds(bench)
    memory = memory_targets(PEER_ROUNDS * slot_flows(bench, c, slot) + 1, f"m{bench.seed}")

    async def from_memory(count: int) -> list[SeededNote]:
        taken = memory[:count]
        del memory[:count]
        return taken

    with tempfile.TemporaryDirectory(prefix="bench-peer-") as folder:
        notes = Path(folder) / "notes.txt"
        lines = (f"{t.tenant}|{t.workspace}|{t.title}|{t.note_id}\n" for t in memory)
        notes.write_text("".join(lines), encoding="utf-8")
        peer = ["cluster.bench.peer_sdk"]
        on_redis = ["--store", "redis", "--redis", bench.url, "--prefix", BENCH_PREFIX]
        async with AsyncExitStack() as stack:
            ours = await stack.enter_async_context(
                open_http_cluster(settings, 1, bench.url, BENCH_PREFIX, env={CLIENT_ENV: "resp"})
            )
            peer_memory = await stack.enter_async_context(
                open_server_process([*peer, "--store", "memory", "--notes", str(notes)])
            )
            peer_redis = await stack.enter_async_context(open_server_process([*peer, *on_redis]))
            servers = {
                "ours": SlotServer(SIDE_NAMES["ours"], ours, in_redis(bench, c)),
                "peer_memory": SlotServer(SIDE_NAMES["peer_memory"], peer_memory, from_memory),
                "peer_redis": SlotServer(SIDE_NAMES["peer_redis"], peer_redis, in_redis(bench, c)),
            }
            return await alternate(bench, servers, c, slot)


def aggregate(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Several slots of one server as one: rates over the summed time, CPU per summed flows,
    the flow-weighted median and the worst p99 (wrk's percentiles do not merge exactly)."""
    flows = sum(int(p["flows"]) for p in points)
    elapsed = sum(float(p["elapsed_s"]) for p in points)
    weight = max(1, flows)
    return {
        "flows": flows,
        "failed": sum(int(p["failed"]) for p in points),
        "elapsed_s": round(elapsed, 3),
        "flows_per_s": round(flows / elapsed, 1) if elapsed > 0 else 0.0,
        "p50_ms": round(sum(p["p50_ms"] * p["flows"] for p in points) / weight, 3),
        "p99_ms": max(p["p99_ms"] for p in points),
        "max_ms": max(p["max_ms"] for p in points),
        "latency": points[0]["latency"],
        "first_error": next((p["first_error"] for p in points if p["first_error"]), None),
        "cpu_ms_per_flow": {
            key: round(sum(p["cpu_ms_per_flow"][key] * p["flows"] for p in points) / weight, 3)
            for key in points[0]["cpu_ms_per_flow"]
        },
        "redis_scripts_per_flow": round(
            sum(p["redis_scripts_per_flow"] * p["flows"] for p in points) / weight, 3
        ),
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b > 0 else None


def peer_summary(block: dict[str, Any]) -> dict[str, Any]:
    """The ratios the targets are judged on, all within this one run."""
    ours, mem, red = (block[s]["cpu_ms_per_flow"] for s in SIDES)
    ours_total = ours["servers"] + ours["redis"]
    return {
        **block,
        "servers": {
            "ours": "1 node process: uvicorn (httptools, uvloop), the real Redis, own client",
            "peer_memory": "mcp 2.3.0 MCPServer, streamable_http_app(json_response=True, "
            "stateless_http=True), uvicorn (httptools, uvloop) 1 worker, notes in memory",
            "peer_redis": "the same, notes in the same Redis through the same scripts",
        },
        "throughput_ratio_vs_peer_memory": _ratio(
            block["ours"]["flows_per_s"], block["peer_memory"]["flows_per_s"]
        ),
        "throughput_ratio_vs_peer_redis": _ratio(
            block["ours"]["flows_per_s"], block["peer_redis"]["flows_per_s"]
        ),
        "cpu_ms_per_flow": {
            "ours_node": ours["servers"],
            "ours_redis": ours["redis"],
            "ours_node_plus_redis": round(ours_total, 3),
            "ours_client": ours["client"],
            "peer_memory_process": mem["servers"],
            "peer_redis_process": red["servers"],
            "peer_redis_plus_redis": round(red["servers"] + red["redis"], 3),
        },
        "cpu_ratio_vs_peer_memory": _ratio(ours_total, mem["servers"]),
        "cpu_ratio_vs_peer_redis": _ratio(ours_total, red["servers"] + red["redis"]),
    }
