"""``notes-cluster loadgen --foreign``: the race workload against a server without our journal.

Layer: cluster (an experiment). Drives any server that serves the notes tool contract
(``notes_create``, ``notes_list``, ``notes_delete``, ``notes_archive``) for the load tenants,
e.g. the SDK references (``cluster.experiments.conformance``), over Streamable HTTP. Nothing of
the server is read: states are opaque (``loadgen.states.OpaqueStates``: the lifetime must be
told), and after the run the final state is what ``notes_list`` shows. The checker
(``loadgen.check.blackbox_check``) decides what the history and that state decide, and names what
needs a journal as ``unknown``. Race kinds that need tools beyond the contract (``race_move``:
``notes_move``, ``edit_between``: ``notes_update``) are left out.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from cluster.experiments.simulate import SimulateOptions, Simulation, finish, races
from loadgen.check.blackbox_check import check_without_journal
from loadgen.check.exercise import ExerciseRule, exercise_verdict
from loadgen.final_state import observe_final
from loadgen.history import (
    DamagedRunFile,
    close_history,
    iter_history,
    open_history,
    read_json_file,
)
from loadgen.runner import FlowSample, RunSettings, run_load
from loadgen.states import OpaqueStates
from loadgen.tally import read_tallies
from loadgen.transport import HttpTransport
from loadgen.workload import RACE_KINDS

NEEDS_MORE_TOOLS = frozenset({"race_move", "edit_between"})
"""Race kinds that use tools beyond the contract a foreign server is asked to serve."""

FOREIGN_KINDS: tuple[str, ...] = tuple(k for k in RACE_KINDS if k not in NEEDS_MORE_TOOLS)
HTTP_POOL = 64
FINAL_STATE_FILE = "final_state.json"
"""In the run folder: note id -> the workspace it was listed in after the run."""


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
) -> Simulation:
    """Run the workload against ``urls``, observe the final state, check without a journal."""
    run = replace(run, weights=foreign_weights(run.weights), legacy_share=0.0)
    if run.tag == "run":  # a store outlives runs: each run's titles are its own
        run = replace(run, tag=secrets.token_hex(3))
    # The nodes outlive the run: a flow cut short deletes its notes through them.
    run = replace(run, clean_up_cut_short=True)
    options = SimulateOptions(
        nodes=len(urls),
        state_ttl_s=state_ttl_s,
        settings=run,
        run_dir=run_dir,
        exercise=exercise or ExerciseRule(),
    )
    history = open_history(run_dir)
    limits = httpx.Limits(max_connections=HTTP_POOL, max_keepalive_connections=HTTP_POOL)
    try:
        async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
            transport = HttpTransport(urls, dict(tokens), client)
            states = OpaqueStates(int(state_ttl_s * 1000))
            stats = await run_load(
                transport, None, "", run, history, on_flow=on_flow, states=states
            )
            final = await observe_final(transport, history.ops)
    finally:
        close_history(history)
    if run_dir is not None:  # what the check holds the history to, beside it
        (run_dir / FINAL_STATE_FILE).write_text(json.dumps(final, indent=1) + "\n", "utf-8")
    result = check_without_journal(history.ops, final, int(state_ttl_s * 1000))
    exercised = exercise_verdict(stats.tally, (FOREIGN_KINDS,), options.exercise, run.weights)
    result = replace(result, verdicts=(*result.verdicts, exercised))
    return finish(
        Simulation(result, stats, history, races(stats.tally), run_dir, options, "foreign")
    )


def recheck_foreign(run_dir: Path, rule: ExerciseRule) -> dict[str, Any]:
    """``notes-cluster check`` of a ``loadgen --foreign`` folder: its history against its
    ``final_state.json``, as the ``results.json`` fields the check decides (``DamagedRunFile``
    when a file does not hold what the run writes)."""
    saved = read_json_file(run_dir / "results.json", "the run's results")
    final = read_json_file(run_dir / FINAL_STATE_FILE, "the final state")
    settings = saved.get("settings") if isinstance(saved, dict) else None
    ttl = settings.get("state_ttl_s") if isinstance(settings, dict) else None
    if not isinstance(final, dict) or not isinstance(ttl, int | float):
        raise DamagedRunFile(f"{run_dir}: no final state or state lifetime of a foreign run")
    history = list(iter_history(run_dir / "history.jsonl"))
    tally = read_tallies(run_dir)
    result = check_without_journal(
        history, {str(k): str(v) for k, v in final.items()}, int(ttl * 1000)
    )
    weights = settings.get("weights") if isinstance(settings, dict) else None
    exercised = exercise_verdict(tally, (FOREIGN_KINDS,), rule, weights)
    result = replace(result, verdicts=(*result.verdicts, exercised))
    return {
        "verdict": result.status,
        "invariants": [v.to_json() for v in result.verdicts],
        "counts": dict(result.counts),
        "kinds": tally.per_kind(),
        "flows": {"total": tally.total, "completed": tally.completed},
    }
