"""One-time, expiring setup links for ``notes_setup`` (URL-mode elicitation).

Layer: node core, pure module: no I/O, no clock. Shared by the tool (which mints links) and the
setup page (``nodes.setup_page``, which opens them).

A link is ``<public_url>/setup/<token>``. The token is a ``StatePayload`` sealed with the
cluster's key ring (AES-GCM, see ``nodes.sealing``) under its own audience
(``<server_name>#setup-link``) and phase, so a link never opens as a ``requestState`` and a
``requestState`` never opens as a link. It binds the principal, the workspace and tenant, the
tool's arguments, the nonce of the call's state and the expiry (Redis clock). It is opaque to the
client and to whoever sees the URL (the payload is encrypted: no PII in the URL), and it is not
pre-authenticated: the page also demands the principal's own bearer token. One-time: the store
records the completion under the nonce at most once (``store/scripts/setup.lua``).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from nodes.sealing import KeyRing, StatePayload, StateRejected

SETUP_PATH_PREFIX = "/setup/"
"""Where every node serves setup pages (outside the MCP endpoint)."""

LINK_PHASE = "setup-link"
LINK_METHOD = "setup/link"
"""What a link's payload names instead of ``tools/call``: it is not a request state."""


def link_audience(server_name: str) -> str:
    """The audience links are sealed for: the cluster's, set apart from request states."""
    return f"{server_name}#setup-link"


def seal_link(ring: KeyRing, state: StatePayload) -> str:
    """A link token for the call whose (verified) state is ``state``: same nonce and expiry."""
    payload = msgspec.structs.replace(
        state,
        audience=link_audience(state.audience),
        method=LINK_METHOD,
        phase=LINK_PHASE,
        candidates=(),
        extra={},
    )
    return ring.seal(payload)


def link_url(public_url: str, token: str) -> str:
    """The URL the user opens."""
    return f"{public_url.rstrip('/')}{SETUP_PATH_PREFIX}{token}"


@dataclass(frozen=True)
class SetupLink:
    """What an opened link binds."""

    principal: str
    workspace: str
    tenant: str
    nonce: str
    exp_ms: int
    """Expiry, on the Redis server clock."""


def open_link(ring: KeyRing, server_name: str, token: str) -> SetupLink:
    """Open a link token; any failure raises ``StateRejected`` (the reason is for the log)."""
    payload = ring.open(token, audience=link_audience(server_name))
    if payload.method != LINK_METHOD or payload.phase != LINK_PHASE:
        raise StateRejected("not a setup link")
    return SetupLink(
        payload.principal, payload.workspace, payload.tenant, payload.nonce, payload.exp_ms
    )
