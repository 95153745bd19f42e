"""Fault injection during a run: a seeded schedule of faults, and the injector that plays it
alongside the load and records what it did and when.

Layer: cluster. Stops and starts in-process nodes (``cluster.local``), drops and pauses the nodes'
Redis connections through a control connection of its own (redis-py), and loses replies on the
client side through a transport wrapper (the load generator's contract, ``loadgen.transport``).
Knows nothing of the workload or the checker.

Kinds (each selectable):

- ``nodes``: stop a node as a crash would (its in-flight requests are cancelled), start a fresh
  one in its place a moment later.
- ``redis`` (a real Redis only): ``CLIENT KILL`` of the nodes' connections (found by name,
  ``SKIPME yes`` spares the control connection); ``CLIENT PAUSE <ms> WRITE``; and latency,
  ``CLIENT PAUSE <ms> ALL`` longer than the nodes' Redis timeout, so node calls time out while
  their script waits to run once the pause ends: real unknown outcomes.
- ``client``: replies lost after the node answered (with probability ``p`` during a window); the
  client sees no answer, records ``info`` and retries elsewhere.
- ``lost-reply``: Redis runs a command and its reply is lost (with probability ``p`` during a
  window): at the store seam of the in-process nodes on the embedded store
  (``cluster.store_faults``), through a reply-dropping proxy between the nodes and a real Redis
  (``cluster.reply_dropping_proxy``, ``mode="close"``; not on a Redis Cluster, whose clients
  follow the cluster's own node addresses past any proxy). Through the proxy a window that lost
  no reply in its planned length stays open until it loses one (or the run ends).
- ``reshard`` (a Redis Cluster only): a busy tenant's slot is moved to another master and back
  (``cluster.reshard``: ``CLUSTER SETSLOT`` and ``MIGRATE``), held migrating a moment each way,
  so the tenant's writes meet TRYAGAIN (and ASK) and the nodes re-send them.
- ``stall``: Redis holds every script past the nodes' client timeout, then runs it:
  ``CLIENT PAUSE <ms> WRITE`` on a real Redis (every master of a cluster), the same hold at the
  store seam on the embedded store. The nodes' Redis timeout is cut to
  ``FAULT_STREAM_TIMEOUT_S`` so the stall outlasts it.

Every fault injected is a FaultRecord with its start and end (monotonic, for the run's timeline,
and wall clock) and a detail line for people.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import redis
import trio

from cluster.local import LocalCluster
from cluster.reply_dropping_proxy import SCRIPT_COMMANDS, ReplyDroppingProxy
from cluster.reshard import masters as cluster_masters
from cluster.reshard import reshard_tenant
from cluster.store_faults import StoreFaults
from cluster.stores import needs_real_redis
from loadgen.transport import NodeDown, Reply, Transport
from store.client_factory import is_cluster

RESHARD_NEEDS = (
    "--faults reshard needs a Redis Cluster (--redis redis://HOST:PORT of one of its nodes): "
    "it moves the busy tenants' slots between masters"
)

FaultKind = Literal["nodes", "redis", "client", "lost-reply", "stall", "reshard"]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "nodes",
    "redis",
    "client",
    "lost-reply",
    "stall",
    "reshard",
)
SHORT_TIMEOUT_KINDS = frozenset({"redis", "stall"})
"""Kinds under which the nodes' Redis timeout is ``FAULT_STREAM_TIMEOUT_S``."""

FAULT_STREAM_TIMEOUT_S = 0.25
"""The nodes' Redis timeout in runs with ``redis`` faults: it bounds each try of a call, the
connect included. The store tries a call three times (``store.notes.RESENDS``), so a pause
longer than about 0.8 s makes a node give up ("outcome unknown") while its script is still
queued, to run when the pause ends: the unknown outcome the checker must resolve."""

FIRST_FAULT_S = (0.2, 0.6)
"""When the first fault of each kind starts (seconds after the run's start): early, so even a
run of a few seconds sees every kind."""

GAP_S = (0.3, 1.0)
"""Quiet time between the end of one fault of a kind and the start of the next."""

NODE_DOWN_S = (0.05, 0.6)
"""How long a stopped node stays down before a fresh one takes its place."""

PAUSE_WRITE_MS = (100, 400)
"""``CLIENT PAUSE WRITE``: around the fault-run Redis timeout, so some calls outlast it."""

LATENCY_MS = (900, 1300)
"""``CLIENT PAUSE ALL``: longer than three fault-run timeouts, so node calls give up."""

