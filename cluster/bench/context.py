"""What every bench scenario shares, and the lab's bench commands with it: the options and the
plan, one run's state (``Bench``: its Redis, the seeded points, the measured loop with its CPU),
the Redis held under this machine's lock, the machine, and the report files.

Layer: cluster (the bench). Below the scenarios (``http_scenarios``, ``run``, and the lab's
``cluster.lab.servers`` and ``cluster.lab.parts``), which take a ``Bench``; nothing here knows a
scenario.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import coredis
from hdrh.histogram import HdrHistogram

from cluster.bench.database import BENCH_PREFIX, BenchRedis, bench_redis, clear
from cluster.bench.flows import FlowFn, PointStats, SeededNote, run_flows
from cluster.bench.procs import Cpu
from cluster.bench.seeding import seed_targets
from cluster.machine import machine as describe_machine
from nodes.serving.load_fixture import load_tokens

Log = Callable[[str], None]

QUICK_SECONDS = 3.0
FULL_SECONDS = 8.0
"""Measured seconds per point. Quick mode must finish in under three minutes on two cores."""
QUICK_SIZES = (1_000, 100_000)
FULL_SIZES = (1_000, 100_000, 1_000_000)
CONCURRENCIES = (8, 32)
QUICK_STEADY_FLOWS = 3_000
FULL_STEADY_FLOWS = 20_000

MAX_RATE = 3_000
"""Flows/s a point is seeded for: well above what two cores reach, so time ends a point, not
the supply of notes (a point that runs out early is still a valid measurement)."""
WARMUP_FLOWS_PER_WORKER = 2
WARMUP_MAX_S = 10.0

LOCK_WAIT_S = 900.0
"""How long a bench waits for another one on the same database (a full run takes ~15 min)."""


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
class BenchPlan:
    """The points one run measures."""

    seconds: float
    nodes: tuple[int, ...]
    concurrencies: tuple[int, ...]
    sizes: tuple[int, ...]
    peer: bool
    steady_flows: int

    def cap(self, rate: int = MAX_RATE, seconds: float | None = None) -> int:
        """Most measured flows one point may run (the notes seeded for it), for a point of
        ``seconds`` (the plan's by default)."""
        return max(200, int((self.seconds if seconds is None else seconds) * rate))


def plan_for(options: BenchOptions) -> BenchPlan:
    """The mode's defaults, with any internal knob applied."""
    return BenchPlan(
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


def _tokens() -> dict[str, str]:
    return {principal: token for token, principal in load_tokens().items()}


@dataclass
class Bench:
    """One run's shared state: the real Redis, its pid, the plan, the log."""

    client: coredis.Redis[str]
    url: str
    plan: BenchPlan
    log: Log
    redis_pid: int | None
    seed: int
    tag: int = 0
    own_redis: bool = False
    """True when the bench started this Redis itself: it may flush it. Otherwise it deletes only
    keys under ``BENCH_PREFIX``."""

    async def clear(self, client: coredis.Redis[str] | None = None) -> None:
        """Remove what the bench stored (see ``database.clear``)."""
        await clear(client or self.client, BenchRedis(self.url, self.own_redis))

    async def targets(
        self,
        client: coredis.Redis[str],
        concurrency: int,
        rate: int = MAX_RATE,
        *,
        seconds: float | None = None,
    ) -> list[SeededNote]:
        """Clear, then seed the notes of one point (warm-up plus measured)."""
        await self.clear(client)
        return await self.seed_point(client, concurrency, rate, seconds=seconds)

    async def seed_point(
        self,
        client: coredis.Redis[str],
        concurrency: int,
        rate: int = MAX_RATE,
        *,
        seconds: float | None = None,
    ) -> list[SeededNote]:
        """Seed the notes of one point (``seconds`` long: the plan's by default), with titles no
        earlier point used."""
        self.tag += 1
        count = self.warmup(concurrency) + self.plan.cap(rate, seconds)
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
        targets: list[SeededNote],
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
        rest: Iterator[SeededNote] = iter(targets[warm:])
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


def machine(info: dict[str, Any]) -> dict[str, Any]:
    """What a benchmark report says of the machine (``cluster.machine``), with the Redis
    version from ``info`` (Redis' ``INFO server``)."""
    return describe_machine(str(info.get("redis_version", "")))


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


def write_report(result: dict[str, Any], markdown: str, stem: Path, log: Log) -> None:
    """Write ``result`` as ``STEM.json`` and ``markdown`` as ``STEM.md`` (making the folder)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown, encoding="utf-8")
    log(f"wrote {json_path} and {md_path}")
