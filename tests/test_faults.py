"""Faults during a run: nodes stopped and restarted, Redis connections killed and paused, replies
lost, and a Redis Cluster master failed over; and the setting that makes a write wait for its
replica (``wait_replicas``).

Tests that pause or kill Redis connections run on a private ``redis-server`` started (and stopped,
by pid) here, never on the shared one, whose other clients must not be paused. The WAIT tests use
the shared real Redis (a standalone server: no replica ever acknowledges).
"""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import coredis
import coredis.exceptions
import pytest
import redis
import trio
from click.testing import CliRunner

from cluster.cli import main
from cluster.faults import (
    FAULT_KINDS,
    FaultRecord,
    FaultUsageError,
    check_kinds,
    fault_records_as_rows,
    parse_kinds,
    plan_faults,
    records_from_rows,
)
from cluster.lab.failover import FailoverOptions, run_experiment
from cluster.redis_cluster import redis_server_available
from loadgen.run.folder import RunFolder
from nodes.protocol import Node
from nodes.serving.demo import ALICE_ARCHIVE, ALICE_NOTES, DEMO_TENANT
from store.api import StoreUnavailable, WriteOp
from store.client_factory import redis_client
from store.notes import RESENDS, NoteStore, outcome_unknown
from tests.ci import in_ci
from tests.conftest import require_real_redis
from tests.harness import accept, error, make_nodes
from tests.own_redis import own_redis
from tests.test_delete_flow import answer, ask, deleted, deletes_of, seed
from tests.test_idempotency_key import call, create_args

# --- a private redis-server ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def private_redis() -> Iterator[str]:
    """A redis-server of this module's own on a free loopback port, stopped by pid."""
    with own_redis(None) as server:
        yield server.url


# --- the schedule and the options ---------------------------------------------------------------


def test_the_fault_schedule_is_seeded_and_each_kind_is_selectable() -> None:
    plan = plan_faults(frozenset(FAULT_KINDS), seed=5, horizon_s=10, nodes=3)
    assert plan == plan_faults(frozenset(FAULT_KINDS), seed=5, horizon_s=10, nodes=3)
    assert plan != plan_faults(frozenset(FAULT_KINDS), seed=6, horizon_s=10, nodes=3)
    assert {f.kind for f in plan} == set(FAULT_KINDS)
    assert {f.kind for f in plan_faults(frozenset({"client"}), 5, 10, 3)} == {"client"}
    for kind in FAULT_KINDS:  # one kind's faults never overlap
        mine = [f for f in plan if f.kind == kind]
        assert all(a.at_s + a.duration_s < b.at_s for a, b in itertools.pairwise(mine))
    assert parse_kinds("nodes, client") == {"nodes", "client"}
    with pytest.raises(FaultUsageError, match="unknown fault kind"):
        parse_kinds("nodes,disk")
    with pytest.raises(FaultUsageError, match="real Redis"):
        check_kinds({"redis"}, embedded=True)


def test_redis_faults_and_wait_replicas_on_the_embedded_store_are_usage_errors() -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["simulate", "--faults", "redis"])
    assert out.exit_code == 2, out.output
    assert "needs a real Redis" in out.output
    out = runner.invoke(main, ["simulate", "--wait-replicas", "1"])
    assert out.exit_code == 2, out.output
    assert "WAIT" in out.output
    out = runner.invoke(main, ["simulate", "--faults", "nodes,disk"])
    assert out.exit_code == 2, out.output


@pytest.mark.parametrize(
    "exc",
    [
        coredis.exceptions.ConnectionError("reset"),
        TimeoutError("EVALSHA timed out"),
        coredis.exceptions.ReplicationError(b"EVALSHA", 1, 100),
        coredis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down"),
        coredis.exceptions.ResponseError("LOADING Redis is loading the dataset in memory"),
        # CLUSTER FAILOVER unblocks a client waiting in WAIT after its script ran.
        coredis.exceptions.UnblockedError("UNBLOCKED force unblock from blocking operation"),
    ],
)
def test_errors_after_which_a_script_may_have_run_are_unknown_outcomes(exc: Exception) -> None:
    assert outcome_unknown(exc)


def test_a_script_error_is_not_mistaken_for_an_unknown_outcome() -> None:
    assert not outcome_unknown(coredis.exceptions.ResponseError("ERR user_script:1: oops"))


# --- simulate with faults -----------------------------------------------------------------------


def _simulate(args: list[str], run_dir: Path) -> dict[str, Any]:
    out = CliRunner().invoke(
        main, ["simulate", *args, "--seed", "11", "--state-ttl", "2", "--out", str(run_dir)]
    )
    results: dict[str, Any] = json.loads((run_dir / "results.json").read_text("utf-8"))
    assert out.exit_code == 0, (out.output, [v for v in results["invariants"] if v["status"]])
    assert "Faults injected" in out.output
    return results


