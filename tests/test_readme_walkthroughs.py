"""The docs' load walkthroughs (docs/how-to/loadgen.md) run as written and end with VALID.

The ``loadgen`` walkthrough (``<!-- loadgen-walkthrough -->``: ``serve --demo ... &``, then
``loadgen`` against its two nodes, then ``kill %1``) and the one for several ``loadgen``
processes (``<!-- loadgen-processes-walkthrough -->``: two ``--process-id`` loads without
``--redis``, then one ``check --redis``) run in one bash, in that order, as a reader would: the
second against the nodes and store of the first, so it also shows that a store which outlives a
run does not spoil the next run's check. Only the Redis URL (a Redis of the test's own) and the
ports (free ones) are replaced; the bash runs in a process group of its own, stopped whatever
happens.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_process import GIVE_UP_S, running
from tests.own_redis import free_port, own_redis

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "how-to" / "loadgen.md"
PAGE_REDIS = "redis://127.0.0.1:6379/0"
WALKTHROUGH_TIMEOUT_S = 600
"""The whole script, both walkthroughs: far above their minute or two, far below a stuck run
waiting out the default 300 s state TTL plus 60 s grace twice."""


def block(marker: str) -> str:
    """The fenced ``sh`` block right after ``<!-- marker -->``."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(rf"<!-- {re.escape(marker)} -->\n```sh\n(.*?)^```", text, re.S | re.M)
    assert found is not None, f"{PAGE} lost its {marker} block"
    return found.group(1)


def _two_free_ports() -> int:
    """A port P such that P and P + 1 were both free a moment ago."""
    for _ in range(100):
        base = free_port()
        if base < 65535:
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", base + 1))
                except OSError:
                    continue
            return base
    pytest.fail("no two consecutive free loopback ports")


def test_the_loadgen_walkthrough_gives_the_nodes_a_short_ttl_and_ends_by_stopping_them() -> None:
    first = block("loadgen-walkthrough")
    assert "--state-ttl 5 --replay-grace 2 &" in first
    assert "--replay-grace 2" in first.split("notes-cluster loadgen", 1)[1]
    assert first.strip().splitlines()[-1].startswith("kill %1")


def test_both_load_walkthroughs_end_with_a_valid_verdict(tmp_path: Path) -> None:
    first = block("loadgen-walkthrough").strip().splitlines()
    stop = first.pop()  # kill %1: after the second walkthrough, as the page says
    script = "\n".join([*first, block("loadgen-processes-walkthrough"), stop, "wait %1"])
    with own_redis(tmp_path) as server:
        script = script.replace(PAGE_REDIS, f"redis://127.0.0.1:{server.port}/0")
        base = _two_free_ports()  # serve puts node i on --port + i
        script = script.replace("8700", str(base)).replace("8701", str(base + 1))
        bin_dir = str(Path(sys.executable).parent)  # where pip put notes-cluster
        env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
        proc = subprocess.Popen(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=WALKTHROUGH_TIMEOUT_S)
        finally:
            # Only when the script failed half-way: what it left in the background (serve)
            # holds the output pipes open.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=GIVE_UP_S)
    assert proc.returncode == 0, out[-4000:] + err[-4000:]  # wait %1: serve's exit code
    verdicts = [line.split()[1] for line in out.splitlines() if line.startswith("Verdict:")]
    # The first load, checked: VALID. The two --process-id loads, unchecked on their own (no
    # --redis): UNKNOWN. Their check together: VALID.
    assert verdicts == ["VALID", "UNKNOWN", "UNKNOWN", "VALID"], out[-4000:]
    assert "stopped by SIGTERM" in err  # serve, stopped by the walkthrough's kill %1
    assert not running(proc.pid)
