"""Swarms of deterministic seeds on an executor: a local process pool, and Dask.

Layer: tests. Eight seeds with a bug planted under the nodes (``DuplicateExecutesAgain``: a
duplicate of an executed answer executes again; ``fleet.SeedJob.planted`` imports it in each
job's process) run on a ``dask.distributed.LocalCluster`` the test starts (two worker
processes, loopback): the failing seeds are reported, each is shrunk to at most five flows, and
each printed replay command gives INVALID again. The same swarm on the local pool finds the
same failing seeds with the same history bytes. The control: the same swarm unplanted on the
local pool, every seed VALID and no folder left behind.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from cluster.cli import main
from cluster.deterministic import fleet
from cluster.deterministic.fleet import SeedOutcome, dask_executor, local_executor
from cluster.deterministic.run import planted_store
from cluster.deterministic.search import SwarmPlan, SwarmReport, chosen_to_shrink, run_swarm
from cluster.exit_codes import EXIT_INVALID, EXIT_USAGE, EXIT_VALID
from cluster.targets.simulate import SimulateOptions
from loadgen.runner import RunSettings
from loadgen.workload import tenants_for
from tests.cli_process import run
from tests.test_shrink import DuplicateExecutesAgain

ROOT = Path(__file__).resolve().parent.parent
PLANT = "tests.test_shrink:DuplicateExecutesAgain"
SEEDS = 8
FLOWS = 60


def _plan(planted: str | None, *, shrink: bool) -> SwarmPlan:
    options = SimulateOptions(
        settings=RunSettings(flows=FLOWS, seed=7, tenants=tenants_for(FLOWS)),
        faults=frozenset({"client", "nodes"}),
    )
    return SwarmPlan(
        options,
        buggify=True,
        swarmed=False,
        seeds=SEEDS,
        in_flight=3,
        shrink=shrink,
        shrink_budget_s=600,
        shrink_budget_runs=80,
        planted=planted,
    )


@pytest.fixture
def workers_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the workers' processes inherit: the hash seed, and this checkout on their path
    (the planted store is a test's)."""
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def _local(plan: SwarmPlan, out: Path, said: list[str]) -> SwarmReport:
    out.mkdir()
    executor = local_executor(2)
    try:
        return run_swarm(plan, executor, out, said.append)
    finally:
        executor.shutdown()


@pytest.mark.usefixtures("workers_env")
@pytest.mark.planted(
    control="test_control_the_same_swarm_unplanted_is_valid_and_leaves_no_seed_folder"
)
def test_a_planted_bug_swarmed_on_dask_is_found_shrunk_and_replayed_as_on_the_local_pool(
    tmp_path: Path,
) -> None:
    from distributed import LocalCluster

    said: list[str] = []
    out = tmp_path / "dask"
    out.mkdir()
    with LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        executor, close = dask_executor(cluster.scheduler_address)
        try:
            report = run_swarm(_plan(PLANT, shrink=True), executor, out, said.append)
        finally:
            close()
    print("\n".join(said))
    assert report.failing, "the planted bug failed no seed"
    assert report.verdict == "invalid"
    assert {o.where.rsplit(":", 1)[0] for o in report.outcomes}  # every seed says where it ran
    assert sorted(s.seed for s, _, _ in report.shrunk) == report.failing
    replays = [line.split("replay: ", 1)[1] for line in said if "replay: " in line]
    assert len(replays) == len(report.failing)
    for shrunk, folder, replay in report.shrunk:
        assert shrunk.reproduced
        assert 1 <= shrunk.flows <= 5, shrunk.summary
        assert replay in replays
        assert (folder / "replay.sh").read_text(encoding="utf-8").count(replay) == 1
    assert (out / "failures.md").exists()

    for replay in replays:
        argv = shlex.split(replay)[1:]
        again = tmp_path / f"again-{re.sub(r'[^0-9]', '', argv[-1])}"
        with planted_store(DuplicateExecutesAgain):
            result = CliRunner().invoke(main, [*argv, "--out", str(again)])
        assert result.exit_code == EXIT_INVALID, result.output
        assert "same history bytes" in result.output

    local = _local(_plan(PLANT, shrink=False), tmp_path / "local", [])
    assert local.failing == report.failing
    assert [o.history_sha256 for o in local.outcomes] == [o.history_sha256 for o in report.outcomes]


