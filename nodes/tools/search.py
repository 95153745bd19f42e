"""notes_search: find notes by title, in ``workspaceUri`` or in the client's roots (deprecated).

Layer: node, protocol core. A migration adapter for clients that relied on roots: when
``workspaceUri`` is omitted, the node asks for the roots over MRTR (an ``input_required`` with a
``roots/list`` input request; roots are deprecated at 2026-07-28 by SEP-2577 but still work).

Roots are hints, never grants: the node searches only workspaces the principal is authorized for
that lie inside one of the roots (``nodes.scope.contains`` on canonical URIs). A root that does not
parse, that lies outside every authorized workspace, or that lies inside a workspace (notes live
directly in their workspace, so nothing is below it) adds nothing. When the roots cover several
workspaces and the request declares form elicitation, the node asks for the roots again and for
the workspace in the same ``inputRequests`` map (the roots may have changed meanwhile; the pick is
checked against the fresh ones); without forms it searches them all.

No state is sealed and nothing is written: every round reads the scope and, at the end, the title
index, so a client that never retries leaves nothing behind. Without ``workspaceUri`` and without
the ``roots`` capability the answer is ``-32021`` with ``data.requiredCapabilities = {"roots": {}}``
(the message tells the client to pass ``workspaceUri``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from nodes import errors
from nodes.capabilities import ROOTS_CAPABILITY, form_capable, roots_capable
from nodes.results import complete
from nodes.scope import ScopeError, Workspace, contains, normalize_uri
from nodes.tools.base import URI_MAX, Arguments, CallContext, Tool, ToolFailure
from nodes.tools.crud import TitleArg, note_summary

ROOTS_KEY = "roots"
"""The key of the ``roots/list`` input request."""
PICK_KEY = "workspace"
"""The key of the form asking which workspace, when the roots cover several."""

MAX_ROOTS = 256
"""Most roots one answer may list; a longer list is malformed (-32602)."""
SEARCH_LIMIT = 1000
"""Most notes read per workspace."""


class SearchArgs(Arguments):
    title: TitleArg
    workspace_uri: Annotated[
        str | None, Field(min_length=1, max_length=URI_MAX, alias="workspaceUri")
    ] = None


def parse_roots(raw: object) -> tuple[str, ...]:
    """The root URIs of a ``roots/list`` answer (``{roots: [{uri, name?}]}``; -32602 if not)."""
    roots = raw.get("roots") if isinstance(raw, dict) else None
    if not isinstance(roots, list) or len(roots) > MAX_ROOTS:
        raise errors.invalid_params("Invalid inputResponses: roots must be a list of roots")
    uris: list[str] = []
    for root in roots:
        uri = root.get("uri") if isinstance(root, dict) else None
        if not isinstance(uri, str):
            raise errors.invalid_params("Invalid inputResponses: every root needs a string uri")
        uris.append(uri)
    return tuple(uris)


def workspaces_in_roots(ctx: CallContext, roots: tuple[str, ...]) -> tuple[Workspace, ...]:
    """The principal's authorized workspaces inside at least one root (never any other)."""
    canonical: list[str] = []
    for uri in roots:
        try:
            canonical.append(normalize_uri(uri))
        except ScopeError:
            continue  # a hint we cannot read narrows nothing and grants nothing
    return tuple(
        ws
        for ws in ctx.config.scope.workspaces_for(ctx.principal)
        if any(contains(root, ws.uri) for root in canonical)
    )


def parse_pick(raw: object) -> str | None:
    """The workspace URI picked in the form, or None for decline/cancel (-32602 if malformed)."""
    if not isinstance(raw, dict) or set(raw) - {"action", "content", "_meta"}:
        raise errors.invalid_params("Invalid inputResponses: malformed workspace answer")
    action = raw.get("action")
    if action in ("decline", "cancel"):
        return None
    content = raw.get("content")
    if action != "accept" or not isinstance(content, dict) or set(content) != {"workspaceUri"}:
        raise errors.invalid_params(
            "Invalid inputResponses: accept needs content with exactly workspaceUri"
        )
    picked = content["workspaceUri"]
    if not isinstance(picked, str):
        raise errors.invalid_params("Invalid inputResponses: workspaceUri must be a string")
    return picked


