"""The sequential model of a confirmation state, and the model search on small histories.

Each history here is built with explicit times: the wall clock of the history and the Redis
clock of the journal tick together (one ms apart per record), so the search can tell what ran
before what, as it does from a real run's anchors.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from loadgen.check.context import Call, pair_calls
from loadgen.check.invariants import check
from loadgen.check.model import (
    CANCELLED,
    DECLINED,
    ERROR_RESULT,
    EXECUTED,
    INIT,
    REASK,
    REFUSAL,
    REPLAY_DECLINED,
    REPLAY_EXECUTED,
    Answer,
    ModelReply,
    NoteView,
    World,
    expire,
    forget,
    step,
)
from loadgen.check.model_search import merge_tables
from loadgen.check.timeline import Bounds, Clock, Titles, anchors
from loadgen.check.verdict import CheckResult, Verdict
from loadgen.history import Op, OpType
from store.journal import JournalEntry

T = "load0"
WS = "file:///load/t0/inbox"
ARCHIVE = "file:///load/t0/archive"
ME = "u0a"
N1, N2, LATER = "n" + "1" * 16, "n" + "2" * 16, "n" + "9" * 16
K1, K2 = "k1" + "a" * 20, "k2" + "b" * 20
TTL = 2_000
GRACE = 1_000
REFUSED = {"code": -32602, "message": "Invalid or expired requestState", "status": 400}


# --- the model alone ------------------------------------------------------------------------

HERE = World(WS, 1, NoteView(True, True, WS, 1))


def replies(state: Any, answer: Answer, world: World = HERE) -> set[str]:
    return {str(r) for r in step(state, answer, world)}


def test_a_shown_state_executes_an_accept_of_the_note_as_shown_and_records_it() -> None:
    out = step(INIT, Answer("accept", N1), HERE)
    assert set(out) == {ModelReply(EXECUTED, N1)}
    after = out[ModelReply(EXECUTED, N1)]
    assert after.effect == "execute"
    assert replies(after.state, Answer("accept", N1)) == {f"{REPLAY_EXECUTED}:{N1}"}
    assert replies(after.state, Answer("accept_no", N1)) == {REFUSAL}
    assert replies(after.state, Answer("cancel")) == {REFUSAL}


def test_a_cancel_leaves_the_state_usable_and_a_decline_is_final() -> None:
    cancelled = step(INIT, Answer("cancel"), HERE)
    assert set(cancelled) == {ModelReply(CANCELLED)}
    assert cancelled[ModelReply(CANCELLED)].state == INIT
    declined = step(INIT, Answer("decline"), HERE)[ModelReply(DECLINED)].state
    assert replies(declined, Answer("decline")) == {REPLAY_DECLINED}
    assert replies(declined, Answer("accept", N1)) == {REFUSAL}


def test_a_note_changed_gone_or_moved_since_shown_reasks_or_errors() -> None:
    edited = World(WS, 1, NoteView(True, True, WS, 2))
    gone = World(WS, 1, NoteView(True, False))
    moved = World(WS, 1, NoteView(True, True, ARCHIVE, 2))
    assert replies(INIT, Answer("accept", N1), edited) == {REASK}
    assert replies(INIT, Answer("accept", N1), gone) == {ERROR_RESULT}
    assert replies(INIT, Answer("accept", N1), moved) == {ERROR_RESULT}


def test_expiry_refuses_an_unused_state_but_a_used_one_replays_until_forgotten() -> None:
    assert replies(expire(INIT), Answer("accept", N1)) == {REFUSAL}
    assert replies(expire(INIT), Answer("cancel")) == {REFUSAL}
    used = step(INIT, Answer("accept", N1), HERE)[ModelReply(EXECUTED, N1)].state
    assert replies(expire(used), Answer("accept", N1)) == {f"{REPLAY_EXECUTED}:{N1}"}
    assert replies(forget(expire(used)), Answer("accept", N1)) == {REFUSAL}


def test_a_legacy_client_is_told_of_an_expired_unused_state_with_an_error_result() -> None:
    legacy = replace(HERE, legacy=True)
    assert replies(expire(INIT), Answer("accept", N1), legacy) == {ERROR_RESULT}
    assert replies(expire(INIT), Answer("cancel"), legacy) == {ERROR_RESULT}
    assert replies(INIT, Answer("accept", N1), legacy) == {f"{EXECUTED}:{N1}"}


def test_silence_reasks_in_any_state_and_an_altered_answer_is_refused() -> None:
    used = step(INIT, Answer("accept", N1), HERE)[ModelReply(EXECUTED, N1)].state
    for state in (INIT, used, expire(INIT)):
        assert replies(state, Answer("silence")) == {REASK}
        assert replies(state, Answer("altered")) == {REFUSAL}


# --- the search on histories ----------------------------------------------------------------


@dataclass
class Story:
    """A history and a journal on one clock: each record takes 1 ms. The run goes on after the
    story: ``check`` adds another flow's create, which bounds every answer's effect from above,
    as the next flows of a real run do."""

    ops: list[Op] = field(default_factory=list)
    journal: list[JournalEntry] = field(default_factory=list)
    final: dict[tuple[str, str], str] = field(default_factory=dict)
    now: int = 1_000

    def record(
        self, flow: int, type_: OpType, f: str, kind: str, value: dict[str, Any], process: int = 0
    ) -> Op:
        self.now += 1
        op = Op(len(self.ops), self.now, process or 2 * flow, type_, f, flow, kind, value)
        self.ops.append(op)
        return op

    def entry(self, op: str, note: str, **fields: Any) -> JournalEntry:
        self.now += 1
        values: dict[str, Any] = {
            "tenant": T,
            "id": f"{self.now}-0",
            "op": op,
            "note": note,
            "ws": WS,
            "to": "",
            "title": "TPS",
            "version": 1,
            "principal": ME,
            "nonce": "",
            "exp_ms": None,
            "at_ms": self.now,
            "tool": "",
        }
        e = JournalEntry(**(values | fields))
        self.journal.append(e)
        return e

    def create(self, note: str, flow: int, kind: str) -> None:
        inv = {"principal": ME, "tenant": T, "workspace": WS, "title": "TPS"}
        self.record(flow, "invoke", "create", kind, inv)
        self.entry("create", note)
        self.record(flow, "ok", "create", kind, {"deleted": False, "noteId": note})
        self.final[(T, note)] = WS

    def ask(self, nonce: str, note: str, flow: int, kind: str, tool: str = "notes_delete") -> None:
        inv = {"principal": ME, "tenant": T, "workspace": WS, "title": "TPS"}
        self.record(flow, "invoke", "ask", kind, inv)
        facts = {"nonce": nonce, "exp_ms": self.now + TTL, "candidates": [[note, 1]], "tool": tool}
        self.record(flow, "ok", "ask", kind, {"reask": True, **facts})

    def invoke(self, nonce: str, flow: int, kind: str, **answer: Any) -> Op:
        inv = {"principal": ME, "tenant": T, "nonce": nonce, "action": "accept", "confirm": True}
        return self.record(flow, "invoke", "confirm", kind, inv | {"expect": "execute"} | answer)

    def done(self, flow: int, kind: str, outcome: OpType, value: dict[str, Any]) -> Op:
        return self.record(flow, outcome, "confirm", kind, value)

    def execute(self, nonce: str, note: str, *, tool: str = "notes_delete") -> JournalEntry:
        exp = next(o.value["exp_ms"] for o in self.ops if o.value.get("nonce") == nonce)
        op = "move" if tool == "notes_archive" else "delete"
        to = ARCHIVE if op == "move" else ""
        e = self.entry(op, note, nonce=nonce, exp_ms=exp, tool=tool, to=to)
        if op == "delete":
            self.final.pop((T, note), None)
        else:
            self.final[(T, note)] = ARCHIVE
        return e

    def check(self) -> CheckResult:
        self.create(LATER, 99, "plain")
        return check(self.ops, self.journal, self.final, {}, redis_end_ms=self.now, grace_ms=GRACE)


def told(word: str = "deleted", *, note: str = N1, replay: bool = False) -> dict[str, Any]:
    """An ok value of a confirm told it executed, as loadgen.clients.classify records it."""
    op = {"deleted": "delete", "archived": "archive"}[word]
    flags = {"deleted": False, "archived": False, word: True}
    rest = {"isError": False, "reask": False, "replay": replay, "noteId": note}
    return {"executed": True, "op": op, **flags, **rest}


NOT_DONE = {
    "executed": False,
    "deleted": False,
    "archived": False,
    "isError": False,
    "reask": False,
    "replay": False,
}


def verdict_of(result: CheckResult, name: str) -> Verdict:
    return next(v for v in result.verdicts if v.name == name)


def cancel_then_accept(accept_reply: tuple[OpType, dict[str, Any]]) -> Story:
    s = Story()
    s.create(N1, 1, "cancel_then_accept")
    s.ask(K1, N1, 1, "cancel_then_accept")
    s.invoke(K1, 1, "cancel_then_accept", action="cancel", noteId=None, expect="no_mutation")
    s.done(1, "cancel_then_accept", "ok", NOT_DONE)
    s.invoke(K1, 1, "cancel_then_accept", noteId=N1)
    if accept_reply[0] == "ok":
        s.execute(K1, N1)
    s.done(1, "cancel_then_accept", *accept_reply)
    return s


def valid(result: CheckResult) -> bool:
    """Every invariant valid (the failing ones are in the assertion message via ``broken``)."""
    return result.status == "valid" and not broken(result)


def broken(result: CheckResult) -> list[Verdict]:
    return [v for v in result.verdicts if v.status != "valid"]


def test_an_accept_after_a_cancel_that_executes_is_valid() -> None:
    result = cancel_then_accept(("ok", told())).check()
    assert valid(result), broken(result)
    rows = result.model["cancel_then_accept"]
    assert {"answer": "accept", "legal": [EXECUTED], "seen": {EXECUTED: 1}} in rows
    assert {"answer": "cancel", "legal": [CANCELLED], "seen": {CANCELLED: 1}} in rows


@pytest.mark.planted(control="test_an_accept_after_a_cancel_that_executes_is_valid")
def test_a_cancel_recorded_as_final_is_a_liveness_violation_naming_the_kind() -> None:
    result = cancel_then_accept(("fail", REFUSED)).check()
    v = verdict_of(result, "answers_make_progress")
    assert v.status == "invalid"
    assert "cancel_then_accept" in v.summary
    assert "answered refusal" in v.summary
    assert result.status == "invalid"


def answer_again(changed: bool) -> tuple[Story, Op]:
    """An accept that executed, then a second answer (the same one, or one with ``confirm``
    flipped) that is told the recorded outcome as a replay. Returns the second invoke."""
    s = Story()
    s.create(N1, 1, "answer_changed")
    s.ask(K1, N1, 1, "answer_changed")
    s.invoke(K1, 1, "answer_changed", noteId=N1)
    s.execute(K1, N1)
    s.done(1, "answer_changed", "ok", told())
    flip: dict[str, Any] = {"confirm": False, "expect": "no_mutation"} if changed else {}
    again = s.invoke(K1, 1, "answer_changed", noteId=N1, **flip)
    s.done(1, "answer_changed", "ok", told(replay=True))
    return s, again


def test_the_same_answer_again_is_told_the_recorded_outcome_and_conforms() -> None:
    s, _ = answer_again(changed=False)
    result = s.check()
    assert valid(result), broken(result)
    rows = result.model["answer_changed"]
    legal = {"answer": "accept", "legal": [REPLAY_EXECUTED], "seen": {REPLAY_EXECUTED: 1}}
    assert legal in rows


@pytest.mark.planted(control="test_the_same_answer_again_is_told_the_recorded_outcome_and_conforms")
def test_a_different_answer_given_the_recorded_outcome_is_a_conformance_violation() -> None:
    s, again = answer_again(changed=True)
    result = s.check()
    v = verdict_of(result, "answers_conform_to_model")
    assert v.status == "invalid"
    assert "[answer_changed]" in v.summary
    assert "legal at every point it may have run: refusal" in v.summary
    assert again.index in v.ops
    # The existing invariants see nothing wrong with it: no extra mutation happened.
    others = [x for x in result.verdicts if x.name not in {v.name, "answers_make_progress"}]
    assert all(x.status == "valid" for x in others), others


def silence(reply: tuple[OpType, dict[str, Any]]) -> tuple[Story, Op]:
    """A form answered with silence (no content), and the server's ``reply``. Returns the
    invoke."""
    s = Story()
    s.create(N1, 1, "silence")
    s.ask(K1, N1, 1, "silence")
    inv = s.invoke(K1, 1, "silence", action="silence", noteId=None, expect="no_mutation")
    s.done(1, "silence", *reply)
    return s, inv


def test_silence_answered_with_the_form_again_makes_progress() -> None:
    s, _ = silence(("ok", NOT_DONE | {"reask": True}))
    result = s.check()
    assert valid(result), broken(result)
    assert result.model["silence"] == [{"answer": "silence", "legal": [REASK], "seen": {REASK: 1}}]


@pytest.mark.planted(control="test_silence_answered_with_the_form_again_makes_progress")
def test_silence_answered_with_an_error_is_a_liveness_violation() -> None:
    bad = {"code": -32602, "message": "Invalid inputResponses", "status": 400}
    s, inv = silence(("fail", bad))
    v = verdict_of(s.check(), "answers_make_progress")
    assert v.status == "invalid"
    assert "[silence]" in v.summary
    assert "legal at every point it may have run: reask" in v.summary
    assert inv.index in v.ops


def archive(*, journaled: bool, told_as: str) -> tuple[Story, Op]:
    """An accept of ``notes_archive``, its move in the journal when ``journaled``, and the
    client told ``told_as`` ("archived" or "deleted"). Returns the completion."""
    s = Story()
    s.create(N1, 1, "archive")
    s.ask(K1, N1, 1, "archive", tool="notes_archive")
    s.invoke(K1, 1, "archive", noteId=N1)
    if journaled:
        s.execute(K1, N1, tool="notes_archive")
    return s, s.done(1, "archive", "ok", told(told_as))


def test_an_archive_told_archived_with_its_move_in_the_journal_is_valid() -> None:
    s, _ = archive(journaled=True, told_as="archived")
    result = s.check()
    assert valid(result), broken(result)
    assert result.counts["confirms_forgotten"] == 0
    assert {"answer": "accept", "legal": [EXECUTED], "seen": {EXECUTED: 1}} in (
        result.model["archive"]
    )


@pytest.mark.planted(control="test_an_archive_told_archived_with_its_move_in_the_journal_is_valid")
def test_an_acknowledged_archive_missing_from_the_journal_is_reported_and_counted() -> None:
    s, done = archive(journaled=False, told_as="archived")
    result = s.check()
    missing = verdict_of(result, "ok_deletes_match_journal")
    assert missing.status == "invalid"
    assert done.index in missing.ops
    v = verdict_of(result, "answers_conform_to_model")
    assert v.status == "invalid"
    assert "[archive]" in v.summary
    assert "acknowledged, but no decision in the journal can be its own" in v.summary
    assert result.counts["confirms_forgotten"] == 1
    assert result.counts["archive_confirms_forgotten"] == 1


@pytest.mark.planted(control="test_an_archive_told_archived_with_its_move_in_the_journal_is_valid")
def test_an_archive_told_as_deleted_is_not_what_the_model_allows() -> None:
    s, done = archive(journaled=True, told_as="deleted")
    result = s.check()
    v = verdict_of(result, "answers_conform_to_model")
    assert v.status == "invalid"
    # The move is in the journal, but a "deleted" answer cannot be its own: it stays
    # unexplained, and the answer itself breaks the model.
    assert "2 violations, first: [archive] move " in v.summary
    assert "that no answer explains" in v.summary
    assert done.index in v.ops
    assert v.journal == (next(e.id for e in s.journal if e.op == "move"),)


def duplicates(first_done_before_second: bool) -> Story:
    """Two copies of one accept: the first executes; the second overlaps it or follows it."""
    s = Story()
    s.create(N1, 1, "duplicate")
    s.ask(K1, N1, 1, "duplicate")
    s.invoke(K1, 1, "duplicate", noteId=N1)
    if first_done_before_second:
        s.execute(K1, N1)
        s.done(1, "duplicate", "ok", told())
        s.invoke(K1, 1, "duplicate", noteId=N1)
    else:
        s.invoke(K1, 1, "duplicate", noteId=N1)
        s.execute(K1, N1)
        s.done(1, "duplicate", "ok", told())
    s.done(1, "duplicate", "ok", told(replay=True))
    return s


def test_concurrent_copies_may_execute_or_replay_and_the_table_counts_which_was_seen() -> None:
    overlapping = duplicates(first_done_before_second=False).check()
    assert overlapping.status == "valid"
    rows = overlapping.model["duplicate"]
    both = [EXECUTED, REPLAY_EXECUTED]
    assert {"answer": "accept", "legal": both, "seen": {REPLAY_EXECUTED: 1}} in rows
    sequential = duplicates(first_done_before_second=True).check()
    assert {"answer": "accept", "legal": [REPLAY_EXECUTED], "seen": {REPLAY_EXECUTED: 1}} in (
        sequential.model["duplicate"]
    )


def lost_then_retried(retry_reply: dict[str, Any]) -> tuple[Story, Op]:
    """An accept that executed but whose response was lost, retried and answered
    ``retry_reply``. Returns the retry's completion."""
    s = Story()
    s.create(N1, 1, "lost_response")
    s.ask(K1, N1, 1, "lost_response")
    s.invoke(K1, 1, "lost_response", noteId=N1)
    s.execute(K1, N1)
    s.done(1, "lost_response", "info", {"reason": "response lost"})
    s.invoke(K1, 1, "lost_response", noteId=N1)
    return s, s.done(1, "lost_response", "ok", retry_reply)


