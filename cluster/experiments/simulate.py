"""``notes-cluster simulate``: race workload on an in-process cluster, then the checker's verdict.

Layer: cluster (an experiment). Starts a cluster through ``cluster.local``, drives it through the
in-process transport, and reads the store only after the run, to check invariants. With a legacy
share (``RunSettings.legacy_share`` > 0, ``--legacy-share``) it also serves the same store,
configuration and key ring over HTTP nodes on loopback (``legacy_nodes.serve_legacy_nodes``): the
in-process transport has no sockets, and a legacy call streams its result while its answer arrives
on another request. Legacy flows go to those nodes only, so node and client faults (which target
the in-process nodes and their transport) do not reach them; Redis faults reach every node.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis.cluster
import trio

from cluster.demo import DEMO_ARCHIVES, DEMO_GRANTS, DEMO_SERVER_NAME, DEMO_WORKSPACES
from cluster.experiments.legacy_nodes import serve_legacy_nodes
from cluster.faults import (
    FAULT_STREAM_TIMEOUT_S,
    SHORT_TIMEOUT_KINDS,
    CustomFault,
    FaultInjector,
    FaultKind,
    FaultRecord,
    FaultUsageError,
    open_injector,
    write_faults,
)
from cluster.load_fixture import load_archives, load_tokens, with_load_scope
from cluster.local import InProcessTransport, LocalCluster, StoreOptions, open_local_cluster
from cluster.reply_dropping_proxy import ReplyDroppingProxy, open_reply_dropping_proxy
from cluster.store_faults import StoreFaults
from loadgen.check.exercise import ExerciseRule, judge
from loadgen.check.invariants import check
from loadgen.check.limits import FaultWindow, Limits
from loadgen.check.partition import check_folders
from loadgen.check.verdict import CheckResult, Verdict
from loadgen.history import History, close_history, open_history
from loadgen.legacy_clients import LegacyHttp
from loadgen.runfolder import dump_store_facts, history_files
from loadgen.runner import FlowSample, RunSettings, RunStats, run_load
from loadgen.tally import Tally, write_tally
from loadgen.tenants import tenants as tenant_names
from loadgen.transport import Transport
from nodes.config import NodeConfig
from nodes.scope import Scope
from nodes.sealing import KeyRing
from store.client import is_cluster, sync_client
from store.journal import (
    keys_per_master,
    list_replay_entries,
    read_final_notes,
    read_journal,
    scan_keys,
)
from store.notes import NoteStore

KEEP_OPS_MAX = 50_000
"""Runs of up to this many flows also keep their history in memory (tests read it); longer
ones only stream it to the run folder."""

INDEX_STRIDE = 10**12
"""History indices of worker k start at k * INDEX_STRIDE: one run's indices never collide."""

LATENCY_FILE = "latency.hdr"

SIM_REPLAY_GRACE_MS = 1_000
"""Replay grace in simulations: short, so the run can show replay entries really expire."""

STORE_SEAM_KINDS = frozenset({"lost-reply", "stall"})
"""Fault kinds played at the in-process nodes' store seam on the embedded store."""

SIM_LIST_PAGE_SIZE = 2
"""``notes_list`` page size in simulations: small, so a ``list_pages`` flow's few notes take
several pages (the checker holds every page to it)."""

SIM_PUBLIC_URL = "http://127.0.0.1:9"
"""Base of the setup links in simulations (``notes_setup`` round 1 needs one; nothing opens it:
the in-process run drives the tool up to its URL-mode elicitation, not the page)."""

EXPIRY_SETTLE_S = 0.5
"""Extra wait past the last expiry plus grace before looking for leftover replay entries."""


