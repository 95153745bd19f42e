"""Strict JSON decoding of request bodies: one meaning per body, or a parse error that says why.

Layer: node, transport helper. Pure module: no I/O. ``nodes.http`` decodes every POST body here.

Python's ``json`` accepts more than a hostile-input edge should:

- **Duplicate keys** (``{"workspaceUri": A, "workspaceUri": B}``): the last one wins, while an
  intermediary that reads the first sees another request than the node. Refused at every depth.
- **Numbers out of range**: ``1e400`` decodes to ``inf``, which our strict encoder then refuses
  to write back (an HTTP 500 before this check), and integers may have thousands of
  digits. A float must be finite and an integer must fit in 64 bits (``INT_LIMIT``).
- **NaN and Infinity literals**, which are not JSON at all.
- **Lone surrogates** (``"\\ud800"``): valid JSON syntax, but not Unicode; such a string cannot
  be encoded to UTF-8 for the store. Refused wherever they appear.

Each refusal raises ``JsonRefused`` (a ``ValueError``) whose message is safe to send back: it
names the offending key or token, cut short, never more of the body.

**Fast path.** The strict decoder calls a Python hook per object and per number, which makes it
the dearest step of reading a request. Most clients send compact JSON exactly as orjson writes
it, so ``decode`` first parses with orjson and keeps the result only when encoding it again
gives back the very bytes received, every integer written within 53 bits (orjson's
``OPT_STRICT_INTEGER``: it refuses to write a larger one). Such a body holds nothing the strict
decoder refuses: a decoded object keeps one value per key, so a duplicate would make the
encoding shorter; orjson writes no NaN, no infinity (an out-of-range float does not come back
as sent) and no lone surrogate (it refuses to encode one); and no integer of 2**53 or more in
magnitude (nor, so, beyond ``INT_LIMIT``) passes. The strict decoder would then return the same
value, so the fast path changes no answer. Every other body, and every body orjson refuses,
takes the strict decoder, which alone words the refusals (``tests/test_strict_json.py`` runs
each refusal through both).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import NoReturn

import orjson

INT_LIMIT = 2**63 - 1
"""Largest integer magnitude a body may carry: every JSON-RPC id or count a client sends fits in
a signed 64-bit integer, and larger ones are not interoperable (JavaScript loses them at 2**53)."""

_SHOWN = 40
"""Longest piece of a key or number quoted back in a message."""

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A ``\\uD800``-``\\uDFFF`` escape: the only way a surrogate reaches a decoded string (the UTF-8
decode before the parse refuses encoded ones). A match may be a legal pair or an escaped
backslash; the exact check then walks the decoded value."""


class JsonRefused(ValueError):
    """The body is not strict JSON; ``str(exc)`` is a message fit for the client."""


def _short(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JsonRefused(f"Parse error: duplicate key {_short(key)!r}")
            seen.add(key)
    return result


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"Parse error: number out of range: {_short(text)}")
    return value


def _bounded_int(text: str) -> int:
    # Bounded by length before int(): a 4,000-digit literal costs nothing to refuse.
    if len(text.lstrip("-")) > 19 or abs(int(text)) > INT_LIMIT:
        raise JsonRefused(f"Parse error: integer out of range: {_short(text)}")
    return int(text)


def _no_constant(name: str) -> NoReturn:
    raise JsonRefused(f"Parse error: {name} is not JSON")


_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicates,
    parse_float=_finite_float,
    parse_int=_bounded_int,
    parse_constant=_no_constant,
)


def _has_surrogate(value: object) -> bool:
    """Whether any string (key or value) in decoded JSON holds a surrogate (iterative walk)."""
    stack: list[object] = [value]
    while stack:
        node = stack.pop()
        items: Iterable[object]
        if isinstance(node, str):
            if any("\ud800" <= c <= "\udfff" for c in node):
                return True
            continue
        if isinstance(node, dict):
            items = [*node.keys(), *node.values()]
        elif isinstance(node, list):
            items = node
        else:
            continue
        stack.extend(items)
    return False


_FAST_PATH_WRITE = orjson.OPT_STRICT_INTEGER
"""The fast path writes a body back with integers held below 2**53: a larger one (up to
``INT_LIMIT`` it is accepted, beyond it refused) takes the strict decoder. Checking the
integers as they are written replaced a scan of the whole body for runs of 19 digits (a
``translate`` of every byte, strings included: about 1% of a node's instructions per flow)."""


def decode(body: bytes) -> object:
    """Decode one UTF-8 JSON document strictly (the fast path above, else ``decode_strictly``).

    Raises ``JsonRefused`` for duplicate keys, out-of-range numbers, NaN/Infinity and lone
    surrogates; ``ValueError`` for bad syntax or bad UTF-8; ``RecursionError`` for nesting beyond
    the interpreter's limit.
    """
    try:
        value = orjson.loads(body)
        canonical = orjson.dumps(value, option=_FAST_PATH_WRITE) == body
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        canonical = False
    if canonical:
        return value
    return decode_strictly(body)


def decode_strictly(body: bytes) -> object:
    """``decode`` without its fast path: the stdlib decoder with the refusing hooks."""
    value = _DECODER.decode(body.decode("utf-8"))
    if _SURROGATE_ESCAPE.search(body) and _has_surrogate(value):
        raise JsonRefused("Parse error: a string holds a lone surrogate (not Unicode)")
    return value


def parse_error_message(exc: ValueError) -> str:
    """The -32700 message for a decode failure: specific for a strict-JSON refusal, generic for
    bad syntax (whose details would echo the body)."""
    return str(exc) if isinstance(exc, JsonRefused) else "Parse error"
