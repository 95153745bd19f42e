"""What a legacy client may put in a session's inbox: answers to open requests only.

Layer: tests. Inbox entries are validated and size-capped; this is the answers' part (the
cancellations' ids and the inbox's length: ``tests/test_legacy_caps.py``). An answer must name a
request some node opened (``nc-`` and a random token): one naming anything else, an integer,
a malformed or a 100 KB string, or a well-formed id nobody opened, is refused 400 and writes
nothing at all; copies of an answer to an open request add one entry, the first.
"""

from __future__ import annotations

from typing import Any

import httpx
import redis

from tests.test_legacy import STEP_S, legacy_headers
from tests.test_legacy_caps import waiting_call
from tests.test_legacy_waiting import OneNode, one_node, open_session, redis_url

__all__ = ["redis_url"]  # fixture: the real Redis only


def keys_under(served: OneNode, prefix: str) -> dict[bytes, int]:
    """Every key under ``prefix`` and its size (``MEMORY USAGE``)."""
    with redis.Redis.from_url(served.redis_url) as c:
        return {k: int(c.memory_usage(k) or 0) for k in c.scan_iter(match=f"{prefix}:*")}


async def test_answers_naming_no_open_request_write_nothing_and_copies_one_entry(
    redis_url: str, key_prefix: str
) -> None:
    async with one_node(redis_url, key_prefix) as served, httpx.AsyncClient(timeout=STEP_S) as http:
        session = await open_session(http, served.url)
        inbox = served.sessions.keys(session).inbox

        async def answer(request_id: Any) -> httpx.Response:
            message = {"jsonrpc": "2.0", "id": request_id, "result": {"action": "cancel"}}
            return await http.post(served.url, json=message, headers=legacy_headers(session))

        before = keys_under(served, key_prefix)
        for request_id in (7, "x" * 100_000, "nc-short", "nc-" + "A" * 65, "nc-" + "B" * 22):
            response = await answer(request_id)
            assert response.status_code == 400, (str(request_id)[:20], response.text[:200])
            message = response.json()["error"]["message"]
            assert message in ("Invalid Request", "No open request has this id"), message
        assert keys_under(served, key_prefix) == before

        async with waiting_call(http, served, session) as (_, ask):
            for _ in range(3):
                assert (await answer(ask["id"])).status_code == 202
            entries = await served.sessions.client.xrange(inbox)
            answers = [dict(e.field_values) for e in entries]
            assert [(a["kind"], a["rid"]) for a in answers] == [("answer", ask["id"])]
