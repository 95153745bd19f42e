"""Running the pack: the control scenario first, then every other scenario side by side.

Layer: loadgen (the pack). ``run_pack`` takes the target's instance URLs, what the pack is told
about the tool (``Contract``) and an HTTP client, and returns one ``Check`` per scenario;
``write_report`` writes ``checks.json`` and ``checks.md``. Scenarios run concurrently (a few at a
time, the expiry scenarios' waits beside them); each has its own integer (``{fresh}``), so none
meets another's target.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from pathlib import Path

import httpx
import trio

from loadgen.mrtr_pack.case import Case, Contract, SetupFailed
from loadgen.mrtr_pack.checks import Check, markdown
from loadgen.mrtr_pack.scenarios import CONTROL, SCENARIOS, Baseline, Scenario, Skip
from loadgen.mrtr_pack.wire import Wire

FRESH_STRIDE = 100
"""Scenario integers are a random run number times this plus the scenario's index."""

PARALLEL = 4
"""Scenarios in flight at once (besides those waiting for an expiry): enough to overlap the
waits, few enough that a slow single-process target answers each round well inside the
state's lifetime."""


async def _run_one(
    scenario: Scenario, index: int, run_number: int, contract: Contract, wire: Wire, base: Baseline
) -> Check:
    check = Check(scenario.id, scenario.name, scenario.description, spec_references=scenario.refs)
    case = Case(contract, wire, run_number * FRESH_STRIDE + index, check)
    try:
        status, text = await scenario.run(case, base)
    except Skip as exc:
        status, text = "SKIPPED", str(exc)
    except SetupFailed as exc:
        status, text = "FAILURE", f"setup: {exc}"
    check.details = case.details(text)
    return check.judge(status, "" if status == "SUCCESS" else text)


async def run_pack(
    urls: Sequence[str],
    contract: Contract,
    client: httpx.AsyncClient,
    *,
    run_number: int | None = None,
    scenarios: Sequence[Scenario] = SCENARIOS,
    parallel: int = PARALLEL,
) -> list[Check]:
    """Every check against the instances at ``urls`` (control first, its verdict included),
    ``parallel`` scenarios at a time (1: one after another, the expiry waits included)."""
    if not urls:
        raise ValueError("at least one target URL")
    number = secrets.randbelow(10**7) if run_number is None else run_number
    wire = Wire(urls, client)
    base = Baseline()
    first = await _run_one(CONTROL, 0, number, contract, wire, base)
    checks: list[Check | None] = [None] * len(scenarios)
    turns = trio.CapacityLimiter(parallel)

    async def one(i: int) -> None:
        if scenarios[i].waits and parallel > 1:
            checks[i] = await _run_one(scenarios[i], i + 1, number, contract, wire, base)
            return
        async with turns:
            checks[i] = await _run_one(scenarios[i], i + 1, number, contract, wire, base)

    async with trio.open_nursery() as nursery:
        for i in range(len(scenarios)):
            nursery.start_soon(one, i)
    return [first, *(c for c in checks if c is not None)]


def write_report(out_dir: Path, checks: Sequence[Check], urls: Sequence[str]) -> None:
    """``checks.json`` (the records) and ``checks.md`` (the table) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    records = [c.to_json() for c in checks]
    (out_dir / "checks.json").write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    (out_dir / "checks.md").write_text(markdown(checks, urls), encoding="utf-8")
