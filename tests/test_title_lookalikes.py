"""Titles that look like another title are refused, naming the code point.

Finding reproduced: U+2800 BRAILLE PATTERN BLANK, U+034F, variation selectors (U+FE0F, U+E0100),
U+17B4, private-use characters, U+FFFF and Cyrillic letters in a Latin title were accepted, so
``"TPS report"`` + U+FE0F looked exactly like ``"TPS report"`` in ``notes_list``. Each class is
refused on the modern path (every tool taking a title goes through one validator, checked in
tests/test_titles_and_bodies.py) and on the legacy adapter's path; titles in other scripts, and
emoji as keyboards send them, still pass. Embedded store and real Redis.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
from confusable_homoglyphs import categories

from nodes.protocol import Node
from nodes.results import META_ERROR
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, DEMO_TENANT
from nodes.tools.text_rules import (
    _character_problem,
    normalize_title,
    title_problem,
    walked_title_problem,
)
from store.keys import TenantKeys
from store.notes import NoteStore
from store.sessions import SessionStore
from tests.conftest import raw
from tests.harness import call_tool, make_nodes, result
from tests.test_legacy import LIMITS, STEP_S, Cluster, initialize, post, start_nodes
from tests.test_principal_quotas import confirm

WS = {"workspaceUri": ALICE_NOTES}

LOOKALIKES = {
    # class: (title, what the refusal must say)
    "variation selector 16": ("TPS report\ufe0f", "U+FE0F VARIATION SELECTOR-16, a variation"),
    "variation selector 15": ("TPS report\ufe0e", "U+FE0E VARIATION SELECTOR-15, a variation"),
    "variation selector 1": ("TPS\ufe00 report", "U+FE00 VARIATION SELECTOR-1, a variation"),
    "supplementary variation selector": (
        "TPS report\U000e0100",
        "U+E0100 VARIATION SELECTOR-17, a variation selector",
    ),
    "Mongolian variation selector": ("TPS\u180b report", "U+180B MONGOLIAN FREE VARIATION"),
    "combining grapheme joiner": ("TPS\u034f report", "U+034F COMBINING GRAPHEME JOINER"),
    "Khmer inherent vowel": ("TPS report\u17b4", "U+17B4 KHMER VOWEL INHERENT AQ"),
    "Khmer inherent vowel AA": ("TPS report\u17b5", "U+17B5 KHMER VOWEL INHERENT AA"),
    "Hangul filler": ("TPS\u3164report", "U+3164 HANGUL FILLER"),
    "halfwidth Hangul filler": ("TPS report\uffa0", "U+FFA0 HALFWIDTH HANGUL FILLER"),
    "braille blank": ("TPS report\u2800", "U+2800 BRAILLE PATTERN BLANK, an invisible blank"),
    "tag character": ("TPS report\U000e0041", "U+E0041 TAG LATIN CAPITAL LETTER A, a tag"),
    "noncharacter FFFF": ("TPS report\uffff", "U+FFFF, a noncharacter"),
    "noncharacter FDD0": ("TPS report\ufdd0", "U+FDD0, a noncharacter"),
    "noncharacter plane 1": ("TPS report\U0001fffe", "U+1FFFE, a noncharacter"),
    "private use": ("TPS report\ue000", "U+E000, a private-use character"),
    "supplementary private use": ("TPS report\U000f0000", "U+F0000, a private-use character"),
    "unassigned": ("TPS report\U00050000", "U+50000, an unassigned code point"),
    "Cyrillic ER in Latin": (
        "T\u0420S report",
        "U+0420 CYRILLIC CAPITAL LETTER ER, which looks like U+0050 LATIN CAPITAL LETTER P",
    ),
    "Cyrillic a in Latin": (
        "P\u0430ypal invoice",
        "U+0430 CYRILLIC SMALL LETTER A, which looks like U+0061 LATIN SMALL LETTER A",
    ),
    "Greek omicron in Latin": (
        "Zo\u03bfm call",
        "U+03BF GREEK SMALL LETTER OMICRON, which looks like U+006F LATIN SMALL LETTER O",
    ),
    "Latin in Cyrillic": (
        "\u041f\u0440\u043e\u0435\u043a\u0442 X",
        "U+0058 LATIN CAPITAL LETTER X, which looks like U+0425 CYRILLIC CAPITAL LETTER HA",
    ),
}

ACCEPTED = {
    "Latin": "TPS report",
    "accented Latin": "Résumé für Åsa, Straße 5",
    "Cyrillic alone": "Москва, отчёт",
    "all-Cyrillic lookalike of Latin": "ТРЅ",
    "Greek alone": "Σημειώσεις",
    "Hebrew": "עברית",
    "Arabic": "ملاحظات",
    "Devanagari": "हिन्दी नोट्स",
    "Chinese": "中文笔记",
    "Japanese": "日本語のノート",
    "Japanese with Latin": "東京 Tokyo メモ",
    "Korean with Han": "한국어 메모 漢字",
    "Latin with a Greek letter no Latin letter looks like": "Δ report",
    "emoji without a selector": "📝 notes",
    "emoji with its presentation selector": "❤️ family",
    "keycap": "1️⃣ first",
    "emoji ZWJ sequence": "🏳️\u200d🌈 parade",
    "flag of England (a tag sequence)": "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067"
    "\U000e007f",
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


@pytest.mark.parametrize("kind", sorted(LOOKALIKES))
async def test_a_lookalike_title_is_refused_naming_the_code_point_and_nothing_is_created(
    node: Node, store: NoteStore, kind: str
) -> None:
    title, said = LOOKALIKES[kind]
    text = refusal(await call_tool(node, "notes_create", {**WS, "title": title}))
    assert said in text, text
    assert await titles_in(store) == []


@pytest.mark.parametrize("kind", sorted(ACCEPTED))
def test_titles_in_other_scripts_and_emoji_as_keyboards_send_them_pass(kind: str) -> None:
    title = ACCEPTED[kind]
    assert title_problem(title) is None
    assert normalize_title(title) == title


async def test_a_title_and_its_lookalike_cannot_both_exist(node: Node, store: NoteStore) -> None:
    created = result(await call_tool(node, "notes_create", {**WS, "title": "TPS report"}))
    assert created.get("isError") is not True, created
    lookalikes = ("TPS report\ufe0f", "TPS report\u2800", "T\u0420S report", "TPS\u034f report")
    for lookalike in lookalikes:
        refusal(await call_tool(node, "notes_create", {**WS, "title": lookalike}))
    assert await titles_in(store) == ["TPS report"]
    listed = result(await call_tool(node, "notes_list", WS))
    assert [n["title"] for n in listed["structuredContent"]["notes"]] == ["TPS report"]


PRINTABLE_ASCII = [chr(c) for c in range(0x20, 0x7F)]


def test_printable_ascii_has_no_refused_character_and_no_second_script() -> None:
    """What ``title_problem``'s fast path for printable-ASCII titles relies on."""
    for char in PRINTABLE_ASCII:
        assert _character_problem(char) is None, char
        assert categories.alias(char) in ("LATIN", "COMMON"), char


