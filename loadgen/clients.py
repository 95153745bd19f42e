"""Simulated MCP clients: how the load generator reaches nodes and records what it saw.

Layer: loadgen. Talks to nodes only through a ``loadgen.transport.Transport`` and reads their
answers with definitions of its own (it imports nothing of ``nodes``), so a bug in a server helper
cannot hide from the checker; every operation goes into the history as invoke then
ok / fail / info.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from loadgen.history import History, OpType
from loadgen.transport import META_VERSION, PROTOCOL_VERSION, NodeDown, Reply, Transport

REQUEST_TIMEOUT_S = 10.0
"""A request still unanswered after this is abandoned and recorded as outcome unknown (info)."""

CLIENT_CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}}}
INTERNAL_ERROR = -32603
"""JSON-RPC internal error: the node could not learn whether the operation ran (info)."""

RESPONSE_LOST = "response lost"
CUT_SHORT = "cut short"
DELIBERATE = frozenset({RESPONSE_LOST, CUT_SHORT})
"""Reasons of the unknown outcomes the workload causes itself (lost_response, timeout_retry):
not counted against availability."""

META_REPLAY = "dev.notes-cluster/replay"
"""Result ``_meta`` key a node sets when it sends a recorded outcome again (a confirmation's, or
a write's retried with its idempotency key)."""
META_ERROR = "dev.notes-cluster/error"
"""``_meta`` key of a tool error's facts for programs (``quota``: the quota a write exceeded)."""

META_IDEMPOTENCY_KEY = "dev.notes-cluster/idempotencyKey"
"""``params._meta`` key of a ``tools/call`` that may be retried safely: the same key with the
same arguments from the same principal gets the recorded result (an extension:
docs/reference/wire-extensions.md)."""

URL_CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}
"""What a client declares to be offered a URL-mode elicitation (``notes_setup``)."""

ROOTS_CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}}, "roots": {}}
"""What a client declares to be asked for its roots (``notes_search`` without a workspace)."""

EXECUTED_KEYS = {"deleted": "delete", "archived": "archive"}
"""``structuredContent`` key true when a confirming tool executed -> the operation it names."""


COPIED_KEYS = ("noteId", "version", "uri", "configured")
"""``structuredContent`` fields an ok value carries as they came (when present)."""


def _shown(note: dict[str, Any]) -> list[Any]:
    """One listed note as ``[noteId, version, workspaceUri or None]``."""
    return [str(note.get("noteId", "")), note.get("version"), note.get("workspaceUri")]


_request_ids = itertools.count(1)


