"""What every tool shares: the call context, argument validation and the tool interface.

Layer: node, protocol core. No I/O of its own: tools reach the store through ``NoteStoreAPI``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo

from nodes.config import NodeConfig
from nodes.results import tool_error
from nodes.scope import ScopeError, Workspace
from store.api import LookalikeTitle, NoteStoreAPI, WriteOp
from store.fast_init import slot_init

TITLE_MAX = 200
URI_MAX = 2048

BOUND_BY_STATE: Mapping[str, bool] = MappingProxyType({"bound_by_state": True})
"""The validation context of arguments a verified sealed state binds (a later round of a
multi-round call). The state binds the digest of the arguments exactly as sent, and was sealed
only after those very arguments validated, so validators may skip what only refuses (the title
rules, ``nodes.tools.crud``) and keep what shapes the value (types, NFC)."""


def bound_by_state(info: ValidationInfo) -> bool:
    """Whether a validator runs for arguments a verified state binds (``BOUND_BY_STATE``)."""
    context = info.context
    if context is None:  # the common case: no ABC instance check
        return False
    return context is BOUND_BY_STATE or (
        isinstance(context, Mapping) and context.get("bound_by_state") is True
    )


class Arguments(BaseModel):
    """Base of every tool's arguments: strict types, unknown keys refused."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


Title = Field(
    min_length=1,
    max_length=TITLE_MAX,
    description="NFC-normalised; no control, invisible, default-ignorable or bidirectional "
    "characters, variation selectors (but U+FE0F after an emoji), noncharacters or private-use "
    "characters, no space other than U+0020, none at either end, no letters that look like "
    "those of another script in the title (see nodes.tools.text_rules)",
)


@dataclass(slots=True)
class NodeCounters:
    """Mutable counters behind ``Node.statistics()``."""

    requests: int = 0
    notifications: int = 0
    rounds: int = 0
    executions: int = 0
    replays: int = 0
    rejections: int = 0
    errors: dict[int, int] = field(default_factory=dict)


@slot_init  # a cheaper __init__: built on every request
@dataclass(frozen=True, slots=True)
class CallContext:
    """One ``tools/call`` request as a tool sees it."""

    principal: str
    capabilities: Mapping[str, Any]
    arguments: Mapping[str, Any]
    input_responses: Mapping[str, Any] | None
    request_state: str | None
    config: NodeConfig
    store: NoteStoreAPI
    counters: NodeCounters
    idempotency_key: str | None = None
    """The client's idempotency key for this call (``nodes.idempotency``), if it sent one."""
    write_op_of: Callable[[], WriteOp] = WriteOp.fresh
    """Makes ``write_op`` (``nodes.idempotency.write_op`` for this call)."""
    meta: Mapping[str, Any] | None = None
    """The request's ``params._meta`` (``progressToken``, ``logLevel``, ...), if it had one."""
    outbox: list[dict[str, Any]] | None = None
    """Where a handler puts the request-scoped notifications (progress, log messages) sent
    on the response stream before the result; None where the transport takes none."""
    _write_op: WriteOp | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def write_op(self) -> WriteOp:
        """The store operation a write of this call records (stable over retries with a key),
        made on first use and kept: only writes need one, and a fresh one costs a random id."""
        op = self._write_op
        if op is None:
            op = self.write_op_of()
            object.__setattr__(self, "_write_op", op)
        return op

    def meta_value(self, key: str) -> object:
        """``params._meta[key]`` of this request (None when absent)."""
        return None if self.meta is None else self.meta.get(key)

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification on this request's response stream (dropped without one)."""
        if self.outbox is not None:
            self.outbox.append({"jsonrpc": "2.0", "method": method, "params": params})

    def authorize(self, raw_uri: str) -> Workspace:
        """The workspace, if this principal may use it (raises ScopeError otherwise)."""
        return self.config.scope.authorize(self.principal, raw_uri)


def lookalike_refusal(exc: LookalikeTitle) -> dict[str, Any]:
    """The ``isError`` result of a title refused beside a different title that looks like it."""
    return tool_error(
        f"The workspace already holds a note titled {exc.existing!r}, which looks like this "
        "title (the same Unicode UTS #39 skeleton); use that title or one that looks different",
        existingTitle=exc.existing,
    )


class ToolFailure(Exception):
    """A business failure a tool reports as an ``isError`` result."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def result(self) -> dict[str, Any]:
        """The ``isError`` tool result."""
        return tool_error(self.message, **self.details)


def scope_refusal(exc: ScopeError) -> dict[str, Any]:
    """The ``isError`` result of a workspace the principal may not use."""
    return tool_error(str(exc))


A = TypeVar("A", bound=Arguments)


class Tool(Generic[A]):
    """One tool: its definition for ``tools/list`` and its handler."""

    name: ClassVar[str]
    title: ClassVar[str]
    description: ClassVar[str]
    args_model: ClassVar[type[Arguments]]
    annotations: ClassVar[dict[str, Any]] = {}
    output_schema: ClassVar[dict[str, Any] | None] = None

    def definition(self) -> dict[str, Any]:
        """The Tool object listed by ``tools/list`` (identical on every node)."""
        schema = self.args_model.model_json_schema(by_alias=True)
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        schema["additionalProperties"] = False
        out: dict[str, Any] = {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": schema,
            "annotations": {"title": self.title, **self.annotations},
        }
        if self.output_schema is not None:
            out["outputSchema"] = self.output_schema
        return out

    def parse(self, ctx: CallContext, *, bound: bool = False) -> A:
        """Validate the arguments; a failure is a ToolFailure naming the bad fields. ``bound``:
        a verified sealed state binds them (``BOUND_BY_STATE``)."""
        context = BOUND_BY_STATE if bound else None
        try:
            arguments = ctx.arguments
            if type(arguments) is not dict:  # decoded JSON is: no copy (validation only reads)
                arguments = dict(arguments)
            return self.args_model.model_validate(arguments, context=context)  # type: ignore[return-value]
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)
            )
            raise ToolFailure(f"Invalid arguments: {problems}") from None

    async def call(self, ctx: CallContext) -> dict[str, Any]:
        """Run the tool; business failures become ``isError`` results."""
        return await self.guard(lambda: self.run(ctx, self.parse(ctx)))

    async def guard(self, work: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Run ``work``, turning scope refusals and ToolFailure into ``isError`` results."""
        try:
            return await work()
        except ScopeError as exc:
            return scope_refusal(exc)
        except ToolFailure as exc:
            return exc.result()
        except LookalikeTitle as exc:
            return lookalike_refusal(exc)

    async def run(self, ctx: CallContext, args: A) -> dict[str, Any]:
        """The tool's own work, with validated arguments."""
        raise NotImplementedError
