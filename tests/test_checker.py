"""The invariant checker on small synthetic histories, and the journal reader on a real store."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import redis

import store.journal as journal_module
from loadgen.check.context import pair_calls
from loadgen.check.invariants import check
from loadgen.check.verdict import CheckResult, Verdict
from loadgen.history import History, Op, OpType
from store.api import ConfirmAction, Confirmation, Note
from store.journal import (
    JournalEntry,
    list_replay_entries,
    read_final_notes,
    read_journal,
    redis_time_ms,
)
from store.notes import NoteStore

T = "acme"
WS = "file:///load/t0/inbox"
ARCHIVE = "file:///load/t0/archive"
ALICE = "alice"
N1, N2, N3 = "n" + "1" * 16, "n" + "2" * 16, "n" + "3" * 16
K1, K2, K9 = "k1" + "a" * 20, "k2" + "b" * 20, "k9" + "c" * 20
EXP = 10_000
GRACE = 60_000
INVALID_STATE = {"code": -32602, "message": "Invalid or expired requestState", "status": 400}
NAMES = {
    "no_double_delete",
    "no_double_execution",
    "executions_trace_to_confirmations",
    "no_mutation_from_refused",
    "ok_deletes_match_journal",
    "info_resolved",
    "no_execution_after_expiry",
    "replay_entries_expire",
    "no_lost_note",
    "before_expiry_honoured",
    "creates_exactly_once",
    "updates_one_step",
    "moves_land",
    "reads_show_every_note_once",
    "setup_answers",
    "roots_respected",
    "quotas_held",
    "bounds_respected",
    "unknown_outcomes_explained",
    "answers_conform_to_model",
    "answers_make_progress",
    "op_records_expire",
    "usage_matches_notes",
    "keyed_retries_marked",
    "legacy_keys_expire",
    "legacy_answers_act_once",
    "legacy_answers_heard",
    "legacy_sessions_bound",
    "oddities_explained",
}


WALL_MS = 1_700_000_000_000
"""The wall-clock time of every op of a synthetic run (one instant: see ``Run._record``)."""


@dataclass
class Run:
    """A synthetic run: history, journal and the store's final state."""

    history: History = field(default_factory=History)
    journal: list[JournalEntry] = field(default_factory=list)
    final: dict[tuple[str, str], str] = field(default_factory=dict)
    replay: dict[tuple[str, str], int] = field(default_factory=dict)
    redis_end_ms: int = 20_000
    _seq: int = 0

    def call(
        self,
        f: str,
        flow: int,
        invoke: dict[str, Any],
        outcome: OpType | None,
        result: dict[str, Any],
        kind: str = "plain",
    ) -> tuple[Op, Op | None]:
        """Record an invoke and (unless ``outcome`` is None) its completion."""
        inv = self._record(flow, "invoke", f, kind, invoke)
        if outcome is None:
            return inv, None
        return inv, self._record(flow, outcome, f, kind, result)

    def _record(self, flow: int, type_: OpType, f: str, kind: str, value: dict[str, Any]) -> Op:
        """One history entry, stamped ``WALL_MS``: these journals carry Redis times of their
        own (creates at 1000, decisions from 5000), so the wall clock must not order the ops
        against them; where it ticked mid-run it did, and the verdict depended on when."""
        op = replace(self.history.record(flow, type_, f, flow, kind, value), time_ms=WALL_MS)
        self.history.ops[-1] = op
        return op

    def create(self, note: str, flow: int, *, at: int = 1000) -> None:
        """A create ok plus its journal entry; the note exists at the end unless removed."""
        inv = {"principal": ALICE, "tenant": T, "workspace": WS, "title": "TPS"}
        self.call("create", flow, inv, "ok", {"deleted": False, "noteId": note})
        self.entry("create", note, at=at, version=1)
        self.final[(T, note)] = WS

    def ask(
        self,
        nonce: str,
        notes: list[str],
        flow: int,
        kind: str = "plain",
        tool: str = "notes_delete",
    ) -> None:
        """Round 1 ok, as the load generator records it after opening the state."""
        inv = {"principal": ALICE, "tenant": T, "workspace": WS, "title": "TPS", "node": 0}
        res = {
            "nonce": nonce,
            "exp_ms": EXP,
            "candidates": [[n, 1] for n in notes],
            "tool": tool,
        }
        self.call("ask", flow, inv, "ok", res, kind)

    def confirm(
        self,
        nonce: str,
        note: str | None,
        flow: int,
        outcome: OpType | None,
        result: dict[str, Any],
        **invoke: Any,
    ) -> tuple[Op, Op | None]:
        """Round 2; ``invoke`` overrides action, confirm, expect, kind, and adds fields."""
        kind = invoke.pop("kind", "plain")
        inv = {
            "principal": ALICE,
            "tenant": T,
            "nonce": nonce,
            "action": "accept",
            "noteId": note,
            "confirm": True,
            "expect": "execute",
            "node": 1,
            **invoke,
        }
        return self.call("confirm", flow, inv, outcome, result, kind)

    def entry(self, op: str, note: str, **fields: Any) -> JournalEntry:
        """Append a journal entry (defaults: tenant acme, workspace WS, version 1)."""
        self._seq += 1
        values: dict[str, Any] = {
            "tenant": T,
            "id": f"{fields.get('at', 5000)}-{self._seq}",
            "op": op,
            "note": note,
            "ws": WS,
            "to": "",
            "title": "TPS",
            "version": 1,
            "principal": ALICE,
            "nonce": "",
            "exp_ms": None,
            "at_ms": fields.pop("at", 5000),
            "tool": "",
        }
        values.update(fields)
        e = JournalEntry(**values)
        self.journal.append(e)
        return e

    def execution(self, op: str, note: str, nonce: str, **fields: Any) -> JournalEntry:
        """A confirm.lua decision."""
        args: dict[str, Any] = {"nonce": nonce, "exp_ms": EXP, "tool": "notes_delete", **fields}
        e = self.entry(op, note, **args)
        if op == "delete":
            self.final.pop((e.tenant, note), None)
        return e

    def result(self) -> CheckResult:
        """Run the checker."""
        return check(
            self.history.ops,
            self.journal,
            self.final,
            self.replay,
            redis_end_ms=self.redis_end_ms,
            grace_ms=GRACE,
        )


