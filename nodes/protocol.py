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
from nodes.catalog import PromptProvider, ResourceProvider
from nodes.config import NodeConfig
from nodes.headers import check_headers, check_param_headers, header_params
from nodes.idempotency import idempotency_key, write_op
from nodes.prompts import MAX_COMPLETIONS, NotesPrompts
from nodes.resources import TEMPLATES_TTL_MS, NoteResources, not_found
from nodes.tools import DEFAULT_TOOLS
from nodes.tools.base import CallContext, NodeCounters, Tool
from store.api import NoteStoreAPI, StoreFull, StoreRefused, StoreUnavailable
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
PROMPTS_TTL_MS = 300_000
"""The prompt definitions change only with a deploy."""

DEFAULT_RESOURCES: tuple[ResourceProvider, ...] = (NoteResources(),)
"""What every node serves as resources: the notes (``nodes.resources``)."""
DEFAULT_PROMPTS: tuple[PromptProvider, ...] = (NotesPrompts(),)
"""What every node serves as prompts: the workspace summary (``nodes.prompts``)."""

NOTIFICATIONS = object()
"""The key under which a handler's result carries the request-scoped notifications to send
before it (popped by ``Node.handle``; never JSON, so never from a client)."""


_TRACED: set[type[BaseException]] = set()
"""Kinds of unexpected error logged with a traceback already: later ones log one line each."""


def _log_unexpected(message: dict[str, Any], exc: Exception) -> None:
    """Log an unexpected error of a request: its traceback the first time its kind is seen,
    one line after that (a failing store must not write a traceback per request)."""
    kind = type(exc)
    if kind in _TRACED:
        log.error("unexpected error (%s): %s: %s", _what(message), kind.__name__, exc)
        return
    if len(_TRACED) < 256:
        _TRACED.add(kind)
    log.error("unexpected error (%s)", _what(message), exc_info=exc)


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
    notifications: tuple[dict[str, Any], ...] = ()
    """Request-scoped notifications (progress, log messages) to send before ``body`` on a
    response stream; empty for a plain JSON answer."""


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
    meta: Mapping[str, Any] | None = None
    """The call's ``params._meta``."""


def _valid_id(value: object) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


