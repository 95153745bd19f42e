"""Safe durability by default: a node over a master with a replica waits for it (``WAIT 1``).

A master and a plain replica (``--replicaof``) of the test's own run on free loopback ports.
In the default mode ("auto") a node finds the replica at start and waits for it on every write;
with the replica gone a write answers -32603 "outcome unknown", never success. ``wait_replicas``
0 turns waiting off.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import redis
import trio

from cluster.local import StoreOptions, serve_inprocess_node
from nodes.protocol import Node
from nodes.serving.durability import AUTO, WaitReplicas, parse_wait_replicas, resolve_wait_replicas
from store.client_factory import open_redis
from tests.harness import call_tool, demo_config
from tests.own_redis import OwnRedis, own_redis, stop

NOTES = "file:///Users/alice/Documents/Notes"


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[tuple[OwnRedis, OwnRedis]]:
    with (
        own_redis(tmp_path, "--repl-diskless-sync-delay", "0") as master,
        own_redis(tmp_path, "--replicaof", "127.0.0.1", str(master.port)) as replica,
    ):
        wait_until(lambda: online_replicas(master) == 1)
        yield master, replica


def replicas_of(server: OwnRedis) -> int:
    info = redis.Redis(port=server.port, socket_timeout=2).info("replication")
    return int(info["connected_slaves"])


def online_replicas(server: OwnRedis) -> int:
    """Replicas past their initial sync (``connected_slaves`` counts them from the start)."""
    info = redis.Redis(port=server.port, socket_timeout=2).info("replication")
    slaves = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
    return sum(1 for v in slaves if v.get("state") == "online")


def wait_until(ready: object, timeout_s: float = 10) -> None:
    assert callable(ready)
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


async def start_node(nursery: trio.Nursery, url: str, wait: WaitReplicas, prefix: str) -> Node:
    # Generous: on a loaded machine a starved replica may take a while to acknowledge.
    options = StoreOptions(wait_replicas=wait, wait_timeout_ms=2_000)
    node: Node = await nursery.start(
        partial(serve_inprocess_node, demo_config(), url, embedded=False, prefix=prefix,
                options=options)
    )  # fmt: skip
    return node


async def create(node: Node, title: str) -> dict[str, object]:
    reply = await call_tool(
        node, "notes_create", {"workspaceUri": NOTES, "title": title, "body": "b"}
    )
    assert reply.body is not None
    return reply.body


def test_wait_replicas_parses_auto_and_numbers() -> None:
    assert parse_wait_replicas("auto") == AUTO
    assert parse_wait_replicas(" AUTO ") == AUTO
    assert parse_wait_replicas("0") == 0
    assert parse_wait_replicas("2") == 2
    for bad in ("-1", "17", "some"):
        with pytest.raises(ValueError, match=r"wait_replicas|invalid literal"):
            parse_wait_replicas(bad)


async def test_auto_waits_for_one_replica_where_the_master_has_one_and_says_so(
    replicated: tuple[OwnRedis, OwnRedis], caplog: pytest.LogCaptureFixture
) -> None:
    master, _ = replicated
    caplog.set_level(logging.INFO, logger="nodes.serving.durability")
    async with open_redis(master.url) as client:
        assert await resolve_wait_replicas(client, AUTO) == 1
        assert await resolve_wait_replicas(client, 0) == 0
    said = [r.getMessage() for r in caplog.records if r.name == "nodes.serving.durability"]
    assert said[0].startswith("durability: writes wait for 1 replica (auto")
    assert said[1].startswith("durability: writes do not wait for replicas (configured")


async def test_auto_without_replicas_does_not_wait(tmp_path: Path) -> None:
    with own_redis(tmp_path) as alone:
        async with open_redis(alone.url) as client:
            assert await resolve_wait_replicas(client, AUTO) == 0


async def test_with_the_replica_gone_auto_answers_outcome_unknown_and_explicit_0_succeeds(
    replicated: tuple[OwnRedis, OwnRedis], nursery: trio.Nursery
) -> None:
    master, replica = replicated
    waiting = await start_node(nursery, master.url, AUTO, "ncdur1")
    plain = await start_node(nursery, master.url, 0, "ncdur2")
    assert waiting.store.wait_replicas == 1  # type: ignore[attr-defined]
    assert plain.store.wait_replicas == 0  # type: ignore[attr-defined]
    assert result_ok(await create(waiting, "while replicated"))

    stop(replica.proc)
    wait_until(lambda: replicas_of(master) == 0)
    unknown = await create(waiting, "replica gone")
    assert "result" not in unknown
    assert unknown["error"]["code"] == -32603  # type: ignore[index]
    assert result_ok(await create(plain, "replica gone, not waiting"))


def result_ok(body: dict[str, object]) -> bool:
    res = body.get("result")
    return isinstance(res, dict) and res.get("isError") is False
