"""The store nemeses: ``lost-reply`` (Redis runs a command, its reply is lost) and ``stall``
(scripts held past the nodes' Redis timeout), on the embedded store (the store seam) and on a
real Redis (a reply-dropping proxy, ``CLIENT PAUSE ... WRITE``). A run under them stays VALID on
the fixed store, its fault windows recorded like every other kind's, and the faults did bite:
replies were lost, calls timed out, clients saw unknown outcomes that the checker held to the
windows.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from cluster.cli import main
from tests.own_redis import own_redis

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def private_redis() -> Iterator[str]:
    """A redis-server of this module's own on a free loopback port, stopped by pid."""
    with own_redis(None) as server:
        yield server.url


SETTINGS = ("--seed", "7", "--state-ttl", "2", "--duration", "25")


def _simulate(args: list[str], run_dir: Path) -> dict[str, Any]:
    out = CliRunner().invoke(
        main,
        ["simulate", *args, *SETTINGS, "--out", str(run_dir)],
    )
    results: dict[str, Any] = json.loads((run_dir / "results.json").read_text("utf-8"))
    bad = [v for v in results["invariants"] if v["status"] != "valid"]
    assert out.exit_code == 0, (bad, out.output[-3000:])
    return results


def _bitten(results: dict[str, Any], run_dir: Path, lost_word: str) -> None:
    """Valid, with both kinds' windows recorded, replies really lost, calls really cut off,
    and every unknown outcome explained by a window."""
    assert results["verdict"] == "valid"
    statuses = {v["name"]: v["status"] for v in results["invariants"]}
    assert statuses["unknown_outcomes_explained"] == "valid"
    explained = next(v for v in results["invariants"] if v["name"] == "unknown_outcomes_explained")
    assert not explained["summary"].startswith("Not checked")
    faults = results["faults"]
    assert {f["kind"] for f in faults} == {"lost-reply", "stall"}
    lost = sum(
        int(re.findall(r"(\d+) lost", f["detail"])[0]) for f in faults if f["kind"] == "lost-reply"
    )
    assert lost > 0, [f["detail"] for f in faults]
    assert all(lost_word in f["detail"] for f in faults if f["kind"] == "lost-reply")
    history = [json.loads(line) for line in (run_dir / "history.jsonl").open()]
    reasons = Counter(op["value"].get("reason") for op in history if op["type"] == "info")
    assert reasons["outcome unknown"] > 0, reasons  # a node answered -32603: a real unknown
    counts = results["counts"]
    assert counts["info_unknown"] == 0


def test_lost_replies_and_stalls_at_the_store_seam_leave_the_run_valid(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    results = _simulate(["--faults", "lost-reply,stall", "--flows", "150"], run_dir)
    _bitten(results, run_dir, "at the store seam")
    stalls = [f["detail"] for f in results["faults"] if f["kind"] == "stall"]
    assert any(int(re.findall(r"(\d+) calls timed out", d)[0]) > 0 for d in stalls), stalls


def test_a_reply_dropping_proxy_and_client_pause_on_real_redis_leave_the_run_valid(
    tmp_path: Path, private_redis: str
) -> None:
    run_dir = tmp_path / "run"
    args = ["--faults", "lost-reply,stall", "--flows", "150", "--redis", private_redis]
    results = _simulate(args, run_dir)
    _bitten(results, run_dir, "by the proxy")
    assert {f["action"] for f in results["faults"] if f["kind"] == "stall"} == {"pause_write"}
    assert not redis.Redis.from_url(private_redis).keys("ncsim*"), "the run's keys are dropped"
