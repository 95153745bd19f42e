"""``Target``: what a run runs against, as the pipeline sees it.

Layer: loadgen. A Protocol defined here and implemented in ``cluster`` (as ``Transport`` is):
in-process nodes with their faults composed in (``cluster.targets.in_process.InProcessTarget``) and
remote HTTP nodes (``cluster.targets.remote.RemoteTarget``); a deterministic target and a foreign
server plug in the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from loadgen.check.limits import Limits
from loadgen.legacy_clients import LegacyHttp
from loadgen.transport import Transport
from nodes.sealing import KeyRing


@dataclass(frozen=True)
class StoreAccess:
    """Where and how the store facts of a run are read (``RunFolder.dump_store_facts``)."""

    url: str
    prefix: str
    tenants: tuple[str, ...]
    replay_grace_ms: int
    limits: Limits | None = None
    journal_since_ms: int = 0
    """A store outliving the run: its journal is read from here on (Redis clock; 0: all)."""
    inline: bool = False
    """Read it (and check) in the run's own thread: an in-process store under virtual time
    (``cluster.deterministic``), beside which no thread may run. Else in a worker thread."""


class Target(Protocol):
    """A cluster to run the load against: its transport, key ring and audience, its store (for
    the facts the check reads), its key prefix, replay grace and tenants, and its faults."""

    @property
    def transport(self) -> Transport:
        """How the load reaches the nodes (faults on the way composed in)."""
        ...

    @property
    def key_ring(self) -> KeyRing:
        """Opens the states the nodes seal (a trusted harness learns nonce and expiry)."""
        ...

    @property
    def audience(self) -> str:
        """The server name states are sealed for."""
        ...

    @property
    def legacy(self) -> LegacyHttp | None:
        """HTTP nodes for the legacy share of the flows (None: no legacy share)."""
        ...

    @property
    def store(self) -> StoreAccess | None:
        """The store's facts (None: the history is recorded, not checked)."""
        ...

    def describe(self) -> dict[str, Any]:
        """The target's part of ``results.json``'s settings: ``nodes``, ``store`` (embedded,
        redis, redis-cluster or remote), ``state_ttl_s`` and ``replay_grace_ms``, and when
        injected ``faults``, ``fault_seed``, ``wait_replicas``."""
        ...

    async def nemesis(self) -> None:
        """Inject the run's faults until cancelled (return at once for none)."""
        ...

    def fault_rows(self) -> list[dict[str, Any]] | None:
        """The faults injected, as ``faults.json`` rows (by wall clock); None: this target
        keeps no fault record (unknown outcomes are then not held to one)."""
        ...

    def fault_windows(self, started_s: float) -> list[dict[str, Any]]:
        """The faults injected, by start, with times relative to ``started_s`` (monotonic)."""
        ...

    async def key_distribution(self) -> dict[str, int] | None:
        """Keys per master after the run, on a Redis Cluster only (else None)."""
        ...
