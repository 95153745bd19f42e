"""The exercise rule: a run that did not exercise what it claims to test is UNKNOWN, whatever
the invariants say. Fewer flows than a share got past round 1, or a race kind completed too
rarely for its share of the draws: the run proves nothing about what it did not exercise.

Layer: loadgen.check, beside the invariants: it reads the load's counters
(``loadgen.tally.Tally``, which the load processes write and ``merge``) and gives the
``exercised`` verdict (``exercise_verdict``), which ``loadgen.run.pipeline.judged`` adds to a
run's check: the one place it is applied.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loadgen.check.verdict import Verdict
from loadgen.legacy_clients import LEGACY_KINDS
from loadgen.tally import Tally
from loadgen.workload import RACE_KINDS

MIN_COMPLETED_SHARE = 0.95
"""Default: fewer flows than this share got past round 1 and ran their race: UNKNOWN."""

MIN_RUNS_PER_KIND = 3
"""Default: a race kind exercised fewer times than this (scaled down for tiny runs): UNKNOWN."""

LOWERED = "exercise rule lowered"
"""Words of the ``exercised`` summary when the run was too small for the rule it was given: the
verdict line repeats them (``loadgen.report``), so a lowered rule is never a silent pass."""


@dataclass(frozen=True)
class ExerciseRule:
    """When a run counts as exercised (``--min-completed``, ``--min-per-kind``)."""

    min_completed_share: float = MIN_COMPLETED_SHARE
    min_runs_per_kind: int = MIN_RUNS_PER_KIND

    def needed_per_kind(self, flows: int, share: float) -> int:
        """Runs a kind drawn with probability ``share`` needs among ``flows`` flows: the
        configured number, or half of what the draw gives it on average when the run is too
        small for that (rounded down)."""
        return min(self.min_runs_per_kind, int(flows * share / 2))


def exercise_verdict(
    tally: Tally,
    families: Sequence[Sequence[str]],
    rule: ExerciseRule,
    weights: Mapping[str, float] | None = None,
) -> Verdict:
    """``exercised``: valid when at least ``rule.min_completed_share`` of the flows got past
    round 1 and every kind of each family (modern kinds; legacy kinds) completed at least
    ``rule.needed_per_kind`` times for its share of that family's flows (``weights``; kinds
    without one, and families without weights, count as evenly drawn: a kind weighted zero
    is a hole in the run's coverage); otherwise unknown, saying why: the run proves nothing
    about what it did not exercise."""
    total, completed = tally.total, tally.completed
    reasons: list[str] = []
    if total == 0:
        reasons.append("no flow ran")
    elif completed < math.ceil(rule.min_completed_share * total - 1e-9):
        reasons.append(
            f"only {completed} of {total} flows ({completed / total:.1%}) got past round 1, "
            f"under the {rule.min_completed_share:.0%} required"
        )
    least = rule.min_runs_per_kind
    unrequired: list[str] = []
    for family in families:
        flows = sum(sum(tally.kinds.get(k, Counter()).values()) for k in family)
        short = []
        for kind, share in _shares(family, weights or {}).items():
            need = rule.needed_per_kind(flows, share)
            done = tally.kinds.get(kind, Counter())["completed"]
            least = min(least, need)
            if need == 0 and rule.min_runs_per_kind > 0:
                unrequired.append(kind)
            if done < need:
                short.append(f"{kind} {done} (needs {need})")
        if short:
            reasons.append(f"race kinds exercised too rarely: {', '.join(short)}")
    lowered = ""
    if least < rule.min_runs_per_kind:
        lowered = (
            f" {LOWERED}: {rule.min_runs_per_kind} runs per kind asked, {total} flows give "
            f"some kinds only {least}"
            + (f" (not required: {', '.join(unrequired)})" if unrequired else "")
            + "."
        )
    if reasons:
        text = "Under-exercised: " + "; ".join(reasons) + "." + lowered
        return Verdict("exercised", "unknown", text)
    return Verdict(
        "exercised",
        "valid",
        f"{completed} of {total} flows got past round 1; every race kind ran at least "
        f"{least} times.{lowered}",
    )


def _shares(family: Sequence[str], weights: Mapping[str, float]) -> dict[str, float]:
    """Each kind's share of its family's draws; an even share for a kind weighted zero (or
    for every kind, when none of the family is weighted)."""
    even = 1 / len(family) if family else 0.0
    total = sum(weights.get(k, 0.0) for k in family)
    if total <= 0:
        return dict.fromkeys(family, even)
    return {k: weights.get(k, 0.0) / total if weights.get(k, 0.0) > 0 else even for k in family}


def expected_kinds(legacy_share: float) -> list[list[str]]:
    """The families of race kinds a run must exercise: every modern kind, and every legacy
    kind when a share of the flows is legacy."""
    families = [list(RACE_KINDS)]
    if legacy_share > 0:
        families.append(list(LEGACY_KINDS))
    return families