def test_a_retry_after_a_lost_response_told_the_recorded_outcome_is_valid() -> None:
    s, _ = lost_then_retried(told(replay=True))
    result = s.check()
    assert valid(result), broken(result)


@pytest.mark.planted(
    control="test_a_retry_after_a_lost_response_told_the_recorded_outcome_is_valid"
)
def test_a_retry_after_a_lost_response_must_get_the_recorded_outcome() -> None:
    s, retry = lost_then_retried(NOT_DONE | {"isError": True})  # "note gone": misleading
    v = verdict_of(s.check(), "answers_make_progress")
    assert v.status == "invalid"
    # Either it ran first and executed, or after the lost one and got its outcome again.
    assert "legal at every point it may have run: executed, replay_executed" in v.summary
    assert retry.index in v.ops


def accept_before_expiry(*, refused: bool) -> tuple[Story, Op]:
    """An accept answered well before its state's expiry, refused or executed, then another
    flow's create (an anchor after the answer, still before the expiry). Returns the answer's
    completion."""
    s = Story()
    s.create(N1, 1, "before_expiry")
    s.ask(K1, N1, 1, "before_expiry")
    s.invoke(K1, 1, "before_expiry", noteId=N1)
    if refused:
        done = s.done(1, "before_expiry", "fail", REFUSED)
    else:
        s.execute(K1, N1)
        done = s.done(1, "before_expiry", "ok", told())
    s.create(N2, 2, "plain")
    return s, done


