"""``notes-cluster bench``: delete flows per second, side by side, in one run.

Layer: cluster (an experiment). Starts clusters (in-process and as HTTP node processes), the SDK
peer (``peer_sdk``), seeds the store directly (``bench_store``) and drives every server with the
same loop (``bench_flows``); those modules sit beside this one in ``cluster.experiments``.
Scenarios:

1. flows   completed two-round ``notes_delete`` flows/s and latency, in-process (embedded store
           and real Redis) and over HTTP (node processes, real Redis), per cluster size and
           concurrency;
2. ceiling the store alone: ``read_notes`` + ``confirm`` per flow through ``NoteStore``, no MCP,
           and ``redis-benchmark`` EVALSHA; the in-process cluster as a fraction of it;
3. peer    the same flow on the official MCP Python SDK under uvicorn, alternating with ours
           (1 node) in short slots at concurrency 8: flows/s ratio and server CPU per flow;
4. sizes   flows/s and p50 with 1k .. 1M other notes stored;
5. steady  the race workload (``simulate``, 3 in-process nodes on the same Redis, c64): flows/s
           in the last tenth of the run against the first tenth;
6. clients the Redis client alone: CPU µs per EVALSHA of coredis, the store's own client (and
           valkey-glide when installed), on uvloop and on trio (``bench_client``).

Only ratios measured in this one run mean anything: the machine is shared and noisy. The bench
runs on a ``redis-server`` of its own (``bench_redis``), emptied before, between and after points;
given ``--redis``, on a database it refuses unless it holds only the bench's keys, and deletes only
those (prefix ``ncbench``).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import coredis
import trio
from hdrh.histogram import HdrHistogram

from cluster.config import ClusterSettings
from cluster.demo import DEMO_GRANTS, DEMO_SERVER_NAME, DEMO_WORKSPACES
from cluster.experiments.bench_client import compare_clients
from cluster.experiments.bench_flows import FlowFn, PointStats, Target, run_flows
from cluster.experiments.bench_flows import transport_flow as mcp_flow
from cluster.experiments.bench_http import (
    PEER_CONCURRENCY,
    http_points,
    peer_comparison,
    peer_summary,
)
from cluster.experiments.bench_procs import Cpu, redis_server_pid
from cluster.experiments.bench_redis import BENCH_PREFIX, BenchRedis, bench_redis, clear
from cluster.experiments.bench_report import render_markdown
from cluster.experiments.bench_store import (
    dbsize,
    raw_flow,
    redis_benchmark_evalsha,
    seed_filler,
    seed_targets,
)
from cluster.experiments.simulate import SimulateOptions, simulate
from cluster.load_fixture import load_tokens, with_load_scope
from cluster.local import InProcessTransport, open_local_cluster
from cluster.serve import settings_for
from loadgen.runner import RunSettings
from loadgen.workload import tenants_for
from nodes.config import NodeConfig
from nodes.scope import Scope
from nodes.sealing import KeyRing
from store.client import redis_client
from store.notes import NoteStore

Log = Callable[[str], None]

QUICK_SECONDS = 3.0
FULL_SECONDS = 8.0
"""Measured seconds per point. Quick mode must finish in under three minutes on two cores."""
QUICK_SIZES = (1_000, 100_000)
FULL_SIZES = (1_000, 100_000, 1_000_000)
CONCURRENCIES = (8, 32)
SIZE_NODES = 2
"""Cluster size of the stored-notes scenario (in-process, real Redis)."""
QUICK_STEADY_FLOWS = 3_000
FULL_STEADY_FLOWS = 20_000
STEADY_NODES = 3
STEADY_CONCURRENCY = 64
STEADY_MAX_S = 900.0
"""The steady-state run's time bound: generous, so its flow count ends it, not time."""

MAX_RATE = 3_000
"""Flows/s a point is seeded for: well above what two cores reach, so time ends a point, not
the supply of notes (a point that runs out early is still a valid measurement)."""
EMBEDDED_MAX_RATE = 1_000
"""The same for the embedded store, which is slower to seed and to serve."""
WARMUP_FLOWS_PER_WORKER = 2
WARMUP_MAX_S = 10.0

