"""Per-node clocks of a deterministic run: each node's wall clock off the Redis clock by a seeded
offset and drift, within the margin the nodes promise to tolerate.

Layer: cluster. In a deterministic run the Redis clock (the in-process store's ``TIME``) is the
virtual wall clock. A node reads its own clock (``NodeConfig.node_clock_ms``) only for its early
reject, which must never refuse a state the Redis clock still honours: a node whose clock is
ahead by less than ``NODE_CLOCK_MARGIN_MS`` refuses nothing early, whatever the skew. Each node
gets an offset drawn in ``±SKEW_SHARE`` of that margin and a drift of up to ``MAX_DRIFT_PPM``;
a restarted node keeps its clock (the machine is the same).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from cluster.deterministic.world import stream
from cluster.local import LocalCluster, StoreOptions
from cluster.stores import seed_demo
from nodes.config import NODE_CLOCK_MARGIN_MS, NodeConfig
from store.notes import NoteStore

SKEW_SHARE = 0.99
"""Offsets are drawn within this share of ``NODE_CLOCK_MARGIN_MS``, either way."""

MAX_DRIFT_PPM = 200.0
"""Largest drift of a node's clock, in parts per million (a cheap crystal is 20 to 100)."""


@dataclass(frozen=True)
class NodeClock:
    """One node's clock: the Redis clock plus ``offset_ms`` plus ``drift_ppm`` of the time
    elapsed since ``origin_ms`` (Redis clock)."""

    offset_ms: int
    drift_ppm: float
    origin_ms: int

    def __call__(self) -> int:
        redis_ms = int(time.time() * 1000)
        return redis_ms + self.offset_ms + int((redis_ms - self.origin_ms) * self.drift_ppm / 1e6)

    def to_json(self) -> dict[str, Any]:
        return {"offset_ms": self.offset_ms, "drift_ppm": round(self.drift_ppm, 3)}


@dataclass
class NodeClocks:
    """The clocks of a run's nodes, drawn from the seed (``offsets_ms`` given: those, no
    drift; a test sets them)."""

    seed: int
    margin_ms: int = NODE_CLOCK_MARGIN_MS
    offsets_ms: tuple[int, ...] | None = None
    clocks: dict[int, NodeClock] = field(default_factory=dict)

    def for_node(self, index: int) -> NodeClock:
        """Node ``index``'s clock (drawn on first use, kept across restarts)."""
        if index not in self.clocks:
            origin = int(time.time() * 1000)
            if self.offsets_ms is not None:
                clock = NodeClock(self.offsets_ms[index % len(self.offsets_ms)], 0.0, origin)
            else:
                rng = stream(self.seed, f"node-clock:{index}")
                bound = int(self.margin_ms * SKEW_SHARE)
                drift = rng.uniform(-MAX_DRIFT_PPM, MAX_DRIFT_PPM)
                clock = NodeClock(rng.randint(-bound, bound), drift, origin)
            self.clocks[index] = clock
        return self.clocks[index]

    def to_json(self) -> list[dict[str, Any]]:
        return [self.clocks[i].to_json() for i in sorted(self.clocks)]


@dataclass
class SkewedCluster(LocalCluster):
    """A ``LocalCluster`` whose node ``i`` runs on ``clocks.for_node(i)``."""

    clocks: NodeClocks | None = None

    async def start_node(self, index: int) -> Any:
        if self.clocks is None:
            return await super().start_node(index)
        shared = self.config
        clock: Callable[[], int] = self.clocks.for_node(index)
        self.config = replace(shared, node_clock_ms=clock)
        try:  # the node's task reads ``self.config`` before ``start`` returns
            return await super().start_node(index)
        finally:
            self.config = shared


@asynccontextmanager
async def open_skewed_cluster(
    config: NodeConfig,
    n_nodes: int,
    url: str,
    *,
    clocks: NodeClocks | None,
    prefix: str,
    replay_grace_ms: int,
    store_options: StoreOptions,
) -> AsyncIterator[SkewedCluster]:
    """``cluster.local.open_local_cluster`` on ``url`` (an in-process store), each node on its
    own clock, the demo notes seeded."""
    async with trio.open_nursery() as nursery:
        cluster = SkewedCluster(
            config, url, True, prefix, nursery, replay_grace_ms, store_options, clocks=clocks
        )
        for i in range(n_nodes):
            await cluster.start_node(i)
        first = cluster.nodes[0]
        assert first is not None
        store: object = first.store
        while not isinstance(store, NoteStore) and hasattr(store, "inner"):
            store = store.inner  # a test's planted store (``run.planted_store``) wraps the real
        assert isinstance(store, NoteStore)
        await seed_demo(store)
        try:
            yield cluster
        finally:
            nursery.cancel_scope.cancel()
