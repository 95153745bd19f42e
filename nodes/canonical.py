"""The canonical JSON text the node digests: keys sorted, compact, UTF-8, as ``json.dumps``
writes it with ``sort_keys=True, separators=(",", ":"), ensure_ascii=False``.

Layer: node, pure module. The digests built on it are compared across nodes and versions (the
sealed state binds the arguments' digest; the store records an answer's digest and a keyed
write's), so the text must never change. orjson writes it many times faster, and byte for byte
the same for strings, integers, booleans, null, arrays and objects (``tests/test_canonical.py``
checks every control character, quote, backslash and non-ASCII kind); floats it writes in
another notation (``1e16`` where Python writes ``1e+16``), so a value holding a float, or one
orjson refuses (an integer past 64 bits, a lone surrogate), goes to the stdlib's encoder.
"""

from __future__ import annotations

import json

import orjson

_STDLIB = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""Built once: ``json.dumps`` with options builds an encoder per call."""


def _no_float(value: object) -> bool:
    """Whether ``value`` (decoded JSON) holds no float at any depth (an iterative walk)."""
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
    if _no_float(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode("utf-8")
        except orjson.JSONEncodeError:
            pass  # an integer past 64 bits, a lone surrogate, a non-str key: the stdlib decides
    if allow_nan:
        return _STDLIB.encode(value)
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