def test_an_accept_executed_while_its_state_was_surely_unexpired_is_valid() -> None:
    s, _ = accept_before_expiry(refused=False)
    result = s.check()
    assert valid(result), broken(result)


@pytest.mark.planted(
    control="test_an_accept_executed_while_its_state_was_surely_unexpired_is_valid"
)
def test_an_accept_refused_while_its_state_was_surely_unexpired_is_a_liveness_violation() -> None:
    s, refusal = accept_before_expiry(refused=True)
    v = verdict_of(s.check(), "answers_make_progress")
    assert v.status == "invalid"
    assert "[before_expiry]" in v.summary
    assert "legal at every point it may have run: executed" in v.summary
    assert refusal.index in v.ops


def test_a_refusal_after_the_expiry_on_the_redis_clock_is_legal() -> None:
    s = Story()
    s.create(N1, 1, "expired")
    s.ask(K1, N1, 1, "expired")
    s.now += TTL + 10
    s.create(N2, 2, "plain")  # an anchor past the expiry, before the late accept
    s.invoke(K1, 1, "expired", noteId=N1, expect="no_mutation")
    s.done(1, "expired", "fail", REFUSED)
    result = s.check()
    assert valid(result), broken(result)
    assert result.model["expired"] == [
        {"answer": "accept", "legal": [REFUSAL], "seen": {REFUSAL: 1}}
    ]


