"""A small confirm-before-act MCP server with one switchable flaw per check of the MRTR pack.

Layer: tests. Written from the spec, not from our nodes: a counter with two slots (``a``,
``b``) that ``counter_bump`` adds one to (``counter_add_ten``: ten) after a form asks which slot
and for a confirmation, under an HMAC-sealed ``requestState`` bound to tool, arguments,
principal and expiry, with a record of each state's outcome (one-shot). ``FLAWS`` maps each of
the pack's 16 checks to the one flaw that should make that check, and no other, report FAILURE;
``Flaw.NONE`` is the correct server. Served by hypercorn on loopback (a dropped connection must
be a real one), its two "instances" are two paths of one server sharing one store, as instances
share a database.

Timing: a few flaws hold an execution for ``HOLD_S`` (a window in which a concurrent copy
arrives, or a dropped client's disconnect shows); the pack sends its concurrent copies at once,
so they meet in that window on any machine that answers a loopback request within seconds.
States live ``TTL_S`` with an expiry margin of ``MARGIN_S``: wide, so a flow of a few requests
finishes well inside even ``Flaw.EARLY_EXPIRY``'s shortened lifetime on a loaded machine.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import trio

from loadgen.mrtr_pack.case import Contract

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

TTL_S = 30.0
MARGIN_S = 5.0
HOLD_S = 2.0
TOKENS = {"token-a": "a", "token-b": "b"}
INVALID_STATE = {"code": -32602, "message": "Invalid or expired requestState"}
FORM = {
    "type": "object",
    "properties": {
        "which": {"type": "string", "enum": ["a", "b"], "title": "Which slot"},
        "confirm": {"type": "boolean", "title": "Go ahead"},
    },
    "required": ["which", "confirm"],
}
STEP = {"counter_bump": 1, "counter_add_ten": 10}


class Flaw(enum.Enum):
    """One flaw of the server; the value names the check it should fail."""

    NONE = ""
    NO_EFFECT = "mrtr-single-accept"
    """An accept completes but does nothing."""
    RERUN_ON_SAME_INSTANCE = "mrtr-replay-same-instance"
    """An instance runs again an answer it executed itself (it consults the record only for
    answers another instance executed)."""
    LOCAL_OUTCOMES = "mrtr-replay-other-instance"
    """Once delivered, an executed outcome stays only on its instance; the others keep a
    tombstone and run the same answer again to produce an outcome."""
    CHECK_THEN_ACT = "mrtr-concurrent-duplicates"
    """The record is checked, then (after a pause) the action runs and is recorded: copies in
    flight together all pass the check."""
    UNDO_ON_DISCONNECT = "mrtr-lost-response-retry"
    """An execution whose client is gone before the response records nothing."""
    NEW_OPTION_RUNS = "mrtr-different-answer-used-state"
    """An accept of another option under a used state is decided afresh."""
    DECLINE_UNRECORDED = "mrtr-decline-then-accept"
    """A decline is answered but not recorded: the state stays usable."""
    CANCEL_FINAL = "mrtr-cancel-then-accept"
    """A cancel is recorded as the state's final outcome."""
    SILENCE_COMPLETES = "mrtr-silence-reasks"
    """A retry without an answer completes (as "not done") instead of asking again."""
    EARLY_EXPIRY = "mrtr-before-expiry"
    """States expire well before their stated lifetime."""
    NO_EXPIRY = "mrtr-after-expiry"
    """Expiry is never checked."""
    NO_PRINCIPAL = "mrtr-other-principal"
    """The principal is not compared."""
    STATE_ARGUMENTS = "mrtr-changed-arguments"
    """The call's arguments are not compared with the state's; the state's are used."""
    MAC_UNCHECKED = "mrtr-tampered-state"
    """The MAC's length is checked, not its value."""
    MAC_PREFIX = "mrtr-truncated-state"
    """The MAC is compared only over the length given (a cut MAC matches)."""
    NO_TOOL_BINDING = "mrtr-state-for-another-tool"
    """The tool is not compared: a state opens for any confirm-before-act tool."""


FLAWS: dict[str, Flaw] = {f.value: f for f in Flaw if f is not Flaw.NONE}
"""Check id -> the flaw that should fail it alone."""

CONTRACT = Contract(
    tool="counter_bump",
    arguments='{"counter": "c{fresh}"}',
    create_tool="counter_make",
    read_tool="counter_read",
    other_tool="counter_add_ten",
    token="token-a",
    other_token="token-b",
    copies=2,
    state_ttl_s=TTL_S,
    expiry_margin_s=MARGIN_S,
)
"""What the pack is told; two copies, one per instance (``RERUN_ON_SAME_INSTANCE`` would also
fail the concurrent check if two copies met on one instance)."""