LOSS_S = (0.3, 1.0)
LOSS_P = (0.2, 0.5)
"""A client-loss window's length and the probability that a reply in it is lost."""

LOST_REPLY_S = (0.3, 1.0)
LOST_REPLY_P = (0.1, 0.4)
"""A lost-reply window's length and the probability that a Redis reply in it is lost."""

KIND_GAP_S: dict[str, tuple[float, float]] = {"stall": (2.0, 4.0), "reshard": (0.5, 1.5)}
"""Quiet time after a fault of these kinds, where it differs from ``GAP_S``: a stall holds
every write of the run, so it comes less often (with the ``redis`` kind's pauses beside it,
Redis would otherwise be paused most of the time and flows could barely start)."""

LOST_REPLY_MAX = 1_000_000
"""Most replies one lost-reply window may drop through the proxy (its draw decides which)."""

STALL_MS = (600, 1200)
"""A stall's length: past the fault-run Redis timeout (0.25 s), so node calls give up while
their scripts wait to run."""

RESHARD_AWAY_S = (0.3, 1.0)
"""How long a busy tenant's slot stays on the other master before it is moved back."""

RESHARD_HOLD_MS = (50, 300)
"""How long the slot stays migrating before its keys move (each way): the tenant's writes are
refused with TRYAGAIN meanwhile and the nodes re-send them (``store.refusals``)."""

RESTART_TIMEOUT_S = 15.0
"""How long bringing a stopped node back may take (its store may be paused meanwhile)."""

CONTROL_TIMEOUT_S = 5.0
"""Socket timeout of the injector's own Redis connection (longer than any pause it sets)."""

REDIS_ACTIONS = ("kill", "pause_write", "latency")


class FaultUsageError(ValueError):
    """The requested faults cannot run on this setup (e.g. ``redis`` on the embedded store)."""


def parse_kinds(text: str) -> frozenset[FaultKind]:
    """``"nodes,redis,client"`` -> the kinds; unknown names raise FaultUsageError."""
    names = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(names - set(FAULT_KINDS))
    if unknown:
        raise FaultUsageError(
            f"unknown fault kind(s) {', '.join(unknown)}; choose from {', '.join(FAULT_KINDS)}"
        )
    return frozenset(k for k in FAULT_KINDS if k in names)


def check_kinds(kinds: Collection[str], *, embedded: bool) -> None:
    """Refuse kinds that cannot run on this store (``redis`` needs a real Redis: the embedded
    store accepts CLIENT KILL and CLIENT PAUSE but does nothing)."""
    why = needs_real_redis(faults=kinds)
    if why and embedded:
        raise FaultUsageError(why)


@dataclass(frozen=True)
class PlannedFault:
    """One fault of the schedule: what, when (seconds after the run's start), for how long."""

    at_s: float
    kind: FaultKind
    action: str
    duration_s: float
    node: int = 0
    p: float = 0.0


def _rng(label: str) -> random.Random:
    """A seeded generator for schedules and draws (reproducible, not for secrets)."""
    return random.Random(label)  # noqa: S311


def plan_faults(
    kinds: Collection[FaultKind], seed: int, horizon_s: float, nodes: int
) -> list[PlannedFault]:
    """The seeded schedule: each kind on a timeline of its own (kinds may overlap, faults of one
    kind never do), from ``FIRST_FAULT_S`` until ``horizon_s``."""
    plan: list[PlannedFault] = []
    for kind in FAULT_KINDS:
        if kind not in kinds:
            continue
        rng = _rng(f"faults:{seed}:{kind}")
        t = rng.uniform(*FIRST_FAULT_S)
        while t < horizon_s:
            fault = _draw(kind, rng, t, nodes)
            plan.append(fault)
            t += fault.duration_s + rng.uniform(*KIND_GAP_S.get(kind, GAP_S))
    return sorted(plan, key=lambda f: (f.at_s, f.kind))


