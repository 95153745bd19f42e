"""The race workload against a target without a journal: history and observed final state only.

Layer: tests. ``cluster.targets.foreign.run_foreign`` drives the SDK's Python reference
(two instances, the real Redis) with opaque states and, after the run, lists what is left; the
checker (``loadgen.check.blackbox_check``) decides what that can decide and names the rest
``unknown``.
Against the reference as the SDK's docs show (no record of used states) it finds violations the
history and final state prove; with ``--used-state-store`` every decidable invariant is valid
and the verdict is UNKNOWN, naming the invariants only a journal decides; its run folder checks
again offline (``notes-cluster check``) to the same verdicts. Our own nodes, driven
the same way, give no violation either (the checker does not invent any).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from cluster.lab.sdk_references.references import open_reference
from cluster.serve import start_http_nodes
from cluster.targets.foreign import FOREIGN_KINDS, recheck_foreign, run_foreign
from loadgen.check.blackbox_check import UNDECIDABLE
from loadgen.check.exercise import ExerciseRule
from loadgen.check.verdict import CheckResult
from loadgen.runner import RunSettings
from nodes.serving.load_fixture import load_tokens
from nodes.serving.settings import settings_for
from store.client_factory import sync_client
from store.journal import scan_keys
from tests.conftest import require_real_redis

STATE_TTL_S = 5.0
SEED = int(os.environ.get("NOTES_CLUSTER_TEST_SEED") or secrets.randbelow(2**31))
"""The workload's seed (printed by each test): set NOTES_CLUSTER_TEST_SEED to repeat one."""
RUN = RunSettings(flows=len(FOREIGN_KINDS) * 3, duration_s=120, concurrency=6, seed=SEED)
TOKENS = {principal: token for token, principal in load_tokens().items()}
DECIDED = {
    "one_note_per_state",
    "no_note_acted_on_by_two_states",
    "told_executed_took_effect",
    "refused_answers_did_not_act",
    "notes_vanish_only_by_confirmation",
    "retries_learn_the_outcome",
    "before_expiry_honoured_client_clock",
    "exercised",
}


@pytest.fixture
def redis_prefix() -> Iterator[tuple[str, str]]:
    """The real Redis and a key prefix of this test's own (its keys deleted afterwards)."""
    url = require_real_redis()
    prefix = "nct" + secrets.token_hex(5)
    yield url, prefix
    sync = sync_client(url)
    keys = list(scan_keys(sync, f"{prefix}:*"))
    if keys:
        sync.delete(*keys)
    sync.close()


def _statuses(result: CheckResult) -> dict[str, str]:
    return {v.name: v.status for v in result.verdicts}


def _undecided_named(result: CheckResult) -> None:
    statuses = _statuses(result)
    for name, _ in UNDECIDABLE:
        assert statuses[name] == "unknown", name
        summary = next(v.summary for v in result.verdicts if v.name == name)
        assert summary.startswith("Not decidable without the server's journal")


@pytest.mark.planted(control="test_with_a_used_state_store_every_decidable_invariant_holds")
async def test_the_sdk_reference_without_a_used_state_store_is_found_invalid(
    redis_prefix: tuple[str, str],
) -> None:
    url, prefix = redis_prefix
    print(f"seed {SEED}")
    async with open_reference("python", url, prefix=prefix, state_ttl_s=STATE_TTL_S) as urls:
        sim = await run_foreign(urls, TOKENS, RUN, state_ttl_s=STATE_TTL_S)
    result = sim.result
    statuses = _statuses(result)
    assert result.status == "invalid", statuses
    # Retries and duplicates got errors for deletions that happened; an accept after a decline
    # deleted; each proven by the history and the final listing alone.
    assert statuses["retries_learn_the_outcome"] == "invalid"
    assert statuses["refused_answers_did_not_act"] == "invalid"
    assert statuses["notes_vanish_only_by_confirmation"] == "invalid"
    bad = next(v for v in result.verdicts if v.name == "retries_learn_the_outcome")
    assert bad.ops
    _undecided_named(result)


async def test_with_a_used_state_store_every_decidable_invariant_holds(
    redis_prefix: tuple[str, str], tmp_path: Path
) -> None:
    url, prefix = redis_prefix
    print(f"seed {SEED}")
    async with open_reference(
        "python", url, prefix=prefix, state_ttl_s=STATE_TTL_S, additions=("used-state-store",)
    ) as urls:
        sim = await run_foreign(urls, TOKENS, RUN, state_ttl_s=STATE_TTL_S, run_dir=tmp_path)
    statuses = _statuses(sim.result)
    for name in DECIDED:  # the control of the planted (store-less) reference above
        assert statuses[name] == "valid", (name, statuses)
    assert sim.result.status == "unknown"
    _undecided_named(sim.result)
    # The run folder holds what the check needs: checked again offline, the same verdicts.
    again = await trio.to_thread.run_sync(recheck_foreign, tmp_path, ExerciseRule())
    assert {v["name"]: v["status"] for v in again.invariants} == statuses


async def test_our_nodes_driven_as_a_foreign_target_show_no_violation(
    embedded_url: str, nursery: trio.Nursery
) -> None:
    print(f"seed {SEED}")
    settings = settings_for(None, True, STATE_TTL_S)
    prefix = "nct" + secrets.token_hex(5)
    urls = await start_http_nodes(
        nursery, settings, embedded_url, count=2, embedded=True, prefix=prefix
    )
    sim = await run_foreign(urls, TOKENS, RUN, state_ttl_s=STATE_TTL_S)
    statuses = _statuses(sim.result)
    assert {k: statuses[k] for k in DECIDED} == dict.fromkeys(DECIDED, "valid"), statuses
