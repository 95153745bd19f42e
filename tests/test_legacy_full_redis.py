"""A principal cannot fill Redis through legacy sessions; a full Redis is answered, not crashed on.

Layer: tests. Issue 13, finding 2, on a redis-server of this module's own (free loopback port,
``maxmemory 2mb``, ``noeviction``, stopped by pid). The old attack, 40 ``initialize`` with a
900 KB ``clientInfo``, grew Redis by 38.6 MB; now it stores a few hundred bytes a session and at
most ``sessions_per_principal`` of them, so Redis stays small and other principals keep working.
Then Redis is filled on purpose: every legacy request answers a JSON-RPC -32603 carrying its own
id, with one log line and no traceback.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from nodes import errors
from nodes.legacy import LEGACY_VERSION
from nodes.legacy.bridge import STORE_FULL_MESSAGE
from tests.test_legacy import BOB_TOKEN, STEP_S, legacy_headers
from tests.test_legacy_waiting import one_node, open_session

ATTACKS = 40
CLIENT_INFO_BYTES = 900_000
KEYS_BOUND = 32 * 1024
"""What the sessions' keys may take at most: 16 are kept, a few hundred bytes each."""
GROWTH_BOUND = 1024 * 1024
"""What Redis' ``used_memory`` may grow by (the keys, plus connection buffers and the scripts'
cache, which a new connection or script adds whatever it stores); the old attack grew it by
36 MB, far past this Redis' 2 MB."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def small_redis() -> Iterator[str]:
    """A redis-server of this module's own with 2 MB of memory, stopped by pid."""
    if shutil.which("redis-server") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs redis-server for the full-Redis tests")
        pytest.skip("redis-server is not installed")
    port = _free_port()
    directory = tempfile.mkdtemp(prefix="notes-legacy-small-redis-")
    args = [
        "redis-server",
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--maxmemory", "2mb",
        "--maxmemory-policy", "noeviction",
        "--dir", directory,
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(port=port, socket_timeout=1).ping():
                    break
            except redis.RedisError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        shutil.rmtree(directory, ignore_errors=True)
    assert not Path(f"/proc/{proc.pid}").exists()


@pytest.fixture
def redis_url(small_redis: str) -> str:
    """Overrides conftest's parameters: this module's small Redis."""
    return small_redis


def used_memory(url: str) -> int:
    with redis.Redis.from_url(url) as c:
        return int(c.info("memory")["used_memory"])


def session_bytes(url: str, prefix: str) -> int:
    """What the keys of the legacy sessions under ``prefix`` take (``MEMORY USAGE``)."""
    with redis.Redis.from_url(url) as c:
        keys = [*c.scan_iter(match=f"{prefix}:{{s:*"), *c.scan_iter(match=f"{prefix}:{{p:*")]
        return sum(int(c.memory_usage(k) or 0) for k in keys)


def initialize_message(client_info: dict[str, Any], request_id: int = 0) -> dict[str, Any]:
    params = {
        "protocolVersion": LEGACY_VERSION,
        "capabilities": {"elicitation": {}},
        "clientInfo": client_info,
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


NOTES_LIST = {"name": "notes_list", "arguments": {"workspaceUri": "file:///Users/bob/Notes"}}


async def test_forty_huge_initializes_leave_redis_small_and_other_principals_served(
    redis_url: str, key_prefix: str
) -> None:
    async with one_node(redis_url, key_prefix) as served, httpx.AsyncClient(timeout=STEP_S) as http:
        before = used_memory(redis_url)
        attack = initialize_message({"name": "x" * CLIENT_INFO_BYTES, "version": "1"})
        for _ in range(ATTACKS):
            response = await http.post(served.url, json=attack, headers=legacy_headers(None))
            assert response.status_code == 200, response.text[:200]
        grown = used_memory(redis_url) - before
        held = session_bytes(redis_url, key_prefix)
        print(f"\n{ATTACKS} initialize of {CLIENT_INFO_BYTES} B: Redis grew by {grown} B,")
        print(f"the sessions' keys hold {held} B")
        assert held < KEYS_BOUND
        assert grown < GROWTH_BOUND
        stats = served.adapter.statistics()
        assert (stats.sessions_opened, stats.sessions_evicted) == (ATTACKS, ATTACKS - 16)

        # Another principal opens a session and lists its notes through it.
        session = await open_session(http, served.url, BOB_TOKEN)
        call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": NOTES_LIST}
        headers = legacy_headers(session, BOB_TOKEN)
        listed = (await http.post(served.url, json=call, headers=headers)).json()
        assert [n["title"] for n in listed["result"]["structuredContent"]["notes"]] == [
            "TPS report"
        ]


async def test_a_full_redis_gets_a_json_rpc_error_with_the_request_id_and_no_traceback(
    redis_url: str, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with one_node(redis_url, key_prefix) as served, httpx.AsyncClient(timeout=STEP_S) as http:
        session = await open_session(http, served.url, BOB_TOKEN)
        filler = f"{key_prefix}:filler"
        # The filler's connection stays open: closing it would free its buffers, and Redis
        # would have room again for a small write.
        with redis.Redis.from_url(redis_url) as filling:
            try:
                fill(filling, filler)
                caplog.clear()
                init = initialize_message({"name": "c"}, 41)
                response = await http.post(served.url, json=init, headers=legacy_headers(None))
                assert_store_full(response, 41)
                fill(filling, filler)
                call = {"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": NOTES_LIST}
                headers = legacy_headers(session, BOB_TOKEN)
                response = await http.post(served.url, json=call, headers=headers)
                # Redis checks a script's memory against the state its last check left, so
                # a call that mostly reads may still get through; if not, it is told so.
                if response.status_code != 200:
                    assert_store_full(response, 42)
                else:
                    assert response.json()["id"] == 42
            finally:
                keys = list(filling.scan_iter(match=f"{filler}:*", count=1000))
                if keys:
                    filling.delete(*keys)
        assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
        assert any("Redis is full" in r.getMessage() for r in caplog.records)
        # Room again: the same requests succeed.
        response = await http.post(
            served.url, json=initialize_message({"name": "c"}, 43), headers=legacy_headers(None)
        )
        assert response.status_code == 200, response.text


def fill(c: redis.Redis, prefix: str) -> None:
    """Write values of shrinking sizes until Redis refuses even a tiny one (OOM)."""
    for size in (65_536, 4_096, 256, 16):
        for _ in range(1_000):
            try:
                c.set(f"{prefix}:{secrets.token_hex(8)}", b"f" * size)
            except redis.exceptions.OutOfMemoryError:
                break
        else:  # pragma: no cover - 64 MB into a 2 MB Redis
            pytest.fail("Redis never filled")


def assert_store_full(response: httpx.Response, request_id: int) -> None:
    assert response.status_code == 500, response.text
    body = response.json()
    assert body["id"] == request_id
    assert body["error"] == {
        "code": errors.INTERNAL_ERROR,
        "message": STORE_FULL_MESSAGE,
        "data": {"retryable": True},
    }
