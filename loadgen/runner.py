"""Running flows: closed loop (fixed concurrency) or open loop (fixed rate), bounded in count and
time, with latency measured from each flow's intended start.

Layer: loadgen. Knows flows and transports; nothing of how nodes are started. A share of the
flows (``RunSettings.legacy_share``) can be legacy 2025-11-25 clients (``loadgen.legacy_clients``)
driven over the HTTP nodes a ``LegacyHttp`` reaches, recorded in the same history.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio
from hdrh.histogram import HdrHistogram

from loadgen import tenants as names
from loadgen.check.limits import MAX_OFFERED
from loadgen.clients import DELIBERATE, Client
from loadgen.flow_steps import FlowEnv
from loadgen.history import History, Op
from loadgen.legacy_clients import LEGACY_KINDS, LegacyEnv, LegacyHttp
from loadgen.legacy_sessions import run_any_legacy_flow
from loadgen.states import SealedStates, StateReader
from loadgen.tally import Tally
from loadgen.tenants import LOAD_TENANTS, SIDES
from loadgen.transport import Transport
from loadgen.workload import DEFAULT_WEIGHTS, KEYED_KINDS, RACE_KINDS, run_flow
from nodes.sealing import KeyRing

LATENCY_MAX_US = 120_000_000
"""Highest latency the histogram holds (two minutes); larger values are clamped."""

KEEP_SAMPLES_MAX = 200_000
"""Runs of more flows keep no per-flow samples (memory): their picture shows throughput from the
tally, without latency per second."""


@dataclass(frozen=True)
class RunSettings:
    """How much load, of which mix, for how long."""

    flows: int = 300
    duration_s: float = 45.0
    concurrency: int = 16
    rate: float | None = None
    seed: int = 1
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    tenants: int = LOAD_TENANTS
    legacy_share: float = 0.0
    """Share of the flows (0..1) run by legacy 2025-11-25 clients (needs a ``LegacyHttp``)."""
    tag: str = "run"
    """Put in every flow's title (``workload.flow_title``): give each run its own, so that runs
    sharing a store never meet each other's notes."""
    clean_up_cut_short: bool = False
    """A flow cut short (stopped, failed, past the duration) deletes what it created through the
    nodes (``workload.run_flow``): for nodes that outlive the run (``loadgen``); a simulation
    deletes its whole store prefix instead."""
    first_flow: int = 0
    """Id of this process's first flow: processes of one run (``--workers``) get disjoint ids."""
    keep_samples: bool | None = None
    """Keep every FlowSample; None: only when ``flows`` is at most ``KEEP_SAMPLES_MAX``."""
    exact_expiry: bool = False
    """Aim expiry races at the exact millisecond (``FlowEnv.exact_expiry``): a deterministic
    run only, where the Redis-clock estimate is exact."""
    only_flows: tuple[int, ...] | None = None
    """Run exactly these of the ``flows`` planned flows (indices below ``flows``, each with its
    original id, kind and draws: a flow's are a function of the seed and its index alone), in
    this order; None: all of them. A shrunk run keeps the few flows that still fail."""

    def planned(self) -> tuple[int, ...] | range:
        """The flow indices this run starts (``only_flows``, or every planned flow)."""
        if self.only_flows is None:
            return range(self.flows)
        wrong = [i for i in self.only_flows if not 0 <= i < self.flows]
        if wrong:
            raise ValueError(f"only_flows {wrong[:3]} outside the {self.flows} planned flows")
        return self.only_flows


@dataclass
class FlowSample:
    """One finished flow: when it was meant to start, when it ended, how it went."""

    kind: str
    intended_s: float
    end_s: float
    completed: bool
    outcome: str = "completed"

    @property
    def latency_ms(self) -> float:
        """From the intended start (open loop: no coordinated omission) to the end."""
        return (self.end_s - self.intended_s) * 1000


@dataclass
class RunStats:
    """What the runner measured."""

    samples: list[FlowSample] = field(default_factory=list)
    started_s: float = 0.0
    ended_s: float = 0.0
    histogram: HdrHistogram = field(default_factory=lambda: HdrHistogram(1, LATENCY_MAX_US, 3))
    tally: Tally = field(default_factory=Tally)
    keep_samples: bool = True
    """Keep every FlowSample (the pictures' latency per second); off for very long runs."""
    started_wall_ms: int = 0

    def add(self, sample: FlowSample) -> None:
        """Record one flow."""
        if self.keep_samples:
            self.samples.append(sample)
        self.histogram.record_value(min(LATENCY_MAX_US, max(1, int(sample.latency_ms * 1000))))
        self.tally.add_flow(sample.kind, sample.outcome, sample.end_s - self.started_s)

    @property
    def elapsed_s(self) -> float:
        """Wall time of the run."""
        return max(1e-9, self.ended_s - self.started_s)


