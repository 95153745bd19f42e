"""The pack can fail: a planted double execution is caught, and the same server without the
plant passes every check.

Layer: tests. The target is a tool contract that is not ours (a confirmed counter bump, whose
double execution shows in the count), so this also proves the pack is generic: it is told the
tool, the arguments with ``{fresh}``, a create tool and a read tool, and answers the form from
its schema. The server is a small ASGI app in this file, written from the spec: round 1 asks
for a confirmation with an HMAC-sealed state bound to tool, arguments, principal and expiry;
the correct variant records each state's outcome (one-shot), the planted one does not. Two
"instances" are two URLs of one app (one shared store, as instances share a database).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest

from loadgen.mrtr_pack.case import Contract
from loadgen.mrtr_pack.pack import run_pack

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

TTL_S = 2.0
CONFIRMING = ("counter_bump", "counter_reset")
FORM = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Go ahead"}},
    "required": ["confirm"],
}
TOKENS = {"token-a": "a", "token-b": "b"}


def _complete(content: dict[str, Any], *, error: bool = False) -> dict[str, Any]:
    text = [{"type": "text", "text": json.dumps(content)}]
    return {
        "resultType": "complete",
        "content": text,
        "structuredContent": content,
        "isError": error,
    }


INVALID_STATE = {"code": -32602, "message": "Invalid or expired requestState"}


class CounterServer:
    """Counters behind a confirm-before-act bump; ``one_shot=False`` is the planted bug."""

    def __init__(self, *, one_shot: bool) -> None:
        self.one_shot = one_shot
        self.key = os.urandom(32)
        self.counts: dict[str, int] = {}
        self.used: dict[str, tuple[str, dict[str, Any]]] = {}

    def seal(self, payload: dict[str, Any]) -> str:
        raw = json.dumps(payload, sort_keys=True).encode()
        mac = hmac.new(self.key, raw, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac + raw).decode()

    def open(self, token: str) -> dict[str, Any] | None:
        try:
            blob = base64.urlsafe_b64decode(token.encode())
        except ValueError:
            return None
        mac, raw = blob[:32], blob[32:]
        if not hmac.compare_digest(mac, hmac.new(self.key, raw, hashlib.sha256).digest()):
            return None
        payload: dict[str, Any] = json.loads(raw)
        return payload

    def ask(self, name: str, args: dict[str, Any], who: str) -> dict[str, Any]:
        state = {
            "nonce": secrets.token_hex(8),
            "tool": name,
            "args": args,
            "who": who,
            "exp": time.time() + TTL_S,
        }
        request = {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": "Sure?", "requestedSchema": FORM},
        }
        return {
            "resultType": "input_required",
            "inputRequests": {"confirm": request},
            "requestState": self.seal(state),
        }

    def call(self, params: dict[str, Any], who: str) -> dict[str, Any]:
        """A result, or {"error": ...}."""
        name, args = params["name"], params.get("arguments") or {}
        counter = str(args.get("counter"))
        if name == "counter_make":
            self.counts[counter] = 0
            return _complete({"counter": counter, "value": 0})
        if name == "counter_read":
            return _complete({"value": self.counts.get(counter)})
        token = params.get("requestState")
        if token is None:
            return self.ask(name, args, who)
        state = self.open(token)
        if state is None or (state["tool"], state["args"], state["who"]) != (name, args, who):
            return {"error": INVALID_STATE}
        if time.time() >= state["exp"]:
            return {"error": INVALID_STATE}
        answer = (params.get("inputResponses") or {}).get("confirm")
        if answer is None:
            return self.ask(name, args, who)
        return self.decide(state["nonce"], counter, name, answer)

    def decide(self, nonce: str, counter: str, name: str, answer: dict[str, Any]) -> dict[str, Any]:
        digest = json.dumps(answer, sort_keys=True)
        if self.one_shot and nonce in self.used:
            recorded_digest, recorded = self.used[nonce]
            return recorded if recorded_digest == digest else {"error": INVALID_STATE}
        if answer.get("action") == "cancel":
            return _complete({"done": False})
        yes = answer.get("action") == "accept" and (answer.get("content") or {}).get("confirm")
        if yes:
            value = self.counts[counter] + 1 if name == "counter_bump" else 0
            self.counts[counter] = value
            result = _complete({"done": True, "value": value})
        else:
            result = _complete({"done": False})
        self.used[nonce] = (digest, result)
        return result

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        headers = dict(scope["headers"])
        who = TOKENS.get(headers.get(b"authorization", b"").decode().removeprefix("Bearer "))
        msg = json.loads(body)
        if who is None:
            status, reply = (
                401,
                {
                    "jsonrpc": "2.0",
                    "id": msg.get("id"),
                    "error": {"code": -32600, "message": "unauthorized"},
                },
            )
        else:
            out = self.call(msg["params"], who)
            status = 400 if "error" in out else 200
            key = "error" if "error" in out else "result"
            reply = {"jsonrpc": "2.0", "id": msg["id"], key: out.get("error", out)}
        data = json.dumps(reply).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": data})


COUNTER = '{"counter": "c{fresh}"}'
CONTRACT = Contract(
    tool="counter_bump",
    arguments=COUNTER,
    create_tool="counter_make",
    read_tool="counter_read",
    other_tool="counter_reset",
    token="token-a",
    other_token="token-b",
    state_ttl_s=TTL_S,
    expiry_margin_s=0.5,
)
URLS = ["http://instance-0/mcp", "http://instance-1/mcp"]

DOUBLE_EXECUTIONS = {
    "mrtr-replay-same-instance",
    "mrtr-replay-other-instance",
    "mrtr-concurrent-duplicates",
    "mrtr-lost-response-retry",
    "mrtr-decline-then-accept",
}
"""What a server that keeps no record of used states fails (the counter counts each run)."""


async def _run(server: CounterServer) -> dict[str, Any]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server)) as client:
        checks = await run_pack(URLS, CONTRACT, client)
    return {c.id: c for c in checks}


async def test_a_correct_one_shot_server_passes_every_check() -> None:
    checks = await _run(CounterServer(one_shot=True))
    assert {k: c.status for k, c in checks.items()} == dict.fromkeys(checks, "SUCCESS"), [
        (k, c.error_message) for k, c in checks.items() if c.status != "SUCCESS"
    ]


async def test_a_planted_double_execution_is_caught_with_the_requests_that_show_it() -> None:
    server = CounterServer(one_shot=False)
    checks = await _run(server)
    failed = {k for k, c in checks.items() if c.status == "FAILURE"}
    assert failed == DOUBLE_EXECUTIONS, {k: c.error_message for k, c in checks.items()}
    # Without another option to pick, a changed answer can only untick the confirmation: the
    # planted server takes it as a new decision, which acts on nothing (a WARNING, not a pass).
    assert checks["mrtr-different-answer-used-state"].status == "WARNING"
    replay = checks["mrtr-replay-other-instance"]
    assert replay.details["effects"][-1]["effect"] == {"value": 2}
    answers = [r for r in replay.details["requests"] if "requestState" in r["request"]["params"]]
    assert len(answers) == 2
    assert (
        answers[0]["request"]["params"]["requestState"]
        == answers[1]["request"]["params"]["requestState"]
    )
    assert [a["instance"] for a in answers] == [0, 1]
    duplicates = checks["mrtr-concurrent-duplicates"]
    value = duplicates.details["effects"][-1]["effect"]["value"]
    assert value == CONTRACT.copies, "every copy bumped the counter"


@pytest.mark.parametrize("one_shot", [True, False])
async def test_the_state_binding_checks_do_not_depend_on_one_shot(one_shot: bool) -> None:
    checks = await _run(CounterServer(one_shot=one_shot))
    for cid in (
        "mrtr-tampered-state",
        "mrtr-truncated-state",
        "mrtr-other-principal",
        "mrtr-changed-arguments",
        "mrtr-state-for-another-tool",
        "mrtr-after-expiry",
        "mrtr-before-expiry",
        "mrtr-silence-reasks",
        "mrtr-cancel-then-accept",
    ):
        assert checks[cid].status == "SUCCESS", (cid, checks[cid].error_message)
