"""Shrinking a failing deterministic run folder: ``loadgen.shrinking``'s search over real runs.

Layer: cluster. A deterministic run is its options; a ``loadgen.shrinking.CandidateRun``
is what the search may cut from them: the planned flows it keeps (``RunSettings.only_flows``:
each kept flow keeps its id, kind and draws, which depend on the seed and its index alone), the
fault kinds it still injects (indices into the run's sorted kinds, played through
``SimulateOptions.injected``, so the nodes stay configured as in the original), its nodes, and
two settings the search may simplify (fault points off, node clocks unskewed). Each attempt is
one deterministic run in this process, checked in memory; the search keeps a case only when it
still breaks the original invariant.

The first cut is the failing invariant's own: the flows of the operations it names (history
indices of ``results.json``), then the flows of their tenants (a tenant is the checker's
partition: every invariant is local to one). ``shrink_folder`` runs the minimal case into its
own run folder, which ``simulate --replay`` runs again bit for bit, and writes beside it the
command that replays it, ``anomaly.txt`` (``loadgen.anomaly_text``) and ``lanes.png``
(``loadgen.flow_lanes``).
"""

from __future__ import annotations

import json
import shlex
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cluster.deterministic.run import (
    DeterministicRun,
    options_from_json,
    read_settings,
    run_deterministic,
)
from cluster.targets.simulate import SimulateOptions
from loadgen.history import DamagedRunFile
from loadgen.run.folder import RunFolder
from loadgen.run.results import Results
from loadgen.shrinking import Budget, CandidateRun, ShrinkResult, Simplification, shrink

SIMPLER = (Simplification("buggify", False), Simplification("skew", False))
"""Settings a minimal case is tried without: the fault points, then the nodes' clock skew."""

LANES_FLOWS_MAX = 12
"""A minimal case of more flows is drawn with only the flows its invariant names."""


@dataclass(frozen=True)
class Failing:
    """A failing deterministic run folder, read: what it ran and what it broke."""

    options: SimulateOptions
    buggify: bool
    skew: bool
    invariant: str
    ops: tuple[int, ...]
    """The history indices the invariant names."""
    hints: tuple[tuple[int, ...], ...] = ()
    """The first cuts (``hints``): the flows of ``ops``, then every flow of their tenants."""


def read_failing(run_dir: Path, invariant: str | None = None) -> Failing:
    """``run_dir``'s settings and its invalid ``invariant`` (None: the first invalid one);
    ValueError saying what is wrong (no deterministic run, not INVALID, damaged files)."""
    saved = read_settings(run_dir)
    try:
        options = options_from_json(saved, None)
        found = Results.read(RunFolder(run_dir))
    except (DamagedRunFile, KeyError, TypeError) as exc:
        raise ValueError(f"{run_dir}: cannot read the run ({exc})") from None
    if found is None:
        raise ValueError(f"{run_dir}: no results of a run in it")
    invalid = [v for v in found.invariants if v.get("status") == "invalid"]
    if not invalid:
        raise ValueError(f"{run_dir} is not INVALID: nothing to shrink")
    chosen = [v for v in invalid if invariant is None or v.get("name") == invariant]
    if not chosen:
        names = ", ".join(str(v.get("name")) for v in invalid)
        raise ValueError(f"{run_dir} does not break {invariant} (it breaks {names})")
    first = chosen[0]
    ops = tuple(int(i) for i in first.get("ops", []))
    history = RunFolder(run_dir).history_file
    try:
        cuts = hints(history, ops, options.settings.first_flow) if history.exists() else []
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{history}: cannot read it ({exc})") from None
    return Failing(
        options,
        bool(saved.get("buggify", False)),
        bool(saved.get("skew", True)),
        str(first["name"]),
        ops,
        tuple(cuts),
    )


def case_of(options: SimulateOptions, *, buggify: bool, skew: bool) -> CandidateRun:
    """The shrink case a run's options are."""
    kinds = sorted(options.faults)
    injected = kinds if options.injected is None else sorted(options.injected)
    return CandidateRun(
        flows=tuple(options.settings.planned()),
        faults=tuple(kinds.index(k) for k in injected),
        nodes=options.nodes,
        settings=(("buggify", buggify), ("skew", skew)),
    )


def options_of(case: CandidateRun, original: SimulateOptions) -> SimulateOptions:
    """The options that run ``case``, cut from ``original``'s."""
    kinds = sorted(original.faults)
    s = original.settings
    only = None if case.flows == tuple(range(s.flows)) else case.flows
    injected = None if len(case.faults) == len(kinds) else frozenset(kinds[i] for i in case.faults)
    return replace(
        original,
        nodes=case.nodes,
        injected=injected,
        settings=replace(s, only_flows=only),
        run_dir=None,
    )


