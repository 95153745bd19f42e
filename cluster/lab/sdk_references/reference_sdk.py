"""The Python SDK reference server: our tool contract on the official MCP Python SDK (``mcp``).

Layer: cluster (the lab: the conformance pack's reference; nothing in the product imports
it). Run several instances sharing one sealing key and one Redis:

    export NOTES_CLUSTER_SDK_STATE_KEY=$(head -c 32 /dev/urandom | base64)
    python -m cluster.lab.sdk_references.reference_sdk \
        --redis redis://127.0.0.1:6379/0 --port 8800 &
    python -m cluster.lab.sdk_references.reference_sdk \
        --redis redis://127.0.0.1:6379/0 --port 8801 &

Each prints its endpoint URL once it listens. Tools: ``notes_create``, ``notes_list``,
``notes_delete`` and ``notes_archive`` (pick and confirm a note by form, then act), for the demo
principals (``alice-demo-token``, ``bob-demo-token``) and the load principals.

Written as the SDK's multi-round-trip guide shows a hand-built flow (the pick list depends on
what round 1 finds, so the form is built per call): an ``@mcp.tool()`` returns an
``InputRequiredResult`` on round 1 and reads ``ctx.input_responses`` / ``ctx.request_state`` on
the retry; the SDK seals the state (``RequestStateSecurity(keys=[...])``: AES-256-GCM bound to
expiry, tool, arguments, principal and audience) and rejects any state it did not mint. What the
SDK does not do is remember a state once used: its handlers run again on every retry. So by
default the confirmation's action is what a handler written from the docs does, an atomic
"delete (or move) this note if it is unchanged" with no record of the state (our ``confirm``
script under a nonce of its own per call). With ``--used-state-store`` the handler does what a
server author must add: the action and the state's outcome are recorded under the state's nonce
in one atomic step (``confirm.lua``'s replay entry), so a retry gets the recorded outcome and a
different answer under a used state is refused.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import json
import os
import secrets
import sys
from typing import Any

import uvicorn
import uvloop
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ElicitResult, InputRequiredResult
from pydantic import BaseModel

from cluster.bench.sdk_server import (
    MAX_CANDIDATES,
    AnnouncingServer,
    StaticTokens,
    pick_form,
)
from nodes.scope import Scope, ScopeError, Workspace
from nodes.serving.demo import DEMO_ARCHIVES, DEMO_GRANTS, DEMO_TOKENS, DEMO_WORKSPACES
from nodes.serving.load_fixture import load_archives, load_tokens, with_load_scope
from store.api import Confirmation, ConfirmOutcome, StoreOp
from store.client_factory import open_redis
from store.notes import DEFAULT_PREFIX, NoteStore

REFERENCE_NAME = "notes-reference-python-sdk"
KEY_ENV = "NOTES_CLUSTER_SDK_STATE_KEY"
"""Base64 of the 32-byte sealing key every instance shares."""
DEFAULT_TTL_S = 300.0
"""Like our nodes' default state lifetime."""
FORM_KEYS = {"delete": "confirm_delete", "move": "confirm_archive"}


class NoteView(BaseModel):
    """A note in a listing."""

    noteId: str  # the wire names
    title: str
    uri: str
    version: int


class Listing(BaseModel):
    """``notes_list``'s result."""

    notes: list[NoteView]


class Created(BaseModel):
    """``notes_create``'s result."""

    noteId: str
    uri: str
    title: str


class Deleted(BaseModel):
    """``notes_delete``'s result."""

    deleted: bool
    noteId: str | None = None


class Archived(BaseModel):
    """``notes_archive``'s result."""

    archived: bool
    noteId: str | None = None


def _principal() -> str:
    token = get_access_token()
    if token is None:  # pragma: no cover - the bearer middleware refuses first
        raise ToolError("not authenticated")
    return token.client_id


