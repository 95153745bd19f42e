"""A TCP proxy between nodes and a real Redis that can lose replies: the ``lost-reply`` nemesis.

Layer: cluster. Forwards every byte both ways; while ``p`` > 0, a chunk of reply bytes coming
back from Redis is, with probability ``p``, dropped and both connections closed: Redis ran the
command, the node's client sees its connection die without the reply (``ConnectionError``), and
must not write twice or claim that nothing happened. A single Redis only: a Redis Cluster's
clients follow the cluster's own node addresses (``CLUSTER SLOTS``), past any proxy.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import trio

CHUNK = 65_536


class ReplyDroppingProxy:
    """Loses replies with probability ``p`` (0: a plain proxy)."""

    def __init__(self, upstream_host: str, upstream_port: int, seed: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.p = 0.0
        self.lost = 0
        self.connections = 0
        self._rng = random.Random(f"reply-proxy:{seed}")  # noqa: S311 - a fault schedule

    async def serve(self, listeners: list[trio.SocketListener]) -> None:
        """Accept and forward until cancelled."""
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        self.connections += 1
        try:
            upstream = await trio.open_tcp_stream(*self.upstream)
        except OSError:
            await client.aclose()
            return
        async with client, upstream, trio.open_nursery() as nursery:

            async def requests() -> None:
                async for data in client:
                    await upstream.send_all(data)
                nursery.cancel_scope.cancel()

            async def replies() -> None:
                async for data in upstream:
                    if self.p > 0 and self._rng.random() < self.p:
                        self.lost += 1
                        break  # the command ran; its reply never arrives
                    await client.send_all(data)
                nursery.cancel_scope.cancel()

            nursery.start_soon(requests)
            nursery.start_soon(replies)


@asynccontextmanager
async def open_reply_proxy(
    redis_url: str, seed: int
) -> AsyncIterator[tuple[str, ReplyDroppingProxy]]:
    """A proxy in front of ``redis_url`` on a free loopback port: (the URL to reach Redis
    through it, the proxy)."""
    parts = urlsplit(redis_url)
    proxy = ReplyDroppingProxy(parts.hostname or "127.0.0.1", parts.port or 6379, seed)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    netloc = f"127.0.0.1:{port}"
    if parts.username or parts.password:
        netloc = f"{parts.username or ''}:{parts.password or ''}@{netloc}"
    url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(proxy.serve, listeners)
        try:
            yield url, proxy
        finally:
            nursery.cancel_scope.cancel()
