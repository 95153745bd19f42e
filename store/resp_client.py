"""The store's own Redis client: a few multiplexed connections, scripts, and our semantics.

Layer: store. Built on ``store.resp`` (sans-IO) and ``store.redis_conn`` (transports). It speaks
the commands the note store needs, not all of Redis; the rest of the project may keep coredis.
Semantics, where general-purpose clients differ (see ``store.redis_errors``):

- **Never a second send.** No retry, no re-send after a reconnect: a call that was written and
  not answered fails with ``UnknownOutcome``; the next call opens a fresh connection.
- **EVALSHA with the NOSCRIPT fallback**: a ``NOSCRIPT`` reply means the script did not run, so
  sending it once as ``EVAL`` (which also caches it) is not a second send.
- **WAIT on the write's own connection**: inside ``ensure_replication(n, ms)`` a script goes out
  with ``WAIT n ms`` behind it in the same write, on the same connection; fewer replicas is
  ``ReplicationError``.
- AUTH, SELECT and ``CLIENT SETNAME`` on every new connection (a fault injector finds the
  node's connections by name); TLS for ``rediss://``; a Unix domain socket for ``unix://``.

The same code runs on asyncio (a native protocol: the production path) and on trio (an anyio
stream); which one is decided when the client is entered.
"""

from __future__ import annotations

import contextlib
import hashlib
import ssl
from collections.abc import Awaitable, Iterator, Sequence
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import anyio
import anyio.abc
import sniffio

from store.redis_conn import AnyioConnection, AsyncioConnection, Connection, Endpoint
from store.redis_errors import ConnectionLost, NotSent, ReplicationError
from store.resp import ReplyError, pack

DEFAULT_MAX_CONNECTIONS = 2
"""Connections per client. One carries any number of concurrent calls (pipelined); a second
keeps reads moving while a ``WAIT`` holds the first. More only add system calls."""

_REPLICATION: ContextVar[tuple[int, int] | None] = ContextVar("resp_replication", default=None)

Arg = str | bytes | int | float

_ASKING = pack("ASKING")


@contextlib.contextmanager
def ensure_replication(replicas: int, timeout_ms: int) -> Iterator[None]:
    """Scripts run inside this block (by any of these clients) send ``WAIT replicas
    timeout_ms`` right behind them on their connection; fewer is ``ReplicationError``."""
    token = _REPLICATION.set((replicas, timeout_ms))
    try:
        yield
    finally:
        _REPLICATION.reset(token)


def endpoint_from_url(
    url: str, *, client_name: str | None = None, timeout_s: float = 5.0
) -> Endpoint:
    """The ``Endpoint`` of ``redis://[user:password@]host:port/db`` (``rediss://``: TLS with
    the system's trust store; ``?ssl_cert_reqs=none`` skips verification, for test servers) or
    ``unix://[user:password@]/PATH`` (a Unix domain socket; no TLS). Either also takes
    ``?db=N``, ``?username=`` and ``?password=``, read as coredis and redis-py read them (the
    query's database over the path's, credentials before ``@`` over the query's), so one URL
    means the same server, database and user on every client."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"{url}: the store's client speaks redis://, rediss:// and unix:// only")
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    username = unquote(parts.username) if parts.username else query.get("username")
    password = unquote(parts.password) if parts.password is not None else query.get("password")
    unix_path: str | None = None
    context: ssl.SSLContext | None = None
    if parts.scheme == "unix":
        unix_path = unquote(parts.path)
        if parts.hostname or not unix_path:
            raise ValueError(f"{url}: a unix:// URL names the socket's path: unix:///PATH")
        if any(name.startswith("ssl") for name in query):
            raise ValueError(f"{url}: no TLS on a Unix domain socket (drop the ssl options)")
        db_text = query.get("db", "")
    else:
        db_text = query.get("db") or parts.path.strip("/")
    if parts.scheme == "rediss":
        context = ssl.create_default_context()
        if query.get("ssl_cert_reqs", "").lower() == "none":
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    if db_text and not (db_text.isascii() and db_text.isdigit()):
        raise ValueError(f"{url}: the database must be a number, not {db_text!r}")
    return Endpoint(
        host=parts.hostname or "localhost",
        port=parts.port or 6379,
        db=int(db_text) if db_text else 0,
        username=username,
        password=password,
        client_name=client_name,
        ssl_context=context,
        timeout_s=timeout_s,
        unix_path=unix_path,
    )


class ScriptRunner(Protocol):
    """What runs a ``Script``: one server's client, or a cluster's."""

    async def evalsha(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """Run ``script`` once (see ``RespRedis.evalsha``)."""
        ...


class Script:
    """A Lua script bound to a client: ``await script(keys=[...], args=[...])``."""

    __slots__ = ("_client", "script", "sha")

    def __init__(self, client: ScriptRunner, script: str) -> None:
        self._client = client
        self.script = script
        self.sha = hashlib.sha1(script.encode("utf-8"), usedforsecurity=False).hexdigest()

    def __call__(self, keys: Sequence[Arg] = (), args: Sequence[Arg] = ()) -> Awaitable[Any]:
        """The script's reply (an error reply raised as ``ReplyError``), to await. Not a
        coroutine function: it hands over the client's own, one frame fewer per call."""
        return self._client.evalsha(self, keys, args)