class Reference:
    """The tools' logic over one ``NoteStore``."""

    def __init__(
        self,
        store: NoteStore,
        scope: Scope,
        archives: dict[str, str],
        ttl_s: float,
        used_state_store: bool,
    ) -> None:
        self.store = store
        self.scope = scope
        self.archives = archives
        self.ttl_ms = int(ttl_s * 1000)
        self.used_state_store = used_state_store

    def authorize(self, workspace_uri: str) -> Workspace:
        """The workspace, if the caller may use it (else a tool error)."""
        try:
            return self.scope.authorize(_principal(), workspace_uri)
        except ScopeError as exc:
            raise ToolError(str(exc)) from None

    async def ask(self, op: StoreOp, workspace_uri: str, title: str) -> InputRequiredResult:
        """Round 1: find the notes titled ``title`` and ask which one, with a plaintext state
        the SDK seals."""
        ws = self.authorize(workspace_uri)
        target = ""
        if op == "move":
            archive = self.archives.get(ws.uri)
            if archive is None:
                raise ToolError(f"{ws.uri} has no archive")
            target = self.authorize(archive).uri
        snap = await self.store.find(ws.tenant, ws.uri, title, MAX_CANDIDATES + 1)
        notes = tuple(n for n in snap.notes if n.workspace == ws.uri)
        if not notes:
            raise ToolError(f"No note titled {title!r} in {ws.uri}")
        state = {
            "nonce": secrets.token_urlsafe(16),
            "tenant": ws.tenant,
            "ws": ws.uri,
            "target": target,
            "exp_ms": snap.redis_now_ms + self.ttl_ms,
            "candidates": {n.note_id: n.version for n in notes},
        }
        form = pick_form(notes)
        return InputRequiredResult(
            input_requests={FORM_KEYS[op]: form}, request_state=json.dumps(state)
        )

    async def decide(self, op: StoreOp, title: str, ctx: Context) -> ConfirmOutcome | None:
        """Round 2: None when there is no answer yet (ask again), else the store's decision."""
        answer = (ctx.input_responses or {}).get(FORM_KEYS[op])
        if ctx.request_state is None or answer is None:
            return None
        if not isinstance(answer, ElicitResult):
            raise ToolError("Invalid answer")
        state: dict[str, Any] = json.loads(ctx.request_state)
        content = answer.content or {}
        action = answer.action
        if action == "accept" and content.get("confirm") is not True:
            action = "decline"
        note_id = content.get("noteId")
        if action == "accept" and note_id not in state["candidates"]:
            raise ToolError("noteId is not one of the offered notes")
        chosen = str(note_id) if action == "accept" else ""
        canon = json.dumps({"action": action, "noteId": chosen}, sort_keys=True)
        # Without a used-state store nothing is remembered about the state: every call is new.
        nonce = state["nonce"] if self.used_state_store else secrets.token_urlsafe(16)
        return await self.store.confirm(
            Confirmation(
                tenant=state["tenant"],
                nonce=nonce,
                action=action,
                answer_digest=hashlib.sha256(canon.encode("utf-8")).hexdigest(),
                exp_ms=int(state["exp_ms"]),
                note_id=chosen,
                expected_version=int(state["candidates"].get(chosen, 0)),
                title=title,
                workspace=state["ws"],
                principal=_principal(),
                tool="notes_delete" if op == "delete" else "notes_archive",
                op=op,
                target_workspace=state["target"],
            )
        )


def _done(out: ConfirmOutcome, op: StoreOp) -> str | None:
    """The note the operation acted on, or None when it did not act (a tool error for the
    statuses that are neither)."""
    if out.status in ("executed", "replay") and out.op == op:
        return out.note_id
    if out.status in ("declined", "cancelled", "replay"):
        return None
    raise ToolError(f"Nothing was done ({out.status})")