LEGACY_ERROR = NOT_DONE | {"isError": True}
"""A legacy confirm answered with an ``isError`` result, as loadgen.legacy_clients records it."""


def legacy_accept(*, late: bool, reply: tuple[OpType, dict[str, Any]]) -> tuple[Story, Op]:
    """A legacy_plain accept (as in ``simulate --legacy-share 0.3 --seed 5``: the answer POSTed,
    its call's result on the stream) answered ``reply``, invoked past its state's expiry on the
    Redis clock (``late``) or surely before it. Returns the answer's completion."""
    s = Story()
    s.create(N1, 1, "legacy_plain")
    s.ask(K1, N1, 1, "legacy_plain")
    if late:
        s.now += TTL + 10
        s.create(N2, 2, "plain")  # an anchor past the expiry, before the late accept
    s.invoke(K1, 1, "legacy_plain", noteId=N1, node=2, stream_node=2)
    done = s.done(1, "legacy_plain", *reply)
    if not late:
        s.create(N2, 2, "plain")  # an anchor after the answer, still before the expiry
    return s, done


def test_a_legacy_accept_past_its_expiry_answered_with_an_error_result_is_legal() -> None:
    """The adapter tells a legacy client (which never saw a requestState) that its state expired
    with an ``isError`` result: the seed-5 finding at op 3481 was this reply, held to the modern
    refusal."""
    s, _ = legacy_accept(late=True, reply=("ok", LEGACY_ERROR))
    result = s.check()
    assert valid(result), broken(result)
    assert result.model["legacy_plain"] == [
        {"answer": "accept", "legal": [ERROR_RESULT], "seen": {ERROR_RESULT: 1}}
    ]