def test_the_ascii_fast_path_answers_as_the_walk_does() -> None:
    titles = [*PRINTABLE_ASCII, "TPS report", " TPS", "TPS ", " ", "a  b", "bench p1 7"]
    titles += ["".join(PRINTABLE_ASCII), "TPS\x7freport", "TPS\treport", "TPS\x00", "\x1f"]
    for title in titles:
        assert title_problem(title) == walked_title_problem(title), repr(title)
    # Not printable ASCII: the fast path does not take them, and they are refused.
    for title in ("TPS\x7freport", "TPS\treport", "TPS\x00", "\x1f"):
        problem = title_problem(title)
        assert problem is not None, repr(title)
        assert "a control character" in problem, repr(title)
    assert title_problem(" TPS") == "the title starts or ends with a space"


def test_a_selector_is_accepted_only_right_after_an_emoji() -> None:
    assert title_problem("❤️") is None
    for title in ("\ufe0f❤", "a\ufe0f", "1\ufe0f", "❤\ufe0f\ufe0f", "❤\ufe0e"):
        problem = title_problem(title)
        assert problem is not None, title
        assert "a variation selector" in problem, (title, problem)


def test_a_tag_outside_a_flag_sequence_is_refused() -> None:
    flag_tail = "\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067"
    for title in (f"🏴{flag_tail}", f"x{flag_tail}\U000e007f", f"📝{flag_tail}\U000e007f"):
        problem = title_problem(title)
        assert problem is not None, title
        assert "a tag character" in problem, (title, problem)


@pytest.fixture
async def cluster(
    redis_url: str, embedded_url: str, key_prefix: str, nursery: trio.Nursery, store: NoteStore
) -> AsyncIterator[Cluster]:
    """HTTP nodes with the legacy adapter (as tests/test_legacy.py starts them)."""
    urls = await start_nodes(redis_url, embedded_url, key_prefix, nursery, LIMITS)
    async with httpx.AsyncClient(timeout=STEP_S) as http:
        yield Cluster(urls, store, SessionStore(raw(store), prefix=key_prefix), http)