@dataclass(frozen=True)
class SimulateOptions:
    """Everything a simulation run takes."""

    nodes: int = 3
    redis_url: str | None = None
    state_ttl_s: float = 2.0
    settings: RunSettings = field(default_factory=RunSettings)
    run_dir: Path | None = None
    keep_keys: bool = False
    faults: frozenset[FaultKind] = frozenset()
    """Fault kinds injected during the run (``cluster.faults``): nodes, redis, client,
    lost-reply, stall."""
    fault_seed: int | None = None
    """Seed of the fault schedule; None: the run's seed."""
    injected: frozenset[FaultKind] | None = None
    """The kinds of ``faults`` this process injects itself; None: all. Under ``--workers`` only
    worker 0 injects ``redis`` faults: the store is shared, so it gets one schedule, not one per
    worker (every worker's nodes still get the short Redis timeout and named connections)."""
    custom_faults: tuple[CustomFault, ...] = ()
    """Faults beyond the kinds (the failover experiment's), played by the same injector."""
    wait_replicas: int = 0
    """Replicas every write must reach before a node answers (``WAIT``); 0: asynchronous."""
    stream_timeout_s: float | None = None
    """The nodes' Redis reply timeout; None: the default, or the short fault-run one when
    ``redis`` faults are injected."""
    exercise: ExerciseRule = field(default_factory=ExerciseRule)
    """When the run counts as exercised (else its verdict is UNKNOWN)."""
    workers: int = 1
    """Load processes (``cluster.experiments.workers``), each with its own in-process nodes,
    against one store."""
    worker: int | None = None
    """Set in a worker process: its number. A worker records and does not check."""
    prefix: str | None = None
    """The store's key prefix; None: a fresh one (workers of one run share their parent's)."""
    keep_history: bool | None = None
    """Keep the history in memory too (``Simulation.history.ops``); None: only for runs of at
    most ``KEEP_OPS_MAX`` flows or without a run folder."""
    replay_grace_ms: int = SIM_REPLAY_GRACE_MS
    """The nodes' replay grace (recorded: ``check --redis`` waits it out)."""
    journal_since_ms: int = 0
    """A load against a store that outlives it (``loadgen``): the Redis-clock time its journal
    is read from (recorded, so ``check --redis`` reads the same); 0: the whole journal."""
    transport_hook: Callable[[Transport], Transport] | None = None
    """Wraps the transport the load uses (tests plant faults of their own with it)."""


@dataclass
class Simulation:
    """The outcome of a run: the verdicts, what was measured, and where the files are."""

    result: CheckResult
    stats: RunStats
    history: History
    races: dict[str, int]
    run_dir: Path | None
    options: SimulateOptions
    store: str
    key_distribution: dict[str, int] | None = None
    """``"host:port" -> keys`` per master after the run, only when the store is a Redis Cluster."""
    faults: list[FaultRecord] = field(default_factory=list)
    """Every fault injected during the run, in the order they ended."""

    def faults_json(self) -> list[dict[str, Any]]:
        """The faults injected, by start time, with times relative to the run's start, and the
        share of answers of known outcome during each (``availability``)."""
        records = sorted(self.faults, key=lambda r: r.start_mono)
        out = []
        for r in records:
            d = r.to_json(self.stats.started_s)
            wall0 = self.stats.started_wall_ms
            d["availability"] = self.stats.tally.availability(
                wall0 + int(d["start_s"] * 1000), wall0 + int(d["end_s"] * 1000)
            )
            out.append(d)
        return out

    def _fault_settings(self) -> dict[str, Any]:
        o = self.options
        out: dict[str, Any] = {}
        if o.faults or o.custom_faults:
            out["faults"] = sorted(o.faults) + sorted({c.kind for c in o.custom_faults})
            out["fault_seed"] = o.settings.seed if o.fault_seed is None else o.fault_seed
        if o.wait_replicas:
            out["wait_replicas"] = o.wait_replicas
        return out

    def to_json(self) -> dict[str, Any]:
        """``results.json``: verdicts, race counts, throughput and latency percentiles."""
        h = self.stats.histogram
        tally = self.stats.tally
        completed = tally.completed
        return {
            "verdict": self.result.status,
            "invariants": [v.to_json() for v in self.result.verdicts],
            "counts": dict(self.result.counts),
            "races": self.races,
            "model": self.result.model,
            "kinds": tally.per_kind(),
            "flows": {"total": tally.total, "completed": completed},
            "throughput_flows_per_s": completed / self.stats.elapsed_s,
            "flows_per_s_by_tenth": tally.tenth_rates(),
            "elapsed_s": self.stats.elapsed_s,
            "latency_ms": {
                f"p{p:g}": h.get_value_at_percentile(p) / 1000 for p in (50, 90, 99, 99.9)
            }
            | {"max": h.get_max_value() / 1000},
            "settings": {
                "nodes": self.options.nodes,
                "store": self.store,
                "state_ttl_s": self.options.state_ttl_s,
                "replay_grace_ms": self.options.replay_grace_ms,
                "flows": self.options.settings.flows,
                "duration_s": self.options.settings.duration_s,
                "concurrency": self.options.settings.concurrency,
                "rate": self.options.settings.rate,
                "seed": self.options.settings.seed,
                "legacy_share": self.options.settings.legacy_share,
                "weights": self.options.settings.weights,
                "tenants": self.options.settings.tenants,
                "workers": self.options.workers,
                "min_completed_share": self.options.exercise.min_completed_share,
                "min_runs_per_kind": self.options.exercise.min_runs_per_kind,
            }
            | self._fault_settings()
            | ({"journal_since_ms": o} if (o := self.options.journal_since_ms) else {})
            | ({"max_exp_ms": m} if (m := self.history.max_exp_ms) > 0 else {})
            | ({"started_wall_ms": w} if (w := self.stats.started_wall_ms) > 0 else {}),
        } | (
            ({"check": self.result.cost} if self.result.cost else {})
            | ({} if self.key_distribution is None else {"key_distribution": self.key_distribution})
            | ({"faults": self.faults_json()} if self._fault_settings().get("faults") else {})
        )


