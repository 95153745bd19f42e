"""Figures the docs give as facts of a seed are checked here: a deterministic run's answers held
to the model and its virtual seconds depend on the seed alone, not on the machine.

Layer: tests. ``docs/tutorials/first-run.md``, ``docs/explanation/checker.md`` and
``docs/how-to/deterministic.md`` quote ``simulate --deterministic --seed 11``'s counts; this runs
that command (in this process) and holds every page that quotes them to its figures.
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
ANSWERS, GROUPS, SEVERAL, VIRTUAL_S = 752, 503, 126, 7.5
"""What the docs say of seed 11: answers held to the model, their groups, answers with more
than one legal reply, and the run's virtual seconds."""


def quotes() -> list[tuple[str, str]]:
    """(page, the page's text on one line) for every page that quotes seed 11."""
    out = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = " ".join(page.read_text(encoding="utf-8").split())
        if f"--seed {SEED}" in text:
            out.append((str(page.relative_to(ROOT)), text))
    return out


def test_every_page_that_quotes_seed_11_quotes_the_facts_checked_here() -> None:
    counts = re.compile(r"(\d[\d,]*) answers in (\d[\d,]*) groups,? (\d[\d,]*) of them")
    virtual = re.compile(r"(\d+(?:\.\d+)?) virtual seconds")
    seen = 0
    for page, text in quotes():
        for found in counts.findall(text):
            assert tuple(int(n.replace(",", "")) for n in found) == (ANSWERS, GROUPS, SEVERAL), page
            seen += 1
        for found in virtual.findall(text):
            assert float(found) == VIRTUAL_S, page
            seen += 1
    first_run = dict(quotes())["docs/tutorials/first-run.md"]
    assert f"{ANSWERS} answers in {GROUPS} groups to the model, {SEVERAL} of them" in first_run
    assert seen >= 2


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