@pytest.mark.planted(
    control="test_a_legacy_accept_past_its_expiry_answered_with_an_error_result_is_legal"
)
def test_a_legacy_accept_before_its_expiry_answered_with_an_error_result_is_not_legal() -> None:
    s, error = legacy_accept(late=False, reply=("ok", LEGACY_ERROR))
    v = verdict_of(s.check(), "answers_make_progress")
    assert v.status == "invalid"
    assert "[legacy_plain]" in v.summary
    assert "legal at every point it may have run: executed" in v.summary
    assert error.index in v.ops


@pytest.mark.planted(
    control="test_a_legacy_accept_past_its_expiry_answered_with_an_error_result_is_legal"
)
def test_a_legacy_accept_past_its_expiry_answered_with_the_modern_refusal_is_not_legal() -> None:
    s, refusal = legacy_accept(late=True, reply=("fail", REFUSED | {"status": 200}))
    v = verdict_of(s.check(), "answers_conform_to_model")
    assert v.status == "invalid"
    assert "legal at every point it may have run: error_result" in v.summary
    assert refusal.index in v.ops


def refused_after_decline(status: int) -> tuple[Story, Op]:
    """A decline, then an accept of the declined state refused with HTTP ``status``. Returns
    the refusal."""
    s = Story()
    s.create(N1, 1, "decline")
    s.ask(K1, N1, 1, "decline")
    s.invoke(K1, 1, "decline", action="decline", noteId=None, expect="no_mutation")
    s.entry("decline", "", nonce=K1, exp_ms=s.ops[-2].value["exp_ms"], tool="notes_delete")
    s.done(1, "decline", "ok", NOT_DONE)
    s.invoke(K1, 1, "decline", noteId=N1, expect="no_mutation")
    return s, s.done(1, "decline", "fail", REFUSED | {"status": status})


