"""What a note's title and body may contain: titles are NFC and visibly what they say.

Layer: node, protocol core. Pure module: no I/O.

A title is what a person reads in the pick-and-confirm form, so two different titles must not
look alike there. A title is normalised to NFC (so ``e`` + U+0301 and ``é`` are one title, found
by either spelling) and refused, naming the code point, when it holds:

- a control character (category Cc: C0, DEL, C1; tabs and newlines too);
- a format character (Cf): invisible ones (U+200B ZERO WIDTH SPACE, U+2060, U+FEFF, U+00AD,
  U+200C ZERO WIDTH NON-JOINER) and the bidirectional controls (U+200E/U+200F, U+061C ARABIC
  LETTER MARK, U+202A-U+202E, U+2066-U+2069), which can make text display in another order than
  it is stored. The one exception is U+200D ZERO WIDTH JOINER between two emoji, where it joins
  them into one visible emoji (👩‍💻);
- a line or paragraph separator (Zl, Zp: U+2028, U+2029) or a surrogate (Cs);
- a space other than U+0020 (Zs: U+00A0 NO-BREAK SPACE, U+3000, ...), which looks like one, and
  the invisible Hangul fillers (U+115F, U+1160, U+3164, U+FFA0);
- a space at its start or end (``"TPS "`` would look like ``"TPS"``).

A body is free text, kept as sent (no normalisation): it may hold tabs, newlines and carriage
returns, format and bidirectional characters (right-to-left text and emoji need them); other
control characters (Cc) and surrogates are refused. Its size is counted in UTF-8 bytes.
"""

from __future__ import annotations

import re
import unicodedata

from pydantic_core import PydanticCustomError

REFUSED_TITLE_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "an invisible formatting character",
    "Cs": "a surrogate",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Zs": "a space other than U+0020",
}
"""General categories refused in titles, with the words the refusal uses."""

BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
"""The bidirectional controls (all Cf): marks, embeddings, overrides and isolates."""

INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")
"""Hangul fillers: letters (Lo) that render as nothing."""

_BODY_REFUSED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
"""Control characters other than tab, newline and carriage return; surrogates."""


def code_point(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``: how a refusal names a character."""
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


ZWJ = "\u200d"
EMOJI_MODIFIERS = frozenset("\ufe0f") | frozenset(chr(c) for c in range(0x1F3FB, 0x1F400))
"""What may stand between an emoji and a joiner: the emoji presentation selector and the skin
tone modifiers."""


def _joins_emoji(title: str, at: int) -> bool:
    """Whether the ZWJ at index ``at`` stands between two emoji (category So)."""
    before = title[:at].rstrip("".join(EMOJI_MODIFIERS))
    after = title[at + 1 : at + 2]
    return bool(before and after) and all(
        unicodedata.category(c) == "So" for c in (before[-1], after)
    )


def title_problem(title: str) -> str | None:
    """Why an NFC title is refused, or None."""
    for at, char in enumerate(title):
        category = unicodedata.category(char)
        if char == ZWJ and _joins_emoji(title, at):
            continue
        if char in BIDI_CONTROLS:
            return f"the title contains {code_point(char)}, a bidirectional control"
        if char != " " and category in REFUSED_TITLE_CATEGORIES:
            what = REFUSED_TITLE_CATEGORIES[category]
            return f"the title contains {code_point(char)}, {what}"
        if char in INVISIBLE_LETTERS:
            return f"the title contains {code_point(char)}, an invisible letter"
    if title != title.strip(" "):
        return "the title starts or ends with a space"
    return None


def normalize_title(value: object) -> object:
    """Pydantic before-validator: an NFC title, or a refusal naming the code point. Non-strings
    pass through for the strict type check to refuse."""
    if not isinstance(value, str):
        return value
    title = unicodedata.normalize("NFC", value)
    problem = title_problem(title)
    if problem is not None:
        raise PydanticCustomError("title_character", problem)
    return title


def body_problem(body: str, max_bytes: int) -> str | None:
    """Why a body is refused (a control character, a surrogate, over ``max_bytes`` in UTF-8),
    or None."""
    bad = _BODY_REFUSED.search(body)
    if bad is not None:
        return f"the body contains {code_point(bad.group())}, a control character"
    size = len(body.encode("utf-8"))
    if size > max_bytes:
        return f"the body is {size} bytes in UTF-8; at most {max_bytes} are allowed"
    return None