LOCK_WAIT_S = 900.0
"""How long a bench waits for another one on the same database (a full run takes ~15 min)."""

TARGET_CEILING_FRACTION = 0.35
TARGET_PEER_THROUGHPUT = 2.0
TARGET_PEER_CPU = 1 / 3
TARGET_HTTP_SERVER_SHARE = 0.2
TARGET_STEADY_RATIO = 0.8
TARGET_METRICS_COST = 1.03
"""A node with its metrics on costs at most 3% more CPU per flow than without (issue 21)."""


@dataclass(frozen=True)
class BenchOptions:
    """What ``notes-cluster bench`` takes, plus internal knobs for tests (short points, fewer
    sizes, no peer)."""

    quick: bool = False
    redis_url: str | None = None
    """A user's Redis database (holding no keys but the bench's); None: a redis-server of the
    bench's own."""
    out_dir: Path = Path("runs/bench")
    seconds_per_point: float | None = None
    seed: int = 1
    nodes: tuple[int, ...] | None = None
    concurrencies: tuple[int, ...] | None = None
    sizes: tuple[int, ...] | None = None
    peer: bool = True
    steady_flows: int | None = None
    """Flows of the steady-state scenario (None: the mode's; 0: skip it)."""


@dataclass(frozen=True)
class Plan:
    """The points one run measures."""

    seconds: float
    nodes: tuple[int, ...]
    concurrencies: tuple[int, ...]
    sizes: tuple[int, ...]
    peer: bool
    steady_flows: int

    def cap(self, rate: int = MAX_RATE) -> int:
        """Most measured flows one point may run (the notes seeded for it)."""
        return max(200, int(self.seconds * rate))


def plan_for(options: BenchOptions) -> Plan:
    """The mode's defaults, with any internal knob applied."""
    return Plan(
        seconds=options.seconds_per_point or (QUICK_SECONDS if options.quick else FULL_SECONDS),
        nodes=options.nodes or ((1, 2) if options.quick else (1, 2, 3)),
        concurrencies=options.concurrencies or CONCURRENCIES,
        sizes=options.sizes
        if options.sizes is not None
        else (QUICK_SIZES if options.quick else FULL_SIZES),
        peer=options.peer,
        steady_flows=options.steady_flows
        if options.steady_flows is not None
        else (QUICK_STEADY_FLOWS if options.quick else FULL_STEADY_FLOWS),
    )


def command_line(options: BenchOptions) -> str:
    """The CLI command equivalent to ``options`` (internal knobs noted after it)."""
    cmd = "notes-cluster bench" + (" --quick" if options.quick else "")
    cmd += f" --redis {options.redis_url}" if options.redis_url else ""
    cmd += f" --out {options.out_dir}"
    knobs = {
        k: v
        for k, v in asdict(options).items()
        if k
        in ("seconds_per_point", "nodes", "concurrencies", "sizes", "seed", "peer", "steady_flows")
        and v != getattr(BenchOptions(), k)
    }
    if knobs:
        cmd += "  # internal: " + ", ".join(f"{k}={v}" for k, v in knobs.items())
    return cmd


def _node_config() -> NodeConfig:
    return NodeConfig(
        server_name=DEMO_SERVER_NAME,
        scope=with_load_scope(Scope.build(DEMO_WORKSPACES, DEMO_GRANTS)),
        key_ring=KeyRing.generate(),
    )


def _tokens() -> dict[str, str]:
    return {principal: token for token, principal in load_tokens().items()}


