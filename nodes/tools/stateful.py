"""What every multi-round tool shares: a retry carries a sealed state, verified once and before
the arguments are parsed.

Layer: node, protocol core. No I/O. The state binds the arguments and was sealed only for
arguments that validated, so a retry whose arguments do not validate changed them: that is the
one fixed invalid-state error, not an argument error. Hence the order: capability, state,
arguments, then the tool's ``answer``. Arguments under a verified state are validated with
``BOUND_BY_STATE``: the state binds them exactly as sent and they passed every rule when it was
sealed, so the rules that only refuse (the title rules) are not run again; types and NFC are.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from nodes.request_state import open_state
from nodes.scope import ScopeError
from nodes.sealing import StatePayload
from nodes.tools.base import Arguments, CallContext, Tool, ToolFailure, scope_refusal

A = TypeVar("A", bound=Arguments)


class StatefulTool(Tool[A]):
    """A tool answered over several rounds; subclasses implement ``answer``."""

    state_phase: ClassVar[str] = "confirm"
    """The phase sealed into this tool's states; a state of another phase never opens here."""

    def require_capabilities(self, ctx: CallContext) -> None:
        """Raise -32021 when this request lacks a capability the tool cannot do without."""

    async def call(self, ctx: CallContext) -> dict[str, Any]:
        # The capability check comes first and is a protocol error, not a tool failure.
        self.require_capabilities(ctx)
        payload = None if ctx.request_state is None else self.open(ctx, ctx.request_state)
        # ``guard``'s refusals, here: without its frame and closure on every round.
        try:
            return await self.answer(ctx, self.parse(ctx, bound=payload is not None), payload)
        except ScopeError as exc:
            return scope_refusal(exc)
        except ToolFailure as exc:
            return exc.result()

    def open(self, ctx: CallContext, token: str) -> StatePayload:
        """Open the sealed state and check its bindings (the one fixed -32602 otherwise)."""
        return open_state(
            ctx.config.key_ring,
            token,
            audience=ctx.config.server_name,
            principal=ctx.principal,
            tool=self.name,
            arguments=ctx.arguments,
            node_now_ms=ctx.config.node_clock_ms(),
            phase=self.state_phase,
        )

    async def answer(
        self, ctx: CallContext, args: A, payload: StatePayload | None
    ) -> dict[str, Any]:
        """Round 1 when ``payload`` is None; otherwise a retry under a verified state."""
        raise NotImplementedError
