"""In-process nodes as a run's ``Target`` (``loadgen.run.target``), with their faults composed in.

Layer: cluster (a target). Starts a cluster through ``cluster.local`` on the embedded store
or a real Redis (a fresh key prefix, dropped afterwards), reached through the in-process
transport; the fault injector (``cluster.faults``) stands between the load and the nodes, and
the store nemeses (a seam or a reply-dropping proxy) between the nodes and Redis. With a legacy
share it also serves the same store, configuration and key ring over HTTP nodes on loopback
(``legacy_nodes.serve_legacy_nodes``): the in-process transport has no sockets, and a legacy
call streams its result while its answer arrives on another request. Legacy flows go to those
nodes only, so node and client faults do not reach them; Redis faults reach every node.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import redis.cluster
import trio

from cluster.faults import (
    FAULT_STREAM_TIMEOUT_S,
    SHORT_TIMEOUT_KINDS,
    CustomFault,
    FaultInjector,
    FaultKind,
    FaultRecord,
    FaultUsageError,
    LostReplies,
    fault_records_as_rows,
    open_injector,
)
from cluster.local import (
    InProcessTransport,
    LocalCluster,
    StoreOptions,
    open_local_cluster,
)
from cluster.reply_dropping_proxy import ReplyDroppingProxy, open_reply_dropping_proxy
from cluster.store_faults import StoreFaults
from cluster.stores import needs_real_redis
from cluster.targets.legacy_nodes import serve_legacy_nodes
from loadgen.check.limits import Limits
from loadgen.legacy_clients import LegacyHttp
from loadgen.run.target import StoreAccess
from loadgen.runner import RunSettings
from loadgen.tenants import tenants as tenant_names
from loadgen.transport import Transport
from nodes.config import (
    DEFAULT_IDEMPOTENCY_WINDOW_MS,
    DEFAULT_MAX_BYTES_PER_PRINCIPAL,
    DEFAULT_MAX_NOTES_PER_PRINCIPAL,
    DEFAULT_MAX_WRITES_PER_PRINCIPAL,
    LegacyCaps,
    NodeConfig,
)
from nodes.legacy import LegacyLimits
from nodes.scope import Scope
from nodes.sealing import KeyRing
from nodes.serving.demo import DEMO_ARCHIVES, DEMO_GRANTS, DEMO_SERVER_NAME, DEMO_WORKSPACES
from nodes.serving.load_fixture import (
    load_archives,
    load_quotas,
    load_tokens,
    with_load_scope,
)
from store.client_factory import is_cluster, sync_client
from store.journal import keys_per_master, scan_keys
from store.notes import NoteStore
from store.sessions import SESSION_IDLE_TTL_MS

SIM_REPLAY_GRACE_MS = 1_000
"""Replay grace in simulations: short, so the run can show replay entries really expire."""

STORE_SEAM_KINDS = frozenset({"lost-reply", "stall"})
"""Fault kinds played at the in-process nodes' store seam on the embedded store."""

SIM_LIST_PAGE_SIZE = 2
"""``notes_list`` page size in simulations: small, so a ``list_pages`` flow's few notes take
several pages (the checker holds every page to it)."""

SIM_MAX_OFFERED = 6
"""Most notes a pick list offers in simulations: small, so a ``full_pick`` flow fills one with
a few creates (the checker holds every form to it; production's is 50)."""

SIM_PUBLIC_URL = "http://127.0.0.1:9"
"""Base of the setup links in simulations (``notes_setup`` round 1 needs one; nothing opens it:
the in-process run drives the tool up to its URL-mode elicitation, not the page)."""


