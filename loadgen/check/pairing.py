"""Which invoke a completion completes: by the invoke's index the completion names
(``completes``), or, in histories written before completions named it, first in first out per
process, flow and operation.

Layer: loadgen.check, at the bottom (imports nothing of ours). ``context.pair_calls`` pairs a
history's ``Op``s with it and ``partition.split_by_tenant`` routes raw lines with it, so both
always agree on which invoke an answer belongs to.

Why the index: one process may have several calls in flight with identical invokes (a
``duplicate`` or ``archive`` flow sends the same accept to several nodes at once) and their
replies overtake each other (a node's reply held after its script ran, a twin's ``NodeDown``
and a replay answered first). First in first out then credits the executing reply to a later
retry sent after the execution was journaled, and the checker blames the node for an answer it
gave to another send.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class InFlight(Generic[T]):
    """Invokes waiting for their completion, each with what the caller keeps for it (``T``).
    Memory: the invokes in flight only. Indices need not be unique (hand-written histories
    reuse them): the order of invokes is kept apart from them, and an index names the latest
    invoke that has it."""

    def __init__(self) -> None:
        self._serial = itertools.count()
        self._waiting: dict[int, tuple[Hashable, int, T]] = {}
        """serial -> (key, index, item) of each invoke in flight."""
        self._queues: dict[Hashable, deque[int]] = {}
        """key -> serials in flight, oldest first."""
        self._by_index: dict[int, int] = {}
        """index -> serial in flight."""

    def __len__(self) -> int:
        return len(self._waiting)

    def invoke(self, index: int, key: Hashable, item: T) -> None:
        """An invoke at history ``index``; ``key`` is its (process, flow, f)."""
        serial = next(self._serial)
        self._waiting[serial] = (key, index, item)
        self._queues.setdefault(key, deque()).append(serial)
        self._by_index[index] = serial

    def complete(self, key: Hashable, completes: int | None) -> T | None:
        """The item of the invoke a completion of ``key`` completes, taken out of flight: the
        invoke at index ``completes``, or without it the oldest of ``key`` in flight. None when
        no such invoke of ``key`` is in flight (the history lacks it, or it completed already)."""
        queue = self._queues.get(key)
        if not queue:
            return None
        if completes is None:
            serial = queue.popleft()
        else:
            found = self._by_index.get(completes)
            if found is None or self._waiting[found][0] != key:
                return None
            serial = found
            queue.remove(serial)
        if not queue:
            del self._queues[key]
        _, index, item = self._waiting.pop(serial)
        if self._by_index.get(index) == serial:
            del self._by_index[index]
        return item