def _complete(content: dict[str, Any]) -> dict[str, Any]:
    text = [{"type": "text", "text": json.dumps(content, sort_keys=True)}]
    return {"resultType": "complete", "content": text, "structuredContent": content}


def _digest(answer: object) -> str:
    return json.dumps(answer, sort_keys=True)


@dataclass
class Record:
    """A state's recorded outcome."""

    digest: str
    result: dict[str, Any]
    action: str
    instance: int


@dataclass
class CounterServer:
    """The server; ``flaw`` is its one bug (``Flaw.NONE``: none)."""

    flaw: Flaw = Flaw.NONE
    key: bytes = field(default_factory=lambda: os.urandom(32))
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    records: dict[str, Record] = field(default_factory=dict)
    tombstones: dict[str, str] = field(default_factory=dict)
    local: dict[int, dict[str, Record]] = field(default_factory=lambda: {0: {}, 1: {}})

    # -- the state -------------------------------------------------------------------------------

    def _mac(self, raw: bytes) -> str:
        # Long on purpose: a state's middle character (what the pack tampers with) is in it.
        first = hmac.new(self.key, raw, hashlib.sha512).digest()
        return (first + hashlib.sha512(first).digest()).hex()

    def seal(self, payload: dict[str, Any]) -> str:
        raw = json.dumps(payload, sort_keys=True).encode()
        return base64.urlsafe_b64encode(raw).decode() + "." + self._mac(raw)

    def open(self, token: str) -> dict[str, Any] | None:
        body, _, mac = token.partition(".")
        try:
            raw = base64.urlsafe_b64decode(body.encode())
            payload: dict[str, Any] = json.loads(raw)
        except (ValueError, binascii.Error):
            return None
        want = self._mac(raw)
        if self.flaw is Flaw.MAC_UNCHECKED:
            return payload if len(mac) == len(want) else None
        if self.flaw is Flaw.MAC_PREFIX:
            return payload if mac and hmac.compare_digest(mac, want[: len(mac)]) else None
        return payload if hmac.compare_digest(mac, want) else None

    def ask(self, tool: str, args: dict[str, Any], who: str) -> dict[str, Any]:
        state = {
            "n": secrets.token_hex(8),
            "t": tool,
            "a": args,
            "w": who,
            "e": time.time() + TTL_S,
        }
        request = {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": "Which slot, and sure?", "requestedSchema": FORM},
        }
        return {
            "resultType": "input_required",
            "inputRequests": {"confirm": request},
            "requestState": self.seal(state),
        }

    # -- a call ----------------------------------------------------------------------------------

    async def call(self, params: dict[str, Any], who: str, inst: int, gone: Gone) -> dict[str, Any]:
        """A result, or ``{"error": ...}``."""
        name, args = params["name"], params.get("arguments") or {}
        counter = str(args.get("counter"))
        if name == "counter_make":
            self.counts[counter] = {"a": 0, "b": 0}
            return _complete({"counter": counter})
        if name == "counter_read":
            return _complete({"value": self.counts.get(counter)})
        token = params.get("requestState")
        if token is None:
            return self.ask(name, args, who)
        state = self.open(token) if isinstance(token, str) else None
        if state is None or not self._bound(state, name, args, who):
            return {"error": INVALID_STATE}
        answer = (params.get("inputResponses") or {}).get("confirm")
        if answer is None:
            if self.flaw is Flaw.SILENCE_COMPLETES:
                return _complete({"done": False})
            return self.ask(name, args, who)
        tool = state["t"] if self.flaw is Flaw.STATE_ARGUMENTS else name
        target = str(state["a"].get("counter")) if self.flaw is Flaw.STATE_ARGUMENTS else counter
        if state["n"] not in self.records and not self._live(state["e"]):
            return {"error": INVALID_STATE}
        return await self.decide(state["n"], tool, target, answer, inst, gone)

    def _bound(self, state: dict[str, Any], name: str, args: dict[str, Any], who: str) -> bool:
        f = self.flaw
        if f is not Flaw.NO_TOOL_BINDING and state["t"] != name:
            return False
        if f is not Flaw.STATE_ARGUMENTS and state["a"] != args:
            return False
        return f is Flaw.NO_PRINCIPAL or state["w"] == who

    def _live(self, expiry: float) -> bool:
        """Whether a state of this expiry may still decide (a recorded outcome is sent again
        whatever the time: the record outlives the state)."""
        if self.flaw is Flaw.NO_EXPIRY:
            return True
        return time.time() < expiry - (2.5 * MARGIN_S if self.flaw is Flaw.EARLY_EXPIRY else 0.0)

    async def decide(
        self, nonce: str, tool: str, counter: str, answer: dict[str, Any], inst: int, gone: Gone
    ) -> dict[str, Any]:
        digest, action = _digest(answer), str(answer.get("action"))
        record = self.records.get(nonce) or self.local[inst].get(nonce)
        if record is None and nonce in self.tombstones:
            # LOCAL_OUTCOMES: the outcome lives on its instance only.
            if self.tombstones[nonce] != digest:
                return {"error": INVALID_STATE}
            return self._execute(tool, counter, answer)
        if record is not None:
            rerun = self.flaw is Flaw.RERUN_ON_SAME_INSTANCE and record.instance == inst
            new_option = self.flaw is Flaw.NEW_OPTION_RUNS and record.action == action == "accept"
            if rerun and record.digest == digest:
                return self._execute(tool, counter, answer)
            if new_option and record.digest != digest:
                return self._execute(tool, counter, answer)
            if self.flaw is Flaw.CANCEL_FINAL and record.action == "cancel":
                return record.result
            return record.result if record.digest == digest else {"error": INVALID_STATE}
        if action == "cancel":
            result = _complete({"done": False})
            if self.flaw is Flaw.CANCEL_FINAL:
                self.records[nonce] = Record(digest, result, action, inst)
            return result
        if action != "accept" or not (answer.get("content") or {}).get("confirm"):
            result = _complete({"done": False})
            if self.flaw is not Flaw.DECLINE_UNRECORDED:
                self.records[nonce] = Record(digest, result, action, inst)
            return result
        return await self._accept(nonce, tool, counter, answer, inst, gone)

    async def _accept(
        self, nonce: str, tool: str, counter: str, answer: dict[str, Any], inst: int, gone: Gone
    ) -> dict[str, Any]:
        digest = _digest(answer)
        if self.flaw is Flaw.CHECK_THEN_ACT:
            await trio.sleep(HOLD_S)  # the record was checked before this pause
        result = self._execute(tool, counter, answer)
        self.records[nonce] = Record(digest, result, "accept", inst)
        if self.flaw is Flaw.UNDO_ON_DISCONNECT and await gone(HOLD_S):
            del self.records[nonce]  # "the client never saw it": the record goes, the effect stays
        if self.flaw is Flaw.LOCAL_OUTCOMES and not await gone(HOLD_S):
            # Delivered: the outcome moves to its instance; the others keep a tombstone.
            self.local[inst][nonce] = self.records.pop(nonce)
            self.tombstones[nonce] = digest
        return result

    def _execute(self, tool: str, counter: str, answer: dict[str, Any]) -> dict[str, Any]:
        which = str((answer.get("content") or {}).get("which"))
        slots = self.counts.setdefault(counter, {"a": 0, "b": 0})
        if self.flaw is not Flaw.NO_EFFECT:
            slots[which] = slots.get(which, 0) + STEP.get(tool, 1)
        return _complete({"done": True, "which": which, "value": slots.get(which)})

    # -- ASGI ------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await _lifespan(receive, send)
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break

        async def gone(wait_s: float) -> bool:
            with trio.move_on_after(wait_s):
                return (await receive())["type"] == "http.disconnect"
            return False

        headers = dict(scope["headers"])
        who = TOKENS.get(headers.get(b"authorization", b"").decode().removeprefix("Bearer "))
        msg = json.loads(body)
        inst = 1 if scope["path"].startswith("/i1/") else 0
        if who is None:
            out: dict[str, Any] = {"error": {"code": -32600, "message": "unauthorized"}}
            status = 401
        else:
            out = await self.call(msg["params"], who, inst, gone)
            status = 400 if "error" in out else 200
        key = "error" if "error" in out else "result"
        reply = {"jsonrpc": "2.0", "id": msg.get("id"), key: out.get("error", out)}
        data = json.dumps(reply).encode()
        start = {"type": "http.response.start", "status": status}
        start["headers"] = [(b"content-type", b"application/json")]
        await send(start)
        await send({"type": "http.response.body", "body": data})


Gone = Callable[[float], Awaitable[bool]]
"""Waits up to the seconds given for the client's disconnect; whether it came."""


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def serve_bad_server(
    server: CounterServer, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve ``server`` on a free loopback port until cancelled; report its two instances'
    URLs."""
    from functools import partial

    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(serve, server, config, mode="asgi"))
        task_status.started([f"{binds[0]}/i0/mcp", f"{binds[0]}/i1/mcp"])