def _draw(kind: FaultKind, rng: random.Random, t: float, nodes: int) -> PlannedFault:
    if kind == "nodes":
        return PlannedFault(t, kind, "restart", rng.uniform(*NODE_DOWN_S), rng.randrange(nodes))
    if kind == "client":
        return PlannedFault(t, kind, "lose_replies", rng.uniform(*LOSS_S), p=rng.uniform(*LOSS_P))
    if kind == "lost-reply":
        p = rng.uniform(*LOST_REPLY_P)
        return PlannedFault(t, kind, "drop_redis_replies", rng.uniform(*LOST_REPLY_S), p=p)
    if kind == "stall":
        return PlannedFault(t, kind, "stall", rng.randint(*STALL_MS) / 1000)
    if kind == "reshard":  # node: which tenant; p: how long the slot is held migrating
        hold = rng.randint(*RESHARD_HOLD_MS) / 1000
        away = rng.uniform(*RESHARD_AWAY_S)
        return PlannedFault(t, kind, "move_slot", away, rng.randrange(1 << 30), p=hold)
    action = rng.choice(REDIS_ACTIONS)
    if action == "kill":
        return PlannedFault(t, kind, action, 0.0)
    lo, hi = PAUSE_WRITE_MS if action == "pause_write" else LATENCY_MS
    return PlannedFault(t, kind, action, rng.randint(lo, hi) / 1000)


@dataclass(frozen=True)
class CustomFault:
    """A fault that is not in the schedule's kinds (e.g. a Redis Cluster failover): ``run``
    performs it and returns its detail line; the time it takes is the fault's window."""

    at_s: float
    kind: str
    action: str
    run: Callable[[], Awaitable[str]]


@dataclass(frozen=True)
class FaultRecord:
    """One fault injected: monotonic start and end (``time.monotonic``), wall clock, detail."""

    kind: str
    action: str
    detail: str
    start_mono: float
    end_mono: float
    start_wall: float
    end_wall: float

    def to_json(self, run_started_mono: float) -> dict[str, Any]:
        """``{"kind", "action", "start_s", "end_s", "start_wall", "end_wall", "detail"}`` with
        times in seconds from the run's start and as UTC ISO 8601."""
        return {
            "kind": self.kind,
            "action": self.action,
            "start_s": round(self.start_mono - run_started_mono, 3),
            "end_s": round(self.end_mono - run_started_mono, 3),
            "start_wall": _iso(self.start_wall),
            "end_wall": _iso(self.end_wall),
            "detail": self.detail,
        }


@dataclass
class LostReplies:
    """Store replies the run's own nodes lost (a reply timeout under a starved machine, a
    dropped connection), observed where they happen rather than injected: each the honest
    cause of an "outcome unknown" answer, kept as a fault record (kind ``store``, action
    ``reply lost``) so that ``unknown_outcomes_explained`` reads it like an injected one. A
    node that answers "outcome unknown" without losing a reply has no such record. Kept in
    runs that inject no faults (``cluster.targets.in_process``): a fault run's own windows
    explain its losses."""

    records: list[FaultRecord] = field(default_factory=list)

    def __call__(self, node_id: str, what: str, waited_s: float) -> None:
        end_mono, end_wall = time.monotonic(), time.time()
        self.records.append(
            FaultRecord(
                kind="store",
                action="reply lost",
                detail=f"{node_id}: {what}, after {waited_s:.3f} s (observed, not injected)",
                start_mono=end_mono - waited_s,
                end_mono=end_mono,
                start_wall=end_wall - waited_s,
                end_wall=end_wall,
            )
        )


def fault_records_as_rows(records: Sequence[FaultRecord]) -> list[dict[str, Any]]:
    """``records`` as ``faults.json`` rows (``RunFolder.write_faults``): by wall clock only,
    since monotonic clocks are private to a process."""
    return [{k: v for k, v in asdict(r).items() if not k.endswith("_mono")} for r in records]


def records_from_rows(
    rows: Sequence[dict[str, Any]], started_mono: float, started_wall: float, label: str = ""
) -> list[FaultRecord]:
    """Fault rows another process wrote, placed on this process's monotonic clock by their
    wall-clock times (the run started at ``started_mono`` / ``started_wall``); each detail
    starts with ``label``."""
    out = []
    for row in rows:
        start, end = float(row["start_wall"]), float(row["end_wall"])
        out.append(
            FaultRecord(
                kind=row["kind"],
                action=row["action"],
                detail=f"{label}{row['detail']}",
                start_mono=started_mono + (start - started_wall),
                end_mono=started_mono + (end - started_wall),
                start_wall=start,
                end_wall=end,
            )
        )
    return out


def _iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds")


class ResponseLost(NodeDown):
    """The node answered, but the reply never reached the client (a client-side fault)."""


