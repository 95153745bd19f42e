"""The workload drives the whole tool surface: every tool a node lists is called by some race
kind, and a run of every kind once calls every one of them and stays VALID."""

from __future__ import annotations

from typing import Any

from cluster.local import InProcessTransport, open_local_cluster
from cluster.targets.in_process import simulation_config
from cluster.targets.simulate import SimulateOptions, simulate
from loadgen.clients import request
from loadgen.runner import RunSettings
from loadgen.workload import RACE_KINDS, TOOLS_DRIVEN

F_TOOLS = {
    "create": "notes_create",
    "update": "notes_update",
    "move": "notes_move",
    "list": "notes_list",
    "search": "notes_search",
    "setup": "notes_setup",
}
"""History operations -> the tool they call (``ask`` and ``confirm`` name theirs)."""


async def _listed() -> set[str]:
    config = simulation_config(2.0, 1)
    async with open_local_cluster(config, 1, seed=False) as cluster:
        reply = await InProcessTransport(cluster).send(0, "u0a", request("tools/list", {}))
    assert reply.body is not None
    return {t["name"] for t in reply.body["result"]["tools"]}


async def test_every_listed_tool_is_driven_by_a_race_kind() -> None:
    assert set(TOOLS_DRIVEN) == await _listed()
    for tool, kinds in TOOLS_DRIVEN.items():
        named = [k for k in kinds if not k.startswith("every kind")]
        assert set(named) <= set(RACE_KINDS), tool


async def test_a_run_of_every_kind_calls_every_tool_and_is_valid() -> None:
    settings = RunSettings(flows=len(RACE_KINDS), concurrency=4, seed=3, tenants=1)
    sim = await simulate(SimulateOptions(nodes=2, settings=settings, state_ttl_s=1.0))
    assert sim.result.status == "valid", [v for v in sim.result.verdicts if v.status != "valid"]
    called: set[str] = set()
    for op in sim.history.ops:
        value: dict[str, Any] = op.value
        if op.type == "invoke" and op.f in F_TOOLS:
            called.add(str(value.get("tool") or F_TOOLS[op.f]))
        elif op.type == "ok" and op.f in ("ask", "confirm") and value.get("tool"):
            called.add(str(value["tool"]))
    assert called == await _listed()
