"""The documentation site: every shell block is either run here or says which test runs it (or
why none can), the pages tell no development history, and ``mkdocs build --strict`` passes.

Layer: tests. A fenced ``sh`` block of ``docs/`` is preceded by a marker comment:

    <!-- test: run -->                 run here, as written, in a fresh folder: exit 0
    <!-- test: tests/test_x.py -->     run as written by that test
    <!-- test: no, REASON -->          not runnable by a test (a server of yours, minutes of
                                       load, traffic beyond loopback), with the reason

Other marker comments (``<!-- curl-walkthrough -->``) may stand between it and the block.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RUN_TIMEOUT_S = 300
BLOCK = re.compile(r"((?:^<!--[^\n]*-->\n)*)^```(?:sh|bash|shell|console)\n(.*?)^```", re.S | re.M)
MARKER = re.compile(r"^<!-- test: (.*?) -->$", re.M)
HISTORY = re.compile(
    r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth) round\b"
    r"|\brounds? (one|two|three|four|five|six|seven|eight)\b|\bissue \d+|\bA sixth\b",
    re.I,
)
"""Development history told as rounds or issues: it belongs in the changelog and the commits."""


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)


def shell_blocks() -> list[tuple[Path, str, str]]:
    """(page, marker, block) for every shell block of the docs."""
    out = []
    for page in pages():
        for comments, block in BLOCK.findall(page.read_text(encoding="utf-8")):
            markers = MARKER.findall(comments)
            out.append((page, markers[0] if len(markers) == 1 else "", block))
    return out


def test_every_shell_block_of_the_docs_says_which_test_runs_it_or_why_none_can() -> None:
    blocks = shell_blocks()
    assert len(blocks) > 20
    for page, marker, block in blocks:
        where = f"{page.relative_to(ROOT)}: {block.splitlines()[0]}"
        assert marker, f"no <!-- test: ... --> marker before {where}"
        if marker == "run":
            continue
        if marker.startswith("no, "):
            assert len(marker) > len("no, ") + 10, f"say why it cannot run: {where}"
            named = re.findall(r"tests/test_\w+\.py", marker)
        else:
            named = [marker]
            assert re.fullmatch(r"tests/test_\w+\.py", marker), f"bad marker {marker!r}: {where}"
        for test in named:
            assert (ROOT / test).is_file(), f"{test} named for {where} does not exist"


def test_the_docs_and_readme_tell_no_development_history() -> None:
    for page in [*pages(), ROOT / "README.md"]:
        found = HISTORY.search(page.read_text(encoding="utf-8"))
        assert found is None, f"{page.relative_to(ROOT)}: {found.group(0)!r}"


RUNNABLE = [(p, b) for p, m, b in shell_blocks() if m == "run"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("page", "block"), RUNNABLE, ids=[f"{p.stem}:{b.splitlines()[0][:40]}" for p, b in RUNNABLE]
)
def test_a_runnable_shell_block_runs_as_written(page: Path, block: str, tmp_path: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    done = subprocess.run(
        ["bash", "-e", "-c", block],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_mkdocs_builds_the_site_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("the docs extra is not installed (pip install '.[docs]'); .ci/run builds it")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]


RUN_FOLDER_PATHS = {"store/meta.json", "store/legacy.json"}
"""Paths inside a run folder that look like the repository's (a run folder's ``store/``)."""


def test_every_repository_path_and_module_the_docs_name_exists() -> None:
    """The docs name files (``cluster/...py``) and modules (``python -m cluster...``): when code
    moves, the pages that point at it must move with it."""
    missing = []
    for page in [*pages(), ROOT / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for path in re.findall(r"`((?:cluster|nodes|store|loadgen|tests|docs)/[\w./-]+)`", text):
            path = path.rstrip("/.")
            if path not in RUN_FOLDER_PATHS and not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
        for module in re.findall(r"python -m ((?:cluster|nodes|store|loadgen)[\w.]*)", text):
            if importlib.util.find_spec(module) is None:
                missing.append(f"{page.relative_to(ROOT)}: python -m {module}")
    assert missing == []