KIND_CYCLE_MAX = 10_000
"""At most this many flows in one cycle of the kind plan (``_kinds``)."""


def _kinds(settings: RunSettings, seed: str) -> Callable[[int], str]:
    """Flow index -> race kind, a function of the index alone (not of the order flows start in).

    Legacy flows are spread evenly: flow i is legacy when floor(i * share) steps up at it. The
    modern flows follow a cycle that holds every weighted kind once, then its further copies
    (in proportion to its weight) in an order shuffled from the seed: any stretch of a cycle's
    length runs every kind its share, so a short run exercises each kind as its weight says,
    not as a random draw happens to fall (a 150-flow run once drew a kind twice where its share
    was five)."""
    kinds = [k for k in (*RACE_KINDS, *KEYED_KINDS) if settings.weights.get(k, 0) > 0]
    share = settings.legacy_share
    cycle = _kind_cycle(kinds, settings.weights, random.Random(seed))

    def pick(i: int) -> str:
        before = math.floor(i * share)
        if math.floor((i + 1) * share) > before:
            return LEGACY_KINDS[before % len(LEGACY_KINDS)]
        return cycle[(i - before) % len(cycle)]

    return pick


def _kind_cycle(kinds: list[str], weights: dict[str, float], rng: random.Random) -> list[str]:
    """Every kind once, then each kind's further copies (its weight over the smallest weight,
    rounded; scaled down to ``KIND_CYCLE_MAX`` in all), shuffled."""
    if not kinds:
        raise ValueError("no race kind has a positive weight")
    least = min(weights[k] for k in kinds)
    copies = {k: max(1, round(weights[k] / least)) for k in kinds}
    total = sum(copies.values())
    if total > KIND_CYCLE_MAX:
        scale = KIND_CYCLE_MAX / total
        copies = {k: max(1, round(n * scale)) for k, n in copies.items()}
    rest = [k for k in kinds for _ in range(copies[k] - 1)]
    rng.shuffle(rest)
    return kinds + rest


CUT_OFF_S = 30.0
"""Flows still running this long after the run's duration are cut off (``_drive``)."""


async def _drive(
    settings: RunSettings, started_s: float, one: Callable[[int, float], Awaitable[None]]
) -> None:
    """Start flows until ``settings.flows`` ran or ``duration_s`` passed: closed loop (each of
    ``concurrency`` workers starts its next flow when its last ended) or open loop (``rate``
    flows per second, each at its intended time); flows still running ``CUT_OFF_S`` after the
    duration are cut off.

    Every decision is taken on trio's clock alone (so a run under ``trio.testing.MockClock``
    is bounded by virtual time); the intended start handed to ``one`` is placed on the run's
    own timeline, which starts at ``started_s``."""
    t0 = trio.current_time()
    deadline = t0 + settings.duration_s

    def on_run_clock(t: float) -> float:
        return started_s + (t - t0)

    planned = settings.planned()
    ids = iter(planned)  # shared by the workers: each index runs once
    with trio.move_on_at(deadline + CUT_OFF_S):
        async with trio.open_nursery() as nursery:
            if settings.rate is None:

                async def worker() -> None:
                    for i in ids:
                        now = trio.current_time()
                        if now >= deadline:
                            return
                        await one(settings.first_flow + i, on_run_clock(now))

                for _ in range(settings.concurrency):
                    nursery.start_soon(worker)
            else:
                period = 1.0 / settings.rate
                for i in planned:
                    intended = t0 + i * period  # a kept flow keeps its place on the timeline
                    if intended >= deadline:
                        break
                    await trio.sleep_until(intended)
                    nursery.start_soon(one, settings.first_flow + i, on_run_clock(intended))


