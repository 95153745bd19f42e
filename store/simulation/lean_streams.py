"""The lean store's streams: XADD (with Redis's node-wise approximate trimming), XRANGE,
XREVRANGE and XREAD, blocking included.

Layer: store (nothing of ours). A stream keeps its entries and the node layout Redis would give
them (``stream-node-max-entries`` 100, ``stream-node-max-bytes`` 4096, each entry's listpack
size as Redis encodes it), because ``MAXLEN ~`` trims whole nodes only: what survives a trim
depends on where the nodes end. The legacy sessions' wake streams (``MAXLEN ~ 16``) reach it in
every run of some length; the differential test (tests/test_lean_store.py) holds the layout to a
real ``redis-server``'s.

A blocking ``XREAD`` is answered at once when any stream has entries after its id; otherwise
the command returns ``Blocked`` and the connection (``store.simulation.lean_server``) waits for
an ``XADD`` to one of its keys (``appended``) or its timeout, on the caller's clock (a trio
virtual clock in a deterministic run), then reads again without blocking. Inside a script
``BLOCK`` does not block, as in Redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from store.simulation.lean_values import (
    NULL_ARRAY,
    SYNTAX,
    Error,
    KeySpace,
    id_text,
    integer,
    stream_id,
)

NODE_MAX_ENTRIES = 100
NODE_MAX_BYTES = 4096
_LP_EMPTY = 7
"""A listpack's header and terminator."""
_SAME_FIELDS = 2
"""The flag of an entry whose field names are its node's master entry's."""


def _lp_int(value: int) -> int:
    """Bytes a listpack spends on an integer element (encoding plus back-length)."""
    for bound, size in ((127, 1), (4095, 2), (32767, 3), (8388607, 4), (2147483647, 5)):
        low = 0 if bound == 127 else -bound - 1
        if low <= value <= bound:
            return size + 1
    return 10


def _lp_str(value: bytes) -> int:
    """Bytes a listpack spends on a string element (an integer when it reads as one)."""
    digits = value[1:] if value[:1] == b"-" else value
    if value == b"0" or (len(value) < 21 and digits.isdigit() and digits[:1] != b"0"):
        as_int = int(value)
        if -(1 << 63) <= as_int < (1 << 63):
            return _lp_int(as_int)
    encoded = len(value) + (1 if len(value) < 64 else 2 if len(value) < 4096 else 5)
    back = 1 if encoded <= 127 else 2 if encoded <= 16383 else 3 if encoded <= 2097151 else 4
    return encoded + back


@dataclass
class _Node:
    """One listpack node: its master entry (id, field names), its entries, its size."""

    master: tuple[int, int]
    names: list[bytes]
    entries: int
    size: int


class Stream:
    """A stream: entries in id order, each ``((ms, seq), [field, value, ...])``, and the nodes
    Redis would hold them in."""

    __slots__ = ("entries", "last", "nodes")

    def __init__(self) -> None:
        self.entries: list[tuple[tuple[int, int], list[bytes]]] = []
        self.last = (0, 0)
        self.nodes: list[_Node] = []

    def add(self, entry_id: tuple[int, int], fields: list[bytes]) -> None:
        """Append an entry, into the last node or a new one as Redis decides."""
        names, values = fields[0::2], fields[1::2]
        node = self.nodes[-1] if self.nodes else None
        if node is not None and (
            node.size + sum(map(len, fields)) >= NODE_MAX_BYTES or node.entries >= NODE_MAX_ENTRIES
        ):
            node = None
        if node is None:
            header = _lp_int(0) * 3 + _lp_int(len(names)) + sum(map(_lp_str, names))
            node = _Node(entry_id, names, 0, _LP_EMPTY + header)
            self.nodes.append(node)
        same = names == node.names
        size = (
            _lp_int(_SAME_FIELDS if same else 0)
            + _lp_int(entry_id[0] - node.master[0])
            + _lp_int(entry_id[1] - node.master[1])
            + sum(map(_lp_str, values))
            + _lp_int(len(names) + 3 if same else 2 * len(names) + 4)
        )
        if not same:
            size += _lp_int(len(names)) + sum(map(_lp_str, names))
        # The node's live-entries counter at its head grows with its value.
        node.size += size + _lp_int(node.entries + 1) - _lp_int(node.entries)
        node.entries += 1
        self.entries.append((entry_id, fields))
        self.last = entry_id

    def trim_approx(self, maxlen: int) -> None:
        """``MAXLEN ~ maxlen``: drop whole nodes from the head while what is left still holds
        ``maxlen`` entries (Redis's ``streamTrim`` with ``approx``)."""
        while self.nodes and len(self.entries) - self.nodes[0].entries >= maxlen:
            dropped = self.nodes.pop(0)
            del self.entries[: dropped.entries]


