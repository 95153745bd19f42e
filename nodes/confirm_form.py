"""The pick-and-confirm form every confirming tool sends, and the validation of its answer.

Layer: node, protocol core. Pure module: no I/O. The form is flat (a titled single-select of the
signed candidates and a required boolean), so ``parse_answer`` accepts exactly what it asked for:
an accept with ``noteId`` among the candidates and ``confirm``, a decline or a cancel.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from nodes import errors
from nodes.canonical import canonical_json_bytes
from nodes.sealing import Candidate
from store.api import ConfirmAction, NoteHead


@dataclass(frozen=True, slots=True)
class Answer:
    """A validated answer to the confirmation form."""

    action: ConfirmAction
    note_id: str | None
    raw: Mapping[str, Any]

    @property
    def digest(self) -> str:
        """What identifies this answer in the replay store: the same answer, the same digest."""
        return hashlib.sha256(canonical_json_bytes(self.raw)).hexdigest()


MINUTE_CACHE_SIZE = 1024
"""Minutes whose text ``_minute`` remembers (a form shows notes created in a few recent ones)."""


def _minute(ms: int) -> str:
    """``2025-12-02 01:46``: the UTC minute of a millisecond timestamp."""
    return _minute_text(ms // 60_000)


@lru_cache(maxsize=MINUTE_CACHE_SIZE)
def _minute_text(minute: int) -> str:
    """The text of the ``minute``-th minute since the epoch (``time.strftime``: a quarter of
    ``datetime``'s formatting cost, the same text). Keyed by the minute, not the millisecond:
    the text shows no seconds, and notes shown together were mostly made in a few minutes."""
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(minute * 60))


def pick_form(message: str, notes: tuple[NoteHead, ...], confirm_title: str) -> dict[str, Any]:
    """The flat form: a titled single-select of the candidates and a required boolean."""
    options = [
        {
            "const": n.note_id,
            "title": f"{n.title} — {n.uri} (created {_minute(n.created_ms)} UTC)",
        }
        for n in notes
    ]
    pick: dict[str, Any] = {"type": "string", "title": "Note", "oneOf": options}
    if len(notes) == 1:
        pick["default"] = notes[0].note_id
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "noteId": pick,
                    "confirm": {"type": "boolean", "title": confirm_title, "default": False},
                },
                "required": ["noteId", "confirm"],
            },
        },
    }


_ANSWER_FIELDS = frozenset({"action", "content", "_meta"})
"""The fields an answer may have (checked without building a set per answer)."""

_CONTENT_FIELDS = frozenset({"noteId", "confirm"})
"""An accept's content fields: exactly these two."""


def parse_answer(raw: object, candidates: tuple[Candidate, ...]) -> Answer:
    """Validate one elicitation result against the signed candidates (-32602 if malformed)."""
    if not isinstance(raw, dict):
        raise errors.invalid_params("Invalid inputResponses: each answer must be an object")
    action = raw.get("action")
    if not _ANSWER_FIELDS.issuperset(raw):
        raise errors.invalid_params("Invalid inputResponses: unexpected answer fields")
    if action in ("decline", "cancel"):
        return Answer(action, None, {"action": action})
    if action != "accept":
        raise errors.invalid_params(
            "Invalid inputResponses: action must be accept, decline or cancel"
        )
    content = raw.get("content")
    if (
        not isinstance(content, dict)
        or len(content) != 2
        or not _CONTENT_FIELDS.issuperset(content)
    ):
        raise errors.invalid_params(
            "Invalid inputResponses: accept needs content with exactly noteId and confirm"
        )
    note_id, confirm = content["noteId"], content["confirm"]
    if not isinstance(note_id, str) or not isinstance(confirm, bool):
        raise errors.invalid_params(
            "Invalid inputResponses: noteId must be a string and confirm a boolean"
        )
    if note_id not in {c.note_id for c in candidates}:
        raise errors.invalid_params(
            "Invalid inputResponses: noteId is not one of the offered notes"
        )
    canon = {"action": "accept", "content": {"noteId": note_id, "confirm": confirm}}
    return Answer("accept" if confirm else "decline", note_id, canon)
