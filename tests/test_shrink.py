"""The shrinker's search (``cluster.deterministic.shrink``), on a stand-in for the runs.

Layer: tests. The stand-in fails the invariant exactly when the case has at least 3 flows and
the ``nodes`` fault (any nodes, fault points or other faults): the search must end on exactly
that smallest case, having tried no case twice in a row, and its summary must say so. A stand-in
that never fails leaves the case as it was (the control).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from cluster.deterministic.shrink import Case, shrink
from cluster.experiments.simulate import SimulateOptions
from loadgen.check.verdict import CheckResult, Verdict
from loadgen.runner import RunSettings

INVARIANT = "no_double_delete"


def _case() -> Case:
    options = SimulateOptions(
        nodes=4,
        faults=frozenset({"nodes", "client", "stall"}),
        settings=RunSettings(flows=1_000, seed=5),
    )
    return Case(options, buggify=True)


def _stand_in(fails: bool, seen: list[Case]) -> Any:
    def run(case: Case) -> Any:
        seen.append(case)
        flows, faults = case.options.settings.flows, case.options.faults
        verdict = Verdict(INVARIANT, "valid", "")
        if fails and flows >= 3 and "nodes" in faults:
            verdict = Verdict(INVARIANT, "invalid", "planted")
        return SimpleNamespace(result=CheckResult((verdict,)))

    return run


def test_the_search_ends_on_the_smallest_case_that_still_fails() -> None:
    seen: list[Case] = []
    found = shrink(_case(), INVARIANT, run=_stand_in(True, seen))
    last = found.last
    assert last.options.settings.flows == 3
    assert last.options.faults == frozenset({"nodes"})
    assert last.buggify is False
    assert last.options.nodes == 1
    assert last.options.settings.seed == 5
    assert found.runs == len(seen)
    assert found.summary().startswith("1,000 flows / 3 faults / 4 nodes, fault points → 3 flows")


def test_a_case_nothing_smaller_fails_stays_as_it_was() -> None:
    seen: list[Case] = []
    found = shrink(_case(), INVARIANT, run=_stand_in(False, seen))
    assert found.last == found.first
    assert seen  # every smaller step was tried once
    assert len(seen) == len({(c.size(), c.options.faults) for c in seen})
