"""The text block of a complete result: structuredContent as compact JSON, keys sorted.

Layer: tests. ``nodes.results._text`` writes it with orjson, and with the stdlib's encoder what
orjson refuses (an integer past 64 bits, a lone surrogate); both give the same JSON text.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodes.results import _TEXT, complete


@pytest.mark.parametrize(
    "structured",
    [
        {"deleted": True, "noteId": "n0123456789abcdef"},
        {"b": [1, 2, {"z": None, "a": "é ☃ 😀"}], "a": False},
        {"archived": False, "count": 2**63 - 1, "text": 'quote " and \\ and \n'},
        {},
    ],
)
def test_the_text_is_the_compact_sorted_json_of_the_structured_content(
    structured: dict[str, Any],
) -> None:
    text = complete(structured)["content"][0]["text"]
    assert text == json.dumps(structured, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert text == _TEXT.encode(structured)
    assert json.loads(text) == structured


@pytest.mark.parametrize("structured", [{"big": 2**64}, {"lone": "\ud800"}])
def test_what_orjson_refuses_is_written_by_the_stdlib_encoder(structured: dict[str, Any]) -> None:
    text = complete(structured)["content"][0]["text"]
    assert text == json.dumps(structured, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