class LossyTransport:
    """Wraps a transport (implements ``loadgen.transport.Transport``): while ``p`` > 0, each reply
    is lost with probability ``p`` after the node answered, so the client must retry elsewhere."""

    def __init__(self, inner: Transport, seed: int) -> None:
        self.inner = inner
        self.p = 0.0
        self.lost = 0
        self._rng = _rng(f"loss:{seed}")

    @property
    def node_count(self) -> int:
        """As the wrapped transport."""
        return self.inner.node_count

    async def send(self, node_index: int, principal: str, message: dict[str, Any]) -> Reply:
        """Deliver; then, with probability ``p``, drop the reply (ResponseLost)."""
        reply = await self.inner.send(node_index, principal, message)
        if self.p > 0 and self._rng.random() < self.p:
            self.lost += 1
            raise ResponseLost(f"node-{node_index} answered; the reply was lost")
        return reply

    def __getattr__(self, name: str) -> Any:
        # What else the wrapped transport offers (a setup page, ``loadgen.transport.PageTransport``)
        # passes through, never lost: a page is a browser's, not the MCP client's.
        return getattr(self.inner, name)


class RedisControl:
    """The injector's own connections to the Redis servers behind the store (every master of a
    Redis Cluster), and the commands it sends them. Synchronous: run it in a thread."""

    def __init__(self, url: str, client_name_prefix: str) -> None:
        self.url = url
        self.name_prefix = client_name_prefix
        self.targets = self._masters(url)

    @staticmethod
    def _masters(url: str) -> list[tuple[str, int]]:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 6379
        with redis.Redis(
            host=host, port=port, socket_timeout=CONTROL_TIMEOUT_S, decode_responses=True
        ) as probe:
            info: dict[str, Any] = dict(probe.info("cluster"))
            if str(info.get("cluster_enabled", "0")) != "1":
                return [(host, port)]
        return [m.address for m in cluster_masters((host, port))]

    def _client(self, target: tuple[str, int]) -> redis.Redis:
        return redis.Redis(
            host=target[0],
            port=target[1],
            socket_timeout=CONTROL_TIMEOUT_S,
            socket_connect_timeout=CONTROL_TIMEOUT_S,
            decode_responses=True,
        )

    def kill(self, target: tuple[str, int]) -> int:
        """``CLIENT KILL`` every connection of the nodes (by name) on ``target``; how many."""
        with self._client(target) as c:
            ids = [
                str(entry["id"])
                for entry in c.client_list()
                if str(entry.get("name", "")).startswith(self.name_prefix)
            ]
            killed = 0
            for client_id in ids:
                killed += int(
                    c.execute_command(
                        "CLIENT", "KILL", "ID", client_id, "TYPE", "normal", "SKIPME", "yes"
                    )
                )
            return killed

    def pause(self, target: tuple[str, int], ms: int, mode: Literal["WRITE", "ALL"]) -> None:
        """``CLIENT PAUSE ms mode`` on ``target`` (it ends by itself after ``ms``)."""
        with self._client(target) as c:
            c.execute_command("CLIENT", "PAUSE", str(ms), mode)

    def unpause(self, target: tuple[str, int]) -> None:
        """``CLIENT UNPAUSE`` (answered at once after a WRITE pause; an ALL pause holds it)."""
        with self._client(target) as c:
            c.execute_command("CLIENT", "UNPAUSE")


