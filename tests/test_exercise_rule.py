"""The exercise rule (``loadgen.check.exercise``): a run that exercised too little of a kind is
UNKNOWN with the reason, and a rule lowered for a small run is said in the verdict, never a
silent pass."""

from __future__ import annotations

from loadgen.check.exercise import LOWERED, ExerciseRule, exercise_verdict
from loadgen.report import verdict_line
from loadgen.run.results import Results
from loadgen.tally import Tally

KINDS = [["a", "b", "c"]]


def tally(runs: dict[str, int]) -> Tally:
    t = Tally()
    for kind, n in runs.items():
        for _ in range(n):
            t.add_flow(kind, "completed", 0.0)
    return t


def test_a_kind_run_too_rarely_makes_the_run_unknown_naming_it() -> None:
    v = exercise_verdict(tally({"a": 10, "b": 10, "c": 1}), KINDS, ExerciseRule(0.95, 3))
    assert v.status == "unknown"
    assert "c 1 (needs 3)" in v.summary


def test_a_rule_too_big_for_the_run_is_lowered_and_says_so() -> None:
    v = exercise_verdict(tally({"a": 20, "b": 20, "c": 20}), KINDS, ExerciseRule(0.95, 1000))
    assert v.status == "valid"
    assert f"{LOWERED}: 1000 runs per kind asked, 60 flows give some kinds only 10" in v.summary


def test_a_kind_whose_need_scales_to_zero_is_named_as_not_required() -> None:
    v = exercise_verdict(tally({"a": 1, "b": 1, "c": 0}), KINDS, ExerciseRule(0.0, 3))
    assert v.status == "valid"
    assert "not required: a, b, c" in v.summary


def test_the_verdict_line_repeats_a_lowered_rule() -> None:
    v = exercise_verdict(tally({"a": 20, "b": 20, "c": 20}), KINDS, ExerciseRule(0.95, 1000))
    results = Results.__new__(Results)
    object.__setattr__(results, "verdict", "valid")
    object.__setattr__(results, "invariants", [v.to_json()])
    object.__setattr__(results, "counts", {})
    assert verdict_line(results).startswith(f"Verdict: VALID ({LOWERED}: 1000 runs per kind")


def test_the_default_rule_on_a_big_enough_run_says_nothing_of_lowering() -> None:
    v = exercise_verdict(tally({"a": 10, "b": 10, "c": 10}), KINDS, ExerciseRule())
    assert v.status == "valid"
    assert LOWERED not in v.summary