class RespRedis:
    """A client of one Redis server; enter it (``async with``) before use."""

    def __init__(self, endpoint: Endpoint, *, max_connections: int = DEFAULT_MAX_CONNECTIONS):
        self.endpoint = endpoint
        self.max_connections = max(1, max_connections)
        self._connections: list[Connection] = []
        self._connecting: anyio.Lock | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._asyncio = False
        self._owns_group = False
        self._open = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        client_name: str | None = None,
        timeout_s: float = 5.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> RespRedis:
        """A client for ``url`` (see ``endpoint_from_url``)."""
        endpoint = endpoint_from_url(url, client_name=client_name, timeout_s=timeout_s)
        return cls(endpoint, max_connections=max_connections)

    async def __aenter__(self) -> RespRedis:
        group = None
        if sniffio.current_async_library() != "asyncio":
            group = anyio.create_task_group()
            await group.__aenter__()
        self.start(group, owned=True)
        return self

    def start(self, group: anyio.abc.TaskGroup | None, *, owned: bool = False) -> None:
        """Make the client usable without entering it: its readers (on trio) run in ``group``,
        which someone else owns (a cluster client's node clients share its group)."""
        self._asyncio = group is None
        self._task_group = group
        self._owns_group = owned
        self._connecting = anyio.Lock()
        self._open = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection (calls still waiting fail with ConnectionLost)."""
        self._open = False
        self._close_connections()
        group, self._task_group = self._task_group, None
        if group is not None and self._owns_group:
            await group.__aexit__(None, None, None)

    def _close_connections(self) -> None:
        for conn in self._connections:
            conn.close(ConnectionLost("client closed"))
        self._connections.clear()

    def statistics(self) -> dict[str, int]:
        """Open connections and calls waiting on them."""
        alive = [c for c in self._connections if c.alive]
        return {"connections": len(alive), "pending": sum(c.pending for c in alive)}

    # -- connections -------------------------------------------------------------------------

    def _ready(self) -> Connection | None:
        """The least busy open connection, unless every open one is busy and another may be
        opened (None: open one)."""
        best: Connection | None = None
        alive = 0
        for conn in self._connections:
            if conn.alive:
                alive += 1
                if best is None or conn.pending < best.pending:
                    best = conn
        if best is not None and (best.pending == 0 or alive >= self.max_connections):
            return best
        return None

    async def _connect(self, deadline: float) -> Connection:
        """A connection opened (or found open) by ``deadline``, waiting for the call that is
        opening one now; NotSent when there is none by then. The deadline is the call's own:
        waiting behind other calls' connects must not stretch a call past its timeout, or a
        paused Redis is waited out and answered late instead of being an unknown outcome."""
        if not self._open or self._connecting is None:
            raise NotSent("the client is closed")
        with anyio.CancelScope(deadline=deadline) as waiting:
            await self._connecting.acquire()
        if waiting.cancelled_caught:
            raise NotSent(f"no connection within {self.endpoint.timeout_s} s")
        try:
            if not self._open:  # closed while this call waited for the lock
                raise NotSent("the client is closed")
            self._connections = [c for c in self._connections if c.alive]
            if len(self._connections) >= self.max_connections:
                return min(self._connections, key=lambda c: c.pending)
            # A failed connect raises NotSent, with no fallback to a busy connection: a call
            # waits one timeout at most, so a stalled server is an unknown outcome in time.
            conn: Connection
            if self._asyncio:
                conn = await AsyncioConnection.open(self.endpoint, deadline)
            else:
                assert self._task_group is not None
                conn = await AnyioConnection.open(self.endpoint, self._task_group, deadline)
            self._connections.append(conn)
            return conn
        finally:
            self._connecting.release()

    def request(self, commands: tuple[bytes, ...]) -> Awaitable[list[Any]]:
        """Write ``commands`` together on one connection; their replies (to await), error
        replies as ``ReplyError`` values. Raises only the client's own errors
        (``store.redis_errors``). One timeout bounds the whole call, a connect (and the wait
        for one) included. Not a coroutine function: with a connection ready it hands over
        the connection's awaitable, one frame fewer per call (callers await it at once)."""
        conn = self._ready()
        if conn is not None:
            return conn.request(commands)
        return self._request_connecting(commands)

    async def _request_connecting(self, commands: tuple[bytes, ...]) -> list[Any]:
        """``request`` when a connection must be opened (or waited for) first."""
        deadline = anyio.current_time() + self.endpoint.timeout_s
        conn = await self._connect(deadline)
        if anyio.current_time() >= deadline:
            raise NotSent(f"no connection within {self.endpoint.timeout_s} s")
        return await conn.request(commands, deadline)

    async def execute(self, *args: Arg, asking: bool = False) -> Any:
        """One command's reply; an error reply is raised as ``ReplyError``. ``asking``: sent
        behind ``ASKING`` (a Redis Cluster's ASK redirection), on the same connection."""
        if asking:
            _, reply = await self.request((_ASKING, pack(*args)))
        else:
            (reply,) = await self.request((pack(*args),))
        if isinstance(reply, ReplyError):
            raise reply
        return reply

    # -- scripts -----------------------------------------------------------------------------

    def register_script(self, script: str) -> Script:
        """``script`` bound to this client (sent by its SHA1, loaded on NOSCRIPT)."""
        return Script(self, script)

    def ensure_replication(
        self, replicas: int = 1, timeout_ms: int = 100
    ) -> contextlib.AbstractContextManager[None]:
        """Scripts run inside this block wait (``WAIT``, same connection) for ``replicas``."""
        return ensure_replication(replicas, timeout_ms)

    async def evalsha(
        self, script: Script, keys: Sequence[Arg], args: Sequence[Arg], *, asking: bool = False
    ) -> Any:
        """Run ``script`` by SHA1; on NOSCRIPT (it did not run) send it once in full. With
        ``asking``, behind ``ASKING`` (see ``execute``)."""
        wait = _REPLICATION.get()
        head = (_ASKING,) if asking else ()
        tail = () if wait is None else (pack("WAIT", wait[0], wait[1]),)
        first = len(head)
        replies = await self.request(
            (*head, pack("EVALSHA", script.sha, len(keys), *keys, *args), *tail)
        )
        reply = replies[first]
        if isinstance(reply, ReplyError) and reply.code == "NOSCRIPT":
            replies = await self.request(
                (*head, pack("EVAL", script.script, len(keys), *keys, *args), *tail)
            )
            reply = replies[first]
        if isinstance(reply, ReplyError):
            raise reply
        if wait is not None:
            acknowledged = replies[first + 1]
            if isinstance(acknowledged, ReplyError):
                raise ReplicationError(wait[0], str(acknowledged))
            if int(acknowledged) < wait[0]:
                raise ReplicationError(wait[0], int(acknowledged))
        return reply

    async def script_exists(self, shas: Sequence[str]) -> tuple[bool, ...]:
        """Whether the server's script cache holds each SHA1."""
        reply = await self.execute("SCRIPT", "EXISTS", *shas)
        return tuple(bool(x) for x in reply)

    async def script_load(self, script: str) -> str:
        """Load ``script`` into the server's script cache; its SHA1."""
        return str(await self.execute("SCRIPT", "LOAD", script))

    # -- the few plain commands the store and its checks use ---------------------------------

    async def ping(self) -> str:
        """``PONG``."""
        return str(await self.execute("PING"))

    async def get(self, key: str) -> str | None:
        """GET."""
        reply = await self.execute("GET", key)
        return None if reply is None else str(reply)

    async def hmget(self, key: str, fields: Sequence[str]) -> list[str | None]:
        """HMGET."""
        return list(await self.execute("HMGET", key, *fields))

    async def config_get(self, names: Sequence[str]) -> dict[str, str]:
        """CONFIG GET of each name (a pattern each), as a dict."""
        result: dict[str, str] = {}
        for name in names:
            flat = await self.execute("CONFIG", "GET", name)
            result.update(zip(flat[::2], flat[1::2], strict=True))
        return result

    async def info(self, section: str = "default") -> dict[str, str]:
        """INFO ``section`` as a dict of its ``key:value`` lines."""
        text = str(await self.execute("INFO", section))
        pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
        return {k: v for k, v in pairs if not k.startswith("#")}
