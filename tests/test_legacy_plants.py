"""The legacy plants of ``store.simulation.plants`` on the real-time path.

Layer: tests. Every legacy plant is caught in a deterministic run, and from the command line,
by tests/test_plants.py; this file holds what that does not reach: the real-time in-process
simulation (``simulate`` without ``--deterministic``: the embedded store, the legacy share's
HTTP nodes on loopback sockets with the plant in their session store through
``cluster.serve.start_http_nodes``). Its control, at ``FLOWS`` flows with a legacy share, is
VALID and sends every legacy kind and session misuse; ``REAL_TIME_PLANT`` in the same run is
INVALID naming its invariant. Each real-time run takes about 20 s, so one plant stands for the
path: ``legacy-answers-dropped``, whose invariant judges an answer on the Redis clock at the
moment it was posted, the judgement a real clock tests and a virtual one does not. The runs are
real time, so which flows race which is the scheduler's; the plant's defect shows in every flow
of its kinds, not in a race, so every run catches it. The seed is printed with each verdict.
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
REAL_TIME_PLANT = "legacy-answers-dropped"


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
def test_a_legacy_plant_in_real_time_is_caught_naming_its_invariant() -> None:
    p = plant(REAL_TIME_PLANT)
    result, kind_at, _ = run(REAL_TIME_PLANT)
    v = next(v for v in result.verdicts if v.name == p.invariant)
    assert result.status == "invalid"
    assert v.status == "invalid", f"plant {REAL_TIME_PLANT} missed: {v.summary}"
    kinds = {kind_at[i] for i in v.ops}
    assert set(p.kinds) <= kinds, f"{REAL_TIME_PLANT}: evidence from {sorted(kinds)}"


def test_an_eviction_flow_opens_the_nodes_cap_of_sessions() -> None:
    assert LegacyCaps().sessions_per_principal == SESSIONS_PER_PRINCIPAL


def test_the_legacy_plants_cover_the_legacy_invariants() -> None:
    covered = {i for n in LEGACY_PLANTS if (i := plant(n).invariant).startswith("legacy_")}
    assert REAL_TIME_PLANT in LEGACY_PLANTS
    assert covered == {
        "legacy_keys_expire",
        "legacy_answers_act_once",
        "legacy_answers_heard",
        "legacy_sessions_bound",
    }
