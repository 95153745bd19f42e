"""A seeded ``simulate`` run's ``results.json`` is what it was before the run pipeline.

The expectation (``tests/data/simulate_seed7_results.json``) is the ``results.json`` of
``notes-cluster simulate --seed 7 --flows 200`` run by the code before ``loadgen.run``. A run
today must have exactly its keys, at every level, and the same values, except:

- timings (elapsed, throughput, rates by tenth, latency, the Redis-clock instants, the check's
  cost), compared by type only;
- what varies between two runs of the same code and seed (execution is not deterministic: which
  node and which racer wins is up to the scheduler): the counts below, and the summaries' numbers;
- ``model``, whose rows count the replies seen: the expectation lists its race kinds, and each
  kind's table is compared by shape.

Four runs of the unchanged code differed in exactly these fields. Deliberately updated since:
the verdicts op_records_expire, usage_matches_notes, keyed_retries_marked and oddities_explained
joined (the store facts keep operation records and usage counters), the count
model_maker_told_replay went (the model no longer tolerates a deciding answer told "replay"), and
the exercised summary says when a 200-flow run lowers the rule of 3 runs per kind; then the
expectation was written again from a run of this code, when the race kinds replay_after_expiry,
shared_key and concurrent_updates joined (every count, kind and model row moved with them); and
again when the race kinds roots_ungranted, quota_boundary and full_pick, the verdicts
roots_respected and quotas_held, the counts of bounds reached (``bound_*``, compared by type with
the ``bounds`` section: how often a run meets a bound varies with who wins its races) and the
small-quota tenants joined, the search flow drew its roots and picks, and half the setup flows
completed the page; and again when simulations configured their nodes' pick list at 6 notes
(``SIM_MAX_OFFERED``), so that a ``full_pick`` flow fills it with a few creates, not 50; and
again when the verdicts legacy_keys_expire, legacy_answers_act_once, legacy_answers_heard and
legacy_sessions_bound joined (the store facts keep the legacy session keyspace).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from cluster.cli import main

EXPECTED = Path(__file__).parent / "data" / "simulate_seed7_results.json"

ARGS = ["simulate", "--seed", "7", "--flows", "200", "--json"]

TIMINGS = {
    "/elapsed_s",
    "/throughput_flows_per_s",
    "/settings/max_exp_ms",
    "/settings/started_wall_ms",
}
"""Leaves compared by type: timings and instants."""

TIMING_SUBTREES = ("/flows_per_s_by_tenth/", "/latency_ms/", "/check/", "/bounds/")
"""Subtrees whose leaves are timings (or the check's cost, or how often the run met each bound:
who wins a race decides how many pages come out full), compared by type."""

VARYING_COUNTS = {"ops", "replays", "model_ambiguous", "model_anchors"} | {
    "confirms",
    "model_answers",
    "info_executed",
    "info_resolved",
}
"""Checker counts that differ between two runs of the same code and seed: who wins a race, and
(the second set) how many confirms a client sent again after a timeout and how many outcomes a
timeout left to the journal, which a loaded machine raises (462 confirms instead of 461, 15
timed-out executions instead of 16, seen beside other suites)."""

SPLIT_BY_LOAD = ("before_expiry_checked", "before_expiry_late", "before_expiry_skipped")
"""How the before_expiry confirms split between checked and answered too late to judge depends
on how busy the machine is (a key shows up only when its count is not zero): their sum is the
run's, compared; the split is not."""


def _numbers_masked(text: str) -> str:
    return re.sub(r"\d+", "#", text)


def _same_type(path: str, got: Any, want: Any) -> list[str]:
    numeric = (int, float)
    if isinstance(want, numeric) and not isinstance(want, bool):
        ok = isinstance(got, numeric) and not isinstance(got, bool)
    else:
        ok = type(got) is type(want)
    return [] if ok else [f"{path}: {type(got).__name__}, expected {type(want).__name__}"]


def _model_shape(got: Any, kinds: list[str]) -> list[str]:
    if not isinstance(got, dict) or sorted(got) != kinds:
        return [f"/model: kinds {sorted(got) if isinstance(got, dict) else got!r}, want {kinds}"]
    problems = []
    for kind, rows in got.items():
        for row in rows:
            if set(row) != {"answer", "legal", "seen"}:
                problems.append(f"/model/{kind}: row keys {sorted(row)}")
            elif not (
                isinstance(row["answer"], str)
                and all(isinstance(x, str) for x in row["legal"])
                and all(isinstance(k, str) and isinstance(n, int) for k, n in row["seen"].items())
            ):
                problems.append(f"/model/{kind}: row {row!r} has the wrong shape")
    return problems


