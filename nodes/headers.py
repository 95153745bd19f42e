"""Checks that the Streamable HTTP headers agree with the JSON-RPC body.

Layer: node, protocol core. Pure module: no I/O. The transport passes the request headers (names
lowercased); in-process transports build the same headers, so one code path checks both.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

from nodes.errors import header_mismatch

_SENTINEL = re.compile(r"=\?base64\?([A-Za-z0-9+/=]*)\?=")
NAMED_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})
"""Methods whose ``Mcp-Name`` header carries ``params.name`` (or ``params.uri``)."""


def decode_header_value(value: str) -> str:
    """Decode the ``=?base64?...?=`` sentinel used for non-ASCII or edge-whitespace values."""
    m = _SENTINEL.fullmatch(value)
    if m is None:
        return value
    try:
        return base64.b64decode(m.group(1), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise header_mismatch("Malformed base64 header value") from None


def encode_header_value(value: str) -> str:
    """Encode a value for a header, with the base64 sentinel when plain ASCII will not do."""
    plain = value.isascii() and value == value.strip() and value.isprintable()
    if plain and not _SENTINEL.fullmatch(value):
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def _expect(headers: Mapping[str, str], name: str, wanted: str) -> None:
    raw = headers.get(name)
    if raw is None:
        raise header_mismatch(f"Missing required header {name}")
    if decode_header_value(raw) != wanted:
        raise header_mismatch(f"Header {name} does not match the request body")


def check_headers(
    headers: Mapping[str, str], method: str, params: Mapping[str, Any], version: str
) -> None:
    """Raise -32020 unless MCP-Protocol-Version, Mcp-Method and Mcp-Name agree with the body."""
    _expect(headers, "mcp-protocol-version", version)
    _expect(headers, "mcp-method", method)
    if method in NAMED_METHODS:
        name = params.get("name", params.get("uri"))
        if not isinstance(name, str):
            return  # the method's own params check reports the missing name
        _expect(headers, "mcp-name", name)


def header_params(input_schema: Mapping[str, Any]) -> dict[str, str]:
    """Argument -> header name (``Mcp-Param-<name>``, lowercased) of each property of a tool's
    input schema that declares ``x-mcp-header`` (SEP-2243)."""
    props = input_schema.get("properties")
    if not isinstance(props, dict):
        return {}
    return {
        arg: "mcp-param-" + prop["x-mcp-header"].lower()
        for arg, prop in props.items()
        if isinstance(prop, dict) and isinstance(prop.get("x-mcp-header"), str)
    }


def _header_text(value: object) -> str:
    """An argument as its header carries it: booleans lowercase, numbers in decimal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def check_param_headers(
    headers: Mapping[str, str], params: Mapping[str, str], arguments: Mapping[str, Any]
) -> None:
    """Raise -32020 unless each ``x-mcp-header`` argument present in the body has its header,
    equal to it once decoded (a malformed base64 value is a mismatch too)."""
    for arg, header in params.items():
        if arg not in arguments:
            continue
        raw = headers.get(header)
        if raw is None:
            raise header_mismatch(f"Missing required header {header}")
        if decode_header_value(raw) != _header_text(arguments[arg]):
            raise header_mismatch(f"Header {header} does not match the request body")


def request_headers(method: str, params: Mapping[str, Any], version: str) -> dict[str, str]:
    """The headers a conforming client sends with this request (used by our own clients)."""
    out = {"mcp-protocol-version": version, "mcp-method": method}
    if method in NAMED_METHODS:
        name = params.get("name", params.get("uri"))
        if isinstance(name, str):
            out["mcp-name"] = encode_header_value(name)
    return out
