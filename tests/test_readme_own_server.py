"""The README's and the tutorial's "check your own server" commands, run as written against the
official Python SDK's reference server, give the output they show.

Layer: tests. The reference server (``serve-reference --sdk python``, two instances) runs on a
Redis of the test's own; its URLs replace the documents' ``8800``/``8801`` and its Redis URL the
tutorial's ``6390``, nothing else changes. ``conformance`` must exit 1 with exactly the checks
that need a record of used states failing, and every row the README shows must be a row of this
run (same check, same status); ``loadgen --foreign`` must exit 1 naming the invariants the
tutorial names.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.own_redis import own_redis
from tests.test_mrtr_pack_sdk import NEEDS_USED_STATE_STORE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TUTORIAL = ROOT / "docs" / "tutorials" / "own-server.md"
DOC_TARGETS = "http://127.0.0.1:8800/mcp,http://127.0.0.1:8801/mcp"
DOC_REDIS = "redis://127.0.0.1:6390/0"
TIMEOUT_S = 300
ROW = re.compile(r"^\| `(mrtr-[\w-]+)`[^|]*\| (SUCCESS|FAILURE|WARNING|SKIPPED) \|", re.M)


def blocks(path: Path, fence: str = "sh") -> list[str]:
    """The fenced blocks of ``path`` right after an HTML comment line."""
    text = path.read_text(encoding="utf-8")
    return re.findall(rf"^<!--[^\n]*-->\n```{fence}\n(.*?)^```", text, re.S | re.M)


def own_server_block(path: Path) -> str:
    found = [b for b in blocks(path) if "notes-cluster conformance --state-ttl 8" in b]
    assert len(found) == 1, path
    return found[0]


def env() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[str]:
    """The tutorial's reference server, as its block starts it, on a Redis of the test's own;
    yields the instances' URLs, comma-separated."""
    start = [b for b in blocks(TUTORIAL) if "serve-reference" in b]
    assert len(start) == 1
    lines = [line for line in start[0].replace("\\\n", " ").splitlines() if line.strip()]
    assert lines[0] == "redis-server --port 6390 --save '' --daemonize yes"
    command = lines[1].strip()
    assert command.endswith("&")
    with own_redis(tmp_path) as server:
        argv = shlex.split(command.rstrip("&").replace(DOC_REDIS, server.url))
        proc = subprocess.Popen(
            argv,
            cwd=tmp_path,
            env=env(),
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            assert proc.stdout is not None
            urls = [proc.stdout.readline().strip() for _ in range(2)]
            assert all(u.startswith("http://127.0.0.1:") for u in urls), urls
            yield ",".join(urls)
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def run(script: str, targets: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script.replace(DOC_TARGETS, targets)],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def test_the_readme_and_tutorial_name_the_same_two_commands() -> None:
    readme = own_server_block(README)
    tutorial = [b for b in blocks(TUTORIAL) if "notes-cluster conformance --state-ttl 8" in b]
    foreign = [b for b in blocks(TUTORIAL) if "notes-cluster loadgen --foreign" in b]
    squash = " ".join
    assert squash(readme.replace("\\\n", " ").split()) == squash(
        (tutorial[0] + foreign[0])
        .replace("\\\n", " ")
        .replace(" --out runs/pack-python", "")
        .split()
    )


def test_the_commands_fail_the_python_reference_as_the_docs_show(
    reference: str, tmp_path: Path
) -> None:
    conformance, foreign = own_server_block(README).split("notes-cluster loadgen")
    done = run(conformance, reference, tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    seen = dict(ROW.findall(done.stdout))
    failed = {check for check, status in seen.items() if status == "FAILURE"}
    assert failed == NEEDS_USED_STATE_STORE, done.stdout
    for shown in (README, TUTORIAL):
        (output,) = [b for b in blocks(shown, "text") if "# MRTR exactly-once conformance" in b]
        assert "10 SUCCESS, 6 FAILURE" in output
        for check, status in ROW.findall(output):
            assert seen[check] == status, (shown, check)

    done = run("notes-cluster loadgen" + foreign, reference, tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.splitlines()[0].split()[:2] == ["Verdict:", "INVALID"]
    for invariant in ("retries_learn_the_outcome", "refused_answers_did_not_act"):
        assert re.search(rf"│ {invariant}\s+│ invalid", done.stdout), invariant