def differences(got: Any, want: Any, path: str = "") -> list[str]:
    """Where ``got`` differs from ``want`` beyond timings and the run-to-run variation."""
    if path == "/model":
        return _model_shape(got, want)
    if path in TIMINGS or path.startswith(TIMING_SUBTREES):
        return _same_type(path, got, want)
    if path == "/flows_per_s_by_tenth" and isinstance(got, dict):
        # A run too short to cut into tenths (a fast machine) says so: ``whole_run``.
        got = {k: v for k, v in got.items() if k != "whole_run"}
    if path.startswith("/counts/") and path.removeprefix("/counts/") in VARYING_COUNTS:
        return _same_type(path, got, want)
    if path.startswith("/counts/bound_"):
        return _same_type(path, got, want)
    if path == "/counts" and isinstance(got, dict) and isinstance(want, dict):
        total_got = sum(got.get(k, 0) for k in SPLIT_BY_LOAD)
        total_want = sum(want.get(k, 0) for k in SPLIT_BY_LOAD)
        if total_got != total_want:
            return [f"/counts: {total_got} before_expiry confirms, expected {total_want}"]
        got = {k: v for k, v in got.items() if k not in SPLIT_BY_LOAD}
        want = {k: v for k, v in want.items() if k not in SPLIT_BY_LOAD}
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: {got!r} is not an object"]
        if set(got) != set(want):
            return [f"{path}: keys {sorted(set(got) ^ set(want))} differ"]
        return [d for k in want for d in differences(got[k], want[k], f"{path}/{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path}: {got!r} is not a list of {len(want)}"]
        pairs = enumerate(zip(got, want, strict=True))
        return [d for i, (g, w) in pairs for d in differences(g, w, f"{path}[{i}]")]
    if path.endswith("/summary") and isinstance(want, str) and isinstance(got, str):
        same = _numbers_masked(got) == _numbers_masked(want)
        return [] if same else [f"{path}: {got!r}, expected {want!r}"]
    return [] if got == want else [f"{path}: {got!r}, expected {want!r}"]


def test_seeded_simulate_results_unchanged(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(main, [*ARGS, "--out", str(out)])
    assert result.exit_code == 0, result.output
    got = json.loads((out / "results.json").read_text(encoding="utf-8"))
    want = json.loads(EXPECTED.read_text(encoding="utf-8"))
    assert differences(got, want) == []
    assert got["verdict"] == "valid"
    assert got["flows"] == {"total": 200, "completed": 200}


def test_the_comparison_sees_a_changed_value_and_a_missing_key() -> None:
    """The comparison can fail: a changed verdict, a lost key, an extra key, a non-number timing."""
    want = json.loads(EXPECTED.read_text(encoding="utf-8"))
    same = want | {"model": {kind: [] for kind in want["model"]}}
    assert differences(same, want) == []
    changed = same | {"verdict": "invalid"}
    assert differences(changed, want) == ["/verdict: 'invalid', expected 'valid'"]
    lost = {k: v for k, v in same.items() if k != "races"}
    assert differences(lost, want) == [": keys ['races'] differ"]
    extra = same | {"settings": want["settings"] | {"new": 1}}
    assert differences(extra, want) == ["/settings: keys ['new'] differ"]
    timing = same | {"elapsed_s": "soon"}
    assert differences(timing, want) == ["/elapsed_s: str, expected float"]


def test_the_before_expiry_split_may_move_but_not_its_sum() -> None:
    """A loaded machine answers some before_expiry confirms too late to judge: the split between
    checked and late moves, the number of such confirms may not."""
    want = json.loads(EXPECTED.read_text(encoding="utf-8"))
    same = want | {"model": {kind: [] for kind in want["model"]}}
    checked = want["counts"]["before_expiry_checked"]
    moved = same | {
        "counts": want["counts"] | {"before_expiry_checked": checked - 2, "before_expiry_late": 2}
    }
    assert differences(moved, want) == []
    lost = same | {"counts": want["counts"] | {"before_expiry_checked": checked - 1}}
    assert differences(lost, want) == [
        f"/counts: {checked - 1} before_expiry confirms, expected {checked}"
    ]


def test_a_run_too_short_for_tenths_may_say_so() -> None:
    """How long the run took decides whether its tenths are one whole-run rate: a timing."""
    want = json.loads(EXPECTED.read_text(encoding="utf-8"))
    same = want | {"model": {kind: [] for kind in want["model"]}}
    short = same | {
        "flows_per_s_by_tenth": {"first_tenth": 9.0, "last_tenth": 9.0, "whole_run": True}
    }
    assert differences(short, want) == []
    lost = same | {"flows_per_s_by_tenth": {"first_tenth": 9.0}}
    assert differences(lost, want) == ["/flows_per_s_by_tenth: keys ['last_tenth'] differ"]