@dataclass
class Bench:
    """One run's shared state: the real Redis, its pid, the plan, the log."""

    client: coredis.Redis[str]
    url: str
    plan: Plan
    log: Log
    redis_pid: int | None
    seed: int
    tag: int = 0
    own_redis: bool = False
    """True when the bench started this Redis itself: it may flush it. Otherwise it deletes only
    keys under ``BENCH_PREFIX``."""

    async def clear(self, client: coredis.Redis[str] | None = None) -> None:
        """Remove what the bench stored (see ``bench_redis.clear``)."""
        await clear(client or self.client, BenchRedis(self.url, self.own_redis))

    async def targets(
        self, client: coredis.Redis[str], concurrency: int, rate: int = MAX_RATE
    ) -> list[Target]:
        """Clear, then seed the notes of one point (warm-up plus measured)."""
        await self.clear(client)
        return await self.seed_point(client, concurrency, rate)

    async def seed_point(
        self, client: coredis.Redis[str], concurrency: int, rate: int = MAX_RATE
    ) -> list[Target]:
        """Seed the notes of one point, with titles no earlier point used."""
        self.tag += 1
        count = self.warmup(concurrency) + self.plan.cap(rate)
        return await seed_targets(client, BENCH_PREFIX, count, f"p{self.tag}")

    @property
    def tokens(self) -> dict[str, str]:
        """Each load principal's bearer token."""
        return _tokens()

    @staticmethod
    def warmup(concurrency: int) -> int:
        """Warm-up flows before a point (connections, caches, scripts)."""
        return WARMUP_FLOWS_PER_WORKER * concurrency

    async def measure(
        self,
        flows: Sequence[FlowFn],
        node_count: int,
        targets: list[Target],
        concurrency: int,
        server_pids: Sequence[int] = (),
        *,
        seconds: float | None = None,
        histogram: HdrHistogram | None = None,
    ) -> dict[str, Any]:
        """Warm up, then one measured point with the CPU it cost (its latencies are also added
        to ``histogram`` when one is given)."""
        warm = self.warmup(concurrency)
        await run_flows(
            flows,
            node_count,
            iter(targets[:warm]),
            concurrency=concurrency,
            duration_s=WARMUP_MAX_S,
            max_flows=warm,
            seed=self.seed,
        )
        rest: Iterator[Target] = iter(targets[warm:])
        before = Cpu.now(server_pids, self.redis_pid)
        stats: PointStats = await run_flows(
            flows,
            node_count,
            rest,
            concurrency=concurrency,
            duration_s=self.plan.seconds if seconds is None else seconds,
            max_flows=len(targets) - warm,
            seed=self.seed,
        )
        after = Cpu.now(server_pids, self.redis_pid)
        if histogram is not None:
            histogram.add(stats.histogram)
        out = stats.summary()
        out["cpu_ms_per_flow"] = after.per_flow_ms(before, stats.completed)
        return out

    def record(self, point: dict[str, Any]) -> dict[str, Any]:
        """Log one point."""
        self.log(
            f"  {point.get('label', '')}: {point['flows_per_s']:.0f} flows/s, "
            f"p50 {point['p50_ms']:.1f} ms, p99 {point['p99_ms']:.1f} ms"
            + (f", {point['failed']} failed ({point['first_error']})" if point["failed"] else "")
        )
        return point


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

        async def flow(target: Target, first: int, second: int) -> str | None:
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


async def _run(options: BenchOptions, plan: Plan, log: Log, where: BenchRedis) -> dict[str, Any]:
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
            log("6. the Redis client alone: CPU per EVALSHA")
            clients = await _clients(bench)
        finally:
            with trio.CancelScope(shield=True):
                await bench.clear()
    report = _report(options, plan, info, flows, ceiling, evalsha, peer, sizes, steady)
    report["scenarios"]["clients"] = clients
    return report


CLIENT_CALLS_PER_S = 1_000
"""Calls per client, per point-second of the plan (quick: 3,000; full: 8,000; at least 300)."""
CLIENT_CONCURRENCY = 16


async def _clients(bench: Bench) -> list[dict[str, Any]]:
    """Scenario 6, in a thread of its own (each candidate runs its own event loop)."""
    calls = max(300, int(bench.plan.seconds * CLIENT_CALLS_PER_S))
    run = partial(compare_clients, bench.url, calls=calls, concurrency=CLIENT_CONCURRENCY)
    rows = await trio.to_thread.run_sync(run)
    for row in rows:
        bench.log(
            f"   {row['client']:8} {row['backend']:6} {row['cpu_us_per_call']:8.1f} µs/call "
            f"({row['vs_coredis']}x coredis)"
        )
    return rows