def ok(
    deleted: bool, *, replay: bool = False, note: str | None = None, **more: Any
) -> dict[str, Any]:
    """A confirm ok value of notes_delete as loadgen.clients.classify records it."""
    value: dict[str, Any] = {
        "executed": deleted,
        "deleted": deleted,
        "archived": False,
        "isError": False,
        "reask": False,
        "replay": replay,
    }
    if deleted:
        value["op"] = "delete"
    if note is not None:
        value["noteId"] = note
    return value | more


def clean_run() -> Run:
    """A plain delete with a duplicate, a decline followed by a refused accept, a plain move."""
    r = Run()
    r.create(N1, 0)
    r.ask(K1, [N1], 0)
    r.confirm(K1, N1, 0, "ok", ok(True, note=N1))
    r.confirm(K1, N1, 0, "ok", ok(True, replay=True, note=N1))
    r.execution("delete", N1, K1, at=5000)
    r.create(N2, 1)
    r.ask(K2, [N2], 1, "decline")
    r.confirm(K2, None, 1, "ok", ok(False), action="decline", expect="no_mutation")
    r.confirm(K2, N2, 1, "fail", INVALID_STATE, expect="no_mutation")
    r.execution("decline", "", K2, at=5100)
    r.create(N3, 2)
    move = {"principal": ALICE, "tenant": T, "noteId": N3, "from": WS, "to": ARCHIVE}
    r.call("move", 2, move, "ok", {"deleted": False})
    r.entry("move", N3, to=ARCHIVE, version=2, at=5200)
    r.final[(T, N3)] = ARCHIVE
    r.replay[(T, K1)] = EXP + GRACE - r.redis_end_ms - 5
    return r


def verdict_of(result: CheckResult, name: str) -> Verdict:
    return next(v for v in result.verdicts if v.name == name)


def test_a_clean_history_is_valid_on_every_invariant() -> None:
    result = clean_run().result()
    assert {v.name for v in result.verdicts} == NAMES
    assert [v for v in result.verdicts if v.status != "valid"] == []
    assert result.status == "valid"
    assert result.counts["executions"] == 1
    assert result.counts["declines"] == 1
    assert result.counts["replays"] == 1


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_two_deletes_of_one_note_are_a_double_delete_naming_both_entries() -> None:
    r = clean_run()
    r.ask(K9, [N1], 5)
    r.confirm(K9, N1, 5, "ok", ok(True, note=N1))
    first = next(e for e in r.journal if e.op == "delete")
    second = r.execution("delete", N1, K9, at=5300)
    v = verdict_of(r.result(), "no_double_delete")
    assert v.status == "invalid"
    assert set(v.journal) == {first.id, second.id}
    assert v.ops


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_two_decisions_under_one_nonce_are_a_double_execution() -> None:
    r = clean_run()
    extra = r.execution("delete", N2, K2, at=5150)
    v = verdict_of(r.result(), "no_double_execution")
    assert v.status == "invalid"
    assert extra.id in v.journal


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_an_execution_at_or_after_expiry_is_invalid_with_its_ops() -> None:
    r = clean_run()
    note = "n" + "4" * 16
    r.create(note, 6)
    r.ask(K9, [note], 6)
    inv, _ = r.confirm(K9, note, 6, "ok", ok(True, note=note))
    late = r.execution("delete", note, K9, at=EXP)
    v = verdict_of(r.result(), "no_execution_after_expiry")
    assert v.status == "invalid"
    assert late.id in v.journal
    assert inv.index in v.ops


