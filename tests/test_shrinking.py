"""The shrinker's search (``loadgen.shrinking``) on synthetic failures: no cluster, no store.

Each test plants a failure that needs a known set of flows, faults and nodes, and asserts the
shrinker finds exactly that set, keeps the original invariant (not another one a smaller case
breaks), honours its budget and never runs a case twice.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import pytest

from loadgen.shrinking import Budget, CandidateRun, Simplification, ddmin, shrink

INVARIANT = "no_double_delete"


def _needs(
    flows: set[int],
    faults: frozenset[int] | set[int] = frozenset(),
    nodes: int = 1,
    ttl: float | None = None,
) -> tuple[Callable[[CandidateRun], list[str]], list[CandidateRun]]:
    calls: list[CandidateRun] = []

    def attempt(case: CandidateRun) -> list[str]:
        calls.append(case)
        broke = (
            flows <= set(case.flows)
            and faults <= set(case.faults)
            and case.nodes >= nodes
            and (ttl is None or case.setting("ttl") == ttl)
        )
        return [INVARIANT] if broke else []

    return attempt, calls


def test_ddmin_finds_the_pair_that_fails() -> None:
    items = tuple(range(100))
    assert ddmin(items, lambda xs: {17, 82} <= set(xs)) == (17, 82)


def test_ddmin_keeps_everything_when_everything_is_needed() -> None:
    items = (1, 2, 3, 4, 5)
    assert ddmin(items, lambda xs: set(xs) == set(items)) == items


def test_ddmin_tries_the_empty_set_only_when_allowed() -> None:
    assert ddmin((1, 2, 3), lambda xs: True, allow_empty=True) == ()
    assert len(ddmin((1, 2, 3), lambda xs: True)) == 1


def test_shrink_finds_the_flows_faults_and_nodes_a_failure_needs() -> None:
    attempt, calls = _needs({3, 41}, faults={2}, nodes=2)
    original = CandidateRun(flows=tuple(range(1000)), faults=(0, 1, 2, 3), nodes=3)
    result = shrink(original, attempt, INVARIANT)
    assert result.minimal == CandidateRun(flows=(3, 41), faults=(2,), nodes=2)
    assert not result.exhausted
    assert result.runs == len(calls) == len(set(calls)), "a case was run twice"
    assert result.summary().startswith(
        "1,000 flows / 4 faults / 3 nodes → 2 flows / 1 fault / 2 nodes in "
    )


def test_shrink_tries_the_hint_first() -> None:
    attempt, calls = _needs({3, 41})
    original = CandidateRun(flows=tuple(range(1000)), nodes=1)
    result = shrink(original, attempt, INVARIANT, hints=[(3, 41, 77)])
    assert calls[0].flows == (3, 41, 77)
    assert result.minimal.flows == (3, 41)


def test_shrink_tries_the_next_hint_when_one_does_not_fail() -> None:
    attempt, calls = _needs({3, 41})
    original = CandidateRun(flows=tuple(range(1000)), nodes=1)
    result = shrink(original, attempt, INVARIANT, hints=[(3, 77), (3, 41, 77, 99), (500,)])
    assert [c.flows for c in calls[:2]] == [(3, 77), (3, 41, 77, 99)]
    # The second hint failed: the search goes on from it, and the third is never tried.
    assert all(set(c.flows) <= {3, 41, 77, 99} for c in calls[2:])
    assert result.minimal.flows == (3, 41)


def test_shrink_keeps_the_original_invariant_not_another() -> None:
    # Below 10 flows the run breaks a different invariant: a smaller case that fails for another
    # reason is not the same bug, so the shrinker must stop at the smallest that breaks ours.
    def attempt(case: CandidateRun) -> list[str]:
        if len(case.flows) < 10:
            return ["another_invariant"]
        return [INVARIANT]

    result = shrink(CandidateRun(flows=tuple(range(64))), attempt, INVARIANT)
    assert len(result.minimal.flows) == 10  # ddmin is 1-minimal: removing any flow passes
    assert not result.exhausted


def test_a_crashing_run_does_not_count_as_reproducing() -> None:
    def attempt(case: CandidateRun) -> list[str]:
        if len(case.flows) < 4:
            raise RuntimeError("planted crash in a small case")
        return [INVARIANT]

    result = shrink(CandidateRun(flows=tuple(range(32))), attempt, INVARIANT)
    assert len(result.minimal.flows) == 4
    assert result.crashed > 0


def test_simplifications_are_kept_only_when_the_case_still_fails() -> None:
    attempt, _ = _needs({5}, ttl=2.0)
    original = CandidateRun(flows=tuple(range(50)), settings=(("legacy_share", 0.2), ("ttl", 2.0)))
    result = shrink(
        original,
        attempt,
        INVARIANT,
        simplifications=[Simplification("ttl", 60.0), Simplification("legacy_share", 0.0)],
    )
    assert result.minimal.flows == (5,)
    assert result.minimal.setting("ttl") == 2.0  # the failure needs the short TTL
    assert result.minimal.setting("legacy_share") == 0.0


def test_the_run_budget_stops_the_search_with_the_best_case_so_far() -> None:
    attempt, calls = _needs({3, 41})
    original = CandidateRun(flows=tuple(range(1000)))
    result = shrink(original, attempt, INVARIANT, budget=Budget(seconds=3600, runs=5))
    assert result.exhausted
    assert result.runs == len(calls) == 5
    assert {3, 41} <= set(result.minimal.flows)
    assert len(result.minimal.flows) < 1000
    assert "(budget spent)" in result.summary()


def test_the_time_budget_stops_the_search() -> None:
    ticks = itertools.count()
    attempt, _ = _needs({3, 41})
    result = shrink(
        CandidateRun(flows=tuple(range(1000))),
        attempt,
        INVARIANT,
        budget=Budget(seconds=10, runs=10_000),
        clock=lambda: float(next(ticks)),
    )
    assert result.exhausted
    assert result.runs < 10


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_failures_shrink_to_exactly_what_they_need(seed: int) -> None:
    rng = random.Random(seed)
    print(f"seed={seed}")
    need_flows = set(rng.sample(range(300), rng.randint(1, 4)))
    need_faults = set(rng.sample(range(6), rng.randint(0, 2)))
    need_nodes = rng.randint(1, 4)
    attempt, _ = _needs(need_flows, need_faults, need_nodes)
    original = CandidateRun(flows=tuple(range(300)), faults=tuple(range(6)), nodes=5)
    result = shrink(original, attempt, INVARIANT)
    assert set(result.minimal.flows) == need_flows
    assert set(result.minimal.faults) == need_faults
    assert result.minimal.nodes == need_nodes


def test_a_budget_must_allow_something() -> None:
    with pytest.raises(ValueError, match="budget"):
        Budget(seconds=0)
    with pytest.raises(ValueError, match="budget"):
        Budget(runs=0)
