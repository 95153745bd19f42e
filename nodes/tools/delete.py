"""notes_delete: pick and confirm a note through form elicitation, then delete it exactly once.

Layer: node, protocol core. Round 1 answers ``input_required`` with a sealed state; round 2 (on
any node) opens the state and lets the store decide the answer atomically.
"""

from __future__ import annotations

from typing import Any

from nodes import errors
from nodes.confirmations import (
    FORM_CAPABILITY,
    STORE_EVENTS,
    Answer,
    form_capable,
    log,
    open_state,
    parse_answer,
    pick_form,
    seal_candidates,
    state_before,
    transition,
    version_shown,
)
from nodes.results import complete, input_required, tool_error
from nodes.sealing import StatePayload
from nodes.tools.base import MAX_CANDIDATES_ERROR, Arguments, CallContext, Tool, ToolFailure
from nodes.tools.crud import TitleArg, WorkspaceArg
from store.api import Confirmation, ConfirmOutcome

FORM_KEY = "confirm_delete"
"""The key of our one input request; the answer comes back under the same key."""


class DeleteArgs(Arguments):
    workspace_uri: WorkspaceArg
    title: TitleArg


class DeleteTool(Tool[DeleteArgs]):
    name = "notes_delete"
    title = "Delete note"
    description = (
        "Delete a note titled `title` in `workspaceUri`. Always asks the user to pick the note "
        "and confirm (form elicitation), even when only one note matches."
    )
    args_model = DeleteArgs
    annotations = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}
    output_schema = {
        "type": "object",
        "properties": {"deleted": {"type": "boolean"}, "noteId": {"type": "string"}},
        "required": ["deleted"],
    }

    async def call(self, ctx: CallContext) -> dict[str, Any]:
        # The capability check comes first and is a protocol error, not a tool failure.
        if not form_capable(ctx.capabilities):
            raise errors.missing_capability(FORM_CAPABILITY)
        # The state binds the arguments, and it was sealed only for arguments that validated:
        # a retry whose arguments do not validate changed them, which is the fixed state error,
        # not an argument error. So the state is verified (once) before the arguments are parsed.
        payload = None if ctx.request_state is None else self.open(ctx, ctx.request_state)
        return await self.guard(lambda: self.answer(ctx, self.parse(ctx), payload))

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
        )

    async def run(self, ctx: CallContext, args: DeleteArgs) -> dict[str, Any]:
        payload = None if ctx.request_state is None else self.open(ctx, ctx.request_state)
        return await self.answer(ctx, args, payload)

    async def answer(
        self, ctx: CallContext, args: DeleteArgs, payload: StatePayload | None
    ) -> dict[str, Any]:
        """Round 1 without a state; with a verified state, decide the answer (or re-ask)."""
        if payload is None:
            return await self.ask(ctx, args, "Which note should be deleted?")
        responses = ctx.input_responses or {}
        if FORM_KEY not in responses:
            # Silence: re-ask with a fresh form rather than failing.
            return await self.ask(ctx, args, "Which note should be deleted?")
        answer = parse_answer(responses[FORM_KEY], payload.candidates)
        return await self.decide(ctx, args, payload, answer)

    async def ask(self, ctx: CallContext, args: DeleteArgs, message: str) -> dict[str, Any]:
        """Round 1 (or a re-ask): look the title up and send the pick-and-confirm form."""
        ws = ctx.authorize(args.workspace_uri)
        snap = await ctx.store.find(ws.tenant, ws.uri, args.title, MAX_CANDIDATES_ERROR + 1)
        notes = tuple(n for n in snap.notes if n.workspace == ws.uri)
        if not notes:
            raise ToolFailure(f"No note titled {args.title!r} in {ws.uri}", deleted=False)
        if len(notes) > MAX_CANDIDATES_ERROR:
            raise ToolFailure(
                f"More than {MAX_CANDIDATES_ERROR} notes are titled {args.title!r}; "
                "rename some first",
                deleted=False,
            )
        token, _ = seal_candidates(
            ctx.config.key_ring,
            audience=ctx.config.server_name,
            principal=ctx.principal,
            tool=self.name,
            arguments=ctx.arguments,
            workspace=ws.uri,
            tenant=ws.tenant,
            notes=notes,
            redis_now_ms=snap.redis_now_ms,
            ttl_ms=ctx.config.state_ttl_ms,
        )
        ctx.counters.rounds += 1
        form = pick_form(message, notes, "Delete this note permanently")
        return input_required({FORM_KEY: form}, token)

    async def decide(
        self, ctx: CallContext, args: DeleteArgs, payload: StatePayload, answer: Answer
    ) -> dict[str, Any]:
        """Round 2: the store decides the answer atomically; map its decision to a result."""
        note_id = answer.note_id or ""
        out = await ctx.store.confirm(
            Confirmation(
                tenant=payload.tenant,
                nonce=payload.nonce,
                action=answer.action,
                answer_digest=answer.digest,
                exp_ms=payload.exp_ms,
                note_id=note_id,
                expected_version=version_shown(payload, note_id) if note_id else 0,
                title=args.title,
                workspace=payload.workspace,
                principal=ctx.principal,
                tool=self.name,
            )
        )
        return await self.result_for(ctx, args, out)

    async def result_for(
        self, ctx: CallContext, args: DeleteArgs, out: ConfirmOutcome
    ) -> dict[str, Any]:
        """Map the store's decision onto the lifecycle table and the client's result."""
        transition(state_before(out.status, out.recorded), STORE_EVENTS[out.status])
        if out.status == "executed":
            ctx.counters.executions += 1
            return complete({"deleted": True, "noteId": out.recorded.removeprefix("deleted:")})
        if out.status == "replay":
            ctx.counters.replays += 1
            if out.recorded.startswith("deleted:"):
                return complete(
                    {"deleted": True, "noteId": out.recorded.removeprefix("deleted:")},
                    replay=True,
                )
            return complete({"deleted": False}, replay=True)
        if out.status in ("declined", "cancelled"):
            return complete({"deleted": False})
        if out.status in ("conflict", "expired"):
            ctx.counters.rejections += 1
            log.info("requestState rejected by the store: %s", out.status)
            raise errors.invalid_state()
        if out.status == "changed":
            return await self.ask(
                ctx, args, "That note changed since it was shown; please pick and confirm again."
            )
        if out.status == "gone":
            return tool_error("That note no longer exists; nothing was deleted", deleted=False)
        return tool_error(
            "That note is no longer in the workspace; nothing was deleted", deleted=False
        )
