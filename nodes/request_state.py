"""Sealing and opening a tool call's ``requestState``: the node's policy over ``nodes.sealing``.

Layer: node, protocol core. Pure module: no I/O. ``nodes.sealing`` seals and opens payloads;
this module binds them to one ``tools/call`` (principal, audience, tool, argument digest, phase),
counts expiry from the Redis clock when sealing, and turns every failure to open into the one
fixed invalid-state error, with the reason in the log only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from nodes import errors
from nodes.config import NODE_CLOCK_MARGIN_MS
from nodes.sealing import (
    Candidate,
    KeyRing,
    StatePayload,
    StateRejected,
    args_digest,
    new_nonce,
    verify_bindings,
)

log = logging.getLogger(__name__)


def open_state(
    ring: KeyRing,
    token: object,
    *,
    audience: str,
    principal: str,
    tool: str,
    arguments: Mapping[str, Any],
    node_now_ms: int,
    phase: str = "confirm",
) -> StatePayload:
    """Open and verify a sealed state; any failure is the one fixed -32602, reason logged."""
    try:
        payload = ring.open(token, audience=audience)
        verify_bindings(
            payload,
            principal=principal,
            method="tools/call",
            tool=tool,
            args_digest=args_digest(arguments),
        )
        if payload.phase != phase:
            raise StateRejected("unexpected phase")
        if node_now_ms >= payload.exp_ms + NODE_CLOCK_MARGIN_MS:
            raise StateRejected("expired long ago by the node clock")
    except StateRejected as exc:
        log.info("requestState rejected: %s (tool=%s principal=%s)", exc.reason, tool, principal)
        raise errors.invalid_state() from None
    except (TypeError, ValueError):
        log.info("requestState rejected: arguments not canonicalizable (tool=%s)", tool)
        raise errors.invalid_state() from None
    return payload


def seal_state(
    ring: KeyRing,
    *,
    audience: str,
    principal: str,
    tool: str,
    arguments: Mapping[str, Any],
    workspace: str,
    tenant: str,
    candidates: tuple[Candidate, ...],
    phase: str,
    redis_now_ms: int,
    ttl_ms: int,
    extra: dict[str, str] | None = None,
) -> tuple[str, StatePayload]:
    """Seal a ``tools/call`` state of any phase, with a fresh nonce; its expiry counts from
    ``redis_now_ms``, the Redis clock read in the same step as what the state shows."""
    payload = StatePayload(
        principal=principal,
        audience=audience,
        method="tools/call",
        tool=tool,
        args_digest=args_digest(arguments),
        workspace=workspace,
        tenant=tenant,
        candidates=candidates,
        phase=phase,
        nonce=new_nonce(),
        issued_ms=redis_now_ms,
        exp_ms=redis_now_ms + ttl_ms,
        extra=dict(extra or {}),
    )
    return ring.seal(payload), payload


def version_shown(payload: StatePayload, note_id: str) -> int:
    """The version of ``note_id`` as it was shown (the note is one of the signed candidates)."""
    return next(c.version for c in payload.candidates if c.note_id == note_id)
