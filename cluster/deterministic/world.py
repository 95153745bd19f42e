"""What makes one process's trio run repeat bit for bit: scheduler, clocks, random draws.

Layer: cluster. ``deterministic_world(seed, clock)`` holds for the length of one ``trio.run``
with ``clock`` (a ``trio.testing.MockClock``, autojump at 0) and sets, then restores:

- **trio's scheduler**: its private switch (``_ALLOW_DETERMINISTIC_SCHEDULING``, what its
  Hypothesis plugin turns on) sorts each batch of runnable tasks by creation order and shuffles
  it with trio's module-level ``random.Random``, here seeded from the run's seed. What trio's
  comments say is not yet deterministic is handled too: the deadline heap's tie-breaker is
  ``id(cancel_scope)`` (a memory address), replaced by a creation counter; the order in which
  woken tasks enter the run queue does not matter, since each batch is sorted.
- **one clock**: ``time.time``, ``time.time_ns`` and ``time.monotonic`` read the virtual clock
  (``EPOCH_S`` plus trio's virtual time). This is the one shim for everything that reads the
  time at call time: the in-process store (fakeredis reads ``time.time()`` in several modules,
  for key expiry and ``TIME``), the load's history, the nodes' default clock. ``perf_counter``
  is left alone (trio's clocks and the wall-clock figures use it).
- **random draws**: the nodes' and the store's bytes (``store.simulation.entropy``) come from a
stream
  seeded from the run's seed; Python's global ``random`` (fakeredis draws from it for a few
  commands) is seeded too. The load's draws are seeded already (per flow).

Not controlled here: the hash seed of ``str`` (fixed by ``command.ensure_hash_seed``, which
re-executes the process), threads and sockets (a deterministic run uses none: the store is
``store.simulation.memory_transport``'s and the check runs in the trio thread).
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import trio
import trio._core._run as trio_run
import trio.testing

from store.simulation.entropy import entropy_source

EPOCH_S = 1_800_000_000.0
"""Virtual wall clock at virtual time 0 (2027-01-15T08:00:00Z): every run starts there."""


HALF_US = 5e-7


def stream(seed: int, name: str) -> random.Random:
    """A random stream of its own for ``name`` (one per purpose, so adding a draw in one
    purpose shifts no other)."""
    return random.Random(f"{seed}:{name}")  # noqa: S311 - a simulation's draws


def virtual_at(wall_ms: int) -> float:
    """The virtual time (trio's) at which the virtual wall clock reads ``wall_ms``."""
    return wall_ms / 1000 - EPOCH_S


@contextmanager
def seeded_scheduler(seed: int) -> Iterator[None]:
    """trio's scheduler in its deterministic mode, its random stream seeded from ``seed``,
    and a deadline tie-breaker that is no memory address."""
    deadlines = trio_run.Deadlines
    saved_add = deadlines.add
    saved_flag = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    saved_state = trio_run._r.getstate()
    order = itertools.count()

    def add(self: Any, deadline: float, cancel_scope: Any) -> None:
        heapq.heappush(self._heap, (deadline, next(order), cancel_scope))
        self._active += 1

    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio_run._r.seed(f"{seed}:trio")
    deadlines.add = add  # type: ignore[method-assign]
    try:
        yield
    finally:
        deadlines.add = saved_add  # type: ignore[method-assign]
        trio_run._r.setstate(saved_state)
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = saved_flag  # type: ignore[misc]


@contextmanager
def virtual_time(clock: trio.testing.MockClock) -> Iterator[None]:
    """``time.time``, ``time.time_ns`` and ``time.monotonic`` read ``clock`` (see module)."""
    saved = (time.time, time.time_ns, time.monotonic)

    def wall() -> float:
        # Half a microsecond in: float rounding (about 0.2 us at this magnitude) can then never
        # move a reading truncated to the microsecond (``TIME``) or millisecond to the one before.
        return EPOCH_S + clock.current_time() + HALF_US

    def wall_ns() -> int:
        return round(wall() * 1e9)

    time.time, time.time_ns, time.monotonic = wall, wall_ns, clock.current_time
    try:
        yield
    finally:
        time.time, time.time_ns, time.monotonic = saved


@contextmanager
def seeded_randomness(seed: int) -> Iterator[None]:
    """The nodes' and store's random bytes and Python's global ``random`` from ``seed``."""
    saved = random.getstate()
    random.seed(f"{seed}:global")
    nodes = stream(seed, "entropy")
    try:
        with entropy_source(nodes.randbytes):
            yield
    finally:
        random.setstate(saved)


@contextmanager
def deterministic_world(seed: int, clock: trio.testing.MockClock) -> Iterator[None]:
    """Everything above, for one ``trio.run(..., clock=clock)`` inside the block."""
    with ExitStack() as stack:
        stack.enter_context(seeded_scheduler(seed))
        stack.enter_context(virtual_time(clock))
        stack.enter_context(seeded_randomness(seed))
        yield


def mock_clock() -> trio.testing.MockClock:
    """A virtual clock that jumps to the next deadline as soon as every task waits."""
    return trio.testing.MockClock(autojump_threshold=0)