async def test_the_legacy_adapter_refuses_the_same_titles(cluster: Cluster) -> None:
    before = await titles_in(cluster.store)
    session = await initialize(cluster)
    for kind in ("variation selector 16", "braille blank", "Cyrillic ER in Latin", "private use"):
        title, said = LOOKALIKES[kind]
        params = {"name": "notes_create", "arguments": {**WS, "title": title}}
        msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        response = await post(cluster, 1, msg, session)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["result"]["isError"] is True, answer
        assert said in answer["result"]["content"][0]["text"], answer
    assert await titles_in(cluster.store) == before


# -- compatibility letters and punctuation lookalikes are folded ---------------------------------

FOLDED = {
    # class: (title as sent, title as stored)
    "math bold letters": ("\U0001d413\U0001d40f\U0001d412 report", "TPS report"),
    "math italic letters": ("\U0001d447\U0001d443\U0001d446 report", "TPS report"),
    "math digits": ("Q\U0001d7d1 plan", "Q3 plan"),
    "fullwidth letters": ("\uff34\uff30\uff33 report", "TPS report"),
    "fullwidth digits and punctuation": ("Q\uff13\uff01", "Q3!"),
    "ligature fi": ("\ufb01le list", "file list"),
    "ligature ffl": ("wa\ufb04e recipe", "waffle recipe"),
    "Roman numeral twelve": ("Chapter \u216b", "Chapter XII"),
    "small Roman numeral four": ("part \u2173", "part iv"),
    "hyphen U+2010": ("e\u2010mail", "e-mail"),
    "non-breaking hyphen U+2011": ("e\u2011mail", "e-mail"),
    "minus sign U+2212": ("a\u2212b", "a-b"),
    "one dot leader U+2024": ("v1\u20242", "v1.2"),
    "division slash U+2215": ("Q1\u2215Q2", "Q1/Q2"),
    "modifier apostrophe U+02BC": ("Bob\u02bcs notes", "Bob's notes"),
    "right single quotation U+2019": ("Bob\u2019s notes", "Bob's notes"),
}


@pytest.mark.parametrize("kind", sorted(FOLDED))
async def test_compatibility_letters_and_punctuation_lookalikes_are_folded(
    node: Node, store: NoteStore, kind: str
) -> None:
    sent, stored = FOLDED[kind]
    out = result(await call_tool(node, "notes_create", {**WS, "title": sent}))
    assert out["isError"] is False, out
    assert out["structuredContent"]["title"] == stored
    assert await titles_in(store) == [stored]
    # The plain twin is the same title now: found by either spelling.
    found = (await store.find(DEMO_TENANT, ALICE_NOTES, stored)).notes
    assert [n.note_id for n in found] == [out["structuredContent"]["noteId"]]


def test_superscripts_fractions_and_hangul_jamo_are_kept_as_typed() -> None:
    assert normalize_title("m\u00b2 \u00bd") == "m\u00b2 \u00bd"
    assert normalize_title("\u3131\u314f") == "\u3131\u314f"


# -- joiners and tags only inside RGI emoji sequences --------------------------------------------

ENGLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"
HIDDEN_TAGS = "\U0001f3f4" + "".join(chr(0xE0000 + ord(c)) for c in "pwned") + "\U000e007f"


@pytest.mark.parametrize(
    ("title", "said"),
    [
        ("\U0001f436\u200d\U0001f431 friends", "U+200D ZERO WIDTH JOINER"),  # dog ZWJ cat
        ("\U0001f4dd\u200d\U0001f4dd notes", "U+200D ZERO WIDTH JOINER"),
        ("TPS\u200d report", "U+200D ZERO WIDTH JOINER"),
        (f"{HIDDEN_TAGS} flag", "U+E0070 TAG LATIN SMALL LETTER P"),
        ("\U0001f3f4\U000e0075\U000e0073\U000e0074\U000e0078\U000e007f texas", "U+E0075"),
        ("TPS \U000e0068\U000e0069 report", "U+E0068 TAG LATIN SMALL LETTER H"),
    ],
    ids=["dog-cat", "memo-memo", "letters", "hidden text", "not RGI: Texas", "bare tags"],
)
def test_joiners_and_tags_outside_rgi_emoji_sequences_are_refused(title: str, said: str) -> None:
    problem = title_problem(title)
    assert problem is not None
    assert said in problem, problem


