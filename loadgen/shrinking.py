"""Shrinking a failing run: the smallest case that still fails the same invariant.

Layer: loadgen. Pure search, no I/O and no clock of its own beyond the budget's: the caller gives a
``CandidateRun`` (what a deterministic run is made of: the flows it keeps, the faults it keeps, its
nodes, its settings) and an ``attempt`` that runs a case and answers with the names of the
invariants it broke. The search keeps a case only when it still breaks the original invariant, so
the minimal case shows the same bug, not another one a smaller run happens to hit.

The passes, repeated until none shrinks the case or the budget is spent (Hypothesis' shrinker
works the same way: cheap, coarse passes first, then finer ones, to a fixpoint):

1. the hints, in order, until one still fails: the flows the failing invariant names, then
   (the caller's choice) the flows of its partition, each tried alone;
2. flows: Zeller's ddmin (halves, then complements, then finer chunks);
3. faults: none at all, then ddmin;
4. nodes: the fewest that still fail, counting up from one;
5. settings: each simplification the caller offers (a longer TTL, no legacy share...), kept when
   the case still fails.

Every case is run at most once (answers are cached), and a run that raises is a run that did not
reproduce the failure: the minimal case must fail the way the original did, not crash.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

SettingPairs = tuple[tuple[str, object], ...]
"""A run's simplifiable settings as sorted ``(name, value)`` pairs (hashable, unlike a dict)."""


@dataclass(frozen=True)
class CandidateRun:
    """One candidate run: the flow indices and fault indices it keeps, its nodes, its settings."""

    flows: tuple[int, ...]
    faults: tuple[int, ...] = ()
    nodes: int = 1
    settings: SettingPairs = ()

    def setting(self, name: str) -> object:
        """The value of ``name`` in this case's settings (``None`` if it has none)."""
        return dict(self.settings).get(name)

    def with_setting(self, name: str, value: object) -> CandidateRun:
        """This case with ``name`` set to ``value``."""
        merged = dict(self.settings)
        merged[name] = value
        return replace(self, settings=tuple(sorted(merged.items())))

    def size(self) -> str:
        """``"1,000 flows / 4 faults / 3 nodes"``."""
        return (
            f"{_count(len(self.flows), 'flow')} / {_count(len(self.faults), 'fault')} / "
            f"{_count(self.nodes, 'node')}"
        )


Attempt = Callable[[CandidateRun], Iterable[str]]
"""Run a case; answer the names of the invariants it broke (none: it passed)."""


@dataclass(frozen=True)
class Simplification:
    """A simpler value to try for one setting (tried only where the case holds another value)."""

    name: str
    value: object


@dataclass(frozen=True)
class Budget:
    """How much shrinking may cost: wall-clock seconds and runs, whichever ends first."""

    seconds: float = 300.0
    runs: int = 500

    def __post_init__(self) -> None:
        if self.seconds <= 0 or self.runs < 1:
            raise ValueError("a shrink budget needs seconds > 0 and runs >= 1")


@dataclass(frozen=True)
class ShrinkResult:
    """What a shrink found: the minimal case, what it cost, and whether the budget cut it short."""

    original: CandidateRun
    minimal: CandidateRun
    invariant: str
    runs: int
    elapsed_s: float
    exhausted: bool
    """True if the budget ended the search before no pass could shrink the case further."""
    crashed: int = 0
    """Runs that raised instead of answering (counted as not reproducing the failure)."""

    def summary(self) -> str:
        """One line, e.g. ``1,000 flows / 4 faults / 3 nodes → 2 flows / 1 fault / 2 nodes in
        173 runs, 41 s``."""
        cut = " (budget spent)" if self.exhausted else ""
        return (
            f"{self.original.size()} → {self.minimal.size()} in "
            f"{_count(self.runs, 'run')}, {self.elapsed_s:,.0f} s{cut}"
        )


class _BudgetSpent(Exception):
    """Raised inside the search when the budget is gone; the best case so far stands."""


