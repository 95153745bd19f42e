"""What a note's title and body may contain: titles are NFC and visibly what they say.

Layer: node, protocol core. Pure module: no I/O.

A title is what a person reads in the pick-and-confirm form, so two different titles must not
look alike there. A title is first folded (``fold_title``): letters and digits that Unicode
marks as compatibility variants of plain ones (NFKC: mathematical alphanumerics such as 𝐓,
fullwidth ``Ｔ`` and ``１``, ligatures such as ``ﬁ``, Roman numerals such as ``Ⅻ``) become the
plain ones, and so do the punctuation lookalikes U+2010 HYPHEN, U+2011, U+2212 MINUS SIGN
(``-``), U+2024 ONE DOT LEADER (``.``), U+2215 DIVISION SLASH, U+2044 (``/``), U+02BC MODIFIER
LETTER APOSTROPHE, U+2018 and U+2019 (``'``) and the fullwidth forms of ASCII punctuation. It is
then normalised to NFC (so ``e`` + U+0301 and ``é`` are one title, found by either spelling)
and refused, naming the code point, when it holds:

- a control character (category Cc: C0, DEL, C1; tabs and newlines too);
- a format character (Cf): invisible ones (U+200B ZERO WIDTH SPACE, U+2060, U+FEFF, U+00AD,
  U+200C ZERO WIDTH NON-JOINER) and the bidirectional controls (U+200E/U+200F, U+061C ARABIC
  LETTER MARK, U+202A-U+202E, U+2066-U+2069), which can make text display in another order than
  it is stored. The one exception is U+200D ZERO WIDTH JOINER inside an emoji ZWJ sequence
  of Unicode's recommended set (RGI, from the ``emoji`` package: 👩‍💻), which shows as one
  emoji; a joiner between emoji that form no such sequence (🐶 U+200D 🐱) is refused;
- a variation selector (U+FE00-U+FE0F, U+E0100-U+E01EF, the Mongolian U+180B-U+180F): they
  change nothing visible after a letter, so ``"TPS report"`` + U+FE0F would look like
  ``"TPS report"``. The one exception is U+FE0F after an emoji (``❤️``, and a keycap's
  ``1️⃣``), where it asks for the emoji's colour presentation and keyboards send it;
- a tag character (U+E0000-U+E007F), except inside an RGI emoji tag sequence (the flags of
  England, Scotland and Wales: U+1F3F4, tags, U+E007F CANCEL TAG); tags spelling any other
  subdivision, or hidden text, are refused;
- any other default-ignorable code point (Unicode's ``Default_Ignorable_Code_Point``: U+034F
  COMBINING GRAPHEME JOINER, U+17B4/U+17B5, the Hangul fillers U+115F, U+1160, U+3164, U+FFA0,
  ...), and the invisible blank U+2800 BRAILLE PATTERN BLANK, which render as nothing;
- a noncharacter (U+FFFE, U+FFFF, U+FDD0-U+FDEF, ...), a private-use character (Co), an
  unassigned code point (Cn) or a surrogate (Cs): nobody can tell what they look like;
- a line or paragraph separator (Zl, Zp: U+2028, U+2029);
- a space other than U+0020 (Zs: U+00A0 NO-BREAK SPACE, U+3000, ...), which looks like one;
- a space at its start or end (``"TPS "`` would look like ``"TPS"``);
- letters of two scripts where one looks like a letter of the other (Unicode UTS #39's
  mixed-script confusables, from the ``confusable-homoglyphs`` package's copy of
  ``confusables.txt``): ``"TРS report"`` with a Cyrillic U+0420 is refused, naming it and the
  Latin ``P`` it looks like. A title in one script alone is fine (Cyrillic, Greek, Hebrew, ...),
  and so are the combinations the standard calls highly restrictive: Latin with Han, Hiragana
  and Katakana (Japanese), with Han and Hangul (Korean), with Han and Bopomofo (Chinese).
  Characters common to all scripts (digits, punctuation, emoji) count for none.

Within a workspace, a title is also compared with the others by its UTS #39 skeleton
(``store.skeletons``: NFKC, then the confusables map): the store refuses a title beside a
different one with the same skeleton (``TPS report`` beside ``TPS rep0rt``), in the script that
writes, from an index kept per workspace and skeleton (no scan).

Code point properties come from the ``regex`` package (a current Unicode version, ahead of the
interpreter's ``unicodedata``), names from ``unicodedata``.

A body is free text, kept as sent (no normalisation): it may hold tabs, newlines and carriage
returns, format and bidirectional characters (right-to-left text and emoji need them); other
control characters (Cc) and surrogates are refused. Its size is counted in UTF-8 bytes.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

import emoji
import regex
from confusable_homoglyphs import categories, confusables
from pydantic_core import PydanticCustomError

REFUSED_TITLE_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "an invisible formatting character",
    "Cs": "a surrogate",
    "Co": "a private-use character",
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
"""Hangul fillers: letters (Lo) that render as nothing (also default-ignorable)."""

INVISIBLE_BLANKS = frozenset("\u2800")
"""Visible-category characters that render as nothing and are not default-ignorable."""

_CLASSES = (
    (regex.compile(r"\p{Variation_Selector}"), "a variation selector"),
    (regex.compile(r"\p{Noncharacter_Code_Point}"), "a noncharacter"),
    (regex.compile(r"[\U000E0000-\U000E007F]"), "a tag character"),
    (regex.compile(r"\p{DI}"), "an invisible (default-ignorable) code point"),  # DI: DICP
    (regex.compile(r"\p{Co}"), "a private-use character"),
    (regex.compile(r"\p{Cn}"), "an unassigned code point"),
)
"""Refused classes beyond the general categories, checked in this order (the first that matches
names the refusal): a variation selector is also default-ignorable, a noncharacter unassigned."""

_PICTOGRAPHIC = regex.compile(r"\p{Extended_Pictographic}")
VS16 = "\ufe0f"
KEYCAP = "\u20e3"
KEYCAP_BASES = frozenset("0123456789#*")
NEUTRAL_SCRIPTS = frozenset({"COMMON", "INHERITED", "Unknown"})
"""Script values that count for none (digits, punctuation, emoji, combining marks)."""
HIGHLY_RESTRICTIVE = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
)
"""UTS #39 section 5.2: script sets a single-script title may add to (Japanese, Korean, Chinese)."""

