"""notes_archive: pick and confirm a note, then move it to the workspace's archive exactly once.

Layer: node, protocol core. The same two-round flow as ``notes_delete``
(``nodes.tools.confirming``) with the store's ``move`` operation.

The archive rule: the server config maps each workspace to its archive workspace
(``NodeConfig.archives``, the ``[archives]`` table of the TOML config; the demo maps alice's
Notes to alice's Archive and each load tenant's inbox to its archive). A workspace with no
archive, an archive the caller is not authorized for, or one in another tenant is an ``isError``
result. The target is sealed into the state in round 1 and authorized again in round 2, so a
state can never move a note anywhere but the archive it showed, and never into a workspace the
caller has lost since.
"""

from __future__ import annotations

from typing import Any

from nodes.scope import ScopeError, Workspace, normalize_uri
from nodes.sealing import StatePayload
from nodes.tools.base import CallContext, ToolFailure
from nodes.tools.confirming import ConfirmArgs, ConfirmingTool
from nodes.tools.confirming_table import ARCHIVE

TARGET = "archive"
"""The key of the archive workspace in the sealed state's ``extra``."""


class ArchiveArgs(ConfirmArgs):
    """``workspaceUri`` and ``title``."""


def archive_for(archives: dict[str, str], workspace: str) -> str | None:
    """The configured archive of a canonical workspace URI (config keys in any spelling)."""
    for raw_source, raw_archive in archives.items():
        try:
            if normalize_uri(raw_source) == workspace:
                return raw_archive
        except ScopeError:
            continue
    return None


class ArchiveTool(ConfirmingTool[ArchiveArgs]):
    kind = ARCHIVE
    name = ARCHIVE.tool
    title = "Archive note"
    description = (
        "Move a note titled `title` from `workspaceUri` to that workspace's archive workspace "
        "(set by the server config). Always asks the user to pick the note and confirm (form "
        "elicitation), even when only one note matches."
    )
    args_model = ArchiveArgs
    annotations = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}
    output_schema = {
        "type": "object",
        "properties": {
            "archived": {"type": "boolean"},
            "noteId": {"type": "string"},
            "uri": {"type": "string"},
        },
        "required": ["archived"],
    }
    question = "Which note should be archived?"
    confirm_title = "Move this note to the archive"

    def bind(self, ctx: CallContext, ws: Workspace) -> dict[str, str]:
        return {TARGET: self._archive(ctx, ws.uri, ws.tenant).uri}

    def target(self, ctx: CallContext, payload: StatePayload) -> str:
        bound = payload.extra.get(TARGET)
        if bound is None:  # pragma: no cover - every archive state binds its target
            raise ToolFailure("No archive workspace was shown; nothing was archived")
        return self._checked(ctx, bound, payload.workspace, payload.tenant).uri

    def executed(self, payload: StatePayload, note_id: str) -> dict[str, Any]:
        archive = payload.extra[TARGET]
        return {"archived": True, "noteId": note_id, "uri": f"{archive.rstrip('/')}/{note_id}.md"}

    def _archive(self, ctx: CallContext, source: str, tenant: str) -> Workspace:
        raw = archive_for(dict(ctx.config.archives), source)
        if raw is None:
            raise ToolFailure(f"No archive workspace is configured for {source}", archived=False)
        return self._checked(ctx, raw, source, tenant)

    def _checked(self, ctx: CallContext, raw: str, source: str, tenant: str) -> Workspace:
        """The archive, if the caller may use it and it shares the source's tenant."""
        try:
            archive = ctx.authorize(raw)
        except ScopeError as exc:
            raise ToolFailure(
                f"The archive workspace is not available: {exc}", archived=False
            ) from None
        if archive.tenant != tenant:
            raise ToolFailure(
                "The archive workspace belongs to another tenant; notes move only within one",
                archived=False,
            )
        if archive.uri == source:
            raise ToolFailure("A workspace cannot be its own archive", archived=False)
        return archive
