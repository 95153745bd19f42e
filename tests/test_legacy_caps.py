"""Bounded legacy resources: what one 2025-11-25 client may make a node and Redis hold.

Layer: tests. On the real Redis: each bound of
``nodes.config.LegacyCaps`` is set small here and pushed past: sessions per principal (the oldest
is ended), stored client data (only what the node reads, capped), ``notifications/cancelled``
ids, the inbox's length, an answer's size, pending calls per session and per node (refused with a
JSON-RPC error). One node per test (``tests.test_legacy_waiting.one_node``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import trio

from nodes import errors
from nodes.config import LegacyCaps
from nodes.legacy import LEGACY_VERSION, wire
from nodes.serving.demo import DEMO_TENANT
from nodes.serving.settings import ConfigError, load_settings
from tests.test_config import config_text, key_file, write
from tests.test_legacy import (
    BOB_TOKEN,
    STEP_S,
    Events,
    answer,
    confirm,
    legacy_headers,
    pick_2024,
)
from tests.test_legacy_waiting import (
    OneNode,
    delete_call,
    eventually,
    one_node,
    open_session,
    redis_url,
)

__all__ = ["key_file", "redis_url"]  # fixtures: the real Redis only; a key file


@asynccontextmanager
async def node_with(
    url: str, prefix: str, **caps: Any
) -> AsyncIterator[tuple[OneNode, httpx.AsyncClient]]:
    async with (
        one_node(url, prefix, LegacyCaps(**caps)) as served,
        httpx.AsyncClient(timeout=STEP_S) as http,
    ):
        yield served, http


async def post(
    http: httpx.AsyncClient, served: OneNode, message: dict[str, Any], session: str
) -> httpx.Response:
    return await http.post(served.url, json=message, headers=legacy_headers(session))


def notify(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        out["params"] = params
    return out


@asynccontextmanager
async def waiting_call(
    http: httpx.AsyncClient, served: OneNode, session: str, request_id: int = 1
) -> AsyncIterator[tuple[Events, dict[str, Any]]]:
    """A notes_delete call that has asked its user (the stream open, the ask read)."""
    headers = legacy_headers(session)
    message = delete_call(request_id)
    async with http.stream("POST", served.url, json=message, headers=headers) as response:
        events = Events(response)
        ask = await events.next()
        assert ask["method"] == "elicitation/create"
        yield events, ask


async def test_a_principal_past_its_session_cap_loses_its_oldest_session_and_no_one_elses(
    redis_url: str, key_prefix: str
) -> None:
    async with node_with(redis_url, key_prefix, sessions_per_principal=3) as (served, http):
        bobs = await open_session(http, served.url, BOB_TOKEN)
        first = await open_session(http, served.url)
        async with waiting_call(http, served, first) as (events, _):
            later = [await open_session(http, served.url) for _ in range(3)]
            # The oldest session ended: its waiting call is told so, and it is 404 from now on.
            final = await events.next()
            assert final["error"]["message"] == "Session ended", final
            assert await events.ended()
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        assert (await post(http, served, ping, first)).status_code == 404
        for session in later:
            assert (await post(http, served, ping, session)).status_code == 200
        response = await http.post(served.url, json=ping, headers=legacy_headers(bobs, BOB_TOKEN))
        assert response.status_code == 200
        assert served.adapter.statistics().sessions_evicted == 1
        # The principal's list holds as many sessions as the cap, never more.
        key = served.sessions.principal_key("alice")
        assert await served.sessions.client.zcard(key) == 3


async def test_the_cap_ends_the_first_session_opened_whatever_its_nodes_clock_said(
    redis_url: str, key_prefix: str
) -> None:
    # Opening times as nodes stamp them: two in one millisecond, then one from a node whose clock
    # runs a second behind. The first opened is still the one the cap ends.
    async with node_with(redis_url, key_prefix, sessions_per_principal=3) as (served, _):
        store = served.sessions
        opened = [
            await store.create("carol", LEGACY_VERSION, {}, {}, now_ms, 3)
            for now_ms in (5_000, 5_000, 4_000, 5_000)
        ]
        assert [ended for _, ended in opened] == [0, 0, 0, 1]
        assert await store.load(opened[0][0]) is None
        for session, _ in opened[1:]:
            assert await store.load(session) is not None


async def test_initialize_stores_only_what_the_node_reads_each_field_capped(
    redis_url: str, key_prefix: str
) -> None:
    async with node_with(redis_url, key_prefix, client_text_max_chars=16) as (served, http):
        junk = "x" * 100_000  # six of them: within the 1 MiB body limit
        params = {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {
                "elicitation": {"form": {"junk": junk}, "url": {}, "other": junk},
                "roots": {"listChanged": True, "junk": junk},
                "sampling": {"junk": junk},
                "experimental": {"x": junk},
            },
            "clientInfo": {"name": "n" * 100, "version": "1.0", "title": junk, "icons": [junk]},
        }
        msg = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        response = await http.post(served.url, json=msg, headers=legacy_headers(None))
        assert response.status_code == 200, response.text
        session = response.headers["mcp-session-id"]
        record = await served.sessions.load(session)
        assert record is not None
        assert record.capabilities == {
            "elicitation": {"form": {}, "url": {}},
            "roots": {"listChanged": True},
        }
        assert record.client_info == {"name": "n" * 16, "version": "1.0"}
        size = await served.sessions.client.memory_usage(served.sessions.keys(session).session)
        assert size is not None
        assert size < 2_048


@pytest.mark.parametrize(
    "request_id",
    ["r" * 33, 2**64, 1.5, None, True, {"id": 1}, ["x"]],
    ids=["long", "huge", "float", "null", "bool", "object", "array"],
)
async def test_a_cancellation_naming_an_invalid_id_is_refused_and_stores_nothing(
    redis_url: str, key_prefix: str, request_id: object
) -> None:
    async with node_with(redis_url, key_prefix, request_id_max_chars=32) as (served, http):
        session = await open_session(http, served.url)
        inbox = served.sessions.keys(session).inbox
        cancel = notify("notifications/cancelled", {"requestId": request_id})
        response = await post(http, served, cancel, session)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        if request_id == 2**64:
            # Refused before the adapter: the HTTP edge decodes no integer beyond 64 bits.
            assert error["code"] == errors.PARSE_ERROR
            assert "integer out of range" in error["message"]
        else:
            assert error["code"] == errors.INVALID_PARAMS
            assert "at most 32 characters" in error["message"]
        assert await served.sessions.client.xlen(inbox) == 0
        ok = notify("notifications/cancelled", {"requestId": "r" * 32})
        assert (await post(http, served, ok, session)).status_code == 202
        assert await served.sessions.client.xlen(inbox) == 1


async def test_a_session_inbox_stays_within_its_cap(redis_url: str, key_prefix: str) -> None:
    cap = 20
    async with node_with(redis_url, key_prefix, inbox_max_entries=cap) as (served, http):
        session = await open_session(http, served.url)
        for i in range(300):
            cancel = notify("notifications/cancelled", {"requestId": i})
            assert (await post(http, served, cancel, session)).status_code == 202
        length = await served.sessions.client.xlen(served.sessions.keys(session).inbox)
        # Redis trims whole stream nodes (stream-node-max-entries, 100 by default).
        assert cap <= length <= cap + 100, length


async def test_an_oversized_answer_is_refused_and_ends_its_call_with_nothing_changed(
    redis_url: str, key_prefix: str
) -> None:
    async with node_with(redis_url, key_prefix, answer_max_bytes=1_000) as (served, http):
        session = await open_session(http, served.url)
        async with waiting_call(http, served, session) as (events, ask):
            content = {"noteId": "n" * 2_000, "confirm": True}
            big = {"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", **content}}
            response = await post(http, served, big, session)
            assert response.status_code == 400, response.text
            assert "Answer too large (limit 1000 bytes)" in response.json()["error"]["message"]
            final = await events.next()
            assert final["result"]["isError"] is True
            assert "structuredContent" not in final["result"]
            assert "did not answer" in final["result"]["content"][0]["text"]
        # Nothing of the large answer was stored.
        entries = await served.sessions.client.xrange(served.sessions.keys(session).inbox)
        assert all(len(json.dumps(e.field_values)) < 1_000 for e in entries)
        assert served.node.statistics().executions == 0


async def test_pending_calls_past_the_session_cap_are_refused_until_one_ends(
    redis_url: str, key_prefix: str
) -> None:
    async with node_with(redis_url, key_prefix, pending_calls_per_session=2) as (served, http):
        session = await open_session(http, served.url)
        async with waiting_call(http, served, session, 1), waiting_call(http, served, session, 2):
            response = await post(http, served, delete_call(3), session)
            refused = refusal(response, 3, errors.INVALID_REQUEST)
            assert refused["message"].startswith("Too many pending calls in this session")
            assert refused["data"] == {"limit": 2, "retryable": True}
            assert served.adapter.statistics().refused_by_cap == 1
        # Both clients went away: the session takes calls again.
        await eventually(lambda: served.adapter.statistics().pending_calls == 0, "calls ended")
        async with waiting_call(http, served, session, 4):
            pass


async def test_a_call_asking_again_stays_counted_for_the_new_rounds_wait(
    redis_url: str, key_prefix: str
) -> None:
    """Each round of questions may wait a whole state lifetime: a call asked again (the note
    changed since it was shown) has its entry on the session's pending list pushed back, so the
    per-session cap keeps counting it however long its rounds take together."""
    async with node_with(redis_url, key_prefix) as (served, http):
        session = await open_session(http, served.url)
        calls = served.sessions.keys(session).calls
        async with waiting_call(http, served, session) as (events, ask):
            [(call_id, begun_until)] = await pending_entries(served, calls)
            # Let the Redis clock pass the begin's bound minus the call's whole bound, so a
            # pushed-back entry ends strictly later than the first one did.
            start_ms = begun_until - pending_bound_ms(served)
            await eventually(lambda: later_than(served, start_ms), "the Redis clock moved on")
            note_id = pick_2024(ask)
            store = served.node.store
            note = await store.get(DEMO_TENANT, note_id)
            assert note is not None
            edited = await store.update(DEMO_TENANT, note, note.title, note.body + "!", "alice")
            assert edited.status == "updated", edited
            reply = await post(http, served, answer(ask["id"], confirm(note_id)), session)
            assert reply.status_code == 202, reply.text
            again = await events.next()
            assert again["method"] == "elicitation/create"
            assert "changed since it was shown" in again["params"]["message"]
            [(kept_id, kept_until)] = await pending_entries(served, calls)
            assert kept_id == call_id
            assert kept_until > begun_until
            assert await trio.to_thread.run_sync(expires_at, served, calls) == kept_until
        await eventually(lambda: served.adapter.statistics().pending_calls == 0, "calls ended")


def pending_bound_ms(served: OneNode) -> int:
    """How long past its start a call stays counted (``LegacyAdapter._call_bound_s``)."""
    return int(served.adapter._call_bound_s() * 1000)


async def later_than(served: OneNode, ms: int) -> bool:
    """Whether the Redis clock is past ``ms``."""

    def now_ms() -> int:
        with redis.Redis.from_url(served.redis_url) as c:
            seconds, micros = c.time()
            return int(seconds) * 1000 + int(micros) // 1000

    return await trio.to_thread.run_sync(now_ms) > ms


def expires_at(served: OneNode, key: str) -> int:
    """The absolute expiry of ``key`` in ms (``PEXPIRETIME``)."""
    with redis.Redis.from_url(served.redis_url) as c:
        return int(c.execute_command("PEXPIRETIME", key))


async def pending_entries(served: OneNode, key: str) -> list[tuple[str, int]]:
    def read() -> list[tuple[str, int]]:
        with redis.Redis.from_url(served.redis_url, decode_responses=True) as c:
            return [(m, int(s)) for m, s in c.zrange(key, 0, -1, withscores=True)]

    return await trio.to_thread.run_sync(read)


async def test_pending_calls_past_the_node_cap_are_refused_for_every_session(
    redis_url: str, key_prefix: str
) -> None:
    async with node_with(redis_url, key_prefix, pending_calls_per_node=2) as (served, http):
        a, b, c = [await open_session(http, served.url) for _ in range(3)]
        async with waiting_call(http, served, a), waiting_call(http, served, b):
            response = await post(http, served, delete_call(7), c)
            refused = refusal(response, 7, errors.INTERNAL_ERROR)
            assert refused["message"].startswith("Too many pending calls on this node")
            # A call that needs no waiting is refused too: the cap counts open calls.
            listing = {"name": "notes_list", "arguments": {"workspaceUri": NOTES}}
            msg = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": listing}
            refusal(await post(http, served, msg, c), 8, errors.INTERNAL_ERROR)
            # Other requests are served.
            ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
            assert (await post(http, served, ping, c)).json()["result"] == {}
        await eventually(lambda: served.adapter.statistics().pending_calls == 0, "calls ended")
        listing_msg = {"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": listing}
        answer = (await post(http, served, listing_msg, c)).json()
        assert answer["result"]["isError"] is False


NOTES = "file:///Users/alice/Documents/Notes"


def refusal(response: httpx.Response, request_id: int, code: int) -> dict[str, Any]:
    """A JSON-RPC error answer to request ``request_id`` (HTTP 200, as legacy errors go)."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == request_id
    assert body["error"]["code"] == code, body
    out: dict[str, Any] = body["error"]
    return out


def test_a_bare_elicitation_capability_stays_bare_form_only() -> None:
    assert wire.stored_capabilities({"elicitation": {}}) == {"elicitation": {}}
    assert wire.stored_capabilities({"roots": {}, "elicitation": "x"}) == {"roots": {}}


def test_the_legacy_table_of_the_config_file_sets_the_caps(tmp_path: Path, key_file: Path) -> None:
    extra = "[legacy]\nsessions_per_principal = 4\npending_calls_per_node = 32\n"
    node = load_settings(write(tmp_path, config_text(key_file, extra))).node
    assert node.legacy == LegacyCaps(sessions_per_principal=4, pending_calls_per_node=32)
    # Without the table, the safe defaults.
    assert load_settings(write(tmp_path, config_text(key_file))).node.legacy == LegacyCaps()


@pytest.mark.parametrize(
    "bad", ["sessions_per_principal = 0", "inbox_max_entries = -1", "no_such_cap = 3"]
)
def test_a_bad_legacy_cap_is_a_clear_config_error(tmp_path: Path, key_file: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match=r"legacy\."):
        load_settings(write(tmp_path, config_text(key_file, f"[legacy]\n{bad}\n")))