def request(
    method: str,
    params: dict[str, Any],
    *,
    capabilities: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """A 2026-07-28 request with the required ``_meta`` (and an idempotency key, if given)."""
    p = dict(params)
    p["_meta"] = {
        META_VERSION: PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities or CLIENT_CAPABILITIES,
        "io.modelcontextprotocol/clientInfo": {"name": "notes-cluster-loadgen", "version": "0.1"},
    }
    if idempotency_key is not None:
        p["_meta"][META_IDEMPOTENCY_KEY] = idempotency_key
    return {"jsonrpc": "2.0", "id": next(_request_ids), "method": method, "params": p}


@dataclass
class Outcome:
    """What one request produced, classified for the history."""

    type: OpType
    value: dict[str, Any]
    result: dict[str, Any] | None = None


def classify(reply: Reply) -> Outcome:
    """ok for a result, fail for a definite JSON-RPC error, info for an unknown outcome. An ok
    value says whether the answer executed a confirmation (``executed``, with ``op`` delete or
    archive; ``deleted`` and ``archived`` as the wire said), replayed a recorded outcome, was a
    tool error, or asked again."""
    body = reply.body or {}
    if "result" in body:
        res: dict[str, Any] = body["result"]
        sc = res.get("structuredContent") or {}
        done = {key: sc.get(key) is True for key in EXECUTED_KEYS}
        value: dict[str, Any] = {
            **done,
            "executed": any(done.values()),
            "isError": res.get("isError") is True,
            "reask": res.get("resultType") == "input_required",
            "replay": (res.get("_meta") or {}).get(META_REPLAY) is True,
        }
        ops = [EXECUTED_KEYS[key] for key, yes in done.items() if yes]
        if ops:
            value["op"] = ops[0]
        for key in COPIED_KEYS:
            if key in sc:
                value[key] = sc[key]
        error = (res.get("_meta") or {}).get(META_ERROR)
        if value["isError"] and isinstance(error, dict) and isinstance(error.get("quota"), str):
            value["quota"] = error["quota"]
        notes = sc.get("notes")
        if isinstance(notes, list):  # notes_list, notes_search: what the page showed
            value["notes"] = [_shown(n) for n in notes if isinstance(n, dict)]
            value["more"] = isinstance(sc.get("nextCursor"), str)
        return Outcome("ok", value, res)
    err = body.get("error") or {}
    code = int(err.get("code", 0))
    value = {"code": code, "message": str(err.get("message", "")), "status": reply.status}
    if code == INTERNAL_ERROR:
        return Outcome("info", {"reason": "outcome unknown", **value})
    return Outcome("fail", value)


class Client:
    """One simulated client process: picks nodes at random and records each operation."""

    def __init__(
        self,
        process: int,
        transport: Transport,
        history: History,
        rng: random.Random,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.process = process
        self.transport = transport
        self.history = history
        self.rng = rng
        self.timeout_s = timeout_s
        self.last_type: OpType | None = None
        """The type of the last outcome this client recorded."""

    def pick_node(self, avoid: int | None = None) -> int:
        """A random node, different from ``avoid`` when there is a choice."""
        n = self.transport.node_count
        choices = [i for i in range(n) if i != avoid] or list(range(n))
        return self.rng.choice(choices)

    async def send(
        self, node: int, principal: str, message: dict[str, Any], timeout_s: float | None = None
    ) -> Outcome:
        """Send once; NodeDown, transport errors and timeouts become info (outcome unknown)."""
        with trio.move_on_after(self.timeout_s if timeout_s is None else timeout_s) as scope:
            try:
                reply = await self.transport.send(node, principal, message)
            except (NodeDown, OSError) as exc:
                return Outcome("info", {"reason": f"unreachable: {type(exc).__name__}"})
        if scope.cancelled_caught:
            # A deadline the workload set on purpose (timeout_retry) is not a fault: say so.
            return Outcome("info", {"reason": "timeout" if timeout_s is None else CUT_SHORT})
        return classify(reply)

    async def op(
        self,
        f: str,
        flow: int,
        kind: str,
        invoke: dict[str, Any],
        node: int,
        principal: str,
        message: dict[str, Any],
        *,
        timeout_s: float | None = None,
        lose_response: bool = False,
        annotate: Callable[[Outcome], dict[str, Any]] | None = None,
    ) -> Outcome:
        """Record invoke, send, record the outcome. ``lose_response`` drops a reply that did
        arrive, as a client whose connection broke after the node answered (recorded as info).
        ``annotate`` adds what the harness learns from an answer (ids, nonce, expiry) to the
        outcome's value, before its history entry is written; the returned outcome carries it."""
        sent = self.history.record(self.process, "invoke", f, flow, kind, {**invoke, "node": node})
        out = await self.send(node, principal, message, timeout_s)
        if lose_response and out.type != "info":
            # What the dropped reply said the node did: a trusted harness's knowledge, which
            # the checker needs to hold a keyed retry to the replay marker.
            applied = out.type == "ok" and not out.value.get("isError")
            out = Outcome("info", {"reason": RESPONSE_LOST, "applied": applied})
        if annotate is not None:
            out = Outcome(out.type, {**out.value, **annotate(out)}, out.result)
        self.history.record(self.process, out.type, f, flow, kind, out.value, sent.index)
        self.last_type = out.type
        return out
