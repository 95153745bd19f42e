"""notes_setup: connect the external report service through a URL-mode elicitation.

Layer: node, protocol core. No I/O of its own. The credential of the report service must never
pass through the MCP client, so the tool never asks for it in a form: round 1 answers
``input_required`` with a URL-mode elicitation (``{mode: "url", message, url}``, no
``elicitationId`` at 2026-07-28) pointing at a setup page the cluster serves itself
(``nodes.setup_page``) and a sealed state (phase ``setup``) whose nonce names the link.

The page, opened by the same principal, records the completion in the store
(``store/scripts/setup.lua``). On the retry, ``accept`` means only that the user agreed to open
the URL: the node looks the completion up in the store (any node sees it) and answers
``{configured: true}``, or offers the same link again (a new ``input_required`` with the same
state) while the link is unexpired. ``decline`` and ``cancel`` answer ``{configured: false}``
and write nothing. A state past its expiry (Redis clock) with no completion gets the fixed
invalid-state error, as every state does. Nothing of the credential appears in
``inputResponses``, results or logs: it goes only to the page, which never stores or logs it.

Without ``elicitation.url`` in this request's capabilities the answer is ``-32021`` with
``data.requiredCapabilities = {"elicitation": {"url": {}}}``.
"""

from __future__ import annotations

import logging
from typing import Any

from nodes import errors
from nodes.capabilities import URL_CAPABILITY, url_capable
from nodes.request_state import seal_state
from nodes.results import complete, input_required
from nodes.sealing import StatePayload
from nodes.setup_links import link_url, seal_link
from nodes.tools.base import Arguments, CallContext, ToolFailure
from nodes.tools.crud import WorkspaceArg
from nodes.tools.stateful import StatefulTool

SETUP_KEY = "report_service"
"""The key of our one input request; the answer comes back under the same key."""

STATE_PHASE = "setup"

log = logging.getLogger(__name__)


def parse_url_answer(raw: object) -> str:
    """The action of a URL-mode answer (-32602 if malformed). A URL-mode accept has no content."""
    if not isinstance(raw, dict):
        raise errors.invalid_params("Invalid inputResponses: each answer must be an object")
    if set(raw) - {"action", "_meta"}:
        raise errors.invalid_params("Invalid inputResponses: a URL-mode answer is only an action")
    action = raw.get("action")
    if action not in ("accept", "decline", "cancel"):
        raise errors.invalid_params(
            "Invalid inputResponses: action must be accept, decline or cancel"
        )
    return str(action)


class SetupArgs(Arguments):
    workspace_uri: WorkspaceArg


class SetupTool(StatefulTool[SetupArgs]):
    name = "notes_setup"
    title = "Set up the report service"
    description = (
        "First-run setup of the report service connection for `workspaceUri`. Sends you to a "
        "setup page served by this cluster (URL-mode elicitation) where you enter the service's "
        "credential; it never passes through this client. Needs the `elicitation.url` client "
        "capability."
    )
    args_model = SetupArgs
    annotations = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}
    output_schema = {
        "type": "object",
        "properties": {"configured": {"type": "boolean"}},
        "required": ["configured"],
    }

    state_phase = STATE_PHASE

    def require_capabilities(self, ctx: CallContext) -> None:
        if not url_capable(ctx.capabilities):
            raise errors.missing_capability(URL_CAPABILITY)

    async def answer(
        self, ctx: CallContext, args: SetupArgs, payload: StatePayload | None
    ) -> dict[str, Any]:
        """Round 1 without a state; with a verified state, check the store (or offer again)."""
        ws = ctx.authorize(args.workspace_uri)
        if payload is None:
            now = await ctx.store.redis_time_ms()
            token, payload = seal_state(
                ctx.config.key_ring,
                audience=ctx.config.server_name,
                principal=ctx.principal,
                tool=self.name,
                arguments=ctx.arguments,
                workspace=ws.uri,
                tenant=ws.tenant,
                candidates=(),
                phase=STATE_PHASE,
                redis_now_ms=now,
                ttl_ms=ctx.config.state_ttl_ms,
            )
            ctx.counters.rounds += 1
            return self.offer(ctx, payload, token, "")
        responses = ctx.input_responses or {}
        if SETUP_KEY not in responses:
            # Silence: offer the same link again rather than failing.
            return self.offer(ctx, payload, ctx.request_state or "", "")
        if parse_url_answer(responses[SETUP_KEY]) != "accept":
            return complete({"configured": False})
        who = await ctx.store.setup_completed_by(payload.tenant, payload.nonce)
        if who == ctx.principal:
            return complete({"configured": True})
        if who is not None:  # the page records only the link's own principal: defence in depth
            log.warning("setup link %s completed by another principal", payload.nonce[:6])
        if await ctx.store.redis_time_ms() >= payload.exp_ms:
            ctx.counters.rejections += 1
            log.info("requestState rejected: setup link expired uncompleted")
            raise errors.invalid_state()
        return self.offer(
            ctx,
            payload,
            ctx.request_state or "",
            "The setup page has not been completed yet. ",
        )

    def offer(
        self, ctx: CallContext, payload: StatePayload, token: str, prefix: str
    ) -> dict[str, Any]:
        """The URL-mode elicitation for ``payload``'s link, with the call's state."""
        base = ctx.config.public_url
        if base is None:
            raise ToolFailure("This node serves no setup page (no public URL)", configured=False)
        url = link_url(base, seal_link(ctx.config.key_ring, payload))
        message = (
            f"{prefix}Open this page to connect the report service for {payload.workspace}. "
            "Sign in there with your own notes-cluster token and enter the service's "
            "credential on the page (never here), then come back and accept."
        )
        request = {
            "method": "elicitation/create",
            "params": {"mode": "url", "message": message, "url": url},
        }
        return input_required({SETUP_KEY: request}, token)