_BODY_REFUSED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
"""Control characters other than tab, newline and carriage return; surrogates."""


def code_point(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``: how a refusal names a character."""
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def _presents_emoji(title: str, at: int) -> bool:
    """Whether the U+FE0F at index ``at`` follows an emoji (or a keycap base before U+20E3)."""
    before = title[at - 1] if at else ""
    if before in KEYCAP_BASES:
        return title[at + 1 : at + 2] == KEYCAP
    return bool(before) and _PICTOGRAPHIC.match(before) is not None


def _in_rgi_emoji(title: str) -> set[int]:
    """Indexes of the characters inside an emoji sequence of Unicode's recommended set (RGI,
    as the ``emoji`` package lists it, with its qualification variants): a joiner or a tag
    character is allowed there only. The package matches the longest sequence at each place."""
    inside: set[int] = set()
    for found in emoji.emoji_list(title):
        inside.update(range(found["match_start"], found["match_end"]))
    return inside


_JOINERS = regex.compile(r"[\u200d\U000E0000-\U000E007F]")
"""The characters allowed only inside an RGI emoji sequence: ZWJ and the tag characters."""

FOLDS = {
    "\u2010": "-",  # HYPHEN
    "\u2011": "-",  # NON-BREAKING HYPHEN
    "\u2212": "-",  # MINUS SIGN
    "\u2024": ".",  # ONE DOT LEADER
    "\u2215": "/",  # DIVISION SLASH
    "\u2044": "/",  # FRACTION SLASH
    "\u02bc": "'",  # MODIFIER LETTER APOSTROPHE
    "\u2018": "'",  # LEFT SINGLE QUOTATION MARK
    "\u2019": "'",  # RIGHT SINGLE QUOTATION MARK
}
"""Punctuation that looks like an ASCII character, folded to it."""

_KEPT_JAMO = regex.compile(r"[\u3130-\u318f\uffa0-\uffdc]")
"""Hangul compatibility and halfwidth jamo: NFKC turns them into conjoining jamo, which join
their neighbours into syllables; kept as typed."""


def fold_title(title: str) -> str:
    """``title`` with its compatibility letters and digits (NFKC of a character of category
    L or N, ``²`` and ``½`` aside: those are No) and its punctuation lookalikes (``FOLDS``, and
    the fullwidth forms U+FF01-U+FF5E) replaced by the plain characters they stand for."""
    if title.isascii():
        return title
    return "".join(_fold_char(c) for c in title)


def _fold_char(char: str) -> str:
    folded = FOLDS.get(char)
    if folded is not None:
        return folded
    if char.isascii() or _KEPT_JAMO.match(char):
        return char
    category = unicodedata.category(char)
    if "\uff01" <= char <= "\uff5e" or (category[0] in "LN" and category != "No"):
        return unicodedata.normalize("NFKC", char)
    return char


def _character_problem(char: str) -> str | None:
    """Why one character may not be in a title, or None."""
    if char in BIDI_CONTROLS:
        return "a bidirectional control"
    if char in INVISIBLE_LETTERS:
        return "an invisible letter"
    if char in INVISIBLE_BLANKS:
        return "an invisible blank"
    for pattern, what in _CLASSES:
        if pattern.match(char) is not None:
            return what
    category = unicodedata.category(char)
    if char != " " and category in REFUSED_TITLE_CATEGORIES:
        return REFUSED_TITLE_CATEGORIES[category]
    return None


def confusable_problem(title: str) -> str | None:
    """Why a title mixing scripts is refused (a letter of one looks like a letter of another),
    or None. Every script but the title's most used one is checked against the others."""
    counts = Counter(categories.alias(c) for c in title)
    scripts = set(counts) - NEUTRAL_SCRIPTS
    if len(scripts) < 2 or any(scripts <= allowed for allowed in HIGHLY_RESTRICTIVE):
        return None
    base = max(sorted(scripts), key=lambda s: counts[s])
    for char in dict.fromkeys(title):
        script = categories.alias(char)
        if script not in scripts or script == base:
            continue
        others = sorted(scripts - {script})
        found = confusables.is_confusable(char, preferred_aliases=others)
        if not found:
            continue
        like = next(
            h["c"]
            for h in found[0]["homoglyphs"]
            if any(categories.alias(g) in others for g in h["c"])
        )
        return (
            f"the title contains {code_point(char)}, which looks like "
            f"{' '.join(code_point(g) for g in like if g not in BIDI_CONTROLS)}: a title mixing "
            f"{' and '.join(s.title() for s in sorted(scripts))} letters may not hold "
            "letters that look alike"
        )
    return None


