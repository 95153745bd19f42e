"""The ``notes_list`` cursor: where the next page starts, tamper-evident and bound to its listing.

Layer: node, protocol core. Pure module: no I/O.

Token format (version ``lc1``)::

    lc1.<kid>.<payload>.<mac>
    payload = base64url, no padding, of compact JSON {"a": after, "p": principal, "t": title,
              "w": workspace}
    mac     = base64url of the first 16 bytes of HMAC-SHA256(cursor key, "lc1" NUL kid NUL
              audience NUL payload), cursor key = HMAC-SHA256(state key <kid>, CURSOR_KEY_LABEL)

A page boundary is a note id the caller has just been shown, so the cursor hides nothing: it is
signed, not encrypted. The signature and the bindings make it tamper-evident and usable only for
the listing it continues: the same principal, workspace and title filter, on a node of the same
cluster (audience and key ring); a key that rotates out of the ring ends its cursors. The cursor
key is derived from the ``requestState`` key under its own label, so a cursor can never pass for
a state or the reverse. Every refusal is the one ``CursorRejected``; its reason is for the log.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass

from nodes.sealing import KeyRing
from store.keys import NOTE_ID_PATTERN

CURSOR_VERSION = "lc1"
CURSOR_KEY_LABEL = b"notes-cluster notes_list cursor v1"
"""Derivation label of the cursor key: separates cursor MACs from every other use of the key."""
MAC_BYTES = 16
MAX_CURSOR_CHARS = 4096
"""Longest cursor looked at: bounds work on untrusted input."""


class CursorRejected(Exception):
    """A cursor that is malformed, forged, or for another listing; ``reason`` is for the log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Listing:
    """What a cursor is bound to: who lists which workspace, with which title filter."""

    audience: str
    principal: str
    workspace: str
    title: str
    """The title filter, or "" for the whole workspace."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise CursorRejected("not base64url") from None
    if _b64(data) != text:
        raise CursorRejected("not canonical base64url")
    return data


def _mac(ring: KeyRing, kid: str, audience: str, payload: str) -> bytes:
    key = hmac.new(ring.keys[kid], CURSOR_KEY_LABEL, hashlib.sha256).digest()
    message = "\0".join((CURSOR_VERSION, kid, audience, payload)).encode("utf-8")
    return hmac.new(key, message, hashlib.sha256).digest()[:MAC_BYTES]


def _payload(listing: Listing, after: str) -> dict[str, str]:
    return {"a": after, "p": listing.principal, "t": listing.title, "w": listing.workspace}


def make_cursor(ring: KeyRing, listing: Listing, after: str) -> str:
    """A cursor continuing ``listing`` after note id ``after``, signed with the active key."""
    text = json.dumps(_payload(listing, after), separators=(",", ":"), sort_keys=True)
    payload = _b64(text.encode("utf-8"))
    mac = _mac(ring, ring.active, listing.audience, payload)
    return f"{CURSOR_VERSION}.{ring.active}.{payload}.{_b64(mac)}"


def open_cursor(ring: KeyRing, listing: Listing, cursor: str) -> str:
    """The note id after which ``listing`` continues; CursorRejected for anything else."""
    if len(cursor) > MAX_CURSOR_CHARS:
        raise CursorRejected("too long")
    parts = cursor.split(".")
    if len(parts) != 4 or parts[0] != CURSOR_VERSION:
        raise CursorRejected("not an lc1 cursor")
    _, kid, payload, mac = parts
    if kid not in ring.keys:
        raise CursorRejected("unknown key id")
    if not hmac.compare_digest(_unb64(mac), _mac(ring, kid, listing.audience, payload)):
        raise CursorRejected("bad signature")
    try:
        fields = json.loads(_unb64(payload))
    except ValueError:  # pragma: no cover - a signed payload is always our own JSON
        raise CursorRejected("payload is not JSON") from None
    after = fields.get("a") if isinstance(fields, dict) else None
    if not isinstance(after, str) or not NOTE_ID_PATTERN.fullmatch(after):
        raise CursorRejected("no position")  # pragma: no cover - signed positions are ids
    if fields != _payload(listing, after):
        raise CursorRejected("cursor of another listing")
    return after
