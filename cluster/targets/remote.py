"""``notes-cluster loadgen``: the race workload against remote HTTP nodes.

Layer: cluster (a target). A composition of the run pipeline (``loadgen.run``) with remote
nodes as its target (``RemoteTarget``): drives nodes it did not start, over Streamable HTTP;
reads the store (when given its URL) only after the run, to check invariants. It needs the
cluster's key ring to learn each state's nonce and expiry for the history (a trusted harness),
and a bearer token per principal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import trio

from loadgen.check.exercise import ExerciseRule
from loadgen.legacy_clients import LegacyHttp
from loadgen.run.folder import RunFolder
from loadgen.run.pipeline import Plan, Run, redis_offset_ms, run
from loadgen.run.target import StoreAccess
from loadgen.runner import FlowSample, RunSettings
from loadgen.tenants import tenants as tenant_names
from loadgen.transport import HttpTransport, Transport
from nodes.sealing import KeyRing
from nodes.serving.settings import ClusterSettings
from store.notes import DEFAULT_PREFIX

HTTP_POOL = 256
"""Connections the load generator keeps open to the nodes (keep-alive)."""

JOURNAL_SINCE_MARGIN_MS = 100
"""The run's journal is read from its start less this (the clock offset is read over a round
trip); an earlier run checked its own journal only after every state expired plus grace, so
nothing of it falls in the margin."""

READY_POLL_S = 0.2
"""How often ``wait_until_ready`` asks a target that is not ready yet."""


class TargetsNotReady(RuntimeError):
    """A target did not answer ``/readyz`` with 200 in time."""


def readyz_url(target: str) -> str:
    """A node endpoint's readiness probe: ``http://h:p/mcp`` -> ``http://h:p/readyz``."""
    parts = urlsplit(target)
    return urlunsplit((parts.scheme, parts.netloc, "/readyz", "", ""))


async def wait_until_ready(urls: Sequence[str], timeout_s: float) -> None:
    """Return once every target's ``/readyz`` answers 200 (so a load started right after
    ``serve ... &`` does not race the nodes' start); ``TargetsNotReady`` after ``timeout_s``."""
    pending = {readyz_url(u): u for u in urls}
    last: dict[str, str] = {}
    async with httpx.AsyncClient(timeout=2.0) as client:
        with trio.move_on_after(timeout_s):
            while pending:
                for probe in list(pending):
                    try:
                        status = (await client.get(probe)).status_code
                    except httpx.HTTPError as exc:
                        last[probe] = type(exc).__name__
                        continue
                    if status == 200:
                        del pending[probe]
                    else:
                        last[probe] = f"HTTP {status}"
                if pending:
                    await trio.sleep(READY_POLL_S)
    if pending:
        probe = next(iter(pending))
        raise TargetsNotReady(
            f"{pending[probe]} not ready after {timeout_s:g} s ({probe}: "
            f"{last.get(probe, 'no answer')}); is the node running?"
        )


@dataclass
class RemoteTarget:
    """Nodes someone else started, over HTTP (a ``loadgen.run.target.Target``); they inject no
    faults and keep no fault record."""

    transport: Transport
    settings: ClusterSettings
    nodes: int
    store: StoreAccess | None
    legacy: LegacyHttp | None = None

    @property
    def key_ring(self) -> KeyRing:
        return self.settings.node.key_ring

    @property
    def audience(self) -> str:
        return self.settings.node.server_name

    def describe(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "store": "remote",
            "state_ttl_s": self.settings.node.state_ttl_ms / 1000,
            "replay_grace_ms": self.settings.replay_grace_ms,
        }

    async def nemesis(self) -> None:
        return None

    def fault_rows(self) -> list[dict[str, Any]] | None:
        return None

    def fault_windows(self, started_s: float) -> list[dict[str, Any]]:
        return []

    async def key_distribution(self) -> dict[str, int] | None:
        return None


async def run_remote(
    urls: Sequence[str],
    settings: ClusterSettings,
    tokens: Mapping[str, str],
    run_settings: RunSettings,
    *,
    redis_url: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    run_dir: Path | None = None,
    on_flow: Callable[[FlowSample], None] | None = None,
    exercise: ExerciseRule | None = None,
    process: int = 0,
) -> Run:
    """Run the workload against ``urls`` and, given ``redis_url``, check the history. Load
    process ``process`` of several gets its own flow ids and history indices."""
    # The nodes outlive the run: a flow cut short deletes its notes through them.
    run_settings = replace(run_settings, clean_up_cut_short=True)
    rule = exercise or ExerciseRule()
    # A store outlives runs: each run's titles are its own (``fresh``); the history streams to
    # the folder, not kept in memory too.
    plan = Plan(run_settings, rule, process, keep_history=False).fresh()
    store = None
    if redis_url is not None:  # without it the Redis clock is unknown: check reads all
        # The store outlives runs: its journal holds earlier loads' entries, which this run's
        # history cannot explain. Only entries from now on (Redis clock) are this run's.
        offset = await trio.to_thread.run_sync(redis_offset_ms, redis_url)
        since_ms = int(time.time() * 1000) + offset - JOURNAL_SINCE_MARGIN_MS
        tenants = tuple(tenant_names(plan.settings.tenants))
        store = StoreAccess(redis_url, prefix, tenants, settings.replay_grace_ms, None, since_ms)
    limits = httpx.Limits(max_connections=HTTP_POOL, max_keepalive_connections=HTTP_POOL)
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
        transport = HttpTransport(urls, dict(tokens), client)
        target = RemoteTarget(transport, settings, len(urls), store)
        folder = None if run_dir is None else RunFolder(run_dir)
        return await run(target, plan, folder, on_flow)
