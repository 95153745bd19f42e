"""The load at scale: UNKNOWN when under-exercised, run folders that re-check offline (and catch
a planted violation), ``simulate --workers`` with one merged verdict, and the 30k-flow steady
state on the real Redis.

Each test plants its cause: a weight that starves a kind, a transport that refuses round 1 (a
test wrapper, not a production flag), an edited history line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from cluster.cli import EXIT_INVALID, EXIT_USAGE, EXIT_VALID, main
from cluster.targets.simulate import SimulateOptions, simulate
from loadgen.check.exercise import ExerciseRule, exercise_verdict
from loadgen.check.merge import merge_results
from loadgen.check.partition import (
    POOL_MIN_BYTES,
    UNROUTED,
    _map,
    default_jobs,
    own_peak_mb,
    split_by_tenant,
)
from loadgen.check.verdict import CheckResult, Verdict
from loadgen.fault_windows import LISTED_MAX, summarize
from loadgen.pictures import render_html, tally_timeline
from loadgen.report import faults_table
from loadgen.run.results import Results
from loadgen.runner import RunSettings
from loadgen.tally import Tally
from loadgen.transport import Reply, Transport
from loadgen.workload import DEFAULT_WEIGHTS, RACE_KINDS
from tests.conftest import TEST_REDIS_ENV, USER_REDIS_URL, require_real_redis, suite_redis_url

ACCEPTANCE_CONCURRENCY = 64
"""Flows at once per worker in the 30k acceptance run (two workers)."""


def _verdict(results: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in results["invariants"] if v["name"] == name)


def test_exercise_rule_scales_for_tiny_runs() -> None:
    rule = ExerciseRule(0.95, 3)
    assert rule.needed_per_kind(10, 1 / 16) == 0
    assert rule.needed_per_kind(64, 1 / 16) == 2
    assert rule.needed_per_kind(30_000, 1 / 16) == 3
    assert rule.needed_per_kind(160, 0.5 / 20) == 2
    tally = Tally()
    for kind in RACE_KINDS:
        for _ in range(3):
            tally.add_flow(kind, "completed", 0.5)
    assert exercise_verdict(tally, [list(RACE_KINDS)], rule).status == "valid"
    done = 3 * len(RACE_KINDS)
    short = done // 19 + 1  # just enough setups stopped to fall under 95% completed
    for _ in range(short):
        tally.add_flow("plain", "create_unknown", 0.5)
    v = exercise_verdict(tally, [list(RACE_KINDS)], rule)
    assert v.status == "unknown"
    assert f"{done} of {done + short} flows" in v.summary


async def test_a_starved_kind_makes_the_run_unknown() -> None:
    weights = dict(DEFAULT_WEIGHTS) | {"tampered": 0.0}
    settings = RunSettings(flows=200, concurrency=16, seed=11, weights=weights)
    sim = await simulate(SimulateOptions(settings=settings))
    results = sim.to_json()
    assert results["verdict"] == "unknown"
    exercised = _verdict(results, "exercised")
    assert exercised["status"] == "unknown"
    assert "tampered 0" in exercised["summary"]
    others = [v for v in results["invariants"] if v["name"] != "exercised"]
    assert all(v["status"] == "valid" for v in others), others
    assert "tampered" not in results["kinds"]


class RefuseRoundOne:
    """A transport whose nodes answer every round 1 of ``notes_delete`` with a tool error."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.refused = 0

    @property
    def node_count(self) -> int:
        """As the wrapped transport."""
        return self.inner.node_count

    async def send(self, node_index: int, principal: str, message: dict[str, Any]) -> Reply:
        """Refuse round 1 of notes_delete; pass everything else through."""
        params = message.get("params") or {}
        if params.get("name") == "notes_delete" and "requestState" not in params:
            self.refused += 1
            result = {"isError": True, "content": [{"type": "text", "text": "refused (test)"}]}
            return Reply(200, {"jsonrpc": "2.0", "id": message["id"], "result": result})
        return await self.inner.send(node_index, principal, message)


async def test_a_store_that_refuses_round_one_makes_the_run_unknown() -> None:
    hooks: list[RefuseRoundOne] = []

    def hook(inner: Transport) -> Transport:
        hooks.append(RefuseRoundOne(inner))
        return hooks[-1]

    settings = RunSettings(flows=60, concurrency=8, seed=12)
    sim = await simulate(SimulateOptions(settings=settings), transport_hook=hook)
    results = sim.to_json()
    assert hooks
    assert hooks[0].refused > 0
    assert results["verdict"] == "unknown"
    assert results["flows"]["total"] == 60
    assert results["flows"]["completed"] < 10  # only the archive flows pass round 1
    exercised = _verdict(results, "exercised")
    assert "got past round 1" in exercised["summary"]
    assert results["kinds"]["plain"]["outcomes"].get("ask_refused", 0) > 0


