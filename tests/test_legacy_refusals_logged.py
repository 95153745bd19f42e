"""Every refused legacy request or call logs its reason, and never a secret.

Layer: tests. One node on the real Redis (``tests.test_legacy_waiting``)
takes a 2025-11-25 client's refused requests of every kind: a bad ``initialize``, an unknown
method, an unknown tool (its name is the client's text, not logged), a tool's own JSON-RPC error
(a missing capability) inside a call, a call past the session's pending-calls cap, a call whose
client never answers, a call whose session ends while it waits, an answer to no open request.
Each leaves an INFO line saying why; no line carries a bearer token, a session id or the
client's own text.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import httpx
import pytest

from nodes import errors
from nodes.config import LegacyCaps
from tests.test_legacy import BOB_TOKEN, STEP_S, Events, legacy_headers
from tests.test_legacy_caps import refusal, waiting_call
from tests.test_legacy_full_redis import initialize_message
from tests.test_legacy_waiting import LIMITS, delete_call, one_node, open_session, redis_url
from tests.test_sdk_interop import ALICE_TOKEN

__all__ = ["redis_url"]  # fixture: the real Redis only

CLIENT_TEXT = "client-text-NOT-LOGGED-4711"
"""A method and a tool name of the client's: echoed in the answer, never in the log."""


def call(request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def response_to(events: Events, request_id: int) -> dict[str, Any]:
    """The response ending a call's stream (past the notifications before it)."""
    while True:
        message = await events.next()
        if message.get("id") == request_id and "method" not in message:
            return message


REASONS = (
    "legacy initialize refused: Unsupported protocol version",
    "legacy initialize refused: capabilities and clientInfo must be objects",
    "legacy request refused: Method not found",
    "legacy request refused: Unknown tool",
    "legacy call refused: Missing required client capability: elicitation.form (tool=notes_delete)",
    "legacy request refused: No open request has this id",
    "legacy call refused: its session has the most pending calls allowed",
    "legacy call refused: No answer from the client in time",
    "legacy call ended: its session ended (tool=notes_delete)",
)
"""One line each refusal of the test below must have left (the start of its message)."""


def ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(("nodes", "store"))]


async def test_each_refused_legacy_request_and_call_logs_why_and_no_secret(
    redis_url: str, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caps = LegacyCaps(pending_calls_per_session=1)
    limits = replace(LIMITS, answer_timeout_s=0.5)
    async with (
        one_node(redis_url, key_prefix, caps, limits) as served,
        httpx.AsyncClient(timeout=STEP_S) as http,
    ):
        session = await open_session(http, served.url)
        headers = legacy_headers(session)

        async def post(message: dict[str, Any], session_headers: Any = headers) -> httpx.Response:
            return await http.post(served.url, json=message, headers=session_headers)

        bad_init = initialize_message({"name": "c"}, 1)
        bad_init["params"]["protocolVersion"] = 5
        refusal(await post(bad_init, legacy_headers(None)), 1, errors.INVALID_PARAMS)
        bad_init["params"] = {**bad_init["params"], "protocolVersion": "2025-11-25"}
        bad_init["params"]["capabilities"] = "all"
        refusal(await post(bad_init, legacy_headers(None)), 1, errors.INVALID_PARAMS)
        unknown = {"jsonrpc": "2.0", "id": 2, "method": CLIENT_TEXT}
        assert CLIENT_TEXT in refusal(await post(unknown), 2, errors.METHOD_NOT_FOUND)["message"]
        refusal(await post(call(3, CLIENT_TEXT, {})), 3, errors.INVALID_PARAMS)
        bare = initialize_message({"name": "no-elicitation"}, 4)
        bare["params"]["capabilities"] = {}
        opened = await post(bare, legacy_headers(None))
        bare_headers = legacy_headers(opened.headers["mcp-session-id"])
        refused = await post(delete_call(4), bare_headers)
        refusal(refused, 4, errors.INVALID_PARAMS)
        stray = {"jsonrpc": "2.0", "id": "nc-" + "A" * 22, "result": {"action": "accept"}}
        assert (await post(stray)).status_code == 400

        # One call waits (the cap is one): a second is refused; the first gets no answer.
        async with waiting_call(http, served, session, 5) as (events, _):
            refusal(await post(delete_call(6)), 6, errors.INVALID_REQUEST)
            timed_out = await response_to(events, 5)
        assert "No answer from the client in time" in str(timed_out["result"])

        # A call whose session ends while it waits.
        async with waiting_call(http, served, session, 7) as (events, _):
            assert (await http.delete(served.url, headers=headers)).status_code == 204
            ended = await response_to(events, 7)
        assert ended["error"]["message"] == "Session ended"

    assert_logged(caplog, session)


def assert_logged(caplog: pytest.LogCaptureFixture, session: str) -> None:
    """Every reason in ``REASONS`` logged; no secret, no client text, no traceback."""
    messages = [r.getMessage() for r in ours(caplog)]
    for reason in REASONS:
        assert any(m.startswith(reason) for m in messages), (reason, messages)
    text = "\n".join(f"{r.getMessage()} {r.args!r}" for r in ours(caplog))
    for secret in (ALICE_TOKEN, BOB_TOKEN, session, CLIENT_TEXT):
        assert secret not in text, f"in the log: {secret[:12]}..."
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
