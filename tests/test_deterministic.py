"""Deterministic simulation: a seed replays bit for bit; a divergence is named.

Layer: tests. The CLI runs as processes of their own (``tests.cli_process``), as a user runs
them: each re-executes itself with a fixed hash seed. ``--check-determinism`` is exercised on a
planted source of nondeterminism (state that leaks from one run into the next through the
load's transport, the test-only seam ``SimulateOptions.transport_hook``) and on its control.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import trio

from cluster.deterministic.divergence import check_determinism
from cluster.deterministic.run import comparable, run_deterministic
from cluster.deterministic.world import EPOCH_S
from cluster.exit_codes import EXIT_USAGE, EXIT_VALID
from cluster.targets.simulate import SimulateOptions
from loadgen.runner import RunSettings
from loadgen.transport import Reply, Transport
from loadgen.workload import tenants_for
from tests.cli_process import run

FLOWS = 60
"""Small runs: every race kind still runs (the kind plan cycles them), in a few seconds."""


def _simulate(tmp_path: Path, name: str, seed: int, *extra: str) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / name
    args = ["simulate", "--deterministic", "--seed", str(seed), "--flows", str(FLOWS)]
    code, _, err = run([*args, "--out", str(out), "--json", *extra], tmp_path)
    assert code == EXIT_VALID, err
    return out, json.loads((out / "results.json").read_text(encoding="utf-8"))


def test_one_seed_twice_gives_the_same_bytes_and_another_seed_another_history(
    tmp_path: Path,
) -> None:
    first, a = _simulate(tmp_path, "a", 11)
    second, b = _simulate(tmp_path, "b", 11)
    other, c = _simulate(tmp_path, "c", 12)
    history = (first / "history.jsonl").read_bytes()
    assert history == (second / "history.jsonl").read_bytes()
    assert comparable(a) == comparable(b)
    assert a["deterministic"]["history_sha256"] == hashlib.sha256(history).hexdigest()
    assert a["deterministic"]["python_hash_seed"] == "0"  # the command re-executed itself
    assert (other / "history.jsonl").read_bytes() != history
    assert c["deterministic"]["history_sha256"] != a["deterministic"]["history_sha256"]
    assert a["verdict"] == c["verdict"] == "valid"


def test_replay_of_a_run_folder_gives_the_same_history_bytes(tmp_path: Path) -> None:
    first, a = _simulate(tmp_path, "a", 5, "--nodes", "2", "--state-ttl", "1.5")
    again = tmp_path / "again"
    code, _, err = run(["simulate", "--replay", str(first), "--out", str(again)], tmp_path)
    assert code == EXIT_VALID, err
    assert "same history bytes" in err
    assert (again / "history.jsonl").read_bytes() == (first / "history.jsonl").read_bytes()
    b = json.loads((again / "results.json").read_text(encoding="utf-8"))
    assert b["settings"]["nodes"] == 2
    assert b["settings"]["state_ttl_s"] == 1.5
    assert comparable(a) == comparable(b)


def test_refusals_are_one_line_usage_errors(tmp_path: Path) -> None:
    cases = {
        ("--redis", "redis://127.0.0.1:1/0"): "--redis",
        ("--workers", "2", "--check-determinism"): "--workers",
        ("--faults", "redis"): "--faults redis",
    }
    for extra, word in cases.items():
        args = ["simulate", "--deterministic", "--seed", "1", "--out", str(tmp_path / "x"), *extra]
        code, _, err = run(args, tmp_path)
        assert code == EXIT_USAGE, (extra, err)
        (line,) = [x for x in err.splitlines() if x.startswith("Error:")]
        assert word in line, err
        assert "Traceback" not in err
    code, _, err = run(["simulate", "--deterministic", "--out", str(tmp_path / "y")], tmp_path)
    assert code == EXIT_USAGE
    assert "--seed" in err


class LeakyTransport:
    """A planted source of nondeterminism: a transport whose state outlives the run it serves
    (``runs`` counts the runs it was installed in). From the second run on, the reply to the
    ``nth`` message comes ``delay_s`` later (0: never, the control; even a bare checkpoint
    there would change the schedule); ``sent_at`` is when that message went out."""

    def __init__(self, nth: int, delay_s: float) -> None:
        self.nth = nth
        self.delay_s = delay_s
        self.runs = 0
        self.sent_at: list[float] = []

    def install(self, inner: Transport) -> Transport:
        self.runs += 1
        leak = self
        count = 0

        class Wrapped:
            @property
            def node_count(self) -> int:
                return inner.node_count

            async def send(self, node: int, principal: str, message: dict[str, Any]) -> Reply:
                nonlocal count
                count += 1
                if count == leak.nth:
                    leak.sent_at.append(trio.current_time())
                reply = await inner.send(node, principal, message)
                if count == leak.nth and leak.runs > 1 and leak.delay_s > 0:
                    await trio.sleep(leak.delay_s)
                return reply

        return Wrapped()


def _options(run_dir: Path | None) -> SimulateOptions:
    return SimulateOptions(nodes=2, run_dir=run_dir, settings=RunSettings(flows=FLOWS, seed=3))


def test_check_determinism_control_finds_no_divergence(tmp_path: Path) -> None:
    leak = LeakyTransport(nth=120, delay_s=0.0)
    outcome = check_determinism(_options(tmp_path / "run"), transport_hook=leak.install)
    assert outcome.divergence is None
    assert outcome.first.history_sha256 == outcome.second.history_sha256
    assert outcome.first.result.status == "valid"
    saved = json.loads((tmp_path / "run" / "determinism.json").read_text(encoding="utf-8"))
    assert saved["deterministic"] is True


@pytest.mark.planted(control="test_check_determinism_control_finds_no_divergence")
def test_check_determinism_names_the_step_a_planted_leak_changes(tmp_path: Path) -> None:
    leak = LeakyTransport(nth=120, delay_s=0.004)
    outcome = check_determinism(_options(tmp_path / "run"), transport_hook=leak.install)
    found = outcome.divergence
    assert found is not None
    assert outcome.first.history_sha256 != outcome.second.history_sha256
    # The leak acts when the 120th message's reply comes back: the same virtual instant in
    # both runs (every store call takes no virtual time); nothing before it differs.
    planted_s = round(leak.sent_at[1], 3)
    assert leak.sent_at[0] == leak.sent_at[1]
    assert found.first is not None
    assert found.second is not None
    assert min(found.first.virtual_s, found.second.virtual_s) == planted_s
    text = found.describe()
    assert f"virtual time {planted_s:.3f} s" in text
    assert "flow" in text
    assert "node" in text


def test_a_run_in_process_matches_itself_and_reads_the_virtual_clock() -> None:
    options = SimulateOptions(nodes=2, settings=RunSettings(flows=30, seed=8))
    a = run_deterministic(options)
    b = run_deterministic(options)
    assert a.history_sha256 == b.history_sha256
    assert comparable(a.to_json()) == comparable(b.to_json())
    first = a.history.ops[0]
    assert first.time_ms >= EPOCH_S * 1000  # the history's clock is the virtual wall clock
    assert a.history.ops[-1].time_ms / 1000 - EPOCH_S <= a.virtual_s


def test_swarm_picks_the_shape_from_the_seed_prints_it_and_replays_it(tmp_path: Path) -> None:
    out = tmp_path / "swarm"
    args = ["simulate", "--swarm", "--seed", "4", "--flows", str(FLOWS), "--out", str(out)]
    code, _, err = run(args, tmp_path)
    assert code == EXIT_VALID, err
    (header,) = [line for line in err.splitlines() if line.startswith("swarm: ")]
    saved = json.loads((out / "deterministic.json").read_text(encoding="utf-8"))
    assert saved["buggify"] is True
    assert f"{saved['nodes']} nodes" in header
    assert f"state TTL {saved['state_ttl_s']:g} s" in header
    assert saved["settings"]["weights"] != json.loads(json.dumps(RunSettings().weights))
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["deterministic"]["buggify"]["active"]
    again = tmp_path / "again"
    code, _, err = run(["simulate", "--replay", str(out), "--out", str(again)], tmp_path)
    assert code == EXIT_VALID, err
    assert (again / "history.jsonl").read_bytes() == (out / "history.jsonl").read_bytes()


def test_workers_run_independent_seeds_with_one_merged_verdict(tmp_path: Path) -> None:
    out = tmp_path / "seeds"
    args = ["simulate", "--deterministic", "--workers", "2", "--seed", "7", "--flows", "40"]
    code, _, err = run([*args, "--out", str(out)], tmp_path)
    assert code == EXIT_VALID, err
    assert "merged verdict: VALID (80 flows, 2 seeds)" in err
    summary = json.loads((out / "seeds.json").read_text(encoding="utf-8"))
    assert [r["seed"] for r in summary["runs"]] == [7, 8]
    # A results file: the command, the machine and its load at both ends, the totals.
    assert summary["command"].startswith("notes-cluster simulate --deterministic --workers 2")
    assert summary["where"] == "2 processes"
    assert len(summary["load_average_at_start"]) == len(summary["machine"]["load_average"]) == 3
    assert summary["machine"]["cpus"] >= 1
    cpu_s = sum(r["cpu_s"] for r in summary["runs"])
    assert summary["cpu_s"] == pytest.approx(cpu_s, abs=0.1)
    assert summary["flows_per_cpu_s"] == pytest.approx(80 / cpu_s, rel=0.01)
    assert not (out / "seed-7").exists()  # a passing seed of a bulk run leaves no folder
    alone = run_deterministic(
        SimulateOptions(settings=RunSettings(flows=40, seed=7, tenants=tenants_for(40)))
    )
    assert alone.history_sha256 == summary["runs"][0]["history_sha256"]
    assert summary["runs"][0]["history_sha256"] != summary["runs"][1]["history_sha256"]