ROOTS_REQUEST: dict[str, Any] = {"method": "roots/list"}


def pick_form(offered: tuple[Workspace, ...]) -> dict[str, Any]:
    """A flat single-select of the workspaces the roots cover."""
    options = [{"const": ws.uri, "title": ws.uri} for ws in offered]
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Your roots cover several workspaces. Which one should be searched?",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "workspaceUri": {"type": "string", "title": "Workspace", "oneOf": options}
                },
                "required": ["workspaceUri"],
            },
        },
    }


def _ask(requests: dict[str, Any]) -> dict[str, Any]:
    # No requestState: nothing here needs protecting, the next round re-derives everything.
    return {"resultType": "input_required", "inputRequests": requests}


class SearchTool(Tool[SearchArgs]):
    name = "notes_search"
    title = "Search notes (deprecated)"
    description = (
        "Deprecated: use notes_list with workspaceUri. Find the notes titled exactly `title` in "
        "`workspaceUri`. Without `workspaceUri` the server asks the client for its roots "
        "(roots are deprecated in MCP 2026-07-28) and searches only the workspaces you are "
        "authorized for inside them."
    )
    args_model = SearchArgs
    annotations = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}
    output_schema = {
        "type": "object",
        "properties": {"notes": {"type": "array", "items": {"type": "object"}}},
        "required": ["notes"],
    }

    async def call(self, ctx: CallContext) -> dict[str, Any]:
        # Whether roots are needed depends on the arguments: parse them first (isError), then
        # check the capability (a protocol error).
        try:
            args = self.parse(ctx)
        except ToolFailure as exc:
            return exc.result()
        if args.workspace_uri is None and not roots_capable(ctx.capabilities):
            raise errors.missing_capability(ROOTS_CAPABILITY)
        return await self.guard(lambda: self.run(ctx, args))

    async def run(self, ctx: CallContext, args: SearchArgs) -> dict[str, Any]:
        if args.workspace_uri is not None:
            return await self.search(ctx, args.title, (ctx.authorize(args.workspace_uri),))
        responses = ctx.input_responses or {}
        if ROOTS_KEY not in responses:
            ctx.counters.rounds += 1
            return _ask({ROOTS_KEY: dict(ROOTS_REQUEST)})
        offered = workspaces_in_roots(ctx, parse_roots(responses[ROOTS_KEY]))
        if not offered:
            raise ToolFailure(
                "None of your roots contains a workspace you are authorized for; pass workspaceUri"
            )
        if len(offered) == 1:
            return await self.search(ctx, args.title, offered)
        if PICK_KEY in responses:
            picked = parse_pick(responses[PICK_KEY])
            if picked is None:
                return complete({"notes": []})
            chosen = tuple(ws for ws in offered if ws.uri == picked)
            if chosen:
                return await self.search(ctx, args.title, chosen)
            # Not among the workspaces these roots cover (they changed): ask again below.
        if not form_capable(ctx.capabilities):
            return await self.search(ctx, args.title, offered)
        ctx.counters.rounds += 1
        return _ask({ROOTS_KEY: dict(ROOTS_REQUEST), PICK_KEY: pick_form(offered)})

    async def search(
        self, ctx: CallContext, title: str, workspaces: tuple[Workspace, ...]
    ) -> dict[str, Any]:
        """The notes titled ``title`` in each workspace, each naming its workspace."""
        found: list[dict[str, Any]] = []
        for ws in workspaces:
            snap = await ctx.store.find(ws.tenant, ws.uri, title, SEARCH_LIMIT)
            found.extend(
                {**note_summary(n), "workspaceUri": ws.uri}
                for n in snap.notes
                if n.workspace == ws.uri
            )
        return complete({"notes": found})
