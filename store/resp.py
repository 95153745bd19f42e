"""The Redis wire protocol (RESP2), sans-IO: commands in as bytes, replies out, in order.

Layer: store. Pure module: no sockets, no event loop, no trio or asyncio (h11's shape). A
transport (``store.redis_conn``) writes what ``RespCore.request`` returns, feeds what it reads to
``RespCore.receive`` and hands each completed request its replies. Parsing and encoding are
``hiredis`` (C); what this module adds is the one thing a multiplexed connection must get right:
replies come back in the order requests were written, so each request owns the next ``n``.

An error reply (``-ERR ...``) is a value here (``ReplyError``), never raised: a request of two
commands (a script, then ``WAIT``) gets both replies whatever the first one said.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Generic, TypeVar

import hiredis

W = TypeVar("W")


class ReplyError(Exception):
    """An error reply from the server (``-NOSCRIPT ...``, ``-OOM ...``): the server refused the
    command, so its outcome is known. ``code`` is the reply's first word."""

    @property
    def code(self) -> str:
        """The error's first word, as Redis classifies it (``ERR``, ``NOSCRIPT``, ``MOVED``)."""
        text = str(self)
        return text.split(" ", 1)[0] if text else ""


class ProtocolError(Exception):
    """The bytes received are not RESP (or a reply outgrew ``MAX_REPLY_BYTES``): the connection
    can no longer be trusted. ``completed``: the requests answered in full by the bytes before
    the fault, each with its replies, which the transport delivers before it closes."""

    def __init__(self, message: str, completed: list[tuple[Any, list[Any]]] | None = None):
        super().__init__(message)
        self.completed: list[tuple[Any, list[Any]]] = completed or []


MAX_REPLY_BYTES = 32 << 20
"""The largest reply a connection takes (32 MiB); a larger one closes the connection and every
call waiting on it gets an unknown outcome. No reply of the note store comes near it: the
largest are ``READ_LIMIT`` (1,000) note heads or one note of at most a 64 KiB body, well under
1 MiB. The bound keeps a hostile or broken server from making a node hold what it sends: the
bytes of a reply not yet complete (the reader's buffer and what it has parsed of it) never
exceed it by more than one read (``store.redis_conn.READ_SIZE``)."""


_NEED_DATA: Any = object()


def pack(*args: str | bytes | int | float) -> bytes:
    """One command as RESP bytes (a multi-bulk of its arguments)."""
    return hiredis.pack_command(args)  # type: ignore[arg-type,no-any-return]


class RespCore(Generic[W]):
    """The protocol state of one connection: the requests written and not yet answered, and the
    parser of what came back. ``W`` is whatever the transport uses to wake a waiting caller;
    the core only stores and returns it."""

    __slots__ = ("_expected", "_partial", "_reader", "max_reply_bytes")

    def __init__(
        self, encoding: str | None = "utf-8", *, max_reply_bytes: int = MAX_REPLY_BYTES
    ) -> None:
        self._reader = hiredis.Reader(
            replyError=ReplyError,
            protocolError=ProtocolError,
            notEnoughData=_NEED_DATA,
            encoding=encoding,
        )
        self._expected: deque[tuple[W, int, list[Any]]] = deque()
        self._partial = 0
        """Bytes received towards the reply being parsed (an upper bound, see ``receive``)."""
        self.max_reply_bytes = max_reply_bytes

    def request(self, waiter: W, commands: tuple[bytes, ...]) -> bytes:
        """Record that ``commands`` (each from ``pack``) are about to be written for ``waiter``;
        return the bytes to write. The waiter completes with one reply per command."""
        self._expected.append((waiter, len(commands), []))
        return commands[0] if len(commands) == 1 else b"".join(commands)

    @property
    def pending(self) -> int:
        """Requests written and not yet fully answered."""
        return len(self._expected)

    def receive(self, data: bytes) -> list[tuple[W, list[Any]]]:
        """Feed bytes read from the connection; return the requests they complete, in order,
        each with its replies. ProtocolError when the bytes are not RESP, when a reply arrives
        that no request is waiting for, or when the reply being parsed has grown past
        ``max_reply_bytes``; the requests completed before the fault ride on the error
        (``ProtocolError.completed``), so a reply that arrived whole is never lost to the bytes
        behind it."""
        self._reader.feed(data)
        done: list[tuple[W, list[Any]]] = []
        expected = self._expected
        try:
            while True:
                reply = self._reader.gets()
                if reply is _NEED_DATA:
                    break
                if not expected:
                    raise ProtocolError("a reply arrived that no request was waiting for")
                waiter, needed, replies = expected[0]
                replies.append(reply)
                if len(replies) == needed:
                    expected.popleft()
                    done.append((waiter, replies))
                self._partial = -1  # a reply ended in these bytes: recount below
        except ProtocolError as exc:
            raise ProtocolError(str(exc), list(done)) from exc
        # What is held for the reply in progress: without a reply ended in these bytes, all of
        # them added to what came before; after one, what the reader still buffers (its
        # consumed head is dropped every KiB, so this overcounts by at most that).
        if self._partial < 0:
            self._partial = self._reader.len()
        else:
            self._partial += len(data)
        if self._partial > self.max_reply_bytes:
            raise ProtocolError(
                f"a reply longer than {self.max_reply_bytes} bytes (MAX_REPLY_BYTES)", done
            )
        return done

    def waiting(self) -> list[W]:
        """The waiters of the requests written and not yet fully answered, oldest first."""
        return [w for w, _, _ in self._expected]

    def abandon(self) -> list[W]:
        """The connection is gone: forget every pending request and return their waiters, so
        the transport can tell each one its outcome is unknown."""
        waiters = [w for w, _, _ in self._expected]
        self._expected.clear()
        return waiters
