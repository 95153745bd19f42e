"""Resharding and failover are faults with meanings: a refusal that says a command did not run
(TRYAGAIN, ASK/MOVED past the redirections, CLUSTERDOWN, READONLY, LOADING) is re-sent until the
request's deadline; what still refuses is a retryable error with the request's own id and the
reason; ``/readyz`` is 503 while the node's Redis is a replica.

The cluster tests start their own 3-master Redis Cluster (``cluster.redis_cluster``) and move a
tenant's slot with ``CLUSTER SETSLOT`` and ``MIGRATE`` (``cluster.reshard``) while its writes
run. The order is forced, not timed: the slot is held migrating until a write has been refused
at least once, so each test sees TRYAGAIN whatever the machine's speed. The demotion test
starts two ``redis-server`` of its own and makes the node's a replica of the other.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
import trio
from redis.crc import key_slot

import cluster.faults
from cluster.redis_cluster import RedisClusterInfo, local_redis_cluster, redis_server_available
from cluster.reshard import (
    begin_move,
    finish_move,
    masters,
    owner,
    reshard_tenant,
    tenant_slot,
)
from cluster.targets.simulate import SimulateOptions, simulate
from loadgen.run.folder import FAULTS_FILE
from loadgen.runner import RunSettings
from loadgen.tenants import tenant as load_tenant
from nodes.auth import TokenTable
from nodes.health import Readiness, with_health
from nodes.http import make_app
from nodes.serving.demo import ALICE_NOTES
from store.api import StoreRefused
from store.client_factory import open_note_client
from store.notes import NoteStore
from store.refusals import refusal_reason
from store.resp import ReplyError
from store.resp_client import RespRedis
from tests.asgi_driver import request
from tests.ci import in_ci
from tests.harness import make_nodes, meta, rpc
from tests.own_redis import OwnRedis, own_redis

TOKENS = TokenTable.from_plain({"alice-demo-token": "alice"})
WRITES = 30


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisClusterInfo]:
    if not redis_server_available():
        if in_ci():
            pytest.fail("CI needs redis-server and redis-cli to start a Redis Cluster")
        pytest.skip("redis-server is not installed")
    with local_redis_cluster(masters=3, replicas=0) as rc:
        yield rc


@pytest.fixture
async def cluster_store(redis_cluster: RedisClusterInfo) -> AsyncIterator[NoteStore]:
    async with open_note_client(redis_cluster.url, kind="resp") as client:
        yield NoteStore(client, prefix=f"reshard-{secrets.token_hex(4)}", refusal_wait_s=60.0)


def test_each_refusal_has_its_reason() -> None:
    for code, reason in [
        ("TRYAGAIN", "resharding"),
        ("ASK", "resharding"),
        ("MOVED", "resharding"),
        ("CLUSTERDOWN", "cluster_down"),
        ("READONLY", "read_only"),
        ("LOADING", "loading"),
    ]:
        assert refusal_reason(ReplyError(f"{code} something")) == reason
    assert refusal_reason(ReplyError("ERR wrong")) is None
    assert refusal_reason(ReplyError("OOM command not allowed")) is None


async def _refused_once(store: NoteStore, before: int) -> None:
    # The store's counter has no event to wait on; polling it orders the steps, times nothing.
    while store.statistics().refused == before:  # noqa: ASYNC110
        await trio.sleep(0.01)


async def test_a_tenants_slot_moved_away_and_back_during_its_writes_fails_none(
    redis_cluster: RedisClusterInfo, cluster_store: NoteStore
) -> None:
    store = cluster_store
    tenant = f"busy{secrets.token_hex(3)}"
    slot = tenant_slot(tenant)
    every = await trio.to_thread.run_sync(masters, ("127.0.0.1", redis_cluster.masters[0]))
    home = await trio.to_thread.run_sync(owner, slot, every)
    away = next(m for m in every if m.node_id != home.node_id)
    for i in range(5):  # keys on the slot before the move
        await store.create(tenant, ALICE_NOTES, f"before {i}", "b", "alice")
    made: list[str] = []
    moved: list[int] = []

    async def writes() -> None:
        for i in range(WRITES):
            out = await store.create(tenant, ALICE_NOTES, f"during {i}", "b", "alice")
            made.append(out.note_id)
            await trio.sleep(0.002)

    async def reshard() -> None:
        for source, target in ((home, away), (away, home)):
            before = store.statistics().refused
            await trio.to_thread.run_sync(begin_move, slot, source, target)
            await _refused_once(store, before)  # a write met TRYAGAIN (or ASK) and waits
            moved.append(await trio.to_thread.run_sync(finish_move, slot, source, target, every))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writes)
        nursery.start_soon(reshard)

    assert len(made) == WRITES == len(set(made))
    assert min(moved) >= 5
    assert store.statistics().refused >= 2
    assert store.statistics().unavailable == 0
    listed = await store.find(tenant, ALICE_NOTES, "during 0")
    assert [n.note_id for n in listed.notes] == [made[0]]


async def test_a_slot_held_migrating_past_the_deadline_is_a_refusal_not_an_unknown(
    redis_cluster: RedisClusterInfo, cluster_store: NoteStore
) -> None:
    store = cluster_store
    store.refusal_wait_s = 0.3
    tenant = f"held{secrets.token_hex(3)}"
    slot = tenant_slot(tenant)
    every = await trio.to_thread.run_sync(masters, ("127.0.0.1", redis_cluster.masters[0]))
    home = await trio.to_thread.run_sync(owner, slot, every)
    away = next(m for m in every if m.node_id != home.node_id)
    await store.create(tenant, ALICE_NOTES, "there", "b", "alice")
    await trio.to_thread.run_sync(begin_move, slot, home, away)
    try:
        with pytest.raises(StoreRefused) as refused:
            await store.create(tenant, ALICE_NOTES, "refused", "b", "alice")
        assert refused.value.reason == "resharding"
        assert not refused.value.maybe_ran
    finally:
        await trio.to_thread.run_sync(finish_move, slot, home, away, every)
    assert (await store.find(tenant, ALICE_NOTES, "refused")).notes == ()


# -- a demoted Redis ------------------------------------------------------------------------------


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[OwnRedis, OwnRedis]]:
    with own_redis(tmp_path) as primary, own_redis(tmp_path) as nodes_redis:
        yield primary, nodes_redis


async def test_a_demoted_redis_is_a_retryable_error_with_the_request_id_and_readyz_503(
    pair: tuple[OwnRedis, OwnRedis],
) -> None:
    primary, nodes_redis = pair
    async with RespRedis.from_url(nodes_redis.url) as client:
        store = NoteStore(client, prefix=f"demoted-{secrets.token_hex(4)}", refusal_wait_s=0.2)
        (node,) = make_nodes(store, 1)
        ready = with_health(make_app(node, TOKENS), Readiness(store.check_ready, cache_s=0.0))
        assert (await request(ready, "GET", "/readyz")).status == 200

        with redis.Redis(port=nodes_redis.port) as r:  # a failover left the node here
            r.execute_command("REPLICAOF", "127.0.0.1", str(primary.port))
        try:
            params = {
                "name": "notes_create",
                "arguments": {"workspaceUri": ALICE_NOTES, "title": "t", "body": "b"},
                "_meta": meta(),
            }
            reply = await rpc(node, "tools/call", params)
            assert reply.body is not None
            assert reply.body["id"] is not None
            error = reply.body["error"]
            assert error["data"] == {
                "retryable": True,
                "reason": "store_read_only",
                "outcomeUnknown": False,
            }
            assert "replica" in error["message"]
            answer = await request(ready, "GET", "/readyz")
            assert answer.status == 503
            assert json.loads(answer.body) == {"status": "unavailable"}
        finally:
            with redis.Redis(port=nodes_redis.port) as r:
                r.execute_command("REPLICAOF", "NO", "ONE")
        assert (await request(ready, "GET", "/readyz")).status == 200


# -- the harness: ``--faults reshard`` ------------------------------------------------------------

RESHARD_SETTINGS = RunSettings(flows=80, concurrency=8, seed=3, tenants=1, duration_s=20)
"""One tenant: every write of the run lives on the slot the nemesis moves."""


async def test_a_reshard_run_is_valid_and_its_writes_were_refused_and_resent(
    redis_cluster: RedisClusterInfo, tmp_path: Path
) -> None:
    options = SimulateOptions(
        redis_url=redis_cluster.url,
        run_dir=tmp_path,
        faults=frozenset({"reshard"}),
        settings=RESHARD_SETTINGS,
    )
    sim = await simulate(options)
    results = json.loads((tmp_path / "results.json").read_text())
    assert sim.result.status == "valid", results["invariants"]
    rows = json.loads((tmp_path / FAULTS_FILE).read_text())
    moves = [r for r in rows if r["kind"] == "reshard"]
    print("\n" + "\n".join(r["detail"] for r in moves))
    assert moves
    assert all("moved" in r["detail"] and "and back" in r["detail"] for r in moves)


@pytest.mark.planted(control="test_a_reshard_run_is_valid_and_its_writes_were_refused_and_resent")
async def test_a_plant_that_answers_tryagain_as_success_is_caught(
    redis_cluster: RedisClusterInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    faked: list[str] = []
    # The order is forced: the tenant's creates wait until its slot is migrating, and each
    # move holds the slot migrating until a create has been refused. A timed window can pass
    # while every flow re-sends a delete or a move and none sends a create.
    assert RESHARD_SETTINGS.tenants == 1
    tenant = load_tenant(0)  # the one load tenant, whose flows run (not a small-quota tenant)
    slot = tenant_slot(tenant)
    migrating = trio.Event()
    refused_create = trio.Event()
    send = NoteStore._send

    async def tryagain_is_success(
        self: NoteStore, name: str, keys: list[str], args: list[str | int]
    ) -> list[Any]:
        if name == "create" and key_slot(keys[0].encode()) == slot:
            await migrating.wait()
        try:
            return await send(self, name, keys, args)
        except ReplyError as exc:
            if exc.code != "TRYAGAIN" or name != "create":
                raise
            # The plant: a refused create answered as made (what create.lua would say).
            faked.append(str(args[0]))
            refused_create.set()
            now = int(time.time() * 1000)
            return ["created", args[0], args[1], args[3], 1, now, now, now, "0"]

    async def until_a_create_is_refused() -> None:
        migrating.set()
        await refused_create.wait()

    monkeypatch.setattr(NoteStore, "_send", tryagain_is_success)
    held = partial(reshard_tenant, hold_until=until_a_create_is_refused)
    monkeypatch.setattr(cluster.faults, "reshard_tenant", held)
    options = SimulateOptions(
        redis_url=redis_cluster.url,
        run_dir=tmp_path,
        faults=frozenset({"reshard"}),
        settings=replace(RESHARD_SETTINGS, flows=160),
    )
    sim = await simulate(options)
    assert faked, "the run met no TRYAGAIN on a create: nothing was planted"
    results = json.loads((tmp_path / "results.json").read_text())
    assert sim.result.status == "invalid", results["invariants"]
    failing = [v for v in results["invariants"] if v.get("status") == "invalid"]
    print(f"\n{len(faked)} refused creates answered as made; invalid: {failing}"[:2000])
    evidence = json.dumps(failing)
    assert any(note_id in evidence for note_id in faked)


# -- the re-send rule, on virtual time -----------------------------------------------------------


class Refusing:
    """A command refused with ``code`` ``times`` times, then answered; counts its sends."""

    def __init__(self, code: str, times: int) -> None:
        self.code = code
        self.times = times
        self.sends: list[float] = []

    async def __call__(self) -> str:
        self.sends.append(trio.current_time())
        if len(self.sends) <= self.times:
            raise ReplyError(f"{self.code} try again later")
        return "ran"


@pytest.mark.parametrize("code", ["TRYAGAIN", "CLUSTERDOWN", "LOADING", "READONLY", "MASTERDOWN"])
async def test_a_refused_command_is_resent_with_a_growing_pause_until_it_runs(
    code: str, autojump_clock: trio.testing.MockClock
) -> None:
    store = NoteStore(RespRedis.from_url("redis://127.0.0.1:1"), prefix="virtual")
    command = Refusing(code, 6)
    assert await store._resending("probe", command) == "ran"
    pauses = [b - a for a, b in zip(command.sends, command.sends[1:], strict=False)]
    assert pauses == sorted(pauses)
    assert pauses[0] == pytest.approx(0.005)
    assert store.statistics().refused == 6


async def test_a_refusal_outlasting_the_requests_deadline_ends_before_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = NoteStore(RespRedis.from_url("redis://127.0.0.1:1"), prefix="virtual")
    command = Refusing("TRYAGAIN", 10_000)
    start = trio.current_time()
    with trio.move_on_after(1.0):  # the request's own deadline, shorter than refusal_wait_s
        with pytest.raises(StoreRefused) as refused:
            await store._resending("create", command)
        ended = trio.current_time()
    assert refused.value.reason == "resharding"
    assert ended - start < 1.0  # answered before the request's deadline, not cancelled by it
    assert store.statistics().unavailable == 1