def simulation_config(state_ttl_s: float, tenants: int) -> NodeConfig:
    """The demo scope plus the load tenants, a fresh key ring, and the run's state expiry."""
    scope = with_load_scope(Scope.build(DEMO_WORKSPACES, DEMO_GRANTS), tenants)
    return NodeConfig(
        server_name=DEMO_SERVER_NAME,
        scope=scope,
        key_ring=KeyRing.generate(),
        state_ttl_ms=int(state_ttl_s * 1000),
        archives={**DEMO_ARCHIVES, **load_archives(tenants)},
        list_page_size=SIM_LIST_PAGE_SIZE,
        public_url=SIM_PUBLIC_URL,
    )


def sim_limits(options: SimulateOptions) -> Limits:
    """The bounds a simulation's nodes are configured with (``simulation_config``)."""
    return Limits(SIM_LIST_PAGE_SIZE, int(options.state_ttl_s * 1000))


def races(tally: Tally) -> dict[str, int]:
    """Flows of each race kind that got past round 1 (so their race was really exercised)."""
    return {k: v["completed"] for k, v in tally.per_kind().items()}


def _read_store(
    url: str, prefix: str, tenants: list[str], since_ms: int = 0
) -> tuple[Any, Any, Any, int]:
    client = sync_client(url, decode_responses=True)
    try:
        journal = read_journal(client, prefix, tenants, since_ms)
        final = read_final_notes(client, prefix, tenants)
        replay = list_replay_entries(client, prefix, tenants)
        sec, usec = client.time()
        return journal, final, replay, int(sec) * 1000 + int(usec) // 1000
    finally:
        client.close()


def redis_offset_ms(url: str) -> int:
    client = sync_client(url)
    try:
        sec, usec = client.time()
        return int(sec) * 1000 + int(usec) // 1000 - int(time.time() * 1000)
    finally:
        client.close()


def drop_keys(url: str, prefix: str) -> None:
    client = sync_client(url)
    try:
        batch = list(scan_keys(client, f"{prefix}:*"))  # on a cluster: every master
        for i in range(0, len(batch), 500):
            client.delete(*batch[i : i + 500])
    finally:
        client.close()


async def drop_keys_shielded(url: str, prefix: str) -> None:
    """``drop_keys`` that runs to its end even in a cancelled run (a stop signal); a store that
    does not answer then is logged, not raised over the run's own error."""
    import logging

    with trio.CancelScope(shield=True):
        try:
            await trio.to_thread.run_sync(drop_keys, url, prefix)
        except (redis.RedisError, OSError) as exc:
            logging.getLogger("cluster.simulate").warning(
                "could not drop the run's keys (%s:*): %s", prefix, exc
            )


