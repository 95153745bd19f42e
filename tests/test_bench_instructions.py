"""``python -m cluster.lab.instructions``: instructions per delete flow, counted.

The runs here are short (20 measured flows per side) and check the output's shape, that every
flow passed, and that the count is deterministic: two copies of one tree agree within 1%. Never
how long anything took. They need ``valgrind`` and ``redis-server``: skipped without them,
failed under CI. The ``--redis`` run uses a server of the test's own, with a bystander's key in
another database that must survive it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from cluster.bench.database import BENCH_PREFIX
from cluster.lab import instructions
from cluster.lab.instructions_child import FlowFailed, check, flow_for
from tests.ci import fail_in_ci_else_skip
from tests.own_redis import own_redis, require_redis_server

TREE = Path(__file__).resolve().parents[1]
"""This checkout: both sides of the A/B run it."""

FLOWS = 20
RUN_TIMEOUT_S = 300.0
"""Bound of one tool run in these tests (about 25 s for two sides on an idle machine)."""

LINE = re.compile(
    r"^(?P<name>\S+) +(?P<per_flow>[\d,]+) instructions/flow  (?P<flows>\d+) flows, "
    r"(?P<failed>\d+) failed  ÷ (?P<base>\S+): (?P<ratio>\d+\.\d{4})$"
)


def require_valgrind() -> None:
    """Skip (fail under CI) when valgrind's programs are not installed."""
    missing = instructions.missing_tools()
    if missing:
        fail_in_ci_else_skip(" and ".join(missing))


def run_tool(*args: str, cwd: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    """The tool as a user runs it, with this checkout as its code."""
    env = {**os.environ, "PYTHONPATH": str(TREE)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "cluster.lab.instructions", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def side_lines(stdout: str) -> dict[str, re.Match[str]]:
    """The report's lines by side name (each must match ``LINE``)."""
    lines = stdout.strip().splitlines()
    matches = [LINE.match(line) for line in lines]
    assert all(matches), stdout
    return {m["name"]: m for m in matches if m is not None}


@pytest.mark.slow
def test_two_copies_of_one_tree_count_the_same_instructions_within_one_percent(
    tmp_path: Path,
) -> None:
    require_valgrind()
    require_redis_server()
    done = run_tool("--flows", str(FLOWS), f"a={TREE}", f"b={TREE}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    sides = side_lines(done.stdout)
    assert list(sides) == ["a", "b"]
    for m in sides.values():
        assert int(m["per_flow"].replace(",", "")) > 0
        assert (int(m["flows"]), int(m["failed"]), m["base"]) == (FLOWS, 0, "a")
    assert sides["a"]["ratio"] == "1.0000"
    assert abs(float(sides["b"]["ratio"]) - 1) < 0.01, done.stdout


@pytest.mark.slow
def test_on_a_given_redis_it_deletes_only_its_own_keys_and_never_flushes(tmp_path: Path) -> None:
    require_valgrind()
    with own_redis(tmp_path) as server:
        bystander = redis.Redis(port=server.port, db=1)
        bystander.set("bystander", "kept")
        url = f"redis://127.0.0.1:{server.port}/0"
        done = run_tool("--redis", url, "--flows", "3", "--asgi-only", f"a={TREE}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert list(side_lines(done.stdout)) == ["a"]
        assert bystander.get("bystander") == b"kept"
        assert redis.Redis(port=server.port, db=0).dbsize() == 0
        commands = redis.Redis(port=server.port).info("commandstats")
        assert "cmdstat_flushdb" not in commands
        assert "cmdstat_flushall" not in commands
        bystander.close()


@pytest.mark.slow
def test_the_store_alone_counts_a_part_of_what_the_app_counts(tmp_path: Path) -> None:
    """``--store-only`` runs no node: the store's find and confirm of each flow, a subset of the
    work ``--asgi-only`` counts (the app calls the same two)."""
    require_valgrind()
    with own_redis(tmp_path) as server:
        per_flow = {}
        for layer in ("--asgi-only", "--store-only"):
            done = run_tool("--redis", server.url, "--flows", "5", layer, f"a={TREE}", cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            side = side_lines(done.stdout)["a"]
            assert (int(side["flows"]), int(side["failed"])) == (5, 0)
            per_flow[layer] = int(side["per_flow"].replace(",", ""))
        assert 0 < per_flow["--store-only"] < per_flow["--asgi-only"] / 2, per_flow
        assert redis.Redis(port=server.port).dbsize() == 0


def test_a_given_redis_holding_foreign_keys_is_refused_untouched(tmp_path: Path) -> None:
    require_valgrind()
    with own_redis(tmp_path) as server:
        user = redis.Redis(port=server.port)
        user.set("theirs", "1")
        done = run_tool("--redis", server.url, f"a={TREE}", cwd=tmp_path)
        assert done.returncode == 2
        assert "'theirs'" in done.stderr
        assert "Traceback" not in done.stderr
        assert user.keys() == [b"theirs"]
        assert not user.keys(f"{BENCH_PREFIX}*")
        user.close()


def test_without_valgrind_it_says_so_and_exits_2(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    done = run_tool(f"a={TREE}", cwd=tmp_path, path=str(empty))
    assert done.returncode == 2
    assert "valgrind and callgrind_control not found" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "the following arguments are required"),
        (["nameless"], "expected NAME=PYTHONPATH"),
        (["a=/nonexistent/tree"], "no nodes/serving/app.py there"),
        ([f"a={TREE}", f"a={TREE}"], "side names must differ"),
        (["--flows", "0", f"a={TREE}"], "--flows must be at least 1"),
        (["--flows", "many", f"a={TREE}"], "invalid int value"),
        (["--asgi-only", "--store-only", f"a={TREE}"], "not allowed with argument"),
    ],
)
def test_bad_arguments_are_refused_with_exit_2(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        instructions.main(args)
    assert exit_info.value.code == 2
    assert says in capsys.readouterr().err


def test_a_wrong_answer_fails_the_flow_loudly() -> None:
    flow = flow_for(["token", "file:///load/t0/inbox", "bench instr 0", "n00"], 0)
    offered = (
        b'{"jsonrpc":"2.0","id":0,"result":{"resultType":"input_required",'
        b'"inputRequests":{"confirm_delete":{"noteId":"n00"}},"requestState":"s"}}'
    )
    deleted = b'{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"deleted":true}}}'
    check(flow, ((200, offered), (200, deleted)))
    kept = deleted.replace(b"true", b"false")
    with pytest.raises(FlowFailed, match="round 2: not deleted"):
        check(flow, ((200, offered), (200, kept)))
    with pytest.raises(FlowFailed, match="round 1: note n00 not offered"):
        check(flow, ((200, offered.replace(b"n00", b"n01")), (200, deleted)))
    with pytest.raises(FlowFailed, match="round 1: HTTP 401"):
        check(flow, ((401, b"{}"), (200, deleted)))


def test_the_child_runs_as_a_file_with_no_module_of_the_bench_needed() -> None:
    source = Path(instructions.CHILD).read_text(encoding="utf-8")
    assert "cluster." not in "".join(
        line for line in source.splitlines() if line.startswith(("import ", "from "))
    )
