"""The write, read and fault-window rules of the checker on small synthetic histories."""

from __future__ import annotations

from typing import Any

from loadgen.check.context import Call, build_context
from loadgen.check.limits import AFTERMATH_MS, PAUSE_AFTERMATH_MS, FaultIndex, FaultWindow
from loadgen.check.model import ERROR_RESULT, REASK
from loadgen.check.reads import check_reads
from loadgen.check.timeline import Bounds, Titles, forgettable_creates
from loadgen.check.writes import landing, requests, version_steps
from loadgen.history import Op
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


def listing_after_unknown_creates(shown: list[str], creates: int) -> list[Op]:
    """``creates`` creates of 'T' in 'ws' answered "outcome unknown", then one complete
    listing of 'T' in 'ws' (another flow) showing ``shown``, answered before they were."""
    ops: list[Op] = []
    for k in range(creates):
        value = {"tenant": "t", "principal": "p", "workspace": "ws", "title": "T"}
        ops.append(Op(2 * k, 1000 + k, 10 + k, "invoke", "create", 10 + k, "plain", value))
    page = {"tenant": "t", "principal": "p", "workspace": "ws", "title": "T", "listing": 0}
    ops.append(Op(len(ops), 1100, 1, "invoke", "list", 1, "list_pages", {**page, "page": 0}))
    notes = [[n, 1, None] for n in shown]
    answer = {"notes": notes, "more": False}
    ops.append(Op(len(ops), 1110, 1, "ok", "list", 1, "list_pages", answer))
    for k in range(creates):
        unknown = {"reason": "outcome unknown", "code": -32603}
        ops.append(Op(len(ops), 1500, 10 + k, "info", "create", 10 + k, "plain", unknown))
    return ops


def test_a_listing_may_show_a_note_of_an_unknown_create_that_a_failover_then_forgot() -> None:
    # A master shows a write as soon as it ran; with WAIT the create answers "outcome unknown"
    # when no replica has it, and a failover to that replica forgets the note: the listing that
    # saw it on the old master was right. One unknown create explains one such note; without a
    # failover, or for a note the journal holds elsewhere, the listing is still wrong.
    failover = [FaultWindow("failover", "kill_master", 1200, 3000)]
    elsewhere = JournalEntry("t", "1-0", "create", "n2", "ws2", "", "T", 1, "p", "", None, 1, "")

    def summary(shown: list[str], creates: int, faults: list[FaultWindow] | None) -> str:
        history = listing_after_unknown_creates(shown, creates)
        ctx = build_context(history, [elsewhere], {}, {}, 0, 0)
        v = check_reads(ctx, faults)
        return "" if v.status == "valid" else v.summary

    assert summary(["n1"], 1, failover) == ""
    assert "showed ['n1'], never there" in summary(["n1"], 1, None)
    assert "showed ['n1'], never there" in summary(["n1"], 1, [FaultWindow("client", "lose", 0, 1)])
    assert "showed ['n1', 'n3'], never there" in summary(["n1", "n3"], 1, failover)
    assert summary(["n1", "n3"], 2, failover) == ""
    assert "showed ['n2'], never there" in summary(["n2"], 1, failover)
    assert "showed ['n1'], never there" in summary(["n1"], 0, failover)


def test_a_re_ask_may_find_a_note_of_an_unknown_create_that_a_failover_then_forgot() -> None:
    # The same forgotten note seen by a re-ask (a confirm's lookup): the journal holds no note of
    # the title, so only "no note" (error_result) is legal, unless a create of unknown outcome
    # of that title was sent before a failover ended; then the lookup may have found its note.
    history = listing_after_unknown_creates(["n1"], 1)
    calls = build_context(history, [], {}, {}, 0, 0).calls
    assert forgettable_creates(calls, None) == {}
    assert forgettable_creates(calls, [FaultWindow("client", "lose", 0, 9000)]) == {}
    assert forgettable_creates(calls, [FaultWindow("failover", "kill_master", 0, 999)]) == {}
    failover = [FaultWindow("failover", "kill_master", 1200, 3000)]
    assert forgettable_creates(calls, failover) == {("t", "ws", "T"): [1000]}
    titles = Titles.build([])
    assert titles.reask("t", "ws", "T", Bounds()) == {ERROR_RESULT}
    assert titles.reask("t", "ws", "T", Bounds(), forgotten=1) == {ERROR_RESULT, REASK}
