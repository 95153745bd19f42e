"""The store's client over no socket: RESP bytes handed to an in-process fakeredis server.

Layer: store (nothing of ours). A ``MemoryServer`` holds one fakeredis server (the same Lua
scripts run in it as on a real Redis); ``MemoryConnection`` is a third transport next to
``store.redis_conn``'s two: it has their interface (``request``, ``pending``, ``alive``,
``close``), encodes with the same sans-IO ``RespCore``, and instead of writing to a socket it
feeds the command bytes to the server and the server's reply bytes back to the core. No socket,
no thread: a command runs to its end inside the caller's task, between two checkpoints (one
before it is "sent", one before its reply "arrives"), so a trio scheduler still interleaves
calls. Used by deterministic simulations (``memory://NAME`` URLs, ``store.client_factory``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.lowlevel
from fakeredis import FakeServer
from fakeredis._clients._sync import FakeRedisConnection
from fakeredis._clients._tcp_server import _INTERNAL_CONNECTION_KWARGS, encode_reply
from fakeredis._typing import RaiseErrorTypes

from store.redis_conn import Endpoint
from store.redis_errors import ConnectionLost, NotSent, UnknownOutcome
from store.resp import ProtocolError, RespCore
from store.resp_client import RespRedis

MEMORY_SCHEME = "memory"
"""``memory://NAME``: the ``MemoryServer`` registered under NAME in this process."""

_SERVERS: dict[str, Any] = {}
"""Served stores by name: a ``MemoryServer`` (fakeredis) or any object with its ``connect``
and ``sync_client`` (the lean store, ``store.simulation.lean_server.LeanServer``)."""
_names = itertools.count()


class _NoPush:
    """Where the fake server would push unrequested replies (pub/sub): nothing subscribes."""

    def write(self, value: bytes) -> None:
        del value

    def dump(self, value: Any) -> None:
        del value


class MemoryServer:
    """One in-process Redis (fakeredis, with Lua) that memory connections talk to."""

    def __init__(self) -> None:
        self.fake = FakeServer(server_type="redis", version=(8, 0))
        self.connections = itertools.count(1)

    def connect(self) -> MemoryConnection:
        """A new connection to this server."""
        return MemoryConnection(self)

    def sync_client(self, *, decode_responses: bool = False) -> Any:
        """A redis-py style client of this server (the tooling's reads), no socket either."""
        from fakeredis import FakeRedis

        return FakeRedis(server=self.fake, decode_responses=decode_responses)


def memory_server(url: str) -> Any:
    """The server a ``memory://NAME`` URL names; NotSent when none is registered."""
    name = url.split("://", 1)[1].strip("/")
    try:
        return _SERVERS[name]
    except KeyError:
        raise NotSent(f"no in-process store named {name!r}") from None


@contextmanager
def serve_memory_store(name: str | None = None, server: Any = None) -> Iterator[str]:
    """Register ``server`` (default: a fresh fakeredis ``MemoryServer``) for the block; yield
    its ``memory://`` URL."""
    name = name or f"s{next(_names)}"
    if name in _SERVERS:
        raise ValueError(f"an in-process store named {name!r} is already served")
    _SERVERS[name] = MemoryServer() if server is None else server
    try:
        yield f"{MEMORY_SCHEME}://{name}"
    finally:
        del _SERVERS[name]


class MemoryConnection:
    """One connection to a ``MemoryServer``: the interface of ``store.redis_conn``'s."""

    def __init__(self, server: MemoryServer) -> None:
        self.core: RespCore[list[list[Any]]] = RespCore()
        self.alive = True
        self._conn = FakeRedisConnection(
            server=server.fake,
            writer=_NoPush(),
            client_info={"laddr": ("memory", 0), "addr": ("memory", next(server.connections))},
            **_INTERNAL_CONNECTION_KWARGS,
        )

    @classmethod
    def open(cls, url: str) -> MemoryConnection:
        """A connection to the server ``url`` names."""
        return cls(memory_server(url))

    @property
    def pending(self) -> int:
        """Calls written and not yet answered (none between two calls: each runs whole)."""
        return self.core.pending

    async def request(
        self, commands: tuple[bytes, ...], deadline: float | None = None
    ) -> list[Any]:
        """Run ``commands`` (together, in order) on the server and return their replies (at
        once: an in-process server answers within its call, so ``deadline`` never passes)."""
        del deadline
        if not self.alive:
            raise NotSent("connection closed")
        await anyio.lowlevel.checkpoint()  # the send
        if not self.alive:
            raise NotSent("connection closed")
        box: list[list[Any]] = []
        data = self.core.request(box, commands)
        sock = self._conn.get_socket()
        out: list[bytes] = []
        try:
            sock.sendall(data)
            while self._conn.can_read():
                try:
                    reply = self._conn.read_response()
                except RaiseErrorTypes as exc:
                    reply = exc
                out.append(encode_reply(reply, 2))
            for _, replies in self.core.receive(b"".join(out)):
                box.append(replies)
        except (ProtocolError, OSError) as exc:
            self.close(ConnectionLost(f"in-process store: {exc!r}"))
        await anyio.lowlevel.checkpoint()  # the reply
        if not box:
            raise ConnectionLost("in-process store: no reply")
        return box[0]

    def close(self, error: UnknownOutcome, first: object = None) -> None:
        """Close the connection (nothing waits on it between calls)."""
        del error, first
        if self.alive:
            self.alive = False
            self.core.abandon()
            self._conn.disconnect()  # type: ignore[no-untyped-call]


class MemoryRedis(RespRedis):
    """The store's own client (``RespRedis``: its scripts, its semantics) over memory
    connections to the server a ``memory://`` URL names."""

    def __init__(self, url: str, *, client_name: str | None = None) -> None:
        memory_server(url)  # fail now, not at the first call, when nothing is served there
        super().__init__(Endpoint(host=url, port=0, client_name=client_name), max_connections=1)
        self.url = url

    async def _connect(self, deadline: float) -> Any:
        del deadline  # an in-process connection opens at once
        if not self._open:
            raise NotSent("the client is closed")
        self._connections = [c for c in self._connections if c.alive]
        if not self._connections:
            conn: Any = memory_server(self.url).connect()
            self._connections.append(conn)
        return self._connections[0]
