"""Opening Redis clients for the nodes and checking the server is fit for a replay store.

Layer: store. Knows the store's own client (``store.resp_client``: the note stores and the
legacy sessions, by default), coredis (both, when ``CLIENT_ENV`` chooses it; the bench and the
tests' inspection of Redis), redis-py (the tooling, sync) and Redis server settings; nothing
of MCP. A ``redis://HOST:PORT`` URL that points at a Redis Cluster node (``INFO cluster`` says
``cluster_enabled:1``) is opened as a cluster, with no other flag; a ``unix://`` URL never is
(a cluster's slot map names TCP addresses).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import anyio
import coredis
import coredis.exceptions
import coredis.retry
import redis
import redis.cluster
from coredis.connection import TCPLocation

from store.resp import ReplyError
from store.resp_client import RespRedis
from store.resp_cluster import RespCluster

SAFE_EVICTION_POLICIES = frozenset({"noeviction"})
"""Only ``noeviction`` is safe: replay entries carry a TTL, so even the ``volatile-*`` policies
may evict one early, and a forgotten replay entry lets a confirmation execute twice."""

COREDIS_FLAGS = ("COREDIS_OTEL_ENABLED", "COREDIS_OPTIMIZED", "COREDIS_RUNTIME_CHECKS")
"""coredis reads these environment variables on every command (telemetry: several times). An
unset one costs a KeyError each time, about 4% of a node's CPU per flow; set to "0" (off, their
default) unless the operator set them."""

STREAM_TIMEOUT_S = 5.0
"""A Redis reply slower than this is treated as an unknown outcome (see StoreUnavailable)."""


def no_resend_policy() -> coredis.retry.RetryPolicy:
    """The retry policy of every node client: never re-send a command by itself.

    coredis' default re-sends a command up to twice after a ConnectionError or TimeoutError, and
    either may come after Redis ran it (a lost reply, a stalled server): a script would then run
    twice. Whether a command may be sent again is the store's decision, made per script
    (``NoteStore`` re-sends only scripts that are safe to run twice: see ``store/scripts``)."""
    return coredis.retry.NoRetryPolicy()


def cluster_retry_policy() -> coredis.retry.RetryPolicy:
    """The cluster client's policy: re-send only after ``CLUSTERDOWN``, an error reply that
    Redis gives instead of running the command (so a re-send cannot run it twice); never after
    a ConnectionError or TimeoutError. MOVED, ASK and TRYAGAIN, also refusals, are followed by
    coredis' cluster client itself."""
    return coredis.retry.ConstantRetryPolicy(
        (coredis.exceptions.ClusterDownError,), retries=2, delay=0.1
    )


RESEND_PAUSE_S = 0.01
"""Pause before the store sends a command again after a lost reply: a re-send at once would
most likely meet the same dropped connection or restarting server."""

CLUSTER_RESEND_PAUSE_S = 0.1
"""The same on a Redis Cluster, where a lost reply often means a master is failing over."""


def report_lost_reply(client: NoteClient, exc: Exception) -> None:
    """Tell a coredis cluster client's slot map about a lost reply (``exc``): enough of them
    refresh it. With no retry policy of its own (``no_resend_policy``), nothing else does, and
    the client would keep sending to a dead master after a failover. Nothing to do on one Redis,
    nor on the store's own cluster client (``RespCluster`` reads its map again after any failed
    call)."""
    if isinstance(client, coredis.RedisCluster):
        client.connection_pool.cluster_layout.report_errors(None, exc)


async def before_resend(client: NoteClient, exc: Exception) -> None:
    """What the store does after a lost reply (``exc``) and before sending again: report it
    (``report_lost_reply``), then pause briefly."""
    report_lost_reply(client, exc)
    cluster = isinstance(client, coredis.RedisCluster | RespCluster)
    await anyio.sleep(CLUSTER_RESEND_PAUSE_S if cluster else RESEND_PAUSE_S)


StoreClient: TypeAlias = "coredis.Redis[str] | coredis.RedisCluster[str]"
"""What the nodes talk to: one Redis, or a Redis Cluster."""

NoteClient: TypeAlias = "StoreClient | RespRedis | RespCluster"
"""What a ``NoteStore`` talks to: the store's own client (``store.resp_client``) or coredis."""