def _plant_told_executed(history: Path) -> int:
    """Relabel one accept that was told it deleted (not a replay) as ``no_mutation``: a refused
    answer that mutated. Returns the invoke's index."""
    lines = history.read_text(encoding="utf-8").splitlines()
    ops = [json.loads(line) for line in lines]
    invokes: dict[tuple[int, int, str], int] = {}
    for i, op in enumerate(ops):
        key = (op["process"], op["flow"], op["f"])
        if op["type"] == "invoke":
            invokes[key] = i
            continue
        v = op["value"]
        told = v.get("deleted") is True and v.get("replay") is False
        if op["f"] == "confirm" and op["kind"] == "plain" and told and key in invokes:
            j = invokes[key]
            ops[j]["value"]["expect"] = "no_mutation"
            lines[j] = json.dumps(ops[j])
            history.write_text("\n".join(lines) + "\n", encoding="utf-8")
            return int(ops[j]["index"])
    raise AssertionError("no plain accept told deleted in the history")


@pytest.mark.planted(control="test_run_folder_rechecks_offline_and_catches_a_planted_violation")
def test_run_folder_rechecks_offline_and_catches_a_planted_violation(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["simulate", "--flows", "120", "--concurrency", "8", "--seed", "13", "--out", str(run)]
    first = CliRunner().invoke(main, [*args, "--json"])
    assert first.exit_code == EXIT_VALID, first.output
    assert (run / "store" / "meta.json").exists()
    again = CliRunner().invoke(main, ["check", str(run), "--json"])
    assert again.exit_code == EXIT_VALID, again.output
    results = json.loads(again.stdout)
    saved = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert results["verdict"] == saved["verdict"] == "valid"
    assert results["flows"] == saved["flows"]
    index = _plant_told_executed(run / "history.jsonl")
    planted = CliRunner().invoke(main, ["check", str(run), "--json"])
    assert planted.exit_code == EXIT_INVALID, planted.output
    bad = _verdict(json.loads(planted.stdout), "no_mutation_from_refused")
    assert bad["status"] == "invalid"
    assert index in bad["ops"]


def test_check_without_store_facts_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "history.jsonl").write_text("", encoding="utf-8")
    out = CliRunner().invoke(main, ["check", str(tmp_path)])
    assert out.exit_code == EXIT_USAGE
    assert "no store facts" in out.output


def test_workers_need_a_real_redis() -> None:
    out = CliRunner().invoke(main, ["simulate", "--workers", "2", "--flows", "10"])
    assert out.exit_code == EXIT_USAGE
    assert "--workers needs a real Redis" in out.output


@pytest.mark.slow
@pytest.mark.parametrize("where", ["own", "shared"])
@pytest.mark.planted(control="test_two_workers_merge_into_one_verdict")
def test_two_workers_merge_into_one_verdict(tmp_path: Path, where: str) -> None:
    """On the suite's own ``redis-server`` always (whatever ``NOTES_CLUSTER_TEST_REDIS`` says),
    and in prefix mode on the user's Redis when one is given."""
    if where == "shared" and USER_REDIS_URL is None:
        pytest.skip(f"{TEST_REDIS_ENV} is not set: the run on the suite's own server covers it")
    url = suite_redis_url() if where == "own" else require_real_redis()
    run = tmp_path / "run"
    args = ["simulate", "--redis", url, "--workers", "2", "--flows", "200", "--seed", "14"]
    out = CliRunner().invoke(main, [*args, "--concurrency", "8", "--out", str(run), "--json"])
    assert out.exit_code == EXIT_VALID, out.output
    results = json.loads(out.stdout)
    assert results["flows"]["total"] == 200
    assert results["settings"]["workers"] == 2
    for k in (0, 1):
        assert (run / f"worker-{k}" / "history.jsonl").stat().st_size > 0
    again = CliRunner().invoke(main, ["check", str(run), "--json", "--jobs", "1"])
    assert again.exit_code == EXIT_VALID, again.output
    alone = json.loads(again.stdout)
    assert len(alone["histories"]) == 2
    assert alone["check"]["jobs"] == 1
    assert alone["check"]["child_peak_rss_mb"] == 0  # no pool
    # Two pool processes (the split of each history, then the tenants side by side): the
    # same verdicts, evidence, counts and model tables as one process.
    pooled = json.loads(
        CliRunner().invoke(main, ["check", str(run), "--json", "--jobs", "2"]).stdout
    )
    assert pooled["check"]["jobs"] == 2
    assert pooled["check"]["child_peak_rss_mb"] > 0
    for field in ("verdict", "invariants", "counts", "model", "kinds", "flows"):
        assert pooled[field] == alone[field], field
    index = _plant_told_executed(run / "worker-1" / "history.jsonl")
    for jobs in ("1", "2"):
        planted = CliRunner().invoke(main, ["check", str(run), "--json", "--jobs", jobs])
        assert planted.exit_code == EXIT_INVALID, planted.output
        assert index in _verdict(json.loads(planted.stdout), "no_mutation_from_refused")["ops"]


