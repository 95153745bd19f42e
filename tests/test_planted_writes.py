"""Planted bugs in every write, read and bound the checker now covers: each makes the run
INVALID naming the write, and the same run without the plant is VALID (its control).

Each test runs a few flows of one race kind on two in-process nodes whose store is wrapped
(``StoreOptions.wrap``, test-only), then checks the history as ``simulate`` does, with the
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

from cluster.local import InProcessTransport, StoreOptions, open_local_cluster
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
    Confirmation,
    ConfirmOutcome,
    Note,
    NoteStoreAPI,
    Snapshot,
    StoreUnavailable,
    WriteOp,
    WriteOutcome,
)

FLOWS = 4
STATE_TTL_S = 1.0
SEARCH_LIMIT = 1000
"""``notes_search`` reads this many notes per workspace (nodes.tools.search)."""

Wrap = Callable[[NoteStoreAPI], NoteStoreAPI]


class Wrapped:
    """A store that answers as ``inner`` does, except where a plant overrides a method."""

    def __init__(self, inner: NoteStoreAPI) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class CreatesTwice(Wrapped):
    """A create re-sent under a new operation id (the bug the operation ids fixed)."""

    async def create(self, *args: Any, **kw: Any) -> Note:
        note = await self.inner.create(*args, **kw)
        await self.inner.create(*args, **{**kw, "op": WriteOp.fresh()})
        return note


class IgnoresIdempotencyKeys(Wrapped):
    """Every write under an operation of its own: a retry with the same idempotency key is
    not recognised and writes again."""

    async def recorded_write(self, tenant: str, op_id: str) -> None:
        return None

    async def create(self, *args: Any, **kw: Any) -> Note:
        return await self.inner.create(*args, **{**kw, "op": WriteOp.fresh()})

    async def update(self, *args: Any, **kw: Any) -> WriteOutcome:
        return await self.inner.update(*args, **{**kw, "op": WriteOp.fresh()})

    async def move(self, *args: Any, **kw: Any) -> WriteOutcome:
        return await self.inner.move(*args, **{**kw, "op": WriteOp.fresh()})


class UpdatesTwice(Wrapped):
    """An update applied, then applied again on the note as it now is (the optimistic retry
    after a re-sent script said "changed")."""

    async def update(self, tenant: str, note: Note, *args: Any, **kw: Any) -> WriteOutcome:
        out = await self.inner.update(tenant, note, *args, **kw)
        now = await self.inner.get(tenant, note.note_id)
        if out.note is not None and now is not None:
            await self.inner.update(tenant, now, *args, **{**kw, "op": WriteOp.fresh()})
        return out


class MovesButSaysGone(Wrapped):
    """A move done, answered as if the note was not in the source."""

    async def move(self, *args: Any, **kw: Any) -> WriteOutcome:
        out = await self.inner.move(*args, **kw)
        return WriteOutcome("gone", None, out.redis_now_ms)


class ArchivesInPlace(Wrapped):
    """An archive that "moves" the note into the workspace it is already in, not the sealed
    archive."""

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        if c.op == "move":
            c = Confirmation(**{**_fields(c), "target_workspace": c.workspace})
        return await self.inner.confirm(c)


def _fields(c: Confirmation) -> dict[str, Any]:
    return {name: getattr(c, name) for name in Confirmation.__dataclass_fields__}


class PagesSkipANote(Wrapped):
    """A listing's later pages lose their first note."""

    async def find(self, tenant: str, ws: str, title: str, limit: int, after: str = "") -> Snapshot:
        snap = await self.inner.find(tenant, ws, title, limit, after)
        if not after:
            return snap
        return Snapshot(snap.redis_now_ms, snap.notes[1:], snap.next_after)


class PagesTooBig(Wrapped):
    """Every page one note longer than the configured page size."""

    async def find(self, tenant: str, ws: str, title: str, limit: int, after: str = "") -> Snapshot:
        if limit == SIM_LIST_PAGE_SIZE:
            return await self.inner.find(tenant, ws, title, limit + 1, after)
        return await self.inner.find(tenant, ws, title, limit, after)


class SearchDropsANote(Wrapped):
    """``notes_search`` misses the newest note it found."""

    async def find(self, tenant: str, ws: str, title: str, limit: int, after: str = "") -> Snapshot:
        snap = await self.inner.find(tenant, ws, title, limit, after)
        if limit != SEARCH_LIMIT or not snap.notes:
            return snap
        return Snapshot(snap.redis_now_ms, snap.notes[:-1], snap.next_after)


class StatesOutliveTheirTtl(Wrapped):
    """The node's Redis clock reads three seconds fast, so its states expire late."""

    async def redis_time_ms(self) -> int:
        return int(await self.inner.redis_time_ms()) + 3_000

    async def find(self, *args: Any, **kw: Any) -> Snapshot:
        snap = await self.inner.find(*args, **kw)
        return Snapshot(snap.redis_now_ms + 3_000, snap.notes, snap.next_after)


class SetupSaysCompleted(Wrapped):
    """Every setup link reads as completed by its own principal, though nobody opened it."""

    async def setup_completed_by(self, tenant: str, nonce: str) -> str | None:
        return "u0a"


def unknown_creates() -> Wrap:
    """Every third create answered "outcome unknown" (it did land) where no fault was."""
    count = itertools.count(1)

    class UnknownCreates(Wrapped):
        async def create(self, *args: Any, **kw: Any) -> Note:
            note = await self.inner.create(*args, **kw)
            if next(count) % 3 == 0:
                raise StoreUnavailable("planted: a reply the node pretends it lost")
            return note

    return UnknownCreates


async def run_kind(kind: str, wrap: Wrap | None = None) -> tuple[CheckResult, list[Op]]:
    """``FLOWS`` flows of ``kind`` on two in-process nodes (embedded store, one tenant whose
    principal is u0a or u0b), checked with the bounds and an empty fault record."""
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
        store_options=StoreOptions(wrap=wrap),
    ) as cluster:
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
        result = await check_history(history, store, fault_rows=[])
    return result, history.ops


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