@pytest.mark.parametrize("nonce", ["", K9])
@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_a_deletion_without_a_known_confirmation_is_invalid(nonce: str) -> None:
    r = clean_run()
    rogue = r.execution("delete", N3, nonce, at=5500)
    v = verdict_of(r.result(), "executions_trace_to_confirmations")
    assert v.status == "invalid"
    assert v.journal == (rogue.id,)
    assert "without a confirmation" in v.summary


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_a_deletion_of_a_note_outside_the_candidates_is_invalid() -> None:
    r = clean_run()
    r.ask(K9, [N2], 7)
    r.confirm(K9, N3, 7, "ok", ok(True, note=N3))
    r.execution("delete", N3, K9)
    assert verdict_of(r.result(), "executions_trace_to_confirmations").status == "invalid"


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_an_execution_in_a_declined_only_flow_is_invalid() -> None:
    r = clean_run()
    r.journal = [e for e in r.journal if e.op != "decline"]
    bad = r.execution("delete", N2, K2, at=5100)
    v = verdict_of(r.result(), "no_mutation_from_refused")
    assert v.status == "invalid"
    assert bad.id in v.journal


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_a_refused_confirm_told_it_deleted_is_invalid() -> None:
    r = clean_run()
    note = "n" + "5" * 16
    r.create(note, 8)
    r.ask(K9, [note], 8, "tampered")
    inv, _ = r.confirm(K9, note, 8, "ok", ok(True, note=note), expect="no_mutation")
    r.confirm(K9, note, 8, "ok", ok(True, replay=True, note=note))
    r.execution("delete", note, K9)
    v = verdict_of(r.result(), "no_mutation_from_refused")
    assert v.status == "invalid"
    assert inv.index in v.ops


def test_an_accept_after_a_decline_that_never_landed_is_unknown_not_invalid() -> None:
    r = Run()
    r.create(N2, 1)
    r.ask(K2, [N2], 1, "decline")
    r.confirm(K2, None, 1, "info", {"reason": "timeout"}, action="decline", expect="no_mutation")
    r.confirm(K2, N2, 1, "ok", ok(True, note=N2), expect="no_mutation")
    r.execution("delete", N2, K2)
    result = r.result()
    assert verdict_of(result, "no_mutation_from_refused").status == "unknown"
    assert result.status == "unknown"


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_a_decline_no_answer_asked_for_is_invalid() -> None:
    r = clean_run()
    r.ask(K9, [N3], 9)
    r.execution("decline", "", K9)
    assert verdict_of(r.result(), "no_mutation_from_refused").status == "invalid"


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_an_ok_deletion_missing_from_the_journal_is_invalid() -> None:
    r = clean_run()
    r.journal = [e for e in r.journal if e.op != "delete"]
    v = verdict_of(r.result(), "ok_deletes_match_journal")
    assert v.status == "invalid"
    assert len(v.ops) == 4  # both answers that claimed the deletion, invoke and completion


def archived(note: str, *, replay: bool = False) -> dict[str, Any]:
    """A confirm ok value of an executed notes_archive as loadgen.clients.classify records it."""
    return ok(False, replay=replay, note=note) | {
        "executed": True,
        "op": "archive",
        "archived": True,
    }


def archive_run(*, journaled: bool) -> tuple[Run, str]:
    """The clean run plus an archive confirmed twice (fresh, then a replay); its journal move
    under the nonce is there or not."""
    r = clean_run()
    note = "n" + "7" * 16
    r.create(note, 11)
    r.ask(K9, [note], 11, "archive", tool="notes_archive")
    r.confirm(K9, note, 11, "ok", archived(note), kind="archive")
    r.confirm(K9, note, 11, "ok", archived(note, replay=True), kind="archive")
    if journaled:
        r.execution("move", note, K9, to=ARCHIVE, tool="notes_archive", at=5400)
        r.final[(T, note)] = ARCHIVE
    return r, note


