"""The 2025-11-25 wire: which requests are legacy, and the shapes legacy clients expect.

Layer: node, legacy adapter. Pure module: no I/O. It knows both eras' envelopes: the modern one
only to recognise it (a request carrying the modern ``_meta`` version is never legacy, whatever
its headers say) and to turn modern results into legacy ones.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nodes import errors
from nodes.results import tool_error
from nodes.scope import ScopeError, contains, normalize_uri

LEGACY_VERSION = "2025-11-25"
"""The one handshake-era version we negotiate; any other requested version is counter-offered."""

HANDSHAKE_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", LEGACY_VERSION})
"""``MCP-Protocol-Version`` values that mark a request as handshake-era."""

MODERN_META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
MODERN_ONLY_KEYS = ("resultType", "ttlMs", "cacheScope")
"""Result members 2025-11-25 does not have."""

MODERN_ONLY_CODES = frozenset(
    {errors.HEADER_MISMATCH, errors.MISSING_CAPABILITY, errors.UNSUPPORTED_VERSION}
)
"""-32020..-32022 are 2026-07-28 codes; a legacy client gets -32602 with the same data."""

CONFIRMATION_META = "dev.notes-cluster/confirmation"
"""``_meta`` key of a confirming tool's form elicitation: ``{nonce, expMs, tool, candidates}`` of
its sealed state (``nodes.legacy.bridge``), for harnesses that record histories."""

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"

WORKSPACE_ARGUMENT = "workspaceUri"
"""Tool arguments named this (or ending in ``WorkspaceUri``) name a workspace the call touches."""

_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def claims(http_method: str, headers: Mapping[str, str], message: object) -> bool:
    """Whether a request belongs to the legacy adapter (the dual-era rule of the spec).

    DELETE with a session id ends a session. A POST whose body carries the modern ``_meta``
    version is modern whatever its headers; otherwise ``initialize``, or a handshake-era
    ``MCP-Protocol-Version`` header, makes it legacy. Everything else stays modern, so the
    modern path answers exactly as it did before the adapter existed.
    """
    if http_method == "DELETE":
        return SESSION_HEADER in headers
    if http_method != "POST" or not isinstance(message, dict):
        return False
    params = message.get("params")
    if isinstance(params, dict):
        meta = params.get("_meta")
        if isinstance(meta, dict) and MODERN_META_VERSION in meta:
            return False
    if message.get("method") == "initialize":
        return True
    return headers.get(VERSION_HEADER) in HANDSHAKE_VERSIONS


def valid_id(value: object) -> bool:
    """A JSON-RPC request id: a string or an integer (never null, never a boolean)."""
    return isinstance(value, str | int) and not isinstance(value, bool)


MAX_INT_ID = 2**63 - 1
"""Largest integer request id taken (as many JSON-RPC peers keep ids in 64 bits)."""


def valid_cancel_id(value: object, max_chars: int) -> bool:
    """A request id a ``notifications/cancelled`` may name: an integer within 64 bits, or a
    string of at most ``max_chars`` characters (it is stored in the session's inbox)."""
    if isinstance(value, str):
        return len(value) <= max_chars
    return valid_id(value) and abs(value) <= MAX_INT_ID  # type: ignore[arg-type]


def stored_capabilities(capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a client's ``initialize`` capabilities a node reads, and nothing else:
    ``roots`` (and whether it announces changes), ``elicitation`` with its ``form``/``url`` modes
    (a bare ``{}`` stays bare: it means form only). Sub-objects' contents are not kept."""
    out: dict[str, Any] = {}
    roots = capabilities.get("roots")
    if isinstance(roots, dict):
        out["roots"] = {"listChanged": True} if roots.get("listChanged") is True else {}
    elicitation = capabilities.get("elicitation")
    if isinstance(elicitation, dict):
        modes = ("form", "url")
        out["elicitation"] = {m: {} for m in modes if isinstance(elicitation.get(m), dict)}
    return out


def stored_client_info(client_info: Mapping[str, Any], max_chars: int) -> dict[str, str]:
    """``clientInfo.name`` and ``.version`` (strings only), each cut to ``max_chars``: enough to
    name a client in the log; the rest of ``clientInfo`` is not kept."""
    return {
        k: v[:max_chars] for k in ("name", "version") if isinstance(v := client_info.get(k), str)
    }


def encode(message: Mapping[str, Any]) -> bytes:
    """Compact ASCII JSON (a lone surrogate cannot break the UTF-8 encoding)."""
    return _ENCODER.encode(message).encode("ascii")


def sse_event(message: Mapping[str, Any]) -> bytes:
    """One SSE ``message`` event carrying one JSON-RPC message, without an event id: our streams
    are not resumable, so a client must not try ``Last-Event-ID``."""
    return b"event: message\ndata: " + encode(message) + b"\n\n"


SSE_KEEPALIVE = b": keepalive\n\n"
"""An SSE comment: ignored by clients, keeps proxies from timing the stream out."""


def response(request_id: object, result: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-RPC success response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": dict(result)}


def error_response(request_id: object, exc: errors.JsonRpcError) -> dict[str, Any]:
    """A JSON-RPC error response, with modern-only codes translated."""
    return {"jsonrpc": "2.0", "id": request_id, "error": legacy_error(exc).to_dict()}


def legacy_error(exc: errors.JsonRpcError) -> errors.JsonRpcError:
    """The error a 2025-11-25 client understands: -32020..-32022 become -32602 (same data)."""
    if exc.code in MODERN_ONLY_CODES:
        return errors.JsonRpcError(errors.INVALID_PARAMS, exc.message, exc.data)
    return exc


def legacy_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """A modern complete result without ``resultType``/``ttlMs``/``cacheScope`` or the modern
    ``serverInfo`` stamp (legacy clients learn it once, from ``initialize``)."""
    out = {k: v for k, v in result.items() if k not in MODERN_ONLY_KEYS}
    meta = out.pop("_meta", None)
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if k != META_SERVER_INFO}
        if kept:
            out["_meta"] = kept
    return out


def tool_refusal(message: str) -> dict[str, Any]:
    """A legacy ``isError`` tool result for a call the adapter stopped (nothing was changed):
    as ``nodes.results.tool_error``, no ``structuredContent`` (see there why)."""
    return legacy_result(tool_error(message))


def notification(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-RPC notification."""
    return {"jsonrpc": "2.0", "method": method, "params": dict(params)}


def request(request_id: str, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A server-to-client JSON-RPC request."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": dict(params)}


def workspace_targets(arguments: Mapping[str, Any]) -> tuple[str, ...]:
    """The workspace URIs a tool call names (``workspaceUri``, ``targetWorkspaceUri``, ...)."""
    return tuple(
        value
        for key, value in sorted(arguments.items())
        if isinstance(value, str) and (key == WORKSPACE_ARGUMENT or key.endswith("WorkspaceUri"))
    )


def parse_roots(answer: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The canonical ``file:`` roots of a ``roots/list`` answer (a JSON-RPC response object).

    None when the client answered with an error or something that is not a roots list. Roots
    that are not well-formed ``file:`` URIs are dropped: they can only narrow, never widen, what
    a call may touch.
    """
    result = answer.get("result")
    if not isinstance(result, dict):
        return None
    roots = result.get("roots")
    if not isinstance(roots, list):
        return None
    out: list[str] = []
    for root in roots:
        uri = root.get("uri") if isinstance(root, dict) else None
        if not isinstance(uri, str):
            return None
        try:
            canonical = normalize_uri(uri)
        except ScopeError:
            continue
        if canonical not in out:
            out.append(canonical)
    return tuple(out)


ROOTS_SHOWN = 3
"""How many of the client's roots a refusal names (a client may list up to ``roots_max``)."""


def roots_refusal(targets: tuple[str, ...], roots: tuple[str, ...], *, changed: bool) -> str:
    """What a call refused by the client's roots tells the user: which workspace, which roots,
    and how to make the call pass (roots only narrow what the principal may touch, so an empty
    list admits nothing)."""
    outside = next((t for t in targets if not within_roots((t,), roots)), targets[0])
    fix = (
        "add it (or a folder above it) to the client's roots, or connect without the roots "
        "capability (the server's grants alone then decide)"
    )
    if not roots:
        return (
            f"The workspace {outside} is outside this client's roots: the client declared the "
            f"roots capability but listed no roots, so no workspace is open to it; nothing was "
            f"changed. To use it, {fix}"
        )
    shown = ", ".join(roots[:ROOTS_SHOWN]) + (
        f" and {len(roots) - ROOTS_SHOWN} more" if len(roots) > ROOTS_SHOWN else ""
    )
    when = "changed and no longer include" if changed else "do not include"
    return (
        f"The workspace {outside} is outside this client's roots: the roots it listed ({shown}) "
        f"{when} it; nothing was changed. To use it, {fix}"
    )


def within_roots(targets: tuple[str, ...], roots: tuple[str, ...]) -> bool:
    """Whether every target lies in one of the roots (whole path components compared)."""
    return all(any(contains(root, target) for root in roots) for target in targets)
