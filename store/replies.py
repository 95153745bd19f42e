"""What the store's Lua scripts answer, read into the store's types: the one place that knows
each reply's fields and the words a script uses for a status, a recorded decision or a quota.

Layer: store. Pure: no Redis, no I/O (``store.notes`` calls the scripts and hands their replies
here).
"""

from __future__ import annotations

from typing import Any, get_args

from store.api import (
    ConfirmOutcome,
    ConfirmStatus,
    IdempotencyConflict,
    LookalikeTitle,
    Note,
    NoteHead,
    Quota,
    QuotaExceeded,
    QuotaName,
    SetupStatus,
    StoreOp,
    StoreUnavailable,
)

CONFIRM_STATUSES: frozenset[str] = frozenset(get_args(ConfirmStatus))
SETUP_STATUSES: frozenset[str] = frozenset(get_args(SetupStatus))
RECORDED_OPS: dict[str, StoreOp] = {"deleted": "delete", "moved": "move"}
"""How ``confirm.lua`` words an executed operation in its recorded outcome ``<word>:<note id>``."""
QUOTA_STATUSES: dict[str, QuotaName] = {
    "quota_notes": "notes",
    "quota_bytes": "bytes",
    "quota_share": "share",
    "quota_writes": "writes",
}
"""How the scripts word a quota refusal, and the quota it names."""


def parse_confirm_reply(reply: list[Any]) -> ConfirmOutcome:
    """``confirm.lua``'s reply ``{status, recorded outcome, now_ms}`` as a typed outcome: the one
    place that reads the recorded strings (``deleted:<id>``, ``moved:<id>``, ``declined``, '')."""
    status, recorded, now = reply
    st, rec = str(status), str(recorded or "")
    if st not in CONFIRM_STATUSES:
        raise StoreUnavailable(f"confirm: unexpected status {st!r}")
    confirm_status: ConfirmStatus = st  # type: ignore[assignment]
    if st == "full" and rec in ("share", "writes"):
        quota: QuotaName = "share" if rec == "share" else "writes"
        return ConfirmOutcome(confirm_status, None, None, int(now), quota=quota)
    if rec in ("", "declined"):
        return ConfirmOutcome(confirm_status, None, None, int(now))
    word, sep, note_id = rec.partition(":")
    op = RECORDED_OPS.get(word)
    if op is None or not sep or not note_id:
        raise StoreUnavailable(f"confirm: unexpected recorded outcome {rec!r}")
    return ConfirmOutcome(confirm_status, op, note_id, int(now))


def quota_exceeded(status: str, used: int, quota: Quota) -> QuotaExceeded:
    """The refusal a script's ``quota_*`` status and count amount to."""
    name = QUOTA_STATUSES[status]
    limit = {
        "notes": quota.notes,
        "bytes": quota.bytes,
        "share": quota.workspace_notes,
        "writes": quota.writes,
    }[name]
    return QuotaExceeded(name, used, limit)


WRITE_REPLY_FIELDS = 9
"""Fields of a note write's reply (``op_note_reply`` in ``scripts/op_record.lua``)."""


def parse_write_reply(reply: list[Any]) -> tuple[str, NoteHead | None, int, bool]:
    """A create, update or move reply as (status, note after the write or None, now_ms,
    replayed). IdempotencyConflict for ``conflict``. For a ``quota_*`` refusal the reply's
    version field is what the note's owner holds now (the caller reads it from the reply)."""
    if len(reply) != WRITE_REPLY_FIELDS:
        raise StoreUnavailable(f"write: unexpected reply of {len(reply)} fields")
    status, note_id, title, ws, version, created, updated, now, replayed = reply
    st = str(status)
    if st == "conflict":
        raise IdempotencyConflict("the operation id was recorded for another operation")
    if st == "lookalike":
        raise LookalikeTitle(str(title))
    head = None
    if note_id:
        head = NoteHead(str(note_id), str(title), str(ws), int(version), int(created), int(updated))
    return st, head, int(now), str(replayed) == "1"


HEAD_FIELDS = 6
"""Fields of a ``NoteHead`` as ``read_notes.lua`` returns them: id, title, workspace, version,
created_ms, updated_ms."""


def head_from_fields(f: list[Any], at: int = 0) -> NoteHead:
    """The ``NoteHead`` whose ``HEAD_FIELDS`` start at ``f[at]`` (no slice copied; the
    arguments positional, in ``NoteHead``'s field order: keywords cost a third more)."""
    return NoteHead(
        str(f[at]),  # note_id
        str(f[at + 1]),  # title
        str(f[at + 2]),  # workspace
        int(f[at + 3]),  # version
        int(f[at + 4]),  # created_ms
        int(f[at + 5]),  # updated_ms
    )


def note_from_fields(f: list[Any]) -> Note:
    head = head_from_fields(f)
    return Note(
        head.note_id,
        head.title,
        head.workspace,
        head.version,
        head.created_ms,
        head.updated_ms,
        body=str(f[6] or ""),
    )
