"""``serve --demo --redis URL`` seeds the demo fixture once: a second start adds nothing, a demo
note a walkthrough deleted comes back, and the line it prints says how to remove the fixture."""

from __future__ import annotations

from cluster.demo import ALICE_ARCHIVE, ALICE_NOTES, DEMO_NOTES, DEMO_TENANT
from cluster.stores import demo_removal_hint, seed_demo
from store.notes import NoteStore


async def _tps_reports(store: NoteStore) -> list[int]:
    found = await store.find(DEMO_TENANT, ALICE_NOTES, "TPS report")
    return [n.created_ms for n in found.notes]


async def test_seeding_twice_leaves_one_fixture_and_restores_a_deleted_demo_note(
    store: NoteStore,
) -> None:
    assert await seed_demo(store, only_missing=True) == len(DEMO_NOTES)
    assert await seed_demo(store, only_missing=True) == 0
    years = await _tps_reports(store)
    assert len(years) == 3  # the walkthrough's "three candidates"

    first = (await store.find(DEMO_TENANT, ALICE_NOTES, "TPS report")).notes[0]
    await store.move(DEMO_TENANT, first.note_id, ALICE_NOTES, ALICE_ARCHIVE, "alice")
    assert len(await _tps_reports(store)) == 2
    assert await seed_demo(store, only_missing=True) == 1
    assert sorted(await _tps_reports(store)) == sorted(years)


def test_the_removal_hint_names_the_demo_keys_only_and_never_a_password() -> None:
    hint = demo_removal_hint("redis://127.0.0.1:6379/0", "nc")
    assert "--scan --pattern 'nc:{t:demo}:*'" in hint
    assert "FLUSH" not in hint.upper()
    hidden = demo_removal_hint("redis://:s3cret@127.0.0.1:6379/0", "nc")
    assert "s3cret" not in hidden
