"""A default run reaches every configured bound it is held to, and says which it did not.

Layer: tests. One ``simulate --deterministic`` run on the defaults (300 flows) at ``SEED``: its
``results.json`` lists every bound of ``loadgen.check.bounds_reached.BOUNDS`` with how often the
run met it exactly; each must be reached but those in ``UNREACHED`` (with the reason), and the
line printed under the verdict names exactly those as never reached.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from cluster.cli import main
from loadgen.check.bounds_reached import BOUNDS, bounds_seen, never_reached
from loadgen.report import bounds_line, verdict_line
from loadgen.run.results import Results

SEED = 11

UNREACHED = {
    "idempotency_window_ms": "one hour in simulations: no flow retries a key after its window",
}
"""Bounds no default run reaches, and why (docs/explanation/checker.md says so too)."""


def test_a_default_deterministic_run_reaches_every_bound(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["simulate", "--deterministic", "--seed", str(SEED), "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    got = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert got["verdict"] == "valid"
    bounds = got["bounds"]
    assert set(bounds) == set(BOUNDS)
    missed = {name for name, n in bounds.items() if n == 0}
    assert missed == set(UNREACHED), bounds
    assert bounds_line(Results.from_json(got)) == f"bounds never reached: {', '.join(UNREACHED)}"
    assert verdict_line(Results.from_json(got)) == "Verdict: VALID"
    assert bounds_line(Results.from_json(got)) in result.output


def test_a_bound_never_reached_is_named_and_one_reached_is_not() -> None:
    counts = {f"bound_{name}": 1 for name in BOUNDS} | {"bound_max_offered": 0}
    assert never_reached(counts) == ["max_offered"]
    assert bounds_seen(counts) == {name: int(name != "max_offered") for name in BOUNDS}
    assert bounds_seen({"ops": 3}) is None  # a run that recorded no bounds claims none