@dataclass
class FaultInjector:
    """Plays a fault schedule against a running LocalCluster until cancelled, and records every
    fault injected. ``transport`` is what the load must use (it loses replies for ``client``)."""

    cluster: LocalCluster
    plan: Sequence[PlannedFault]
    transport: LossyTransport
    redis: RedisControl | None = None
    custom: Sequence[CustomFault] = ()
    seed: int = 0
    store_faults: StoreFaults | None = None
    """The in-process nodes' store seam (embedded store: ``lost-reply``, ``stall``)."""
    proxy: ReplyDroppingProxy | None = None
    """The proxy between the nodes and a real Redis (``lost-reply``)."""
    tenants: Sequence[str] = ()
    """The load's tenants: ``reshard`` moves their slots."""
    records: list[FaultRecord] = field(default_factory=list)
    _t0: float = 0.0

    async def run(self) -> None:
        """Inject every planned fault at its time (relative to this call) until cancelled; a
        fault cut short by the cancellation is undone and recorded with its real end."""
        self._t0 = time.monotonic()
        async with trio.open_nursery() as nursery:
            for kind in FAULT_KINDS:
                mine = [f for f in self.plan if f.kind == kind]
                if mine:
                    nursery.start_soon(self._timeline, mine)
            for custom in self.custom:
                nursery.start_soon(self._custom, custom)

    async def _until(self, at_s: float) -> None:
        await trio.sleep(max(0.0, self._t0 + at_s - time.monotonic()))

    async def _timeline(self, faults: Sequence[PlannedFault]) -> None:
        rng = _rng(f"targets:{self.seed}")
        for fault in faults:
            await self._until(fault.at_s)
            if fault.kind == "nodes":
                await self._node(fault)
            elif fault.kind == "client":
                await self._client(fault)
            elif fault.kind == "lost-reply":
                await self._lost_reply(fault)
            elif fault.kind == "stall":
                await self._stall(fault, rng)
            elif fault.kind == "reshard":
                await self._reshard(fault)
            else:
                await self._redis(fault, rng)

    def _record(self, kind: str, action: str, detail: str, start: tuple[float, float]) -> None:
        self.records.append(
            FaultRecord(kind, action, detail, start[0], time.monotonic(), start[1], time.time())
        )

    async def _node(self, fault: PlannedFault) -> None:
        index = fault.node % max(1, len(self.cluster.nodes))
        start = (time.monotonic(), time.time())
        self.cluster.stop_node(index)
        detail = f"node-{index} stopped mid-load, a fresh node-{index} started"
        try:
            await trio.sleep(fault.duration_s)
        finally:
            with trio.CancelScope(shield=True):
                back = await self._restart(index)
            if not back:
                detail = f"node-{index} stopped; it could not be started again"
            self._record("nodes", "restart", detail, start)

    async def _restart(self, index: int) -> bool:
        """Start node ``index`` again, retrying while its store does not answer (paused)."""
        with trio.move_on_after(RESTART_TIMEOUT_S):
            while True:
                try:
                    await self.cluster.start_node(index)
                except Exception:  # a paused store, say: try again shortly
                    await trio.sleep(0.1)
                else:
                    self.cluster.restarts += 1
                    return True
        return False

    async def _client(self, fault: PlannedFault) -> None:
        start = (time.monotonic(), time.time())
        before = self.transport.lost
        self.transport.p = fault.p
        try:
            await trio.sleep(fault.duration_s)
        finally:
            self.transport.p = 0.0
            lost = self.transport.lost - before
            detail = f"replies lost with p={fault.p:.2f}: {lost} lost"
            self._record("client", "lose_replies", detail, start)

    async def _lost_reply(self, fault: PlannedFault) -> None:
        start = (time.monotonic(), time.time())
        seam, proxy = self.store_faults, self.proxy
        before = self._lost()
        where = "at the store seam" if seam else "by the proxy"
        if seam is not None:
            seam.p_lost = fault.p
        if proxy is not None:
            draw = _rng(f"lost-reply:{self.seed}:{fault.at_s}")
            proxy.drop_next(
                LOST_REPLY_MAX, SCRIPT_COMMANDS, matching=lambda _: draw.random() < fault.p
            )
        held, opened = False, trio.current_time()
        try:
            await trio.sleep(fault.duration_s)
            if proxy is not None and self._lost() == before:
                # The window is wall-clock time and the load is not: its flows run in bursts
                # (and a stall holds them), so a window can pass with no script reply to lose.
                # Through the proxy it stays open until it loses one (or the run ends).
                held = True
                await proxy.wait_dropped(proxy.statistics().dropped + 1)
        finally:
            if seam is not None:
                seam.p_lost = 0.0
            if proxy is not None:
                proxy.stop_dropping()
            lost = self._lost() - before
            detail = f"Redis replies lost {where} with p={fault.p:.2f}: {lost} lost"
            if held:
                over = trio.current_time() - opened - fault.duration_s
                detail += f" (held open {over:.2f} s past its planned {fault.duration_s:.2f} s)"
            self._record("lost-reply", "drop_redis_replies", detail, start)

    def _lost(self) -> int:
        """Redis replies lost so far (seam and proxy)."""
        seam, proxy = self.store_faults, self.proxy
        return (seam.lost if seam else 0) + (proxy.statistics().dropped if proxy else 0)

    async def _stall(self, fault: PlannedFault, rng: random.Random) -> None:
        ms = int(fault.duration_s * 1000)
        seam = self.store_faults
        if seam is None:
            control = self.redis
            if control is None:  # pragma: no cover - open_injector gives one or the other
                return
            start = (time.monotonic(), time.time())
            for target in control.targets:
                await trio.to_thread.run_sync(control.pause, target, ms, "WRITE")
            try:
                await trio.sleep(fault.duration_s)
            finally:
                self._record(
                    "stall", "pause_write", f"CLIENT PAUSE {ms} WRITE, every master", start
                )
            return
        start = (time.monotonic(), time.time())
        before = seam.timed_out
        seam.start_stall()
        try:
            await trio.sleep(fault.duration_s)
        finally:
            seam.end_stall()
            gave_up = seam.timed_out - before
            detail = f"scripts held {ms} ms at the store seam: {gave_up} calls timed out"
            self._record("stall", "hold_scripts", detail, start)

    async def _redis(self, fault: PlannedFault, rng: random.Random) -> None:
        control = self.redis
        if control is None:  # pragma: no cover - check_kinds refuses this before the run
            return
        target = rng.choice(control.targets)
        where = f"{target[0]}:{target[1]}"
        start = (time.monotonic(), time.time())
        if fault.action == "kill":
            killed = await trio.to_thread.run_sync(control.kill, target)
            detail = f"CLIENT KILL: {killed} node connections on {where}"
            self._record("redis", "kill", detail, start)
            return
        ms = int(fault.duration_s * 1000)
        mode: Literal["WRITE", "ALL"] = "WRITE" if fault.action == "pause_write" else "ALL"
        await trio.to_thread.run_sync(control.pause, target, ms, mode)
        end = start[0] + fault.duration_s
        try:
            await trio.sleep(fault.duration_s)
        finally:
            with trio.CancelScope(shield=True):
                if time.monotonic() < end and mode == "WRITE":
                    await trio.to_thread.run_sync(control.unpause, target)
                else:  # an ALL pause cannot be lifted early: it ends by itself
                    await trio.sleep(max(0.0, end - time.monotonic()))
            label = "latency" if mode == "ALL" else "pause_write"
            self._record("redis", label, f"CLIENT PAUSE {ms} {mode} on {where}", start)

    async def _reshard(self, fault: PlannedFault) -> None:
        tenant = self.tenants[fault.node % len(self.tenants)]
        start = (time.monotonic(), time.time())
        details = [f"tenant {tenant}'s slot: the move did not complete"]
        try:
            await reshard_tenant(
                self.cluster.redis_url,
                tenant,
                away_s=fault.duration_s,
                hold_s=fault.p,
                done=details.append,
            )
        finally:
            self._record("reshard", "move_slot", details[-1], start)

    async def _custom(self, fault: CustomFault) -> None:
        await self._until(fault.at_s)
        start = (time.monotonic(), time.time())
        detail = "cut short by the end of the run"
        try:
            detail = await fault.run()
        finally:
            self._record(fault.kind, fault.action, detail, start)


