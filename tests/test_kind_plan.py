"""The kind plan: which race kind each flow runs (``loadgen.runner._kinds``).

A short run must exercise every kind as its weight says (the exercise rule holds it to half its
share), and a flow's kind must not depend on the order in which flows happen to start.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from loadgen.check.exercise import ExerciseRule
from loadgen.legacy_clients import LEGACY_KINDS
from loadgen.runner import RunSettings, _kind_cycle, _kinds
from loadgen.workload import DEFAULT_WEIGHTS, RACE_KINDS


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("flows", [60, 150, 300])
def test_every_kind_gets_what_the_exercise_rule_needs(seed: int, flows: int) -> None:
    pick = _kinds(RunSettings(flows=flows, seed=seed), f"{seed}:kinds")
    counts = Counter(pick(i) for i in range(flows))
    total = sum(DEFAULT_WEIGHTS[k] for k in RACE_KINDS)
    rule = ExerciseRule()
    for kind in RACE_KINDS:
        share = DEFAULT_WEIGHTS[kind] / total
        assert counts[kind] >= rule.needed_per_kind(flows, share), (kind, counts[kind])
        assert abs(counts[kind] - flows * share) <= 2 * DEFAULT_WEIGHTS[kind] / 0.5 + 1, kind


def test_a_flows_kind_is_a_function_of_its_index_alone() -> None:
    settings = RunSettings(flows=500, seed=7, legacy_share=0.2)
    in_order = [_kinds(settings, "7:kinds")(i) for i in range(500)]
    shuffled = list(range(500))
    random.Random(1).shuffle(shuffled)
    pick = _kinds(settings, "7:kinds")
    out_of_order = {i: pick(i) for i in shuffled}
    assert [out_of_order[i] for i in range(500)] == in_order
    assert sum(k in LEGACY_KINDS for k in in_order) == 100  # floor(500 * 0.2), spread evenly
    assert set(in_order) >= set(RACE_KINDS) | set(LEGACY_KINDS)


def test_another_seed_gives_another_order_with_the_same_counts() -> None:
    kinds = [k for k in RACE_KINDS if DEFAULT_WEIGHTS[k] > 0]
    flows = 5 * len(_kind_cycle(kinds, DEFAULT_WEIGHTS, random.Random(0)))  # whole cycles
    settings = RunSettings(flows=flows, seed=1)
    a = [_kinds(settings, "1:kinds")(i) for i in range(flows)]
    b = [_kinds(settings, "2:kinds")(i) for i in range(flows)]
    assert a != b
    assert Counter(a) == Counter(b)
