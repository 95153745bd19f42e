"""The store on a real 3-master Redis Cluster (a replica each), started and stopped by this module.

Every script touches one slot (the tenant hash tag), detection needs no flag, the store's behaviour
holds, a short simulation is valid, and tenants spread over the masters. Under CI (``CI`` set) a
cluster that cannot start fails the run; elsewhere the module is skipped without ``redis-server``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import coredis
import pytest
import redis
import redis.cluster
import trio
from redis.crc import key_slot

from cluster.redis_cluster import RedisClusterInfo, local_redis_cluster, redis_server_available
from cluster.targets.simulate import SimulateOptions, simulate
from loadgen.runner import RunSettings
from store.api import Confirmation
from store.client_factory import UnsafeStore, is_cluster, open_note_client, open_redis, sync_client
from store.journal import (
    keys_per_master,
    list_replay_entries,
    read_final_notes,
    read_journal,
    scan_keys,
)
from store.notes import NoteStore, script_source
from store.resp import ReplyError
from store.resp_cluster import RespCluster
from tests.ci import in_ci
from tests.conftest import beside, raw

# The node-level behaviour tests of the delete flow, run again here on the cluster: pytest
# resolves their ``store`` fixture to this module's cluster store.
from tests.test_delete_flow import (  # noqa: F401
    test_a_cancel_deletes_nothing_and_the_same_state_can_later_be_accepted,
    test_a_declined_confirmation_deletes_nothing_and_cannot_be_reused,
    test_a_note_edited_between_the_rounds_is_asked_again_and_not_deleted,
    test_an_accept_and_a_decline_racing_under_one_state_have_exactly_one_winner,
    test_expiry_is_decided_by_the_redis_clock_whatever_the_node_clocks_say,
    test_one_confirmation_sent_to_several_nodes_at_once_executes_exactly_once,
    test_replay_entries_answer_late_retries_then_vanish_after_expiry_plus_grace,
    test_round_one_on_one_node_and_round_two_on_another_deletes_the_chosen_note,
    test_two_states_racing_to_delete_the_same_note_delete_it_once,
)

# Every write script is safe to run twice on the cluster too (its operation record shares the
# tenant's slot), and the idempotency key works there: the same tests, on this module's store.
from tests.test_idempotency_key import (  # noqa: F401
    test_a_create_retried_with_its_key_on_another_node_is_the_recorded_result,
    test_a_key_reused_with_other_arguments_or_another_tool_is_refused_and_writes_nothing,
    test_a_keyed_move_retry_racing_its_first_request_reports_the_move,
)
from tests.test_write_ops import (  # noqa: F401
    test_a_confirmation_run_twice_by_one_call_is_executed_twice_and_deletes_once,
    test_create_with_one_operation_twice_is_one_note_and_the_second_is_a_replay,
    test_move_with_one_operation_twice_reports_the_move_once,
    test_one_operation_id_with_another_digest_is_refused_and_writes_nothing,
    test_setup_completion_run_twice_by_one_call_answers_completed_both_times,
    test_update_with_one_operation_twice_is_one_version_step,
)

WS = "file:///load/t0/inbox"
ARCHIVE = "file:///load/t0/archive"
TENANTS = [f"tenant{i}" for i in range(12)]


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisClusterInfo]:
    """3 masters with a replica each, on free loopback ports; every server gone afterwards."""
    if not redis_server_available():
        if in_ci():
            pytest.fail("CI needs redis-server and redis-cli to start a Redis Cluster")
        pytest.skip("redis-server is not installed")
    with local_redis_cluster(masters=3, replicas=1) as rc:
        yield rc
    for pid in rc.pids.values():  # stopped and reaped
        assert not Path(f"/proc/{pid}").exists(), f"redis-server {pid} survived"
    assert not rc.directory.exists()


@pytest.fixture
def redis_url(redis_cluster: RedisClusterInfo) -> str:
    """Overrides conftest's: the store under test is the cluster (conftest's ``key_prefix``
    cleans up through the cluster-aware sync client)."""
    return redis_cluster.url


@pytest.fixture
async def store(redis_url: str, key_prefix: str, note_client_kind: str) -> AsyncIterator[NoteStore]:
    """Overrides conftest's: opened as the nodes open it, so the cluster is detected, on each
    Redis client (the store's own ``RespCluster``, then coredis' cluster client)."""
    async with (
        open_redis(redis_url) as client,
        open_note_client(redis_url, kind=note_client_kind, shared=client) as notes_client,
    ):
        assert isinstance(client, coredis.RedisCluster)
        expected = RespCluster if note_client_kind == "resp" else coredis.RedisCluster
        assert isinstance(notes_client, expected)
        notes = NoteStore(notes_client, prefix=key_prefix, replay_grace_ms=1_000)
        with beside(notes, client):
            yield notes


def confirmation(note_id: str, exp_ms: int, **changes: object) -> Confirmation:
    fields: dict[str, object] = {
        "tenant": "acme",
        "nonce": secrets.token_urlsafe(16),
        "action": "accept",
        "answer_digest": "d1",
        "exp_ms": exp_ms,
        "note_id": note_id,
        "expected_version": 1,
        "title": "TPS",
        "workspace": WS,
        "principal": "alice",
        "tool": "notes_delete",
    }
    fields.update(changes)
    return Confirmation(**fields)  # type: ignore[arg-type]


# --- detection -------------------------------------------------------------------------------


async def test_a_cluster_node_url_is_detected_and_opened_as_a_cluster_with_no_flag(
    redis_cluster: RedisClusterInfo, embedded_url: str
) -> None:
    assert len(redis_cluster.masters) == 3
    assert sorted(redis_cluster.replicas.values()) == sorted(redis_cluster.masters)
    for port in redis_cluster.ports:  # any node, master or replica, bootstraps the cluster
        assert await is_cluster(redis_cluster.node_url(port))
    assert not await is_cluster(embedded_url)
    async with open_redis(redis_cluster.url + "/0") as client:
        assert isinstance(client, coredis.RedisCluster)
    sync = sync_client(redis_cluster.url)
    assert isinstance(sync, redis.cluster.RedisCluster)
    sync.close()
    plain = sync_client(embedded_url)
    assert not isinstance(plain, redis.cluster.RedisCluster)
    plain.close()
    with pytest.raises(ValueError, match="database 0"):
        sync_client(redis_cluster.url + "/9")


async def test_a_cluster_with_one_evicting_node_is_refused_even_if_it_is_a_replica(
    redis_cluster: RedisClusterInfo,
) -> None:
    for port in (redis_cluster.masters[-1], min(redis_cluster.replicas)):
        with redis.Redis(port=port, host="127.0.0.1") as node:
            node.config_set("maxmemory-policy", "volatile-lru")
            try:
                with pytest.raises(UnsafeStore, match=f"volatile-lru.*{port}"):
                    async with open_redis(redis_cluster.url):
                        pass
            finally:
                node.config_set("maxmemory-policy", "noeviction")


# --- one slot per script ---------------------------------------------------------------------


def strict_slot_store(store: NoteStore) -> NoteStore:
    """``store`` with every script flagged by a ``#!lua`` shebang. Redis 7 lets a shebang-less
    script (legacy EVAL) reach an undeclared key of another slot on the same node without
    complaint; with a shebang it refuses any key outside the slot of the first key it touched, so
    a clean run is the server's own proof that each script stays in one slot."""
    strict = NoteStore(store.client, prefix=store.prefix, replay_grace_ms=store.replay_grace_ms)
    strict._scripts = {
        name: store.client.register_script("#!lua\n" + script_source(name))
        for name in store._scripts
    }
    return strict