@pytest.mark.slow
def test_thirty_thousand_flows_stay_exercised(tmp_path: Path) -> None:
    url = require_real_redis()
    run = tmp_path / "run"
    args = ["simulate", "--redis", url, "--workers", "2", "--flows", "30000", "--seed", "15"]
    args += ["--concurrency", str(ACCEPTANCE_CONCURRENCY), "--duration", "900"]
    out = CliRunner().invoke(main, [*args, "--out", str(run), "--json"])
    results = json.loads(out.stdout)
    print("flows/s by tenth:", results["flows_per_s_by_tenth"], "seed 15")
    assert out.exit_code == EXIT_VALID, results["invariants"]
    assert results["flows"]["total"] == 30_000
    assert results["flows"]["completed"] >= 0.99 * 30_000
    for kind in RACE_KINDS:
        assert results["kinds"][kind]["completed"] >= 3, kind


def _pid(_: int) -> int:
    return os.getpid()


def test_a_check_with_jobs_runs_its_partitions_in_other_processes_in_order() -> None:
    here = os.getpid()
    assert _map(_pid, [0, 1], 1) == ([here, here], 0.0)
    pids, peak = _map(_pid, [0, 1, 2, 3, 4, 5], 2)
    assert len(pids) == 6
    assert here not in pids
    assert len(set(pids)) <= 2
    assert peak > 0
    assert _map(str, [3, 1, 2], 2)[0] == ["3", "1", "2"]


def _hold(mb: int) -> int:
    block = b"x" * (mb << 20)  # written, so resident
    return len(block)


PARENT_MB = 1536
"""The parent's size when the pool starts (a big load process)."""
HELD_MB = 600
"""What one pool task writes, so that its own growth shows."""


def test_a_pool_process_reports_its_own_peak_not_the_parent_s_at_the_fork() -> None:
    """``ru_maxrss`` would give every pool process the parent's size at the fork. The bounds
    are halves and wholes of sizes chosen far apart, not a fresh interpreter's weight (which
    grows with every installed package), so no machine or install can move a result across
    them: an idle process well under half the parent, a busy one at least what it wrote and
    under the parent."""
    parent_block = b"y" * (PARENT_MB << 20)  # written, so resident
    assert own_peak_mb() >= PARENT_MB
    _, idle_peak = _map(_pid, [0, 1], 2)
    _, busy_peak = _map(_hold, [HELD_MB, 1], 2)
    del parent_block
    assert 0 < idle_peak < PARENT_MB / 2
    assert HELD_MB <= busy_peak < PARENT_MB


def test_small_runs_are_checked_in_one_process_big_ones_on_every_cpu(tmp_path: Path) -> None:
    small = tmp_path / "history.jsonl"
    small.write_text("{}\n", encoding="utf-8")
    assert default_jobs([small]) == 1
    with small.open("r+b") as fh:
        fh.truncate(POOL_MIN_BYTES)
    assert default_jobs([small]) == len(os.sched_getaffinity(0))


def test_split_by_tenant_routes_answers_to_their_invokes(tmp_path: Path) -> None:
    def line(i: int, process: int, type_: str, tenant: str | None = None) -> str:
        value = {"tenant": tenant} if tenant else {"noteId": f"n{i}"}
        op = {"index": i, "time_ms": i, "process": process, "type": type_, "f": "create"}
        return json.dumps(op | {"flow": process, "kind": "plain", "value": value})

    history = tmp_path / "history.jsonl"
    rows = [line(0, 1, "invoke", "load0"), line(1, 2, "invoke", "load1"), line(2, 2, "ok")]
    rows += [line(3, 1, "ok"), line(4, 9, "ok")]
    history.write_text("\n".join(rows) + "\n", encoding="utf-8")
    parts = split_by_tenant(history, tmp_path)
    got = {
        t: [json.loads(x)["index"] for x in p.read_text().splitlines()] for t, p in parts.items()
    }
    assert got == {"load0": [0, 3], "load1": [1, 2], UNROUTED: [4]}


