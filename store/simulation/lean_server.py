"""The lean store (``store.simulation.lean_redis``) behind a ``memory://`` URL: the store's client
talks to it with no socket and no RESP round trip, the check reads it through a small redis-py-
shaped facade.

Layer: store. ``LeanServer`` is registered like ``store.simulation.memory_transport``'s
fakeredis server (``serve_memory_store(server=LeanServer)``); ``LeanConnection`` has the
interface of ``store.redis_conn``'s connections: the command bytes ``pack`` made are parsed
(hiredis), run whole inside the caller's task between two checkpoints (a "send" and a "reply",
as the fakeredis transport does, so trio interleaves calls exactly as there), and the replies
handed over in the form ``RespCore`` gives them. ``recording`` keeps every request and its
replies' RESP bytes (the differential test replays them on fakeredis and a real Redis).

A blocking ``XREAD`` that finds nothing (``store.simulation.lean_streams.Blocked``) holds its
connection, as on Redis: the caller's task waits, with no busy loop, until an ``XADD`` to one of
its keys (from any connection, a script's included) sets the event it waits on, or its timeout
passes on the caller's clock (trio's virtual clock in a deterministic run), or the connection
closes; then the read runs again without ``BLOCK``. The recording keeps a blocked read as that
last read, at the moment it was answered: what a replay (which does not block) sends then.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import hiredis

from store.redis_errors import ConnectionLost, NotSent, UnknownOutcome
from store.resp import ReplyError
from store.simulation.lean_redis import Blocked, Error, LeanRedis, decoded, encode
from store.simulation.lean_values import NULL_ARRAY

RecordedRequest = tuple[int, float, list[list[bytes]], list[bytes]]
"""One request: connection number, the store's clock then (seconds), its commands (arguments),
each reply's RESP bytes."""


class LeanServer:
    """One lean store that memory connections talk to."""

    def __init__(self) -> None:
        self.redis = LeanRedis()
        self.connections = itertools.count(1)
        self.recording: list[RecordedRequest] | None = None
        self.waiting: dict[bytes, set[anyio.Event]] = {}
        """Events of the reads blocked on each key."""

    def wake_appended(self) -> None:
        """Wake the reads blocked on a key an ``XADD`` appended to since the last call."""
        appended = self.redis.appended
        if not appended:
            return
        for key in sorted(appended):
            for event in self.waiting.pop(key, ()):
                event.set()
        appended.clear()

    def connect(self) -> LeanConnection:
        """A new connection to this store."""
        return LeanConnection(self)

    def sync_client(self, *, decode_responses: bool = False) -> LeanSyncClient:
        """The check's reads (``store.journal``, ``loadgen.run.pipeline``), no socket."""
        return LeanSyncClient(self.redis, decode_responses=decode_responses)


_READER = hiredis.Reader()
"""One parser for every request of this process: a request is parsed whole before the next
(no checkpoint in between), and a bad one resets it."""


def _parse(data: bytes) -> list[bytes]:
    _READER.feed(data)
    args = _READER.gets()
    if not isinstance(args, list) or _READER.gets() is not False:
        _READER.__init__()  # type: ignore[misc]
        raise ConnectionLost("lean store: a request is not one RESP command")
    return args


class LeanConnection:
    """One connection to a ``LeanServer`` (see the module docstring)."""

    def __init__(self, server: LeanServer) -> None:
        self.server = server
        self.number = next(server.connections)
        self.alive = True
        self._event: anyio.Event | None = None
        """What a blocking read on this connection waits on (None: none waits)."""

    pending = 0
    """Calls written and not yet answered: none between two calls, each runs whole."""

    async def request(
        self, commands: tuple[bytes, ...], deadline: float | None = None
    ) -> list[Any]:
        """Run ``commands`` (together, in order) and return their replies."""
        del deadline
        if not self.alive:
            raise NotSent("connection closed")
        await anyio.lowlevel.checkpoint()  # the send
        if not self.alive:
            raise NotSent("connection closed")
        server = self.server
        redis = server.redis
        parsed = [_parse(c) for c in commands]
        raw = [redis.command(args) for args in parsed]
        server.wake_appended()
        if len(raw) == 1 and isinstance(raw[0], Blocked):
            parsed, raw = await self._blocked(raw[0])
        self._record(parsed, raw)
        replies = [decoded(r, ReplyError) for r in raw]
        await anyio.lowlevel.checkpoint()  # the reply
        return replies

    async def _blocked(self, blocked: Blocked) -> tuple[list[list[bytes]], list[Any]]:
        """Wait for an append to one of ``blocked.keys`` or its timeout; the read again."""
        server, redis = self.server, self.server.redis
        deadline = anyio.current_time() + blocked.timeout_ms / 1000 if blocked.timeout_ms else None
        while True:
            event = anyio.Event()
            for key in blocked.keys:
                server.waiting.setdefault(key, set()).add(event)
            self._event = event
            try:
                with anyio.CancelScope(deadline=deadline or float("inf")):
                    await event.wait()
            finally:
                self._event = None
                for key in blocked.keys:
                    waiting = server.waiting.get(key)
                    if waiting is not None:
                        waiting.discard(event)
                        if not waiting:
                            del server.waiting[key]
            if not self.alive:
                raise ConnectionLost("lean store: connection closed during a blocking read")
            reply = redis.command(blocked.again)
            if reply is not NULL_ARRAY or (
                deadline is not None and anyio.current_time() >= deadline
            ):
                return [blocked.again], [reply]

    def _record(self, parsed: list[list[bytes]], raw: list[Any]) -> None:
        recording = self.server.recording
        if recording is not None:
            replies_bytes = [encode(r) for r in raw]
            recording.append((self.number, self.server.redis.clock(), parsed, replies_bytes))

    def close(self, error: UnknownOutcome, first: object = None) -> None:
        """Close the connection (nothing waits on it between calls)."""
        del error, first
        self.alive = False
        if self._event is not None:
            self._event.set()


