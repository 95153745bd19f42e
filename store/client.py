"""Opening Redis clients for the nodes and checking the server is fit for a replay store.

Layer: store. Knows coredis and Redis server settings; nothing of MCP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import coredis

SAFE_EVICTION_POLICIES = frozenset({"noeviction"})
"""Only ``noeviction`` is safe: replay entries carry a TTL, so even the ``volatile-*`` policies
may evict one early, and a forgotten replay entry lets a confirmation execute twice."""

STREAM_TIMEOUT_S = 5.0
"""A Redis reply slower than this is treated as an unknown outcome (see StoreUnavailable)."""


class UnsafeStore(RuntimeError):
    """The Redis server could lose replay entries; the node refuses to start on it."""


def redis_client(url: str, *, max_connections: int = 64) -> coredis.Redis[str]:
    """A coredis client for ``url`` (``redis://host:port/db``), decoding replies as text."""
    return coredis.Redis.from_url(
        url,
        decode_responses=True,
        stream_timeout=STREAM_TIMEOUT_S,
        connect_timeout=STREAM_TIMEOUT_S,
        max_connections=max_connections,
    )


async def check_eviction_policy(client: coredis.Redis[str]) -> None:
    """Raise UnsafeStore unless the server's ``maxmemory-policy`` can never evict a replay entry."""
    settings = await client.config_get(["maxmemory-policy"])
    policy = str(settings.get("maxmemory-policy", ""))
    if policy not in SAFE_EVICTION_POLICIES:
        raise UnsafeStore(
            f"Redis maxmemory-policy is {policy!r}: it could evict replay entries and let a "
            "confirmation execute twice; set it to 'noeviction'"
        )


@asynccontextmanager
async def open_redis(url: str, *, embedded: bool = False) -> AsyncIterator[coredis.Redis[str]]:
    """Open a client, check the eviction policy (skipped for the embedded store, which never
    evicts and has no CONFIG command), and close the client on exit."""
    client = redis_client(url)
    async with client:
        if not embedded:
            await check_eviction_policy(client)
        yield client
