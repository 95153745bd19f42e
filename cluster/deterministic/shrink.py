"""Shrinking a failing deterministic run (started: ``shrink``, the search; no CLI yet).

Layer: cluster. A failing deterministic run is its options (seed, flows, nodes, faults, fault
points). ``shrink`` searches, as Hypothesis' shrinker does, for smaller options of the same seed
that still fail the same invariant: fewer flows (halving, then one at a time), each fault kind
dropped, the fault points off, fewer nodes; it keeps every step that still fails and stops when
no step does or the time budget is spent. Each candidate is one deterministic run, so the case
it ends on replays bit for bit (``simulate --replay`` of the folder it is run into).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from cluster.deterministic.run import DeterministicSimulation, run_deterministic
from cluster.experiments.simulate import SimulateOptions

BUDGET_S = 300.0
"""Default time budget of a search (wall clock)."""


@dataclass(frozen=True)
class Case:
    """One candidate: the run's options and whether its fault points are on."""

    options: SimulateOptions
    buggify: bool

    def size(self) -> tuple[int, int, int, int]:
        """What shrinking lowers, most important first."""
        o = self.options
        return (o.settings.flows, len(o.faults), int(self.buggify), o.nodes)

    def describe(self) -> str:
        flows, faults, points, nodes = self.size()
        extra = ", fault points" if points else ""
        return f"{flows:,} flows / {faults} faults / {nodes} nodes{extra}"


def invalid_invariants(sim: DeterministicSimulation) -> set[str]:
    """The invariants a run found invalid."""
    return {v.name for v in sim.result.verdicts if v.status == "invalid"}


@dataclass
class Shrunk:
    """The search's outcome."""

    first: Case
    last: Case
    invariant: str
    runs: int
    seconds: float

    def summary(self) -> str:
        return (
            f"{self.first.describe()} → {self.last.describe()} in {self.runs} runs, "
            f"{self.seconds:.0f} s ({self.invariant})"
        )


def _smaller(case: Case) -> Iterator[Case]:
    o, s = case.options, case.options.settings
    flows = s.flows
    steps = [flows // 2, flows - 1] if flows > 1 else []
    for n in dict.fromkeys(x for x in steps if 1 <= x < flows):
        yield replace(case, options=replace(o, settings=replace(s, flows=n)))
    for kind in sorted(o.faults):
        yield replace(case, options=replace(o, faults=o.faults - {kind}))
    if case.buggify:
        yield replace(case, buggify=False)
    if o.nodes > 1:
        yield replace(case, options=replace(o, nodes=o.nodes - 1))


def shrink(
    case: Case,
    invariant: str,
    *,
    budget_s: float = BUDGET_S,
    run: Callable[[Case], DeterministicSimulation] | None = None,
) -> Shrunk:
    """The smallest case found that still fails ``invariant`` (``case`` itself must)."""

    def default(c: Case) -> DeterministicSimulation:
        return run_deterministic(replace(c.options, run_dir=None), buggify=c.buggify)

    play = run or default
    started = time.perf_counter()
    runs = 0
    best = case
    improved = True
    while improved and time.perf_counter() - started < budget_s:
        improved = False
        for candidate in _smaller(best):
            if time.perf_counter() - started >= budget_s:
                break
            runs += 1
            if invariant in invalid_invariants(play(candidate)):
                best, improved = candidate, True
                break
    return Shrunk(case, best, invariant, runs, time.perf_counter() - started)