def test_an_archive_told_executed_matches_its_journal_move() -> None:
    r, _ = archive_run(journaled=True)
    result = r.result()
    assert [v for v in result.verdicts if v.status != "valid"] == []
    assert verdict_of(result, "ok_deletes_match_journal").summary.startswith("All 4 executed")


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_an_archive_told_executed_that_the_journal_never_saw_is_invalid() -> None:
    r, note = archive_run(journaled=False)
    v = verdict_of(r.result(), "ok_deletes_match_journal")
    assert v.status == "invalid"
    assert f"told executed {note}; journal has 0" in v.summary


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_an_error_answer_for_a_deletion_that_happened_is_invalid() -> None:
    r = clean_run()
    r.confirm(K1, N1, 0, "ok", ok(False, isError=True))
    v = verdict_of(r.result(), "ok_deletes_match_journal")
    assert v.status == "invalid"
    assert "told not deleted" in v.summary


def test_an_info_confirm_resolved_by_the_journal_is_valid_and_counted() -> None:
    r = clean_run()
    note = "n" + "6" * 16
    r.create(note, 10)
    r.ask(K9, [note], 10, "lost_response")
    r.confirm(K9, note, 10, "info", {"reason": "response lost"}, kind="lost_response")
    r.confirm(K9, note, 10, "ok", ok(True, replay=True, note=note), kind="lost_response")
    r.confirm(K9, note, 10, None, {}, kind="lost_response")  # never completed: info too
    r.execution("delete", note, K9)
    result = r.result()
    assert verdict_of(result, "info_resolved").status == "valid"
    assert result.counts["info_resolved"] == 2
    assert result.counts["info_executed"] == 2
    assert result.counts["info_unknown"] == 0


def test_an_info_confirm_on_an_unknown_nonce_is_unknown() -> None:
    r = clean_run()
    inv, done = r.confirm(K9, N3, 11, "info", {"reason": "timeout"})
    result = r.result()
    v = verdict_of(result, "info_resolved")
    assert v.status == "unknown"
    assert done is not None
    assert v.ops == (inv.index, done.index)
    assert result.status == "unknown"
    assert result.counts["info_unknown"] == 1


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_a_replay_entry_left_past_expiry_plus_grace_is_invalid() -> None:
    r = clean_run()
    r.redis_end_ms = EXP + GRACE + 1
    r.replay[(T, K1)] = 5_000
    v = verdict_of(r.result(), "replay_entries_expire")
    assert v.status == "invalid"
    assert v.ops


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_a_replay_entry_without_ttl_is_invalid_and_of_an_unknown_nonce_unknown() -> None:
    r = clean_run()
    r.replay[(T, K1)] = -1
    assert verdict_of(r.result(), "replay_entries_expire").status == "invalid"
    r = clean_run()
    r.replay[(T, K9)] = 1_000
    assert verdict_of(r.result(), "replay_entries_expire").status == "unknown"


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_a_lost_or_misplaced_note_is_invalid() -> None:
    r = clean_run()
    del r.final[(T, N2)]
    v = verdict_of(r.result(), "no_lost_note")
    assert v.status == "invalid"
    assert N2 in v.summary
    r = clean_run()
    r.final[(T, N3)] = WS  # the journal moved it to the archive
    assert verdict_of(r.result(), "no_lost_note").status == "invalid"
    r = clean_run()
    r.final[(T, N1)] = WS  # deleted in the journal, still there
    assert verdict_of(r.result(), "no_lost_note").status == "invalid"


@pytest.mark.planted(control="test_a_clean_history_is_valid_on_every_invariant")
def test_a_refusal_well_before_expiry_is_invalid_and_without_estimate_skipped() -> None:
    r = clean_run()
    note = "n" + "7" * 16
    r.create(note, 12)
    r.ask(K9, [note], 12, "before_expiry")
    estimate = {"redis_send_ms": EXP - 1_000, "margin_ms": 400, "kind": "before_expiry"}
    inv, _ = r.confirm(K9, note, 12, "fail", INVALID_STATE, **estimate)
    v = verdict_of(r.result(), "before_expiry_honoured")
    assert v.status == "invalid"
    assert inv.index in v.ops
    r = clean_run()
    r.create(note, 12)
    r.ask(K9, [note], 12, "before_expiry")
    r.confirm(K9, note, 12, "fail", INVALID_STATE, kind="before_expiry")
    result = r.result()
    assert verdict_of(result, "before_expiry_honoured").status == "valid"
    assert result.counts["before_expiry_skipped"] == 1


