"""The legacy plants of ``store.simulation.plants`` caught in a real-time in-process run.

Layer: tests. Each plant with a legacy share runs alone in ``simulate`` (in-process nodes, the
embedded store, the legacy share's HTTP nodes with the plant in their session store) at
``FLOWS`` flows: the checker must call it INVALID naming the plant's invariant, and the same run
without a plant (the control) is VALID. The runs are real time, so which flows race which is
the scheduler's; each plant's defect shows in every flow of its kinds, not in a race, so every
run catches it. The seed is printed with each verdict.
"""

from __future__ import annotations

from functools import cache

import pytest
import trio

from cluster.targets.simulate import SimulateOptions, simulate
from loadgen.check.verdict import CheckResult
from loadgen.legacy_clients import LEGACY_KINDS
from loadgen.legacy_sessions import SESSIONS_PER_PRINCIPAL
from loadgen.runner import RunSettings
from loadgen.workload import tenants_for
from nodes.config import LegacyCaps
from store.simulation.plants import PLANTS, plant

SEED = 11
FLOWS = 300
LEGACY_SHARE = 0.3
LEGACY_PLANTS = sorted(name for name, p in PLANTS.items() if p.legacy_share > 0)


@cache
def run(name: str | None) -> tuple[CheckResult, dict[int, str], set[str]]:
    """One real-time run with plant ``name`` (None: the control), memoised per session: its
    verdicts, each history index's race kind, and the session misuses it sent."""
    share = LEGACY_SHARE if name is None else plant(name).legacy_share
    settings = RunSettings(flows=FLOWS, seed=SEED, tenants=tenants_for(FLOWS), legacy_share=share)
    ran = trio.run(simulate, SimulateOptions(plant=name, settings=settings))
    print(f"plant {name}: seed {SEED}, {ran.result.status}")
    ops = ran.history.ops
    misuses = {str(op.value["misuse"]) for op in ops if op.f == "session" and op.type == "invoke"}
    return ran.result, {op.index: op.kind for op in ops}, misuses


def test_the_control_is_valid() -> None:
    result, _, _ = run(None)
    assert result.status == "valid", [v for v in result.verdicts if v.status != "valid"]
    names = {v.name for v in result.verdicts}
    for invariant in {plant(n).invariant for n in LEGACY_PLANTS}:
        assert invariant in names


def test_the_control_exercises_every_legacy_kind_and_session_misuse() -> None:
    result, kind_at, misuses = run(None)
    exercised = next(v for v in result.verdicts if v.name == "exercised")
    assert exercised.status == "valid", exercised.summary
    assert set(LEGACY_KINDS) <= set(kind_at.values())
    assert misuses == {"foreign", "stale", "evicted", "ungranted_root"}
    bound = next(v for v in result.verdicts if v.name == "legacy_sessions_bound")
    assert bound.status == "valid", bound.summary


@pytest.mark.planted(control="test_the_control_is_valid")
@pytest.mark.parametrize("name", LEGACY_PLANTS)
def test_every_legacy_plant_is_caught_naming_its_invariant(name: str) -> None:
    p = plant(name)
    result, kind_at, _ = run(name)
    v = next(v for v in result.verdicts if v.name == p.invariant)
    assert result.status == "invalid"
    assert v.status == "invalid", f"plant {name} missed: {v.summary}"
    if v.ops:  # a marker's TTL names no operation
        kinds = {kind_at[i] for i in v.ops}
        assert set(p.kinds) <= kinds, f"{name}: evidence from {sorted(kinds)}"


def test_an_eviction_flow_opens_the_nodes_cap_of_sessions() -> None:
    assert LegacyCaps().sessions_per_principal == SESSIONS_PER_PRINCIPAL


def test_the_legacy_plants_cover_the_legacy_invariants() -> None:
    covered = {plant(n).invariant for n in LEGACY_PLANTS}
    assert covered == {
        "legacy_keys_expire",
        "legacy_answers_act_once",
        "legacy_answers_heard",
        "legacy_sessions_bound",
    }