def key_distribution(url: str, prefix: str) -> dict[str, int] | None:
    """Keys under ``prefix`` per master when ``url`` is a Redis Cluster, else None."""
    client = sync_client(url)
    try:
        if not isinstance(client, redis.cluster.RedisCluster):
            return None
        return keys_per_master(client, prefix)
    finally:
        client.close()


async def simulate(
    options: SimulateOptions, on_flow: Callable[[FlowSample], None] | None = None
) -> Simulation:
    """Run the workload on an in-process cluster and check the recorded history."""
    if options.workers > 1 and options.worker is None:
        from cluster.experiments.workers import (
            simulate_workers,  # the parent of several load processes
        )

        return await simulate_workers(options)
    settings = options.settings
    if settings.tag == "run":
        settings = replace(settings, tag=secrets.token_hex(3))
        options = replace(options, settings=settings)
    config = simulation_config(options.state_ttl_s, settings.tenants)
    prefix = options.prefix or ("nc" if options.redis_url is None else new_prefix())
    tenants = tenant_names(settings.tenants)
    if options.wait_replicas and options.redis_url is None:
        raise ValueError("wait_replicas needs a real Redis: the embedded store has no WAIT")
    keep = options.run_dir is None or settings.flows <= KEEP_OPS_MAX
    if options.keep_history is not None and options.run_dir is not None:
        keep = options.keep_history
    first_index = (options.worker or 0) * INDEX_STRIDE
    history = open_history(options.run_dir, keep=keep, first_index=first_index)
    dist: dict[str, int] | None = None
    owns_keys = options.redis_url is not None and not options.keep_keys
    dropped = False
    try:
        async with (
            store_nemeses(options) as nemeses,
            open_local_cluster(
                config,
                options.nodes,
                redis_url=options.redis_url,
                prefix=prefix,
                seed=not options.worker,
                replay_grace_ms=SIM_REPLAY_GRACE_MS,
                store_options=store_options(options, prefix, nemeses),
            ) as cluster,
        ):
            url = cluster.redis_url
            offset = await trio.to_thread.run_sync(redis_offset_ms, url)
            await scripts_loaded(cluster)
            async with legacy_nodes(options, cluster) as legacy:
                stats, faults = await _load(
                    options, cluster, config, history, offset, on_flow, legacy, nemeses
                )
            close_history(history)
            if options.worker is not None:
                return _recorded(options, stats, history, faults)
            result = await check_run(
                history,
                url,
                prefix,
                tenants,
                offset,
                SIM_REPLAY_GRACE_MS,
                options.run_dir,
                limits=sim_limits(options),
                faults=faults,
            )
            if options.redis_url is not None:
                dist = await trio.to_thread.run_sync(key_distribution, url, prefix)
            if owns_keys:
                await trio.to_thread.run_sync(drop_keys, url, prefix)
                dropped = True
    finally:
        close_history(history)
        if owns_keys and not dropped:  # failed or interrupted: leave nothing behind
            assert options.redis_url is not None
            await drop_keys_shielded(options.redis_url, prefix)
    store = "embedded" if options.redis_url is None else "redis"
    if dist is not None:
        store = "redis-cluster"
    result = judge(result, stats.tally, settings.legacy_share, options.exercise, settings.weights)
    sim = Simulation(
        result, stats, history, races(stats.tally), options.run_dir, options, store, dist, faults
    )
    return finish(sim)


async def scripts_loaded(cluster: LocalCluster) -> None:
    """Load the store's scripts into Redis before the load, as a served node's readiness probe
    does (``NoteStore.check_ready``) before a load balancer sends it anything: a run starts on
    a ready store, so its faults meet the store's handling of lost replies, not a cold cache."""
    first = cluster.nodes[0] if cluster.nodes else None
    if first is not None and isinstance(first.store, NoteStore):
        await first.store.check_ready()


def new_prefix() -> str:
    """A fresh key prefix for a run on a shared Redis."""
    return "ncsim" + secrets.token_hex(4)


