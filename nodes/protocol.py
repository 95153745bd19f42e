"""The protocol core of a node: one decoded JSON-RPC message in, one reply out.

Layer: node, protocol core, sans-IO in the h11 sense: no trio, HTTP or Redis import here. The HTTP
app and the in-process transport are thin shells that decode bytes, authenticate, and call
``Node.handle``; the store is reached only through ``store.api.NoteStoreAPI``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from nodes import errors
from nodes.config import NodeConfig
from nodes.headers import check_headers
from nodes.idempotency import idempotency_key, write_op
from nodes.tools import DEFAULT_TOOLS
from nodes.tools.base import CallContext, NodeCounters, Tool
from store.api import NoteStoreAPI, StoreFull, StoreUnavailable
from store.fast_init import slot_init

log = logging.getLogger("nodes.protocol")

PROTOCOL_VERSION = "2026-07-28"
SUPPORTED_VERSIONS: tuple[str, ...] = (PROTOCOL_VERSION,)
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

DISCOVER_TTL_MS = 300_000
"""Discovery and the tool list change only with a deploy: clients may cache them for minutes."""
TOOLS_TTL_MS = 300_000


@slot_init  # a cheaper __init__: built on every request
@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent the message and with which transport headers (names lowercased; None when the
    transport has none to check)."""

    principal: str
    headers: Mapping[str, str] | None = None


@slot_init  # a cheaper __init__: built on every request
@dataclass(frozen=True, slots=True)
class Reply:
    """What the transport sends back: an HTTP status and a JSON body (None: no body, e.g. 202)."""

    status: int
    body: dict[str, Any] | None


@dataclass(frozen=True)
class NodeStatistics:
    """A snapshot of a node's counters."""

    requests: int
    notifications: int
    rounds: int
    executions: int
    replays: int
    rejections: int
    errors: Mapping[int, int] = field(default_factory=dict)


def _what(message: dict[str, Any]) -> str:
    """``method`` or ``method tool`` for a log line (cut short: both are client input)."""
    method = str(message.get("method"))[:40]
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    return f"{method} {name[:40]}" if isinstance(name, str) else method


@slot_init  # a cheaper __init__: built on every request
@dataclass(frozen=True, slots=True)
class PreparedCall:
    """A ``tools/call`` that passed the core's validation (``Node.prepare_call``): what every
    round of it needs besides the round's answers and state. Transports other than the core's
    own (the legacy adapter) drive a call through this and ``Node.run_round``."""

    tool: str
    arguments: Mapping[str, Any]
    principal: str
    capabilities: Mapping[str, Any]
    idempotency_key: str | None = None
    """``_meta["dev.notes-cluster/idempotencyKey"]``, if the call carried one."""


def _valid_id(value: object) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


