"""``notes-cluster shrink``: a planted bug's failing run shrinks to a few flows that
replay INVALID with the same invariant.

Layer: tests. Each planted bug is a store the nodes talk to instead of theirs
(``cluster.deterministic.run.planted_store``, test-only: ``StoreOptions.wrap``), active around
every command of the test, which run in this process (``CliRunner``): the deterministic run of
100 flows with faults and fault points, ``shrink`` with a budget, and ``simulate --replay`` of
the shrunk folder. The control runs the same command unplanted: VALID, and ``shrink`` refuses
it. Smaller pieces are tested alone: a run of chosen flows (``RunSettings.only_flows``), the
first cut (the flows an invariant names, then their tenant's), a case and its options.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cluster.cli import main
from cluster.deterministic.run import planted_store, run_deterministic, settings_json
from cluster.deterministic.shrink import case_of, hints, options_of, read_failing
from cluster.exit_codes import EXIT_INVALID, EXIT_USAGE, EXIT_VALID
from cluster.targets.simulate import SimulateOptions
from loadgen.runner import RunSettings
from loadgen.shrinking import CandidateRun
from store.api import Confirmation, ConfirmOutcome, NoteStoreAPI
from store.simulation.plants import ArchivesInPlace, Wrapped

SEED = 7
FLOWS = 100
"""Every race kind runs at least three times (the run counts as exercised), in seconds."""
FAULTS = "client,nodes,stall"
BUDGET = ("--budget", "600", "--budget-runs", "60")
"""Far more than the planted bugs need (about ten runs): a slow machine must not cut the search."""
SUMMARY = re.compile(
    rf"^{FLOWS} flows / 3 faults / 3 nodes → (\d+) flows? / (\d+) faults? / (\d+) nodes? "
    r"in (\d+) runs?, [\d,]+ s$",
    re.MULTILINE,
)


class ExpiryOffByOne(Wrapped):
    """The store's expiry check off by one: an answer at exactly its state's expiry (on the
    Redis clock) is honoured; it must be refused from the expiry on. Only the expiry races
    aimed at the millisecond (``exact_expiry``) meet it."""

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        out = await self.inner.confirm(c)
        if out.status == "expired" and out.redis_now_ms == c.exp_ms:
            return await self.inner.confirm(replace(c, exp_ms=c.exp_ms + 1))
        return out


class DuplicateExecutesAgain(Wrapped):
    """A duplicate of an executed answer (the store's ``replay``) executed once more."""

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        out = await self.inner.confirm(c)
        if out.status == "replay" and out.recorded == "executed":
            return await self.inner.confirm(replace(c, nonce=f"{c.nonce}-again"))
        return out


Plant = Callable[[NoteStoreAPI], NoteStoreAPI]


def _cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _simulate(out: Path) -> Result:
    return _cli(
        "simulate", "--deterministic", "--seed", str(SEED), "--flows", str(FLOWS),
        "--faults", FAULTS, "--buggify", "--out", str(out),
    )  # fmt: skip


def _results(run_dir: Path) -> dict[str, Any]:
    results: dict[str, Any] = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    return results


def _invalid(run_dir: Path) -> list[str]:
    return [v["name"] for v in _results(run_dir)["invariants"] if v["status"] == "invalid"]


def _shrinks_and_replays(
    tmp_path: Path, plant: Plant, invariant: str, kind: str | None = None
) -> None:
    """The planted run is INVALID breaking ``invariant``; shrink (told to keep it) cuts it to
    at most 5 flows (of race ``kind`` when given) and writes the shrunk folder; its replay is
    INVALID with the same invariant, with the same bytes."""
    run_dir = tmp_path / "run"
    with planted_store(plant):
        ran = _simulate(run_dir)
        assert ran.exit_code == EXIT_INVALID, ran.output
        assert _results(run_dir)["verdict"] == "invalid"
        assert invariant in _invalid(run_dir)
        first = invariant
        shrunk = _cli("shrink", str(run_dir), *BUDGET, "--invariant", invariant)
        assert shrunk.exit_code == EXIT_INVALID, shrunk.output
        found = SUMMARY.search(shrunk.output)
        assert found is not None, shrunk.output
        flows, faults, nodes, runs = map(int, found.groups())
        tried = re.findall(r"^  run (\d+): .*: (fails|passes)$", shrunk.output, re.MULTILINE)
        assert [int(n) for n, _ in tried] == list(range(1, runs + 1))  # each run said
        assert 1 <= flows <= 5
        assert faults <= 3
        assert 1 <= nodes <= 3
        assert 1 <= runs <= 60
        out = run_dir / "shrunk"
        assert first in _invalid(out)
        saved = json.loads((out / "deterministic.json").read_text(encoding="utf-8"))
        kept = saved["settings"]["only_flows"]
        assert len(kept) == flows
        assert saved["settings"]["flows"] == FLOWS
        rows = [json.loads(x) for x in (out / "history.jsonl").open(encoding="utf-8")]
        assert sorted({r["flow"] for r in rows}) == kept
        if kind is not None:
            assert {r["kind"] for r in rows} == {kind}
        replay = f"notes-cluster simulate --replay {out}"
        assert f"replay: {replay}" in shrunk.output
        assert replay in (out / "replay.sh").read_text(encoding="utf-8")
        anomaly = (out / "anomaly.txt").read_text(encoding="utf-8")
        assert anomaly.startswith("Let:\n")
        assert f"`{first}` does not hold" in anomaly
        assert (out / "lanes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        again = tmp_path / "again"
        replayed = _cli("simulate", "--replay", str(out), "--out", str(again))
    assert replayed.exit_code == EXIT_INVALID, replayed.output
    assert "same history bytes" in replayed.output
    assert first in _invalid(again)
    assert (again / "history.jsonl").read_bytes() == (out / "history.jsonl").read_bytes()


def test_without_a_plant_the_run_is_valid_and_shrink_refuses_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    ran = _simulate(run_dir)
    assert ran.exit_code == EXIT_VALID, ran.output
    assert _results(run_dir)["verdict"] == "valid"
    refused = _cli("shrink", str(run_dir), *BUDGET)
    assert refused.exit_code == EXIT_USAGE
    assert "is not INVALID: nothing to shrink" in refused.output
    assert not (run_dir / "shrunk").exists()


@pytest.mark.planted(control="test_without_a_plant_the_run_is_valid_and_shrink_refuses_it")
def test_an_expiry_check_off_by_one_shrinks_and_replays_invalid(tmp_path: Path) -> None:
    _shrinks_and_replays(tmp_path, ExpiryOffByOne, "no_mutation_from_refused", kind="expired")


@pytest.mark.planted(control="test_without_a_plant_the_run_is_valid_and_shrink_refuses_it")
def test_a_duplicate_answer_executed_twice_shrinks_and_replays_invalid(tmp_path: Path) -> None:
    _shrinks_and_replays(tmp_path, DuplicateExecutesAgain, "ok_deletes_match_journal")


@pytest.mark.planted(control="test_without_a_plant_the_run_is_valid_and_shrink_refuses_it")
def test_a_move_landing_in_the_wrong_workspace_shrinks_and_replays_invalid(
    tmp_path: Path,
) -> None:
    _shrinks_and_replays(tmp_path, ArchivesInPlace, "executions_trace_to_confirmations")


def test_shrink_of_no_deterministic_run_folder_is_a_usage_error(tmp_path: Path) -> None:
    refused = _cli("shrink", str(tmp_path))
    assert refused.exit_code == EXIT_USAGE
    assert "no deterministic run folder" in refused.output


@pytest.mark.planted(control="test_without_a_plant_the_run_is_valid_and_shrink_refuses_it")
def test_shrink_of_an_invariant_the_run_does_not_break_is_a_usage_error(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with planted_store(ArchivesInPlace):
        assert _simulate(run_dir).exit_code == EXIT_INVALID
        refused = _cli("shrink", str(run_dir), "--invariant", "creates_exactly_once")
    assert refused.exit_code == EXIT_USAGE
    assert "does not break creates_exactly_once (it breaks executions_trace" in refused.output


def test_a_run_of_chosen_flows_runs_exactly_them_as_the_full_run_does() -> None:
    options = SimulateOptions(nodes=2, settings=RunSettings(flows=40, seed=3, tenants=2))
    full = run_deterministic(options, skew=False)
    kept = (3, 17, 30)
    part = run_deterministic(
        replace(options, settings=replace(options.settings, only_flows=kept)), skew=False
    )
    assert sorted({op.flow for op in part.history.ops}) == list(kept)
    for flow in kept:  # same kind, tenant, principal and first request (the index's alone)
        asked = [(op.kind, op.f, op.value) for op in full.history.ops
                 if op.flow == flow and op.type == "invoke"]  # fmt: skip
        again = [(op.kind, op.f, op.value) for op in part.history.ops
                 if op.flow == flow and op.type == "invoke"]  # fmt: skip
        assert again
        assert again[0] == asked[0]
        # Later requests may differ where the flow acts on what the store shows it (a page
        # of notes lists other flows' notes in the full run): the draws are the same, the
        # store is not.
    with pytest.raises(ValueError, match="outside the 40 planned flows"):
        replace(options.settings, only_flows=(40,)).planned()


def test_the_first_cut_is_the_named_flows_then_their_tenants(tmp_path: Path) -> None:
    rows = [
        (0, 2, "invoke", 1, "t0"),
        (1, 4, "invoke", 2, "t1"),
        (2, 2, "ok", 1, None),
        (3, 6, "invoke", 3, "t0"),
        (4, 4, "ok", 2, None),
        (5, 8, "invoke", 4, "t2"),
    ]
    history = tmp_path / "history.jsonl"
    history.write_text(
        "".join(
            json.dumps(
                {
                    "index": i,
                    "time_ms": i,
                    "process": p,
                    "type": t,
                    "f": "ask",
                    "flow": flow,
                    "kind": "plain",
                    "value": {"tenant": tenant} if tenant else {},
                }
            )
            + "\n"
            for i, p, t, flow, tenant in rows
        ),
        encoding="utf-8",
    )
    assert hints(history, [2]) == [(1,), (1, 3)]
    assert hints(history, [2, 4]) == [(1, 2), (1, 2, 3)]
    assert hints(history, [2], first_flow=1) == [(0,), (0, 2)]


def test_a_case_is_the_runs_options_and_back() -> None:
    options = SimulateOptions(
        nodes=3,
        faults=frozenset({"stall", "client", "nodes"}),
        settings=RunSettings(flows=50, seed=9),
    )
    case = case_of(options, buggify=True, skew=True)
    assert case == CandidateRun(
        tuple(range(50)), (0, 1, 2), 3, (("buggify", True), ("skew", True))
    )  # faults: indices into the sorted kinds client, nodes, stall
    assert options_of(case, options).settings.only_flows is None
    assert options_of(case, options).injected is None
    cut = replace(case, flows=(4, 9), faults=(2,), nodes=1)
    smaller = options_of(cut, options)
    assert smaller.settings.only_flows == (4, 9)
    assert smaller.injected == frozenset({"stall"})  # the nodes stay configured for all three
    assert smaller.faults == options.faults
    assert smaller.nodes == 1
    assert case_of(smaller, buggify=False, skew=True) == replace(
        cut, settings=(("buggify", False), ("skew", True))
    )


def test_a_damaged_folder_is_refused_before_anything_runs(tmp_path: Path) -> None:
    options = SimulateOptions(settings=RunSettings(flows=10, seed=2))
    (tmp_path / "deterministic.json").write_text(json.dumps(settings_json(options)))
    broken = {"name": "moves_land", "status": "invalid", "ops": [3]}
    (tmp_path / "results.json").write_text(json.dumps({"invariants": [broken]}))
    with pytest.raises(ValueError, match="cannot read the run"):  # no verdict: not results
        read_failing(tmp_path)
    results = {
        "verdict": "invalid",
        "invariants": [broken],
        "counts": {},
        "flows": {"total": 10, "completed": 10},
    }
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "history.jsonl").write_text("not a history line\n")
    with pytest.raises(ValueError, match=r"history\.jsonl: cannot read it"):
        read_failing(tmp_path)
    (tmp_path / "history.jsonl").write_text("")
    failing = read_failing(tmp_path)
    assert (failing.invariant, failing.ops, failing.hints) == ("moves_land", (3,), ((), ()))
    assert failing.options.settings.flows == 10
    refused = _cli("shrink", str(tmp_path), "--invariant", "creates_exactly_once")
    assert refused.exit_code == EXIT_USAGE
    assert "does not break creates_exactly_once (it breaks moves_land)" in refused.output
