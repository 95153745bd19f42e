"""The legacy share of a deterministic run: the legacy nodes' ASGI apps, reached with no socket.

Layer: cluster. A legacy 2025-11-25 call streams its result (SSE) while its answer arrives on
another request, so legacy flows need HTTP, not the in-process transport. In a deterministic run
each legacy node is the app ``cluster.serve.open_node_app`` builds for an HTTP node (the note
store and the legacy session store on the store's own client, the blocking inbox reads on a
connection of their own, the legacy adapter, the operator's middleware), over the run's
in-process store, and the legacy clients (``loadgen.legacy_clients.LegacyHttp``) reach it
through ``cluster.memory_http.MemoryASGITransport``: every request a task of this run's trio
scheduler, every byte on its virtual clock.

As in the real-time target (``cluster.targets.legacy_nodes``), legacy flows go to these nodes
only, so node and client faults do not reach them; legacy node ``i`` reads the clock of the
run's node ``i`` (``cluster.deterministic.clocks``): the same machine serves both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import httpx
import trio

from cluster.deterministic.clocks import NodeClocks
from cluster.memory_http import MemoryASGITransport, memory_urls
from cluster.serve import NodeSeams, open_node_app
from loadgen.clients import REQUEST_TIMEOUT_S
from loadgen.legacy_clients import LegacyHttp
from nodes.auth import TokenTable
from nodes.config import NodeConfig
from nodes.http import ASGIApp
from nodes.serving.settings import ClusterSettings
from store.sessions import SessionStore

LEGACY_HOST = "legacy-node-{}"
"""Host name of legacy node ``i`` in the transport's URLs."""


@asynccontextmanager
async def open_memory_legacy_nodes(
    config: NodeConfig,
    url: str,
    *,
    prefix: str,
    nodes: int,
    tokens: dict[str, str],
    replay_grace_ms: int,
    clocks: NodeClocks | None,
    store_wrap: Callable[[Any], Any] | None = None,
    sessions_wrap: Callable[[SessionStore], SessionStore] | None = None,
) -> AsyncIterator[LegacyHttp]:
    """``nodes`` legacy nodes over the in-process store at ``url`` under ``prefix`` (with
    ``config``: the key ring and scope of the run's nodes), and the legacy wire to them.
    ``tokens``: bearer token -> principal. ``store_wrap`` and ``sessions_wrap``: a planted
    defect's (``store.simulation.plants``), test seams only."""
    settings = ClusterSettings(
        node=config,
        tokens=TokenTable.from_plain(tokens),
        replay_grace_ms=replay_grace_ms,
        wait_replicas=0,
    )
    seams = NodeSeams(store=store_wrap, sessions=sessions_wrap)
    async with trio.open_nursery() as nursery:
        apps: dict[str, ASGIApp] = {}
        for i in range(nodes):
            own = settings
            if clocks is not None:
                own = replace(settings, node=replace(config, node_clock_ms=clocks.for_node(i)))
            host = LEGACY_HOST.format(i)
            apps[host] = await nursery.start(_serve, own, url, host, prefix, seams)
        transport = MemoryASGITransport(apps, nursery)
        async with httpx.AsyncClient(transport=transport, timeout=REQUEST_TIMEOUT_S) as client:
            yield LegacyHttp(memory_urls(list(apps)), {p: t for t, p in tokens.items()}, client)
        nursery.cancel_scope.cancel()


async def _serve(
    settings: ClusterSettings,
    url: str,
    node_id: str,
    prefix: str,
    seams: NodeSeams,
    *,
    task_status: trio.TaskStatus[ASGIApp] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with open_node_app(
        settings, url, embedded=True, node_id=node_id, prefix=prefix, seams=seams
    ) as (_, app, _ops):
        task_status.started(app)
        await trio.sleep_forever()