@pytest.mark.planted(control="test_merged_verdicts_keep_the_worst_and_sum_valid_counts")
def test_merged_verdicts_keep_the_worst_and_sum_valid_counts() -> None:
    a = CheckResult((Verdict("x", "valid", "All 3 deletes hit distinct notes."),), {"ops": 3})
    b = CheckResult((Verdict("x", "valid", "All 4 deletes hit distinct notes."),), {"ops": 4})
    c = CheckResult((Verdict("x", "invalid", "1 violation, first: twice.", (7,)),), {"ops": 1})
    ok = merge_results([a, b])
    assert ok.status == "valid"  # the control: the same merge without the invalid partition
    assert ok.verdicts[0].summary == "All 7 deletes hit distinct notes."
    assert ok.counts == {"ops": 7}
    bad = merge_results([a, c, b])
    assert bad.status == "invalid"
    assert bad.verdicts[0].ops == (7,)
    assert "In 1 of 3 partitions" in bad.verdicts[0].summary


def test_tally_timeline_counts_completed_flows_per_slice() -> None:
    tally = Tally()
    for end in (0.1, 0.5, 1.2, 3.9):
        tally.add_flow("plain", "completed", end)
    tally.add_flow("plain", "ask_unknown", 2.0)
    assert [b.flows for b in tally_timeline(tally, 1.0)] == [2, 1, 0, 1]
    assert [b.flows for b in tally_timeline(tally, 2.0)] == [3, 1]


def test_tenth_rates_leave_out_the_drain() -> None:
    tally = Tally(elapsed_s=25.0, loaded_s=20.0)
    for second in range(20):
        for _ in range(10):
            tally.add_flow("plain", "completed", second + 0.5)
    tally.add_flow("plain", "completed", 23.0)  # the drain after the last start
    assert tally.tenth_rates() == {"first_tenth": 10.0, "last_tenth": 10.0}


def test_the_report_page_shows_each_kind_and_each_fault_window() -> None:
    results = {
        "verdict": "unknown",
        "invariants": [],
        "kinds": {"plain": {"started": 3, "completed": 2, "outcomes": {"ask_unknown": 1}}},
        "faults": [
            {"kind": "redis", "action": "kill", "start_s": 1.0, "end_s": 2.0, "availability": 0.75},
            {
                "kind": "nodes",
                "action": "restart",
                "start_s": 3.0,
                "end_s": 4.0,
                "availability": None,
            },
        ],
    }
    page = render_html(_as_results(results), b"png")
    assert '<th>plain</th><td class="n">3 / 2 (ask_unknown 1)</td>' in page
    assert 'redis kill 1.0–2.0 s</th><td class="n">75%</td>' in page
    assert 'nodes restart 3.0–4.0 s</th><td class="n">-</td>' in page


def _windows(n: int) -> list[dict[str, Any]]:
    """``n`` fault windows alternating redis latency (answered 20 %, 60 %, ...) and node
    restarts (no answer seen), one second each."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        redis_ = i % 2 == 0
        out.append(
            {
                "kind": "redis" if redis_ else "nodes",
                "action": "latency" if redis_ else "restart",
                "start_s": float(i),
                "end_s": i + 1.0,
                "detail": f"window {i}",
                "availability": (0.2 if i % 4 == 0 else 0.6) if redis_ else None,
            }
        )
    return out


def test_a_long_runs_fault_windows_are_summed_per_kind_and_action() -> None:
    assert summarize(_windows(8)) == [
        {
            "kind": "redis",
            "action": "latency",
            "count": 4,
            "seconds": 4.0,
            "answered_median": 0.4,
            "answered_min": 0.2,
        },
        {
            "kind": "nodes",
            "action": "restart",
            "count": 4,
            "seconds": 4.0,
            "answered_median": None,
            "answered_min": None,
        },
    ]
    console = Console(width=120, record=True)
    console.print(faults_table(_windows(LISTED_MAX)))
    few = console.export_text()
    assert "window 23" in few, "up to LISTED_MAX windows are listed one by one"
    console.print(faults_table(_windows(LISTED_MAX + 4)))
    many = console.export_text()
    assert "window 27" not in many
    assert f"Faults injected ({LISTED_MAX + 4} windows, by kind" in many
    assert "40% / 20%" in many
    page = render_html(
        _as_results({"verdict": "valid", "faults": _windows(LISTED_MAX + 4)}), b"png"
    )
    assert "14 windows, 14 s; answered 40% median, 20% worst" in page
    assert "window 27" not in page


def _as_results(partial: dict[str, Any]) -> Results:
    """A run's results holding ``partial``, the rest empty."""
    empty = {"invariants": [], "counts": {}, "flows": {"total": 0, "completed": 0}}
    return Results.from_json(empty | partial)
