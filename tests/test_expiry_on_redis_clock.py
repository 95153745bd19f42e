"""The expiry boundary on a real Redis, judged against Redis' own clock, at the millisecond.

Layer: tests. ``confirm.lua`` refuses an answer when ``now >= exp`` on the Redis server clock
(``TIME``). A real server's clock cannot be set (the embedded store's is frozen in
``tests/test_delete_flow.py``), so these tests aim at the boundary instead: they set ``exp`` a few
milliseconds ahead of ``TIME``, wait on the Redis clock until just before it, then send answers
back to back until the script's clock has passed it. The script returns the ``now`` it decided
on (and writes it to the journal as ``at``); each outcome must be the one that reading requires:
honoured (executed, declined, cancelled) when ``now < exp``, refused (``expired``, nothing
written) when ``now >= exp``. Rounds repeat (bounded) until answers decided at ``exp - 1`` and at
``exp`` were both seen (and an accept executed and one refused), so the test proves the boundary
and not only the far sides of it.

Runs on the suite's own ``redis-server`` always, and in prefix mode on the user's Redis when
``NOTES_CLUSTER_TEST_REDIS`` names one.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import redis

from store.api import Confirmation, ConfirmOutcome
from store.client_factory import redis_client
from store.journal import read_journal
from store.notes import NoteStore
from tests.conftest import (
    TEST_REDIS_ENV,
    USER_REDIS_URL,
    delete_prefix,
    new_prefix,
    require_real_redis,
    suite_redis_url,
)

TENANT = "acme"
WS = "notes://acme/boundary"
LEAD_MS = 25
"""How far ahead of Redis' TIME a round's expiry is set: room to seed the round's answers."""
AIM_MS = (1, 2, 3, 4)
"""Round k starts answering when Redis' clock reads ``exp - AIM_MS[k % 4]``: on a loaded machine
one answer can take a few ms, so the rounds start at different distances from the boundary."""
PAST_MS = 2
"""A round stops once an answer was decided at ``exp + PAST_MS`` or later."""
MAX_ROUNDS = 600
"""Rounds before the test gives up on seeing both sides of the boundary (each takes ~30 ms; on a
loaded machine a round may see only one side of it)."""
MAX_ANSWERS_PER_ROUND = 400
NOTES_AT_HAND = 8
"""Notes present before each round (an executed accept uses one up; an expired one does not)."""
ACTIONS = ("accept", "decline", "cancel")


@dataclass(frozen=True)
class RealStore:
    """A NoteStore on a real Redis, and that Redis' URL (for a synchronous reader beside it)."""

    store: NoteStore
    url: str


@pytest.fixture(params=["own", "shared"])
async def real_store(request: pytest.FixtureRequest) -> AsyncIterator[RealStore]:
    """A NoteStore on the suite's own server, then on the user's Redis (prefix mode)."""
    if request.param == "shared" and USER_REDIS_URL is None:
        pytest.skip(f"{TEST_REDIS_ENV} is not set: the suite's own server covers it")
    url = suite_redis_url() if request.param == "own" else require_real_redis()
    prefix = new_prefix()
    try:
        async with redis_client(url) as client:
            yield RealStore(NoteStore(client, prefix=prefix, replay_grace_ms=1_000), url)
    finally:
        delete_prefix(url, prefix)


@dataclass
class Answer:
    """One answer sent in a round and what the script decided."""

    confirmation: Confirmation
    outcome: ConfirmOutcome


@dataclass
class Round:
    """The answers of one round, all against one expiry."""

    exp_ms: int
    answers: list[Answer] = field(default_factory=list)

    def decided_at(self, offset: int) -> list[Answer]:
        """The answers the script decided at ``exp + offset`` by its own clock."""
        return [a for a in self.answers if a.outcome.redis_now_ms == self.exp_ms + offset]


def _confirmation(action: str, note_id: str, exp_ms: int) -> Confirmation:
    return Confirmation(
        tenant=TENANT,
        nonce=secrets.token_hex(11),
        action=action,  # type: ignore[arg-type]
        answer_digest=f"d-{action}",
        exp_ms=exp_ms,
        note_id=note_id,
        expected_version=1,
        title="boundary",
        workspace=WS,
        principal="alice",
        tool="notes_delete",
    )


