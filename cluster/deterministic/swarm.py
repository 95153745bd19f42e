"""Swarm testing (``--swarm``) and several seeds at once (``--workers N``) for deterministic runs.

Layer: cluster. ``swarm`` lets the seed also pick the run's shape: how many nodes, the race
kinds' weights, the fault mix, the state TTL; the fault points are on. The choices go into the
run header and the run folder (``deterministic.json``), so ``--replay`` runs the same shape.
``run_seeds`` runs N seeds (``seed`` .. ``seed + N - 1``) as N independent deterministic runs in
N processes, each in a folder of its own (``seed-<N>``), and merges their verdicts into one:
invalid when any run is, valid when every run is, else unknown.
"""

from __future__ import annotations

import json
import multiprocessing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cluster.deterministic.world import stream
from cluster.faults import FaultKind
from cluster.targets.simulate import SimulateOptions
from loadgen.run.folder import RunFolder

SWARM_NODES = (2, 3, 4, 5)
SWARM_WEIGHT_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)
SWARM_FAULTS: tuple[FaultKind, ...] = ("nodes", "client", "lost-reply", "stall")
SWARM_FAULT_P = 0.5
SWARM_TTLS_S = (1.0, 1.5, 2.0, 3.0)


def swarm(options: SimulateOptions) -> SimulateOptions:
    """``options`` with nodes, weights, faults and TTL drawn from its seed."""
    rng = stream(options.settings.seed, "swarm")
    weights = {k: w * rng.choice(SWARM_WEIGHT_SCALES) for k, w in options.settings.weights.items()}
    faults = frozenset(f for f in SWARM_FAULTS if rng.random() < SWARM_FAULT_P)
    return replace(
        options,
        nodes=rng.choice(SWARM_NODES),
        state_ttl_s=rng.choice(SWARM_TTLS_S),
        faults=faults,
        settings=replace(options.settings, weights=weights),
    )


def describe(options: SimulateOptions) -> str:
    """The run's shape in one line (the header of a swarm run)."""
    weights = ", ".join(f"{k} {w:g}" for k, w in sorted(options.settings.weights.items()))
    faults = ", ".join(sorted(options.faults)) or "none"
    return (
        f"swarm: {options.nodes} nodes, state TTL {options.state_ttl_s:g} s, faults {faults}; "
        f"weights {weights}"
    )


@dataclass(frozen=True)
class SeedRun:
    """One seed's outcome, as its process reports it."""

    seed: int
    verdict: str
    history_sha256: str
    flows: int
    wall_s: float
    run_dir: str

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _one(job: tuple[SimulateOptions, bool, bool]) -> SeedRun:
    from cluster.deterministic.run import run_deterministic

    options, buggify, swarmed = job
    if swarmed:
        options = swarm(options)
    sim = run_deterministic(options, buggify=buggify)
    return SeedRun(
        options.settings.seed,
        sim.result.status,
        sim.history_sha256,
        sim.stats.tally.completed,
        sim.wall_s,
        str(options.run_dir),
    )


def merged_verdict(runs: list[SeedRun]) -> str:
    """Invalid when any run is, valid when every run is, else unknown."""
    verdicts = {r.verdict for r in runs}
    if "invalid" in verdicts:
        return "invalid"
    return "valid" if verdicts == {"valid"} else "unknown"


def run_seeds(
    options: SimulateOptions, workers: int, *, buggify: bool, swarmed: bool
) -> tuple[str, list[SeedRun]]:
    """``workers`` seeds from ``options.settings.seed`` on, one process each (fresh
    interpreters, the parent's environment: its hash seed); the merged verdict and each run.
    ``options.run_dir`` gets a ``seed-<N>`` folder per seed and a ``seeds.json``."""
    assert options.run_dir is not None
    jobs = []
    for k in range(workers):
        seed = options.settings.seed + k
        folder = options.run_dir / f"seed-{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        each = replace(options, run_dir=folder, settings=replace(options.settings, seed=seed))
        jobs.append((each, buggify, swarmed))
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        runs = pool.map(_one, jobs)
    verdict = merged_verdict(runs)
    summary = {"verdict": verdict, "runs": [r.to_json() for r in runs]}
    RunFolder(Path(options.run_dir)).seeds_file.write_text(
        json.dumps(summary, indent=2) + "\n", encoding="utf-8"
    )
    return verdict, runs
