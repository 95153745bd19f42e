"""A damaged run folder gets a clear error naming the file and line, exit 2, and no verdict.

A folder can be damaged in ways a user meets: a load process killed while writing (a torn last
line), a disk that filled up, a partial copy from another machine, a file edited by hand. The
check must say which file and line, check nothing (no verdict from part of a run), leave nothing
behind, and never print a traceback, with the check in this process or in a pool.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from cluster.cli import EXIT_INVALID, EXIT_UNKNOWN, EXIT_USAGE, EXIT_VALID, main
from loadgen.history import DamagedRunFile, iter_history
from loadgen.run.folder import read_tenant_facts, store_meta, tenants_of


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("pristine") / "run"
    args = ["simulate", "--flows", "120", "--concurrency", "8", "--seed", "21", "--out", str(run)]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == EXIT_VALID, out.output
    return run


@pytest.fixture
def run(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(pristine, copy)
    return copy


def _check(run: Path, *extra: str) -> tuple[int, str]:
    out = CliRunner().invoke(main, ["check", str(run), *extra])
    return out.exit_code, out.output


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _tear_last_line(run: Path) -> str:
    history = run / "history.jsonl"
    lines = _lines(history)
    history.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2], encoding="utf-8")
    return f"history.jsonl, line {len(lines)}: not JSON"


def _garble_a_middle_line(run: Path) -> str:
    history = run / "history.jsonl"
    lines = _lines(history)
    lines[10] = '{"index": 10, "ty\x00pe"\n'
    history.write_text("".join(lines), encoding="utf-8")
    return "history.jsonl, line 11: not JSON"


def _json_of_the_wrong_shape(run: Path) -> str:
    history = run / "history.jsonl"
    lines = _lines(history)
    lines[5] = json.dumps({"index": 5, "note": "not an entry"}) + "\n"
    history.write_text("".join(lines), encoding="utf-8")
    return "history.jsonl, line 6: not one of the history's entries (KeyError"


def _an_unknown_entry_type(run: Path) -> str:
    history = run / "history.jsonl"
    lines = _lines(history)
    entry = json.loads(lines[7])
    entry["type"] = "maybe"
    lines[7] = json.dumps(entry) + "\n"
    history.write_text("".join(lines), encoding="utf-8")
    return "history.jsonl, line 8: not one of the history's entries (ValueError: type 'maybe'"


def _meta_not_json(run: Path) -> str:
    (run / "store" / "meta.json").write_text('{"grace_ms": 1', encoding="utf-8")
    return "meta.json: not JSON"


def _meta_without_clock(run: Path) -> str:
    (run / "store" / "meta.json").write_text('{"grace_ms": 1}', encoding="utf-8")
    return "meta.json: no grace_ms and redis_end_ms"


def _a_tenant_journal_missing(run: Path) -> str:
    victim = sorted((run / "store").glob("*.journal.jsonl"))[0]
    victim.unlink()
    return f"{victim.name}: missing (journal entries)"


def _a_journal_line_of_another_shape(run: Path) -> str:
    journal = max((run / "store").glob("*.journal.jsonl"), key=lambda p: p.stat().st_size)
    lines = _lines(journal)
    entry = json.loads(lines[0])
    entry["surprise"] = 1
    lines[0] = json.dumps(entry) + "\n"
    journal.write_text("".join(lines), encoding="utf-8")
    return f"{journal.name}, line 1: not one of journal entries (TypeError"


def _notes_not_pairs(run: Path) -> str:
    notes = sorted((run / "store").glob("*.notes.jsonl"))[0]
    notes.write_text('["only-a-note"]\n', encoding="utf-8")
    return f"{notes.name}, line 1: not one of [note, workspace] (ValueError"


def _tally_torn(run: Path) -> str:
    tally = run / "tally.json"
    tally.write_text(tally.read_text(encoding="utf-8")[:40], encoding="utf-8")
    return "tally.json: not JSON"


def _results_torn(run: Path) -> str:
    results = run / "results.json"
    results.write_text(results.read_text(encoding="utf-8")[:40], encoding="utf-8")
    return "results.json: not a run's results"


DAMAGES: dict[str, Callable[[Path], str]] = {
    "torn last line": _tear_last_line,
    "garbled line": _garble_a_middle_line,
    "JSON of the wrong shape": _json_of_the_wrong_shape,
    "unknown entry type": _an_unknown_entry_type,
    "meta.json not JSON": _meta_not_json,
    "meta.json without the clock": _meta_without_clock,
    "a tenant's journal missing": _a_tenant_journal_missing,
    "journal line of another shape": _a_journal_line_of_another_shape,
    "notes not pairs": _notes_not_pairs,
    "tally.json torn": _tally_torn,
    "results.json torn": _results_torn,
}


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_folder_is_named_and_nothing_is_checked(
    run: Path, damage: str, jobs: str
) -> None:
    expected = DAMAGES[damage](run)
    code, output = _check(run, "--jobs", jobs)
    assert code == EXIT_USAGE, output
    flat = " ".join(output.split())  # rich/click may wrap long lines
    assert expected in flat, output
    assert "Nothing was checked." in flat
    assert "Traceback" not in output
    assert "Verdict" not in output
    assert not list((run / "store").glob("nc-check-*")), "the check left its work files"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_answers_whose_invoke_was_cut_make_the_verdict_unknown(run: Path, jobs: str) -> None:
    """Valid JSON throughout, but an invoke is gone (lines cut out of the middle): the answers
    left without it cannot be checked, and a run never writes one, so the verdict cannot be
    VALID."""
    history = run / "history.jsonl"
    lines = _lines(history)
    cut = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "invoke"][20:23]
    history.write_text("".join(x for i, x in enumerate(lines) if i not in cut), encoding="utf-8")
    out = CliRunner().invoke(main, ["check", str(run), "--json", "--jobs", jobs])
    results = json.loads(out.stdout)
    # UNKNOWN at least; INVALID where the cut makes the journal show more than the history
    # (an execution whose confirm is gone), which is what that history claims.
    assert results["verdict"] in ("unknown", "invalid")
    assert out.exit_code == {"unknown": EXIT_UNKNOWN, "invalid": EXIT_INVALID}[results["verdict"]]
    [read] = [v for v in results["invariants"] if v["name"] == "tenants_read"]
    assert read["status"] == "unknown"
    assert "3 answers in the history have no invoke before them" in read["summary"]


def test_an_answer_to_no_invoke_alone_makes_the_verdict_unknown(run: Path) -> None:
    stray = {
        "index": 10**9,
        "time_ms": 1,
        "process": 0,
        "type": "ok",
        "f": "confirm",
        "flow": 10**9,
        "kind": "plain",
        "value": {"executed": True, "deleted": True},
    }
    with (run / "history.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(stray) + "\n")
    out = CliRunner().invoke(main, ["check", str(run), "--json"])
    assert out.exit_code == EXIT_UNKNOWN, out.output
    results = json.loads(out.stdout)
    assert results["verdict"] == "unknown"
    unknown = [v["name"] for v in results["invariants"] if v["status"] != "valid"]
    assert unknown == ["tenants_read"]


def test_the_torn_last_line_is_called_torn(run: Path) -> None:
    _tear_last_line(run)
    with pytest.raises(DamagedRunFile, match="a torn last line"):
        list(iter_history(run / "history.jsonl"))


def test_an_undamaged_copy_still_checks_valid(run: Path) -> None:
    code, output = _check(run, "--jobs", "2")
    assert code == EXIT_VALID, output


def test_the_readers_take_what_the_run_wrote(run: Path) -> None:
    tenants = tenants_of(run)
    assert tenants
    assert store_meta(run)["grace_ms"] >= 0
    facts = [read_tenant_facts(run, t) for t in tenants]
    assert sum(len(f.journal) for f in facts) > 0
    assert all(f.redis_end_ms > 0 for f in facts)
    assert sum(1 for _ in iter_history(run / "history.jsonl")) > 120
