"""Notes as resources: ``resources/list``, ``resources/templates/list`` and ``resources/read``.

Layer: node, protocol core. No I/O of its own: notes come from ``NoteStoreAPI``.

A note's resource URI is the URI it shows everywhere (``NoteHead.uri``):
``<workspaceUri>/<noteId>.md``. The workspace in it is the explicit scope: a read authorizes the
principal for that workspace (the same check every tool makes) and serves the note only if its
record still names that workspace. A URI naming a workspace the principal may not use, a note
that does not exist or one that lives elsewhere all answer the same -32602 "Resource not found"
with ``data.uri`` (SEP-2164), so a client cannot probe what exists.

``notes:titled/<title>`` names the notes titled exactly ``<title>`` in the workspaces of the
client's roots: it has no scope of its own, so its read asks for the roots over MRTR (a
``roots/list`` input request, as ``notes_search`` does) and completes on the retry, on any node
(nothing is sealed or stored between the rounds: the retry re-derives everything from the
roots it carries and the node's configuration). Without the ``roots`` capability it is -32021.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from nodes import errors
from nodes.capabilities import ROOTS_CAPABILITY, roots_capable
from nodes.scope import ScopeError, Workspace
from nodes.tools.base import TITLE_MAX, CallContext
from nodes.tools.search import ROOTS_KEY, ROOTS_REQUEST, parse_roots, workspaces_in_roots
from store.api import Note
from store.keys import NOTE_ID_PATTERN

NOTE_MIME = "text/markdown"
TITLED_PREFIX = "notes:titled/"
"""Scheme and path of the roots-scoped resource: the rest is the percent-encoded title."""

NOTES_TTL_MS = 0
"""Notes change under other clients at any moment: a cached list or read would show a deleted
note, so every note result is immediately stale (SEP-2549: clients may still revalidate)."""
TEMPLATES_TTL_MS = 300_000
"""The templates change only with a deploy, like the tool list."""
MAX_TITLED = 50
"""Most notes one ``notes:titled/`` read returns (the pick-list bound of the tools)."""

NOTE_TEMPLATE: dict[str, Any] = {
    "uriTemplate": "{+workspaceUri}/{noteId}.md",
    "name": "note",
    "title": "Note",
    "description": "A note by id in a workspace you are authorized for (workspaceUri as in "
    "the tools).",
    "mimeType": NOTE_MIME,
}
TITLED_TEMPLATE: dict[str, Any] = {
    "uriTemplate": TITLED_PREFIX + "{title}",
    "name": "notes-titled",
    "title": "Notes by title, in your roots",
    "description": "The notes titled exactly {title} in the workspaces you are authorized for "
    "inside your roots: the server asks your client for its roots (roots are deprecated in MCP "
    "2026-07-28; prefer a note's own URI, which names its workspace).",
    "mimeType": NOTE_MIME,
}


def not_found(uri: str) -> errors.JsonRpcError:
    """-32602 "Resource not found" with the URI (SEP-2164), whatever the reason."""
    return errors.invalid_params("Resource not found", {"uri": uri[:2048]})


def note_resource(note: Note | Any) -> dict[str, Any]:
    """The Resource object of a note (listing)."""
    return {
        "uri": note.uri,
        "name": note.title,
        "title": note.title,
        "description": f"Note {note.note_id} in {note.workspace}",
        "mimeType": NOTE_MIME,
    }


def note_contents(note: Note) -> dict[str, Any]:
    """The TextResourceContents of a note."""
    return {"uri": note.uri, "mimeType": NOTE_MIME, "text": note.body}


def titled_uri(title: str) -> str:
    """The ``notes:titled/`` URI of ``title``."""
    return TITLED_PREFIX + quote(title, safe="")


def split_note_uri(uri: str) -> tuple[str, str] | None:
    """``(workspaceUri, noteId)`` of a note URI, or None if it is not one."""
    workspace, sep, leaf = uri.rpartition("/")
    if not sep or not leaf.endswith(".md"):
        return None
    note_id = leaf[: -len(".md")]
    if NOTE_ID_PATTERN.fullmatch(note_id) is None:
        return None
    return workspace, note_id


class NoteResources:
    """The notes a principal may read, as resources (``ResourceProvider``)."""

    def templates(self) -> list[dict[str, Any]]:
        """The note template and the roots-scoped title template."""
        return [dict(NOTE_TEMPLATE), dict(TITLED_TEMPLATE)]

    async def list_resources(self, ctx: CallContext) -> list[dict[str, Any]]:
        """The first page (``list_page_size``) of notes of each authorized workspace, by
        workspace URI then note id; ``notes_list`` pages through a larger workspace."""
        found: list[dict[str, Any]] = []
        for ws in ctx.config.scope.workspaces_for(ctx.principal):
            snap = await ctx.store.list(ws.tenant, ws.uri, ctx.config.list_page_size)
            found.extend(note_resource(n) for n in snap.notes if n.workspace == ws.uri)
        return found

    async def read(self, uri: str, ctx: CallContext) -> dict[str, Any] | None:
        """A note by its URI, or the ``notes:titled/`` notes of the client's roots."""
        if uri.startswith(TITLED_PREFIX):
            return await self._read_titled(uri, ctx)
        parts = split_note_uri(uri)
        if parts is None:
            return None
        try:
            ws = ctx.authorize(parts[0])
        except ScopeError:
            raise not_found(uri) from None
        note = await ctx.store.get(ws.tenant, parts[1])
        if note is None or note.workspace != ws.uri:
            raise not_found(uri)
        return read_result([note_contents(note)])

    async def _read_titled(self, uri: str, ctx: CallContext) -> dict[str, Any]:
        title = unquote(uri[len(TITLED_PREFIX) :])
        if not title or len(title) > TITLE_MAX:
            raise not_found(uri)
        if not roots_capable(ctx.capabilities):
            raise errors.missing_capability(ROOTS_CAPABILITY)
        responses = ctx.input_responses or {}
        if ROOTS_KEY not in responses:
            ctx.counters.rounds += 1
            return {
                "resultType": "input_required",
                "inputRequests": {ROOTS_KEY: dict(ROOTS_REQUEST)},
            }
        offered = workspaces_in_roots(ctx, parse_roots(responses[ROOTS_KEY]))
        notes = await self._titled(ctx, title, offered)
        if not notes:
            raise not_found(uri)
        return read_result([note_contents(n) for n in notes])

    async def _titled(
        self, ctx: CallContext, title: str, workspaces: tuple[Workspace, ...]
    ) -> list[Note]:
        notes: list[Note] = []
        for ws in workspaces:
            snap = await ctx.store.find(ws.tenant, ws.uri, title, MAX_TITLED)
            for head in snap.notes:
                note = await ctx.store.get(ws.tenant, head.note_id)
                if note is not None and note.workspace == ws.uri and len(notes) < MAX_TITLED:
                    notes.append(note)
        return notes


def read_result(contents: list[dict[str, Any]]) -> dict[str, Any]:
    """A complete ReadResourceResult of note contents: private (it depends on the principal's
    grants) and immediately stale."""
    return {
        "resultType": "complete",
        "contents": contents,
        "ttlMs": NOTES_TTL_MS,
        "cacheScope": "private",
    }