async def open_injector(
    cluster: LocalCluster,
    transport: Transport,
    kinds: Collection[FaultKind],
    *,
    seed: int,
    horizon_s: float,
    client_name_prefix: str,
    custom: Sequence[CustomFault] = (),
    store_faults: StoreFaults | None = None,
    proxy: ReplyDroppingProxy | None = None,
    tenants: Sequence[str] = (),
) -> FaultInjector:
    """An injector for ``kinds`` on ``cluster`` (``redis`` faults target the nodes' connections,
    named ``client_name_prefix-*``), its schedule drawn from ``seed``. ``lost-reply`` needs the
    nodes' store seam (embedded store) or the proxy they reach Redis through; ``stall`` the
    seam, or a real Redis to pause."""
    check_kinds(kinds, embedded=cluster.embedded)
    if "reshard" in kinds:
        if cluster.embedded or not await is_cluster(cluster.redis_url):
            raise FaultUsageError(RESHARD_NEEDS)
        if not tenants:
            raise FaultUsageError("--faults reshard moves the load's tenants' slots: name them")
    if "lost-reply" in kinds and store_faults is None and proxy is None:
        raise FaultUsageError("lost-reply needs the store seam or a reply-dropping proxy")
    control = None
    if "redis" in kinds or ("stall" in kinds and not cluster.embedded):
        control = await trio.to_thread.run_sync(RedisControl, cluster.redis_url, client_name_prefix)
    if store_faults is not None:
        store_faults.nursery = cluster.nursery
    return FaultInjector(
        cluster,
        plan_faults(kinds, seed, horizon_s, max(1, len(cluster.nodes))),
        LossyTransport(transport, seed),
        control,
        custom,
        seed,
        store_faults=store_faults if cluster.embedded else None,
        proxy=proxy,
        tenants=tuple(tenants),
    )
