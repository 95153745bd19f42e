"""Fault points inside node and store code (FoundationDB's BUGGIFY): off unless a simulation
turns them on.

Layer: store (nothing of ours). A site is a name at a place in the code where a rare but legal
timing can be forced: ``await buggify_delay("store.before_script")``. In production nothing sets
a schedule, so every site is one context-variable read and does nothing. A deterministic
simulation sets one for its trio run (``store.simulation.buggify``); this module is the
production side of that seam and imports nothing of the simulation.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol


class FaultSchedule(Protocol):
    """Which sites fire in a run, and for how long (``store.simulation.buggify.Buggify``)."""

    def delay_s(self, site: str) -> float:
        """The delay this pass of ``site`` adds (0: it does not fire)."""
        ...


CURRENT: ContextVar[FaultSchedule | None] = ContextVar("notes_cluster_buggify", default=None)
"""This context's schedule (None: the fault points do nothing)."""


async def buggify_delay(site: str) -> None:
    """A fault point: a delay when ``site`` fires in a run that turned them on; else nothing."""
    current = CURRENT.get()
    if current is None:
        return
    delay = current.delay_s(site)
    if delay > 0:
        # Imported here: the node's sans-IO core has these sites, and only a run that turned
        # them on (a simulation) ever sleeps in one (tests/test_core_closure.py).
        import anyio

        await anyio.sleep(delay)
