"""Planted bugs in every write, read and bound the checker now covers: each makes the run
INVALID naming the write, and the same run without the plant is VALID (its control).

Each test runs a few flows of one race kind on two in-process nodes whose store is wrapped by a
plant of the registry (``store.simulation.plants``, the one planting mechanism, through
``StoreOptions.wrap``), then checks the history as ``simulate`` does, with the
nodes' configured bounds and the run's fault windows (none: nothing may be unknown). The
assertions name the verdict and the evidence (the write, the note, the count), not only the
status.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import pytest
import trio

from cluster.faults import LostReplies, fault_records_as_rows
from cluster.local import InProcessTransport, LocalCluster, StoreOptions, open_local_cluster
from cluster.targets.in_process import (
    SIM_LIST_PAGE_SIZE,
    SIM_REPLAY_GRACE_MS,
    simulation_config,
)
from loadgen.check.limits import Limits
from loadgen.check.verdict import CheckResult, Verdict
from loadgen.history import History, Op
from loadgen.run.pipeline import check_history, redis_offset_ms
from loadgen.run.target import StoreAccess
from loadgen.runner import RunSettings, run_load
from store.api import (
    NoteStoreAPI,
)
from store.notes import NoteStore
from store.redis_errors import ReplyTimeout
from store.simulation.plants import (
    ArchivesInPlace,
    ClockFast,
    CreatesTwice,
    IgnoresIdempotencyKeys,
    MovesButSaysGone,
    PagesSkipANote,
    PagesTooBig,
    PretendsLostReplies,
    SearchDropsANote,
    SetupSaysCompleted,
    UpdatesTwice,
)

FLOWS = 4
STATE_TTL_S = 1.0

Wrap = Callable[[NoteStoreAPI], NoteStoreAPI]


StatesOutliveTheirTtl = ClockFast


def unknown_creates() -> Wrap:
    """Every third create answered "outcome unknown" (it did land) where no fault was."""
    return PretendsLostReplies


async def run_kind(
    kind: str,
    wrap: Wrap | None = None,
    *,
    losing: Callable[[LocalCluster], None] | None = None,
    observed: bool = False,
) -> tuple[CheckResult, list[Op]]:
    """``FLOWS`` flows of ``kind`` on two in-process nodes (embedded store, one tenant whose
    principal is u0a or u0b), checked with the bounds and an empty fault record. ``losing``
    makes the started nodes' stores lose replies; ``observed``: the nodes report each lost
    reply (``StoreOptions.on_lost_reply``) and the check reads them as the run's faults."""
    lost = LostReplies()
    settings = RunSettings(
        flows=FLOWS, duration_s=30, concurrency=2, seed=11, weights={kind: 1.0}, tenants=1
    )
    config = simulation_config(STATE_TTL_S, settings.tenants)
    history = History()
    async with open_local_cluster(
        config,
        2,
        seed=False,
        replay_grace_ms=SIM_REPLAY_GRACE_MS,
        store_options=StoreOptions(wrap=wrap, on_lost_reply=lost if observed else None),
    ) as cluster:
        if losing is not None:
            losing(cluster)
        offset = await trio.to_thread.run_sync(redis_offset_ms, cluster.redis_url)
        await run_load(
            InProcessTransport(cluster),
            config.key_ring,
            config.server_name,
            settings,
            history,
            redis_offset_ms=offset,
        )
        limits = Limits(config.list_page_size, config.state_ttl_ms)
        store = StoreAccess(
            cluster.redis_url, cluster.prefix, ("load0",), SIM_REPLAY_GRACE_MS, limits
        )
        faults = fault_records_as_rows(lost.records)
        result = await check_history(history, store, fault_rows=faults)
    return result, history.ops


def lose_every_second_create(cluster: LocalCluster) -> None:
    """Each node's store runs every second create, then loses its reply and every re-send's
    (a reply timeout, as a starved machine gives one): the node can only answer "outcome
    unknown", and the note landed."""
    for node in cluster.nodes:
        assert node is not None
        assert isinstance(node.store, NoteStore)
        _lose_every_second_create(node.store)


