"""A TCP proxy in front of a Redis that lets Redis run a command and then loses its reply.

Layer: cluster (fault support; tests use it too). Knows RESP framing (RESP2 and RESP3) and
nothing of our keys, scripts or nodes. A lost reply is the fault that makes a write's outcome
unknown: the command ran, the client never learns it. The proxy reads the commands each client
sends and the replies Redis sends back, pairs them in order, and when a reply belongs to a
command picked for dropping, drops it:

    ``"close"``  and cuts that client's connection at once (the client sees a dropped connection:
                 ``ConnectionError``), as a node or network failing between reply and client would;
    ``"stall"``  and every later reply on that connection (the client sees its read time out), as
                 a link that went silent would; the next command the client sends on it is not
                 passed on, and the connection is cut (the client sees a dropped connection for
                 a command that never ran: a client that keeps using a timed-out connection
                 finds out it is dead).

Use::

    async with open_reply_dropping_proxy("127.0.0.1", redis_port) as proxy:
        client = redis_client(proxy.url(0))             # talk to Redis through the proxy
        proxy.drop_next(1, ("EVALSHA", "EVAL"))          # the next script's reply is lost
        ...
        await proxy.wait_dropped(1)                      # it was

Commands are picked when they pass the proxy (in the order clients send them), by name and
optionally by a predicate over their arguments, at most ``n`` per ``drop_next``. Push messages
(RESP3 ``>``) carry no command's reply and always pass.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal

import anyio
import anyio.abc

DropMode = Literal["close", "stall"]
Matcher = Callable[[Sequence[bytes]], bool]
"""Picks a command by its arguments (the first is the command's name, as sent)."""

SCRIPT_COMMANDS: tuple[str, ...] = ("EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL")
"""The commands that run our Lua scripts (coredis sends EVALSHA, EVAL after NOSCRIPT)."""

READ_CHUNK = 65_536


class RespError(ValueError):
    """The bytes are not RESP: the proxy drops the connection (it cannot pair replies)."""


def frame_end(buf: bytes | bytearray, pos: int) -> int | None:
    """Where the RESP frame starting at ``pos`` ends (exclusive), or None if it is incomplete."""
    if pos >= len(buf):
        return None
    kind = chr(buf[pos])
    eol = buf.find(b"\r\n", pos)
    if eol < 0:
        return None
    head = bytes(buf[pos + 1 : eol])
    after = eol + 2
    if kind in "+-:_,#(":
        return after
    try:
        n = int(head)
    except ValueError as exc:
        raise RespError(f"bad length {head[:20]!r}") from exc
    if kind in "$!=":
        if n < 0:
            return after
        end = after + n + 2
        return end if len(buf) >= end else None
    if kind in "*~>%|":
        p: int | None = after
        for _ in range(max(0, n) * (2 if kind in "%|" else 1)):
            p = frame_end(buf, p) if p is not None else None
            if p is None:
                return None
        if kind == "|" and p is not None:  # an attribute precedes the reply it annotates
            return frame_end(buf, p)
        return p
    raise RespError(f"unknown RESP type {kind!r}")


def command_at(buf: bytes | bytearray, pos: int) -> tuple[int, list[bytes]] | None:
    """The command starting at ``pos`` (its end and arguments), or None if it is incomplete.
    Clients send an array of bulk strings; an inline command is one line split by spaces."""
    if pos >= len(buf):
        return None
    if buf[pos] != ord("*"):
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        return eol + 2, bytes(buf[pos:eol]).split()
    end = frame_end(buf, pos)
    if end is None:
        return None
    args: list[bytes] = []
    eol = buf.find(b"\r\n", pos)
    p = eol + 2
    while p < end:
        if buf[p] != ord("$"):
            raise RespError("a command's arguments must be bulk strings")
        eol = buf.find(b"\r\n", p)
        n = int(buf[p + 1 : eol])
        args.append(bytes(buf[eol + 2 : eol + 2 + n]))
        p = eol + 2 + n + 2
    return end, args


@dataclass(frozen=True)
class ProxyStatistics:
    """Counters of one proxy: client connections accepted, commands passed, replies dropped."""

    connections: int
    commands: int
    dropped: int


@dataclass
class _Rule:
    remaining: int
    names: frozenset[str]
    matching: Matcher | None
    mode: DropMode

    def picks(self, args: Sequence[bytes]) -> bool:
        if self.remaining <= 0 or not args:
            return False
        if args[0].decode("ascii", "replace").upper() not in self.names:
            return False
        return self.matching is None or self.matching(args)


class ReplyDroppingProxy:
    """The running proxy (``open_reply_dropping_proxy``): where it listens, what to drop."""

    def __init__(self, host: str, port: int, upstream: tuple[str, int]) -> None:
        self.host = host
        self.port = port
        self.upstream = upstream
        self._rules: list[_Rule] = []
        self._connections = 0
        self._commands = 0
        self._dropped = 0
        self._changed = anyio.Event()

    def url(self, db: int = 0) -> str:
        """A ``redis://`` URL that reaches the Redis behind the proxy, through it."""
        return f"redis://{self.host}:{self.port}/{db}"

    def drop_next(
        self,
        n: int = 1,
        commands: Iterable[str] = SCRIPT_COMMANDS,
        *,
        matching: Matcher | None = None,
        mode: DropMode = "close",
    ) -> None:
        """Drop the replies of the next ``n`` commands named in ``commands`` (any case) for
        which ``matching`` (if given) is true; Redis still runs them. Rules add up."""
        if n < 1:
            raise ValueError("drop at least one reply")
        names = frozenset(c.upper() for c in commands)
        self._rules.append(_Rule(n, names, matching, mode))

    def stop_dropping(self) -> None:
        """Forget every pending ``drop_next``: replies pass from now on."""
        self._rules.clear()

    def statistics(self) -> ProxyStatistics:
        """A snapshot of the counters."""
        return ProxyStatistics(self._connections, self._commands, self._dropped)

    async def wait_dropped(self, total: int) -> None:
        """Wait until ``total`` replies were dropped since the proxy started."""
        while self._dropped < total:
            await self._changed.wait()

    def _pick(self, args: Sequence[bytes]) -> DropMode | None:
        self._commands += 1
        for rule in self._rules:
            if rule.picks(args):
                rule.remaining -= 1
                if rule.remaining == 0:
                    self._rules.remove(rule)
                return rule.mode
        return None

    def _count_drop(self) -> None:
        self._dropped += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def _serve(self, client: anyio.abc.SocketStream) -> None:
        self._connections += 1
        async with client:
            try:
                server = await anyio.connect_tcp(*self.upstream)
            except OSError:
                return
            async with server, anyio.create_task_group() as tg:
                link = _Link(self, client, server, tg.cancel_scope)
                tg.start_soon(link.commands)
                tg.start_soon(link.replies)


class _Link:
    """One client connection and its connection to Redis."""

    def __init__(
        self,
        proxy: ReplyDroppingProxy,
        client: anyio.abc.SocketStream,
        server: anyio.abc.SocketStream,
        scope: anyio.CancelScope,
    ) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.scope = scope
        self.pending: deque[DropMode | None] = deque()
        """Per command sent and not yet answered: how its reply is dropped (None: passed)."""
        self.silent = False

    async def commands(self) -> None:
        buf = bytearray()
        try:
            while True:
                chunk = await self.client.receive(READ_CHUNK)
                if self.silent:
                    break  # the link is dead: what the client sends now never reaches Redis
                buf += chunk
                pos = 0
                while (found := command_at(buf, pos)) is not None:
                    pos, args = found
                    # Decided before Redis can see the whole command, so before it can answer.
                    self.pending.append(self.proxy._pick(args))
                del buf[:pos]
                await self.server.send(chunk)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        except RespError:
            pass
        self.scope.cancel()

    async def replies(self) -> None:
        buf = bytearray()
        try:
            while True:
                buf += await self.server.receive(READ_CHUNK)
                out = bytearray()
                pos = 0
                while (end := frame_end(buf, pos)) is not None:
                    frame, pos = buf[pos:end], end
                    if self.silent:
                        continue
                    if frame[:1] == b">":
                        out += frame
                        continue
                    mode = self.pending.popleft() if self.pending else None
                    if mode is None:
                        out += frame
                        continue
                    self.proxy._count_drop()
                    if mode == "close":
                        if out:
                            await self.client.send(bytes(out))
                        self.scope.cancel()
                        return
                    self.silent = True
                del buf[:pos]
                if out:
                    await self.client.send(bytes(out))
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        except RespError:
            pass
        self.scope.cancel()


@asynccontextmanager
async def open_reply_dropping_proxy(
    upstream_host: str, upstream_port: int, *, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[ReplyDroppingProxy]:
    """Run a proxy to the Redis at ``upstream_host:upstream_port``, listening on ``host`` and
    ``port`` (0: a free one; the proxy's ``port`` says which); stop it and every connection
    through it on exit."""
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    async with listener, anyio.create_task_group() as tg:
        bound = int(listener.extra(anyio.abc.SocketAttribute.local_port))  # noqa: S610 - anyio
        proxy = ReplyDroppingProxy(host, bound, (upstream_host, upstream_port))
        tg.start_soon(listener.serve, proxy._serve)
        try:
            yield proxy
        finally:
            tg.cancel_scope.cancel()
