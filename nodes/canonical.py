"""The canonical JSON text the node digests: keys sorted, compact, UTF-8, as ``json.dumps``
writes it with ``sort_keys=True, separators=(",", ":"), ensure_ascii=False``.

Layer: node, pure module. The digests built on it are compared across nodes and versions (the
sealed state binds the arguments' digest; the store records an answer's digest and a keyed
write's), so the text must never change. orjson writes it many times faster, and byte for byte
the same for strings, integers, booleans, null, arrays and objects (``tests/test_canonical.py``
checks every control character, quote, backslash and non-ASCII kind); floats it writes in
another notation (``1e16`` where Python writes ``1e+16``), so a value holding a float, or one
orjson refuses (an integer past 64 bits, a lone surrogate), goes to the stdlib's encoder.
``canonical_json_bytes`` is the same text as UTF-8 bytes, what a digest takes (orjson's own
output, with no decode and encode again).
"""

from __future__ import annotations

import json

import orjson

_STDLIB = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""Built once: ``json.dumps`` with options builds an encoder per call."""

_FLAT = frozenset({str, int, bool, type(None)})
"""Exact types that are neither a float nor a container: a dict of only these holds no float."""


def _no_float(value: object) -> bool:
    """Whether ``value`` (decoded JSON) holds no float at any depth. A dict of plain scalars
    and of dicts of plain scalars (a tool's arguments, a form's answer) is answered by one pass
    over its values' types (a third of the walk's cost for an answer); anything else by an
    iterative walk."""
    if type(value) is dict:
        for item in value.values():
            kind = type(item)
            if kind in _FLAT or (kind is dict and _FLAT.issuperset(map(type, item.values()))):
                continue
            break
        else:
            return True
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, float):
            return False
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return True


def canonical_json(value: object, *, allow_nan: bool = True) -> str:
    """``value`` as canonical JSON text (see the module). ``allow_nan=False`` refuses NaN and
    infinities with ``ValueError``, as ``json.dumps`` does."""
    fast = _orjson(value)
    return _stdlib(value, allow_nan) if fast is None else fast.decode("utf-8")


def canonical_json_bytes(value: object, *, allow_nan: bool = True) -> bytes:
    """``canonical_json(value, allow_nan=allow_nan)`` encoded as UTF-8 (the same refusals; a
    lone surrogate, which that text can hold, is a ``UnicodeEncodeError`` here)."""
    fast = _orjson(value)
    return _stdlib(value, allow_nan).encode("utf-8") if fast is None else fast


def _orjson(value: object) -> bytes | None:
    """orjson's sorted-key bytes where they are the stdlib's text in UTF-8; None for a value
    holding a float, or one orjson refuses (an integer past 64 bits, a lone surrogate, a
    non-str key): the stdlib decides those."""
    if _no_float(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            pass
    return None


def _stdlib(value: object, allow_nan: bool) -> str:
    """The stdlib's canonical text, for what orjson may write differently or refuses."""
    if allow_nan:
        return _STDLIB.encode(value)
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
