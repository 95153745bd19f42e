"""The write, read and fault-window rules of the checker on small synthetic histories."""

from __future__ import annotations

from typing import Any

from loadgen.checker import Call
from loadgen.history import Op
from loadgen.limits import AFTERMATH_MS, PAUSE_AFTERMATH_MS, FaultIndex, FaultWindow
from loadgen.writes import landing, requests, version_steps
from store.journal import JournalEntry


def entry(op: str, version: int, nonce: str = "", at: int = 0) -> JournalEntry:
    return JournalEntry("t", f"{at}-0", op, "n1", "ws", "", "T", version, "p", nonce, None, at, "")


def call(i: int, f: str, outcome: str, value: dict[str, Any], result: dict[str, Any]) -> Call:
    invoke = Op(i, 1000 + i, 1, "invoke", f, 1, "plain", {"tenant": "t", "principal": "p", **value})
    done = Op(i + 1, 1001 + i, 1, outcome, f, 1, "plain", result)  # type: ignore[arg-type]
    return Call(invoke, done)


def test_a_note_version_steps_by_one_per_change_and_a_confirmation_journals_what_it_found() -> None:
    good = [
        entry("create", 1),
        entry("update", 2),
        entry("move", 3),
        entry("move", 3, "k"),
        entry("delete", 4, "k2"),
    ]
    assert list(version_steps(good)) == []
    bad = [entry("create", 1), entry("update", 2), entry("update", 4), entry("update", 5)]
    assert [(e.version, want) for e, want, _ in version_steps(bad)] == [(4, 3)]
    assert list(version_steps([entry("update", 7)])) == []  # no create: not judged


def test_sends_under_one_idempotency_key_are_one_request_and_a_reused_key_none() -> None:
    first = call(0, "create", "info", {"key": "k" * 16}, {"reason": "response lost"})
    retry = call(2, "create", "ok", {"key": "k" * 16}, {"noteId": "n1", "replay": True})
    reused = call(4, "create", "ok", {"key": "k" * 16, "expect": "key_conflict"}, {"noteId": "n2"})
    refused = call(6, "create", "ok", {}, {"isError": True})
    plain = call(8, "create", "info", {}, {"reason": "timeout"})
    groups = requests([first, retry, reused, refused, plain])
    assert sorted(len(g) for g in groups) == [1, 1, 1, 2]
    assert landing([first, retry, reused, refused, plain]) == 2  # the key's request, the timeout


def test_a_fault_window_explains_what_overlaps_it_and_a_failover_the_rest_of_the_run() -> None:
    windows = FaultIndex.build(
        [FaultWindow("client", "lose", 1000, 2000), FaultWindow("nodes", "restart", 5000, 5100)]
    )
    assert windows.overlap(1500, 1600)
    assert windows.overlap(2000 + AFTERMATH_MS, 9000)  # the aftermath, inclusive
    assert not windows.overlap(2001 + AFTERMATH_MS, 4999)
    assert not windows.overlap(0, 999)
    assert windows.overlap(0, float("inf"))  # no answer at all: overlaps what came later
    stall = FaultIndex.build([FaultWindow("stall", "stall", 1000, 2000)])
    assert stall.overlap(2000 + PAUSE_AFTERMATH_MS, 9000)
    assert not stall.overlap(2001 + PAUSE_AFTERMATH_MS, 9000)
    failover = FaultIndex.build([FaultWindow("failover", "kill_master", 1000, 2000)])
    assert failover.overlap(60_000, 60_001)
    assert not failover.overlap(0, 999)