@dataclass(frozen=True)
class NodesSpec:
    """What the in-process nodes are: how many, over which store, with which faults."""

    nodes: int = 3
    redis_url: str | None = None
    state_ttl_s: float = 2.0
    faults: frozenset[FaultKind] = frozenset()
    """Fault kinds of the run (``cluster.faults``): nodes, redis, client, lost-reply, stall,
    reshard."""
    fault_seed: int | None = None
    """Seed of the fault schedule; None: the run's seed."""
    custom_faults: tuple[CustomFault, ...] = ()
    """Faults beyond the kinds (the failover experiment's), played by the same injector."""
    wait_replicas: int = 0
    """Replicas every write must reach before a node answers (``WAIT``); 0: asynchronous."""
    stream_timeout_s: float | None = None
    """The nodes' Redis reply timeout; None: the default, or the short fault-run one when
    ``redis`` or ``stall`` faults are injected."""
    keep_keys: bool = False
    workers: int = 1
    """Load processes sharing the store (``cluster.targets.workers``)."""
    injected: frozenset[FaultKind] | None = None
    """The kinds actually injected, a subset of ``faults`` (a shrunk case: the nodes stay
    configured for all of ``faults``); None: all of them."""
    plant: str | None = None
    """A planted defect (``store.simulation.plants``) in the nodes' note store and the legacy
    nodes' session store; None: none."""

    def injected_kinds(self) -> frozenset[FaultKind]:
        """The fault kinds the run injects."""
        return self.faults if self.injected is None else self.injected


def simulation_config(state_ttl_s: float, tenants: int) -> NodeConfig:
    """The demo scope plus the load tenants and the small-quota tenants (with their quotas), a
    fresh key ring, and the run's state expiry."""
    scope = with_load_scope(Scope.build(DEMO_WORKSPACES, DEMO_GRANTS), tenants)
    return NodeConfig(
        server_name=DEMO_SERVER_NAME,
        scope=scope,
        key_ring=KeyRing.generate(),
        state_ttl_ms=int(state_ttl_s * 1000),
        archives={**DEMO_ARCHIVES, **load_archives(tenants)},
        list_page_size=SIM_LIST_PAGE_SIZE,
        max_offered=SIM_MAX_OFFERED,
        public_url=SIM_PUBLIC_URL,
        tenant_quotas=load_quotas(),
    )


def sim_limits(state_ttl_s: float) -> Limits:
    """The bounds a simulation's nodes are configured with (``simulation_config``)."""
    state_ttl_ms = int(state_ttl_s * 1000)
    return Limits(
        SIM_LIST_PAGE_SIZE,
        state_ttl_ms,
        max_offered=SIM_MAX_OFFERED,
        idempotency_window_ms=DEFAULT_IDEMPOTENCY_WINDOW_MS,
        legacy_session_ttl_ms=SESSION_IDLE_TTL_MS,
        legacy_marker_ttl_ms=state_ttl_ms + LegacyLimits().request_grace_ms,
        sessions_per_principal=LegacyCaps().sessions_per_principal,
        quotas={
            name: {
                "notes": q.notes or DEFAULT_MAX_NOTES_PER_PRINCIPAL,
                "bytes": q.bytes or DEFAULT_MAX_BYTES_PER_PRINCIPAL,
                "writes": q.writes or DEFAULT_MAX_WRITES_PER_PRINCIPAL,
            }
            for name, q in load_quotas().items()
        },
    )


def new_prefix() -> str:
    """A fresh key prefix for a run on a shared Redis."""
    return "ncsim" + secrets.token_hex(4)


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


def stream_timeout(spec: NodesSpec) -> float:
    """The nodes' Redis timeout: as set, else the short fault-run one under ``redis`` and
    ``stall`` faults (so a pause outlasts it), else the default."""
    if spec.stream_timeout_s is not None:
        return spec.stream_timeout_s
    short = bool(spec.faults & SHORT_TIMEOUT_KINDS)
    return FAULT_STREAM_TIMEOUT_S if short else StoreOptions.stream_timeout_s


@dataclass(frozen=True)
class StoreNemeses:
    """What stands between a run's nodes and Redis for ``lost-reply`` and ``stall``: the store
    seam (embedded store) or a reply-dropping proxy (a real Redis)."""

    seam: StoreFaults | None = None
    proxy: ReplyDroppingProxy | None = None
    proxy_url: str | None = None


