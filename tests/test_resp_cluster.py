"""The store's own client on a real Redis Cluster (store.resp_cluster): slots, MOVED, ASK, the
note store on it, on trio and on uvloop. The cluster is local (cluster.redis_cluster)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import redis
from redis.cluster import key_slot as redis_py_key_slot

from cluster.redis_cluster import RedisClusterInfo, local_redis_cluster, redis_server_available
from store.api import Confirmation
from store.client_factory import open_note_client
from store.notes import NoteStore
from store.redis_errors import UnknownOutcome
from store.resp_cluster import RespCluster, key_slot
from tests.test_resp_client import BACKENDS, COUNT_SCRIPT, STALL_TIMEOUT_S, run

WS = "file:///load/t0/inbox"


@pytest.fixture(scope="module")
def rc() -> Iterator[RedisClusterInfo]:
    if not redis_server_available():
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs redis-server and redis-cli to start a Redis Cluster")
        pytest.skip("redis-server is not installed")
    with local_redis_cluster(masters=3, replicas=0) as info:
        yield info
    for pid in info.pids.values():
        assert not Path(f"/proc/{pid}").exists(), f"redis-server {pid} survived"


def test_key_slots_agree_with_redis_py_hash_tags_included() -> None:
    keys = ["a", "nc:{t:acme}:note:n1", "{}", "{", "x{}y", "{a}{b}", "é{ü}", "nc:{t:}:x", "}{"]
    keys += [secrets.token_hex(8) for _ in range(200)]
    for key in keys:
        assert key_slot(key) == redis_py_key_slot(key.encode()), key


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_note_store_runs_on_the_cluster_client_one_tenant_per_slot(
    backend: str, rc: RedisClusterInfo
) -> None:
    prefix = "ncc" + secrets.token_hex(4)
    tenants = [f"tenant{i}" for i in range(9)]

    async def main() -> None:
        async with open_note_client(rc.url, kind="resp") as client:
            assert isinstance(client, RespCluster)
            assert len(client.masters()) == 3
            store = NoteStore(client, prefix=prefix)
            await store.check_ready()
            for tenant in tenants:
                note = await store.create(tenant, WS, "TPS", "body", "alice")
                snap = await store.find(tenant, WS, "TPS")
                c = Confirmation(
                    tenant=tenant,
                    nonce=secrets.token_urlsafe(16),
                    action="accept",
                    answer_digest="d",
                    exp_ms=snap.redis_now_ms + 10_000,
                    note_id=note.note_id,
                    expected_version=1,
                    title="TPS",
                    workspace=WS,
                    principal="alice",
                    tool="notes_delete",
                )
                assert (await store.confirm(c)).status == "executed"
                assert (await store.confirm(c)).status == "replay"
                assert await store.get(tenant, note.note_id) is None

    run(backend, main)
    slots = {key_slot(f"{prefix}:{{t:{t}}}:journal") for t in tenants}
    owners = {_owner(rc, slot) for slot in slots}
    assert len(owners) > 1  # the tenants really were spread over masters


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_wrong_slot_map_is_corrected_by_moved_and_each_call_runs_once(
    backend: str, rc: RedisClusterInfo
) -> None:
    keys = [f"resp-moved:{{k{i}}}" for i in range(30)]

    async def main() -> None:
        async with RespCluster.from_url(rc.url) as client:
            wrong = client._slots[0]
            client._slots = [wrong] * len(client._slots)  # every slot "on" one master
            script = client.register_script(COUNT_SCRIPT)
            for key in keys:
                assert await script(keys=[key], args=[key]) == [key, "1"]
            assert client._slots[key_slot(keys[0])] == ("127.0.0.1", _owner(rc, key_slot(keys[0])))

    run(backend, main)
    for key in keys:
        owner = redis.Redis(port=_owner(rc, key_slot(key)))
        assert owner.get(key) == b"1"
        owner.delete(key)


def test_a_slot_being_migrated_is_followed_by_ask_to_the_importing_master(
    rc: RedisClusterInfo,
) -> None:
    key = "resp-ask:{migrating}"
    slot = key_slot(key)
    source_port = _owner(rc, slot)
    target_port = next(p for p in rc.masters if p != source_port)
    source, target = redis.Redis(port=source_port), redis.Redis(port=target_port)
    source_id, target_id = (
        source.execute_command("CLUSTER MYID"),
        target.execute_command("CLUSTER MYID"),
    )
    target.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
    source.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
    try:
        for backend in BACKENDS:

            async def main() -> None:
                async with RespCluster.from_url(rc.url) as client:
                    script = client.register_script(COUNT_SCRIPT)
                    reply = await script(keys=[key], args=["ask"])
                    assert reply[0] == "ask"

            run(backend, main)
        # Both runs went to the importing master (the source answers ASK for the absent key).
        asking = redis.Redis(port=target_port, single_connection_client=True)
        asking.execute_command("ASKING")
        assert asking.get(key) == b"2"
        asking.execute_command("ASKING")
        asking.delete(key)
    finally:
        source.execute_command("CLUSTER SETSLOT", slot, "STABLE")
        target.execute_command("CLUSTER SETSLOT", slot, "STABLE")


def _owner(rc: RedisClusterInfo, slot: int) -> int:
    """The port of the master serving ``slot`` (asked of the cluster itself)."""
    for start, end, master, *_ in redis.Redis(port=rc.masters[0]).execute_command("CLUSTER SLOTS"):
        if int(start) <= slot <= int(end):
            return int(master[1])
    raise AssertionError(f"slot {slot} has no master")


# -- failure paths on the cluster ----------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stalled_master_is_an_unknown_outcome_and_the_next_call_gets_its_own_reply(
    backend: str, rc: RedisClusterInfo
) -> None:
    """``CLIENT PAUSE ... WRITE`` on the key's master: the script's call times out as an unknown
    outcome (never re-sent by the client); once the master runs again, the next call gets its
    own reply, whose count agrees with what the master holds."""
    key = "resp-stall:{" + secrets.token_hex(4) + "}"
    owner = redis.Redis(port=_owner(rc, key_slot(key)))

    async def main() -> None:
        async with RespCluster.from_url(rc.url, timeout_s=STALL_TIMEOUT_S) as client:
            script = client.register_script(COUNT_SCRIPT)
            assert await script(keys=[key], args=["warm"]) == ["warm", "1"]
            owner.execute_command("CLIENT", "PAUSE", "30000", "WRITE")
            try:
                with pytest.raises(UnknownOutcome):
                    await script(keys=[key], args=["stalled"])
            finally:
                owner.execute_command("CLIENT", "UNPAUSE")
            reply = await script(keys=[key], args=["after"])
            assert reply[0] == "after"
            assert reply[1] == (owner.get(key) or b"").decode()
            assert int(reply[1]) in (2, 3)  # the stalled run happened at most once

    run(backend, main)
    owner.delete(key)


@pytest.mark.parametrize("backend", BACKENDS)
def test_noscript_on_every_master_sends_each_script_once_in_full(
    backend: str, rc: RedisClusterInfo
) -> None:
    keys = [f"resp-noscript:{{{secrets.token_hex(3)}{i}}}" for i in range(12)]

    async def main() -> None:
        async with RespCluster.from_url(rc.url) as client:
            script = client.register_script(COUNT_SCRIPT)
            for port in rc.masters:
                redis.Redis(port=port).script_flush()
            for key in keys:
                assert await script(keys=[key], args=[key]) == [key, "1"]

    run(backend, main)
    assert len({_owner(rc, key_slot(k)) for k in keys}) > 1  # more than one master answered
    for key in keys:
        owner = redis.Redis(port=_owner(rc, key_slot(key)))
        assert owner.get(key) == b"1"
        owner.delete(key)


@pytest.mark.parametrize("backend", BACKENDS)
def test_connections_the_server_killed_are_replaced_on_the_next_call(
    backend: str, rc: RedisClusterInfo
) -> None:
    """``CLIENT KILL`` of the client's (named) connections between two calls: the client sees
    them close, and the next call opens a new one and runs once."""
    name = "nc-kill-" + secrets.token_hex(4)
    key = "resp-kill:{" + secrets.token_hex(4) + "}"
    port = _owner(rc, key_slot(key))
    owner = redis.Redis(port=port, decode_responses=True)

    async def main() -> None:
        async with RespCluster.from_url(rc.url, client_name=name) as client:
            script = client.register_script(COUNT_SCRIPT)
            assert await script(keys=[key], args=["one"]) == ["one", "1"]
            mine = [c["id"] for c in owner.client_list() if c.get("name") == name]
            assert mine
            for client_id in mine:
                owner.execute_command("CLIENT", "KILL", "ID", client_id)
            node = client.node(("127.0.0.1", port))
            for _ in range(1000):  # until the client has read the end of each stream
                if node.statistics()["connections"] == 0:
                    break
                await anyio.sleep(0.01)
            assert node.statistics()["connections"] == 0
            assert await script(keys=[key], args=["two"]) == ["two", "2"]

    run(backend, main)
    assert owner.get(key) == "2"
    owner.delete(key)
