"""The load generator's one wire contract: a transport delivers a JSON-RPC message to node ``i``.

Layer: loadgen. Deliberately shares nothing with the node's code: the reply type, the
unreachable-node error and the request headers are defined here, from the spec, so that a bug in
a server helper cannot hide from the checker by being in the client too. Implementations:

    Transport (Protocol)
     +-- HttpTransport          Streamable HTTP to nodes at URLs (this module)
     +-- InProcessTransport     the nodes of an in-process cluster, no sockets (cluster.local)
     +-- LossyTransport         wraps another, loses replies on purpose (cluster.faults)

A transport raises ``NodeDown`` (or a subclass) when the request may not have reached a node or
its reply did not come back; the client records such an outcome as unknown (info).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

PROTOCOL_VERSION = "2026-07-28"
"""The protocol version the load generator speaks (``_meta`` and ``MCP-Protocol-Version``)."""

META_VERSION = "io.modelcontextprotocol/protocolVersion"
"""The ``_meta`` key of a 2026-07-28 request's protocol version."""

NAMED_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})
"""Methods whose requests carry ``Mcp-Name`` (``params.name``, or ``params.uri``)."""

ACCEPT = "application/json, text/event-stream"
"""What a Streamable HTTP client accepts."""


@dataclass(frozen=True)
class Reply:
    """What came back: the HTTP status and the JSON body (None: no body, e.g. 202)."""

    status: int
    body: dict[str, Any] | None


class NodeDown(Exception):
    """The node could not be reached, or its reply was lost: the outcome is unknown."""


class Transport(Protocol):
    """One method to deliver a JSON-RPC message to node ``i`` as a principal."""

    @property
    def node_count(self) -> int:
        """How many nodes can be addressed."""
        ...

    async def send(self, node_index: int, principal: str, message: dict[str, Any]) -> Reply:
        """Deliver and return the reply; raise NodeDown (or OSError) if the node is unreachable."""
        ...


class PageTransport(Protocol):
    """A transport that can also open a node's setup page (``notes_setup``'s link), as a
    non-browser client of the principal: the in-process transport
    (``cluster.local.InProcessTransport``). The workload completes a setup link only through
    one; over plain HTTP it leaves links unopened."""

    async def open_page(
        self, node_index: int, principal: str, path: str, form: Mapping[str, str]
    ) -> int:
        """POST ``form`` to page ``path`` of node ``node_index``; the HTTP status. NodeDown
        when the node could not be reached."""
        ...


def header_value(value: str) -> str:
    """A header value as the spec sends it: plain printable ASCII as is, anything else (non-ASCII,
    control characters, whitespace at either end) as ``=?base64?<utf-8 in base64>?=``."""
    plain = value.isascii() and value.isprintable() and value == value.strip()
    if plain and not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def request_headers(message: Mapping[str, Any]) -> dict[str, str]:
    """The MCP headers a conforming client sends with ``message``: ``MCP-Protocol-Version`` (the
    ``_meta`` version), ``Mcp-Method``, and ``Mcp-Name`` for the named methods."""
    params = message.get("params")
    params = params if isinstance(params, Mapping) else {}
    meta = params.get("_meta")
    version = meta.get(META_VERSION, "") if isinstance(meta, Mapping) else ""
    method = str(message.get("method", ""))
    out = {"mcp-protocol-version": str(version), "mcp-method": method}
    name = params.get("name", params.get("uri"))
    if method in NAMED_METHODS and isinstance(name, str):
        out["mcp-name"] = header_value(name)
    return out


class HttpTransport:
    """Streamable HTTP to remote nodes, one bearer token per principal."""

    def __init__(
        self, urls: Sequence[str], tokens: dict[str, str], client: httpx.AsyncClient
    ) -> None:
        self.urls = list(urls)
        self.tokens = tokens
        self.client = client

    @property
    def node_count(self) -> int:
        """How many node URLs there are."""
        return len(self.urls)

    async def send(self, node_index: int, principal: str, message: dict[str, Any]) -> Reply:
        """POST the message; a connection failure is NodeDown."""
        headers = request_headers(message)
        headers["authorization"] = f"Bearer {self.tokens[principal]}"
        headers["accept"] = ACCEPT
        try:
            resp = await self.client.post(self.urls[node_index], json=message, headers=headers)
        except httpx.TransportError as exc:
            raise NodeDown(f"{self.urls[node_index]}: {type(exc).__name__}") from exc
        body = resp.json() if resp.content else None
        return Reply(resp.status_code, body)