@dataclass
class _Search:
    attempt: Attempt
    invariant: str
    budget: Budget
    clock: Callable[[], float]
    started: float
    best: CandidateRun
    runs: int = 0
    crashed: int = 0
    seen: dict[CandidateRun, bool] = field(default_factory=dict)

    def fails(self, case: CandidateRun) -> bool:
        """Whether ``case`` still breaks the invariant (cached; each new case costs one run)."""
        known = self.seen.get(case)
        if known is not None:
            return known
        if self.runs >= self.budget.runs or self.clock() - self.started >= self.budget.seconds:
            raise _BudgetSpent
        self.runs += 1
        try:
            broke = self.invariant in set(self.attempt(case))
        except Exception:  # a crashing run did not reproduce the failure; it is counted
            self.crashed += 1
            broke = False
        self.seen[case] = broke
        if broke:
            # Every case tried is cut from the best so far, so the last one that fails is the
            # smallest: what stands if the budget runs out in the middle of a pass.
            self.best = case
        return broke


def ddmin(
    items: Sequence[int], fails: Callable[[tuple[int, ...]], bool], *, allow_empty: bool = False
) -> tuple[int, ...]:
    """Zeller's ddmin: a 1-minimal subsequence of ``items`` for which ``fails`` holds.

    ``fails(tuple(items))`` is assumed true. With ``allow_empty`` the empty subsequence is tried
    first (no faults at all is the commonest minimal fault set).
    """
    current = tuple(items)
    if allow_empty and current and fails(()):
        return ()
    n = 2
    while len(current) >= 2:
        chunks = _split(current, n)
        for chunk in chunks:
            if fails(chunk):
                current, n = chunk, 2
                break
        else:
            for i in range(len(chunks)):
                rest = tuple(x for j, c in enumerate(chunks) if j != i for x in c)
                if fails(rest):
                    current, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(current):
                    break
                n = min(2 * n, len(current))
    if len(current) == 1 and allow_empty and fails(()):
        return ()
    return current


def shrink(
    original: CandidateRun,
    attempt: Attempt,
    invariant: str,
    *,
    hints: Sequence[Sequence[int]] = (),
    simplifications: Sequence[Simplification] = (),
    budget: Budget | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> ShrinkResult:
    """Search for the smallest case that still breaks ``invariant`` (see the module docstring).

    ``original`` is trusted to fail (it is the run being shrunk), so it costs no run.
    """
    budget = budget or Budget()
    search = _Search(attempt, invariant, budget, clock, clock(), best=original)
    search.seen[original] = True
    best = original
    exhausted = False
    try:
        for hint in hints:
            kept = tuple(f for f in original.flows if f in set(hint))
            if kept and kept != best.flows and search.fails(replace(best, flows=kept)):
                best = replace(best, flows=kept)
                break
        while True:
            before = best
            best = replace(best, flows=ddmin(best.flows, partial(_with_flows, search, best)))
            best = replace(
                best,
                faults=ddmin(best.faults, partial(_with_faults, search, best), allow_empty=True),
            )
            for nodes in range(1, best.nodes):
                if search.fails(replace(best, nodes=nodes)):
                    best = replace(best, nodes=nodes)
                    break
            for simpler in simplifications:
                if best.setting(simpler.name) == simpler.value:
                    continue
                candidate = best.with_setting(simpler.name, simpler.value)
                if search.fails(candidate):
                    best = candidate
            if best == before:
                break
    except _BudgetSpent:
        exhausted = True
        best = search.best
    return ShrinkResult(
        original=original,
        minimal=best,
        invariant=invariant,
        runs=search.runs,
        elapsed_s=clock() - search.started,
        exhausted=exhausted,
        crashed=search.crashed,
    )


def _with_flows(search: _Search, case: CandidateRun, flows: tuple[int, ...]) -> bool:
    return search.fails(replace(case, flows=flows))


def _with_faults(search: _Search, case: CandidateRun, faults: tuple[int, ...]) -> bool:
    return search.fails(replace(case, faults=faults))


def _split(items: tuple[int, ...], n: int) -> list[tuple[int, ...]]:
    """``items`` cut into ``n`` contiguous chunks of near-equal size (none empty)."""
    n = min(n, len(items))
    size, extra = divmod(len(items), n)
    out, at = [], 0
    for i in range(n):
        step = size + (1 if i < extra else 0)
        out.append(items[at : at + step])
        at += step
    return out


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