async def exercise(store: NoteStore, tenant: str) -> None:
    """Every script and read of NoteStore once or more for ``tenant``."""
    now = await store.redis_time_ms()
    a = await store.create(tenant, WS, "TPS", "body", "alice")
    b = await store.create(tenant, WS, "Minutes", "body", "alice")
    c = await store.create(tenant, WS, "Todo", "body", "alice")
    assert [n.note_id for n in (await store.find(tenant, WS, "TPS")).notes] == [a.note_id]
    assert len((await store.list(tenant, WS)).notes) == 3
    updated = await store.update(tenant, b, "Minutes v2", "new body", "alice")
    assert updated.status == "updated"
    assert (await store.move(tenant, c.note_id, WS, ARCHIVE, "alice")).status == "moved"
    exp = now + 60_000
    delete = confirmation(a.note_id, exp, tenant=tenant)
    assert (await store.confirm(delete)).status == "executed"
    assert (await store.confirm(delete)).status == "replay"
    assert (await store.confirm(confirmation(a.note_id, exp, tenant=tenant))).status == "gone"
    assert updated.note is not None
    move = confirmation(
        b.note_id,
        exp,
        tenant=tenant,
        title="Minutes v2",
        expected_version=2,
        op="move",
        target_workspace=ARCHIVE,
    )
    assert (await store.confirm(move)).status == "executed"
    for action, status in (("decline", "declined"), ("cancel", "cancelled")):
        answer = confirmation(c.note_id, exp, tenant=tenant, action=action, workspace=ARCHIVE)
        assert (await store.confirm(answer)).status == status
    assert await store.get(tenant, c.note_id) is not None


