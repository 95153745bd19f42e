"""``notes-cluster check``: the verdict of run folders from their files alone.

Layer: loadgen. What is left here once the checker over run folders moved to
``loadgen.check.partition`` (issue 23): ``recheck``, which the run pipeline (``loadgen/run/``)
takes over.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadgen.check.exercise import ExerciseRule, judge
from loadgen.check.partition import check_folders
from loadgen.runfolder import history_files
from loadgen.tally import merge, read_tallies


def recheck(
    run_dirs: Sequence[Path],
    facts_dir: Path,
    rule: ExerciseRule,
    legacy_share: float,
    weights: dict[str, float] | None = None,
    jobs: int | None = None,
) -> dict[str, Any]:
    """``notes-cluster check``: the verdict of run folders from their files alone (histories,
    tallies, and the store facts in ``facts_dir``), as the ``results.json`` fields it decides,
    and what the check cost (``check``: jobs, seconds, peak resident memory)."""
    histories = [p for d in run_dirs for p in history_files(d)]
    tally = merge(read_tallies(d) for d in run_dirs)
    result = judge(check_folders(histories, facts_dir, jobs), tally, legacy_share, rule, weights)
    return {
        "verdict": result.status,
        "invariants": [v.to_json() for v in result.verdicts],
        "counts": dict(result.counts),
        "model": result.model,
        "kinds": tally.per_kind(),
        "flows": {"total": tally.total, "completed": tally.completed},
        "flows_per_s_by_tenth": tally.tenth_rates(),
        "histories": [str(p) for p in histories],
        "check": result.cost,
    }
