"""The fault points' simulation side (FoundationDB's BUGGIFY): which sites fire in a run.

Layer: store (nothing of ours). A site is a name at a place in the code where a rare but legal
timing can be forced: ``await buggify_delay("store.before_script")`` in
``store.fault_points``, the production side, which a node imports (never this module). A
deterministic simulation runs its trio run inside ``buggify_on(Buggify(seed))``: each site is
activated or not once per run (``SITE_P``), from a stream of its own seeded by the run's seed and
the site's name; an active site fires on a share of its passes (``FIRE_P``) and then waits up to
``MAX_DELAY_S`` (virtual time in a simulation); every firing is logged and counted (``fired``).

The sites only delay (they widen race windows: between a store read and the state sealed from
it, between an answer and its atomic step, around a script's round trip); none changes what a
call does, so the checker needs no record of them to explain an outcome.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager

from store.fault_points import CURRENT

log = logging.getLogger("notes_cluster.buggify")

SITE_P = 0.5
"""Chance that a site is active in a run."""

FIRE_P = 0.1
"""Chance that an active site fires on one pass."""

MAX_DELAY_S = 0.1
"""Longest delay a firing adds (below the load's 400 ms expiry margin)."""


class Buggify:
    """Which sites are active in this run, and how often each fired."""

    def __init__(self, seed: int, *, site_p: float = SITE_P, fire_p: float = FIRE_P) -> None:
        self.seed = seed
        self.site_p = site_p
        self.fire_p = fire_p
        self._streams: dict[str, random.Random | None] = {}
        self.fired: dict[str, int] = {}

    def _stream(self, site: str) -> random.Random | None:
        if site not in self._streams:
            rng = random.Random(f"{self.seed}:buggify:{site}")  # noqa: S311 - a fault schedule
            self._streams[site] = rng if rng.random() < self.site_p else None
        return self._streams[site]

    def delay_s(self, site: str) -> float:
        """The delay this pass of ``site`` adds (0: it does not fire)."""
        rng = self._stream(site)
        if rng is None or rng.random() >= self.fire_p:
            return 0.0
        self.fired[site] = self.fired.get(site, 0) + 1
        delay = rng.uniform(0.0, MAX_DELAY_S)
        log.info("BUGGIFY %s fired: %.1f ms", site, delay * 1000)
        return delay

    def active(self) -> list[str]:
        """The sites met so far that are active in this run."""
        return sorted(s for s, rng in self._streams.items() if rng is not None)


@contextmanager
def buggify_on(buggify: Buggify) -> Iterator[None]:
    """Turn the fault points on inside the block (and in tasks started inside it)."""
    token = CURRENT.set(buggify)
    try:
        yield
    finally:
        CURRENT.reset(token)