@dataclass(frozen=True)
class Blocked:
    """A blocking ``XREAD`` that found nothing: wait for an ``XADD`` to ``keys`` or
    ``timeout_ms`` (0: forever), then run ``again`` (the read without ``BLOCK``)."""

    keys: tuple[bytes, ...]
    timeout_ms: int
    again: list[bytes]


class StreamCommands(KeySpace):
    """XADD, XRANGE, XREVRANGE, XREAD."""

    def __init__(self) -> None:
        super().__init__()
        self.appended: set[bytes] = set()
        """Keys an ``XADD`` appended to since the connection layer last looked (it wakes the
        reads blocked on them, then clears it)."""
        self.in_script = False

    def _stream(self, key: bytes) -> Stream | None:
        value: Stream | None = self._typed(key, Stream)
        return value

    def _xadd(self, args: list[bytes]) -> bytes:
        """XADD key [MAXLEN ~ n] * field value ..."""
        key, rest = args[1], args[2:]
        maxlen: int | None = None
        if rest and rest[0].upper() == b"MAXLEN":
            if len(rest) < 3 or rest[1] != b"~":
                raise Error("ERR lean store: XADD trims with MAXLEN ~ only")
            maxlen = integer(rest[2])
            rest = rest[3:]
        if not rest or rest[0] != b"*":
            raise Error("ERR lean store: XADD takes '*' ids only")
        fields = rest[1:]
        if not fields or len(fields) % 2:
            raise Error("ERR wrong number of arguments for 'xadd' command")
        stream = self._stream(key)
        if stream is None:
            stream = self.data[key] = Stream()
        now = self.clock_us() // 1000
        last = stream.last
        entry_id = (now, 0) if now > last[0] else (last[0], last[1] + 1)
        stream.add(entry_id, list(fields))
        if maxlen is not None:
            stream.trim_approx(maxlen)
        self.appended.add(key)
        return id_text(entry_id)

    def _range(self, args: list[bytes], reverse: bool) -> list[list[Any]]:
        stream = self._stream(args[1])
        first, second = (args[3], args[2]) if reverse else (args[2], args[3])
        low, high = stream_id(first, 0), stream_id(second, (1 << 64) - 1)
        count: int | None = None
        if len(args) == 6 and args[4].upper() == b"COUNT":
            count = integer(args[5])
        elif len(args) != 4:
            raise Error(SYNTAX)
        entries = [] if stream is None else stream.entries
        out: list[list[Any]] = []
        for entry_id, fields in reversed(entries) if reverse else entries:
            if low <= entry_id <= high:
                if count is not None and len(out) >= count:
                    break
                out.append([id_text(entry_id), list(fields)])
        return out

    def _xrange(self, args: list[bytes]) -> list[list[Any]]:
        return self._range(args, reverse=False)

    def _xrevrange(self, args: list[bytes]) -> list[list[Any]]:
        return self._range(args, reverse=True)

    def _xread(self, args: list[bytes]) -> Any:
        """XREAD [COUNT n] [BLOCK ms] STREAMS key ... id ...: explicit ids only."""
        count: int | None = None
        block: int | None = None
        kept: list[bytes] = [args[0]]
        i = 1
        while i < len(args) and args[i].upper() != b"STREAMS":
            word = args[i].upper()
            if word == b"COUNT" and i + 1 < len(args):
                count = integer(args[i + 1])
                kept += args[i : i + 2]
            elif word == b"BLOCK" and i + 1 < len(args):
                block = integer(args[i + 1], "ERR timeout is not an integer or out of range")
                if block < 0:
                    raise Error("ERR timeout is negative")
            else:
                raise Error(SYNTAX)
            i += 2
        names = args[i + 1 :]
        if i >= len(args) or not names or len(names) % 2:
            raise Error(
                "ERR Unbalanced 'xread' list of streams: for each stream key an ID or '$' must "
                "be specified."
            )
        half = len(names) // 2
        keys, ids = names[:half], names[half:]
        if any(a in (b"$", b"+", b">") for a in ids):
            raise Error("ERR lean store: XREAD reads after explicit ids only")
        after = [stream_id(a, 0) for a in ids]
        out: list[list[Any]] = []
        for key, position in zip(keys, after, strict=True):
            stream = self._stream(key)
            if stream is None:
                continue
            found: list[list[Any]] = []
            for entry_id, fields in stream.entries:
                if entry_id > position:
                    if count is not None and count > 0 and len(found) >= count:
                        break
                    found.append([id_text(entry_id), list(fields)])
            if found:
                out.append([key, found])
        if out:
            return out
        if block is not None and not self.in_script:
            return Blocked(tuple(keys), block, kept + args[i:])
        return NULL_ARRAY
