"""What the load generator learns from a round-1 state: the seam between a target whose states
it can open and one whose states are opaque.

Layer: loadgen. The workload records, for each ``input_required`` answer, the state's nonce,
expiry, candidates and tool (the history's state facts, which the checker groups answers by).

    StateReader (Protocol)
     +-- SealedStates   our nodes: the cluster's key ring opens the state (a trusted harness)
     +-- OpaqueStates   any other server ("a target without a journal"): the nonce is a digest
                        of the token, the expiry an estimate from the client's clock and the
                        lifetime it was told, the candidates the form's options
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from loadgen.mrtr_pack.forms import form_of
from nodes.sealing import KeyRing, StateRejected

ARCHIVE_TARGET = "archive"
"""Where an archive state seals its target workspace (``StatePayload.extra``): the checker
holds the journal's move to it."""

OPAQUE_NONCE_PREFIX = "token-sha256:"
"""Marks a nonce the load generator derived from an opaque state's bytes."""


class StateReader(Protocol):
    """Reads the facts of the state in an ``input_required`` result."""

    def facts(self, tool: str, result: Mapping[str, Any]) -> dict[str, Any]:
        """``nonce``, ``exp_ms``, ``tool``, ``candidates`` ([[note id, version]]) and ``target``
        (an archive's sealed destination, "" if none or unknown), or {} when the result carries
        no state this reader can use."""
        ...


@dataclass(frozen=True)
class SealedStates:
    """Our nodes' states, opened with the cluster's key ring."""

    ring: KeyRing
    audience: str

    def facts(self, tool: str, result: Mapping[str, Any]) -> dict[str, Any]:
        """The sealed payload's facts ({} if it does not open)."""
        token = result.get("requestState")
        if not isinstance(token, str) or not token:
            return {}
        try:
            payload = self.ring.open(token, audience=self.audience)
        except StateRejected:
            return {}
        return {
            "nonce": payload.nonce,
            "exp_ms": payload.exp_ms,
            "tool": payload.tool,
            "candidates": [[c.note_id, c.version] for c in payload.candidates],
            "target": payload.extra.get(ARCHIVE_TARGET, ""),
        }


@dataclass(frozen=True)
class OpaqueStates:
    """A foreign server's states: nothing is opened. ``exp_ms`` is the client's clock when the
    answer arrived plus ``ttl_ms`` (the server issued the state earlier, so its expiry is no
    later than this); versions are unknown (0)."""

    ttl_ms: int

    def facts(self, tool: str, result: Mapping[str, Any]) -> dict[str, Any]:
        """Facts from the token's bytes and the form's options."""
        token = result.get("requestState")
        form = form_of(dict(result))
        if not isinstance(token, str) or not token or form is None:
            return {}
        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()[:32]
        options: list[str] = []
        for prop in form.properties.values():
            if isinstance(prop, dict) and isinstance(prop.get("oneOf"), list):
                options = [str(o["const"]) for o in prop["oneOf"] if "const" in o]
                break
        return {
            "nonce": OPAQUE_NONCE_PREFIX + digest,
            "exp_ms": int(time.time() * 1000) + self.ttl_ms,
            "tool": tool,
            "candidates": [[note, 0] for note in options],
            "target": "",
        }
