"""The store's own Redis client on a Redis Cluster: slot routing, MOVED and ASK.

Layer: store. One ``RespRedis`` per master, made when first needed, all sharing this client's
task group. The slot map comes from ``CLUSTER SLOTS`` and is read again after a ``MOVED`` or a
failed call (a failover moves slots). Redirections are the only re-sends, and they are safe:
a node that answers ``MOVED`` or ``ASK`` did not run the command. Everything else keeps the
single-server client's rule (``store.redis_errors``): a call written and not answered is an
unknown outcome, never sent again.
"""

from __future__ import annotations

import binascii
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.abc
import sniffio

from store.redis_conn import Endpoint
from store.redis_errors import NotSent, RedisClientError
from store.resp import ReplyError
from store.resp_client import (
    DEFAULT_MAX_CONNECTIONS,
    Arg,
    RespRedis,
    Script,
    endpoint_from_url,
    ensure_replication,
)

SLOTS = 16384
MAX_REDIRECTS = 5
"""Redirections one call follows (a resharding moves a slot once; more is a cluster in flux:
the last redirection is raised, a refusal the store re-sends later, ``store.refusals``)."""

_STALE_MAP_CODES = frozenset({"READONLY", "CLUSTERDOWN", "MASTERDOWN"})
"""Refusals after which the slot map is read again: the master it names may be one no more."""

T = TypeVar("T")
Address = tuple[str, int]


