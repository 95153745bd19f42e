"""The benchmark peer: ``notes_delete`` served by the official MCP Python SDK (``mcp`` 2.3.0).

Layer: cluster (the bench: the benchmark's peer; nothing in the product imports it). Run as a
process with ``python -m cluster.bench.peer_sdk --store redis --redis URL --prefix P``
(notes in Redis) or ``--store memory --notes FILE`` (notes in memory, as one SDK server keeps them:
``peer_memory``); it prints its endpoint URL on one line once its socket listens, then serves
until killed.

The peer is written the way the SDK's multi-round-trip guide recommends for a hand-built flow:
an ``@mcp.tool()`` function that returns an ``InputRequiredResult`` under our form key
(``confirm_delete``) on the first round and reads ``ctx.input_responses`` / ``ctx.request_state``
on the retry. The SDK seals the plaintext state itself (``RequestStateSecurity(keys=[...])``:
AES-256-GCM, expiry, method/tool/arguments digest, principal), bearer tokens go through the
SDK's ``TokenVerifier`` seam, and it is served the way ``MCPServer.run`` serves it (uvicorn, one
worker, the Starlette app from ``streamable_http_app``: JSON responses, stateless; access log
off) with what a user who wants speed adds: httptools and uvloop.

Its logic is ours, over the same store (in the Redis variant): the same scope check
(``nodes.scope``), the lookup by title in the same Redis through the same ``read_notes`` script,
and the one-shot delete through the same ``confirm`` script (the replay entry under the state's
nonce makes it one-shot). So that comparison measures the MCP/HTTP stack around identical store
work; the in-memory variant measures the peer as it is deployed on one node.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Protocol

import uvicorn
import uvloop
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    ElicitResult,
    InputRequiredResult,
)
from pydantic import BaseModel

from cluster.bench.peer_memory import load_targets
from cluster.bench.sdk_server import (
    MAX_CANDIDATES,
    AnnouncingServer,
    StaticTokens,
    pick_form,
)
from nodes.scope import Scope, ScopeError
from nodes.serving.demo import DEMO_GRANTS, DEMO_WORKSPACES
from nodes.serving.load_fixture import load_tokens, with_load_scope
from store.api import Confirmation, ConfirmOutcome, Snapshot
from store.client_factory import open_redis
from store.notes import DEFAULT_PREFIX, NoteStore

PEER_NAME = "notes-peer-sdk"
FORM_KEY = "confirm_delete"
STATE_TTL_S = 300.0
"""Like our default state expiry: five minutes."""


class DeleteResult(BaseModel):
    """The structured result, the same shape as ours."""

    deleted: bool
    noteId: str | None = None  # the wire name


class PeerStore(Protocol):
    """What the peer calls: ``NoteStore`` (notes in Redis) or ``MemoryNotes`` (in memory)."""

    async def find(self, tenant: str, workspace: str, title: str, limit: int) -> Snapshot:
        """Notes titled ``title`` in ``workspace``."""
        ...

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        """Decide one answer once."""
        ...


def build_server(store: PeerStore, scope: Scope, tokens: dict[str, str], key: bytes) -> MCPServer:
    """The SDK server with the one tool."""
    mcp: MCPServer = MCPServer(
        PEER_NAME,
        auth=AuthSettings(
            issuer_url="http://127.0.0.1",
            resource_server_url=None,
            validate_token_resource=False,
        ),
        token_verifier=StaticTokens(tokens),
        request_state_security=RequestStateSecurity(keys=[key], ttl=STATE_TTL_S),
        log_level="WARNING",
    )

    async def ask(principal: str, workspace_uri: str, title: str) -> InputRequiredResult:
        ws = scope.authorize(principal, workspace_uri)
        snap = await store.find(ws.tenant, ws.uri, title, MAX_CANDIDATES + 1)
        notes = tuple(n for n in snap.notes if n.workspace == ws.uri)
        if not notes:
            raise ToolError(f"No note titled {title!r} in {ws.uri}")
        if len(notes) > MAX_CANDIDATES:
            raise ToolError(f"More than {MAX_CANDIDATES} notes are titled {title!r}")
        # Plaintext: the SDK seals it (and binds expiry, tool, arguments and principal).
        state = {
            "nonce": secrets.token_urlsafe(16),
            "tenant": ws.tenant,
            "ws": ws.uri,
            "exp_ms": snap.redis_now_ms + int(STATE_TTL_S * 1000),
            "candidates": {n.note_id: n.version for n in notes},
        }
        return InputRequiredResult(
            input_requests={FORM_KEY: pick_form(notes)}, request_state=json.dumps(state)
        )

    @mcp.tool(name="notes_delete")
    async def notes_delete(
        workspaceUri: str,  # the wire name
        title: str,
        ctx: Context,
    ) -> DeleteResult | InputRequiredResult:
        """Delete a note titled `title` in `workspaceUri` after the user picks and confirms it."""
        token = get_access_token()
        if token is None:  # pragma: no cover - the bearer middleware refuses first
            raise ToolError("not authenticated")
        principal = token.client_id
        try:
            answer = (ctx.input_responses or {}).get(FORM_KEY)
            if ctx.request_state is None or answer is None:
                return await ask(principal, workspaceUri, title)
            state = json.loads(ctx.request_state)
            if not isinstance(answer, ElicitResult):
                raise ToolError("Invalid answer")
            content = answer.content or {}
            note_id = content.get("noteId")
            action = answer.action
            if action == "accept" and content.get("confirm") is not True:
                action = "decline"
            if action == "accept" and note_id not in state["candidates"]:
                raise ToolError("noteId is not one of the offered notes")
            chosen = str(note_id) if action == "accept" else ""
            canon = json.dumps({"action": action, "noteId": chosen}, sort_keys=True)
            digest = hashlib.sha256(canon.encode("utf-8")).hexdigest()
            out = await store.confirm(
                Confirmation(
                    tenant=state["tenant"],
                    nonce=state["nonce"],
                    action=action,
                    answer_digest=digest,
                    exp_ms=int(state["exp_ms"]),
                    note_id=chosen,
                    expected_version=int(state["candidates"].get(chosen, 0)),
                    title=title,
                    workspace=state["ws"],
                    principal=principal,
                    tool="notes_delete",
                )
            )
        except ScopeError as exc:
            raise ToolError(str(exc)) from None
        if out.status in ("executed", "replay") and out.op == "delete":
            return DeleteResult(deleted=True, noteId=out.note_id)
        if out.status in ("declined", "cancelled", "replay"):
            return DeleteResult(deleted=False)
        if out.status == "changed":
            return await ask(principal, workspaceUri, title)
        raise ToolError(f"Nothing was deleted ({out.status})")

    return mcp


async def serve_peer(options: argparse.Namespace) -> None:
    """Serve on ``options.host`` and a free port until killed, as ``MCPServer.run`` would, on
    uvicorn with httptools and uvloop as a user who wants speed runs it (uvicorn binds the port
    itself, so its sockets get the same options, TCP_NODELAY included). Notes in the given Redis
    (``--store redis``) or in memory (``--store memory``, loaded from ``--notes``)."""
    scope = with_load_scope(Scope.build(DEMO_WORKSPACES, DEMO_GRANTS))
    tokens = load_tokens()
    async with AsyncExitStack() as stack:
        store: PeerStore
        if options.store == "memory":
            store = load_targets(Path(options.notes))
        else:
            client = await stack.enter_async_context(open_redis(options.redis))
            store = NoteStore(client, prefix=options.prefix)
        mcp = build_server(store, scope, tokens, os.urandom(32))
        app = mcp.streamable_http_app(json_response=True, stateless_http=True)
        config = uvicorn.Config(
            app,
            host=options.host,
            port=0,
            http="httptools",
            loop="uvloop",
            log_level="warning",
            access_log=False,
            workers=1,
        )
        await AnnouncingServer(config).serve()


def main(argv: list[str] | None = None) -> None:
    """Serve on a free loopback port; print the endpoint URL when ready."""
    p = argparse.ArgumentParser(prog="cluster.bench.peer_sdk")
    p.add_argument("--store", choices=("redis", "memory"), default="redis")
    p.add_argument("--redis", help="with --store redis")
    p.add_argument("--prefix", default=DEFAULT_PREFIX)
    p.add_argument("--notes", help="with --store memory: tenant|workspace|title|note_id lines")
    p.add_argument("--host", default="127.0.0.1")
    a = p.parse_args(argv)
    if (a.store == "redis") != (a.redis is not None) or (a.store == "memory") != bool(a.notes):
        p.error("--store redis takes --redis URL; --store memory takes --notes FILE")
    uvloop.run(serve_peer(a))


if __name__ == "__main__":
    main()
