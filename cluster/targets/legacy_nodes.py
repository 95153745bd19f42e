"""HTTP nodes for the legacy share of a simulation, and the legacy clients' wire to them.

Layer: cluster. The in-process transport has no sockets, and a legacy 2025-11-25 call needs them:
its result streams while its answer arrives on another request. So a simulation with a legacy
share also serves its store over HTTP nodes on loopback (``cluster.serve``), which the legacy
clients (``loadgen.legacy_clients``) reach through a ``LegacyHttp``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import trio

from cluster.serve import start_http_nodes
from loadgen.clients import REQUEST_TIMEOUT_S
from loadgen.legacy_clients import HTTP_POOL, LegacyHttp
from nodes.auth import TokenTable
from nodes.config import NodeConfig
from nodes.serving.settings import ClusterSettings
from store.sessions import SessionStore


@asynccontextmanager
async def serve_legacy_nodes(
    config: NodeConfig,
    redis_url: str,
    *,
    embedded: bool,
    prefix: str,
    nodes: int,
    tokens: dict[str, str],
    replay_grace_ms: int,
    wait_replicas: int = 0,
    session_wrap: Callable[[SessionStore], SessionStore] | None = None,
) -> AsyncIterator[LegacyHttp]:
    """``nodes`` HTTP nodes on loopback over the store at ``redis_url`` under ``prefix`` (with
    ``config``: the key ring and scope of the in-process nodes beside them; the legacy adapter
    mounted by ``cluster.serve``), and the legacy wire to them. ``tokens``: bearer token ->
    principal; ``session_wrap``: a planted defect in each node's session store."""
    settings = ClusterSettings(
        node=config,
        tokens=TokenTable.from_plain(tokens),
        replay_grace_ms=replay_grace_ms,
        wait_replicas=wait_replicas,
    )
    limits = httpx.Limits(max_connections=HTTP_POOL, max_keepalive_connections=HTTP_POOL)
    async with trio.open_nursery() as nursery:
        urls = await start_http_nodes(
            nursery,
            settings,
            redis_url,
            count=nodes,
            embedded=embedded,
            prefix=prefix,
            name="http-node",
            session_wrap=session_wrap,
        )
        async with httpx.AsyncClient(limits=limits, timeout=REQUEST_TIMEOUT_S) as client:
            yield LegacyHttp(urls, {p: t for t, p in tokens.items()}, client)
        nursery.cancel_scope.cancel()
