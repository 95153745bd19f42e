from store.api import Confirmation
from store.notes import NoteStore

WS = "file:///Users/alice/Documents/Notes"


async def delete_once(store: NoteStore, nonce: str = "n" * 22) -> str:
    """Create a note, find it, confirm its deletion twice: executed, then the replay; the note
    is gone. Its id (shared by every client's store test)."""
    note = await store.create("acme", WS, "TPS report", "body", "alice")
    snap = await store.find("acme", WS, "TPS report")
    assert [n.note_id for n in snap.notes] == [note.note_id]
    c = Confirmation(
        tenant="acme",
        nonce=nonce,
        action="accept",
        answer_digest="d1",
        exp_ms=snap.redis_now_ms + 10_000,
        note_id=note.note_id,
        expected_version=1,
        title="TPS report",
        workspace=WS,
        principal="alice",
        tool="notes_delete",
    )
    first = await store.confirm(c)
    again = await store.confirm(c)
    assert first.status == "executed"
    assert again.status == "replay"
    assert (again.op, again.note_id) == (first.op, first.note_id) == ("delete", note.note_id)
    assert (await store.find("acme", WS, "TPS report")).notes == ()
    return note.note_id


async def test_create_find_and_confirm_delete_once(store: NoteStore) -> None:
    await delete_once(store)
