"""The plain tools: notes_create, notes_list, notes_move, notes_update.

Layer: node, protocol core. Each takes ``workspaceUri`` explicitly; nothing is scoped by session.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from nodes.results import complete
from nodes.tools.base import (
    BODY_MAX,
    URI_MAX,
    Arguments,
    CallContext,
    Title,
    Tool,
    ToolFailure,
)
from store.api import Note
from store.keys import NOTE_ID_PATTERN

WorkspaceArg = Annotated[str, Field(min_length=1, max_length=URI_MAX, alias="workspaceUri")]
TitleArg = Annotated[str, Title]
BodyArg = Annotated[str, Field(max_length=BODY_MAX)]
NoteIdArg = Annotated[str, Field(pattern=NOTE_ID_PATTERN.pattern, alias="noteId")]


def note_summary(note: Note) -> dict[str, Any]:
    """The public view of a note in listings."""
    return {"noteId": note.note_id, "title": note.title, "uri": note.uri, "version": note.version}


class CreateArgs(Arguments):
    workspace_uri: WorkspaceArg
    title: TitleArg
    body: BodyArg = ""


class CreateTool(Tool[CreateArgs]):
    name = "notes_create"
    title = "Create note"
    description = "Create a note titled `title` in the workspace `workspaceUri`."
    args_model = CreateArgs
    annotations = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}
    output_schema = {
        "type": "object",
        "properties": {
            "noteId": {"type": "string"},
            "uri": {"type": "string"},
            "title": {"type": "string"},
        },
        "required": ["noteId", "uri", "title"],
    }

    async def run(self, ctx: CallContext, args: CreateArgs) -> dict[str, Any]:
        ws = ctx.authorize(args.workspace_uri)
        note = await ctx.store.create(ws.tenant, ws.uri, args.title, args.body, ctx.principal)
        return complete({"noteId": note.note_id, "uri": note.uri, "title": note.title})


class ListArgs(Arguments):
    workspace_uri: WorkspaceArg
    title: TitleArg | None = None


class ListTool(Tool[ListArgs]):
    name = "notes_list"
    title = "List notes"
    description = "List the notes of `workspaceUri`, optionally only those titled exactly `title`."
    args_model = ListArgs
    annotations = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}
    output_schema = {
        "type": "object",
        "properties": {"notes": {"type": "array", "items": {"type": "object"}}},
        "required": ["notes"],
    }

    async def run(self, ctx: CallContext, args: ListArgs) -> dict[str, Any]:
        ws = ctx.authorize(args.workspace_uri)
        if args.title is None:
            snap = await ctx.store.list(ws.tenant, ws.uri, 1000)
        else:
            snap = await ctx.store.find(ws.tenant, ws.uri, args.title, 1000)
        # Defence in depth: only notes whose record still names this workspace are shown.
        notes = [note_summary(n) for n in snap.notes if n.workspace == ws.uri]
        return complete({"notes": notes})


class MoveArgs(Arguments):
    workspace_uri: WorkspaceArg
    note_id: NoteIdArg
    target_workspace_uri: Annotated[
        str, Field(min_length=1, max_length=URI_MAX, alias="targetWorkspaceUri")
    ]


class MoveTool(Tool[MoveArgs]):
    name = "notes_move"
    title = "Move note"
    description = (
        "Move note `noteId` from `workspaceUri` to `targetWorkspaceUri`; the caller must be "
        "authorized for both, and both must belong to the same tenant."
    )
    args_model = MoveArgs
    annotations = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}

    async def run(self, ctx: CallContext, args: MoveArgs) -> dict[str, Any]:
        src = ctx.authorize(args.workspace_uri)
        dst = ctx.authorize(args.target_workspace_uri)
        if src.tenant != dst.tenant:
            raise ToolFailure("Notes can move only between workspaces of the same tenant")
        if src.uri == dst.uri:
            raise ToolFailure("The note is already in that workspace")
        out = await ctx.store.move(src.tenant, args.note_id, src.uri, dst.uri, ctx.principal)
        if out.note is None:
            raise ToolFailure(f"No note {args.note_id} in {src.uri}", noteId=args.note_id)
        return complete(note_summary(out.note))


class UpdateArgs(Arguments):
    workspace_uri: WorkspaceArg
    note_id: NoteIdArg
    title: TitleArg | None = None
    body: BodyArg | None = None


UPDATE_RETRIES = 8
"""Optimistic retries when the note changes between our read and our write."""


class UpdateTool(Tool[UpdateArgs]):
    name = "notes_update"
    title = "Update note"
    description = "Edit the title and/or body of note `noteId` in `workspaceUri`."
    args_model = UpdateArgs
    annotations = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}

    async def run(self, ctx: CallContext, args: UpdateArgs) -> dict[str, Any]:
        if args.title is None and args.body is None:
            raise ToolFailure("Invalid arguments: give a new title, a new body, or both")
        ws = ctx.authorize(args.workspace_uri)
        for _ in range(UPDATE_RETRIES):
            note = await ctx.store.get(ws.tenant, args.note_id)
            if note is None or note.workspace != ws.uri:
                raise ToolFailure(f"No note {args.note_id} in {ws.uri}", noteId=args.note_id)
            title = note.title if args.title is None else args.title
            body = note.body if args.body is None else args.body
            out = await ctx.store.update(ws.tenant, note, title, body, ctx.principal)
            if out.note is not None:
                return complete(note_summary(out.note))
            if out.status != "changed":
                raise ToolFailure(f"No note {args.note_id} in {ws.uri}", noteId=args.note_id)
        raise ToolFailure("The note is being edited concurrently; try again")
