"""The pick-and-confirm form's option titles: each note's creation minute in UTC.

``nodes.confirm_form`` writes the minute with ``time.strftime`` (issue 21: a quarter of
``datetime``'s formatting cost on the hot path); the text must be what ``datetime`` writes.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from nodes import confirm_form
from nodes.confirm_form import pick_form
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
