"""Nemeses at the store seam of in-process nodes: Redis runs a script and its reply is lost, or
Redis stalls its scripts past the client's timeout.

Layer: cluster. Wraps the scripts a node's ``NoteStore`` registers on its Redis client (the seam
between the store code and Redis), so the store's own handling of a lost reply (its re-sends,
its operation ids) is what runs, as against a real Redis behind a reply-dropping proxy or under
``CLIENT PAUSE ... WRITE``:

- **lost-reply**: with probability ``p`` the script runs to completion and then the call raises
  the client's ``ConnectionError``, as a connection dropped after Redis answered;
- **stall**: every script call waits for the stall to end (``CLIENT PAUSE WRITE`` holds scripts
  the same way); a call still waiting after the client timeout raises ``TimeoutError`` while its
  script stays queued and runs when the stall ends, as Redis runs a paused command.

One ``StoreFaults`` is shared by every node of a run; the fault injector (``cluster.faults``)
turns it on and off and records the windows.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import coredis.exceptions
import trio


class StoreFaults:
    """What the store seam does now, for every node of a run."""

    def __init__(self, seed: int, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        """The client's reply timeout the stall outlasts (the nodes' ``stream_timeout_s``)."""
        self.p_lost = 0.0
        self.lost = 0
        self.stalled = 0
        self.timed_out = 0
        self._stall: trio.Event | None = None
        self._rng = random.Random(f"lost-reply:{seed}")  # noqa: S311 - a fault schedule
        self.nursery: trio.Nursery | None = None
        """Where a stalled script waits to run after its caller gave up (the cluster's)."""

    def attach(self, client: Any) -> None:
        """Wrap every script ``client`` registers from now on (before the store is built)."""
        register = client.register_script

        def faulty(script: str) -> FaultyScript:
            return FaultyScript(register(script), self)

        setattr(client, "register_script", faulty)  # noqa: B010 - an instance's method

    def start_stall(self) -> None:
        """From now on every script waits (until ``end_stall``)."""
        if self._stall is None:
            self._stall = trio.Event()

    def end_stall(self) -> None:
        """Release every waiting script."""
        if self._stall is not None:
            self._stall.set()
            self._stall = None

    def lose(self) -> bool:
        """Whether this reply is lost."""
        if self.p_lost > 0 and self._rng.random() < self.p_lost:
            self.lost += 1
            return True
        return False

    async def held(self, run: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``run`` once the stall ends; the caller gets its reply if that is within the
        timeout, else TimeoutError while ``run`` still runs later."""
        stall = self._stall
        if stall is None:
            return await run()
        self.stalled += 1
        box: dict[str, Any] = {}
        done = trio.Event()

        async def queued() -> None:
            await stall.wait()
            try:
                box["reply"] = await run()
            except Exception as exc:  # the caller (if still waiting) gets it
                box["error"] = exc
            finally:
                done.set()

        if self.nursery is None:  # pragma: no cover - the injector sets it before any stall
            raise RuntimeError("StoreFaults.nursery is not set")
        self.nursery.start_soon(queued)
        with trio.move_on_after(self.timeout_s):
            await done.wait()
            if "error" in box:
                raise box["error"]
            return box["reply"]
        self.timed_out += 1
        raise TimeoutError("Redis stalled past the client timeout (injected at the store seam)")


class FaultyScript:
    """A registered script whose calls go through ``StoreFaults``; everything else (``sha``,
    ``script``) is the wrapped script's."""

    def __init__(self, inner: Any, faults: StoreFaults) -> None:
        self.inner = inner
        self.faults = faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        reply = await self.faults.held(lambda: self.inner(*args, **kwargs))
        if self.faults.lose():
            raise coredis.exceptions.ConnectionError("reply lost (injected at the store seam)")
        return reply