async def test_every_script_stays_in_its_tenants_slot_and_tenants_spread_over_masters(
    store: NoteStore, redis_cluster: RedisClusterInfo
) -> None:
    strict = strict_slot_store(store)
    for tenant in TENANTS:
        await exercise(strict, tenant)

    # The journal readers (SCAN on the owning master, non-transactional pipelines) work too.
    sync = sync_client(redis_cluster.url, decode_responses=True)
    assert isinstance(sync, redis.cluster.RedisCluster)
    try:
        journal = read_journal(sync, store.prefix, TENANTS)
        final = read_final_notes(sync, store.prefix, TENANTS)
        replay = list_replay_entries(sync, store.prefix, TENANTS)
        spread = keys_per_master(sync, store.prefix)
    finally:
        sync.close()
    assert len(journal) == 12 * 8
    assert len(final) == 12 * 2
    assert len(replay) == 12 * 3  # executed delete, executed move, decline
    print(f"\nkeys per master after {len(TENANTS)} tenants: {spread}")
    # Per tenant: 2 notes, 1 workspace set, 2 title entries, 1 journal, 3 replay entries,
    # 5 operation records (3 creates, an update, a move: each kept a minute for re-sends), the
    # usage hash and the archive's workspace usage (the emptied workspace's went with its count),
    # and the lookalike index entry of each note's title (store.skeletons).
    assert sum(spread.values()) == 12 * 18
    assert len(spread) == 3
    assert sum(1 for n in spread.values() if n > 0) > 1


async def test_a_script_reaching_another_tenants_slot_is_refused_by_the_cluster(
    store: NoteStore, redis_cluster: RedisClusterInfo
) -> None:
    """The negative control: the check above would see a script that left its slot."""
    sync = sync_client(redis_cluster.url)
    assert isinstance(sync, redis.cluster.RedisCluster)
    home = store.keys("acme").workspace(WS)
    home_node = sync.get_node_from_key(home)  # type: ignore[no-untyped-call]
    same_node = other_node = ""
    for tenant in (f"x{i}" for i in range(500)):
        key = store.keys(tenant).workspace(WS)
        node = sync.get_node_from_key(key)  # type: ignore[no-untyped-call]
        if node.name == home_node.name and key_slot(key.encode()) != key_slot(home.encode()):
            same_node = same_node or tenant
        elif node.name != home_node.name:
            other_node = other_node or tenant
    sync.close()
    strict = strict_slot_store(store)
    for tenant, message in (
        (same_node, "do not hash to the same slot"),
        (other_node, "non local key"),
    ):
        note_prefix = f"{store.keys(tenant).base}:note:"
        await raw(store).sadd(home, ["n0123456789abcdef"])
        with pytest.raises((coredis.exceptions.ResponseError, ReplyError), match=message):
            await strict._scripts["read_notes"](keys=[home], args=[note_prefix, 10])
    # Without the shebang Redis 7.0 does not notice a same-node, other-slot key.
    lax = f"{store.keys(same_node).base}:note:"
    # The clock and an empty next position: the other slot's note was read as absent.
    assert len(await store._scripts["read_notes"](keys=[home], args=[lax, 10])) == 2


# --- the store's behaviour on the cluster ----------------------------------------------------


