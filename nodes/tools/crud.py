"""The plain tools: notes_create, notes_list, notes_move, notes_update.

Layer: node, protocol core. Each takes ``workspaceUri`` explicitly; nothing is scoped by session.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo

from nodes.results import complete
from nodes.tools.base import (
    URI_MAX,
    Arguments,
    CallContext,
    Title,
    Tool,
    ToolFailure,
    bound_by_state,
)
from nodes.tools.cursors import (
    MAX_CURSOR_CHARS,
    CursorRejected,
    Listing,
    make_cursor,
    open_cursor,
)
from nodes.tools.idempotent import IdempotentTool
from nodes.tools.text_rules import body_problem, nfc, normalize_title
from store.api import NoteHead, QuotaExceeded, WorkspaceFull
from store.keys import NOTE_ID_PATTERN

log = logging.getLogger("nodes.tools")

WorkspaceArg = Annotated[str, Field(min_length=1, max_length=URI_MAX, alias="workspaceUri")]


def _title(value: object, info: ValidationInfo) -> object:
    """A title argument: NFC, and held to the title rules unless a verified state binds it (it
    passed them when the state was sealed: ``nodes.tools.base.BOUND_BY_STATE``)."""
    return nfc(value) if bound_by_state(info) else normalize_title(value)


TitleArg = Annotated[str, BeforeValidator(_title), Title]
BodyArg = Annotated[
    str,
    Field(
        description="Free text: tabs and newlines allowed, other control characters refused; "
        "at most the server's body limit in UTF-8 bytes (65,536 by default)"
    ),
]
NoteIdArg = Annotated[str, Field(pattern=NOTE_ID_PATTERN.pattern, alias="noteId")]


def check_body(ctx: CallContext, body: str | None) -> None:
    """Refuse a body with control characters or over the configured size in UTF-8 bytes."""
    if body is None:
        return
    problem = body_problem(body, ctx.config.max_note_body_bytes)
    if problem is not None:
        raise ToolFailure(f"Invalid arguments: body: {problem}")


def note_summary(note: NoteHead) -> dict[str, Any]:
    """The public view of a note in listings."""
    return {"noteId": note.note_id, "title": note.title, "uri": note.uri, "version": note.version}


class CreateArgs(Arguments):
    workspace_uri: WorkspaceArg
    title: TitleArg
    body: BodyArg = ""


class CreateTool(IdempotentTool[CreateArgs]):
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

    def tenant(self, ctx: CallContext, args: CreateArgs) -> str:
        return ctx.authorize(args.workspace_uri).tenant

    def written(self, note: NoteHead, *, replay: bool) -> dict[str, Any]:
        return complete(
            {"noteId": note.note_id, "uri": note.uri, "title": note.title}, replay=replay
        )

    async def run(self, ctx: CallContext, args: CreateArgs) -> dict[str, Any]:
        check_body(ctx, args.body)
        ws = ctx.authorize(args.workspace_uri)
        limit = ctx.config.max_notes_per_workspace
        try:
            note = await ctx.store.create(
                ws.tenant,
                ws.uri,
                args.title,
                args.body,
                ctx.principal,
                max_notes=limit,
                op=ctx.write_op,
                quota=ctx.config.quota(ws.uri),
            )
        except WorkspaceFull:
            raise ToolFailure(
                f"{ws.uri} holds {limit} notes, its limit; nothing was created"
            ) from None
        except QuotaExceeded as exc:
            raise ToolFailure(
                quota_refusal(ctx, exc, ws.uri, "you", "created"), quota=exc.quota
            ) from None
        return self.written(note, replay=note.replayed)


class ListArgs(Arguments):
    workspace_uri: WorkspaceArg
    title: TitleArg | None = None
    cursor: Annotated[str | None, Field(min_length=1, max_length=MAX_CURSOR_CHARS)] = None


class ListTool(Tool[ListArgs]):
    name = "notes_list"
    title = "List notes"
    description = (
        "List the notes of `workspaceUri`, optionally only those titled exactly `title`, one "
        "page at a time: when the result has `nextCursor`, call again with the same arguments "
        "and `cursor` set to it for the next page."
    )
    args_model = ListArgs
    annotations = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}
    output_schema = {
        "type": "object",
        "properties": {
            "notes": {"type": "array", "items": {"type": "object"}},
            "nextCursor": {"type": "string"},
        },
        "required": ["notes"],
    }

    async def run(self, ctx: CallContext, args: ListArgs) -> dict[str, Any]:
        ws = ctx.authorize(args.workspace_uri)
        listing = Listing(ctx.config.server_name, ctx.principal, ws.uri, args.title or "")
        after = ""
        if args.cursor is not None:
            try:
                after = open_cursor(ctx.config.key_ring, listing, args.cursor)
            except CursorRejected as exc:
                log.info("notes_list cursor rejected: %s", exc.reason)
                raise ToolFailure(
                    "Invalid cursor: pass back the nextCursor of the previous page unchanged, "
                    "with the same arguments, or list again without a cursor"
                ) from None
        size = ctx.config.list_page_size
        if args.title is None:
            snap = await ctx.store.list(ws.tenant, ws.uri, size, after)
        else:
            snap = await ctx.store.find(ws.tenant, ws.uri, args.title, size, after)
        # Defence in depth: only notes whose record still names this workspace are shown.
        content: dict[str, Any] = {
            "notes": [note_summary(n) for n in snap.notes if n.workspace == ws.uri]
        }
        if snap.next_after:
            content["nextCursor"] = make_cursor(ctx.config.key_ring, listing, snap.next_after)
        return complete(content)


class MoveArgs(Arguments):
    workspace_uri: WorkspaceArg
    note_id: NoteIdArg
    target_workspace_uri: Annotated[
        str, Field(min_length=1, max_length=URI_MAX, alias="targetWorkspaceUri")
    ]


class MoveTool(IdempotentTool[MoveArgs]):
    name = "notes_move"
    title = "Move note"
    description = (
        "Move note `noteId` from `workspaceUri` to `targetWorkspaceUri`; the caller must be "
        "authorized for both, and both must belong to the same tenant."
    )
    args_model = MoveArgs
    annotations = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}

    def tenant(self, ctx: CallContext, args: MoveArgs) -> str:
        return ctx.authorize(args.workspace_uri).tenant

    def written(self, note: NoteHead, *, replay: bool) -> dict[str, Any]:
        return complete(note_summary(note), replay=replay)

    async def run(self, ctx: CallContext, args: MoveArgs) -> dict[str, Any]:
        src = ctx.authorize(args.workspace_uri)
        dst = ctx.authorize(args.target_workspace_uri)
        if src.tenant != dst.tenant:
            raise ToolFailure("Notes can move only between workspaces of the same tenant")
        if src.uri == dst.uri:
            raise ToolFailure("The note is already in that workspace")
        limit = ctx.config.max_notes_per_workspace
        quota = ctx.config.quota(dst.uri)
        out = await ctx.store.move(
            src.tenant,
            args.note_id,
            src.uri,
            dst.uri,
            ctx.principal,
            max_notes=limit,
            op=ctx.write_op,
            quota=quota,
        )
        if out.status == "full":
            raise ToolFailure(f"{dst.uri} holds {limit} notes, its limit; nothing was moved")
        if out.status == "quota_share":
            exc = QuotaExceeded("share", quota.workspace_notes, quota.workspace_notes)
            message = quota_refusal(ctx, exc, dst.uri, "the note's owner", "moved")
            raise ToolFailure(message, quota="share")
        if out.status == "quota_writes":
            raise writes_refusal(ctx, dst.uri, "moved")
        if out.status == "unreachable":
            raise ToolFailure(
                f"The note's owner is not granted {dst.uri}: they could neither list nor delete "
                "it there, so only they may move it there; nothing was moved",
                noteId=args.note_id,
            )
        if out.note is None:
            raise ToolFailure(f"No note {args.note_id} in {src.uri}", noteId=args.note_id)
        return self.written(out.note, replay=out.replayed)


class UpdateArgs(Arguments):
    workspace_uri: WorkspaceArg
    note_id: NoteIdArg
    title: TitleArg | None = None
    body: BodyArg | None = None


UPDATE_RETRIES = 8
"""Optimistic retries when the note changes between our read and our write."""


class UpdateTool(IdempotentTool[UpdateArgs]):
    name = "notes_update"
    title = "Update note"
    description = "Edit the title and/or body of note `noteId` in `workspaceUri`."
    args_model = UpdateArgs
    annotations = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}

    def tenant(self, ctx: CallContext, args: UpdateArgs) -> str:
        return ctx.authorize(args.workspace_uri).tenant

    def written(self, note: NoteHead, *, replay: bool) -> dict[str, Any]:
        return complete(note_summary(note), replay=replay)

    async def run(self, ctx: CallContext, args: UpdateArgs) -> dict[str, Any]:
        if args.title is None and args.body is None:
            raise ToolFailure("Invalid arguments: give a new title, a new body, or both")
        check_body(ctx, args.body)
        ws = ctx.authorize(args.workspace_uri)
        for _ in range(UPDATE_RETRIES):
            note = await ctx.store.get(ws.tenant, args.note_id)
            if note is None or note.workspace != ws.uri:
                raise ToolFailure(f"No note {args.note_id} in {ws.uri}", noteId=args.note_id)
            title = note.title if args.title is None else args.title
            body = note.body if args.body is None else args.body
            quota = ctx.config.quota(ws.uri)
            out = await ctx.store.update(
                ws.tenant, note, title, body, ctx.principal, op=ctx.write_op, quota=quota
            )
            if out.note is not None:
                return self.written(out.note, replay=out.replayed)
            if out.status == "quota_bytes":
                exc = QuotaExceeded("bytes", quota.bytes, quota.bytes)
                message = quota_refusal(ctx, exc, ws.uri, "the note's owner", "updated")
                raise ToolFailure(message, quota="bytes")
            if out.status == "quota_writes":
                raise writes_refusal(ctx, ws.uri, "updated")
            if out.status == "not_owner":
                raise ToolFailure(
                    "Only the note's owner may make it larger: its bytes count against the "
                    "owner's quota; nothing was updated",
                    noteId=args.note_id,
                )
            if out.status != "changed":
                raise ToolFailure(f"No note {args.note_id} in {ws.uri}", noteId=args.note_id)
        raise ToolFailure("The note is being edited concurrently; try again")


def quota_refusal(ctx: CallContext, exc: QuotaExceeded, workspace: str, who: str, done: str) -> str:
    """The ``isError`` text of a quota refusal, naming the quota's setting and its value."""
    c = ctx.config
    own = "own" if who == "you" else "owns"
    match exc.quota:
        case "notes":
            what = (
                f"{who} already {own} {exc.limit} notes in this tenant, the "
                "max_notes_per_principal quota"
            )
        case "bytes":
            what = (
                f"the notes {who} {own} would hold more than {exc.limit} bytes "
                "(titles and bodies, UTF-8) in this tenant, the max_bytes_per_principal quota"
            )
        case "share":
            what = (
                f"{who} already {own} {exc.limit} notes in {workspace}, the share of a shared "
                f"workspace one principal may fill (max_share_of_shared_workspace "
                f"{c.max_share_of_shared_workspace:g} of max_notes_per_workspace "
                f"{c.max_notes_per_workspace})"
            )
        case "writes":
            window = c.idempotency_window_ms / 1000
            what = (
                f"you made {exc.limit} writes in this tenant within "
                f"{window:g} s, the max_writes_per_principal quota (each write is remembered "
                "that long)"
            )
    return f"Quota exceeded: {what}; nothing was {done}"


def writes_refusal(ctx: CallContext, workspace: str, done: str) -> ToolFailure:
    """The refusal of a write past the principal's ``max_writes_per_principal``."""
    limit = ctx.config.principal_quota(workspace).writes
    exc = QuotaExceeded("writes", limit, limit)
    return ToolFailure(quota_refusal(ctx, exc, workspace, "you", done), quota="writes")
