"""Titles are NFC and visibly what they say; bodies are bounded in UTF-8 bytes.

Findings reproduced: titles accepted U+200B, U+202E and U+2028, so two notes could look alike in
a confirmation form; a body's limit was counted in characters, so four-byte characters made a
body 256 KiB. Embedded store and real Redis.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodes.config import DEFAULT_MAX_NOTE_BODY_BYTES
from nodes.protocol import Node
from nodes.serving.demo import ALICE_NOTES, DEMO_TENANT
from nodes.tools.text_rules import normalize_title
from store.notes import NoteStore
from tests.harness import call_tool, make_nodes, result

WS = {"workspaceUri": ALICE_NOTES}

REFUSED = {
    "\u200b": "U+200B ZERO WIDTH SPACE",
    "\ufeff": "U+FEFF ZERO WIDTH NO-BREAK SPACE",
    "\u00ad": "U+00AD SOFT HYPHEN",
    "\u202e": "U+202E RIGHT-TO-LEFT OVERRIDE",
    "\u202a": "U+202A LEFT-TO-RIGHT EMBEDDING",
    "\u2066": "U+2066 LEFT-TO-RIGHT ISOLATE",
    "\u2069": "U+2069 POP DIRECTIONAL ISOLATE",
    "\u200e": "U+200E LEFT-TO-RIGHT MARK",
    "\u200f": "U+200F RIGHT-TO-LEFT MARK",
    "\u061c": "U+061C ARABIC LETTER MARK",
    "\u2028": "U+2028 LINE SEPARATOR",
    "\u2029": "U+2029 PARAGRAPH SEPARATOR",
    "\u0007": "U+0007",
    "\u0085": "U+0085",
    "\t": "U+0009",
    "\u00a0": "U+00A0 NO-BREAK SPACE",
    "\u3164": "U+3164 HANGUL FILLER",
}


def refusal(reply: Any) -> str:
    """The isError text of a tool result (asserts it is one)."""
    out = result(reply)
    assert out["isError"] is True, out
    text: str = out["content"][0]["text"]
    return text


@pytest.fixture
def node(store: NoteStore) -> Node:
    return make_nodes(store, 1)[0]


async def titles_in(store: NoteStore) -> list[str]:
    return sorted(n.title for n in (await store.list(DEMO_TENANT, ALICE_NOTES)).notes)


@pytest.mark.parametrize("char", sorted(REFUSED))
async def test_a_title_with_an_invisible_bidi_or_control_character_is_refused_naming_it(
    node: Node, store: NoteStore, char: str
) -> None:
    text = refusal(await call_tool(node, "notes_create", {**WS, "title": f"TPS{char}report"}))
    assert REFUSED[char] in text, text
    assert await titles_in(store) == []


async def test_every_tool_taking_a_title_refuses_the_same_characters(
    node: Node, store: NoteStore
) -> None:
    note = await store.create(DEMO_TENANT, ALICE_NOTES, "TPS report", "", "alice")
    bad = "TPS\u202ereport"
    calls = [
        ("notes_create", {**WS, "title": bad}),
        ("notes_update", {**WS, "noteId": note.note_id, "title": bad}),
        ("notes_list", {**WS, "title": bad}),
        ("notes_search", {**WS, "title": bad}),
        ("notes_delete", {**WS, "title": bad}),
        ("notes_archive", {**WS, "title": bad}),
    ]
    for tool, arguments in calls:
        text = refusal(await call_tool(node, tool, arguments))
        assert "title" in text, (tool, text)
        assert "U+202E RIGHT-TO-LEFT OVERRIDE" in text, (tool, text)
    assert await titles_in(store) == ["TPS report"]


async def test_titles_are_stored_nfc_and_found_by_either_spelling(
    node: Node, store: NoteStore
) -> None:
    decomposed, composed = "Cafe\u0301 notes", "Caf\u00e9 notes"
    created = result(await call_tool(node, "notes_create", {**WS, "title": decomposed}))
    assert created["structuredContent"]["title"] == composed
    assert await titles_in(store) == [composed]
    for spelling in (decomposed, composed):
        listed = result(await call_tool(node, "notes_list", {**WS, "title": spelling}))
        assert [n["title"] for n in listed["structuredContent"]["notes"]] == [composed]
        asked = result(await call_tool(node, "notes_delete", {**WS, "title": spelling}))
        assert asked["resultType"] == "input_required", asked


async def test_edge_spaces_are_refused_and_inner_spaces_kept(node: Node) -> None:
    assert "starts or ends with a space" in refusal(
        await call_tool(node, "notes_create", {**WS, "title": "TPS "})
    )
    ok = result(await call_tool(node, "notes_create", {**WS, "title": "TPS  report"}))
    assert ok["structuredContent"]["title"] == "TPS  report"


def test_letters_marks_and_emoji_pass_unchanged() -> None:
    for title in ("Résumé", "日本語のノート", "עברית", "❤️ family", "👩‍💻 work", "👍🏽‍x"[:2]):
        assert normalize_title(title) == title
    for joined in ("👩🏽\u200d💻", "🏳\ufe0f\u200d🌈"):
        assert normalize_title(joined) == joined


def test_a_joiner_outside_an_emoji_sequence_is_refused() -> None:
    for title in ("TPS\u200dreport", "\u200d💻", "💻\u200d", "👩\u200d\u200d💻", "a\u200d💻"):
        with pytest.raises(ValueError, match="U\\+200D ZERO WIDTH JOINER"):
            normalize_title(title)


async def test_a_body_is_limited_in_utf8_bytes_not_characters(node: Node, store: NoteStore) -> None:
    limit = DEFAULT_MAX_NOTE_BODY_BYTES
    four_byte = "\U0001f600"
    fits = four_byte * (limit // 4)
    ok = result(await call_tool(node, "notes_create", {**WS, "title": "fits", "body": fits}))
    assert ok["isError"] is False
    # 65,536 characters of a four-byte emoji: accepted before (256 KiB), refused now.
    for body in (four_byte * limit, fits + "x", "x" * (limit + 1)):
        text = refusal(await call_tool(node, "notes_create", {**WS, "title": "big", "body": body}))
        assert f"at most {limit} are allowed" in text
    note_id = ok["structuredContent"]["noteId"]
    text = refusal(
        await call_tool(node, "notes_update", {**WS, "noteId": note_id, "body": fits + "é"})
    )
    assert f"is {limit + 2} bytes in UTF-8" in text
    assert await titles_in(store) == ["fits"]


async def test_the_body_limit_is_a_setting(store: NoteStore) -> None:
    node = make_nodes(store, 1, max_note_body_bytes=10)[0]
    assert (
        result(await call_tool(node, "notes_create", {**WS, "title": "a", "body": "é" * 5}))[
            "isError"
        ]
        is False
    )
    assert "at most 10" in refusal(
        await call_tool(node, "notes_create", {**WS, "title": "b", "body": "é" * 5 + "x"})
    )


async def test_a_body_keeps_tabs_newlines_and_bidi_text_and_refuses_other_controls(
    node: Node,
) -> None:
    body = "line 1\r\n\tline 2\n\u05e9\u05dc\u05d5\u05dd \u200f(rtl) \u200d"
    ok = result(await call_tool(node, "notes_create", {**WS, "title": "ok", "body": body}))
    assert ok["isError"] is False
    for char, name in (("\x00", "U+0000"), ("\x1b", "U+001B"), ("\x7f", "U+007F")):
        text = refusal(
            await call_tool(node, "notes_create", {**WS, "title": "x", "body": f"a{char}b"})
        )
        assert f"the body contains {name}" in text
