"""The README is a front door: short, in the issue's order, its install and main job run as
written, its test command is what CI runs, and every shell block in it is run by a test."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.workload import RACE_KINDS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CI_SCRIPT = ROOT / ".ci" / "run"
SIMULATE_TIMEOUT_S = 120
RUN_FILES = ("history.jsonl", "results.json", "report.png", "report.html")
MAX_LINES = 250
FIRST_SCREEN_LINES = 24

SECTIONS = (
    "The problem",
    "Install",
    "The main job: `notes-cluster simulate`",
    "Watch it catch a bug",
    "Check your own server",
    "Run the tests",
    "Documentation",
)
"""The README's sections, in the order a newcomer needs them."""

SHELL_BLOCKS = {
    "python3 -m venv .venv && . .venv/bin/activate": "tests/test_readme.py",
    "pip install '.[sim]' && notes-cluster simulate": "tests/test_readme.py",
    "pip install '.[test]' && pytest": "tests/test_readme.py (the line .ci/run runs)",
    "notes-cluster simulate --deterministic --plant": "tests/test_readme_catch_a_bug.py",
    "notes-cluster conformance --state-ttl 8": "tests/test_readme_own_server.py",
}
"""Each ``sh`` block of the README, by its first line's start, and the test that runs it."""


def text() -> str:
    return README.read_text(encoding="utf-8")


def section(title: str) -> str:
    """The body of the README's ``## title`` section."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text(), re.S | re.M)
    assert found is not None, f"README lost its {title!r} section"
    return found.group(1)


def sh_blocks(body: str) -> list[str]:
    """The fenced ``sh`` blocks of ``body``, in order."""
    return [b.strip() for b in re.findall(r"^```sh\n(.*?)^```", body, re.S | re.M)]


def test_the_readme_fits_on_a_few_screens_in_the_order_a_newcomer_needs() -> None:
    lines = text().splitlines()
    assert len(lines) <= MAX_LINES, len(lines)
    headings = re.findall(r"^## (.*)$", text(), re.M)
    assert [h for h in headings if h in SECTIONS] == list(SECTIONS), headings


def test_the_architecture_and_the_docs_are_linked_from_the_first_screen() -> None:
    first = "\n".join(text().splitlines()[:FIRST_SCREEN_LINES])
    assert "(docs/explanation/architecture.md)" in first
    assert "(docs/index.md)" in first
    assert (ROOT / "docs" / "explanation" / "architecture.md").is_file()


def test_the_problem_names_the_untestable_must() -> None:
    problem = section("The problem")
    assert "MUST enforce it server-side" in problem
    assert "untestable" in problem


def test_every_shell_block_of_the_readme_is_run_by_a_named_test() -> None:
    blocks = sh_blocks(text())
    for block in blocks:
        owners = [t for start, t in SHELL_BLOCKS.items() if block.startswith(start)]
        assert len(owners) == 1, f"no test runs this README block:\n{block}"
    assert len(blocks) == len(SHELL_BLOCKS)


def test_the_install_and_main_job_blocks_are_the_quick_start() -> None:
    assert sh_blocks(section("Install")) == ["python3 -m venv .venv && . .venv/bin/activate"]
    assert "3.11" in section("Install")
    assert sh_blocks(section("The main job: `notes-cluster simulate`")) == [
        "pip install '.[sim]' && notes-cluster simulate"
    ]


def test_ci_runs_the_readmes_test_command_verbatim() -> None:
    (test_command,) = sh_blocks(section("Run the tests"))
    assert test_command == "pip install '.[test]' && pytest"
    ci_lines = [line.strip() for line in CI_SCRIPT.read_text(encoding="utf-8").splitlines()]
    assert test_command in ci_lines


def test_every_relative_link_of_the_readme_names_a_file_that_exists() -> None:
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text()):
        assert (ROOT / target).exists(), target


@pytest.mark.slow
def test_the_install_block_makes_a_venv_of_python_3_11_or_newer(tmp_path: Path) -> None:
    (block,) = sh_blocks(section("Install"))
    check = "python -c 'import sys; print(sys.version_info >= (3, 11), sys.prefix)'"
    done = subprocess.run(
        ["bash", "-c", f"{block} && {check}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ok, prefix = done.stdout.split()
    assert ok == "True"
    assert Path(prefix).resolve() == (tmp_path / ".venv").resolve()


def main_job() -> str:
    """The main job: what follows the install in its block."""
    (block,) = sh_blocks(section("The main job: `notes-cluster simulate`"))
    install, _, job = block.partition(" && ")
    assert install == "pip install '.[sim]'", install
    return job


@pytest.mark.slow
def test_the_main_job_runs_as_written_and_is_valid(tmp_path: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)  # the interpreter's venv, where pip put the script
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    argv = shlex.split(main_job())
    exe = shutil.which(argv[0], path=env["PATH"])
    assert exe is not None, f"{argv[0]} is not installed"
    done = subprocess.run(
        [exe, *argv[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SIMULATE_TIMEOUT_S,
        check=False,
    )
    print(done.stderr.strip().splitlines()[0] if done.stderr.strip() else "(no stderr)")  # seed
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert any(line.strip() == "Verdict: VALID" for line in done.stdout.splitlines()), done.stdout

    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1, runs
    for name in RUN_FILES:
        assert (runs[0] / name).is_file(), f"{name} missing from {runs[0]}"
    results = json.loads((runs[0] / "results.json").read_text(encoding="utf-8"))
    assert results["verdict"] == "valid"
    assert all(v["status"] == "valid" for v in results["invariants"]), results["invariants"]
    unexercised = [k for k in RACE_KINDS if results["races"].get(k, 0) <= 0]
    assert unexercised == [], f"races never exercised: {unexercised}"