async def _round(store: NoteStore, notes: list[str], k: int) -> Round:
    """Aim one round's answers at an expiry a few ms ahead of Redis' clock; ``notes`` are the
    notes still present (an executed accept removes its own)."""
    exp = await store.redis_time_ms() + LEAD_MS
    played = Round(exp)
    while await store.redis_time_ms() < exp - AIM_MS[k % len(AIM_MS)]:  # the Redis clock
        pass
    for i in range(MAX_ANSWERS_PER_ROUND):
        assert notes, "the round ran out of notes to delete"
        action = ACTIONS[(i + k) % len(ACTIONS)]
        c = _confirmation(action, notes[-1], exp)
        outcome = await store.confirm(c)
        if outcome.status == "executed":
            notes.pop()
        played.answers.append(Answer(c, outcome))
        if outcome.redis_now_ms >= exp + PAST_MS:
            break
    return played


def _assert_each_outcome_is_the_one_its_clock_reading_requires(played: Round) -> None:
    for a in played.answers:
        now, action = a.outcome.redis_now_ms, a.confirmation.action
        where = f"{action} decided at exp{now - played.exp_ms:+d} ms: {a.outcome}"
        if now >= played.exp_ms:
            assert a.outcome.status == "expired", where
            assert a.outcome.recorded is None, where
        else:
            wanted = {"accept": "executed", "decline": "declined", "cancel": "cancelled"}
            assert a.outcome.status == wanted[action], where


def _assert_the_store_shows_only_what_was_honoured(real: RealStore, rounds: list[Round]) -> None:
    """The journal holds exactly the honoured accepts and declines, each stamped with the very
    ``now`` the script answered with; no refused answer left a replay entry."""
    answers = [a for r in rounds for a in r.answers]
    recorded = {
        a.confirmation.nonce: a for a in answers if a.outcome.status in ("executed", "declined")
    }
    with redis.Redis.from_url(real.url) as sync:
        journal = read_journal(sync, real.store.prefix, [TENANT])
        stamped = {e.nonce: e for e in journal if e.op in ("delete", "decline")}
        assert set(stamped) == set(recorded)
        for nonce, e in stamped.items():
            a = recorded[nonce]
            assert e.at_ms == a.outcome.redis_now_ms < a.confirmation.exp_ms, (e, a.outcome)
            assert e.exp_ms == a.confirmation.exp_ms
        refused = [a for a in answers if a.outcome.status == "expired"]
        keys = real.store.keys(TENANT)
        assert not any(sync.exists(keys.replay(a.confirmation.nonce)) for a in refused)


async def test_answers_aimed_at_the_expiry_by_redis_time_are_honoured_before_it_and_refused_from_it(
    real_store: RealStore,
) -> None:
    store = real_store.store
    rounds: list[Round] = []
    notes: list[str] = []
    for k in range(MAX_ROUNDS):
        while len(notes) < NOTES_AT_HAND:
            notes.append((await store.create(TENANT, WS, "boundary", f"r{k}", "alice")).note_id)
        played = await _round(store, notes, k)
        rounds.append(played)
        _assert_each_outcome_is_the_one_its_clock_reading_requires(played)
        before = [a for r in rounds for a in r.decided_at(-1)]
        at = [a for r in rounds for a in r.decided_at(0)]
        statuses = {a.outcome.status for r in rounds for a in r.answers}
        if before and at and {"executed", "expired"} <= statuses:
            break
    else:
        pytest.fail(f"no answers decided at exp - 1 and at exp in {MAX_ROUNDS} rounds")
    _assert_the_store_shows_only_what_was_honoured(real_store, rounds)
    print(
        f"{len(rounds)} round(s), {sum(len(r.answers) for r in rounds)} answers; decided at "
        f"exp-1: {sorted(a.confirmation.action for a in before)}, "
        f"at exp: {sorted(a.confirmation.action for a in at)}"
    )
