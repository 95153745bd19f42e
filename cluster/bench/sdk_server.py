"""What both SDK servers share: the benchmark's peer (``cluster.bench.peer_sdk``) and the lab's
conformance reference (``cluster.lab.sdk_references.reference_sdk``), both on the official MCP
Python SDK: the token verifier over the demo tokens, the pick form, and uvicorn's server that
prints its endpoint URL once it listens.

Layer: cluster (the bench). The lab builds on it; the bench imports nothing of the lab.
"""

from __future__ import annotations

import socket
from typing import Any

import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp_types import ElicitRequest, ElicitRequestFormParams

from store.api import NoteHead

MAX_CANDIDATES = 50
"""Like our pick list's cap."""


class StaticTokens:
    """The SDK's ``TokenVerifier`` seam over the load principals' published demo tokens."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        """The principal as both client id and subject, or None for an unknown token."""
        principal = self.tokens.get(token)
        if principal is None:
            return None
        return AccessToken(token=token, client_id=principal, scopes=[], subject=principal)


def pick_form(notes: tuple[NoteHead, ...]) -> ElicitRequest:
    """The form that asks which of ``notes`` to delete, and to confirm it."""
    options = [{"const": n.note_id, "title": f"{n.title} ({n.uri})"} for n in notes]
    pick: dict[str, Any] = {"type": "string", "title": "Note", "oneOf": options}
    if len(notes) == 1:
        pick["default"] = notes[0].note_id
    schema = {
        "type": "object",
        "properties": {
            "noteId": pick,
            "confirm": {"type": "boolean", "title": "Delete this note", "default": False},
        },
        "required": ["noteId", "confirm"],
    }
    params = ElicitRequestFormParams.model_validate(
        {"mode": "form", "message": "Which note should be deleted?", "requestedSchema": schema}
    )
    return ElicitRequest(params=params)


class AnnouncingServer(uvicorn.Server):
    """uvicorn's server, printing the endpoint URL once it listens (port 0: the bound port)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.servers and not self.should_exit:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            print(f"http://{host}:{port}/mcp", flush=True)