def _recorded(
    options: SimulateOptions, stats: RunStats, history: History, faults: list[FaultRecord]
) -> Simulation:
    """A worker's part: its history is on disk; write its tally and latency, check nothing."""
    assert options.run_dir is not None
    write_tally(options.run_dir, stats.tally)
    (options.run_dir / LATENCY_FILE).write_bytes(stats.histogram.encode())
    extra = {"max_exp_ms": history.max_exp_ms, "started_wall_ms": stats.started_wall_ms}
    (options.run_dir / "worker.json").write_text(json.dumps(extra) + "\n", encoding="utf-8")
    write_faults(options.run_dir, faults)
    result = CheckResult((Verdict("checked", "unknown", "A worker records; its parent checks."),))
    return Simulation(result, stats, history, races(stats.tally), options.run_dir, options, "")


def stream_timeout(options: SimulateOptions) -> float:
    """The nodes' Redis timeout: as set, else the short fault-run one under ``redis`` and
    ``stall`` faults (so a pause outlasts it), else the default."""
    if options.stream_timeout_s is not None:
        return options.stream_timeout_s
    short = bool(options.faults & SHORT_TIMEOUT_KINDS)
    return FAULT_STREAM_TIMEOUT_S if short else StoreOptions.stream_timeout_s


@dataclass(frozen=True)
class StoreNemeses:
    """What stands between a run's nodes and Redis for ``lost-reply`` and ``stall``: the store
    seam (embedded store) or a reply-dropping proxy (a real Redis)."""

    seam: StoreFaults | None = None
    proxy: ReplyDroppingProxy | None = None
    proxy_url: str | None = None