def run_case(
    case: CandidateRun, original: SimulateOptions, run_dir: Path | None
) -> DeterministicRun:
    """One deterministic run of ``case`` (into ``run_dir``, or checked in memory)."""
    return run_deterministic(
        replace(options_of(case, original), run_dir=run_dir),
        buggify=bool(case.setting("buggify")),
        skew=bool(case.setting("skew")),
    )


def invalid_names(sim: DeterministicRun) -> set[str]:
    """The invariants a run found invalid."""
    return {v.name for v in sim.result.verdicts if v.status == "invalid"}


def hints(history: Path, ops: Iterable[int], first_flow: int = 0) -> list[tuple[int, ...]]:
    """The first cuts, as flow indices: the flows of the history entries ``ops`` names, then
    every flow of their tenants (one streaming pass over ``history``)."""
    wanted = set(ops)
    named: set[int] = set()
    tenant_of: dict[int, str] = {}
    flows_of: dict[str, set[int]] = defaultdict(set)
    with history.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            flow = int(row["flow"]) - first_flow
            if int(row["index"]) in wanted:
                named.add(flow)
            tenant = (row.get("value") or {}).get("tenant")
            if row.get("type") == "invoke" and tenant:
                tenant_of.setdefault(flow, str(tenant))
                flows_of[str(tenant)].add(flow)
    partition = {g for f in named if f in tenant_of for g in flows_of[tenant_of[f]]}
    return [tuple(sorted(named)), tuple(sorted(partition | named))]


@dataclass(frozen=True)
class Shrunk:
    """A finished shrink: the search's result and the minimal case's run."""

    found: ShrinkResult
    sim: DeterministicRun
    out: Path
    replay: str
    """The command that replays the minimal case."""

    @property
    def reproduced(self) -> bool:
        """The minimal case's run breaks the original invariant (it always should)."""
        return self.found.invariant in invalid_names(self.sim)


def shrink_folder(
    failing: Failing,
    out: Path,
    budget: Budget,
    on_attempt: Callable[[CandidateRun, set[str]], None] | None = None,
) -> Shrunk:
    """Shrink the ``failing`` run (``read_failing``) within ``budget``, keeping its invariant
    broken; run the minimal case into ``out`` (an empty folder) and write its replay command,
    anomaly text and lanes there. ``on_attempt`` hears each case tried and the invariants it
    broke."""
    options = failing.options
    original = case_of(options, buggify=failing.buggify, skew=failing.skew)

    def attempt(case: CandidateRun) -> set[str]:
        broke = invalid_names(run_case(case, options, None))
        if on_attempt is not None:
            on_attempt(case, broke)
        return broke

    found = shrink(
        original,
        attempt,
        failing.invariant,
        hints=failing.hints,
        simplifications=SIMPLER,
        budget=budget,
    )
    sim = run_case(found.minimal, options, out)
    replay = f"notes-cluster simulate --replay {shlex.quote(str(out))}"
    RunFolder(out).replay_file.write_text(f'#!/bin/sh\n{replay} "$@"\n', encoding="utf-8")
    write_explanation(out, failing.invariant, f"seed {options.settings.seed}")
    return Shrunk(found, sim, out, replay)


def write_explanation(out: Path, invariant: str, title: str) -> None:
    """``anomaly.txt`` (Let / Then of ``invariant``) and ``lanes.png`` (every flow of the run,
    or, past ``LANES_FLOWS_MAX``, the flows the invariant names; fault windows shaded) of the
    run folder ``out``."""
    from loadgen.anomaly_text import let_then
    from loadgen.flow_lanes import fault_windows, render_lanes

    rows = [json.loads(line) for line in RunFolder(out).history_file.open(encoding="utf-8")]
    found = Results.read(RunFolder(out))
    verdict = None if found is None else _invalid_entry(found, invariant)
    text = (
        let_then(verdict, rows)
        if verdict is not None
        else f"{invariant}: not broken by this run (the minimal case did not reproduce it)\n"
    )
    RunFolder(out).anomaly_file.write_text(
        text if text.endswith("\n") else text + "\n", encoding="utf-8"
    )
    faults = RunFolder(out).own_fault_rows()
    t0 = min((int(r["time_ms"]) for r in rows), default=0)
    drawn, what = rows, f"{title}: {invariant}"
    if len({r["flow"] for r in rows}) > LANES_FLOWS_MAX and verdict is not None:
        named = {int(i) for i in verdict.get("ops", [])}
        flows = {r["flow"] for r in rows if int(r["index"]) in named}
        drawn = [r for r in rows if r["flow"] in flows]
        what += " (the flow it names)" if len(flows) == 1 else f" (the {len(flows)} flows it names)"
    render_lanes(drawn, fault_windows(faults, t0), RunFolder(out).lanes_file, what)


def _invalid_entry(results: Results, invariant: str) -> dict[str, Any] | None:
    for v in results.invariants:
        if v.get("name") == invariant and v.get("status") == "invalid":
            return dict(v)
    return None
