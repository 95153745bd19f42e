"""The budget per flow: ours beside the SDK peer, CPU of the server, Redis and the load client,
metrics on ÷ off, and what the Redis client alone costs per call.

Layer: cluster (the bench). Pure: built from the peer scenario's sides (``http_scenarios``,
all from one run, alternated) and the Redis client scenario (``redis_clients``); no I/O.
The estimate of the Redis client's share multiplies the scripts a flow ran in Redis (counted
from ``INFO commandstats`` around each slot) by the client's CPU µs per ``EVALSHA`` measured
alone: it leaves out the few plain commands a flow sends and the client's own scheduling under
load, so it is a floor, not a profile.
"""

from __future__ import annotations

from typing import Any

BUDGET_SIDES = ("ours", "ours_coredis", "peer_memory", "peer_redis", "fixed")
"""The columns, in the order the peer scenario alternates them."""
WITHOUT_REDIS = frozenset({"peer_memory", "fixed"})
"""Sides that use no Redis: the Redis CPU measured in their slots is other clients' noise, and
their cost per flow is their server process's alone."""
REDIS_CLIENT = {"ours": "resp", "ours_coredis": "coredis"}
"""The Redis client each of our sides runs (``NOTES_CLUSTER_REDIS_CLIENT`` of its process)."""
NODE_BACKEND = "uvloop"
"""The event loop of the node processes: the client's µs per call are taken on it."""


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def client_us_per_call(clients: list[dict[str, Any]] | None) -> dict[str, float]:
    """Each Redis client's CPU µs per ``EVALSHA`` on the node's event loop."""
    return {
        r["client"]: float(r["cpu_us_per_call"])
        for r in clients or ()
        if r["backend"] == NODE_BACKEND
    }


def side_budget(point: dict[str, Any], side: str, us_per_call: dict[str, float]) -> dict[str, Any]:
    """One column: the side's aggregated slots (``http_scenarios.aggregate``)."""
    cpu = point["cpu_ms_per_flow"]
    uses_redis = side not in WITHOUT_REDIS
    total = cpu["servers"] + (cpu["redis"] if uses_redis else 0.0)
    client = REDIS_CLIENT.get(side)
    us = us_per_call.get(client) if client else None
    scripts = point["redis_scripts_per_flow"] if uses_redis else 0.0
    estimate = round(scripts * us / 1000, 3) if us is not None else None
    return {
        "flows_per_s": point["flows_per_s"],
        "server": cpu["servers"],
        "redis": cpu["redis"] if uses_redis else None,
        "server_plus_redis": round(total, 3),
        "load_client": cpu["client"],
        "redis_scripts_per_flow": scripts if uses_redis else None,
        "redis_client": client,
        "redis_client_us_per_call": us,
        "redis_client_ms_per_flow": estimate,
        "redis_client_share_of_server": _ratio(estimate, cpu["servers"]),
    }


def budget(
    peer: dict[str, Any] | None, clients: list[dict[str, Any]] | None
) -> dict[str, Any] | None:
    """The budget of this run, or None when the peer scenario did not run."""
    if peer is None:
        return None
    us_per_call = client_us_per_call(clients)
    sides = {s: side_budget(peer[s], s, us_per_call) for s in BUDGET_SIDES}
    base = sides["peer_memory"]["server_plus_redis"]
    for column in sides.values():
        column["vs_peer_memory"] = _ratio(column["server_plus_redis"], base)
    return {
        "concurrency": peer["concurrency"],
        "slot_s": peer["slot_s"],
        "rounds": len(peer["rounds"]),
        "sides": sides,
        "metrics_on_over_off": peer["metrics_on_over_off"],
        "metrics_on_over_off_95": peer["metrics_on_over_off_95"],
        "metrics_node_on_over_off": peer["metrics_node_on_over_off"],
        "redis_client_backend": NODE_BACKEND,
        "redis_client_us_per_call": us_per_call,
    }