class _Pipeline:
    """``client.pipeline(transaction=False)``: the calls queued, run on ``execute``."""

    def __init__(self, client: LeanSyncClient) -> None:
        self._client = client
        self._queued: list[tuple[str, tuple[Any, ...]]] = []

    def hget(self, key: str, field: str) -> None:
        self._queued.append(("hget", (key, field)))

    def hmget(self, key: str, *fields: str) -> None:
        self._queued.append(("hmget", (key, fields)))

    def pttl(self, key: str) -> None:
        self._queued.append(("pttl", (key,)))

    def execute(self) -> list[Any]:
        out = [getattr(self._client, name)(*args) for name, args in self._queued]
        self._queued.clear()
        return out


def _b(value: str | bytes | int) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


class LeanSyncClient:
    """The redis-py calls the check makes, answered as redis-py answers them: ``scan_iter``,
    ``xrange``, ``hget``, ``hmget``, ``hgetall``, ``get``, ``pttl``, ``zcard``, ``time``,
    ``delete``, ``pipeline``."""

    def __init__(self, redis: LeanRedis, *, decode_responses: bool) -> None:
        self._redis = redis
        self._decode = decode_responses

    def _run(self, *args: str | bytes | int) -> Any:
        reply = self._redis.command([_b(a) for a in args])
        if isinstance(reply, Error):
            raise RuntimeError(reply.text)
        return reply

    def _out(self, value: Any) -> Any:
        if self._decode and isinstance(value, bytes):
            return value.decode("utf-8")
        if isinstance(value, list):
            return [self._out(v) for v in value]
        return value

    def scan_iter(self, match: str | bytes = "*", count: int | None = None) -> Iterator[Any]:
        del count
        _, keys = self._run("SCAN", "0", "MATCH", match)
        return iter(self._out(keys))

    def xrange(
        self, name: str, min: str = "-", max: str = "+", count: int | None = None
    ) -> list[tuple[Any, dict[Any, Any]]]:
        extra: tuple[str | int, ...] = () if count is None else ("COUNT", count)
        entries = self._run("XRANGE", name, min, max, *extra)
        out = []
        for entry_id, fields in entries:
            flat = self._out(fields)
            out.append((self._out(entry_id), dict(zip(flat[::2], flat[1::2], strict=True))))
        return out

    def hget(self, key: str, field: str) -> Any:
        return self._out(self._run("HGET", key, field))

    def hmget(self, key: str, fields: Sequence[str]) -> Any:
        return self._out(self._run("HMGET", key, *fields))

    def hgetall(self, key: str) -> dict[Any, Any]:
        flat = self._out(self._run("HGETALL", key))
        return dict(zip(flat[::2], flat[1::2], strict=True))

    def get(self, key: str) -> Any:
        return self._out(self._run("GET", key))

    def pttl(self, key: str) -> int:
        return int(self._run("PTTL", key))

    def zcard(self, key: str) -> int:
        return int(self._run("ZCARD", key))

    def time(self) -> tuple[int, int]:
        sec, usec = self._run("TIME")
        return int(sec), int(usec)

    def delete(self, *keys: str) -> int:
        return int(self._run("DEL", *keys)) if keys else 0

    def pipeline(self, transaction: bool = True) -> _Pipeline:
        del transaction
        return _Pipeline(self)

    def close(self) -> None:
        """Nothing to close (no socket)."""