def title_problem(title: str) -> str | None:
    """Why an NFC title is refused, or None.

    Fast path: a title of printable ASCII alone (U+0020 to U+007E) has no character to refuse
    (its only space is U+0020) and no second script (its letters are Latin, the rest common to
    all scripts), so only the spaces at its ends are left to check; ``test_title_lookalikes``
    checks both claims for every such character. Anything else takes the walk below."""
    if title.isascii() and title.isprintable():
        return _END_SPACE if title != title.strip(" ") else None
    return walked_title_problem(title)


def walked_title_problem(title: str) -> str | None:
    """``title_problem`` without its fast path: every character, then the scripts."""
    emoji_at = _in_rgi_emoji(title) if _JOINERS.search(title) else set()
    for at, char in enumerate(title):
        if at in emoji_at:
            continue
        if char == VS16 and _presents_emoji(title, at):
            continue
        what = _character_problem(char)
        if what is not None:
            return f"the title contains {code_point(char)}, {what}"
    if title != title.strip(" "):
        return _END_SPACE
    return confusable_problem(title)


_END_SPACE = "the title starts or ends with a space"


def nfc(value: object) -> object:
    """A string in NFC (anything else as it is, for the strict type check to refuse)."""
    return unicodedata.normalize("NFC", value) if isinstance(value, str) else value


def normalize_title(value: object) -> object:
    """Pydantic before-validator: an NFC title, or a refusal naming the code point. Non-strings
    pass through for the strict type check to refuse."""
    if not isinstance(value, str):
        return value
    title = unicodedata.normalize("NFC", fold_title(value))
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
