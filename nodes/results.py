"""Shapes of tool results: complete, tool error (``isError``) and input-required.

Layer: node, protocol core. Pure module: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

META_REPLAY = "dev.notes-cluster/replay"
"""Result ``_meta`` key set to true when a confirmation's recorded outcome is sent again."""

META_ERROR = "dev.notes-cluster/error"
"""Result ``_meta`` key of a tool error's machine-readable form: ``{"error": message, ...}``."""


_TEXT = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))
"""The text of what orjson refuses (an integer past 64 bits, a lone surrogate): the same JSON."""


def _text(structured: Any) -> list[dict[str, Any]]:
    # The spec asks that structuredContent also appear as a text block for older clients:
    # compact JSON, keys sorted. orjson writes it (the stdlib's encoder took a tenth of a
    # confirming round's own work), the stdlib encoder what orjson refuses.
    try:
        text = orjson.dumps(structured, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:
        text = _TEXT.encode(structured)
    return [{"type": "text", "text": text}]


def complete(structured: dict[str, Any], *, replay: bool = False) -> dict[str, Any]:
    """A complete, successful tool result."""
    result: dict[str, Any] = {
        "resultType": "complete",
        "content": _text(structured),
        "structuredContent": structured,
        "isError": False,
    }
    if replay:
        result["_meta"] = {META_REPLAY: True}
    return result


def tool_error(message: str, **details: Any) -> dict[str, Any]:
    """A complete tool result with ``isError: true``: a business failure, not a protocol error.

    It carries no ``structuredContent``: a client validates structured content against the
    tool's ``outputSchema`` (the TypeScript SDK does, even on errors), which an error does not
    match, and would show a schema error instead of the message. The message is the one text
    block; the same facts, for programs, go in ``_meta`` under ``META_ERROR``.
    """
    return {
        "resultType": "complete",
        "content": [{"type": "text", "text": message}],
        "isError": True,
        "_meta": {META_ERROR: {"error": message, **details}},
    }


def input_required(input_requests: dict[str, Any], request_state: str) -> dict[str, Any]:
    """An InputRequiredResult asking the client for input and carrying the sealed state."""
    return {
        "resultType": "input_required",
        "inputRequests": input_requests,
        "requestState": request_state,
    }
