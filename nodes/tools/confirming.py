"""What every confirming tool shares: pick and confirm a note by form, then one atomic step.

Layer: node, protocol core. No I/O of its own. ``notes_delete`` and ``notes_archive`` are the same
two-round flow and differ only in their row of ``nodes.tools.confirming_table`` (form key, result
key, store operation), their words, and what they bind in the sealed state besides the candidates
(archive: its target). Round 1 answers ``input_required`` with a sealed state; round 2 (on any
node) opens the state once and lets ``confirm.lua`` decide the answer; the lifecycle table
(``nodes.lifecycle``) turns the store's decision into what the client gets.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, TypeVar, assert_never

from nodes import errors
from nodes.capabilities import FORM_CAPABILITY, form_capable
from nodes.confirm_form import Answer, parse_answer, pick_form
from nodes.lifecycle import decide
from nodes.request_state import seal_state, version_shown
from nodes.results import complete, input_required, tool_error
from nodes.scope import Workspace
from nodes.sealing import Candidate, StatePayload
from nodes.tools.base import Arguments, CallContext, ToolFailure
from nodes.tools.confirming_table import ConfirmingKind
from nodes.tools.crud import TitleArg, WorkspaceArg, quota_refusal
from nodes.tools.stateful import StatefulTool
from store.api import Confirmation, ConfirmOutcome, QuotaExceeded
from store.fault_points import buggify_delay

log = logging.getLogger(__name__)


class ConfirmArgs(Arguments):
    """The arguments of every confirming tool: a workspace and an exact title."""

    workspace_uri: WorkspaceArg
    title: TitleArg


C = TypeVar("C", bound=ConfirmArgs)


class ConfirmingTool(StatefulTool[C]):
    """A tool that always asks the user to pick and confirm a note, then mutates it once.

    Subclasses name their row of the confirming table and their words, and may bind extra values
    into the state (``bind``) and check them again before the mutation (``target``).
    """

    kind: ClassVar[ConfirmingKind]
    """This tool's row of ``nodes.tools.confirming_table``: form key, result key, store op."""
    question: ClassVar[str]
    """The form's message in round 1."""
    confirm_title: ClassVar[str]
    """The title of the form's confirm boolean."""

    @property
    def done(self) -> str:
        """The result's boolean key and the past participle in messages ("deleted", ...)."""
        return self.kind.result_key

    def require_capabilities(self, ctx: CallContext) -> None:
        if not form_capable(ctx.capabilities):
            raise errors.missing_capability(FORM_CAPABILITY)

    def bind(self, ctx: CallContext, ws: Workspace) -> dict[str, str]:
        """Tool-specific values to seal with the candidates (raise ScopeError/ToolFailure to
        refuse before anything is looked up)."""
        return {}

    def target(self, ctx: CallContext, payload: StatePayload) -> str:
        """The target workspace for the store operation, checked again in round 2."""
        return ""

    def executed(self, payload: StatePayload, note_id: str) -> dict[str, Any]:
        """The structured content of an executed (or replayed) operation."""
        return {self.done: True, "noteId": note_id}

    async def answer(
        self, ctx: CallContext, args: C, payload: StatePayload | None
    ) -> dict[str, Any]:
        """Round 1 without a state; with a verified state, decide the answer (or re-ask)."""
        if payload is None:
            return await self.ask(ctx, args, self.question)
        responses = ctx.input_responses or {}
        if self.kind.form_key not in responses:
            # Silence: re-ask with a fresh form rather than failing.
            return await self.ask(ctx, args, self.question)
        answer = parse_answer(responses[self.kind.form_key], payload.candidates)
        return await self.decide(ctx, args, payload, answer)

    async def ask(self, ctx: CallContext, args: C, message: str) -> dict[str, Any]:
        """Round 1 (or a re-ask): look the title up and send the pick-and-confirm form."""
        ws = ctx.authorize(args.workspace_uri)
        extra = self.bind(ctx, ws)
        limit = ctx.config.max_offered
        snap = await ctx.store.find(ws.tenant, ws.uri, args.title, limit + 1)
        await buggify_delay("node.ask.after_find")
        notes = tuple(n for n in snap.notes if n.workspace == ws.uri)
        if not notes:
            raise ToolFailure(f"No note titled {args.title!r} in {ws.uri}", **{self.done: False})
        if len(notes) > limit:
            raise ToolFailure(
                f"More than {limit} notes are titled {args.title!r}; rename some first",
                **{self.done: False},
            )
        token, _ = seal_state(
            ctx.config.key_ring,
            audience=ctx.config.server_name,
            principal=ctx.principal,
            tool=self.name,
            arguments=ctx.arguments,
            workspace=ws.uri,
            tenant=ws.tenant,
            candidates=tuple(Candidate(note_id=n.note_id, version=n.version) for n in notes),
            phase=self.state_phase,
            redis_now_ms=snap.redis_now_ms,
            ttl_ms=ctx.config.state_ttl_ms,
            extra=extra,
        )
        ctx.counters.rounds += 1
        form = pick_form(message, notes, self.confirm_title)
        return input_required({self.kind.form_key: form}, token)

    async def decide(
        self, ctx: CallContext, args: C, payload: StatePayload, answer: Answer
    ) -> dict[str, Any]:
        """Round 2: the store decides the answer atomically; map its decision to a result."""
        note_id = answer.note_id or ""
        target = self.target(ctx, payload) if answer.action == "accept" else ""
        await buggify_delay("node.decide.before_confirm")
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
                op=self.kind.op,
                target_workspace=target,
                max_notes=ctx.config.max_notes_per_workspace if self.kind.op == "move" else 0,
                max_owner_notes=ctx.config.share_of(target) if self.kind.op == "move" else 0,
                max_writes=ctx.config.principal_quota(payload.workspace).writes,
                window_ms=ctx.config.idempotency_window_ms,
            )
        )
        return await self.result_for(ctx, args, payload, out)

    async def result_for(
        self, ctx: CallContext, args: C, payload: StatePayload, out: ConfirmOutcome
    ) -> dict[str, Any]:
        """What the client gets for the store's decision: the lifecycle table names it (see
        ``nodes.lifecycle``), this dispatch words it for this tool."""
        reply = decide(out)
        not_done = {self.done: False}
        match reply:
            case "done":
                ctx.counters.executions += 1
                return complete(self.executed(payload, self._recorded_note(out)))
            case "replay_done":
                ctx.counters.replays += 1
                return complete(self.executed(payload, self._recorded_note(out)), replay=True)
            case "replay_not_done":
                ctx.counters.replays += 1
                return complete(not_done, replay=True)
            case "not_done":
                return complete(not_done)
            case "refused":
                ctx.counters.rejections += 1
                log.info("requestState rejected by the store: %s", out.status)
                raise errors.invalid_state()
            case "reask":
                return await self.ask(
                    ctx,
                    args,
                    "That note changed since it was shown; please pick and confirm again.",
                )
            case "gone":
                return tool_error(
                    f"That note no longer exists; nothing was {self.done}", **not_done
                )
            case "left":
                return tool_error(
                    f"That note is no longer in the workspace; nothing was {self.done}", **not_done
                )
            case "full" if out.quota == "writes":
                where = self.target(ctx, payload)
                limit = ctx.config.principal_quota(payload.workspace).writes
                exc = QuotaExceeded("writes", limit, limit)
                message = quota_refusal(ctx, exc, where, "you", self.done)
                return tool_error(message, quota="writes", **not_done)
            case "full" if out.quota == "share":
                where = self.target(ctx, payload)
                limit = ctx.config.share_of(where)
                exc = QuotaExceeded("share", limit, limit)
                message = quota_refusal(ctx, exc, where, "the note's owner", self.done)
                return tool_error(message, quota="share", **not_done)
            case "full":
                limit = ctx.config.max_notes_per_workspace
                return tool_error(
                    f"The target workspace holds {limit} notes, its limit; nothing was {self.done}",
                    **not_done,
                )
            case _:  # pragma: no cover - mypy checks the match is exhaustive
                assert_never(reply)

    def _recorded_note(self, out: ConfirmOutcome) -> str:
        """The note this tool's operation recorded under the nonce (the store's typed outcome)."""
        if out.op != self.kind.op or out.note_id is None:  # pragma: no cover - one tool per nonce
            raise ValueError(f"{self.name}: the store recorded {out.op} of {out.note_id}")
        return out.note_id
