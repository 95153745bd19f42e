"""Legacy 2025-11-25 flows under ``simulate --deterministic``.

Layer: tests. With a legacy share, a deterministic run reaches the legacy nodes' ASGI app with
no socket (``cluster.deterministic.legacy``): two runs of one seed write the same history bytes
and their legacy flows complete; ``--replay`` of the folder (which keeps the share) replays
them; a legacy share on an in-process store that cannot block on the virtual clock is refused
in one line. The planted legacy defect, its shrink and replay are tests/test_plants.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.deterministic.run import DeterministicUsageError, run_deterministic
from cluster.exit_codes import EXIT_VALID
from cluster.targets.simulate import SimulateOptions
from loadgen.legacy_clients import LEGACY_KINDS
from loadgen.runner import RunSettings
from loadgen.workload import tenants_for
from tests.cli_process import run

FLOWS = 60
SHARE = 0.3


def _options(seed: int) -> SimulateOptions:
    settings = RunSettings(flows=FLOWS, seed=seed, tenants=tenants_for(FLOWS), legacy_share=SHARE)
    return SimulateOptions(settings=settings)


def test_a_seed_with_a_legacy_share_writes_the_same_history_bytes_twice() -> None:
    first = run_deterministic(_options(4))
    second = run_deterministic(_options(4))
    print(f"seed 4, legacy share {SHARE}: {first.history_sha256}")
    assert [op.to_json() for op in first.history.ops] == [op.to_json() for op in second.history.ops]
    assert first.history_sha256 == second.history_sha256
    kinds = first.results.to_json()["kinds"]
    for kind in LEGACY_KINDS:
        assert kinds[kind]["completed"] >= 1, (kind, kinds[kind])
    assert first.result.status == "valid", [v for v in first.result.verdicts if v.status != "valid"]


def test_a_legacy_run_folder_replays_bit_for_bit(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["simulate", "--deterministic", "--seed", "6", "--flows", str(FLOWS)]
    code, _, err = run([*args, "--legacy-share", str(SHARE), "--out", str(out)], tmp_path)
    assert code == EXIT_VALID, err
    saved = json.loads((out / "deterministic.json").read_text(encoding="utf-8"))
    assert saved["legacy_share"] == SHARE
    again = tmp_path / "again"
    code, _, err = run(["simulate", "--replay", str(out), "--out", str(again)], tmp_path)
    assert code == EXIT_VALID, err
    assert "same history bytes" in err
    assert (out / "history.jsonl").read_bytes() == (again / "history.jsonl").read_bytes()
    rows = [json.loads(line) for line in (again / "history.jsonl").open(encoding="utf-8")]
    assert {r["kind"] for r in rows} >= set(LEGACY_KINDS)


def test_a_legacy_share_on_fakeredis_is_refused_naming_the_lean_store() -> None:
    with pytest.raises(DeterministicUsageError, match="lean store only"):
        run_deterministic(_options(1), store="fakeredis")