def test_the_fixed_refusal_with_http_400_after_a_decline_is_valid() -> None:
    s, _ = refused_after_decline(400)
    result = s.check()
    assert valid(result), broken(result)
    assert {"answer": "accept", "legal": [REFUSAL], "seen": {REFUSAL: 1}} in (
        result.model["decline"]
    )


@pytest.mark.planted(control="test_the_fixed_refusal_with_http_400_after_a_decline_is_valid")
@pytest.mark.parametrize("status", [500, 200])
def test_the_fixed_refusal_must_come_with_http_400(status: int) -> None:
    s, refusal = refused_after_decline(status)
    v = verdict_of(s.check(), "answers_conform_to_model")
    assert v.status == "invalid"
    assert "[decline]" in v.summary
    assert "legal at every point it may have run: refusal" in v.summary
    assert refusal.index in v.ops


# --- the clock bounds and title counts the search relies on ---------------------------------


def calls_and_clock(s: Story) -> tuple[list[Call], Clock]:
    calls = pair_calls(s.ops)
    causes = anchors(calls, s.journal)
    by_id = {(e.tenant, e.id): e for e in s.journal}
    return calls, Clock.build((c, by_id[eid]) for eid, c in causes.items())


def test_anchors_bound_an_operation_on_the_redis_clock_from_both_sides() -> None:
    s = Story()
    s.create(N1, 1, "plain")
    s.ask(K1, N1, 1, "plain")
    s.invoke(K1, 1, "plain", noteId=N1)
    s.done(1, "plain", "fail", REFUSED)
    s.create(N2, 2, "plain")
    calls, clock = calls_and_clock(s)
    confirm = next(c for c in calls if c.invoke.f == "confirm")
    first, second = (e.at_ms for e in s.journal)
    assert clock.bounds(confirm) == Bounds(first, second, frozenset({s.journal[0].id}))


