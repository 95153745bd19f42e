"""Deterministic simulation against today's simulation, side by side: flows/s per core and wall.

Layer: cluster (the bench; ``notes-cluster bench`` runs it after its scenarios, and
``python -m cluster.deterministic.bench --flows N --seed S`` alone). Both run the same flows
of the same seed on the embedded store in this process, one after the other: ``simulate`` (the
fakeredis server on a loopback port in a thread, real time: expiry races wait out their TTL)
and ``run_deterministic`` (in-process store, virtual time). Per core: completed flows over the
CPU seconds the process spent (every thread), so a loaded machine does not count against
either; wall: over the elapsed seconds (load, wait for expiry, check).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from cluster.deterministic.run import run_deterministic
from cluster.stopping import run_stoppable
from cluster.targets.simulate import SimulateOptions, simulate
from loadgen.runner import RunSettings
from loadgen.workload import tenants_for

QUICK_FLOWS = 500
FULL_FLOWS = 2_000


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


def main() -> None:
    """``python -m cluster.deterministic.bench``: print the side-by-side figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=QUICK_FLOWS)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    print(json.dumps(side_by_side(args.flows, args.seed), indent=2))


if __name__ == "__main__":
    main()