def build_server(ref: Reference, tokens: dict[str, str], key: bytes, ttl_s: float) -> MCPServer:
    """The SDK server with the four tools."""
    mcp: MCPServer = MCPServer(
        REFERENCE_NAME,
        auth=AuthSettings(
            issuer_url="http://127.0.0.1", resource_server_url=None, validate_token_resource=False
        ),
        token_verifier=StaticTokens(tokens),
        request_state_security=RequestStateSecurity(keys=[key], ttl=ttl_s),
        log_level="WARNING",
    )

    @mcp.tool(name="notes_create")
    async def notes_create(workspaceUri: str, title: str, body: str = "") -> Created:
        """Create a note titled `title` in `workspaceUri`."""
        ws = ref.authorize(workspaceUri)
        note = await ref.store.create(ws.tenant, ws.uri, title, body, _principal())
        return Created(noteId=note.note_id, uri=note.uri, title=note.title)

    @mcp.tool(name="notes_list")
    async def notes_list(workspaceUri: str, title: str) -> Listing:
        """The notes titled `title` in `workspaceUri`."""
        ws = ref.authorize(workspaceUri)
        snap = await ref.store.find(ws.tenant, ws.uri, title, MAX_CANDIDATES)
        views = [
            NoteView(noteId=n.note_id, title=n.title, uri=n.uri, version=n.version)
            for n in snap.notes
            if n.workspace == ws.uri
        ]
        return Listing(notes=views)

    @mcp.tool(name="notes_delete")
    async def notes_delete(
        workspaceUri: str, title: str, ctx: Context
    ) -> Deleted | InputRequiredResult:
        """Delete a note titled `title` in `workspaceUri` after the user picks and confirms it."""
        out = await ref.decide("delete", title, ctx)
        if out is None or out.status == "changed":
            return await ref.ask("delete", workspaceUri, title)
        note = _done(out, "delete")
        return Deleted(deleted=note is not None, noteId=note)

    @mcp.tool(name="notes_archive")
    async def notes_archive(
        workspaceUri: str, title: str, ctx: Context
    ) -> Archived | InputRequiredResult:
        """Move a note titled `title` to the archive of `workspaceUri` after the user picks and
        confirms it."""
        out = await ref.decide("move", title, ctx)
        if out is None or out.status == "changed":
            return await ref.ask("move", workspaceUri, title)
        note = _done(out, "move")
        return Archived(archived=note is not None, noteId=note)

    return mcp


def shared_key() -> bytes:
    """The sealing key from ``NOTES_CLUSTER_SDK_STATE_KEY`` (exit 2 with a message if absent or
    not 32 bytes of base64)."""
    raw = os.environ.get(KEY_ENV, "")
    try:
        key = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        sys.exit(f"set {KEY_ENV} to 32 random bytes in base64, the same for every instance")
    return key


async def serve_reference(options: argparse.Namespace, key: bytes) -> None:
    """Serve until killed, as ``MCPServer.run`` would (uvicorn, one worker, JSON responses,
    stateless)."""
    base = Scope.build(DEMO_WORKSPACES, DEMO_GRANTS)
    scope = with_load_scope(base)
    tokens = {**load_tokens(), **DEMO_TOKENS}
    archives = {**DEMO_ARCHIVES, **load_archives()}
    async with open_redis(options.redis) as client:
        ref = Reference(
            NoteStore(client, prefix=options.prefix),
            scope,
            archives,
            options.state_ttl,
            options.used_state_store,
        )
        mcp = build_server(ref, tokens, key, options.state_ttl)
        app = mcp.streamable_http_app(json_response=True, stateless_http=True)
        config = uvicorn.Config(
            app,
            host=options.host,
            port=options.port,
            http="httptools",
            loop="uvloop",
            log_level="warning",
            access_log=False,
            workers=1,
        )
        await AnnouncingServer(config).serve()


def main(argv: list[str] | None = None) -> None:
    """Parse options and serve; print the endpoint URL when ready."""
    p = argparse.ArgumentParser(prog="cluster.lab.sdk_references.reference_sdk")
    p.add_argument("--redis", required=True, help="redis:// URL every instance shares")
    p.add_argument("--prefix", default=DEFAULT_PREFIX)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: a free port")
    p.add_argument("--state-ttl", type=float, default=DEFAULT_TTL_S)
    p.add_argument(
        "--used-state-store",
        action="store_true",
        help="Record each state's outcome under its nonce (what the SDK leaves to the author).",
    )
    a = p.parse_args(argv)
    key = shared_key()
    uvloop.run(serve_reference(a, key))


if __name__ == "__main__":
    main()
