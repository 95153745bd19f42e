"""What every write tool shares: one write per operation, and the idempotency key's replay.

Layer: node, protocol core. No I/O of its own. ``notes_create``, ``notes_update`` and
``notes_move`` pass ``CallContext.write_op`` to the store, which records it atomically with the
write (``store/scripts/op_record.lua``): a script run twice with it writes once. With an
idempotency key (``nodes.idempotency``) the operation is stable over the client's retries, so:

- before the tool runs, a write recorded under the key answers at once: the recorded result,
  marked ``_meta["dev.notes-cluster/replay"] = true`` as a confirmation's replay is;
- a write recorded under the key with other arguments or another tool is -32602
  (``errors.idempotency_key_reused``), and nothing is done;
- a retry racing the first request reaches the store's script, which finds the record itself;
- a retry whose own checks fail because the first request already wrote (the note it moved is
  no longer in the source, say) looks the record up again before answering ``isError``.

A call that wrote nothing (refused, ``isError``) records nothing: its retry runs again.
"""

from __future__ import annotations

from typing import Any, TypeVar

from nodes import errors
from nodes.tools.base import Arguments, CallContext, Tool
from store.api import IdempotencyConflict, NoteHead

A = TypeVar("A", bound=Arguments)


class IdempotentTool(Tool[A]):
    """A tool whose one write is recorded under the call's operation; subclasses name the
    tenant the write goes to (``tenant``) and word a recorded write as a result (``written``)."""

    def tenant(self, ctx: CallContext, args: A) -> str:
        """The tenant the write goes to (its records live in the tenant's slot); raises
        ScopeError or ToolFailure when the caller may not write there."""
        raise NotImplementedError

    def written(self, note: NoteHead, *, replay: bool) -> dict[str, Any]:
        """The complete result for the note this tool's write left behind."""
        raise NotImplementedError

    async def call(self, ctx: CallContext) -> dict[str, Any]:
        try:
            return await self.guard(lambda: self._call(ctx))
        except IdempotencyConflict:
            raise errors.idempotency_key_reused() from None

    async def _call(self, ctx: CallContext) -> dict[str, Any]:
        args = self.parse(ctx)
        if ctx.idempotency_key is None:
            return await self.run(ctx, args)
        tenant = self.tenant(ctx, args)
        recorded = await self._recorded(ctx, tenant)
        if recorded is not None:
            return recorded
        result = await self.guard(lambda: self.run(ctx, args))
        if result.get("isError"):
            # The first request with this key may have written after our look-up and before
            # our own checks ran: then its record is there, and it is the answer.
            recorded = await self._recorded(ctx, tenant)
            if recorded is not None:
                return recorded
        return result

    async def _recorded(self, ctx: CallContext, tenant: str) -> dict[str, Any] | None:
        """The replayed result of the write recorded under this call's operation, or None."""
        found = await ctx.store.recorded_write(tenant, ctx.write_op.op_id)
        if found is None:
            return None
        if found.digest != ctx.write_op.digest:
            raise IdempotencyConflict("the idempotency key was used for another request")
        ctx.counters.replays += 1
        return self.written(found.note, replay=True)
