"""Swarm testing (``--swarm``) for deterministic runs: the seed picks the run's shape too.

Layer: cluster. ``swarm`` lets the seed also pick the run's shape: how many nodes, the race
kinds' weights, the fault mix, the state TTL; the fault points are on. The choices go into the
run header and the run folder (``deterministic.json``), so ``--replay`` runs the same shape.
Many seeds at once (``--workers``, ``--seeds``, ``--dask``, ``--for``): ``search`` and
``fleet``.
"""

from __future__ import annotations

from dataclasses import replace

from cluster.deterministic.world import stream
from cluster.faults import FaultKind
from cluster.targets.simulate import SimulateOptions

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