def test_contradicting_anchors_leave_an_operation_unbounded() -> None:
    s = Story()
    s.create(N1, 1, "plain")
    s.invoke(K1, 1, "plain", noteId=N1)
    s.done(1, "plain", "fail", REFUSED)
    s.create(N2, 2, "plain")
    # The later create's entry says it ran before the first one: a clock stepped back.
    s.journal[1] = replace(s.journal[1], at_ms=s.journal[0].at_ms - 10)
    calls, clock = calls_and_clock(s)
    confirm = next(c for c in calls if c.invoke.f == "confirm")
    assert clock.bounds(confirm) == Bounds()


def test_a_reask_count_skips_an_edit_that_keeps_the_title_and_what_follows_the_lookup() -> None:
    s = Story()
    s.create(N1, 1, "edit_between")
    edit = s.entry("update", N1, version=2)  # same title: one note throughout, never zero
    s.now += 5
    gone = s.entry("delete", N1, nonce=K1)
    titles = Titles.build(s.journal)
    around = Bounds(edit.at_ms, gone.at_ms)
    assert titles.reask(T, WS, "TPS", around) == {REASK, ERROR_RESULT}
    assert titles.reask(T, WS, "TPS", replace(around, after=frozenset({gone.id}))) == {REASK}
    assert titles.reask(T, WS, "TPS", Bounds(gone.at_ms + 1, gone.at_ms + 5)) == {ERROR_RESULT}


def cancelled(*, recorded_as_decline: bool) -> tuple[Story, Op, JournalEntry | None]:
    """A cancel answered as cancels are; its state recorded as declined in the journal when
    ``recorded_as_decline`` (a cancel taken as final). Returns the invoke and that entry."""
    s = Story()
    s.create(N1, 1, "cancel_then_accept")
    s.ask(K1, N1, 1, "cancel_then_accept")
    inv = s.invoke(K1, 1, "cancel_then_accept", action="cancel", noteId=None)
    exp = s.ops[-2].value["exp_ms"]
    decline = (
        s.entry("decline", "", nonce=K1, exp_ms=exp, tool="notes_delete")
        if recorded_as_decline
        else None
    )
    s.done(1, "cancel_then_accept", "ok", NOT_DONE)
    return s, inv, decline


def test_a_cancel_that_records_nothing_is_explained() -> None:
    s, _, _ = cancelled(recorded_as_decline=False)
    result = s.check()
    assert valid(result), broken(result)


@pytest.mark.planted(control="test_a_cancel_that_records_nothing_is_explained")
def test_a_decision_no_answer_explains_names_its_kind_and_state() -> None:
    s, inv, decline = cancelled(recorded_as_decline=True)
    assert decline is not None
    v = verdict_of(s.check(), "answers_conform_to_model")
    assert v.status == "invalid"
    assert f"[cancel_then_accept] decline under nonce {K1} that no answer explains" in v.summary
    assert inv.index in v.ops
    assert decline.id in v.journal


def test_model_tables_of_several_partitions_merge_by_kind_answer_and_legal_set() -> None:
    one = duplicates(first_done_before_second=False).check().model
    two = duplicates(first_done_before_second=True).check().model
    merged = merge_tables([one, two])
    rows = merged["duplicate"]
    assert {"answer": "accept", "legal": [EXECUTED], "seen": {EXECUTED: 2}} in rows
    assert {"answer": "accept", "legal": [REPLAY_EXECUTED], "seen": {REPLAY_EXECUTED: 1}} in rows
    assert merge_tables([one]) == one