@asynccontextmanager
async def store_nemeses(options: SimulateOptions) -> AsyncIterator[StoreNemeses]:
    """The seam or the proxy the run's fault kinds need (nothing for the others)."""
    kinds = options.faults if options.injected is None else options.injected
    seed = options.settings.seed if options.fault_seed is None else options.fault_seed
    if options.redis_url is None:
        seam = StoreFaults(seed, stream_timeout(options)) if kinds & STORE_SEAM_KINDS else None
        yield StoreNemeses(seam=seam)
        return
    if "lost-reply" not in kinds:
        yield StoreNemeses()
        return
    if await is_cluster(options.redis_url):
        raise FaultUsageError(
            "--faults lost-reply needs the embedded store or a single Redis: a Redis Cluster's "
            "clients follow the cluster's own node addresses past any proxy"
        )
    parts = urlsplit(options.redis_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    async with open_reply_dropping_proxy(host, port) as proxy:
        db = int(parts.path.strip("/") or 0)
        yield StoreNemeses(proxy=proxy, proxy_url=proxy.url(db))


def store_options(
    options: SimulateOptions, prefix: str, nemeses: StoreNemeses | None = None
) -> StoreOptions:
    """How the run's nodes open the store: named connections when faults are injected (so
    ``CLIENT KILL`` finds exactly them), a short Redis timeout under ``redis`` and ``stall``
    faults, through the store nemeses' seam or proxy."""
    faulty = bool(options.faults or options.custom_faults)
    nemeses = nemeses or StoreNemeses()
    return StoreOptions(
        wait_replicas=options.wait_replicas,
        stream_timeout_s=stream_timeout(options),
        client_name=prefix if faulty else None,
        connect_url=nemeses.proxy_url,
        store_faults=nemeses.seam,
    )


async def _load(
    options: SimulateOptions,
    cluster: LocalCluster,
    config: NodeConfig,
    history: History,
    offset_ms: int,
    on_flow: Callable[[FlowSample], None] | None,
    legacy: LegacyHttp | None = None,
    nemeses: StoreNemeses | None = None,
) -> tuple[RunStats, list[FaultRecord]]:
    """Run the load, with the fault injector alongside when faults were asked for."""
    settings = options.settings

    async def load(transport: Any) -> RunStats:
        return await run_load(
            transport,
            config.key_ring,
            config.server_name,
            settings,
            history,
            redis_offset_ms=offset_ms,
            on_flow=on_flow,
            legacy=legacy,
        )

    plain: Any = InProcessTransport(cluster)
    if options.transport_hook is not None:
        plain = options.transport_hook(plain)
    if not (options.faults or options.custom_faults):
        return await load(plain), []
    injector: FaultInjector = await open_injector(
        cluster,
        plain,
        options.faults if options.injected is None else options.injected,
        seed=settings.seed if options.fault_seed is None else options.fault_seed,
        horizon_s=settings.duration_s,
        client_name_prefix=f"{cluster.prefix}-node-",
        custom=options.custom_faults,
        store_faults=nemeses.seam if nemeses else None,
        proxy=nemeses.proxy if nemeses else None,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(injector.run)
        stats = await load(injector.transport)
        nursery.cancel_scope.cancel()
    return stats, injector.records


@asynccontextmanager
async def legacy_nodes(
    options: SimulateOptions, cluster: LocalCluster
) -> AsyncIterator[LegacyHttp | None]:
    """HTTP nodes over the run's store for the legacy share (None without one)."""
    if options.settings.legacy_share <= 0:
        yield None
        return
    async with serve_legacy_nodes(
        cluster.config,
        cluster.redis_url,
        embedded=cluster.embedded,
        prefix=cluster.prefix,
        nodes=options.nodes,
        tokens=load_tokens(options.settings.tenants),
        replay_grace_ms=SIM_REPLAY_GRACE_MS,
        wait_replicas=options.wait_replicas,
    ) as legacy:
        yield legacy


async def check_run(
    history: History,
    url: str,
    prefix: str,
    tenants: list[str],
    offset_ms: int,
    grace_ms: int,
    run_dir: Path | None = None,
    *,
    limits: Limits | None = None,
    faults: Sequence[FaultRecord] | None = None,
    since_ms: int = 0,
) -> CheckResult:
    """Wait until every state of the run expired plus grace, read the store, check the history.
    With a run folder, the store facts are written into it first (with ``limits`` and the fault
    windows) and the check streams the folder tenant by tenant (``loadgen.check.partition``);
    without one, it runs in memory. ``faults`` None: no fault record, unknown outcomes not held to
    it. Journal entries before ``since_ms`` (Redis clock) are another run's and not read."""
    await wait_for_expiry(history.max_exp_ms, offset_ms, grace_ms)
    if run_dir is not None:
        if faults is not None:
            write_faults(run_dir, faults)
        bounds = None if limits is None else limits.to_json()
        await trio.to_thread.run_sync(
            partial(dump_store_facts, limits=bounds, since_ms=since_ms),
            run_dir,
            url,
            prefix,
            tenants,
            grace_ms,
        )
        return await trio.to_thread.run_sync(check_folders, history_files(run_dir), run_dir)
    journal, final, replay, redis_end_ms = await trio.to_thread.run_sync(
        _read_store, url, prefix, tenants, since_ms
    )
    windows = None if faults is None else [FaultWindow.from_record(_row(r)) for r in faults]
    return check(
        history.ops,
        journal,
        final,
        replay,
        redis_end_ms=redis_end_ms,
        grace_ms=grace_ms,
        limits=limits,
        faults=windows,
    )


def _row(record: FaultRecord) -> dict[str, Any]:
    return {
        "kind": record.kind,
        "action": record.action,
        "start_wall": record.start_wall,
        "end_wall": record.end_wall,
    }


async def wait_for_expiry(last_exp_ms: int, offset_ms: int, grace_ms: int) -> None:
    """Sleep until ``last_exp_ms`` plus grace (Redis clock) and a settling margin passed."""
    wait_ms = last_exp_ms + grace_ms - (int(time.time() * 1000) + offset_ms)
    await trio.sleep(max(0.0, wait_ms / 1000) + EXPIRY_SETTLE_S)


def finish(sim: Simulation) -> Simulation:
    """Write ``results.json`` into the run folder (if any) and return ``sim``."""
    if sim.run_dir is not None:
        write_tally(sim.run_dir, sim.stats.tally)
        (sim.run_dir / "results.json").write_text(
            json.dumps(sim.to_json(), indent=2) + "\n", encoding="utf-8"
        )
    return sim