async def _peer_scenario(bench: Bench, settings: ClusterSettings) -> dict[str, Any] | None:
    """Scenario 3, when the plan has it and the SDK is installed."""
    if not bench.plan.peer:
        return None
    if importlib.util.find_spec("mcp") is None:
        bench.log("3. the SDK peer: skipped, the mcp package is not installed")
        return None
    bench.log("3. the SDK peer and ours, alternating")
    return peer_summary(await peer_comparison(bench, settings))


def machine(info: dict[str, Any]) -> dict[str, Any]:
    """What a benchmark report says of the machine: CPUs, Python, platform, and the Redis
    version from ``info`` (Redis' ``INFO server``)."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "redis_version": str(info.get("redis_version", "")),
    }


def _report(
    options: BenchOptions,
    plan: Plan,
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
        "http_server_at_most_0.2_of_node": None
        if peer is None
        else (peer["http_server_share_of_node"] or 99) <= TARGET_HTTP_SERVER_SHARE,
        "metrics_on_at_most_1.03_of_off": None
        if peer is None
        else (peer["metrics_on_over_off"] or 99) <= TARGET_METRICS_COST,
        "steady_last_tenth_at_least_0.8_of_first": None
        if steady is None
        else (steady["last_over_first"] or 0) >= TARGET_STEADY_RATIO,
    }


@contextmanager
def exclusive(redis_url: str, log: Log) -> Iterator[None]:
    """Hold this machine's lock on ``redis_url``'s database: two benches on one database would
    delete each other's notes. A second bench waits (bounded) for the first."""
    digest = hashlib.sha256(redis_url.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"notes-cluster-bench-{digest}.lock"
    with path.open("a") as handle:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another bench holds {redis_url}") from None
                log(f"waiting for another bench on {redis_url}")
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def bench_store(redis_url: str | None, log: Log) -> Iterator[BenchRedis]:
    """A Redis of the bench's own (``redis_url`` None), else the user's database ``redis_url``
    held under this machine's lock and refused (``ForeignKeys``) when it holds keys the bench
    did not write."""
    if redis_url is None:
        with bench_redis(None) as where:
            log(f"on a redis-server of the bench's own: {where.url}")
            yield where
        return
    with exclusive(redis_url, log), bench_redis(redis_url) as where:
        yield where


def run_bench(options: BenchOptions, log: Log) -> dict[str, Any]:
    """Run every scenario in one go; write ``bench.json`` and ``bench.md`` into ``out_dir``."""
    plan = plan_for(options)
    started = time.perf_counter()
    with bench_store(options.redis_url, log) as where:  # refused before anything is said
        log(f"bench ({'quick' if options.quick else 'full'}): {plan.seconds:g} s per point")
        result = trio.run(partial(_run, options, plan, log, where))
    result["scenarios"]["deterministic"] = _deterministic(options, plan, log)  # issue 19
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    write_report(result, render_markdown(result), options.out_dir / "bench", log)
    return result


def _deterministic(options: BenchOptions, plan: Plan, log: Log) -> dict[str, Any]:
    """Deterministic simulation against today's, side by side (``cluster.deterministic.bench``);
    on the embedded store, whatever store the rest of the bench ran on."""
    from cluster.deterministic.bench import FULL_FLOWS, QUICK_FLOWS, side_by_side

    log("deterministic simulation against simulate (embedded store, one process):")
    flows = min(plan.steady_flows, QUICK_FLOWS if options.quick else FULL_FLOWS)
    return side_by_side(flows, options.seed, log)


def write_report(result: dict[str, Any], markdown: str, stem: Path, log: Log) -> None:
    """Write ``result`` as ``STEM.json`` and ``markdown`` as ``STEM.md`` (making the folder)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown, encoding="utf-8")
    log(f"wrote {json_path} and {md_path}")