@pytest.mark.parametrize(
    "title",
    [
        "\U0001f469\u200d\U0001f4bb at work",  # woman technologist
        "\U0001f468\U0001f3fd\u200d\U0001f373 recipes",  # man cook, skin tone
        "\U0001f3f3\ufe0f\u200d\U0001f308 parade",  # rainbow flag
        "\U0001f469\u200d\u2764\ufe0f\u200d\U0001f468 us",  # couple with heart
        f"{ENGLAND} squad",
        "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f trip",  # Scotland
    ],
    ids=["technologist", "cook with skin tone", "rainbow flag", "couple", "England", "Scotland"],
)
def test_rgi_zwj_sequences_and_subdivision_flags_pass(title: str) -> None:
    assert title_problem(title) is None


# -- lookalikes within a workspace: UTS #39 skeletons, from a stored index ------------------------

SKELETON_TWINS = [
    ("Plan 1", "Plan l"),  # digit one, small L
    ("Il report", "ll report"),  # capital I, small L
    ("modern art", "rnodern art"),  # m, r n
    ("Minutes 2026", "Minutes 2O26"),  # zero, capital O
    ("a-b", "a\u2013b"),  # hyphen-minus, en dash
]


@pytest.mark.parametrize(("first", "second"), SKELETON_TWINS)
async def test_a_title_that_looks_like_another_in_the_workspace_is_refused(
    node: Node, store: NoteStore, first: str, second: str
) -> None:
    created = result(await call_tool(node, "notes_create", {**WS, "title": first}))
    assert created["isError"] is False, created
    twin = await call_tool(node, "notes_create", {**WS, "title": second})
    assert refusal(twin) == (
        f"The workspace already holds a note titled {first!r}, which looks like this title "
        "(the same Unicode UTS #39 skeleton); use that title or one that looks different"
    )
    assert result(twin)["_meta"][META_ERROR]["existingTitle"] == first
    assert await titles_in(store) == [first]
    # The same title again is no lookalike, and another workspace is not this one.
    again = result(await call_tool(node, "notes_create", {**WS, "title": first}))
    assert again["isError"] is False
    elsewhere = {"workspaceUri": ALICE_ARCHIVE, "title": second}
    assert result(await call_tool(node, "notes_create", elsewhere))["isError"] is False


async def test_the_lookalike_index_follows_edits_moves_and_deletes(
    node: Node, store: NoteStore
) -> None:
    keys = TenantKeys(store.prefix, DEMO_TENANT)
    one = result(await call_tool(node, "notes_create", {**WS, "title": "Plan 1"}))
    note = one["structuredContent"]["noteId"]
    index = keys.lookalikes(ALICE_NOTES, "Plan 1")
    assert index == keys.lookalikes(ALICE_NOTES, "Plan l")  # one key per skeleton: no scan
    assert await raw(store).hgetall(index) == {"Plan 1": "1"}
    # Renaming to a lookalike of another note is refused; renaming away frees the skeleton.
    other = result(await call_tool(node, "notes_create", {**WS, "title": "Other"}))
    rename = {**WS, "noteId": other["structuredContent"]["noteId"], "title": "Plan l"}
    assert "looks like this title" in refusal(await call_tool(node, "notes_update", rename))
    away = await call_tool(node, "notes_update", {**WS, "noteId": note, "title": "Budget"})
    assert result(away)["isError"] is False
    assert await raw(store).hgetall(index) == {}
    assert result(await call_tool(node, "notes_update", rename))["isError"] is False
    assert await raw(store).hgetall(index) == {"Plan l": "1"}
    # A move into a workspace holding a lookalike is refused; out of it, the index follows.
    there = {"workspaceUri": ALICE_ARCHIVE, "title": "Plan 1"}
    assert result(await call_tool(node, "notes_create", there))["isError"] is False
    move = {**WS, "noteId": rename["noteId"], "targetWorkspaceUri": ALICE_ARCHIVE}
    assert "looks like this title" in refusal(await call_tool(node, "notes_move", move))
    # A delete frees the skeleton: the lookalike may be created then.
    done = await confirm(node, "notes_delete", ALICE_NOTES, "Plan l", rename["noteId"], "alice")
    assert result(done)["structuredContent"]["deleted"] is True
    assert await raw(store).hgetall(index) == {}
    assert (
        result(await call_tool(node, "notes_create", {**WS, "title": "Plan 1"}))["isError"] is False
    )
