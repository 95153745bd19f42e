"""The legacy verdicts (``loadgen.check.legacy``) on synthetic histories and session facts.

Layer: tests. Each invariant is shown one history or one store fact that breaks it (INVALID,
naming it) beside the same run without the break (VALID), and the session keyspace is read from
the suite's own Redis (``store.session_facts``).
"""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.check.context import build_context
from loadgen.check.legacy import (
    LegacyFacts,
    check_legacy_answers_heard,
    check_legacy_answers_once,
    check_legacy_keys,
    check_legacy_sessions_bound,
)
from loadgen.check.limits import CLOCK_SLACK_MS, Limits
from loadgen.check.verdict import Verdict
from loadgen.history import History
from store.client_factory import sync_client
from store.journal import JournalEntry
from store.session_facts import read_session_facts
from store.sessions import principal_digest
from tests.conftest import delete_prefix, new_prefix, suite_redis_url

T = "load0"
ALICE, BOB = "u0a", "u0b"
SID, RID, NONCE = "s" * 32, "nc-" + "r" * 22, "n" + "1" * 16
EXP = 10_000
LIMITS = Limits(
    2, 2_000, legacy_session_ttl_ms=3_600_000, legacy_marker_ttl_ms=62_000, sessions_per_principal=4
)


def history(*, posted_ms: int | None = None, no_answer: bool = False) -> History:
    """One legacy flow: its ask, and one confirm posted (202) at ``posted_ms``."""
    h = History()
    ask = {"principal": ALICE, "tenant": T, "workspace": "w", "title": "t", "session": SID}
    sent = h.record(0, "invoke", "ask", 0, "legacy_plain", ask)
    facts = {"nonce": NONCE, "exp_ms": EXP, "candidates": [["a", 1]], "tool": "notes_delete"}
    h.record(0, "ok", "ask", 0, "legacy_plain", facts, sent.index)
    confirm = {
        "principal": ALICE,
        "tenant": T,
        "nonce": NONCE,
        "action": "accept",
        "noteId": "a",
        "confirm": True,
        "expect": "execute",
        "node": 1,
        "stream_node": 0,
        "session": SID,
        "request": RID,
    }
    sent = h.record(0, "invoke", "confirm", 0, "legacy_plain", confirm)
    value: dict[str, Any] = {"executed": False, "deleted": False, "isError": True}
    value |= {"reask": False, "replay": False}
    if posted_ms is not None:
        value["posted_redis_ms"] = posted_ms
    if no_answer:
        value["no_answer"] = True
    h.record(0, "ok", "confirm", 0, "legacy_plain", value, sent.index)
    return h


def context(h: History, journal: list[JournalEntry] | None = None) -> Any:
    return build_context(h.ops, journal or [], {}, {}, 20_000, 60_000)


def facts(**parts: Any) -> LegacyFacts:
    return LegacyFacts.from_json(parts)


def named(v: Verdict, status: str) -> None:
    assert v.status == status, v.summary


def test_a_marker_or_a_session_without_a_ttl_is_invalid() -> None:
    ctx = context(history(posted_ms=1_000))
    good = facts(markers={SID: {RID: ["answered", 50_000]}}, sessions={SID: {"ttl": 9}})
    named(check_legacy_keys(ctx, good, LIMITS), "valid")
    kept = facts(markers={SID: {RID: ["answered", -1]}})
    v = check_legacy_keys(ctx, kept, LIMITS)
    named(v, "invalid")
    assert v.name == "legacy_keys_expire"
    named(check_legacy_keys(ctx, facts(sessions={SID: {"ttl": -1}}), LIMITS), "invalid")
    long = facts(inboxes={SID: {"ttl": 3_600_001, "answers": {}}})
    named(check_legacy_keys(ctx, long, LIMITS), "invalid")


def test_a_principal_past_its_session_cap_is_invalid() -> None:
    ctx = context(history(posted_ms=1_000))
    named(check_legacy_keys(ctx, facts(principals={ALICE: {"ttl": -1, "n": 4}}), LIMITS), "valid")
    over = facts(principals={ALICE: {"ttl": -1, "n": 5}})
    named(check_legacy_keys(ctx, over, LIMITS), "invalid")


def test_an_answer_taken_whose_marker_reads_open_is_invalid() -> None:
    ctx = context(history(posted_ms=1_000))
    answered = facts(markers={SID: {RID: ["answered", 50_000]}})
    named(check_legacy_answers_once(ctx, answered), "valid")
    v = check_legacy_answers_once(ctx, facts(markers={SID: {RID: ["open", 50_000]}}))
    named(v, "invalid")
    assert v.ops
    twice = facts(inboxes={SID: {"ttl": 1, "answers": {RID: 2}}})
    named(check_legacy_answers_once(ctx, twice), "invalid")


def test_a_dropped_answer_is_judged_when_it_was_posted() -> None:
    early = EXP - CLOCK_SLACK_MS - 1
    named(check_legacy_answers_heard(context(history(posted_ms=early))), "valid")
    v = check_legacy_answers_heard(context(history(posted_ms=early, no_answer=True)))
    named(v, "invalid")
    assert v.ops
    late = EXP - CLOCK_SLACK_MS + 1
    named(check_legacy_answers_heard(context(history(posted_ms=late, no_answer=True))), "valid")


@pytest.mark.parametrize("misuse", ["foreign", "stale"])
def test_a_misused_session_must_be_refused_and_create_nothing(misuse: str) -> None:
    def run(outcome: str, value: dict[str, Any], created: bool) -> Verdict:
        h = History()
        inv = {"principal": ALICE, "tenant": T, "workspace": "w", "title": "t misused"}
        inv |= {"session": SID, "misuse": misuse, "owner": BOB}
        sent = h.record(0, "invoke", "session", 0, "legacy_foreign_session", inv)
        h.record(0, outcome, "session", 0, "legacy_foreign_session", value, sent.index)  # type: ignore[arg-type]
        journal = []
        if created:
            entry = ("1-1", "create", "a", "w", "", "t misused", 1, ALICE, "", None, 1, "")
            journal.append(JournalEntry(T, *entry))
        return check_legacy_sessions_bound(context(h, journal))

    named(run("fail", {"status": 404}, False), "valid")
    named(run("ok", {"isError": False, "status": 200}, False), "invalid")
    named(run("fail", {"status": 404}, True), "invalid")


def test_the_session_keyspace_is_read_with_its_ttls() -> None:
    url, prefix = suite_redis_url(), new_prefix()
    client = sync_client(url, decode_responses=True)
    base = f"{prefix}:{{s:{SID}}}"
    try:
        client.hset(f"{base}:session", "principal", ALICE)
        client.pexpire(f"{base}:session", 5000)
        client.set(f"{base}:req:{RID}", "answered")
        for _ in range(2):
            client.xadd(f"{base}:inbox", {"kind": "answer", "rid": RID, "body": "{}"})
        client.zadd(f"{prefix}:{{p:{principal_digest(ALICE)}}}:sessions", {SID: 1})
        found = LegacyFacts.from_json(read_session_facts(client, prefix, [ALICE, BOB]))
    finally:
        client.close()
        delete_prefix(url, prefix)
    assert found.sessions[SID]["principal"] == ALICE
    assert 0 < found.sessions[SID]["ttl"] <= 5000
    assert found.markers[SID][RID] == ["answered", -1]
    assert found.inboxes[SID] == {"ttl": -1, "answers": {RID: 2}}
    assert found.principals == {ALICE: {"ttl": -1, "n": 1}}
