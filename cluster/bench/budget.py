"""The budget per flow: ours beside the SDK peer, CPU of the server, Redis and the load client.

Layer: cluster (the bench). Pure: built from the peer scenario's sides (``http_scenarios``,
all from one run, alternated); no I/O. The lab's ``bench-parts`` (``cluster.lab.parts``) builds
its own columns with ``side_budget`` and adds what the Redis client alone costs per call: what a
node's CPU is made of is the lab's question, what it costs beside the SDK's server is the
user's.
"""

from __future__ import annotations

from typing import Any

BUDGET_SIDES = ("ours", "peer_memory", "peer_redis")
"""The columns, in the order the peer scenario alternates them."""
WITHOUT_REDIS = frozenset({"peer_memory"})
"""Sides that use no Redis: the Redis CPU measured in their slots is other clients' noise, and
their cost per flow is their server process's alone."""


def ratio(a: float | None, b: float | None) -> float | None:
    """``a ÷ b`` to three digits, or None when either is missing or ``b`` is 0."""
    return round(a / b, 3) if a is not None and b else None


def side_budget(point: dict[str, Any], uses_redis: bool) -> dict[str, Any]:
    """One column: a side's aggregated slots (``http_scenarios.aggregate``)."""
    cpu = point["cpu_ms_per_flow"]
    total = cpu["servers"] + (cpu["redis"] if uses_redis else 0.0)
    return {
        "flows_per_s": point["flows_per_s"],
        "server": cpu["servers"],
        "redis": cpu["redis"] if uses_redis else None,
        "server_plus_redis": round(total, 3),
        "load_client": cpu["client"],
        "redis_scripts_per_flow": point["redis_scripts_per_flow"] if uses_redis else None,
    }


def budget(peer: dict[str, Any] | None) -> dict[str, Any] | None:
    """The budget of this run, or None when the peer scenario did not run."""
    if peer is None:
        return None
    sides = {s: side_budget(peer[s], s not in WITHOUT_REDIS) for s in BUDGET_SIDES}
    base = sides["peer_memory"]["server_plus_redis"]
    for column in sides.values():
        column["vs_peer_memory"] = ratio(column["server_plus_redis"], base)
    return {
        "concurrency": peer["concurrency"],
        "slot_s": peer["slot_s"],
        "rounds": len(peer["rounds"]),
        "sides": sides,
    }