@asynccontextmanager
async def store_nemeses(
    spec: NodesSpec, kinds: frozenset[FaultKind], seed: int
) -> AsyncIterator[StoreNemeses]:
    """The seam or the proxy the run's fault kinds need (nothing for the others)."""
    if spec.redis_url is None:
        seam = StoreFaults(seed, stream_timeout(spec)) if kinds & STORE_SEAM_KINDS else None
        yield StoreNemeses(seam=seam)
        return
    if "lost-reply" not in kinds:
        yield StoreNemeses()
        return
    if await is_cluster(spec.redis_url):
        raise FaultUsageError(
            "--faults lost-reply needs the embedded store or a single Redis: a Redis Cluster's "
            "clients follow the cluster's own node addresses past any proxy"
        )
    parts = urlsplit(spec.redis_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    async with open_reply_dropping_proxy(host, port) as proxy:
        db = int(parts.path.strip("/") or 0)
        yield StoreNemeses(proxy=proxy, proxy_url=proxy.url(db))


def store_options(
    spec: NodesSpec, prefix: str, nemeses: StoreNemeses | None = None
) -> StoreOptions:
    """How the run's nodes open the store: named connections when faults are injected (so
    ``CLIENT KILL`` finds exactly them), a short Redis timeout under ``redis`` and ``stall``
    faults, through the store nemeses' seam or proxy."""
    faulty = bool(spec.faults or spec.custom_faults)
    nemeses = nemeses or StoreNemeses()
    return StoreOptions(
        wait_replicas=spec.wait_replicas,
        stream_timeout_s=stream_timeout(spec),
        client_name=prefix if faulty else None,
        connect_url=nemeses.proxy_url,
        store_faults=nemeses.seam,
        wrap=None if spec.plant is None else _plant(spec.plant).wrap,
    )


def _plant(name: str) -> Any:
    """Planted defect ``name``; imported here only, so the plant machinery never reaches a node
    process."""
    from store.simulation.plants import plant

    return plant(name)


async def scripts_loaded(cluster: LocalCluster) -> None:
    """Load the store's scripts into Redis before the load, as a served node's readiness probe
    does (``NoteStore.check_ready``) before a load balancer sends it anything: a run starts on
    a ready store, so its faults meet the store's handling of lost replies, not a cold cache."""
    first = cluster.nodes[0] if cluster.nodes else None
    if first is not None and isinstance(first.store, NoteStore):
        await first.store.check_ready()


def describe(spec: NodesSpec, clustered: bool, fault_seed: int) -> dict[str, Any]:
    """The nodes' part of a run's settings (``loadgen.run.target.Target.describe``)."""
    store = "embedded" if spec.redis_url is None else "redis"
    out: dict[str, Any] = {
        "nodes": spec.nodes,
        "store": "redis-cluster" if clustered else store,
        "state_ttl_s": spec.state_ttl_s,
        "replay_grace_ms": SIM_REPLAY_GRACE_MS,
    }
    if spec.faults or spec.custom_faults:
        out["faults"] = sorted(spec.faults) + sorted({c.kind for c in spec.custom_faults})
        out["fault_seed"] = fault_seed
    if spec.wait_replicas:
        out["wait_replicas"] = spec.wait_replicas
    return out


@dataclass
class InProcessTarget:
    """In-process nodes over one store, with the run's faults (a ``loadgen.run.target.Target``)."""

    spec: NodesSpec
    cluster: LocalCluster
    transport: Transport
    legacy: LegacyHttp | None
    store: StoreAccess
    clustered: bool
    fault_seed: int
    injector: FaultInjector | None = None
    lost_replies: LostReplies = field(default_factory=LostReplies)
    """Store replies the nodes lost without an injected fault (a starved machine's timeouts)."""

    @property
    def key_ring(self) -> KeyRing:
        return self.cluster.config.key_ring

    @property
    def audience(self) -> str:
        return self.cluster.config.server_name

    def describe(self) -> dict[str, Any]:
        return describe(self.spec, self.clustered, self.fault_seed)

    async def nemesis(self) -> None:
        if self.injector is not None:
            await self.injector.run()

    def _records(self) -> list[FaultRecord]:
        injected = [] if self.injector is None else list(self.injector.records)
        return injected + self.lost_replies.records

    def fault_rows(self) -> list[dict[str, Any]] | None:
        return fault_records_as_rows(self._records())

    def fault_windows(self, started_s: float) -> list[dict[str, Any]]:
        records = sorted(self._records(), key=lambda r: r.start_mono)
        return [r.to_json(started_s) for r in records]

    async def key_distribution(self) -> dict[str, int] | None:
        if self.spec.redis_url is None:
            return None
        return await trio.to_thread.run_sync(key_distribution, self.store.url, self.store.prefix)


@asynccontextmanager
async def open_in_process_target(
    spec: NodesSpec,
    run: RunSettings,
    *,
    prefix: str | None = None,
    process: int = 0,
    transport_hook: Callable[[Transport], Transport] | None = None,
) -> AsyncIterator[InProcessTarget]:
    """Start the nodes, their store nemeses and fault injector, and the legacy share's HTTP
    nodes; on exit stop them and drop the run's keys on a real Redis (unless
    ``spec.keep_keys``: a load process of several, whose parent drops them). Load process
    ``process`` of several injects ``redis`` and ``stall`` faults only when it is process 0:
    the store is shared, so it gets one schedule (every process's nodes still get the short
    timeout and named connections)."""
    why = needs_real_redis(wait_replicas=spec.wait_replicas, workers=spec.workers)
    if why and spec.redis_url is None:
        raise ValueError(why)
    config = simulation_config(spec.state_ttl_s, run.tenants)
    owns_keys = spec.redis_url is not None and not spec.keep_keys
    prefix = prefix or ("nc" if spec.redis_url is None else new_prefix())
    seed = (run.seed if spec.fault_seed is None else spec.fault_seed) + process
    injected = spec.injected_kinds()
    kinds = injected if process == 0 else injected - {"redis", "stall"}
    # A run without faults of its own records the store replies its nodes lose anyway (a
    # starved machine's timeouts): nothing else could explain the honest "outcome unknown"
    # they lead to. A fault run's windows explain its losses, and stay the faults it injected.
    lost_replies = LostReplies()
    observe = None if (spec.faults or spec.custom_faults) else lost_replies
    try:
        async with (
            store_nemeses(spec, kinds, seed) as nemeses,
            open_local_cluster(
                config,
                spec.nodes,
                redis_url=spec.redis_url,
                prefix=prefix,
                seed=process == 0,
                replay_grace_ms=SIM_REPLAY_GRACE_MS,
                store_options=replace(store_options(spec, prefix, nemeses), on_lost_reply=observe),
            ) as cluster,
        ):
            await scripts_loaded(cluster)
            clustered = spec.redis_url is not None and await is_cluster(spec.redis_url)
            async with _legacy_nodes(spec, run, cluster) as legacy:
                plain: Transport = InProcessTransport(cluster)
                if transport_hook is not None:
                    plain = transport_hook(plain)
                injector = None
                if spec.faults or spec.custom_faults:
                    injector = await open_injector(
                        cluster,
                        plain,
                        kinds,
                        seed=seed,
                        horizon_s=run.duration_s,
                        client_name_prefix=f"{cluster.prefix}-node-",
                        custom=spec.custom_faults,
                        store_faults=nemeses.seam,
                        proxy=nemeses.proxy,
                        tenants=tuple(tenant_names(run.tenants)),
                    )
                store = StoreAccess(
                    cluster.redis_url,
                    prefix,
                    tuple(tenant_names(run.tenants)),
                    SIM_REPLAY_GRACE_MS,
                    limits=sim_limits(spec.state_ttl_s),
                )
                yield InProcessTarget(
                    spec,
                    cluster,
                    plain if injector is None else injector.transport,
                    legacy,
                    store,
                    clustered,
                    seed - process,
                    injector,
                    lost_replies,
                )
    finally:
        if owns_keys:  # also when failed or interrupted: leave nothing behind
            assert spec.redis_url is not None
            await drop_keys_shielded(spec.redis_url, prefix)


@asynccontextmanager
async def _legacy_nodes(
    spec: NodesSpec, run: RunSettings, cluster: LocalCluster
) -> AsyncIterator[LegacyHttp | None]:
    """HTTP nodes over the run's store for the legacy share (None without one)."""
    if run.legacy_share <= 0:
        yield None
        return
    async with serve_legacy_nodes(
        cluster.config,
        cluster.redis_url,
        embedded=cluster.embedded,
        prefix=cluster.prefix,
        nodes=spec.nodes,
        tokens=load_tokens(run.tenants),
        replay_grace_ms=SIM_REPLAY_GRACE_MS,
        wait_replicas=spec.wait_replicas,
        session_wrap=None if spec.plant is None else _plant(spec.plant).wrap_sessions,
    ) as legacy:
        yield legacy
