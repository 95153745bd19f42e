"""The notes prompt (a workspace summary) and the completion of ``workspaceUri``.

Layer: node, protocol core. No I/O of its own: notes come from ``NoteStoreAPI``.

``notes_workspace_summary`` asks the model to summarise one workspace: its argument is the
``workspaceUri`` the tools take, authorized the same way (a workspace the principal may not use
is -32602, as any bad prompt argument). ``completion/complete`` completes that argument, for
the prompt and for the note resource template, from the workspaces the principal's grants cover
(never any other: the completion lists only what ``authorize`` would accept).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodes import errors
from nodes.resources import NOTE_TEMPLATE, note_resource
from nodes.scope import ScopeError
from nodes.tools.base import CallContext

SUMMARY_PROMPT = "notes_workspace_summary"
WORKSPACE_ARGUMENT = "workspaceUri"
MAX_COMPLETIONS = 100
"""The most values one completion returns (the spec's own bound)."""


class NotesPrompts:
    """The workspace summary prompt (``PromptProvider``)."""

    def prompts(self) -> list[dict[str, Any]]:
        """The summary prompt's definition."""
        return [
            {
                "name": SUMMARY_PROMPT,
                "title": "Summarise a workspace",
                "description": "Summarise the notes of one workspace you are authorized for.",
                "arguments": [
                    {
                        "name": WORKSPACE_ARGUMENT,
                        "description": "The workspace, as a file URI (completion lists yours).",
                        "required": True,
                    }
                ],
            }
        ]

    async def get(self, name: str, ctx: CallContext) -> dict[str, Any] | None:
        """The summary prompt for ``ctx.arguments["workspaceUri"]``: one user message listing
        the workspace's first page of notes."""
        if name != SUMMARY_PROMPT:
            return None
        raw = ctx.arguments.get(WORKSPACE_ARGUMENT)
        if not isinstance(raw, str) or not raw:
            raise errors.invalid_params(f"Missing required argument {WORKSPACE_ARGUMENT}")
        try:
            ws = ctx.authorize(raw)
        except ScopeError as exc:
            raise errors.invalid_params(f"Invalid {WORKSPACE_ARGUMENT}: {exc}") from None
        snap = await ctx.store.list(ws.tenant, ws.uri, ctx.config.list_page_size)
        notes = [note_resource(n) for n in snap.notes if n.workspace == ws.uri]
        lines = [f"- {n['title']} ({n['uri']})" for n in notes] or ["(no notes)"]
        text = f"Summarise the notes of the workspace {ws.uri}:\n" + "\n".join(lines)
        return {
            "resultType": "complete",
            "description": f"Summary of {ws.uri}",
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        }

    def complete(
        self, ref: Mapping[str, Any], argument: str, value: str, ctx: CallContext
    ) -> list[str] | None:
        """The principal's workspaces starting with ``value``, for ``workspaceUri`` of the
        summary prompt or of the note template."""
        kind = ref.get("type")
        ours = (kind == "ref/prompt" and ref.get("name") == SUMMARY_PROMPT) or (
            kind == "ref/resource" and ref.get("uri") == NOTE_TEMPLATE["uriTemplate"]
        )
        if not ours:
            return None
        if argument != WORKSPACE_ARGUMENT:
            return []
        return [
            ws.uri
            for ws in ctx.config.scope.workspaces_for(ctx.principal)
            if ws.uri.startswith(value)
        ]
