"""Legacy 2025-11-25 clients in the race workload: ``simulate --legacy-share`` and the checker.

Layer: tests. A short simulation mixing legacy and modern flows (embedded store, real Redis) must
be valid with every legacy kind exercised; legacy flows run straight against HTTP nodes on the
fixture store give a history the checker finds valid, and invalid once a violation is planted in
it (the history says the user declined, the journal shows the delete) or in the journal (both
copies of a duplicated answer executed).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

from cluster.targets.in_process import SIM_REPLAY_GRACE_MS, simulation_config
from cluster.targets.legacy_nodes import serve_legacy_nodes
from cluster.targets.simulate import SimulateOptions, simulate
from loadgen.check.invariants import check
from loadgen.check.verdict import CheckResult
from loadgen.history import History, Op
from loadgen.legacy_clients import LEGACY_KINDS, LegacyEnv
from loadgen.legacy_sessions import run_any_legacy_flow
from loadgen.run.pipeline import check_history
from loadgen.run.target import StoreAccess
from loadgen.runner import RunSettings
from loadgen.workload import RACE_KINDS
from nodes.serving.load_fixture import load_tokens
from store.client_factory import sync_client
from store.journal import (
    JournalEntry,
    list_replay_entries,
    read_final_notes,
    read_journal,
    redis_time_ms,
)
from tests.conftest import require_real_redis

pytestmark = pytest.mark.slow

FLOWS = 60
SHARE = 0.3


def _status(result: CheckResult) -> dict[str, str]:
    return {v.name: v.status for v in result.verdicts}


@pytest.mark.parametrize("where", ["embedded", "redis"])
async def test_simulate_mixes_legacy_and_modern_clients_and_the_verdict_covers_both(
    where: str, tmp_path: Path
) -> None:
    url = None if where == "embedded" else require_real_redis()
    options = SimulateOptions(
        redis_url=url,
        run_dir=tmp_path,
        settings=RunSettings(
            flows=FLOWS, duration_s=30, concurrency=8, seed=11, legacy_share=SHARE
        ),
    )
    sim = await simulate(options)

    assert sim.result.status == "valid", [v for v in sim.result.verdicts if v.status != "valid"]
    # Legacy flows are spread evenly: exactly floor(60 * 0.3) of them, every kind at least once.
    kinds = Counter(s.kind for s in sim.stats.samples)
    assert sum(kinds[k] for k in LEGACY_KINDS) == int(FLOWS * SHARE)
    assert all(s.completed for s in sim.stats.samples)
    for kind in LEGACY_KINDS:
        assert sim.races.get(kind, 0) > 0, (kind, sim.races)
    assert sum(sim.races.get(k, 0) for k in RACE_KINDS) > 0  # modern flows too
    # The verdict covers the legacy flows: their accepts executed and their declines are
    # journaled decisions the checker attributed to them.
    legacy_ops = [op for op in sim.history.ops if op.kind in LEGACY_KINDS]
    executed = [
        op for op in legacy_ops if op.f == "confirm" and op.type == "ok" and op.value["deleted"]
    ]
    assert executed
    assert sim.result.counts["declines"] > 0
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["settings"]["legacy_share"] == SHARE
    assert set(LEGACY_KINDS) <= set(results["races"])


# --- legacy flows straight against HTTP nodes, then planted violations ----------------------


def _read(url: str, prefix: str, tenants: list[str]) -> tuple[Any, Any, Any, int]:
    client = sync_client(url, decode_responses=True)
    try:
        return (
            read_journal(client, prefix, tenants),
            read_final_notes(client, prefix, tenants),
            list_replay_entries(client, prefix, tenants),
            redis_time_ms(client),
        )
    finally:
        client.close()


def _flow_of(ops: list[Op], kind: str) -> int:
    return next(op.flow for op in ops if op.kind == kind)


def _primary_confirm(ops: list[Op], flow: int) -> Op:
    return next(op for op in ops if op.flow == flow and op.f == "confirm" and op.type == "invoke")


@pytest.mark.planted(control="test_a_violation_planted_in_a_legacy_history_is_invalid")
async def test_a_violation_planted_in_a_legacy_history_is_invalid(
    redis_url: str, embedded_url: str, key_prefix: str
) -> None:
    config = simulation_config(state_ttl_s=3.0, tenants=1)
    history = History()
    tenants = ["load0"]
    async with serve_legacy_nodes(
        config,
        redis_url,
        embedded=redis_url == embedded_url,
        prefix=key_prefix,
        nodes=3,
        tokens=load_tokens(1),
        replay_grace_ms=SIM_REPLAY_GRACE_MS,
    ) as legacy:
        assert legacy.node_count == 3
        completed: dict[str, bool] = {}

        async def one(flow: int, kind: str) -> None:
            env = LegacyEnv(
                flow=flow,
                kind=kind,
                http=legacy,
                history=history,
                rng=random.Random(flow),
                # As loadgen.runner does: eviction as the second principal, so it never ends
                # a session another flow waits on.
                principal="u0b" if kind == "legacy_evicted" else "u0a",
                tenant="load0",
                inbox="file:///load/t0/inbox",
                process=2 * flow,
                foreigner="u0b",
            )
            completed[kind] = await run_any_legacy_flow(env)

        async with trio.open_nursery() as nursery:
            for flow, kind in enumerate(LEGACY_KINDS):
                nursery.start_soon(one, flow, kind)
    assert all(completed.values()), completed

    ops = history.ops
    # Every ask learned its state from the elicitation's _meta (dev.notes-cluster/confirmation),
    # the flow's own note among its candidates.
    for flow, kind in enumerate(LEGACY_KINDS):
        if kind == "legacy_evicted":
            continue  # an eviction flow creates and deletes nothing
        created = next(op for op in ops if op.flow == flow and op.f == "create" and op.type == "ok")
        asked = next(op for op in ops if op.flow == flow and op.f == "ask" and op.type == "ok")
        assert asked.value["nonce"]
        assert asked.value["tool"] == "notes_delete"
        assert created.value["noteId"] in {c[0] for c in asked.value["candidates"]}
    plain = _primary_confirm(ops, _flow_of(ops, "legacy_plain"))
    cross = _primary_confirm(ops, _flow_of(ops, "legacy_cross_node"))
    assert plain.value["node"] == plain.value["stream_node"]
    assert cross.value["node"] != cross.value["stream_node"]
    dup_flow = _flow_of(ops, "legacy_duplicate")
    dup_posts = [op for op in ops if op.flow == dup_flow and op.f == "confirm"]
    assert len({op.value["node"] for op in dup_posts if op.type == "invoke"}) == 2

    store = StoreAccess(redis_url, key_prefix, tuple(tenants), SIM_REPLAY_GRACE_MS)
    honest = await check_history(history, store)
    assert honest.status == "valid", [v for v in honest.verdicts if v.status != "valid"]
    # plain, cross_node, duplicate (once), and the deletions of the foreign, stale and roots
    # kinds (an eviction flow deletes nothing)
    assert honest.counts["deletes"] == 6
    journal, final, replay, end_ms = await trio.to_thread.run_sync(
        _read, redis_url, key_prefix, tenants
    )

    def verdicts(ops: list[Op], journal: list[JournalEntry]) -> dict[str, str]:
        return _status(
            check(ops, journal, final, replay, redis_end_ms=end_ms, grace_ms=SIM_REPLAY_GRACE_MS)
        )

    assert set(verdicts(ops, journal).values()) == {"valid"}

    # 1. The history says the legacy client declined; the journal holds the delete anyway.
    declined = dataclasses.replace(
        plain,
        value={**plain.value, "action": "decline", "noteId": None, "expect": "no_mutation"},
    )
    planted = [declined if op is plain else op for op in ops]
    status = verdicts(planted, journal)
    assert status["no_mutation_from_refused"] == "invalid"
    assert status["executions_trace_to_confirmations"] == "invalid"

    # 2. Both copies of the duplicated legacy answer executed.
    nonce = dup_posts[0].value["nonce"]
    delete = next(e for e in journal if e.op == "delete" and e.nonce == nonce)
    twice = [*journal, dataclasses.replace(delete, id=f"{int(delete.id.split('-')[0]) + 1}-0")]
    status = verdicts(ops, twice)
    assert status["no_double_delete"] == "invalid"
    assert status["no_double_execution"] == "invalid"
