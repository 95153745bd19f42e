"""The run pipeline's pieces (``loadgen.run``): Results, RunFolder, recording, one judgement.

Layer: tests. ``test_results_unchanged`` holds a whole seeded run to the results of the code
before the pipeline; these hold the pieces to what they promise.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from loadgen.history import DamagedRunFile, iter_history, recording
from loadgen.run.folder import RunFolder, WorkerRecord
from loadgen.run.results import RecordedSettings, Results
from loadgen.tally import Tally

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = Path(__file__).parent / "data" / "simulate_seed7_results.json"


def _a_run() -> dict[str, object]:
    d = json.loads(EXPECTED.read_text(encoding="utf-8"))
    return d | {"model": {kind: [] for kind in d["model"]}}


def test_results_read_back_what_they_wrote(tmp_path: Path) -> None:
    d = _a_run()
    results = Results.from_json(d)
    assert results.to_json() == d
    folder = RunFolder(tmp_path / "run")
    results.write(folder)
    assert Results.read(folder) == results
    assert Results.read(RunFolder(tmp_path / "none")) is None


def test_damaged_results_are_named(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path).make()
    folder.results_file.write_text('{"verdict": "maybe"}', encoding="utf-8")
    with pytest.raises(DamagedRunFile, match="not a run's results"):
        Results.read(folder)


def test_settings_keep_optional_fields_out_until_set() -> None:
    assert RecordedSettings().to_json().keys() >= {"nodes", "store", "legacy_share"}
    assert "faults" not in RecordedSettings().to_json()
    assert RecordedSettings(faults=("nodes",), fault_seed=3).to_json()["fault_seed"] == 3
    assert RecordedSettings(max_exp_ms=5).to_json()["max_exp_ms"] == 5


def test_a_run_folder_names_its_workers_in_number_order(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    for k in (10, 2, 0):
        run.worker(k).write_tally(Tally())
        run.worker(k).write_worker_record(WorkerRecord(100 + k, 7))
    assert [w.path.name for w in run.workers()] == ["worker-0", "worker-2", "worker-10"]
    assert run.worker(10).worker_record() == WorkerRecord(110, 7)
    assert run.tally().total == 0


def test_recording_closes_the_history_file_once(tmp_path: Path) -> None:
    path = tmp_path / "run" / "history.jsonl"
    with recording(path, keep=False, first_index=5) as history:
        history.record(0, "invoke", "create", 1, "plain", {"tenant": "load0"})
        assert history.sink is not None
    assert history.sink.closed
    [op] = list(iter_history(path))
    assert op.index == 5


def _callers(name: str) -> list[str]:
    """Where ``name`` is called in cluster/ and loadgen/ (module paths)."""
    found = []
    for package in ("cluster", "loadgen"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    f = node.func
                    called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                    if called == name:
                        found.append(str(path.relative_to(ROOT)))
    return found


def test_the_exercise_verdict_is_applied_in_one_place() -> None:
    assert _callers("exercise_verdict") == ["loadgen/run/pipeline.py"]


def test_the_callers_scan_finds_a_call() -> None:
    """The control of the scan above: it does find calls (``recording`` has several)."""
    assert "loadgen/run/pipeline.py" in _callers("recording")


def _spelled(names: set[str], skip: str = "loadgen/run/folder.py") -> dict[str, list[str]]:
    """Where a string constant of the code (not a docstring) in cluster/ and loadgen/ is one of
    ``names``: module path -> the names it spells."""
    found: dict[str, list[str]] = {}
    for package in ("cluster", "loadgen"):
        for path in sorted((ROOT / package).rglob("*.py")):
            where = str(path.relative_to(ROOT))
            if where == skip:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docstrings = {
                id(n.body[0].value)
                for n in ast.walk(tree)
                if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and n.body
                and isinstance(n.body[0], ast.Expr)
                and isinstance(n.body[0].value, ast.Constant)
            }
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in docstrings
                    and node.value in names
                ):
                    found.setdefault(where, []).append(node.value)
    return found


def _run_file_names() -> set[str]:
    import loadgen.run.folder as folder

    return {
        v
        for k, v in vars(folder).items()
        if k.isupper()
        and isinstance(v, str)
        and k.endswith(("_FILE", "_DIR", "_LOG", "_PREFIX"))
        and v != "store"  # the facts folder: a word every store module says in other senses
    }


def test_run_file_names_are_spelled_in_the_run_folder_alone() -> None:
    names = _run_file_names()
    assert {"history.jsonl", "results.json", "tally.json", "faults.json"} <= names
    assert _spelled(names) == {}


def test_the_spelling_scan_finds_a_run_file_name() -> None:
    """The control of the scan above: the folder module itself spells them all."""
    names = _run_file_names()
    found = _spelled(names, skip="")
    assert set(found["loadgen/run/folder.py"]) == names


def _attribute_uses(name: str) -> list[str]:
    """Where ``.name`` is read in cluster/ and loadgen/ (module paths, once each)."""
    found = []
    for package in ("cluster", "loadgen"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if any(isinstance(n, ast.Attribute) and n.attr == name for n in ast.walk(tree)):
                found.append(str(path.relative_to(ROOT)))
    return found


def test_results_json_is_written_and_read_through_results_alone() -> None:
    assert _attribute_uses("results_file") == ["loadgen/run/results.py"]


def test_the_attribute_scan_finds_a_use() -> None:
    """The control of the scan above: ``history_file`` is read in several modules."""
    assert len(_attribute_uses("history_file")) > 1
