"""One multiplexed Redis connection on each backend: asyncio (production) and anyio (trio).
Over TCP, TLS or a Unix domain socket (``Endpoint.unix_path``).

Layer: store. Thin shells around ``store.resp.RespCore``: they write its bytes, feed it what
they read and wake the caller whose replies are complete. Many calls share one connection
(pipelined, answered in order); nothing here ever writes a command twice. Any doubt about the
connection (dropped, garbage, a reply too slow) closes it and fails every call still waiting
with an ``UnknownOutcome``: a late reply can then never be taken for another call's.

- ``AsyncioConnection``: an ``asyncio.Protocol``; a call waits on a future; writes made in one
  loop iteration go out in one ``write`` (coalesced with ``call_soon``). Each call's deadline is
  kept with it and one timer per connection watches them (it fires at the earliest deadline it
  was armed for, then waits again for the earliest one still pending): a call arms no timer of
  its own (a ``call_later`` and its cancel cost about 2.5 µs, as much as the rest of the
  call's bookkeeping). This is the production path under uvicorn (uvloop).
- ``AnyioConnection``: an anyio byte stream with a reader and a writer task in the owner's task
  group; callers queue their bytes and wake the writer, which sends everything queued in one
  write (a cancelled caller cannot leave half a command on the wire, and no caller waits behind
  other callers' writes). Runs on trio (simulations, tests) and on asyncio.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Any, cast

import anyio
import anyio.abc

from store.redis_errors import ConnectionLost, NotSent, ReplyTimeout, UnknownOutcome
from store.resp import ProtocolError, ReplyError, RespCore, pack

READ_SIZE = 1 << 16
_CLOCK_RESOLUTION_S = 0.001
"""The loop's timers fire on whole milliseconds: a deadline this close is due."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to connect: address (a TCP host and port, or a Unix socket's path), TLS,
    and the handshake (AUTH, SELECT, CLIENT SETNAME) sent before the first command."""

    host: str
    port: int
    db: int = 0
    username: str | None = None
    password: str | None = None
    client_name: str | None = None
    ssl_context: ssl.SSLContext | None = None
    timeout_s: float = 5.0
    """Connect timeout, and how long a reply may take before its connection is closed."""
    unix_path: str | None = None
    """A Unix domain socket's path: when set, connections go there (``host`` and ``port`` are
    not used). No TLS on it: the socket never leaves the machine."""

    def __post_init__(self) -> None:
        if self.unix_path is not None and self.ssl_context is not None:
            raise ValueError(f"unix:{self.unix_path}: no TLS on a Unix domain socket")

    @property
    def where(self) -> str:
        """The address, for messages: ``host:port`` or ``unix:PATH``."""
        if self.unix_path is not None:
            return f"unix:{self.unix_path}"
        return f"{self.host}:{self.port}"

    def handshake(self) -> tuple[bytes, ...]:
        """The commands that set a new connection up (maybe none)."""
        commands: list[bytes] = []
        if self.password is not None:
            user = self.username or "default"
            commands.append(pack("AUTH", user, self.password))
        if self.db:
            commands.append(pack("SELECT", self.db))
        if self.client_name:
            commands.append(pack("CLIENT", "SETNAME", self.client_name))
        return tuple(commands)


class AsyncioConnection(asyncio.Protocol):
    """One connection on asyncio; see the module docstring."""

    def __init__(self, timeout_s: float) -> None:
        self.core: RespCore[tuple[asyncio.Future[list[Any]], float]] = RespCore()
        """Each pending call's waiter: its future and its deadline (the loop's clock)."""
        self.timeout_s = timeout_s
        self.alive = False
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._watch: asyncio.TimerHandle | None = None
        self._watch_at = 0.0
        """When ``_watch`` fires: never after the earliest deadline of a pending call."""

    @classmethod
    async def open(cls, endpoint: Endpoint, deadline: float) -> AsyncioConnection:
        """Connect and run the handshake by ``deadline`` (the loop's clock); NotSent when the
        server cannot be reached, or does not answer the handshake, by then."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(deadline):
                if endpoint.unix_path is not None:
                    _, conn = await loop.create_unix_connection(
                        lambda: cls(endpoint.timeout_s), endpoint.unix_path
                    )
                else:
                    _, conn = await loop.create_connection(
                        lambda: cls(endpoint.timeout_s),
                        endpoint.host,
                        endpoint.port,
                        ssl=endpoint.ssl_context,
                        server_hostname=endpoint.host if endpoint.ssl_context else None,
                    )
        except (OSError, TimeoutError) as exc:  # a missing socket file too: nothing was sent
            raise NotSent(f"connect {endpoint.where}: {exc!r}") from exc
        try:
            await _handshake(conn, endpoint, deadline)
        except BaseException:  # refused, timed out or cancelled: the connection goes with it
            conn.close(ConnectionLost("handshake not completed"))
            raise
        return conn

    @property
    def pending(self) -> int:
        """Calls written and not yet answered."""
        return self.core.pending

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.alive = True

    def data_received(self, data: bytes) -> None:
        try:
            done = self.core.receive(data)
        except ProtocolError as exc:
            # The calls answered in full before the fault get their replies; the rest fail.
            self._deliver(exc.completed)
            self.close(ConnectionLost(f"protocol error: {exc}"))
            return
        self._deliver(done)

    @staticmethod
    def _deliver(done: list[tuple[tuple[asyncio.Future[list[Any]], float], list[Any]]]) -> None:
        for (future, _), replies in done:
            if not future.done():
                future.set_result(replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close(ConnectionLost(f"connection lost: {exc!r}" if exc else "connection closed"))

    def request(
        self, commands: tuple[bytes, ...], deadline: float | None = None
    ) -> asyncio.Future[list[Any]]:
        """Write ``commands`` (together, in order); the future of their replies, to await at
        once; ReplyTimeout when they are not back by ``deadline`` (the loop's clock; None:
        ``timeout_s`` from now). Not a coroutine function: awaiting the future itself spares
        a coroutine per call (a cancelled caller cancels the future either way)."""
        if not self.alive:
            raise NotSent("connection closed")
        loop = self._loop
        future: asyncio.Future[list[Any]] = loop.create_future()
        if deadline is None:
            deadline = loop.time() + self.timeout_s
        self._out.append(self.core.request((future, deadline), commands))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        if self._watch is None or deadline < self._watch_at:
            self._watch_until(deadline)
        # A cancelled caller's future is cancelled with it: the watch passes it over.
        return future

    def _watch_until(self, deadline: float) -> None:
        if self._watch is not None:
            self._watch.cancel()
        self._watch_at = deadline
        self._watch = self._loop.call_at(deadline, self._check_deadlines)

    def _check_deadlines(self) -> None:
        """The watch fired: a pending call past its deadline closes the connection (it gets
        ReplyTimeout); otherwise wait for the earliest deadline still pending."""
        self._watch = None
        due = self._loop.time() + _CLOCK_RESOLUTION_S
        earliest: float | None = None
        for future, deadline in self.core.waiting():
            if future.done():
                continue
            if deadline <= due:
                self.close(ReplyTimeout(f"no reply within {self.timeout_s} s"), first=future)
                return
            if earliest is None or deadline < earliest:
                earliest = deadline
        if earliest is not None:
            self._watch_until(earliest)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and self.alive and self._transport is not None:
            data = b"".join(self._out)
            self._out.clear()
            self._transport.write(data)

    def close(self, error: UnknownOutcome, first: asyncio.Future[list[Any]] | None = None) -> None:
        """Close the connection; every call still waiting fails with ``error`` (an unknown
        outcome; ``first``, the call that timed out, gets it, the others ConnectionLost)."""
        was_alive, self.alive = self.alive, False
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for future, _ in self.core.abandon():
            if not future.done():
                lost = error if (first is None or future is first) else ConnectionLost(str(error))
                future.set_exception(lost)
        self._out.clear()
        if was_alive and self._transport is not None:
            self._transport.abort()


class _Waiter:
    __slots__ = ("error", "event", "replies")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.replies: list[Any] = []
        self.error: UnknownOutcome | None = None


class AnyioConnection:
    """One connection on any anyio backend; see the module docstring. ``run`` (its reader and
    writer) must run in a task group for as long as the connection is used."""

    def __init__(self, stream: anyio.abc.ByteStream, timeout_s: float) -> None:
        self.core: RespCore[_Waiter] = RespCore()
        self.timeout_s = timeout_s
        self.alive = True
        self._stream = stream
        self._out: list[bytes] = []
        self._wake: anyio.Event | None = None
        self._scope = anyio.CancelScope()

    @classmethod
    async def open(
        cls, endpoint: Endpoint, group: anyio.abc.TaskGroup, deadline: float
    ) -> AnyioConnection:
        """Connect, start the reader and writer in ``group`` and run the handshake by
        ``deadline`` (``anyio.current_time``); NotSent when the server cannot be reached, or
        does not answer the handshake, by then."""
        try:
            with anyio.CancelScope(deadline=deadline) as connecting:
                if endpoint.unix_path is not None:
                    stream: anyio.abc.ByteStream = await anyio.connect_unix(endpoint.unix_path)
                elif endpoint.ssl_context is not None:
                    stream = await anyio.connect_tcp(
                        endpoint.host,
                        endpoint.port,
                        ssl_context=endpoint.ssl_context,
                        tls_hostname=endpoint.host,
                        tls_standard_compatible=False,
                    )
                else:
                    stream = await anyio.connect_tcp(endpoint.host, endpoint.port)
        except OSError as exc:  # a missing socket file too: nothing was sent
            raise NotSent(f"connect {endpoint.where}: {exc!r}") from exc
        if connecting.cancelled_caught:
            raise NotSent(f"connect {endpoint.where}: timed out")
        conn = cls(stream, endpoint.timeout_s)
        group.start_soon(conn.run)
        try:
            await _handshake(conn, endpoint, deadline)
        except BaseException:  # refused, timed out or cancelled: the connection goes with it
            conn.close(ConnectionLost("handshake not completed"))
            raise
        return conn

    @property
    def pending(self) -> int:
        """Calls written and not yet answered."""
        return self.core.pending

    async def run(self) -> None:
        """Read replies and write queued commands until the connection closes; then fail
        whoever still waits. Writing is this task's job, never a caller's: a cancelled caller
        cannot cut a command in half, and no caller waits behind others' writes."""
        with self._scope:
            async with anyio.create_task_group() as group:
                group.start_soon(self._write_loop)
                await self._read_loop()
        with anyio.CancelScope(shield=True):
            await anyio.aclose_forcefully(self._stream)

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._stream.receive(READ_SIZE)
                try:
                    done = self.core.receive(data)
                except ProtocolError as exc:
                    # The calls answered in full before the fault get their replies first.
                    _deliver(exc.completed)
                    raise
                _deliver(done)
        except anyio.EndOfStream:
            self.close(ConnectionLost("connection closed by the server"))
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self.close(ConnectionLost(f"connection lost: {exc!r}"))
        except ProtocolError as exc:
            self.close(ConnectionLost(f"protocol error: {exc}"))

    async def _write_loop(self) -> None:
        try:
            while True:
                if not self._out:
                    self._wake = anyio.Event()
                    await self._wake.wait()
                    continue
                data = b"".join(self._out)
                self._out.clear()
                with anyio.fail_after(self.timeout_s):
                    await self._stream.send(data)
        except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError) as e:
            self.close(ConnectionLost(f"write failed: {e!r}"))

    async def request(
        self, commands: tuple[bytes, ...], deadline: float | None = None
    ) -> list[Any]:
        """Queue ``commands`` (written together, in order) and return their replies;
        ReplyTimeout when they are not back by ``deadline`` (``anyio.current_time``; None:
        ``timeout_s`` from now)."""
        if not self.alive:
            raise NotSent("connection closed")
        waiter = _Waiter()
        self._out.append(self.core.request(waiter, commands))
        if self._wake is not None:
            self._wake.set()
        if deadline is None:
            deadline = anyio.current_time() + self.timeout_s
        with anyio.CancelScope(deadline=deadline) as waiting:
            await waiter.event.wait()
        if waiting.cancelled_caught and not waiter.event.is_set():
            self.close(ReplyTimeout(f"no reply within {self.timeout_s} s"), first=waiter)
            if waiter.error is None:  # no longer pending here: it is failed all the same
                waiter.error = ReplyTimeout(f"no reply within {self.timeout_s} s")
        if waiter.error is not None:
            raise waiter.error
        return waiter.replies

    def close(self, error: UnknownOutcome, first: _Waiter | None = None) -> None:
        """Close the connection; every call still waiting fails with ``error`` (see
        ``AsyncioConnection.close``)."""
        self.alive = False
        for waiter in self.core.abandon():
            if not waiter.event.is_set():
                lost = error if (first is None or waiter is first) else ConnectionLost(str(error))
                waiter.error = lost
                waiter.event.set()
        self._out.clear()
        self._scope.cancel()


def _deliver(done: list[tuple[_Waiter, list[Any]]]) -> None:
    for waiter, replies in done:
        waiter.replies = replies
        waiter.event.set()


Connection = AsyncioConnection | AnyioConnection


async def _handshake(
    conn: AsyncioConnection | AnyioConnection, endpoint: Endpoint, deadline: float
) -> None:
    commands = endpoint.handshake()
    if not commands:
        return
    try:
        replies = await conn.request(commands, deadline)
    except UnknownOutcome as exc:
        raise NotSent(f"handshake with {endpoint.where}: {exc}") from exc
    for reply in replies:
        if isinstance(reply, ReplyError):
            conn.close(ConnectionLost("handshake refused"))
            raise reply
