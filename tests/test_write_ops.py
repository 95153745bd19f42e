"""Every write script is safe to run twice: one operation id, one write, the same reply.

Layer: tests. The create, update, move and setup scripts record their operation id in
the same atomic step as their write (``store/scripts/op_record.lua``), and ``confirm.lua``
records the store call under the state's nonce, so the store may send a script again after a
lost reply. Run on the embedded store and on the test Redis (``conftest.store``): the second run
writes nothing (one journal entry, one note, one version step) and answers what the first did;
another request under the same operation id is told it is a replay; another operation under it
is refused; the record expires after its TTL.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from store.api import Confirmation, IdempotencyConflict, WriteOp
from store.client_factory import sync_client
from store.journal import read_journal
from store.notes import NoteStore
from tests.conftest import raw

T = "acme"
WS = "file:///w/inbox"
OTHER = "file:///w/archive"


def op(tag: str, digest: str = "", ttl_ms: int = 60_000) -> WriteOp:
    return WriteOp(f"k{tag:0<20}", digest, ttl_ms)


def journal(store: NoteStore, redis_url: str) -> list[Any]:
    sync = sync_client(redis_url)
    try:
        return read_journal(sync, store.prefix, [T])
    finally:
        sync.close()


async def run_twice(store: NoteStore, name: str, keys: list[str], args: list[Any]) -> list[Any]:
    """The raw replies of two runs of one script with the same arguments (one store call)."""
    return [await store._run(name, keys, args), await store._run(name, keys, args)]


async def test_a_create_run_twice_with_one_operation_writes_one_note_and_answers_the_same(
    store: NoteStore, redis_url: str
) -> None:
    k = store.keys(T)
    keys = [k.note("n" + "1" * 16), k.workspace(WS), k.title(WS, "A"), k.journal, k.op("r" * 20)]
    keys += [k.usage, k.workspace_usage(WS), k.writes, k.lookalikes(WS, "A")]
    args: list[str | int] = ["n" + "1" * 16, "A", "body", WS, "alice", 1000, 0, 0, "r" * 20]
    args += ["", "call1", 60_000]
    args += [1, 100, 1]  # alice's quotas: one note, 100 bytes, one note in WS
    first, second = await run_twice(store, "create", keys, args)
    assert first[0] == "created"
    # The same reply but its clock (field 8, now_ms): not a replay (field 9), same call.
    assert first[:7] == second[:7]
    assert second[8] == "0"
    assert [e.note for e in journal(store, redis_url) if e.op == "create"] == ["n" + "1" * 16]
    assert (await store.list(T, WS)).notes[0].note_id == "n" + "1" * 16
    # Another store call with the same operation (a keyed retry) is told it replays.
    other = await store._run("create", keys, [*args[:10], "call2", *args[11:]])
    assert other[:7] == first[:7]
    assert other[8] == "1"
    # The quotas were charged once, in the first run: a full quota does not refuse the replays.
    assert await raw(store).hgetall(k.usage) == {"n:alice": "1", "b:alice": "5"}
    assert await raw(store).hgetall(k.workspace_usage(WS)) == {"alice": "1"}


async def test_create_with_one_operation_twice_is_one_note_and_the_second_is_a_replay(
    store: NoteStore, redis_url: str
) -> None:
    first = await store.create(T, WS, "Twice", "b", "alice", op=op("create"))
    second = await store.create(T, WS, "Twice", "b", "alice", op=op("create"))
    assert second == first
    assert (first.replayed, second.replayed) == (False, True)
    assert [n.note_id for n in (await store.find(T, WS, "Twice")).notes] == [first.note_id]
    entries = [e for e in journal(store, redis_url) if e.op == "create"]
    assert [(e.note, e.op_id) for e in entries] == [(first.note_id, op("create").op_id)]


async def test_update_with_one_operation_twice_is_one_version_step(
    store: NoteStore, redis_url: str
) -> None:
    note = await store.create(T, WS, "Edit", "b", "alice")
    first = await store.update(T, note, "Edit", "b2", "alice", op=op("update"))
    second = await store.update(T, note, "Edit", "b2", "alice", op=op("update"))
    assert first.note is not None
    assert first.note.version == 2
    assert second.note == first.note
    assert (first.replayed, second.replayed) == (False, True)
    now = await store.get(T, note.note_id)
    assert now is not None
    assert (now.version, now.body) == (2, "b2")
    assert [e.version for e in journal(store, redis_url) if e.op == "update"] == [2]


async def test_move_with_one_operation_twice_reports_the_move_once(
    store: NoteStore, redis_url: str
) -> None:
    note = await store.create(T, WS, "Move", "b", "alice")
    first = await store.move(T, note.note_id, WS, OTHER, "alice", op=op("move"))
    # The note is no longer in the source: the record, not the script, answers.
    second = await store.move(T, note.note_id, WS, OTHER, "alice", op=op("move"))
    assert first.status == second.status == "moved"
    assert second.note == first.note
    assert (first.replayed, second.replayed) == (False, True)
    assert [(e.note, e.to) for e in journal(store, redis_url) if e.op == "move"] == [
        (note.note_id, OTHER)
    ]
    # Without a record the same move is refused as before: the note is elsewhere.
    third = await store.move(T, note.note_id, WS, OTHER, "alice")
    assert (third.status, third.note) == ("elsewhere", None)


async def test_setup_completion_run_twice_by_one_call_answers_completed_both_times(
    store: NoteStore, redis_url: str
) -> None:
    k = store.keys(T)
    exp = await store.redis_time_ms() + 60_000
    keys = [k.setup("nonce1"), k.op("r" * 24), k.journal]
    args = ["alice", exp, 1000, "call1", 60_000, "nonce1", 1000]
    first, second = await run_twice(store, "setup", keys, args)
    assert (first[0], first[1]) == (second[0], second[1]) == ("completed", "alice")
    # A later completion (another call, another operation) finds the link used.
    later = await store.complete_setup(T, "nonce1", "alice", exp)
    assert (later.status, later.principal) == ("used", "alice")
    assert await store.setup_completed_by(T, "nonce1") == "alice"
    setups = [e for e in journal(store, redis_url) if e.op == "setup"]
    assert [(e.principal, e.nonce, e.exp_ms, e.tool) for e in setups] == [
        ("alice", "nonce1", exp, "notes_setup")
    ]


async def test_a_confirmation_run_twice_by_one_call_is_executed_twice_and_deletes_once(
    store: NoteStore, redis_url: str
) -> None:
    note = await store.create(T, WS, "Gone", "b", "alice")
    await store.create(T, WS, "Stays", "bb", "alice")
    c = Confirmation(
        tenant=T,
        nonce="nonce-confirm",
        action="accept",
        answer_digest="d1",
        exp_ms=await store.redis_time_ms() + 60_000,
        note_id=note.note_id,
        expected_version=1,
        title="Gone",
        workspace=WS,
        principal="alice",
        tool="notes_delete",
    )
    k = store.keys(T)
    keys = [
        k.replay(c.nonce),
        k.note(note.note_id),
        k.workspace(WS),
        k.title(WS, "Gone"),
        k.journal,
        k.workspace(WS),
        k.title(WS, "Gone"),
        k.usage,
        k.workspace_usage(WS),
        k.workspace_usage(WS),
        k.lookalikes(WS, "Gone"),
        k.lookalikes(WS, "Gone"),
    ]
    args: list[Any] = ["accept", "d1", c.exp_ms, 1000, note.note_id, 1, WS, "alice", c.nonce]
    args += ["delete", "", 1000, "notes_delete", 0, 0, "call1", 0]
    first, second = await run_twice(store, "confirm", keys, args)
    assert (first[0], first[1]) == (second[0], second[1]) == ("executed", f"deleted:{note.note_id}")
    # Another call with the same answer is the recorded outcome, as a replay.
    assert (await store.confirm(c)).status == "replay"
    assert [e.note for e in journal(store, redis_url) if e.op == "delete"] == [note.note_id]
    # The owner's counts dropped once: "Stays" is still counted.
    assert await raw(store).hgetall(k.usage) == {"n:alice": "1", "b:alice": "7"}
    assert await raw(store).hgetall(k.workspace_usage(WS)) == {"alice": "1"}


async def test_one_operation_id_with_another_digest_is_refused_and_writes_nothing(
    store: NoteStore, redis_url: str
) -> None:
    note = await store.create(T, WS, "Keyed", "b", "alice", op=op("conflict", "digest-a"))
    with pytest.raises(IdempotencyConflict):
        await store.create(T, WS, "Other", "b", "alice", op=op("conflict", "digest-b"))
    with pytest.raises(IdempotencyConflict):
        await store.update(T, note, "Keyed", "x", "alice", op=op("conflict", "digest-b"))
    assert (await store.find(T, WS, "Other")).notes == ()
    unchanged = await store.get(T, note.note_id)
    assert unchanged is not None
    assert unchanged.version == 1
    assert [e.op for e in journal(store, redis_url)] == ["create"]
    recorded = await store.recorded_write(T, op("conflict").op_id)
    assert recorded is not None
    assert (recorded.status, recorded.digest, recorded.note.note_id) == (
        "created",
        "digest-a",
        note.note_id,
    )


async def test_an_operation_record_expires_after_its_ttl_and_the_write_runs_again(
    store: NoteStore,
) -> None:
    short = op("expiring", ttl_ms=50)
    first = await store.create(T, WS, "Short", "b", "alice", op=short)
    key = store.keys(T).op(short.op_id)
    with trio.fail_after(10):
        while await raw(store).exists([key]):  # noqa: ASYNC110 - a Redis TTL, not ours
            await trio.sleep(0.02)
    assert await store.recorded_write(T, short.op_id) is None
    second = await store.create(T, WS, "Short", "b", "alice", op=short)
    assert second.note_id != first.note_id
    assert not second.replayed


async def test_a_write_without_an_operation_keeps_its_record_for_a_minute_only(
    store: NoteStore,
) -> None:
    await store.create(T, WS, "Unkeyed", "b", "alice")
    records = [
        key async for key in raw(store).scan_iter(match=f"{store.keys(T).base}:op:*", count=1000)
    ]
    assert len(records) == 1
    ttl = await raw(store).pttl(records[0])
    assert 0 < ttl <= 60_000
