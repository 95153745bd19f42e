"""A full or unreachable Redis is answered, not crashed on.

Finding reproduced: with a ``noeviction`` Redis full, creates, declines, moves and archive
confirmations failed with HTTP 500, ``"id": null`` and a traceback in the log. Now every tool
answers a specific -32603 carrying the request's own id, with one log line and no traceback;
reads keep working, and nothing is written. The full Redis is a ``redis-server`` of this module's
own with ``--maxmemory 2mb``; the unreachable one is a loopback port with nothing listening.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis

from nodes.protocol import Node
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, DEMO_TENANT
from store.client_factory import redis_client
from store.notes import NoteStore
from tests.asgi_client import asgi_client, post_call, post_method, tool_result
from tests.harness import accept, demo_config
from tests.own_redis import free_port, own_redis


@contextlib.contextmanager
def small_redis(maxmemory: str = "2mb") -> Iterator[str]:
    """A redis-server of this test's own with a small maxmemory, stopped by pid."""
    with own_redis(None, "--maxmemory", maxmemory) as server:
        yield server.url


HEADROOM = 262_144
"""How far over its maxmemory the full Redis is kept: client buffers grow and shrink by tens of
kilobytes as requests come and go, which must not make room for a write."""


@contextlib.contextmanager
def filled(url: str) -> Iterator[int]:
    """Write filler keys until Redis refuses with OOM, then lower its maxmemory ``HEADROOM``
    below what it uses, so it stays full whatever its buffers do; yields how many keys fit."""
    sync = redis.Redis.from_url(url)
    count = 0
    try:
        for _ in range(10_000):
            try:
                sync.set(f"filler:{count}", "x" * 16_384)
            except redis.exceptions.OutOfMemoryError:
                break
            count += 1
        else:
            raise AssertionError("a 2 MB Redis took 160 MB of filler")
        used = int(sync.info("memory")["used_memory"])
        sync.config_set("maxmemory", used - HEADROOM)
        yield count
    finally:
        sync.close()


def empty(url: str) -> None:
    """Delete the filler (this server is ours alone) and restore the 2 MB maxmemory."""
    sync = redis.Redis.from_url(url)
    keys = list(sync.scan_iter("filler:*"))
    if keys:
        sync.delete(*keys)
    sync.config_set("maxmemory", "2mb")
    sync.close()


@dataclass
class Full:
    url: str
    store: NoteStore
    client: httpx.AsyncClient
    notes: dict[str, str]
    """Title -> note id of the notes seeded before Redis filled up."""


@pytest.fixture
async def full() -> AsyncIterator[Full]:
    """A node on a Redis that is full (noeviction), with notes seeded before it filled."""
    with small_redis() as url:
        client = redis_client(url)
        async with client:
            store = NoteStore(client, prefix="full")
            notes = {}
            for title in ("delete me", "decline me", "archive me", "move me", "edit me"):
                notes[title] = (
                    await store.create(DEMO_TENANT, ALICE_NOTES, title, "body", "alice")
                ).note_id
            with filled(url) as count:
                assert count > 0
                async with asgi_client(Node(demo_config(), store)) as http:
                    yield Full(url, store, http, notes)


def store_error(rid: int | str, response: httpx.Response, reason: str) -> dict[str, Any]:
    """Assert a -32603 answer for request ``rid`` with this ``data.reason``."""
    assert response.status_code == 500, response.text
    body = response.json()
    assert body["id"] == rid, body
    assert body["error"]["code"] == -32603, body
    assert body["error"]["data"] == {"retryable": True, "reason": reason}, body
    out: dict[str, Any] = body["error"]
    return out


def one_line_each(caplog: pytest.LogCaptureFixture, count: int, words: str) -> None:
    """``count`` warning lines saying ``words``, and no traceback anywhere in the log."""
    lines = [r for r in caplog.records if words in r.getMessage()]
    assert len(lines) == count, [r.getMessage() for r in caplog.records]
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in lines)
    assert not any(r.exc_info for r in caplog.records)
    assert "Traceback" not in caplog.text


async def round_one(client: httpx.AsyncClient, tool: str, title: str) -> str:
    """Round 1 of a confirming tool (a read: it works on a full Redis); the sealed state."""
    _, response = await post_call(client, tool, {"workspaceUri": ALICE_NOTES, "title": title})
    result = tool_result(response)
    assert result["resultType"] == "input_required", result
    state: str = result["requestState"]
    return state