@pytest.mark.usefixtures("workers_env")
def test_control_the_same_swarm_unplanted_is_valid_and_leaves_no_seed_folder(
    tmp_path: Path,
) -> None:
    said: list[str] = []
    report = _local(_plan(None, shrink=True), tmp_path / "local", said)
    assert report.verdict == "valid", "\n".join(said)
    assert not report.failing
    assert not list((tmp_path / "local").glob("seed-*"))
    assert (tmp_path / "local" / "seeds.json").exists()
    assert any(re.search(r"seeds \(\d+\.\d+/s\), \d+ flows \(\d+\.\d/s\)", s) for s in said)


def _outcome(seed: int, cpu_s: float, invalid: tuple[str, ...]) -> SeedOutcome:
    verdict = "invalid" if invalid else "valid"
    folder = b"packed" if invalid else None
    return SeedOutcome(seed, verdict, invalid, f"sha{seed}", 10, cpu_s, cpu_s, {}, folder)


def test_a_search_shrinks_the_fastest_failing_seeds_of_each_invariant() -> None:
    report = SwarmReport(
        outcomes=[
            _outcome(1, 3.0, ("a",)),
            _outcome(2, 1.0, ("a",)),
            _outcome(3, 2.0, ("a", "b")),
            _outcome(4, 0.5, ()),
            _outcome(5, 9.0, ("b",)),
        ]
    )
    search = replace(_plan(None, shrink=True), for_s=60.0, shrink_each=2)
    assert [(o.seed, inv) for o, inv in chosen_to_shrink(search, report)] == [
        (2, "a"),
        (3, "a"),
        (5, "b"),
    ]
    every = _plan(None, shrink=True)
    assert [o.seed for o, _ in chosen_to_shrink(every, report)] == [1, 2, 3, 5]


def test_a_search_for_a_duration_keeps_drawing_seeds_and_says_its_rates(tmp_path: Path) -> None:
    out = tmp_path / "search"
    args = ["simulate", "--deterministic", "--seed", "1", "--for", "2s", "--flows", "10"]
    code, _, err = run([*args, "--out", str(out)], tmp_path)
    assert code == EXIT_VALID, err
    summary = json.loads((out / "seeds.json").read_text(encoding="utf-8"))
    assert summary["seeds"] >= 1
    assert [r["seed"] for r in summary["runs"]] == list(range(1, summary["seeds"] + 1))
    assert re.search(r"swarm: \d+ seeds \(\d+\.\d+/s\), \d+ flows \(\d+\.\d/s\), 0 failing", err)
    assert "merged verdict: VALID" in err


def test_for_takes_a_duration_and_refuses_anything_else(tmp_path: Path) -> None:
    for bad in ("soon", "-5m", "0"):
        args = ["simulate", "--deterministic", "--seed", "1", "--for", bad, "--flows", "10"]
        code, _, err = run([*args, "--out", str(tmp_path / "x")], tmp_path)
        assert code == EXIT_USAGE, err
        assert "--for" in err


@pytest.mark.usefixtures("workers_env")
def test_the_bench_runs_one_swarm_on_one_worker_then_two_and_projects_the_cores() -> None:
    from cluster.bench.report import _swarm
    from cluster.deterministic.bench import swarm_scaling

    said: list[str] = []
    out = swarm_scaling(2, 10, 1, said.append)
    assert out["workers_1"]["flows"] == out["workers_2"]["flows"] == 20
    assert out["workers_1"]["verdict"] == out["workers_2"]["verdict"]
    assert out["workers_1"]["verdict"] in ("valid", "unknown")  # an unplanted swarm
    assert out["scaling_1_to_2"] > 0
    assert set(out["paper"]) == {"2", "16", "128"}
    assert out["paper"]["128"]["flows_per_s"] > out["paper"]["16"]["flows_per_s"] > 0
    assert "on 2 (x " in said[0]
    assert any("| 128 |" in line.replace("  ", " ") for line in _swarm(out))


def test_a_local_pool_replaces_each_process_after_its_share_of_seeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker process grows with every seed it runs: after ``JOBS_PER_PROCESS`` it is
    replaced, so a long swarm's memory stays bounded."""
    monkeypatch.setattr(fleet, "JOBS_PER_PROCESS", 2)
    executor = local_executor(1)
    try:
        pids = [executor.submit(os.getpid).result() for _ in range(5)]
    finally:
        executor.shutdown()
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]


def test_the_kept_child_of_a_dask_worker_is_replaced_after_its_share_of_seeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fleet, "JOBS_PER_PROCESS", 2)
    monkeypatch.setattr(fleet, "_child", None)
    try:
        where = [fleet.in_child("_where_job", None) for _ in range(5)]
    finally:
        if fleet._child is not None:
            fleet._stop_child(fleet._child)
            monkeypatch.setattr(fleet, "_child", None)
    assert where[0] == where[1] != where[2] == where[3] != where[4]
