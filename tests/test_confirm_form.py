"""The pick-and-confirm form's option titles: each note's creation minute in UTC.

``nodes.confirm_form`` writes the minute with ``time.strftime`` (a quarter of
``datetime``'s formatting cost on the hot path); the text must be what ``datetime`` writes.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from nodes import confirm_form, errors
from nodes.confirm_form import pick_form
from nodes.sealing import Candidate
from store.api import NoteHead

STAMPS = (
    0,
    59_999,
    60_000,
    1_700_000_000_000,
    1_764_640_019_999,
    1_709_251_199_999,
    4_102_444_800_000,
)


@pytest.mark.parametrize("created_ms", STAMPS)
def test_an_options_title_names_the_creation_minute_as_datetime_writes_it(created_ms: int) -> None:
    note = NoteHead("n1", "TPS report", "file:///w", 1, created_ms, created_ms)
    form = pick_form("Which note?", (note,), "Confirm")
    (option,) = form["params"]["requestedSchema"]["properties"]["noteId"]["oneOf"]
    minute = f"{datetime.fromtimestamp(created_ms / 1000, UTC):%Y-%m-%d %H:%M}"
    assert option == {"const": "n1", "title": f"TPS report — {note.uri} (created {minute} UTC)"}


def test_the_minute_is_the_same_text_for_every_millisecond_of_it_and_the_cache_is_bounded() -> None:
    # Cached per minute: each millisecond still gets its own minute's text, as strftime writes it
    # from the second (before the epoch too: floor division on both paths).
    stamps = [
        *STAMPS,
        -1,
        -999,
        -1_000,
        -59_999,
        -60_000,
        -60_001,
        *range(1_764_640_000_000 - 2_500, 1_764_640_000_000 + 2_500, 7),
        *range(1_764_640_059_000, 1_764_640_061_000, 3),
    ]
    for ms in stamps:
        expected = time.strftime("%Y-%m-%d %H:%M", time.gmtime(ms // 1000))
        assert confirm_form._minute(ms) == expected, ms
    for minute in range(confirm_form.MINUTE_CACHE_SIZE + 50):
        confirm_form._minute(minute * 60_000)
    assert confirm_form._minute_text.cache_info().currsize <= confirm_form.MINUTE_CACHE_SIZE


def _answer_fields_as_before(raw: object) -> str | None:
    """The field checks ``parse_answer`` made with sets before (the message, or None)."""
    if not isinstance(raw, dict):
        return "not an object"
    if set(raw) - {"action", "content", "_meta"}:
        return "Invalid inputResponses: unexpected answer fields"
    if raw.get("action") != "accept":
        return None
    content = raw.get("content")
    if not isinstance(content, dict) or set(content) != {"noteId", "confirm"}:
        return "Invalid inputResponses: accept needs content with exactly noteId and confirm"
    return None


FIELD_SHAPES: list[object] = [
    {},
    {"action": "accept"},
    {"action": "decline", "_meta": {}},
    {"action": "cancel", "extra": 1},
    {"action": "accept", "content": {}},
    {"action": "accept", "content": {"noteId": "n1"}},
    {"action": "accept", "content": {"confirm": True}},
    {"action": "accept", "content": {"noteId": "n1", "confirm": True}},
    {"action": "accept", "content": {"noteId": "n1", "confirm": True, "x": 1}},
    {"action": "accept", "content": {"noteId": "n1", "other": True}},
    {"action": "accept", "content": {"a": 1, "b": 2}},
    {"action": "accept", "content": ["noteId", "confirm"]},
    {"action": "accept", "content": {"noteId": "n1", "confirm": True}, "_meta": {"k": 1}},
    {"action": "accept", "content": {"noteId": "n1", "confirm": True}, "Action": "accept"},
    {"content": {"noteId": "n1", "confirm": True}},
    {"_meta": None},
    {"": None, "action": "accept"},
]


@pytest.mark.parametrize("raw", FIELD_SHAPES, ids=range(len(FIELD_SHAPES)))
def test_the_answer_field_checks_refuse_as_the_set_checks_did(raw: object) -> None:
    """``parse_answer`` checks an answer's and an accept's fields with frozen sets and a length
    instead of building sets per answer: the same refusals, in the same order."""
    candidates = (Candidate(note_id="n1", version=1),)
    expected = _answer_fields_as_before(raw)
    try:
        confirm_form.parse_answer(raw, candidates)
        message = None
    except errors.JsonRpcError as exc:
        message = exc.message
    if expected is None:
        assert message is None or ("fields" not in message and "exactly" not in message)
    else:
        assert message == expected