CLIENT_ENV = "NOTES_CLUSTER_REDIS_CLIENT"
"""Which client a note store uses: ``resp`` (the default: the store's own, ``store.resp_client``;
on a Redis Cluster its slot-routing ``RespCluster``) or ``coredis``. A node's legacy sessions
(``store.sessions``) use the same client; on the store's own, their blocking ``XREAD`` goes on
a connection of its own (``blocking_client``), or every call would queue behind it."""

CLIENT_KINDS = ("resp", "coredis")
DEFAULT_CLIENT_KIND = "resp"

SyncClient: TypeAlias = "redis.Redis | redis.cluster.RedisCluster"
"""What the sync tooling (journal readers, load generator) talks to."""


MEMORY_URL_HEAD = "memory://"
"""URLs of in-process stores (``store.simulation.memory_transport``): deterministic simulations
only."""

REDIS_SCHEMES = ("redis", "rediss", "unix")
"""URL schemes a store URL may have (what both Redis clients understand)."""


class UnsafeStore(RuntimeError):
    """The Redis server could lose replay entries; the node refuses to start on it."""


def check_redis_url(url: str) -> str:
    """``url`` when it names a Redis both clients can open (``redis://HOST[:PORT][/DB]``,
    ``rediss://...`` or ``unix:///PATH[?db=N]``); else ValueError saying what is wrong. Checked
    before anything connects: coredis reads any scheme as plain Redis, so a wrong one would
    otherwise reach a server with half of the run's commands, and redis-py refuse the rest."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port that is not a number or out of range
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in REDIS_SCHEMES:
        shown = f"'{parts.scheme}://'" if parts.scheme else "no scheme"
        raise ValueError(
            f"{url!r} has {shown}: a Redis URL starts with redis://, rediss:// or unix:// "
            "(e.g. redis://127.0.0.1:6379/0)"
        )
    if parts.scheme == "unix":
        if not parts.path or parts.hostname:
            raise ValueError(f"{url!r}: a unix:// URL names the socket's path (unix:///PATH)")
        return url
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host (e.g. redis://127.0.0.1:6379/0)")
    if port == 0:
        raise ValueError(f"{url!r}: port 0 is not a server's port")
    db = parts.path.strip("/")
    if db and not (db.isascii() and db.isdigit()):
        raise ValueError(f"{url!r}: the database after the port must be a number, not {db!r}")
    return url


def ping(url: str, timeout_s: float = 3.0) -> None:
    """PING the server at ``url`` (a cluster node too) once; raise ``redis.RedisError`` (a
    ``redis.ConnectionError`` when nothing answers) if it does not answer."""
    client = redis.Redis.from_url(
        _without_db(url) if urlsplit(url).scheme != "unix" else url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )
    try:
        client.ping()
    finally:
        client.close()


def redis_client(
    url: str,
    *,
    max_connections: int = 64,
    client_name: str | None = None,
    stream_timeout_s: float = STREAM_TIMEOUT_S,
) -> coredis.Redis[str]:
    """A coredis client for ``url`` (``redis://host:port/db``), decoding replies as text.
    ``client_name`` names its connections (``CLIENT LIST``), so a fault injector can find them."""
    _settle_coredis_flags()
    return coredis.Redis.from_url(
        url,
        decode_responses=True,
        stream_timeout=stream_timeout_s,
        connect_timeout=stream_timeout_s,
        max_connections=max_connections,
        client_name=client_name,
        retry_policy=no_resend_policy(),
    )


def _settle_coredis_flags() -> None:
    for name in COREDIS_FLAGS:
        os.environ.setdefault(name, "0")


def _without_db(url: str) -> str:
    """``url`` without its database path: a cluster node refuses SELECT, even to answer INFO."""
    return urlsplit(url)._replace(path="").geturl()


def _cluster_url(url: str) -> str:
    """``url`` for a cluster client: a cluster has database 0 only, so any other is refused."""
    if urlsplit(url).path.strip("/") not in ("", "0"):
        raise ValueError(f"{url}: a Redis Cluster has database 0 only")
    return _without_db(url)


def cluster_client(
    url: str,
    *,
    max_connections: int = 64,
    client_name: str | None = None,
    stream_timeout_s: float = STREAM_TIMEOUT_S,
) -> coredis.RedisCluster[str]:
    """A coredis cluster client bootstrapped from the node at ``url``, decoding replies as text."""
    _settle_coredis_flags()
    parts = urlsplit(_cluster_url(url))
    client: coredis.RedisCluster[str] = coredis.RedisCluster(
        startup_nodes=[TCPLocation(parts.hostname or "localhost", parts.port or 6379)],
        username=parts.username,
        password=parts.password,
        ssl=parts.scheme == "rediss",
        decode_responses=True,
        stream_timeout=stream_timeout_s,
        connect_timeout=stream_timeout_s,
        max_connections=max_connections,
        retry_policy=cluster_retry_policy(),
    )
    if client_name is not None:
        # The cluster client takes no client_name; its pool hands these to every connection.
        client.connection_pool.connection_kwargs["client_name"] = client_name
    return client


def _cluster_enabled(info: dict[str, Any]) -> bool:
    return str(info.get("cluster_enabled", "0")) == "1"


async def is_cluster(url: str) -> bool:
    """True when the server at ``url`` is a Redis Cluster node (``INFO cluster``, asked on the
    store's own client). A server that refuses INFO (the embedded store has no such command) is
    taken as a plain Redis; so is a ``unix://`` URL, unasked (a cluster's slot map names TCP
    addresses, never a socket's path)."""
    if urlsplit(url).scheme == "unix":
        return False
    async with RespRedis.from_url(_without_db(url), max_connections=1) as probe:
        try:
            info: dict[str, Any] = await probe.info("cluster")
        except ReplyError:
            return False
    return _cluster_enabled(info)


def blocking_client(client: NoteClient, block_ms: int) -> RespRedis | None:
    """A client of one connection to ``client``'s Redis for blocking reads of up to
    ``block_ms`` (the legacy sessions' ``XREAD BLOCK``: ``store.sessions``), so that no call
    queues behind one on ``client``'s multiplexed connections; None where none is needed (a
    cluster's inboxes are polled, coredis has a pool). Enter it before use."""
    if isinstance(client, RespRedis) and client.endpoint.host.startswith(MEMORY_URL_HEAD):
        # An in-process store (``store.simulation.memory_transport``): a connection of its own
        # there too, so a blocked read holds it and nothing else, as on Redis.
        from store.simulation.memory_transport import MemoryRedis

        return MemoryRedis(client.endpoint.host, client_name=client.endpoint.client_name)
    if type(client) is not RespRedis:
        return None
    # The same name: a fault injector that finds the node's connections finds this one too.
    endpoint = replace(client.endpoint, timeout_s=client.endpoint.timeout_s + block_ms / 1000)
    return RespRedis(endpoint, max_connections=1)


async def _policy(client: coredis.Redis[str]) -> str:
    settings = await client.config_get(["maxmemory-policy"])
    return str(settings.get("maxmemory-policy", ""))


async def eviction_problem(client: StoreClient) -> str | None:
    """Why the store could evict a replay entry, or None when every server is ``noeviction``.
    On a cluster every node of its slot map is asked, replicas too (a failover makes a replica a
    master that keeps its own policy); Redis lists a replica there once it has synced."""
    policies: dict[str, str] = {}
    if isinstance(client, coredis.RedisCluster):
        for node in client.all_nodes:
            async with node:  # the answer leaves the block: an error inside would be grouped
                policies[repr(node.connection_pool.location)] = await _policy(node)
    else:
        policies[repr(client.connection_pool.location)] = await _policy(client)
    unsafe = {where: p for where, p in policies.items() if p not in SAFE_EVICTION_POLICIES}
    if not unsafe:
        return None
    where, policy = sorted(unsafe.items())[0]
    return (
        f"Redis maxmemory-policy is {policy!r} on {where}: it could evict replay entries and "
        "let a confirmation execute twice; set it to 'noeviction'"
    )


@asynccontextmanager
async def open_redis(
    url: str,
    *,
    embedded: bool = False,
    client_name: str | None = None,
    stream_timeout_s: float = STREAM_TIMEOUT_S,
) -> AsyncIterator[StoreClient]:
    """Open a client (a cluster client when ``url`` is a cluster node), check the eviction
    policy (skipped for the embedded store, which never evicts and has no CONFIG command), and
    close the client on exit. ``client_name`` and ``stream_timeout_s`` as for ``redis_client``."""
    cluster = not embedded and await is_cluster(url)
    opts: dict[str, Any] = {"client_name": client_name, "stream_timeout_s": stream_timeout_s}
    client: StoreClient = cluster_client(url, **opts) if cluster else redis_client(url, **opts)
    async with client:
        problem = None if embedded else await eviction_problem(client)
        if problem is None:
            yield client
            return
    # Raised once the client is closed: raised inside, coredis' task group would wrap it.
    raise UnsafeStore(problem)


def sync_client(url: str, *, decode_responses: bool = False, timeout_s: float = 10.0) -> SyncClient:
    """A redis-py client for ``url``: ``redis.cluster.RedisCluster`` when the server is a Redis
    Cluster node (``INFO cluster``), else ``redis.Redis``. A server that refuses INFO (the
    embedded store) is taken as a plain Redis. Close it with ``close()``."""
    if url.startswith(
        MEMORY_URL_HEAD
    ):  # an in-process store (``store.simulation.memory_transport``)
        from store.simulation.memory_transport import memory_server

        return memory_server(url).sync_client(decode_responses=decode_responses)  # type: ignore[no-any-return]
    timeouts: dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    if urlsplit(url).scheme == "unix":  # never a cluster (see ``is_cluster``)
        return redis.Redis.from_url(url, decode_responses=decode_responses, **timeouts)
    probe = redis.Redis.from_url(_without_db(url), **timeouts)
    try:
        info: dict[str, Any] = dict(probe.info("cluster"))
    except redis.ResponseError:
        info = {}
    finally:
        probe.close()
    if _cluster_enabled(info):
        return redis.cluster.RedisCluster.from_url(
            _cluster_url(url), decode_responses=decode_responses, **timeouts
        )
    return redis.Redis.from_url(url, decode_responses=decode_responses, **timeouts)


def client_kind(kind: str | None = None) -> str:
    """``kind``, or the one ``NOTES_CLUSTER_REDIS_CLIENT`` names, or the default; ValueError for
    a name that is none of ``CLIENT_KINDS``."""
    chosen = (kind or os.environ.get(CLIENT_ENV) or DEFAULT_CLIENT_KIND).strip().lower()
    if chosen not in CLIENT_KINDS:
        raise ValueError(f"{CLIENT_ENV}={chosen!r}: expected one of {', '.join(CLIENT_KINDS)}")
    return chosen


async def resp_eviction_problem(client: RespRedis | RespCluster) -> str | None:
    """``eviction_problem`` for the store's own client: on a cluster, every master and replica
    ``CLUSTER SLOTS`` lists."""
    servers = client.every_server() if isinstance(client, RespCluster) else [client]
    for server in servers:
        policy = (await server.config_get(["maxmemory-policy"])).get("maxmemory-policy", "")
        if policy not in SAFE_EVICTION_POLICIES:
            where = server.endpoint.where
            return (
                f"Redis maxmemory-policy is {policy!r} on {where}: it could evict replay "
                "entries and let a confirmation execute twice; set it to 'noeviction'"
            )
    return None


@asynccontextmanager
async def open_note_client(
    url: str,
    *,
    embedded: bool = False,
    client_name: str | None = None,
    stream_timeout_s: float = STREAM_TIMEOUT_S,
    kind: str | None = None,
    shared: StoreClient | None = None,
) -> AsyncIterator[NoteClient]:
    """The client a ``NoteStore`` should use on ``url``, checked like ``open_redis``: the
    store's own (``RespRedis``, or ``RespCluster`` when ``url`` is a cluster node), unless
    ``client_kind`` says coredis. A coredis client the caller already opened on ``url`` is
    passed as ``shared`` and yielded as it is where coredis is the answer. The store's own
    client speaks TCP, TLS (``rediss://``) and Unix domain sockets (``unix://``, never a
    cluster). A ``memory://`` URL (an in-process store,
    ``store.simulation.memory_transport``) always gets the store's own client."""
    if url.startswith(MEMORY_URL_HEAD):
        from store.simulation.memory_transport import MemoryRedis

        async with MemoryRedis(url, client_name=client_name) as memory:
            yield memory
        return
    if client_kind(kind) == "resp":
        opts: dict[str, Any] = {"client_name": client_name, "timeout_s": stream_timeout_s}
        cluster = not embedded and await is_cluster(url)
        client: RespRedis | RespCluster = (
            RespCluster.from_url(_cluster_url(url), **opts)
            if cluster
            else RespRedis.from_url(url, **opts)
        )
        async with client:
            problem = None if embedded else await resp_eviction_problem(client)
            if problem is None:
                yield client
                return
        raise UnsafeStore(problem)
    if shared is not None:
        yield shared
        return
    async with open_redis(
        url, embedded=embedded, client_name=client_name, stream_timeout_s=stream_timeout_s
    ) as opened:
        yield opened