async def test_a_full_redis_answers_every_write_with_store_full_and_the_requests_id(
    full: Full, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    c, notes = full.client, full.notes
    delete_state = await round_one(c, "notes_delete", "delete me")
    decline_state = await round_one(c, "notes_delete", "decline me")
    archive_state = await round_one(c, "notes_archive", "archive me")
    ws = {"workspaceUri": ALICE_NOTES}
    archive_answer = {
        "confirm_archive": {
            "action": "accept",
            "content": {"noteId": notes["archive me"], "confirm": True},
        }
    }
    calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("notes_create", {**ws, "title": "new"}, {}),
        ("notes_update", {**ws, "noteId": notes["edit me"], "body": "new body"}, {}),
        (
            "notes_move",
            {**ws, "noteId": notes["move me"], "targetWorkspaceUri": ALICE_ARCHIVE},
            {},
        ),
        (
            "notes_delete",
            {**ws, "title": "decline me"},
            {"state": decline_state, "responses": {"confirm_delete": {"action": "decline"}}},
        ),
        (
            "notes_archive",
            {**ws, "title": "archive me"},
            {"state": archive_state, "responses": archive_answer},
        ),
    ]
    for n, (tool, arguments, extra) in enumerate(calls):
        rid, response = await post_call(c, tool, arguments, request_id=f"req-{n}", **extra)
        error = store_error(rid, response, "store_full")
        assert "nothing was changed" in error["message"]
    one_line_each(caplog, len(calls), "store full")
    # Reads still answer, and nothing was written: every seeded note is where it was, unchanged.
    _, listed = await post_call(c, "notes_list", ws)
    shown = {n["title"]: n for n in tool_result(listed)["structuredContent"]["notes"]}
    assert set(shown) == set(notes)
    assert all(n["version"] == 1 for n in shown.values())
    # A deletion still executes: Redis checks memory at a script's first write, and the delete
    # script's is a DEL, which frees memory; the script then runs to its end, atomically.
    _, deleted = await post_call(
        c, "notes_delete", {**ws, "title": "delete me"}, state=delete_state,
        responses=accept(notes["delete me"]),
    )  # fmt: skip
    assert tool_result(deleted)["structuredContent"]["deleted"] is True
    # Once memory is free again, the refused decline is recorded: the refusal wrote nothing.
    empty(full.url)
    _, declined = await post_call(
        c, "notes_delete", {**ws, "title": "decline me"}, state=decline_state,
        responses={"confirm_delete": {"action": "decline"}},
    )  # fmt: skip
    result = tool_result(declined)
    assert result["structuredContent"] == {"deleted": False}
    assert "_meta" not in result or "dev.notes-cluster/replay" not in result["_meta"]


@pytest.fixture
async def unreachable(
    embedded_url: str,
) -> AsyncIterator[tuple[Node, httpx.AsyncClient, str]]:
    """A working node (embedded store) and a node of the same cluster whose Redis is gone."""
    config = demo_config()
    async with (
        redis_client(embedded_url) as good,
        redis_client(f"redis://127.0.0.1:{free_port()}/0") as gone,
    ):
        store = NoteStore(good, prefix="unreach" + str(time.monotonic_ns()))
        doomed = await store.create(DEMO_TENANT, ALICE_NOTES, "doomed", "", "alice")
        async with asgi_client(Node(config, store)) as working:
            yield Node(config, NoteStore(gone, prefix=store.prefix)), working, doomed.note_id


async def test_an_unreachable_redis_answers_outcome_unknown_with_the_requests_id(
    unreachable: tuple[Node, httpx.AsyncClient, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    node, working, note_id = unreachable
    state = await round_one(working, "notes_delete", "doomed")
    ws = {"workspaceUri": ALICE_NOTES}
    async with asgi_client(node) as c:
        calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
            ("notes_create", {**ws, "title": "new"}, {}),
            ("notes_list", ws, {}),
            ("notes_update", {**ws, "noteId": note_id, "body": "b"}, {}),
            ("notes_move", {**ws, "noteId": note_id, "targetWorkspaceUri": ALICE_ARCHIVE}, {}),
            ("notes_delete", {**ws, "title": "doomed"}, {}),
            (
                "notes_delete",
                {**ws, "title": "doomed"},
                {"state": state, "responses": accept(note_id)},
            ),
            ("notes_archive", {**ws, "title": "doomed"}, {}),
            ("notes_search", {**ws, "title": "doomed"}, {}),
        ]
        for n, (tool, arguments, extra) in enumerate(calls):
            rid, response = await post_call(c, tool, arguments, request_id=n, **extra)
            store_error(rid, response, "store_unavailable")
        # Methods that need no store still answer.
        _, discover = await post_method(c, "server/discover", {})
        assert discover.status_code == 200
    one_line_each(caplog, len(calls), "store unavailable")