def _assert_faults_listed(results: dict[str, Any], run_dir: Path, kinds: set[str]) -> None:
    assert results["verdict"] == "valid"
    statuses = {v["name"]: v["status"] for v in results["invariants"]}
    assert statuses["info_resolved"] == "valid"
    assert results["counts"]["info_unknown"] == 0
    faults = results["faults"]
    assert {f["kind"] for f in faults} == kinds
    for f in faults:
        assert set(f) >= {"kind", "action", "start_s", "end_s", "start_wall", "end_wall", "detail"}
        assert 0 <= f["start_s"] <= f["end_s"] <= results["elapsed_s"] + 20
        assert f["start_wall"] <= f["end_wall"]
    assert [f["start_s"] for f in faults] == sorted(f["start_s"] for f in faults)
    assert results["settings"]["faults"] == sorted(kinds)
    assert (run_dir / "report.png").stat().st_size > 0
    assert "Faults" in (run_dir / "report.html").read_text("utf-8")


@pytest.mark.slow
def test_simulate_with_node_and_client_faults_on_the_embedded_store_is_valid(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    results = _simulate(["--faults", "nodes,client", "--flows", "200"], run_dir)
    _assert_faults_listed(results, run_dir, {"nodes", "client"})
    history = [json.loads(line) for line in (run_dir / "history.jsonl").open()]
    reasons = Counter(op["value"].get("reason") for op in history if op["type"] == "info")
    assert reasons["unreachable: ResponseLost"] > 0, reasons
    assert reasons["unreachable: NodeDown"] > 0, reasons


@pytest.mark.slow
def test_simulate_with_node_redis_and_client_faults_on_real_redis_is_valid(
    tmp_path: Path, private_redis: str
) -> None:
    run_dir = tmp_path / "run"
    args = ["--faults", "nodes,redis,client", "--flows", "600", "--redis", private_redis]
    results = _simulate(args, run_dir)
    _assert_faults_listed(results, run_dir, {"nodes", "redis", "client"})
    actions = {f["action"] for f in results["faults"] if f["kind"] == "redis"}
    assert actions == {"kill", "pause_write", "latency"}, results["faults"]
    history = [json.loads(line) for line in (run_dir / "history.jsonl").open()]
    reasons = Counter(op["value"].get("reason") for op in history if op["type"] == "info")
    assert reasons["outcome unknown"] > 0, "a pause past the nodes' timeout: real unknowns"
    assert (run_dir / "nodes.log").exists()
    assert not redis.Redis.from_url(private_redis).keys("ncsim*"), "the run's keys are dropped"


@pytest.mark.slow
def test_two_workers_with_faults_share_one_redis_schedule_and_report_every_workers_faults(
    tmp_path: Path, private_redis: str
) -> None:
    run_dir = tmp_path / "run"
    args = ["--faults", "nodes,redis,client", "--flows", "600", "--redis", private_redis]
    results = _simulate([*args, "--workers", "2", "--concurrency", "16"], run_dir)
    _assert_faults_listed(results, run_dir, {"nodes", "redis", "client"})
    by_worker = Counter((f["detail"].split(":")[0], f["kind"]) for f in results["faults"])
    for k in ("worker-0", "worker-1"):
        assert by_worker[(k, "nodes")] > 0, by_worker
        assert by_worker[(k, "client")] > 0, by_worker
    # The store is shared: one Redis fault schedule (worker 0's), not one per worker.
    assert by_worker[("worker-0", "redis")] > 0, by_worker
    assert by_worker[("worker-1", "redis")] == 0, by_worker
    seen = [f["availability"] for f in results["faults"] if f["availability"] is not None]
    assert all(0.0 <= a <= 1.0 for a in seen), seen  # None: no answer in that window
    assert min(seen) < 1.0, "faults cost some answers their known outcome"
    # Every worker's nodes run with the short fault-run timeout: worker 0's pauses reach both.
    for k in (0, 1):
        log = (run_dir / f"worker-{k}" / "nodes.log").read_text("utf-8")
        assert "store unavailable" in log, f"worker-{k}"
    assert not redis.Redis.from_url(private_redis).keys("ncsim*"), "the run's keys are dropped"


def test_faults_written_by_a_worker_come_back_on_the_readers_clock(tmp_path: Path) -> None:
    record = FaultRecord("redis", "latency", "CLIENT PAUSE", 5.0, 6.5, 1000.25, 1001.75)
    folder = RunFolder(tmp_path)
    folder.write_faults(fault_records_as_rows([record]))
    rows = folder.own_fault_rows()
    (back,) = records_from_rows(rows, started_mono=50.0, started_wall=1000.0, label="worker-1: ")
    assert (back.start_mono, back.end_mono) == (50.25, 51.75)
    assert (back.start_wall, back.end_wall) == (1000.25, 1001.75)
    assert back.detail == "worker-1: CLIENT PAUSE"
    assert back.kind == "redis"
    assert RunFolder(tmp_path / "none").own_fault_rows() == []


# --- unknown outcomes: the retry finds the recorded outcome ---------------------------------------


class _KilledAfterScript:
    """Stands in for the store's confirm script: runs it, then fails as a connection killed
    before its reply was read."""

    def __init__(self, script: Any) -> None:
        self.script = script
        self.ran = 0

    async def __call__(self, **kwargs: Any) -> Any:
        await self.script(**kwargs)
        self.ran += 1
        raise coredis.exceptions.ConnectionError("connection killed after the script ran")


async def test_a_connection_killed_right_after_the_confirm_script_ran_answers_outcome_unknown_and_the_retry_gets_the_recorded_outcome(  # noqa: E501
    store: NoteStore,
) -> None:
    seeded = await seed(store)
    node_a, node_b = make_nodes(store, 2)
    cut = NoteStore(store.client, prefix=store.prefix, replay_grace_ms=store.replay_grace_ms)
    hook = _KilledAfterScript(cut._scripts["confirm"])
    cut._scripts["confirm"] = hook  # type: ignore[assignment]
    node_cut = Node(node_a.config, cut)
    state, _ = await ask(node_a)

    reply = await answer(node_cut, state, accept(seeded.tps[0]))

    # Sent again after each lost reply (the store re-sends: confirm.lua is safe to run twice);
    # every reply lost, the outcome stays unknown.
    assert hook.ran == 1 + RESENDS
    assert reply.status == 500
    assert error(reply)["code"] == -32603, "never a definite 'not deleted'"
    assert await deletes_of(store, seeded.tps[0]) == 1, "the script did run"
    content, replay = deleted(await answer(node_b, state, accept(seeded.tps[0])))
    assert content == {"deleted": True, "noteId": seeded.tps[0]}
    assert replay, "the recorded outcome, not a second execution"
    assert await deletes_of(store, seeded.tps[0]) == 1


HANG_GUARD_MS = 60_000
"""How long a paused store waits for the node's answer before the test fails as hung."""


def _write_once_unpaused(url: str, key: str) -> None:
    """SET ``key`` (60 s TTL): blocked while a ``CLIENT PAUSE ... WRITE`` lasts."""
    with redis.Redis.from_url(url, socket_timeout=30) as client:
        client.set(key, "1", px=60_000)


async def test_a_store_paused_past_the_nodes_timeout_answers_outcome_unknown_and_the_retry_learns_the_one_outcome(  # noqa: E501
    private_redis: str,
) -> None:
    async with (
        redis_client(private_redis) as fast,
        redis_client(private_redis, stream_timeout_s=0.1) as slow,
    ):
        store = NoteStore(fast, prefix="ncfault" + os.urandom(4).hex())
        seeded = await seed(store)
        node_a, node_b = make_nodes(store, 2)
        node_slow = Node(node_a.config, NoteStore(slow, prefix=store.prefix))
        state, _ = await ask(node_a)
        # The pause lasts until the node has answered, however slowly a busy machine gets the
        # node's three tries (0.1 s each) sent: a timed pause could end before the first.
        with redis.Redis.from_url(private_redis) as control:
            control.execute_command("CLIENT", "PAUSE", str(HANG_GUARD_MS), "WRITE")
            try:
                with trio.fail_after(HANG_GUARD_MS / 1000):
                    reply = await answer(node_slow, state, accept(seeded.tps[2]))
            finally:
                control.execute_command("CLIENT", "UNPAUSE")
        assert error(reply)["code"] == -32603, "timed out: the script may run once unpaused"
        # A write sent after the pause runs behind the attempt queued during it: once it is
        # done, that attempt has run (or was dropped with its connection), and cannot run later.
        marker = f"{store.prefix}:unpaused"
        await trio.to_thread.run_sync(_write_once_unpaused, private_redis, marker)
        ran = await deletes_of(store, seeded.tps[2])  # 1 if a queued attempt ran, else 0
        content, replay = deleted(await answer(node_b, state, accept(seeded.tps[2])))
        assert content == {"deleted": True, "noteId": seeded.tps[2]}
        assert replay == (ran == 1), "the recorded outcome if it ran, else the one execution"
        assert await deletes_of(store, seeded.tps[2]) == 1
        await fast.delete([k async for k in fast.scan_iter(match=f"{store.prefix}:*")])


# --- WAIT: a confirmation answered only once a replica has it ------------------------------------


async def test_with_wait_replicas_and_no_replica_a_confirmation_answers_outcome_unknown_never_success() -> (  # noqa: E501
    None
):
    url = require_real_redis()
    prefix = "ncwait" + os.urandom(4).hex()
    async with redis_client(url) as client:
        assert (await client.info("replication"))["connected_slaves"] == 0
        store = NoteStore(client, prefix=prefix)
        waiting = NoteStore(client, prefix=prefix, wait_replicas=1, wait_timeout_ms=100)
        seeded = await seed(store)
        node_a = make_nodes(store, 1)[0]
        node_w = Node(node_a.config, waiting)
        state, _ = await ask(node_w)  # a read: no WAIT
        for _ in range(2):  # the first attempt and its retry: each ran, neither is replicated
            reply = await answer(node_w, state, accept(seeded.tps[0]))
            assert reply.status == 500
            assert error(reply)["code"] == -32603
        assert await deletes_of(store, seeded.tps[0]) == 1
        with pytest.raises(StoreUnavailable, match="ReplicationError"):
            await waiting.create(DEMO_TENANT, "file:///x", "t", "b", "alice")
        assert waiting.statistics().unavailable == 3
        await client.delete([k async for k in client.scan_iter(match=f"{prefix}:*")])


async def test_with_wait_replicas_a_retry_replaying_an_unreplicated_write_answers_outcome_unknown() -> (  # noqa: E501
    None
):
    # A write that ran on the master but reached no replica (its WAIT timed out) must stay
    # "outcome unknown" when retried: a replay from its operation record answered as done would
    # acknowledge a write a failover to that replica forgets (the failover experiment's
    # creates_exactly_once / moves_land / no_lost_note findings). The record's look-up waits too.
    url = require_real_redis()
    prefix = "ncwait" + os.urandom(4).hex()
    async with redis_client(url) as client:
        assert (await client.info("replication"))["connected_slaves"] == 0
        store = NoteStore(client, prefix=prefix)
        waiting = NoteStore(client, prefix=prefix, wait_replicas=1, wait_timeout_ms=100)
        node_w = Node(make_nodes(store, 1)[0].config, waiting)
        for _ in range(2):  # the keyed create and its retry: never ok before a replica has it
            reply = await call(node_w, "notes_create", create_args())
            assert reply.status == 500
            assert error(reply)["code"] == -32603
        made = (await store.find(DEMO_TENANT, ALICE_NOTES, "Keyed note")).notes
        assert len(made) == 1, "the first request ran on the master; its retry wrote nothing"
        # A move whose note is already in the target looks its record up: that waits as well.
        op = WriteOp("move" + os.urandom(8).hex())
        note = made[0].note_id
        for _ in range(2):
            with pytest.raises(StoreUnavailable, match="ReplicationError"):
                await waiting.move(DEMO_TENANT, note, ALICE_NOTES, ALICE_ARCHIVE, "alice", op=op)
        moved = await store.recorded_write(DEMO_TENANT, op.op_id)
        assert moved is not None
        assert moved.note.workspace == ALICE_ARCHIVE
        # No record: nothing to replay, so nothing to wait for (the write itself will wait).
        assert await waiting.recorded_write(DEMO_TENANT, "nothing" + os.urandom(4).hex()) is None
        await client.delete([k async for k in client.scan_iter(match=f"{prefix}:*")])


# --- failover ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.planted(
    control="test_a_failover_to_a_lagging_replica_forgets_acknowledged_confirmations_unless_writes_wait"
)
def test_a_failover_to_a_lagging_replica_forgets_acknowledged_confirmations_unless_writes_wait(
    tmp_path: Path,
) -> None:
    if not redis_server_available():
        if in_ci():
            pytest.fail("CI needs redis-server and redis-cli to start a Redis Cluster")
        pytest.skip("redis-server is not installed")
    options = FailoverOptions(
        scenarios=("kill",), duration_s=5.0, seed=3, lag_ms=700, out_dir=tmp_path
    )
    without, with_wait = run_experiment(options, echo=lambda _: None)

    assert (without.wait_replicas, with_wait.wait_replicas) == (0, 1)
    assert without.confirms_forgotten >= 1, without
    assert without.verdict == "invalid"
    assert "ok_deletes_match_journal" in without.invalid
    results = json.loads((tmp_path / "kill-wait0" / "results.json").read_text("utf-8"))
    shown = {v["name"]: v for v in results["invariants"]}["ok_deletes_match_journal"]
    assert shown["status"] == "invalid"
    assert shown["ops"], "the checker names the operations"

    assert with_wait.verdict == "valid", with_wait
    assert (with_wait.confirms_forgotten, with_wait.creates_forgotten) == (0, 0)
    assert with_wait.unknown_outcomes > 0, "WAIT turned the unreplicated writes into unknowns"
    for run in (without, with_wait):
        assert [f["action"] for f in run.faults] == ["kill_master"]
        assert "elected" in run.faults[0]["detail"]
    assert (tmp_path / "failover.md").exists()
