"""Replaying a recorded command stream through three stores, replies compared byte for byte.

Layer: tests. A stream is what a deterministic run's lean store recorded
(``store.simulation.lean_server.LeanServer.recording``): per request, the connection, the clock
then, the commands, the replies. ``replay`` sends it again, request by request and on the
same connections, with each store's clock set to the recorded time first: a fresh lean store
(``LeanRedis`` on a clock of the test's), fakeredis (``time.time`` set, as the deterministic
world sets it) and a real ``redis-server`` on a clock the test sets (``tests.own_clock``).
``first_difference`` names the first request where any two stores' replies differ: byte for
byte between the lean store, the recorded replies and the real Redis (each writes true RESP);
as the client reads them (parsed) for fakeredis, whose in-process replies pass through its TCP
server's encoder, which writes a top-level string as a simple string where Redis writes a bulk
string (``+<sha>`` for ``SCRIPT LOAD``): a difference no client sees; and with
``fakeredis_deviates`` allowed (its ``PTTL`` rounding, its empty ``XREAD``).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import hiredis
from fakeredis import FakeServer
from fakeredis._clients._sync import FakeRedisConnection
from fakeredis._clients._tcp_server import _INTERNAL_CONNECTION_KWARGS, encode_reply
from fakeredis._typing import RaiseErrorTypes

from store.resp import pack
from store.simulation.lean_redis import LeanRedis, encode
from store.simulation.lean_server import RecordedRequest
from tests.own_clock import ClockedRedis

Replier = Callable[[int, float, list[list[bytes]]], list[bytes]]
"""(connection, clock in seconds, commands) -> each reply's RESP bytes."""


def lean_replier(redis: LeanRedis | None = None) -> Replier:
    """A fresh lean store (or ``redis``, a test's planted one) on the recorded clock."""
    now = [0.0]
    store = redis if redis is not None else LeanRedis()
    store._clock = lambda: now[0]

    def reply(conn: int, clock: float, commands: list[list[bytes]]) -> list[bytes]:
        del conn
        now[0] = clock
        return [encode(store.command(args)) for args in commands]

    return reply


class _NoPush:
    def write(self, value: bytes) -> None:
        del value

    def dump(self, value: Any) -> None:
        del value


@contextmanager
def fakeredis_replier() -> Iterator[Replier]:
    """A fresh fakeredis server (Redis 8 flavour, as ``store.simulation.memory_transport``'s), its
    ``time.time`` set to the recorded clock for each request."""
    server = FakeServer(server_type="redis", version=(8, 0))
    connections: dict[int, FakeRedisConnection] = {}
    saved = time.time
    now = [0.0]
    time.time = lambda: now[0]
    try:

        def reply(conn: int, clock: float, commands: list[list[bytes]]) -> list[bytes]:
            now[0] = clock
            if conn not in connections:
                connections[conn] = FakeRedisConnection(
                    server=server,
                    writer=_NoPush(),
                    client_info={"laddr": ("memory", 0), "addr": ("memory", conn)},
                    **_INTERNAL_CONNECTION_KWARGS,
                )
            c = connections[conn]
            sock = c.get_socket()
            sock.sendall(b"".join(pack(*args) for args in commands))
            out = []
            while c.can_read():
                try:
                    value = c.read_response()
                except RaiseErrorTypes as exc:
                    value = exc
                out.append(encode_reply(value, 2))
            return out

        yield reply
    finally:
        time.time = saved


@contextmanager
def redis_replier(server: ClockedRedis) -> Iterator[Replier]:
    """A real ``redis-server`` on the test's clock: one socket per recorded connection; each
    request written whole, its replies read back as raw bytes."""
    sockets: dict[int, socket.socket] = {}
    try:

        def reply(conn: int, clock: float, commands: list[list[bytes]]) -> list[bytes]:
            server.set_us(round(clock * 1_000_000))
            if conn not in sockets:
                sockets[conn] = socket.create_connection(("127.0.0.1", server.server.port), 10)
            s = sockets[conn]
            s.sendall(b"".join(pack(*args) for args in commands))
            return _read_replies(s, len(commands))

        yield reply
    finally:
        for s in sockets.values():
            s.close()


def _read_replies(s: socket.socket, n: int) -> list[bytes]:
    """``n`` replies' raw bytes, each cut where the parser says it ends."""
    out: list[bytes] = []
    buffer = b""
    while len(out) < n:
        chunk = s.recv(1 << 16)
        if not chunk:
            raise ConnectionError("redis-server closed the connection")
        buffer += chunk
        while len(out) < n:
            end = _reply_end(buffer)
            if end is None:
                break
            out.append(buffer[:end])
            buffer = buffer[end:]
    return out


def _reply_end(data: bytes, pos: int = 0) -> int | None:
    """Where the RESP2 reply starting at ``pos`` ends (None: not all here yet)."""
    line_end = data.find(b"\r\n", pos)
    if line_end < 0:
        return None
    kind, head = data[pos : pos + 1], data[pos + 1 : line_end]
    nxt = line_end + 2
    if kind in (b"+", b"-", b":"):
        return nxt
    if kind == b"$":
        size = int(head)
        if size < 0:
            return nxt
        return nxt + size + 2 if len(data) >= nxt + size + 2 else None
    if kind == b"*":
        count = int(head)
        for _ in range(max(count, 0)):
            end = _reply_end(data, nxt)
            if end is None:
                return None
            nxt = end
        return nxt
    raise ValueError(f"not RESP2: {data[pos : pos + 20]!r}")


