"""Many seeds on an executor: a fixed swarm (``--workers N``, ``--seeds M``) or a search that
keeps drawing seeds until its time is up (``--for DURATION``); failures kept, shrunk, summed up.

Layer: cluster. Seeds ``seed``, ``seed + 1``, ... go to the executor as ``fleet.SeedJob``s, a
few more in flight than it has processes, so none waits for work. A passing seed leaves a line
in ``seeds.json`` only; a failing one its whole run folder (``seed-<N>``). Then every failing
seed is shrunk (in a search, only the ``shrink_each`` that failed fastest of each invariant,
as TigerBeetle's orchestrator prefers them), each into ``seed-<N>-shrunk`` with its replay
command, and ``failures.md`` / ``failures.json`` list the distinct failures: one per invariant
and shrunk shape (the race kinds of the flows kept, their count, the faults, the nodes).
Progress lines give seeds and flows per second and the failures found so far.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass, field, replace
from itertools import count
from pathlib import Path
from typing import Any

from cluster.deterministic.fleet import (
    SeedJob,
    SeedOutcome,
    ShrinkJob,
    ShrinkOutcome,
    run_seed,
    shrink_seed,
    unpack,
)
from cluster.machine import load_average, machine
from cluster.targets.simulate import SimulateOptions
from loadgen.run.folder import REPLAY_FILE, SEEDS_FILE

PROGRESS_EVERY_S = 5.0
"""Seconds between two progress lines (and one at the end)."""


@dataclass(frozen=True)
class SwarmPlan:
    """What to run: seeds from ``options.settings.seed`` on, ``seeds`` of them or, with
    ``for_s``, as many as fit in that many seconds."""

    options: SimulateOptions
    buggify: bool
    swarmed: bool
    seeds: int = 1
    for_s: float | None = None
    in_flight: int = 2
    """Jobs handed to the executor at once (its processes, plus one or two)."""
    shrink: bool = True
    shrink_each: int | None = None
    """Failing seeds shrunk per invariant, fastest first (None: every one)."""
    shrink_budget_s: float = 120.0
    shrink_budget_runs: int = 60
    command: str = ""
    """The command line that asked for the swarm (recorded in ``seeds.json``)."""
    where: str = ""
    """Where its seeds ran ("2 processes", "the Dask cluster at ...")."""
    planted: str | None = None
    """Test-only: see ``fleet.SeedJob.planted``."""


@dataclass
class Failure:
    """One distinct failure: an invariant and a shrunk shape, and the seeds that gave it."""

    invariant: str
    shape: str
    seeds: list[int]
    replays: list[str]
    summaries: list[str]

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class SwarmReport:
    """A finished swarm: every seed's outcome, every shrink, the distinct failures."""

    outcomes: list[SeedOutcome] = field(default_factory=list)
    shrunk: list[tuple[ShrinkOutcome, Path, str]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    wall_s: float = 0.0
    load_at_start: list[float] = field(default_factory=list)
    """This machine's load average when the swarm started (``cluster.machine``)."""

    @property
    def verdict(self) -> str:
        """Invalid when any seed is, valid when every seed is, else unknown."""
        verdicts = {o.verdict for o in self.outcomes}
        if "invalid" in verdicts:
            return "invalid"
        return "valid" if verdicts == {"valid"} else "unknown"

    @property
    def failing(self) -> list[int]:
        """The failing seeds, in order."""
        return sorted(o.seed for o in self.outcomes if o.verdict == "invalid")

    @property
    def flows(self) -> int:
        return sum(o.flows for o in self.outcomes)

    @property
    def cpu_s(self) -> float:
        """The seeds' CPU seconds, summed over every worker process."""
        return sum(o.cpu_s for o in self.outcomes)


def _seeds(plan: SwarmPlan) -> Iterator[int]:
    first = plan.options.settings.seed
    if plan.for_s is None:
        return iter(range(first, first + plan.seeds))
    return count(first)


def _job(plan: SwarmPlan, seed: int) -> SeedJob:
    options = replace(
        plan.options, run_dir=None, settings=replace(plan.options.settings, seed=seed)
    )
    return SeedJob(options, plan.buggify, plan.swarmed, plan.planted)


def run_swarm(
    plan: SwarmPlan, executor: Executor, out: Path, log: Callable[[str], None]
) -> SwarmReport:
    """Run ``plan`` on ``executor`` into the folder ``out`` (see the module docstring)."""
    report = SwarmReport(load_at_start=load_average())
    started = time.perf_counter()
    deadline = None if plan.for_s is None else started + plan.for_s
    seeds = _seeds(plan)
    running: set[Future[SeedOutcome]] = set()
    last_said = started

    def submit() -> bool:
        if deadline is not None and time.perf_counter() >= deadline:
            return False
        seed = next(seeds, None)
        if seed is None:
            return False
        running.add(executor.submit(run_seed, _job(plan, seed)))
        return True

    while len(running) < plan.in_flight and submit():
        pass
    while running:
        done, _ = wait(running, timeout=PROGRESS_EVERY_S, return_when=FIRST_COMPLETED)
        for future in done:
            running.discard(future)
            outcome = future.result()
            report.outcomes.append(outcome)
            if outcome.folder is not None:
                unpack(outcome.folder, out / f"seed-{outcome.seed}")
                log(f"seed {outcome.seed}: INVALID ({', '.join(outcome.invalid)})")
            submit()
        if time.perf_counter() - last_said >= PROGRESS_EVERY_S:
            last_said = time.perf_counter()
            log(progress(report, last_said - started))
    report.outcomes.sort(key=lambda o: o.seed)
    log(progress(report, time.perf_counter() - started))
    if plan.shrink and report.failing:
        _shrink_all(plan, executor, out, report, log)
    report.wall_s = time.perf_counter() - started
    write_summary(out, plan, report)
    return report


def progress(report: SwarmReport, elapsed_s: float) -> str:
    """One progress line: seeds and flows, per second, failures."""
    n, flows = len(report.outcomes), report.flows
    per = max(elapsed_s, 1e-9)
    return (
        f"swarm: {n} seeds ({n / per:.2f}/s), {flows} flows ({flows / per:.1f}/s), "
        f"{len(report.failing)} failing, {elapsed_s:.0f} s"
    )


def chosen_to_shrink(plan: SwarmPlan, report: SwarmReport) -> list[tuple[SeedOutcome, str]]:
    """(outcome, invariant) of each failing seed to shrink: its first invariant; with
    ``shrink_each``, only that many of each invariant, the fastest failing first."""
    by_invariant: dict[str, list[SeedOutcome]] = {}
    for o in report.outcomes:
        if o.verdict == "invalid" and o.folder is not None:
            by_invariant.setdefault(o.invalid[0], []).append(o)
    chosen: list[tuple[SeedOutcome, str]] = []
    for invariant, outcomes in sorted(by_invariant.items()):
        outcomes.sort(key=lambda o: (o.cpu_s, o.seed))
        kept = outcomes if plan.shrink_each is None else outcomes[: plan.shrink_each]
        chosen += [(o, invariant) for o in kept]
    return sorted(chosen, key=lambda c: c[0].seed)


def _shrink_all(
    plan: SwarmPlan,
    executor: Executor,
    out: Path,
    report: SwarmReport,
    log: Callable[[str], None],
) -> None:
    chosen = chosen_to_shrink(plan, report)
    log(f"swarm: shrinking {len(chosen)} failing seeds")
    futures = [
        executor.submit(
            shrink_seed,
            ShrinkJob(
                o.seed,
                o.folder or b"",
                invariant,
                plan.shrink_budget_s,
                plan.shrink_budget_runs,
                plan.planted,
            ),
        )
        for o, invariant in chosen
    ]
    groups: dict[tuple[str, str], Failure] = {}
    for future in futures:
        shrunk = future.result()
        folder = unpack(shrunk.folder, out / f"seed-{shrunk.seed}-shrunk")
        replay = f"notes-cluster simulate --replay {shlex.quote(str(folder))}"
        _rewrite_replay(folder, replay)
        report.shrunk.append((shrunk, folder, replay))
        log(f"seed {shrunk.seed}: {shrunk.summary}; replay: {replay}")
        shape = describe_shape(shrunk)
        found = groups.setdefault(
            (shrunk.invariant, shape), Failure(shrunk.invariant, shape, [], [], [])
        )
        found.seeds.append(shrunk.seed)
        found.replays.append(replay)
        found.summaries.append(shrunk.summary)
    report.failures = [groups[k] for k in sorted(groups)]


def _rewrite_replay(folder: Path, replay: str) -> None:
    """The shrunk folder's ``replay.sh`` names where it is now, not the worker's folder."""
    (folder / REPLAY_FILE).write_text(f'#!/bin/sh\n{replay} "$@"\n', encoding="utf-8")


def describe_shape(shrunk: ShrinkOutcome) -> str:
    """A shrunk case's shape: the race kinds of its flows, and its size."""
    faults = ", ".join(shrunk.faults) or "no faults"
    flows = f"{shrunk.flows} flow" + ("" if shrunk.flows == 1 else "s")
    return f"{flows} of {'+'.join(shrunk.kinds) or 'no kind'}; {faults}; {shrunk.nodes} nodes"


def write_summary(out: Path, plan: SwarmPlan, report: SwarmReport) -> None:
    """``seeds.json`` (the command, the machine with its load average at the start and the
    end, the totals and rates; every seed: verdict, history sha256, flows, CPU seconds; a
    failing seed's results too), and with failures ``failures.json`` and ``failures.md``."""
    runs = []
    for o in report.outcomes:
        row: dict[str, Any] = {
            "seed": o.seed,
            "verdict": o.verdict,
            "history_sha256": o.history_sha256,
            "flows": o.flows,
            "cpu_s": o.cpu_s,
            "wall_s": o.wall_s,
            "where": o.where,
        }
        if o.verdict == "invalid":
            row |= {"invalid": list(o.invalid), "run_dir": str(out / f"seed-{o.seed}")}
        runs.append(row)
    summary = {
        "command": plan.command,
        "where": plan.where,
        "machine": machine(),
        "load_average_at_start": report.load_at_start,
        "verdict": report.verdict,
        "seeds": len(report.outcomes),
        "flows": report.flows,
        "wall_s": round(report.wall_s, 1),
        "cpu_s": round(report.cpu_s, 1),
        "flows_per_wall_s": round(report.flows / report.wall_s, 1) if report.wall_s else None,
        "flows_per_cpu_s": round(report.flows / report.cpu_s, 1) if report.cpu_s else None,
        "failing": report.failing,
        "failures": [f.to_json() for f in report.failures],
        "runs": runs,
    }
    (out / SEEDS_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if not report.failures:
        return
    lines = [
        "# Distinct failures",
        "",
        f"{len(report.outcomes)} seeds from {plan.options.settings.seed}, {report.flows} flows, "
        f"{len(report.failing)} failing; one row per invariant and shrunk shape.",
        "",
    ]
    for f in report.failures:
        lines += [f"## {f.invariant}: {f.shape}", "", f"seeds: {', '.join(map(str, f.seeds))}", ""]
        lines += [f"    {r}" for r in f.replays] + [""]
    (out / "failures.md").write_text("\n".join(lines), encoding="utf-8")
    (out / "failures.json").write_text(
        json.dumps([f.to_json() for f in report.failures], indent=2) + "\n", encoding="utf-8"
    )