class Node:
    """One stateless node: everything it knows comes from its config, the store and the request."""

    def __init__(
        self,
        config: NodeConfig,
        store: NoteStoreAPI,
        tools: tuple[Tool[Any], ...] = DEFAULT_TOOLS,
    ) -> None:
        self.config = config
        self.store = store
        self.tools: dict[str, Tool[Any]] = {t.name: t for t in sorted(tools, key=lambda t: t.name)}
        self._tool_list = [t.definition() for t in self.tools.values()]
        self._counters = NodeCounters()
        self._methods = {
            "server/discover": self._discover,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
        }

    def statistics(self) -> NodeStatistics:
        """A frozen snapshot of the counters (requests, rounds, executions, replays, ...)."""
        c = self._counters
        return NodeStatistics(
            c.requests,
            c.notifications,
            c.rounds,
            c.executions,
            c.replays,
            c.rejections,
            dict(c.errors),
        )

    @property
    def server_info(self) -> dict[str, str]:
        """``{name, version}`` for result ``_meta`` (display only)."""
        return {"name": self.config.server_name, "version": self.config.server_version}

    def list_tools(self, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The tool definitions (one page: a cursor is -32602), a copy the caller may edit."""
        if params.get("cursor") is not None:
            raise errors.invalid_params("Invalid cursor: the tool list has a single page")
        return copy.deepcopy(self._tool_list)

    def prepare_call(
        self, params: Mapping[str, Any], principal: str, capabilities: Mapping[str, Any]
    ) -> PreparedCall:
        """Check a ``tools/call``'s name and arguments (JsonRpcError otherwise)."""
        name = params.get("name")
        if not isinstance(name, str):
            raise errors.invalid_params("tools/call needs a string name")
        if name not in self.tools:
            raise errors.invalid_params(f"Unknown tool: {name[:100]}")
        arguments = params.get("arguments", {})
        if not isinstance(arguments, dict):
            raise errors.invalid_params("arguments must be an object")
        key = idempotency_key(params.get("_meta"))
        return PreparedCall(name, arguments, principal, capabilities, key)

    async def run_round(
        self,
        call: PreparedCall,
        input_responses: Mapping[str, Any] | None,
        request_state: str | None,
    ) -> dict[str, Any]:
        """Run one MRTR round of ``call``: the tool's result, complete or ``input_required``
        (JsonRpcError, ``errors.InvalidState`` for a rejected state, StoreUnavailable)."""
        ctx = CallContext(
            principal=call.principal,
            capabilities=call.capabilities,
            arguments=call.arguments,
            input_responses=input_responses,
            request_state=request_state,
            config=self.config,
            store=self.store,
            counters=self._counters,
            idempotency_key=call.idempotency_key,
            write_op_of=partial(
                write_op,
                call.principal,
                call.tool,
                call.arguments,
                call.idempotency_key,
                self.config.idempotency_window_ms,
            ),
        )
        return await self.tools[call.tool].call(ctx)

    async def handle(self, message: object, ctx: RequestContext) -> Reply:
        """Answer one decoded JSON-RPC message. Never raises for bad input."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return self._error(None, errors.invalid_request())
        if "id" not in message:
            # A notification: the core defines none over HTTP; acknowledge and do nothing at all.
            self._counters.notifications += 1
            if not isinstance(message.get("method"), str):
                return self._error(None, errors.invalid_request())
            return Reply(202, None)
        request_id = message["id"]
        if not _valid_id(request_id):
            return self._error(None, errors.invalid_request("Invalid Request: bad id"))
        self._counters.requests += 1
        try:
            result = await self._dispatch(message, ctx)
        except errors.JsonRpcError as exc:
            return self._error(request_id, exc)
        except StoreFull as exc:
            log.warning("store full, request refused (%s): %s", _what(message), exc)
            return self._error(request_id, errors.store_full())
        except StoreUnavailable as exc:
            log.warning("store unavailable (%s): %s", _what(message), exc)
            return self._error(request_id, errors.outcome_unknown_error())
        meta = result.setdefault("_meta", {})
        meta[META_SERVER_INFO] = self.server_info
        return Reply(200, {"jsonrpc": "2.0", "id": request_id, "result": result})

    def _error(self, request_id: object, exc: errors.JsonRpcError) -> Reply:
        self._counters.errors[exc.code] = self._counters.errors.get(exc.code, 0) + 1
        body = {"jsonrpc": "2.0", "id": request_id, "error": exc.to_dict()}
        return Reply(exc.http_status, body)

    async def _dispatch(self, message: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        method = message.get("method")
        if not isinstance(method, str):
            raise errors.invalid_request("Invalid Request: method must be a string")
        handler = self._methods.get(method)
        if handler is None:
            raise errors.method_not_found(method)
        params = message.get("params", {})
        if not isinstance(params, dict):
            raise errors.invalid_params("params must be an object")
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            raise errors.invalid_params("Missing params._meta")
        version = meta.get(META_VERSION)
        if not isinstance(version, str):
            raise errors.invalid_params(f"Missing or invalid _meta[{META_VERSION!r}]")
        capabilities = meta.get(META_CAPABILITIES)
        if not isinstance(capabilities, dict):
            raise errors.invalid_params(f"Missing or invalid _meta[{META_CAPABILITIES!r}]")
        if version not in SUPPORTED_VERSIONS:
            raise errors.unsupported_version(version, SUPPORTED_VERSIONS)
        if ctx.headers is not None:
            check_headers(ctx.headers, method, params, version)
        return await handler(params, capabilities, ctx)

    async def _discover(
        self, params: dict[str, Any], capabilities: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        return {
            "resultType": "complete",
            "supportedVersions": list(SUPPORTED_VERSIONS),
            "capabilities": {"tools": {"listChanged": False}},
            "instructions": self.config.instructions,
            "ttlMs": DISCOVER_TTL_MS,
            "cacheScope": "public",
        }

    async def _tools_list(
        self, params: dict[str, Any], capabilities: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        return {
            "resultType": "complete",
            "tools": self.list_tools(params),
            "ttlMs": TOOLS_TTL_MS,
            "cacheScope": "public",
        }

    async def _tools_call(
        self, params: dict[str, Any], capabilities: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        call = self.prepare_call(params, ctx.principal, capabilities)
        responses = params.get("inputResponses")
        if responses is not None and not isinstance(responses, dict):
            raise errors.invalid_params("Invalid inputResponses: must be an object")
        state = params.get("requestState")
        if state is not None and not isinstance(state, str):
            # A non-string state is still a rejected state: the one fixed answer.
            log.info("requestState rejected: not a string (tool=%s)", call.tool)
            raise errors.invalid_state()
        return await self.run_round(call, responses, state)