@dataclass(frozen=True)
class Difference:
    """The first request where the stores answered differently."""

    index: int
    commands: list[list[bytes]]
    replies: dict[str, list[bytes]]

    def describe(self) -> str:
        shown = [b" ".join(a[:6]).decode(errors="replace")[:160] for a in self.commands]
        lines = [f"request {self.index}: {shown}"]
        lines += [f"  {name}: {r!r}"[:400] for name, r in self.replies.items()]
        return "\n".join(lines)


PARSED_ONLY = frozenset({"fakeredis"})
"""Stores compared as parsed replies, not bytes (see the module docstring)."""


def fakeredis_deviates(command: list[bytes], reference: Any, fake: Any) -> bool:
    """fakeredis' known differences in what these streams read: it has no ``ROLE`` (the
    readiness probe's question; the embedded store is never a replica); ``PTTL`` counts from the
    current instant to the deadline and rounds (``round((deadline - now) * 1000)``), where Redis
    subtracts whole milliseconds (``when - mstime()``), so it may answer one off (one more for a
    deadline it set from its fractional clock, ``SET ... PX``); an ``XREAD``
    that reads nothing gets an empty array from it where Redis answers a null array (``*-1``)."""
    if command[0].upper() == b"ROLE":
        return isinstance(fake, tuple) and fake[0] == "error" and "unknown command" in fake[1]
    if command[0].upper() == b"XREAD":
        return reference is None and fake == []  # nothing read: Redis's null array, its empty one
    return (
        command[0].upper() == b"PTTL"
        and isinstance(reference, int)
        and isinstance(fake, int)
        and reference - fake in (-1, 0, 1)
    )


def _agree(commands: list[list[bytes]], reference: list[Any], fake: list[Any]) -> bool:
    return len(reference) == len(fake) and all(
        r == f or fakeredis_deviates(c, r, f)
        for c, r, f in zip(commands, reference, fake, strict=True)
    )


def parsed(replies: list[bytes]) -> list[Any]:
    """Each reply as a client's parser reads it (an error reply as ``("error", text)``)."""
    out = []
    for raw in replies:
        reader = hiredis.Reader()
        reader.feed(raw)
        value = reader.gets()
        out.append(("error", str(value)) if isinstance(value, hiredis.ReplyError) else value)
    return out


def first_difference(
    stream: list[RecordedRequest], stores: dict[str, Replier]
) -> Difference | None:
    """Replay ``stream`` through every store in ``stores``; the first request whose replies
    differ between any two of them (the recorded replies, when there are any, count as one
    more store), or None."""
    for index, (conn, clock, commands, recorded) in enumerate(stream):
        replies = {"recorded": recorded} if recorded else {}
        replies.update({name: reply(conn, clock, commands) for name, reply in stores.items()})
        exact = [r for name, r in replies.items() if name not in PARSED_ONLY]
        reference = parsed(exact[0])
        if any(r != exact[0] for r in exact) or not all(
            _agree(commands, reference, parsed(r))
            for name, r in replies.items()
            if name in PARSED_ONLY
        ):
            return Difference(index, commands, replies)
    return None


PROBES = {
    "dict": (b"HGETALL",),
    "set": (b"SCARD",),
    "Stream": (b"XRANGE",),
    "bytes": (b"GET",),
    "ZSet": (b"ZRANGE",),
}
"""What the end-state probe reads of a key, by the lean store's type of it: a hash's fields in
order, a set's size (its members' order is the server's own), a stream's entries, a string, a
sorted set's members with their scores."""


def named_keys(stream: list[RecordedRequest]) -> set[bytes]:
    """Every key the stream's commands name (a script's KEYS, a read's key)."""
    keys: set[bytes] = set()
    for _, _, commands, _ in stream:
        for args in commands:
            name = args[0].upper()
            if name in (b"EVALSHA", b"EVAL"):
                keys.update(args[3 : 3 + int(args[2])])
            elif name in (b"HMGET", b"GET", b"HGET", b"XREVRANGE", b"ZREM"):
                keys.add(args[1])
    return keys


def end_state_probe(stream: list[RecordedRequest], final: LeanRedis) -> list[RecordedRequest]:
    """Requests that read the state a stream left (at its last clock) on a connection of its
    own: existence and TTL of every key it named or the lean store holds, and each live key's
    value (``PROBES``). No recorded replies: the stores are held to each other."""
    clock = stream[-1][1]
    final._clock = lambda: clock
    final.now_ms = final.clock_us() // 1000
    live = {k: type(v).__name__ for k in final.live_keys() for v in [final.data[k]]}
    out: list[RecordedRequest] = []
    for key in sorted(named_keys(stream) | set(live)):
        commands = [[b"EXISTS", key], [b"PTTL", key]]
        kind = live.get(key)
        if kind is not None:
            command = PROBES[kind][0]
            if command == b"XRANGE":
                commands.append([command, key, b"-", b"+"])
            elif command == b"ZRANGE":
                commands.append([command, key, b"0", b"-1", b"WITHSCORES"])
            else:
                commands.append([command, key])
        out.append((0, clock, commands, []))
    return out