def _lose_every_second_create(store: NoteStore) -> None:
    send, create = store._send, store.create
    creates = itertools.count()
    losing = False

    async def lossy(name: str, keys: list[str], args: list[str | int]) -> Any:
        reply = await send(name, keys, args)
        if name == "create" and losing:
            raise ReplyTimeout("no reply in time (planted)")
        return reply

    async def one_create(*args: Any, **kwargs: Any) -> Any:
        nonlocal losing
        losing = next(creates) % 2 == 1
        try:
            return await create(*args, **kwargs)
        finally:
            losing = False

    store._send = lossy  # type: ignore[method-assign]
    store.create = one_create  # type: ignore[method-assign]


async def test_a_store_reply_the_node_lost_is_an_observed_fault_that_explains_its_unknown() -> None:
    """A real lost reply (not a plant that says so): with the nodes reporting it, the run is
    VALID and its unknown creates are explained by "store reply lost" records."""
    result, ops = await run_kind("plain", losing=lose_every_second_create, observed=True)
    assert result.status == "valid", [v for v in result.verdicts if v.status != "valid"]
    unknown = [op for op in ops if op.type == "info" and op.f == "create"]
    assert unknown, "no create lost its reply"
    v = verdict_of(result, "unknown_outcomes_explained")
    assert f"All {len([op for op in ops if op.type == 'info'])} unknown outcomes" in v.summary


@pytest.mark.planted(
    control="test_a_store_reply_the_node_lost_is_an_observed_fault_that_explains_its_unknown"
)
async def test_the_same_lost_replies_unreported_are_unexplained() -> None:
    """The same run without the nodes' report is INVALID: the record is what explains them."""
    result, ops = await run_kind("plain", losing=lose_every_second_create, observed=False)
    assert "unknown_outcomes_explained" in invalid(result)
    v = verdict_of(result, "unknown_outcomes_explained")
    assert any(op.type == "info" for op in ops_named(ops, v, "create"))


def verdict_of(result: CheckResult, name: str) -> Verdict:
    return next(v for v in result.verdicts if v.name == name)


def invalid(result: CheckResult) -> set[str]:
    return {v.name for v in result.verdicts if v.status == "invalid"}


def ops_named(ops: list[Op], v: Verdict, f: str) -> list[Op]:
    """The history entries of operation ``f`` among the verdict's evidence."""
    evidence = set(v.ops)
    return [op for op in ops if op.index in evidence and op.f == f]


KINDS = [
    "plain",
    "edit_between",
    "race_move",
    "archive",
    "list_pages",
    "search",
    "setup",
    "write_retry",
]


