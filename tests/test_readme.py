"""The README's quick start says what CI runs, and its main job works as written."""

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


def quick_start_blocks() -> list[str]:
    """The fenced ``sh`` blocks of the README's "Quick start" section, in order."""
    text = README.read_text(encoding="utf-8")
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.S | re.M)
    assert section is not None, "README lost its Quick start section"
    return [b.strip() for b in re.findall(r"^```sh\n(.*?)^```", section.group(1), re.S | re.M)]


def main_job() -> str:
    """The quick start's main job: what follows the install in its first block."""
    install, _, job = quick_start_blocks()[0].partition(" && ")
    assert install == "pip install '.[sim]'", install
    return job


def test_the_quick_start_has_the_install_and_simulate_block_and_the_test_block() -> None:
    blocks = quick_start_blocks()
    assert blocks == [
        "pip install '.[sim]' && notes-cluster simulate",
        "pip install '.[test]' && pytest",
    ]


def test_ci_runs_the_readmes_test_command_verbatim() -> None:
    test_command = quick_start_blocks()[1]
    ci_lines = [line.strip() for line in CI_SCRIPT.read_text(encoding="utf-8").splitlines()]
    assert test_command in ci_lines


@pytest.mark.slow
def test_the_quick_start_simulation_runs_as_written_and_is_valid(tmp_path: Path) -> None:
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