@dataclass(frozen=True)
class _Wiring:
    """What every flow of a run is wired to; makes each flow's environment."""

    settings: RunSettings
    transport: Transport
    history: History
    states: StateReader
    redis_offset_ms: int
    legacy: LegacyHttp | None
    pick_limit: int

    def flow_env(self, flow: int, kind: str, frng: random.Random) -> FlowEnv:
        """A modern flow's environment: a tenant and a side drawn from the flow's own rng."""
        t = frng.randrange(self.settings.tenants)
        side = frng.choice(SIDES)
        return FlowEnv(
            flow=flow,
            kind=kind,
            client=Client(2 * flow, self.transport, self.history, frng),
            rival=Client(2 * flow + 1, self.transport, self.history, frng),
            states=self.states,
            principal=names.principal(t, side),
            foreigner=names.principal(t, SIDES[1 - SIDES.index(side)]),
            tenant=names.tenant(t),
            inbox=names.inbox(t),
            archive=names.archive(t),
            redis_offset_ms=self.redis_offset_ms,
            rng=frng,
            tag=self.settings.tag,
            root=names.root(t),
            stranger_root=names.root((t + 1) % self.settings.tenants)
            if self.settings.tenants > 1
            else names.root(t) + "-ungranted",
            clean_up_cut_short=self.settings.clean_up_cut_short,
            exact_expiry=self.settings.exact_expiry,
            pick_limit=self.pick_limit,
        )

    def legacy_env(self, flow: int, kind: str, frng: random.Random) -> LegacyEnv:
        """A legacy flow's environment (the same draws as ``flow_env``): the tenant's first
        principal, or its second for a ``legacy_evicted`` flow, whose sessions past the cap
        evict only that principal's (``loadgen.legacy_sessions``)."""
        assert self.legacy is not None
        t = frng.randrange(self.settings.tenants)
        frng.choice(SIDES)
        side = SIDES[1] if kind == "legacy_evicted" else SIDES[0]
        return LegacyEnv(
            flow=flow,
            kind=kind,
            http=self.legacy,
            history=self.history,
            rng=frng,
            principal=names.principal(t, side),
            tenant=names.tenant(t),
            inbox=names.inbox(t),
            process=2 * flow,
            tag=self.settings.tag,
            foreigner=names.principal(t, SIDES[1 - SIDES.index(side)]),
            redis_offset_ms=self.redis_offset_ms,
        )


async def run_load(
    transport: Transport,
    ring: KeyRing | None,
    audience: str,
    settings: RunSettings,
    history: History,
    *,
    redis_offset_ms: int = 0,
    on_flow: Callable[[FlowSample], None] | None = None,
    legacy: LegacyHttp | None = None,
    states: StateReader | None = None,
    pick_limit: int = MAX_OFFERED,
) -> RunStats:
    """Run the workload until ``settings.flows`` flows finished or ``duration_s`` passed;
    ``legacy`` reaches the HTTP nodes of the legacy share. States are opened with ``ring`` for
    ``audience`` unless ``states`` reads them otherwise (a target without our key ring).
    ``pick_limit``: the nodes' pick-list limit, which a ``full_pick`` flow fills."""
    if states is None:
        if ring is None:
            raise ValueError("give the key ring, or a StateReader for opaque states")
        states = SealedStates(ring, audience)
    if not 0.0 <= settings.legacy_share <= 1.0:
        raise ValueError("legacy_share must be between 0 and 1")
    if settings.legacy_share > 0 and legacy is None:
        raise ValueError("legacy_share > 0 needs HTTP nodes for the legacy clients")
    pick_kind = _kinds(settings, f"{settings.seed}:kinds")
    stats = RunStats(
        started_s=time.monotonic(),
        keep_samples=(
            settings.flows <= KEEP_SAMPLES_MAX
            if settings.keep_samples is None
            else settings.keep_samples
        ),
        started_wall_ms=int(time.time() * 1000),
    )

    def observe(op: Op) -> None:
        if op.value.get("reason") not in DELIBERATE:
            stats.tally.add_answer(op.time_ms, op.type == "info")

    history.observer = observe

    wiring = _Wiring(settings, transport, history, states, redis_offset_ms, legacy, pick_limit)

    async def one(flow: int, intended: float) -> None:
        stats.tally.loaded_s = max(stats.tally.loaded_s, intended - stats.started_s)
        frng = random.Random(f"{settings.seed}:{flow}")
        kind = pick_kind(flow)
        if kind in LEGACY_KINDS:
            ok = await run_any_legacy_flow(wiring.legacy_env(flow, kind, frng))
            done(FlowSample(kind, intended, 0.0, ok, "completed" if ok else "setup_failed"))
            return
        env = wiring.flow_env(flow, kind, frng)
        ok = await run_flow(env)
        done(FlowSample(env.kind, intended, 0.0, ok, env.outcome))

    def done(sample: FlowSample) -> None:
        sample.end_s = time.monotonic()
        stats.add(sample)
        if on_flow is not None:
            on_flow(sample)

    await _drive(settings, stats.started_s, one)
    stats.ended_s = time.monotonic()
    stats.tally.elapsed_s = stats.elapsed_s
    return stats
