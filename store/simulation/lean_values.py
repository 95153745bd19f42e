"""The lean store's values and key space: replies, errors, argument parsing, lazy expiry.

Layer: store (nothing of ours). Shared by the lean store's command groups
(``store.simulation.lean_redis``, ``store.simulation.lean_streams``,
``store.simulation.lean_sorted``): each is a mixin of ``KeySpace``, which holds the keys, their
deadlines and the millisecond clock of the command being run.
"""

from __future__ import annotations

import re
from typing import Any

MAX_ID = (1 << 64) - 1

RawReply = Any
"""A reply in raw form: ``bytes`` (bulk), ``int``, ``None`` (nil), ``NULL_ARRAY``, ``list``,
``SimpleString``, ``Error``."""


class SimpleString(bytes):
    """A simple-string reply (``+OK``): RESP's status reply."""


class NullArray:
    """A null array reply (``*-1``: RESP2's nil of a command whose reply is an array, such as an
    ``XREAD`` that found nothing)."""

    __slots__ = ()


NULL_ARRAY = NullArray()


class Error(Exception):
    """An error reply (``-ERR ...``): its text, code first."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOSCRIPT = "NOSCRIPT No matching script. Please use EVAL."
NOT_INTEGER = "ERR value is not an integer or out of range"
HASH_NOT_INTEGER = "ERR hash value is not an integer"
SYNTAX = "ERR syntax error"


def integer(arg: bytes, message: str = NOT_INTEGER) -> int:
    """A Redis integer argument (no spaces, no '+', no float)."""
    if not re.fullmatch(rb"-?\d+", arg):
        raise Error(message)
    value = int(arg)
    if not -(1 << 63) <= value < (1 << 63):
        raise Error(message)
    return value


def stream_id(text: bytes, default_seq: int) -> tuple[int, int]:
    """A stream id argument (``-`` and ``+`` the least and the greatest)."""
    if text == b"-":
        return (0, 0)
    if text == b"+":
        return (MAX_ID, MAX_ID)
    ms, _, seq = text.partition(b"-")
    try:
        return (int(ms), int(seq) if seq else default_seq)
    except ValueError:
        raise Error("ERR Invalid stream ID specified as stream command argument") from None


def id_text(entry_id: tuple[int, int]) -> bytes:
    """A stream id as Redis writes it."""
    return b"%d-%d" % entry_id


class KeySpace:
    """Keys, their deadlines (ms since the epoch) and the clock of the command being run."""

    def __init__(self) -> None:
        self.data: dict[bytes, Any] = {}
        self.expires: dict[bytes, int] = {}
        """Deadlines, ms since the epoch."""
        self.now_ms = 0
        """The millisecond clock of the command being run (a script's: when it started)."""

    def clock_us(self) -> int:
        """The clock in whole microseconds (what ``gettimeofday`` gives Redis)."""
        raise NotImplementedError

    def _live(self, key: bytes) -> Any:
        """The value at ``key``, None when absent or expired (an expired key is dropped)."""
        value = self.data.get(key)
        if value is not None:
            deadline = self.expires.get(key)
            if deadline is not None and self.now_ms > deadline:
                del self.data[key]
                del self.expires[key]
                return None
        return value

    def _typed(self, key: bytes, kind: type) -> Any:
        value = self._live(key)
        if value is not None and type(value) is not kind:
            raise Error(WRONGTYPE)
        return value

    def _drop(self, key: bytes) -> None:
        del self.data[key]
        self.expires.pop(key, None)

    def _expire_at(self, key: bytes, when_ms: int) -> int:
        """Set ``key``'s deadline (0: no such key); one not in the future deletes the key, as
        Redis's ``checkAlreadyExpired`` does."""
        if self._live(key) is None:
            return 0
        if when_ms <= self.now_ms:
            self._drop(key)
        else:
            self.expires[key] = when_ms
        return 1
