"""``/healthz`` and ``/readyz``: no credentials, no body, cheap; readiness follows the store.

The readiness cache runs on trio's MockClock. The real-Redis test starts a ``redis-server`` of
its own on a free loopback port, serves a node over it, then kills the server by pid.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from cluster.serve import serve_http_node
from nodes.auth import TokenTable
from nodes.health import READY_CACHE_S, Readiness, with_health
from nodes.http import make_app
from nodes.serving.settings import demo_settings
from store.notes import NoteStore
from tests.asgi_driver import request
from tests.harness import make_nodes
from tests.own_redis import OwnRedis, own_redis, stop

TOKENS = TokenTable.from_plain({"alice-demo-token": "alice"})


class CountingProbe:
    """A readiness probe that counts its calls and fails on demand."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail: Exception | None = None
        self.hang = False

    async def __call__(self) -> None:
        self.calls += 1
        if self.hang:
            await trio.sleep_forever()
        if self.fail is not None:
            raise self.fail


async def test_healthz_answers_200_without_credentials_and_never_probes_the_store(
    store: NoteStore,
) -> None:
    probe = CountingProbe()
    probe.fail = RuntimeError("redis is down")
    (node,) = make_nodes(store, 1)
    app = with_health(make_app(node, TOKENS), Readiness(probe))
    answer = await request(app, "GET", "/healthz")
    assert answer.status == 200
    assert json.loads(answer.body) == {"status": "ok"}
    assert answer.headers["cache-control"] == "no-store"
    assert probe.calls == 0
    head = await request(app, "HEAD", "/healthz")
    assert (head.status, head.body) == (200, b"")
    post = await request(app, "POST", "/healthz", {"content-length": "5"}, [b"hello"])
    assert post.status == 405
    assert post.receive_calls == 0
    # Everything else still reaches the node (and needs a token there).
    assert (await request(app, "POST", "/mcp")).status == 401


async def test_readyz_is_200_when_the_probe_passes_and_503_when_it_fails(
    store: NoteStore,
) -> None:
    probe = CountingProbe()
    readiness = Readiness(probe, cache_s=0)
    (node,) = make_nodes(store, 1)
    app = with_health(make_app(node, TOKENS), readiness)
    assert (await request(app, "GET", "/readyz")).status == 200
    probe.fail = ConnectionError("refused")
    answer = await request(app, "GET", "/readyz")
    assert answer.status == 503
    assert json.loads(answer.body) == {"status": "unavailable"}
    assert b"refused" not in answer.body, "the reason goes to the log, not to the client"
    readiness.draining = True
    probe.fail = None
    assert (await request(app, "GET", "/readyz")).status == 503


async def test_concurrent_pollers_share_one_probe_per_cache_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = CountingProbe()
    readiness = Readiness(probe)
    answers: list[bool] = []

    async def poll() -> None:
        answers.append(await readiness.ready())

    async with trio.open_nursery() as nursery:
        for _ in range(50):
            nursery.start_soon(poll)
    assert answers == [True] * 50
    assert probe.calls == 1
    await trio.sleep(READY_CACHE_S / 2)
    assert await readiness.ready()
    assert probe.calls == 1
    await trio.sleep(READY_CACHE_S)
    probe.fail = ConnectionError("gone")
    assert not await readiness.ready()
    assert probe.calls == 2


async def test_a_probe_that_hangs_counts_as_not_ready(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = CountingProbe()
    probe.hang = True
    assert not await Readiness(probe, timeout_s=0.5).ready()


async def test_the_store_check_loads_missing_scripts(store: NoteStore) -> None:
    await store.check_ready()
    await store.check_ready()  # idempotent; and now every script is in the script cache
    shas = [s.sha for s in store._scripts.values()]
    assert all(await store.client.script_exists(shas))


@pytest.fixture
def private(tmp_path: Path) -> Iterator[OwnRedis]:
    with own_redis(tmp_path) as server:
        yield server


async def test_readyz_turns_503_when_the_nodes_redis_dies(
    private: OwnRedis, nursery: trio.Nursery
) -> None:
    endpoint = await nursery.start(
        partial(serve_http_node, demo_settings(), private.url, embedded=False, host="127.0.0.1",
                port=0, node_id="ready-0")
    )  # fmt: skip
    base = endpoint.removesuffix("/mcp")
    async with httpx.AsyncClient(timeout=10) as client:
        assert (await client.get(f"{base}/readyz")).status_code == 200
        assert (await client.get(f"{base}/healthz")).status_code == 200
        stop(private.proc)
        await trio.sleep(READY_CACHE_S)  # the cached "ready" expires
        down = await client.get(f"{base}/readyz")
        assert down.status_code == 503, down.text
        assert (await client.get(f"{base}/healthz")).status_code == 200, "still alive"
