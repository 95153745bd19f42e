"""The confirmation lifecycle, in one place, as a table; and the steps every confirming tool shares.

Layer: node, protocol core. No I/O of its own; the store decides atomically (``confirm.lua``) and
this module maps each of its decisions onto the one legal transition of the table. Every
confirming tool (``notes_delete``, ``notes_archive``: see ``nodes.tools.confirming``) follows it;
the table says "deleted" for the tool's own word ("archived").

    state      event                 next       what the client gets
    shown      accept (executes)     executed   complete {deleted: true}
    shown      decline / confirm=no  declined   complete {deleted: false}   (terminal, recorded)
    shown      cancel                shown      complete {deleted: false}   (nothing written)
    shown      note changed          shown      input_required again, with fresh candidates
    shown      note gone / moved     shown      isError (nothing mutated, not recorded)
    shown      target full           shown      isError (nothing mutated, not recorded)
    shown      expiry reached        expired    the fixed invalid-state error
    executed   same answer           executed   the recorded outcome again, marked as a replay
    declined   same answer           declined   the recorded outcome again, marked as a replay
    executed   other answer          executed   the fixed invalid-state error
    declined   other answer          declined   the fixed invalid-state error
    expired    anything              expired    the fixed invalid-state error
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

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
from store.api import ConfirmAction, ConfirmStatus, NoteHead

log = logging.getLogger("nodes.confirmations")

LifecycleState = Literal["shown", "executed", "declined", "expired"]
LifecycleEvent = Literal[
    "execute",
    "decline",
    "cancel",
    "change",
    "vanish",
    "refuse",
    "expire",
    "same_answer",
    "other_answer",
]


class IllegalTransition(Exception):
    """A step the lifecycle does not allow; raising it changes nothing."""


TRANSITIONS: dict[tuple[LifecycleState, LifecycleEvent], LifecycleState] = {
    ("shown", "execute"): "executed",
    ("shown", "decline"): "declined",
    ("shown", "cancel"): "shown",
    ("shown", "change"): "shown",
    ("shown", "vanish"): "shown",
    ("shown", "refuse"): "shown",
    ("shown", "expire"): "expired",
    ("executed", "same_answer"): "executed",
    ("declined", "same_answer"): "declined",
    ("executed", "other_answer"): "executed",
    ("declined", "other_answer"): "declined",
    ("expired", "expire"): "expired",
}

STORE_EVENTS: dict[ConfirmStatus, LifecycleEvent] = {
    "executed": "execute",
    "declined": "decline",
    "cancelled": "cancel",
    "changed": "change",
    "gone": "vanish",
    "moved": "vanish",
    "full": "refuse",
    "expired": "expire",
    "replay": "same_answer",
    "conflict": "other_answer",
}


def transition(state: LifecycleState, event: LifecycleEvent) -> LifecycleState:
    """The next state, or IllegalTransition (and no change) for a step the table lacks."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(f"{event} is not allowed from {state}") from None


def state_before(status: ConfirmStatus, recorded: str) -> LifecycleState:
    """The lifecycle state the store found before it decided ``status``."""
    if status in ("replay", "conflict"):
        return "declined" if recorded == "declined" else "executed"
    return "shown"


@dataclass(frozen=True)
class Answer:
    """A validated answer to the confirmation form."""

    action: ConfirmAction
    note_id: str | None
    raw: Mapping[str, Any]

    @property
    def digest(self) -> str:
        """What identifies this answer in the replay store: the same answer, the same digest."""
        canon = json.dumps(self.raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def parse_answer(raw: object, candidates: tuple[Candidate, ...]) -> Answer:
    """Validate one elicitation result against the signed candidates (-32602 if malformed)."""
    if not isinstance(raw, dict):
        raise errors.invalid_params("Invalid inputResponses: each answer must be an object")
    action = raw.get("action")
    extra = set(raw) - {"action", "content", "_meta"}
    if extra:
        raise errors.invalid_params("Invalid inputResponses: unexpected answer fields")
    if action in ("decline", "cancel"):
        return Answer(action, None, {"action": action})
    if action != "accept":
        raise errors.invalid_params(
            "Invalid inputResponses: action must be accept, decline or cancel"
        )
    content = raw.get("content")
    if not isinstance(content, dict) or set(content) != {"noteId", "confirm"}:
        raise errors.invalid_params(
            "Invalid inputResponses: accept needs content with exactly noteId and confirm"
        )
    note_id, confirm = content["noteId"], content["confirm"]
    if not isinstance(note_id, str) or not isinstance(confirm, bool):
        raise errors.invalid_params(
            "Invalid inputResponses: noteId must be a string and confirm a boolean"
        )
    if note_id not in {c.note_id for c in candidates}:
        raise errors.invalid_params(
            "Invalid inputResponses: noteId is not one of the offered notes"
        )
    canon = {"action": "accept", "content": {"noteId": note_id, "confirm": confirm}}
    return Answer("accept" if confirm else "decline", note_id, canon)


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
            args_digest=args_digest(dict(arguments)),
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
        args_digest=args_digest(dict(arguments)),
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


def pick_form(message: str, notes: tuple[NoteHead, ...], confirm_title: str) -> dict[str, Any]:
    """The flat form: a titled single-select of the candidates and a required boolean."""
    options = [
        {
            "const": n.note_id,
            "title": f"{n.title} — {n.uri} (created "
            f"{datetime.fromtimestamp(n.created_ms / 1000, UTC):%Y-%m-%d %H:%M} UTC)",
        }
        for n in notes
    ]
    pick: dict[str, Any] = {"type": "string", "title": "Note", "oneOf": options}
    if len(notes) == 1:
        pick["default"] = notes[0].note_id
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "noteId": pick,
                    "confirm": {"type": "boolean", "title": confirm_title, "default": False},
                },
                "required": ["noteId", "confirm"],
            },
        },
    }


def version_shown(payload: StatePayload, note_id: str) -> int:
    """The version of ``note_id`` as it was shown (the note is one of the signed candidates)."""
    return next(c.version for c in payload.candidates if c.note_id == note_id)


def form_capable(capabilities: Mapping[str, Any]) -> bool:
    """Whether this request declared form-mode elicitation (a bare ``{}`` means form only)."""
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, dict):
        return False
    return not elicitation or isinstance(elicitation.get("form"), dict)


FORM_CAPABILITY: dict[str, Any] = {"elicitation": {"form": {}}}
"""``data.requiredCapabilities`` of the -32021 answer for tools that need a form."""