class Node:
    """One stateless node: everything it knows comes from its config, the store and the request."""

    def __init__(
        self,
        config: NodeConfig,
        store: NoteStoreAPI,
        tools: tuple[Tool[Any], ...] | None = None,
        resources: tuple[ResourceProvider, ...] | None = None,
        prompts: tuple[PromptProvider, ...] | None = None,
    ) -> None:
        """Serve ``tools``, ``resources`` and ``prompts`` (None: the defaults, plus the
        conformance fixtures when ``config.conformance_fixtures`` is set; empty: none, and the
        methods and capability are not served at all)."""
        if config.conformance_fixtures:
            from nodes.fixtures import FIXTURE_PROMPTS, FIXTURE_RESOURCES, FIXTURE_TOOLS

            tools = (*DEFAULT_TOOLS, *FIXTURE_TOOLS) if tools is None else tools
            resources = (*DEFAULT_RESOURCES, *FIXTURE_RESOURCES) if resources is None else resources
            prompts = (*DEFAULT_PROMPTS, *FIXTURE_PROMPTS) if prompts is None else prompts
        self.config = config
        self.store = store
        served = DEFAULT_TOOLS if tools is None else tools
        self.tools: dict[str, Tool[Any]] = {t.name: t for t in sorted(served, key=lambda t: t.name)}
        self._tool_list = [t.definition() for t in self.tools.values()]
        self._param_headers = {
            d["name"]: found for d in self._tool_list if (found := header_params(d["inputSchema"]))
        }
        """Tool -> its ``x-mcp-header`` arguments and their headers (SEP-2243)."""
        self.resources = DEFAULT_RESOURCES if resources is None else resources
        self.prompts = DEFAULT_PROMPTS if prompts is None else prompts
        self._prompt_list = [p for provider in self.prompts for p in provider.prompts()]
        self._counters = NodeCounters()
        self._methods = {
            "server/discover": self._discover,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
        }
        capabilities: dict[str, Any] = {"tools": {"listChanged": False}}
        if self.resources:
            capabilities["resources"] = {"listChanged": False, "subscribe": False}
            self._methods["resources/list"] = self._resources_list
            self._methods["resources/templates/list"] = self._templates_list
            self._methods["resources/read"] = self._resources_read
        if self.prompts:
            capabilities["prompts"] = {"listChanged": False}
            capabilities["completions"] = {}
            self._methods["prompts/list"] = self._prompts_list
            self._methods["prompts/get"] = self._prompts_get
            self._methods["completion/complete"] = self._complete
        self.capabilities = capabilities
        """What ``server/discover`` advertises: exactly the methods served."""

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
        meta = params.get("_meta")
        key = idempotency_key(meta)
        return PreparedCall(
            name,
            arguments,
            principal,
            capabilities,
            key,
            meta if isinstance(meta, dict) else None,
        )

    async def run_round(
        self,
        call: PreparedCall,
        input_responses: Mapping[str, Any] | None,
        request_state: str | None,
        outbox: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Run one MRTR round of ``call``: the tool's result, complete or ``input_required``
        (JsonRpcError, ``errors.InvalidState`` for a rejected state, StoreUnavailable); the
        notifications it sends go to ``outbox``."""
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
            meta=call.meta,
            outbox=outbox,
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
        except StoreRefused as exc:
            log.warning("store refused (%s): %s", _what(message), exc)
            return self._error(
                request_id, errors.store_refused(exc.reason, maybe_ran=exc.maybe_ran)
            )
        except StoreUnavailable as exc:
            log.warning("store unavailable (%s): %s", _what(message), exc)
            return self._error(request_id, errors.outcome_unknown_error())
        except Exception as exc:  # a bug or an error of an unforeseen kind: never id null
            _log_unexpected(message, exc)
            return self._error(request_id, errors.internal_error())
        notifications = result.pop(NOTIFICATIONS, ())  # type: ignore[call-overload]
        meta = result.setdefault("_meta", {})
        meta[META_SERVER_INFO] = self.server_info
        body = {"jsonrpc": "2.0", "id": request_id, "result": result}
        return Reply(200, body, tuple(notifications))

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
        # Headers and body are compared before the version is judged: a header saying one
        # version and a body another is a HeaderMismatch (-32020) whichever of them we support.
        if ctx.headers is not None:
            check_headers(ctx.headers, method, params, version)
        capabilities = meta.get(META_CAPABILITIES)
        if not isinstance(capabilities, dict):
            raise errors.invalid_params(f"Missing or invalid _meta[{META_CAPABILITIES!r}]")
        if version not in SUPPORTED_VERSIONS:
            raise errors.unsupported_version(version, SUPPORTED_VERSIONS)
        return await handler(params, capabilities, ctx)

    async def _discover(
        self, params: dict[str, Any], capabilities: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        return {
            "resultType": "complete",
            "supportedVersions": list(SUPPORTED_VERSIONS),
            "capabilities": copy.deepcopy(self.capabilities),
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
        if ctx.headers is not None and call.tool in self._param_headers:
            check_param_headers(ctx.headers, self._param_headers[call.tool], call.arguments)
        responses = params.get("inputResponses")
        if responses is not None and not isinstance(responses, dict):
            raise errors.invalid_params("Invalid inputResponses: must be an object")
        state = params.get("requestState")
        if state is not None and not isinstance(state, str):
            # A non-string state is still a rejected state: the one fixed answer.
            log.info("requestState rejected: not a string (tool=%s)", call.tool)
            raise errors.invalid_state()
        outbox: list[dict[str, Any]] = []
        result = await self.run_round(call, responses, state, outbox)
        if outbox:
            result[NOTIFICATIONS] = outbox  # type: ignore[index]  # popped by handle
        return result

    def _context(
        self,
        params: dict[str, Any],
        capabilities: dict[str, Any],
        ctx: RequestContext,
        arguments: Mapping[str, Any],
    ) -> CallContext:
        """The context a resource or prompt provider runs in: one MRTR round of this request
        (``inputResponses`` and ``requestState`` checked as for ``tools/call``)."""
        responses = params.get("inputResponses")
        if responses is not None and not isinstance(responses, dict):
            raise errors.invalid_params("Invalid inputResponses: must be an object")
        state = params.get("requestState")
        if state is not None and not isinstance(state, str):
            log.info("requestState rejected: not a string")
            raise errors.invalid_state()
        meta = params.get("_meta")
        return CallContext(
            principal=ctx.principal,
            capabilities=capabilities,
            arguments=arguments,
            input_responses=responses,
            request_state=state,
            config=self.config,
            store=self.store,
            counters=self._counters,
            meta=meta if isinstance(meta, dict) else None,
        )

    async def _resources_list(
        self, params: dict[str, Any], capabilities: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        if params.get("cursor") is not None:
            raise errors.invalid_params("Invalid cursor: the resource list has a single page")
        call = self._context(params, capabilities, ctx, {})
        found = [r for provider in self.resources for r in await provider.list_resources(call)]
        # The notes listed depend on the principal's grants: never shared between them.
        return {"resultType": "complete", "resources": found, "ttlMs": 0, "cacheScope": "private"}

    async def _templates_list(
        self, params: dict[str, Any], capabilities: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        if params.get("cursor") is not None:
            raise errors.invalid_params("Invalid cursor: the template list has a single page")
        templates = [t for provider in self.resources for t in provider.templates()]
        return {
            "resultType": "complete",
            "resourceTemplates": templates,
            "ttlMs": TEMPLATES_TTL_MS,
            "cacheScope": "public",
        }

    async def _resources_read(
        self, params: dict[str, Any], capabilities: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        uri = params.get("uri")
        if not isinstance(uri, str) or not uri:
            raise errors.invalid_params("resources/read needs a string uri")
        call = self._context(params, capabilities, ctx, {"uri": uri})
        for provider in self.resources:
            result = await provider.read(uri, call)
            if result is not None:
                return _uncached_if_retry(result, params)
        raise not_found(uri)

    async def _prompts_list(
        self, params: dict[str, Any], capabilities: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        if params.get("cursor") is not None:
            raise errors.invalid_params("Invalid cursor: the prompt list has a single page")
        return {
            "resultType": "complete",
            "prompts": copy.deepcopy(self._prompt_list),
            "ttlMs": PROMPTS_TTL_MS,
            "cacheScope": "public",
        }

    async def _prompts_get(
        self, params: dict[str, Any], capabilities: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise errors.invalid_params("prompts/get needs a string name")
        arguments = params.get("arguments", {})
        if not isinstance(arguments, dict) or not all(
            isinstance(v, str) for v in arguments.values()
        ):
            raise errors.invalid_params("arguments must be an object of strings")
        call = self._context(params, capabilities, ctx, arguments)
        for provider in self.prompts:
            result = await provider.get(name, call)
            if result is not None:
                return result
        raise errors.invalid_params(f"Unknown prompt: {name[:100]}")

    async def _complete(
        self, params: dict[str, Any], capabilities: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        ref = params.get("ref")
        argument = params.get("argument")
        if not isinstance(ref, dict) or not isinstance(ref.get("type"), str):
            raise errors.invalid_params("completion/complete needs a ref with a type")
        if not isinstance(argument, dict):
            raise errors.invalid_params("completion/complete needs an argument")
        name, value = argument.get("name"), argument.get("value")
        if not isinstance(name, str) or not isinstance(value, str):
            raise errors.invalid_params("argument needs a string name and a string value")
        call = self._context(params, capabilities, ctx, {})
        for provider in self.prompts:
            values = provider.complete(ref, name, value, call)
            if values is not None:
                return {
                    "resultType": "complete",
                    "completion": {
                        "values": values[:MAX_COMPLETIONS],
                        "total": len(values),
                        "hasMore": len(values) > MAX_COMPLETIONS,
                    },
                }
        raise errors.invalid_params("Unknown completion reference")


def _uncached_if_retry(result: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """A complete result of an MRTR retry is never cached (SEP-2549): ``ttlMs`` 0, private."""
    if result.get("resultType") == "complete" and (
        "inputResponses" in params or "requestState" in params
    ):
        result["ttlMs"] = 0
        result["cacheScope"] = "private"
    return result