async def test_create_find_list_update_and_move_on_the_cluster(store: NoteStore) -> None:
    a = await store.create("acme", WS, "TPS", "one", "alice")
    b = await store.create("acme", WS, "TPS", "two", "alice")
    assert {n.note_id for n in (await store.find("acme", WS, "TPS")).notes} == {
        a.note_id,
        b.note_id,
    }
    out = await store.update("acme", a, "Minutes", "edited", "alice")
    assert out.status == "updated"
    assert out.note is not None
    assert out.note.version == 2
    assert (await store.update("acme", a, "Again", "stale", "alice")).status == "changed"
    assert [n.note_id for n in (await store.find("acme", WS, "Minutes")).notes] == [a.note_id]
    assert (await store.move("acme", b.note_id, WS, ARCHIVE, "alice")).status == "moved"
    assert [n.note_id for n in (await store.list("acme", ARCHIVE)).notes] == [b.note_id]
    assert [n.note_id for n in (await store.list("acme", WS)).notes] == [a.note_id]
    assert (await store.move("acme", b.note_id, WS, ARCHIVE, "alice")).status == "elsewhere"


async def test_one_answer_sent_concurrently_sixteen_times_executes_exactly_once(
    store: NoteStore,
) -> None:
    note = await store.create("acme", WS, "TPS", "body", "alice")
    c = confirmation(note.note_id, await store.redis_time_ms() + 10_000)
    statuses: list[str] = []

    async def send() -> None:
        statuses.append((await store.confirm(c)).status)

    async with trio.open_nursery() as nursery:
        for _ in range(16):
            nursery.start_soon(send)
    assert sorted(statuses) == ["executed"] + ["replay"] * 15
    assert await store.get("acme", note.note_id) is None


async def test_an_answer_after_expiry_on_the_redis_clock_is_refused_and_changes_nothing(
    store: NoteStore,
) -> None:
    note = await store.create("acme", WS, "TPS", "body", "alice")
    exp = await store.redis_time_ms() + 200
    await trio.sleep(0.3)
    assert await store.redis_time_ms() >= exp
    assert (await store.confirm(confirmation(note.note_id, exp))).status == "expired"
    assert await store.get("acme", note.note_id) == note


async def test_a_recorded_outcome_is_replayed_and_a_different_answer_conflicts(
    store: NoteStore,
) -> None:
    note = await store.create("acme", WS, "TPS", "body", "alice")
    c = confirmation(note.note_id, await store.redis_time_ms() + 10_000)
    first = await store.confirm(c)
    again = await store.confirm(c)
    other = await store.confirm(replace(c, answer_digest="d2"))
    assert (first.status, again.status, other.status) == ("executed", "replay", "conflict")
    assert {(o.op, o.note_id) for o in (first, again, other)} == {("delete", note.note_id)}
    ttl = await raw(store).pttl(store.keys("acme").replay(c.nonce))
    assert 0 < ttl <= 10_000 + store.replay_grace_ms


# --- a short simulation ----------------------------------------------------------------------


async def test_a_short_simulation_on_the_cluster_is_valid_and_reports_keys_per_master(
    redis_cluster: RedisClusterInfo, tmp_path: Path
) -> None:
    options = SimulateOptions(
        redis_url=redis_cluster.url,
        run_dir=tmp_path,
        # Seed 3: at 80 flows the draw gives every race kind the two runs the exercise rule
        # asks of it (the draw changes whenever a kind is added; seed 5 starved one).
        settings=RunSettings(flows=80, concurrency=8, seed=3, tenants=12, duration_s=20),
    )
    sim = await simulate(options)
    results = json.loads((tmp_path / "results.json").read_text())
    assert sim.result.status == "valid", results["invariants"]
    assert results["settings"]["store"] == "redis-cluster"
    spread = results["key_distribution"]
    print(f"\nkeys per master after simulate (80 flows, 12 tenants): {spread}")
    assert sorted(spread) == sorted(f"127.0.0.1:{p}" for p in redis_cluster.masters)
    assert sum(1 for n in spread.values() if n > 0) > 1
    sync = sync_client(redis_cluster.url)
    try:  # the run dropped its keys afterwards, on every master
        assert list(scan_keys(sync, "ncsim*")) == []
    finally:
        sync.close()
