"""UTS #39 skeletons of titles: two titles that look alike have the same skeleton.

Layer: store. Pure module. ``skeleton(title)`` is Unicode Technical Standard #39's skeleton
(section 4) of the title's NFKC form: NFD, each character replaced by the prototype of its
confusable class (``confusables.txt``), NFD again. The note store keeps, per workspace, the
titles of each skeleton (``store.keys.TenantKeys.lookalikes``), so a create, edit or move that
would put a title beside a different title with the same skeleton is refused in the script that
writes, without a scan.

The confusables come from the ``confusable-homoglyphs`` package's copy of ``confusables.txt``,
which stores each line ``source -> prototype`` both ways. The prototype of a class is read back
from that shape: a prototype of several characters, or one that several sources name, is the
prototype; a class of two single characters that name only each other is given the smaller one.
Either way two characters of one class get one representative, which is all a comparison of
skeletons needs.
"""

from __future__ import annotations

import json
import unicodedata
from functools import cache, lru_cache
from importlib import resources

BIDI_MARKS = str.maketrans("", "", "\u200e\u200f")
"""The package wraps right-to-left characters in marks for display; they are not data."""

SKELETON_CACHE = 4096
"""Titles whose skeleton is remembered (a bound: hostile variety costs memory no more)."""


@cache
def _prototypes() -> dict[str, str]:
    """Character -> the prototype of its confusable class (only characters that change)."""
    raw = resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8")
    table: dict[str, list[str]] = {
        key.translate(BIDI_MARKS): [e["c"].translate(BIDI_MARKS) for e in entries]
        for key, entries in json.loads(raw).items()
    }
    out: dict[str, str] = {}
    for char, others in table.items():
        if len(char) != 1 or len(others) != 1:
            continue  # a sequence, or the prototype of several sources: maps to itself
        other = others[0]
        if len(other) > 1 or len(table.get(other, ())) > 1:
            out[char] = other
        elif table.get(other) == [char] and other < char:
            out[char] = other  # two characters naming only each other: the smaller stands
    return out


@lru_cache(maxsize=SKELETON_CACHE)
def skeleton(title: str) -> str:
    """The UTS #39 skeleton of ``title``'s NFKC form."""
    prototypes = _prototypes()
    decomposed = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", title))
    mapped = "".join(prototypes.get(c, c) for c in decomposed)
    return unicodedata.normalize("NFD", mapped)
