"""Figures the docs give as facts of a seed are checked here: a deterministic run's answers held
to the model and its virtual seconds depend on the seed alone, not on the machine.

Layer: tests. ``docs/tutorials/first-run.md``, ``docs/explanation/checker.md`` and
``docs/how-to/deterministic.md`` quote ``simulate --deterministic --seed 11``'s counts; this runs
that command (in this process) and compares.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from cluster.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SEED = 11
ANSWERS, GROUPS, SEVERAL, VIRTUAL_S = 703, 420, 122, 5.5
"""What the docs say of seed 11: answers held to the model, their groups, answers with more
than one legal reply, and the run's virtual seconds."""


def test_the_docs_quote_the_seed_facts_checked_here() -> None:
    first_run = (ROOT / "docs/tutorials/first-run.md").read_text(encoding="utf-8")
    assert f"{ANSWERS} answers in {GROUPS} groups" in first_run
    assert f"{SEVERAL} of them with more than one legal reply" in " ".join(first_run.split())
    assert f"in {VIRTUAL_S} virtual seconds" in " ".join(first_run.split())
    checker = " ".join((ROOT / "docs/explanation/checker.md").read_text(encoding="utf-8").split())
    assert f"{ANSWERS} answers in {GROUPS} groups, {SEVERAL} of them" in checker
    deterministic = (ROOT / "docs/how-to/deterministic.md").read_text(encoding="utf-8")
    assert re.search(rf"is {VIRTUAL_S} virtual seconds", " ".join(deterministic.split()))


def test_seed_11_gives_the_counts_the_docs_quote(tmp_path: Path) -> None:
    out = tmp_path / "seed-11"
    args = ["simulate", "--deterministic", "--seed", str(SEED), "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    counts = results["counts"]
    assert (counts["model_answers"], counts["model_groups"], counts["model_ambiguous"]) == (
        ANSWERS,
        GROUPS,
        SEVERAL,
    )
    assert results["deterministic"]["virtual_s"] == pytest.approx(VIRTUAL_S)
