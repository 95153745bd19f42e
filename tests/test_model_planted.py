"""Planted wrong behaviours the safety invariants cannot see: the model must call them INVALID.

Each test runs the race workload of one kind against an in-process cluster whose nodes talk to
a wrapped store (``StoreOptions.wrap``, test-only) or whose transport answers for them, then
checks the recorded history with the journal as ``simulate`` does. Without the plant the same
run is valid (the control), so each test can fail.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import trio

from cluster.local import InProcessTransport, StoreOptions, open_local_cluster
from cluster.targets.in_process import SIM_REPLAY_GRACE_MS, simulation_config
from loadgen.check.verdict import CheckResult, Verdict
from loadgen.history import History
from loadgen.run.pipeline import check_history, redis_offset_ms
from loadgen.run.target import StoreAccess
from loadgen.runner import RunSettings, run_load
from loadgen.transport import Reply
from store.api import Confirmation, ConfirmOutcome, NoteStoreAPI

FLOWS = 4
STATE_TTL_S = 1.0


class Wrapped:
    """A store that answers as ``inner`` does, except where a test overrides ``confirm``."""

    def __init__(self, inner: NoteStoreAPI) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        return await self.inner.confirm(c)


def cancel_is_final() -> Callable[[NoteStoreAPI], NoteStoreAPI]:
    """Cancel recorded as final: every later answer under a cancelled state is refused."""
    cancelled: set[str] = set()  # shared by every node, as a replay entry would be

    class CancelIsFinal(Wrapped):
        async def confirm(self, c: Confirmation) -> ConfirmOutcome:
            if c.nonce in cancelled:
                return ConfirmOutcome("conflict", None, None, await self.inner.redis_time_ms())
            out = await self.inner.confirm(c)
            if out.status == "cancelled":
                cancelled.add(c.nonce)
            return out

    return CancelIsFinal


class ReplayOnConflict(Wrapped):
    """A different answer under a used state gets the recorded outcome, not the refusal."""

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        out = await self.inner.confirm(c)
        if out.status == "conflict":
            return ConfirmOutcome("replay", out.op, out.note_id, out.redis_now_ms)
        return out


class ForgetsArchives(Wrapped):
    """An archive acknowledged as executed that the store never recorded (what a replica
    promoted without it would show)."""

    async def confirm(self, c: Confirmation) -> ConfirmOutcome:
        if c.op == "move" and c.action == "accept":
            now = await self.inner.redis_time_ms()
            return ConfirmOutcome("executed", "move", c.note_id, now)
        return await self.inner.confirm(c)


class SilenceIsAnError(InProcessTransport):
    """A node that answers a retry without an answer with an error instead of asking again."""

    async def send(self, node_index: int, principal: str, message: dict[str, Any]) -> Reply:
        params = message.get("params") or {}
        if "requestState" in params and "inputResponses" not in params:
            error = {"code": -32602, "message": "Invalid inputResponses: an answer is required"}
            return Reply(400, {"jsonrpc": "2.0", "id": message.get("id"), "error": error})
        return await super().send(node_index, principal, message)


async def run_kind(
    kind: str,
    wrap: Callable[[NoteStoreAPI], NoteStoreAPI] | None = None,
    transport: type[InProcessTransport] = InProcessTransport,
) -> CheckResult:
    """``FLOWS`` flows of one race kind on two in-process nodes (embedded store), checked."""
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
            transport(cluster),
            config.key_ring,
            config.server_name,
            settings,
            history,
            redis_offset_ms=offset,
        )
        store = StoreAccess(cluster.redis_url, cluster.prefix, ("load0",), SIM_REPLAY_GRACE_MS)
        return await check_history(history, store)


def verdict_of(result: CheckResult, name: str) -> Verdict:
    return next(v for v in result.verdicts if v.name == name)


def invalid(result: CheckResult) -> set[str]:
    return {v.name for v in result.verdicts if v.status == "invalid"}


@pytest.mark.parametrize("kind", ["cancel_then_accept", "answer_changed", "archive", "silence"])
async def test_without_a_plant_the_same_runs_are_valid(kind: str) -> None:
    result = await run_kind(kind)
    assert result.status == "valid", [v for v in result.verdicts if v.status != "valid"]
    seen: Counter[str] = Counter()
    for row in result.model[kind]:
        seen.update(row["seen"])
    assert sum(n for reply, n in seen.items() if reply != "info") >= FLOWS, seen


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_a_cancel_recorded_as_final_is_invalid_naming_cancel_then_accept() -> None:
    result = await run_kind("cancel_then_accept", wrap=cancel_is_final())
    assert invalid(result) == {"answers_make_progress"}
    v = verdict_of(result, "answers_make_progress")
    assert "[cancel_then_accept]" in v.summary
    assert "answered refusal; legal at every point it may have run: executed" in v.summary


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_a_changed_answer_given_the_recorded_outcome_is_invalid_naming_answer_changed() -> (
    None
):
    result = await run_kind("answer_changed", wrap=ReplayOnConflict)
    assert invalid(result) == {"answers_conform_to_model"}
    v = verdict_of(result, "answers_conform_to_model")
    assert "[answer_changed]" in v.summary
    assert "answered replay_executed" in v.summary
    assert "legal at every point it may have run: refusal" in v.summary


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_a_forgotten_archive_confirmation_is_invalid_and_counted() -> None:
    result = await run_kind("archive", wrap=ForgetsArchives)
    assert {"ok_deletes_match_journal", "answers_conform_to_model"} <= invalid(result)
    assert "[archive]" in verdict_of(result, "answers_conform_to_model").summary
    assert result.counts["archive_confirms_forgotten"] == result.counts["confirms_forgotten"]
    assert result.counts["archive_confirms_forgotten"] >= 1


@pytest.mark.planted(control="test_without_a_plant_the_same_runs_are_valid")
async def test_silence_answered_with_an_error_is_invalid_naming_silence() -> None:
    result = await run_kind("silence", transport=SilenceIsAnError)
    assert invalid(result) == {"answers_make_progress"}
    v = verdict_of(result, "answers_make_progress")
    assert "[silence]" in v.summary
    assert "legal at every point it may have run: reask" in v.summary
