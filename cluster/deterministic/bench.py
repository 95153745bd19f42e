"""Deterministic simulation against today's simulation, side by side: flows/s per core and wall;
and a swarm's scaling from one worker process to two.

Layer: cluster (the bench; ``notes-cluster bench`` runs it after its scenarios, and
``python -m cluster.deterministic.bench --flows N --seed S`` alone). Both run the same flows
of the same seed on the embedded store in this process, one after the other: ``simulate`` (the
fakeredis server on a loopback port in a thread, real time: expiry races wait out their TTL)
and ``run_deterministic`` (in-process store, virtual time). Per core: completed flows over the
CPU seconds the process spent (every thread), so a loaded machine does not count against
either; wall: over the elapsed seconds (load, wait for expiry, check).

``swarm_scaling`` runs the same seeds on a pool of one worker process, then of two
(``cluster.deterministic.search``, the seeds in memory, nothing shrunk): flows per wall second
each, their ratio, and the workers' own CPU seconds (``RUSAGE_CHILDREN``, read once each pool
has exited). From the per-core rate it writes, on paper, what 2, 16 and 128 cores would run,
and how long a million flows would take on each: at the efficiency measured from one worker
to two (on a busy machine, well below one), and linear (seeds share nothing, so an idle
machine's cores each add a core's rate).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from cluster.deterministic.run import run_deterministic
from cluster.stopping import run_stoppable
from cluster.targets.simulate import SimulateOptions, simulate
from loadgen.runner import RunSettings
from loadgen.workload import tenants_for

QUICK_FLOWS = 500
FULL_FLOWS = 2_000
SWARM_SEEDS = 4
"""Seeds of the scaling runs: two rounds for two workers."""
SWARM_FLOWS = 150
"""Flows per seed of the scaling runs (small: the bench stays cheap)."""
PAPER_CORES = (16, 128)
MILLION = 1_000_000


def _measured(run: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = run()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def side_by_side(flows: int, seed: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Both runs of ``flows`` flows of ``seed``; their verdicts and rates."""
    options = SimulateOptions(
        settings=RunSettings(flows=flows, seed=seed, tenants=tenants_for(flows))
    )
    out: dict[str, Any] = {"flows": flows, "seed": seed}
    plain, wall, cpu = _measured(lambda: run_stoppable(partial(simulate, options)))
    out["simulate"] = _rates(plain.stats.tally.completed, plain.result.status, wall, cpu)
    det, wall, cpu = _measured(lambda: run_deterministic(options))
    out["deterministic"] = _rates(det.stats.tally.completed, det.result.status, wall, cpu) | {
        "virtual_s": round(det.virtual_s, 2)
    }
    a, b = out["simulate"], out["deterministic"]
    out["per_core_ratio"] = round(b["flows_per_cpu_s"] / max(a["flows_per_cpu_s"], 1e-9), 2)
    out["wall_ratio"] = round(b["flows_per_wall_s"] / max(a["flows_per_wall_s"], 1e-9), 2)
    log(
        f"  deterministic vs simulate, {flows} flows: {b['flows_per_cpu_s']} vs "
        f"{a['flows_per_cpu_s']} flows/s per core (x {out['per_core_ratio']}), "
        f"{b['flows_per_wall_s']} vs {a['flows_per_wall_s']} flows/s wall "
        f"(x {out['wall_ratio']}); {b['verdict'].upper()} / {a['verdict'].upper()}"
    )
    return out


def _rates(completed: int, verdict: str, wall: float, cpu: float) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "completed": completed,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "flows_per_wall_s": round(completed / max(wall, 1e-9), 1),
        "flows_per_cpu_s": round(completed / max(cpu, 1e-9), 1),
    }


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def swarm_scaling(
    seeds: int, flows: int, seed: int, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """``seeds`` seeds of ``flows`` flows on one worker process, then on two; see module."""
    from cluster.deterministic.fleet import local_executor
    from cluster.deterministic.search import SwarmPlan, run_swarm

    os.environ.setdefault("PYTHONHASHSEED", "0")  # the workers' (``fleet``)
    options = SimulateOptions(
        settings=RunSettings(flows=flows, seed=seed, tenants=tenants_for(flows))
    )
    plan = SwarmPlan(options, buggify=True, swarmed=False, seeds=seeds, shrink=False)
    out: dict[str, Any] = {"seeds": seeds, "flows_per_seed": flows}
    for workers in (1, 2):
        cpu = _children_cpu_s()
        wall = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="notes-bench-swarm-") as tmp:
            executor = local_executor(workers)
            try:
                report = run_swarm(
                    replace(plan, in_flight=workers + 1), executor, Path(tmp), lambda _: None
                )
            finally:
                executor.shutdown()
        wall = time.perf_counter() - wall
        cpu = _children_cpu_s() - cpu
        seed_cpu = sum(o.cpu_s for o in report.outcomes)
        out[f"workers_{workers}"] = {
            "verdict": report.verdict,
            "flows": report.flows,
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "flows_per_wall_s": round(report.flows / max(wall, 1e-9), 1),
            "flows_per_seed_cpu_s": round(report.flows / max(seed_cpu, 1e-9), 1),
        }
    one, two = out["workers_1"], out["workers_2"]
    out["scaling_1_to_2"] = round(two["flows_per_wall_s"] / max(one["flows_per_wall_s"], 1e-9), 2)
    per_core = two["flows_per_seed_cpu_s"]
    efficiency = min(out["scaling_1_to_2"] / 2, 1.0)
    out["efficiency"] = round(efficiency, 2)
    out["paper"] = {
        str(cores): {
            "flows_per_s": round(per_core * cores * efficiency),
            "million_flows_min": round(MILLION / max(per_core * cores * efficiency, 1e-9) / 60, 1),
            "flows_per_s_linear": round(per_core * cores),
            "million_flows_min_linear": round(MILLION / max(per_core * cores, 1e-9) / 60, 1),
        }
        for cores in (2, *PAPER_CORES)
    }
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    log(
        f"  swarm of {seeds} seeds x {flows} flows: {one['flows_per_wall_s']} flows/s on 1 "
        f"worker, {two['flows_per_wall_s']} on 2 (x {out['scaling_1_to_2']}); per core "
        f"{per_core} flows/s; on paper "
        + ", ".join(
            f"{c} cores {v['flows_per_s']} flows/s (a million in {v['million_flows_min']} min)"
            for c, v in out["paper"].items()
        )
        + f"; load average {out['load_average'][0]}"
    )
    return out


def main() -> None:
    """``python -m cluster.deterministic.bench``: print the side-by-side figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=QUICK_FLOWS)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--swarm", action="store_true", help="also the swarm's 1 -> 2 scaling")
    args = parser.parse_args()
    out = side_by_side(args.flows, args.seed)
    if args.swarm:
        out["swarm"] = swarm_scaling(SWARM_SEEDS, SWARM_FLOWS, args.seed)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