@pytest.mark.parametrize("kind", KINDS)
async def test_without_a_plant_the_same_runs_are_valid(kind: str) -> None:
    result, ops = await run_kind(kind)
    assert result.status == "valid", [v for v in result.verdicts if v.status != "valid"]
    done = {op.f for op in ops if op.type == "ok" and op.kind == kind}
    want = {
        "plain": {"create", "ask", "confirm"},
        "edit_between": {"update"},
        "race_move": {"move"},
        "archive": {"confirm"},
        "list_pages": {"list"},
        "search": {"search"},
        "setup": {"setup"},
        "write_retry": {"create", "update", "move"},
    }[kind]
    assert want <= done, done  # the control exercised the write the plant breaks


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_a_create_applied_twice_is_invalid_naming_the_create() -> None:
    result, ops = await run_kind("plain", CreatesTwice)
    assert "creates_exactly_once" in invalid(result)
    v = verdict_of(result, "creates_exactly_once")
    assert "2 notes titled" in v.summary
    assert "by 1 create request(s)" in v.summary
    named = ops_named(ops, v, "create")
    assert named
    assert all(op.value.get("workspace") for op in named if op.type == "invoke")
    assert len(v.journal) >= 2  # both journal creates are the evidence


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_an_update_applied_twice_is_invalid_naming_the_update() -> None:
    result, ops = await run_kind("edit_between", UpdatesTwice)
    assert "updates_one_step" in invalid(result)
    v = verdict_of(result, "updates_one_step")
    assert "updated 2 times by 1 update request(s)" in v.summary
    assert ops_named(ops, v, "update")


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_a_move_done_but_answered_gone_is_invalid_naming_the_move() -> None:
    result, ops = await run_kind("race_move", MovesButSaysGone)
    assert "moves_land" in invalid(result)
    v = verdict_of(result, "moves_land")
    assert "moved 1 times by 0 move request(s) that may have landed, 1 told isError" in v.summary
    (invoke,) = [op for op in ops_named(ops, v, "move") if op.type == "invoke"][:1]
    assert invoke.value["to"].endswith("/archive")


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_an_archive_landing_elsewhere_than_sealed_is_invalid() -> None:
    result, _ = await run_kind("archive", ArchivesInPlace)
    assert "executions_trace_to_confirmations" in invalid(result)
    v = verdict_of(result, "executions_trace_to_confirmations")
    assert "moved it to file:///load/t0/inbox" in v.summary
    assert "sealed file:///load/t0/archive" in v.summary


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_a_listing_that_skips_a_note_is_invalid() -> None:
    result, ops = await run_kind("list_pages", PagesSkipANote)
    assert "reads_show_every_note_once" in invalid(result)
    v = verdict_of(result, "reads_show_every_note_once")
    assert "skipped" in v.summary
    assert "there throughout" in v.summary
    assert ops_named(ops, v, "list")


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_a_page_over_the_configured_size_is_invalid() -> None:
    result, ops = await run_kind("list_pages", PagesTooBig)
    assert "bounds_respected" in invalid(result)
    v = verdict_of(result, "bounds_respected")
    assert f"held 3 notes, page size {SIM_LIST_PAGE_SIZE}" in v.summary
    assert ops_named(ops, v, "list")


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_a_search_missing_a_note_is_invalid() -> None:
    result, ops = await run_kind("search", SearchDropsANote)
    assert "reads_show_every_note_once" in invalid(result)
    v = verdict_of(result, "reads_show_every_note_once")
    assert "skipped" in v.summary
    assert ops_named(ops, v, "search")


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_a_state_outliving_its_ttl_is_invalid() -> None:
    result, ops = await run_kind("plain", StatesOutliveTheirTtl)
    assert "bounds_respected" in invalid(result)
    v = verdict_of(result, "bounds_respected")
    assert "state TTL 1000 ms" in v.summary
    assert ops_named(ops, v, "ask")


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_setup_saying_configured_without_a_completed_page_is_invalid() -> None:
    result, ops = await run_kind("setup", SetupSaysCompleted)
    assert "setup_answers" in invalid(result)
    v = verdict_of(result, "setup_answers")
    assert "expected nothing configured" in v.summary
    assert ops_named(ops, v, "setup")


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_an_unknown_outcome_where_no_fault_was_is_invalid_naming_the_write() -> None:
    result, ops = await run_kind("plain", unknown_creates())
    assert "unknown_outcomes_explained" in invalid(result)
    v = verdict_of(result, "unknown_outcomes_explained")
    assert "create at" in v.summary
    assert "outside every fault window" in v.summary
    named = ops_named(ops, v, "create")
    assert any(op.type == "info" for op in named)


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_a_node_ignoring_idempotency_keys_is_invalid_naming_the_retried_writes() -> None:
    result, ops = await run_kind("write_retry", IgnoresIdempotencyKeys)
    assert {"creates_exactly_once", "updates_one_step"} <= invalid(result)
    v = verdict_of(result, "creates_exactly_once")
    made, asked = re.findall(r"(\d+) notes titled .* by (\d+) create request", v.summary)[0]
    assert int(made) == int(asked) + 1  # the keyed create and its retry count as one request
    keyed = [op for op in ops_named(ops, v, "create") if op.type == "invoke" and "key" in op.value]
    assert len({op.value["key"] for op in keyed}) >= 1
    assert len(keyed) >= 2  # the lost first send and its retry, both in the evidence