def key_slot(key: str | bytes) -> int:
    """The cluster slot of ``key``: CRC16 (XMODEM) of its hash tag, or of all of it."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return binascii.crc_hqx(data, 0) % SLOTS


def _redirect(error: ReplyError) -> tuple[int, Address]:
    """``MOVED 3999 127.0.0.1:6381`` -> (3999, ("127.0.0.1", 6381))."""
    _, slot, where = str(error).split(" ", 2)
    host, _, port = where.rpartition(":")
    return int(slot), (host, int(port))


class RespCluster:
    """A client of one Redis Cluster; enter it (``async with``) before use."""

    def __init__(self, seed: Endpoint, *, max_connections: int = DEFAULT_MAX_CONNECTIONS):
        self.seed = seed
        self.max_connections = max_connections
        self._slots: list[Address | None] = [None] * SLOTS
        self._replicas: dict[Address, list[Address]] = {}
        self._nodes: dict[Address, RespRedis] = {}
        self._stale = True
        self._refreshing: anyio.Lock | None = None
        self._group: anyio.abc.TaskGroup | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        client_name: str | None = None,
        timeout_s: float = 5.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> RespCluster:
        """A cluster client bootstrapped from the node at ``url`` (database 0 only)."""
        seed = endpoint_from_url(url, client_name=client_name, timeout_s=timeout_s)
        if seed.unix_path is not None:  # its slot map names TCP addresses, never this socket
            raise ValueError(f"{url}: a Redis Cluster is reached over TCP, not a unix:// URL")
        if seed.db:
            raise ValueError(f"{url}: a Redis Cluster has database 0 only")
        return cls(seed, max_connections=max_connections)

    async def __aenter__(self) -> RespCluster:
        if sniffio.current_async_library() != "asyncio":
            self._group = anyio.create_task_group()
            await self._group.__aenter__()
        self._refreshing = anyio.Lock()
        await self._refresh()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for node in self._nodes.values():
            await node.aclose()
        self._nodes.clear()
        group, self._group = self._group, None
        if group is not None:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)

    # -- the slot map --------------------------------------------------------------------------

    def node(self, address: Address) -> RespRedis:
        """The client of the server at ``address`` (made on first use)."""
        client = self._nodes.get(address)
        if client is None:
            host, port = address
            endpoint = Endpoint(
                host,
                port,
                0,
                self.seed.username,
                self.seed.password,
                self.seed.client_name,
                self.seed.ssl_context,
                self.seed.timeout_s,
            )
            client = RespRedis(endpoint, max_connections=self.max_connections)
            client.start(self._group)
            self._nodes[address] = client
        return client

    def masters(self) -> list[RespRedis]:
        """A client of every master the slot map names."""
        return [self.node(a) for a in sorted({a for a in self._slots if a is not None})]

    def every_server(self) -> list[RespRedis]:
        """Masters and the replicas ``CLUSTER SLOTS`` lists (a replica appears once synced)."""
        addresses = {a for a in self._slots if a is not None}
        for replicas in self._replicas.values():
            addresses.update(replicas)
        return [self.node(a) for a in sorted(addresses)]

    async def _refresh(self) -> None:
        """Read the slot map from any server that answers (the seed first)."""
        assert self._refreshing is not None
        async with self._refreshing:
            if not self._stale:
                return
            known = [(self.seed.host, self.seed.port), *sorted(self._nodes)]
            last: Exception | None = None
            for address in dict.fromkeys(known):
                try:
                    reply = await self.node(address).execute("CLUSTER", "SLOTS")
                except (RedisClientError, ReplyError) as exc:
                    last = exc
                    continue
                self._load(reply, address[0])
                self._stale = False
                return
            raise NotSent(f"no node of the cluster answered CLUSTER SLOTS: {last}")

    def _load(self, reply: list[Any], fallback_host: str) -> None:
        slots: list[Address | None] = [None] * SLOTS
        replicas: dict[Address, list[Address]] = {}
        for start, end, master, *others in reply:
            address = (str(master[0]) or fallback_host, int(master[1]))
            for slot in range(int(start), int(end) + 1):
                slots[slot] = address
            replicas[address] = [(str(r[0]) or fallback_host, int(r[1])) for r in others]
        self._slots, self._replicas = slots, replicas

    # -- routing -------------------------------------------------------------------------------

    async def _routed(self, slot: int, call: Callable[[RespRedis, bool], Awaitable[T]]) -> T:
        """``call(node, asking)`` on the master of ``slot``, following MOVED and ASK."""
        if self._stale:
            await self._refresh()
        address = self._slots[slot]
        asking = False
        last: ReplyError | None = None
        for _ in range(MAX_REDIRECTS):
            if address is None:
                raise NotSent(f"slot {slot} is not served by any master")
            try:
                return await call(self.node(address), asking)
            except ReplyError as exc:
                if exc.code == "MOVED":
                    moved, address = _redirect(exc)
                    self._slots[moved] = address
                    self._stale = True  # the rest of the map may have moved too
                    asking = False
                    last = exc
                    continue
                if exc.code == "ASK":
                    _, address = _redirect(exc)
                    asking = True
                    last = exc
                    continue
                if exc.code in _STALE_MAP_CODES:
                    self._stale = True  # a failover moved the slot: read the map again
                raise
            except RedisClientError:
                self._stale = True  # a failover may be under way: read the map again
                raise
        # The last redirection itself: it ran nothing, and says why (``store.refusals``).
        assert last is not None
        raise last

    async def evalsha(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """Run ``script`` on the master of its keys' slot (a keyless script: slot 0's)."""
        slot = key_slot(str(keys[0]) if not isinstance(keys[0], bytes) else keys[0]) if keys else 0
        return await self._routed(
            slot, lambda node, asking: node.evalsha(script, keys, args, asking=asking)
        )

    async def execute_on_key(self, key: str, *args: Arg) -> Any:
        """One command about ``key``, on its slot's master."""
        return await self._routed(
            key_slot(key), lambda node, asking: node.execute(*args, asking=asking)
        )

    # -- what the note store and its checks use ------------------------------------------------

    def register_script(self, script: str) -> Script:
        """``script`` bound to this cluster (routed by its first key)."""
        return Script(self, script)

    def ensure_replication(
        self, replicas: int = 1, timeout_ms: int = 100
    ) -> contextlib.AbstractContextManager[None]:
        """As ``RespRedis.ensure_replication`` (WAIT on the master that ran the script)."""
        return ensure_replication(replicas, timeout_ms)

    async def get(self, key: str) -> str | None:
        """GET."""
        reply = await self.execute_on_key(key, "GET", key)
        return None if reply is None else str(reply)

    async def hmget(self, key: str, fields: Sequence[str]) -> list[str | None]:
        """HMGET."""
        return list(await self.execute_on_key(key, "HMGET", key, *fields))

    async def script_exists(self, shas: Sequence[str]) -> tuple[bool, ...]:
        """Whether every master's script cache holds each SHA1."""
        if self._stale:
            await self._refresh()
        present = [True] * len(shas)
        for master in self.masters():
            for i, found in enumerate(await master.script_exists(shas)):
                present[i] = present[i] and found
        return tuple(present)

    async def script_load(self, script: str) -> str:
        """Load ``script`` on every master; its SHA1."""
        if self._stale:
            await self._refresh()
        sha = ""
        for master in self.masters():
            sha = await master.script_load(script)
        return sha
