"""``notes-cluster loadgen --foreign``: the race workload against a server without our journal.

Layer: cluster. Drives any server that serves the notes tool contract (``notes_create``,
``notes_list``, ``notes_delete``, ``notes_archive``) for the load tenants, e.g. the SDK
references (``cluster.lab.sdk_references.reference_sdk``), over Streamable HTTP. Nothing of the
server is read: states are opaque (``loadgen.states.OpaqueStates``: the lifetime must be told),
and after the run the final state is what ``notes_list`` shows. The checker
(``loadgen.check.blackbox_check``) decides what the history and that state decide, and names
what needs a journal as ``unknown``. Race kinds that need more than the contract are left out:
tools beyond it (``race_move``: ``notes_move``; ``edit_between`` and ``concurrent_updates``:
``notes_update``) and promises of our nodes that no foreign server makes (``shared_key``: the
idempotency-key extension; ``replay_after_expiry``: a recorded outcome kept past the state's
expiry).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import httpx

from loadgen.check.blackbox_check import check_without_journal
from loadgen.check.exercise import ExerciseRule
from loadgen.final_state import observe_final
from loadgen.history import DamagedRunFile, iter_history, read_json_file, recording
from loadgen.run.folder import RunFolder
from loadgen.run.pipeline import Plan, Run, judged
from loadgen.run.results import RecordedSettings, Results
from loadgen.runner import FlowSample, RunSettings, run_load
from loadgen.states import OpaqueStates
from loadgen.transport import HttpTransport
from loadgen.workload import RACE_KINDS

NEEDS_MORE_TOOLS = frozenset(
    {
        "race_move",
        "edit_between",
        "concurrent_updates",
        "shared_key",
        "replay_after_expiry",
        "quota_boundary",
    }
)
"""Race kinds that need more than the contract a foreign server is asked to serve: more tools,
or our nodes' extensions (an idempotency key, a replay grace past the expiry, tenants with
small quotas)."""

FOREIGN_KINDS: tuple[str, ...] = tuple(k for k in RACE_KINDS if k not in NEEDS_MORE_TOOLS)
HTTP_POOL = 64
FOREIGN_REPLAY_GRACE_MS = 1_000
"""Recorded in the settings only: a foreign server's grace is not known (nothing is waited)."""


def foreign_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """``weights`` without the kinds a foreign target cannot serve."""
    return {k: w for k, w in weights.items() if k in FOREIGN_KINDS}


async def run_foreign(
    urls: Sequence[str],
    tokens: Mapping[str, str],
    run: RunSettings,
    *,
    state_ttl_s: float,
    run_dir: Path | None = None,
    on_flow: Callable[[FlowSample], None] | None = None,
    exercise: ExerciseRule | None = None,
) -> Run:
    """Run the workload against ``urls``, observe the final state, check without a journal."""
    run = replace(run, weights=foreign_weights(run.weights), legacy_share=0.0)
    # The nodes outlive the run: a flow cut short deletes its notes through them.
    run = replace(run, clean_up_cut_short=True)
    plan = Plan(run, exercise or ExerciseRule()).fresh()  # each run's titles are its own
    folder = None if run_dir is None else RunFolder(run_dir)
    limits = httpx.Limits(max_connections=HTTP_POOL, max_keepalive_connections=HTTP_POOL)
    with recording(None if folder is None else folder.history_file) as history:
        async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
            transport = HttpTransport(urls, dict(tokens), client)
            states = OpaqueStates(int(state_ttl_s * 1000))
            stats = await run_load(
                transport, None, "", plan.settings, history, on_flow=on_flow, states=states
            )
            final = await observe_final(transport, history.ops)
    result = check_without_journal(history.ops, final, int(state_ttl_s * 1000))
    result = judged(result, stats.tally, plan.exercise, plan.settings, (FOREIGN_KINDS,))
    settings = RecordedSettings.of(
        plan.settings,
        nodes=len(urls),
        store="foreign",
        state_ttl_s=state_ttl_s,
        replay_grace_ms=FOREIGN_REPLAY_GRACE_MS,
        workers=1,
        exercise=plan.exercise,
        max_exp_ms=history.max_exp_ms,
        started_wall_ms=stats.started_wall_ms,
    )
    results = Results.of_run(result, stats, settings)
    if folder is not None:  # what the check holds the history to, beside it
        folder.final_state_file.write_text(json.dumps(final, indent=1) + "\n", "utf-8")
        folder.write_tally(stats.tally)
        results.write(folder)
    return Run(results, result, stats, history, folder)


def recheck_foreign(run_dir: Path, rule: ExerciseRule) -> Results:
    """``notes-cluster check`` of a ``loadgen --foreign`` folder: its history against its
    ``final_state.json``, as the ``results.json`` fields the check decides (``DamagedRunFile``
    when a file does not hold what the run writes)."""
    folder = RunFolder(run_dir)
    settings = Results.saved_settings(folder)
    final = read_json_file(folder.final_state_file, "the final state")
    ttl = settings.state_ttl_s
    if not isinstance(final, dict) or ttl is None:
        raise DamagedRunFile(f"{run_dir}: no final state or state lifetime of a foreign run")
    history = list(iter_history(folder.history_file))
    tally = folder.tally()
    result = check_without_journal(
        history, {str(k): str(v) for k, v in final.items()}, int(ttl * 1000)
    )
    result = judged(result, tally, rule, settings, (FOREIGN_KINDS,))
    return Results.of_check(result, tally)
