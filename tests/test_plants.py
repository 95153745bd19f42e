"""The planted-defect registry (``store.simulation.plants``) as the suite's mutation test and as
the user's catalogue (``simulate --deterministic --plant NAME``).

Layer: tests. Every plant runs alone in a deterministic run of ``FLOWS`` flows at ``SEED``, in
this process: the checker must call it INVALID naming the plant's invariant, with evidence from
the flow kinds the plant names; a plant the checker misses fails the suite. Each plant's control
is the same run without it (with the fault kinds the plant needs), VALID. From the command line,
every plant exits 1 naming its invariant, ``shrink`` cuts it to at most ``MAX_SHRUNK_FLOWS``
flows, and the replay command it prints exits 1 again. A legacy plant runs with its share of
legacy flows (``Plant.legacy_share``, which ``simulate --plant`` applies by itself), and once more
from the command line with ``--legacy-share`` given. A node process never imports the plant
machinery.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cluster.cli import main
from cluster.deterministic.run import DeterministicRun, run_deterministic
from cluster.exit_codes import EXIT_INVALID, EXIT_USAGE, EXIT_VALID
from cluster.serve import NODE_PROCESS_MODULE
from cluster.targets.simulate import SimulateOptions
from loadgen.runner import RunSettings
from loadgen.workload import tenants_for
from store.simulation.plants import PLANTS, plant

SEED = 1
FLOWS = 200
"""A few hundred flows: every race kind runs several times, each plant in seconds."""
CLI_FLOWS = 200
MAX_SHRUNK_FLOWS = 3
CONTROLS = sorted({(tuple(sorted(p.faults)), p.legacy_share) for p in PLANTS.values()})
"""The fault kinds and legacy share of the plants' controls (a plant that needs lost replies
has them; a legacy plant its share of legacy flows)."""

UNREACHED = {
    "no_lost_note": "a note lost from the store by a write: every write script keeps the note "
    "record and its workspace set together, and the store client cannot drop one alone",
    "info_resolved": "a confirm of unknown outcome under a nonce nobody learned: only a "
    "history cut short makes one",
    "no_double_delete": "two deletes of one note: the note hash is gone after the first, so "
    "every store-side defect that deletes twice decides twice (no_double_execution) first",
    "exercised": "not a safety invariant: a run that exercises too little is UNKNOWN "
    "(tests/test_exercise_rule.py)",
}
"""Invariants no plant reaches, and why (the checker's page lists them too)."""


@cache
def run(
    name: str | None, faults: tuple[str, ...] = (), legacy_share: float = 0.0
) -> DeterministicRun:
    """One deterministic run with plant ``name`` (None: none), memoised per session."""
    settings = RunSettings(
        flows=FLOWS, seed=SEED, tenants=tenants_for(FLOWS), legacy_share=legacy_share
    )
    options = SimulateOptions(plant=name, faults=frozenset(faults), settings=settings)  # type: ignore[arg-type]
    return run_deterministic(options)


def _control_id(control: tuple[tuple[str, ...], float]) -> str:
    faults, share = control
    return (",".join(faults) or "no-faults") + (f"-legacy-{share:g}" if share else "")


@pytest.mark.parametrize("control", CONTROLS, ids=_control_id)
def test_without_a_plant_the_runs_are_valid(control: tuple[tuple[str, ...], float]) -> None:
    sim = run(None, *control)
    assert sim.result.status == "valid", [v for v in sim.result.verdicts if v.status != "valid"]


@pytest.mark.planted(control="test_without_a_plant_the_runs_are_valid")
@pytest.mark.parametrize("name", sorted(PLANTS))
def test_every_plant_is_caught_naming_its_invariant(name: str) -> None:
    p = plant(name)
    sim = run(name, tuple(sorted(p.faults)), p.legacy_share)
    v = next(v for v in sim.result.verdicts if v.name == p.invariant)
    assert sim.result.status == "invalid"
    assert v.status == "invalid", f"plant {name} missed: {v.summary}"
    invalid = {v.name for v in sim.result.verdicts if v.status == "invalid"}
    assert set(p.also) <= invalid
    if v.ops:  # a store fact's finding (a counter, a record) names no operation
        kinds = {op.kind for op in sim.history.ops if op.index in set(v.ops)}
        assert set(p.kinds) <= kinds, f"{name}: evidence from {sorted(kinds)}"


def test_the_registry_covers_every_invariant_but_the_unreached_ones() -> None:
    names = {v.name for v in run(None).result.verdicts}
    covered = {name for p in PLANTS.values() for name in (p.invariant, *p.also)}
    assert covered <= names
    assert names - covered == set(UNREACHED)


def test_the_plants_cover_the_store_facing_flow_kinds() -> None:
    kinds = {k for p in PLANTS.values() for k in p.kinds}
    assert {
        "plain",
        "duplicate",
        "timeout_retry",
        "decline",
        "cancel_then_accept",
        "answer_changed",
        "expired",
        "before_expiry",
        "edit_between",
        "race_move",
        "archive",
        "list_pages",
        "search",
        "setup",
        "write_retry",
        "replay_after_expiry",
        "roots_ungranted",
        "quota_boundary",
        "legacy_decline",
        "legacy_plain",
        "legacy_foreign_session",
    } <= kinds


def test_the_catalogue_is_in_simulate_help() -> None:
    shown = CliRunner().invoke(main, ["simulate", "--help"], terminal_width=200).output
    for name in PLANTS:
        assert name in shown


def test_an_unknown_plant_is_refused_in_one_line() -> None:
    result = CliRunner().invoke(main, ["simulate", "--deterministic", "--plant", "nope"])
    assert result.exit_code == EXIT_USAGE
    assert "no plant 'nope'" in result.output


def test_a_plant_without_deterministic_is_refused() -> None:
    result = CliRunner().invoke(main, ["simulate", "--plant", "expiry-unchecked"])
    assert result.exit_code == EXIT_USAGE
    assert "--deterministic" in result.output


def test_a_node_process_never_imports_the_plant_machinery() -> None:
    code = (
        f"import importlib, sys; importlib.import_module({NODE_PROCESS_MODULE!r}); "
        "sys.exit(1 if 'store.simulation.plants' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def _cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.mark.planted(control="test_without_a_plant_the_runs_are_valid")
@pytest.mark.parametrize("name", sorted(PLANTS))
def test_a_plant_from_the_command_line_shrinks_and_replays_invalid(
    name: str, tmp_path: Path
) -> None:
    _shrinks_and_replays_invalid(name, tmp_path)


LEGACY_PLANTS = sorted(n for n, p in PLANTS.items() if p.legacy_share > 0)


def test_a_legacy_control_from_the_command_line_is_valid(tmp_path: Path) -> None:
    share = plant(LEGACY_PLANTS[0]).legacy_share
    result = _cli(
        "simulate", "--deterministic", "--seed", "1", "--legacy-share", str(share),
        "--flows", str(CLI_FLOWS), "--out", str(tmp_path / "control"),
    )  # fmt: skip
    assert result.exit_code == EXIT_VALID, result.output


@pytest.mark.planted(control="test_a_legacy_control_from_the_command_line_is_valid")
@pytest.mark.parametrize("name", LEGACY_PLANTS)
def test_a_legacy_plant_with_its_share_given_shrinks_and_replays_invalid(
    name: str, tmp_path: Path
) -> None:
    share = plant(name).legacy_share
    _shrinks_and_replays_invalid(name, tmp_path, "--legacy-share", str(share))
    kept = json.loads((tmp_path / "run" / "shrunk" / "deterministic.json").read_text())
    assert kept["legacy_share"] == share


def _shrinks_and_replays_invalid(name: str, tmp_path: Path, *extra: str) -> None:
    out = tmp_path / "run"
    first = _cli(
        "simulate", "--deterministic", "--plant", name, "--flows", str(CLI_FLOWS),
        "--out", str(out), *extra,
    )  # fmt: skip
    assert first.exit_code == EXIT_INVALID, first.output
    invariant = plant(name).invariant
    found = json.loads((out / "results.json").read_text())["invariants"]
    assert invariant in {v["name"] for v in found if v["status"] == "invalid"}
    shrunk = _cli("shrink", str(out), "--invariant", invariant, "--budget-runs", "40")
    assert shrunk.exit_code == EXIT_INVALID, shrunk.output
    kept = json.loads((out / "shrunk" / "deterministic.json").read_text())["settings"]
    flows = kept["only_flows"] or list(range(kept["flows"]))
    assert len(flows) <= MAX_SHRUNK_FLOWS
    command = re.search(r"^replay: (.+)$", shrunk.output, re.MULTILINE)
    assert command is not None
    words = command.group(1).split()
    assert words[:2] == ["notes-cluster", "simulate"]
    again = _cli(*words[1:], "--out", str(tmp_path / "again"))
    assert again.exit_code == EXIT_INVALID, again.output