def test_completions_pair_with_their_invokes_per_process() -> None:
    h = History()
    a = h.record(1, "invoke", "confirm", 1, "plain", {"nonce": K1})
    b = h.record(2, "invoke", "confirm", 2, "plain", {"nonce": K2})
    done_b = h.record(2, "ok", "confirm", 2, "plain", {"deleted": True})
    calls = pair_calls(h.ops)
    assert [(c.invoke, c.done) for c in calls] == [(a, None), (b, done_b)]
    assert calls[0].outcome == "info"


async def test_the_journal_reader_sees_every_mutation_note_and_replay_entry(
    store: NoteStore, redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "XRANGE_CHUNK", 2)  # exercise the chunked XRANGE
    run = Run()
    notes = []
    for flow in range(3):
        note = await store.create(T, WS, "TPS", "body", ALICE)
        created = {"principal": ALICE, "tenant": T, "workspace": WS, "title": "TPS"}
        run.call("create", flow, created, "ok", {"noteId": note.note_id})
        notes.append(note)
    other = await store.create("beta", WS, "TPS", "body", "bob")
    n1, n2, n3 = notes
    assert (await store.move(T, n3.note_id, WS, ARCHIVE, ALICE)).status == "moved"
    move = {"principal": ALICE, "tenant": T, "noteId": n3.note_id, "from": WS, "to": ARCHIVE}
    run.call("move", 2, move, "ok", {})
    exp = await store.redis_time_ms() + 10_000
    answers: list[tuple[str, Note, ConfirmAction]] = [(K1, n1, "accept"), (K2, n2, "decline")]
    for flow, (nonce, note, action) in enumerate(answers):
        ask = {"principal": ALICE, "tenant": T, "workspace": WS, "title": "TPS"}
        cands = [[note.note_id, 1]]
        state = {"nonce": nonce, "exp_ms": exp, "candidates": cands, "tool": "notes_delete"}
        run.call("ask", flow, ask, "ok", state)
        c = Confirmation(
            T, nonce, action, action, exp, note.note_id, 1, "TPS", WS, ALICE, "notes_delete"
        )
        for _ in range(2):  # the second answer is a replay
            out = await store.confirm(c)
            inv: dict[str, Any] = {"principal": ALICE, "tenant": T, "nonce": nonce}
            inv |= {"action": action}
            expect = "execute" if action == "accept" else "no_mutation"
            inv |= {"noteId": note.note_id, "confirm": True, "expect": expect}
            deleted = out.op == "delete"
            res = ok(deleted, replay=out.status == "replay", note=note.note_id if deleted else None)
            run.call("confirm", flow, inv, "ok", res)

    sync = redis.Redis.from_url(redis_url)
    text = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        tenants = [T, "beta"]
        journal = read_journal(sync, key_prefix, tenants)
        assert read_journal(text, key_prefix, tenants) == journal
        final = read_final_notes(sync, key_prefix, tenants)
        replay = list_replay_entries(text, key_prefix, tenants)
        end = redis_time_ms(sync)
    finally:
        sync.close()
        text.close()

    acme = [e for e in journal if e.tenant == T]
    assert [e.op for e in acme] == ["create", "create", "create", "move", "delete", "decline"]
    assert [e.tenant for e in journal].count("beta") == 1
    assert [e.at_ms for e in journal] == sorted(e.at_ms for e in journal)
    move_e, delete_e, decline_e = acme[3:]
    assert (move_e.note, move_e.to, move_e.nonce, move_e.version) == (n3.note_id, ARCHIVE, "", 2)
    assert dataclasses.astuple(delete_e)[2:] == (
        "delete",
        n1.note_id,
        WS,
        "",
        "TPS",
        1,
        ALICE,
        K1,
        exp,
        delete_e.at_ms,
        "notes_delete",
        "",  # a confirmation's entry carries no write operation id
    )
    assert delete_e.at_ms < exp
    assert (decline_e.nonce, decline_e.note, decline_e.exp_ms) == (K2, "", exp)
    assert final == {(T, n2.note_id): WS, (T, n3.note_id): ARCHIVE, ("beta", other.note_id): WS}
    assert set(replay) == {(T, K1), (T, K2)}
    assert all(0 < ttl <= 10_000 + store.replay_grace_ms for ttl in replay.values())

    result = check(
        run.history.ops, journal, final, replay, redis_end_ms=end, grace_ms=store.replay_grace_ms
    )
    assert [v for v in result.verdicts if v.status != "valid"] == []
