"""Every check of the MRTR pack can fail: one flawed server per check makes that check, and no
other, report FAILURE; the same server without a flaw passes all 16.

Layer: tests. The servers are ``tests/mrtr_bad_servers.py`` (a counter behind a confirm-before-
act form, written from the spec), each on its own loopback port under hypercorn, all checked at
once. That our own nodes pass every check is ``tests/test_mrtr_pack_ours.py``.
"""

from __future__ import annotations

from typing import Any

import httpx
import trio

from loadgen.mrtr_pack.checks import Check
from loadgen.mrtr_pack.pack import run_pack
from loadgen.mrtr_pack.scenarios import CONTROL, SCENARIOS
from tests.mrtr_bad_servers import CONTRACT, FLAWS, CounterServer, Flaw, serve_bad_server

CHECK_IDS = [CONTROL.id, *(s.id for s in SCENARIOS)]


async def _checks(flaw: Flaw) -> dict[str, Check]:
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(serve_bad_server, CounterServer(flaw))
        async with httpx.AsyncClient(timeout=30) as client:
            checks = await run_pack(urls, CONTRACT, client)
        nursery.cancel_scope.cancel()
    return {c.id: c for c in checks}


def _failures(checks: dict[str, Check]) -> dict[str, str]:
    return {k: c.error_message for k, c in checks.items() if c.status == "FAILURE"}


async def test_each_check_fails_on_its_flaw_alone_and_all_pass_without_one() -> None:
    assert sorted(FLAWS) == sorted(CHECK_IDS), "one flaw per check"
    runs: dict[Flaw, dict[str, Check]] = {}

    async def run(flaw: Flaw) -> None:
        runs[flaw] = await _checks(flaw)

    async with trio.open_nursery() as nursery:
        for flaw in Flaw:
            nursery.start_soon(run, flaw)
    correct = runs[Flaw.NONE]
    statuses: dict[str, Any] = {k: (c.status, c.error_message) for k, c in correct.items()}
    assert all(c.status == "SUCCESS" for c in correct.values()), statuses
    wrong = {
        flaw.value: _failures(runs[flaw])
        for flaw in FLAWS.values()
        if set(_failures(runs[flaw])) != {flaw.value}
    }
    assert not wrong, wrong
