"""The MRTR conformance pack against our own nodes: three HTTP nodes, every check SUCCESS.

Layer: tests. The nodes run as trio tasks of the test process over the store under test (the
embedded one, then the real Redis), with a short state lifetime so the expiry checks run; the
pack is told our tool contract by ``cluster.mrtr_conformance.demo_contract`` (the defaults of
``notes-cluster conformance`` without ``--tool``). The CLI test runs the console script for
its exit codes: 0 when no check fails, 1 on a failure, 2 on bad usage.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import trio

from cluster.mrtr_conformance import demo_contract, run_conformance
from cluster.serve import start_http_nodes
from loadgen.mrtr_pack.scenarios import CONTROL, SCENARIOS
from loadgen.mrtr_pack.wire import Wire, WireCall
from nodes.serving.demo import ALICE_NOTES
from nodes.serving.settings import demo_settings

ROOT = str(Path(__file__).resolve().parent.parent)
MIN_EXPIRY_MARGIN_S = 2.0
"""How far before and after the expiry the expiry checks answer, at the least."""
MARGIN_PER_PROBE = 20
"""The margin in slowest probe round trips: an accept is a few round trips of work, and a
machine that slowed the probes will slow them too."""
PROBES = 8


async def measured_margin_s(urls: list[str], token: str) -> float:
    """The expiry checks' margin from the load this machine is under now: the slowest of a few
    ``notes_list`` round trips, times ``MARGIN_PER_PROBE``, never below the minimum. A quiet
    machine keeps the minimum; a machine running other suites beside this one widens it, so the
    checks judge the target's expiry and not the scheduler's delays."""
    wire = Wire(urls, httpx.AsyncClient())
    call = WireCall("notes_list", {"workspaceUri": ALICE_NOTES})
    slowest = 0.0
    async with wire.client:
        for i in range(PROBES):
            start = time.monotonic()
            ex = await wire.call("probe", i, call, token)
            assert ex.reply is not None, ex.problem
            slowest = max(slowest, time.monotonic() - start)
    return max(MIN_EXPIRY_MARGIN_S, MARGIN_PER_PROBE * slowest)


async def test_every_check_succeeds_against_a_three_node_demo_cluster(
    redis_url: str, embedded_url: str, key_prefix: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    contract = demo_contract()
    assert contract.token is not None
    probe_urls = await start_http_nodes(  # a node of its own, keys under this test's prefix
        nursery,
        demo_settings(),
        redis_url,
        count=1,
        embedded=redis_url == embedded_url,
        prefix=f"{key_prefix}:probe",
        name="probe",
    )
    margin = await measured_margin_s(probe_urls, contract.token)
    state_ttl_s = 4 * margin  # longer than both margins with room between them
    print(f"expiry margin {margin:.2f} s, state lifetime {state_ttl_s:.2f} s")
    settings = demo_settings().with_state_ttl(state_ttl_s)
    urls = await start_http_nodes(
        nursery,
        settings,
        redis_url,
        count=3,
        embedded=redis_url == embedded_url,
        prefix=key_prefix,
    )
    checks = await run_conformance(
        urls, demo_contract(state_ttl_s, expiry_margin_s=margin), tmp_path
    )
    statuses = {c.id: c.status for c in checks}
    assert statuses == dict.fromkeys([CONTROL.id, *(s.id for s in SCENARIOS)], "SUCCESS"), [
        (c.id, c.error_message) for c in checks if c.status != "SUCCESS"
    ]
    records = json.loads((tmp_path / "checks.json").read_text(encoding="utf-8"))
    assert [r["id"] for r in records] == list(statuses)
    for r in records:
        assert set(r) >= {"id", "name", "description", "status", "timestamp", "specReferences"}
        assert r["details"]["requests"], r["id"]
    assert "| `mrtr-concurrent-duplicates`" in (tmp_path / "checks.md").read_text("utf-8")


def test_bad_arguments_are_a_usage_error_exit_2() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    cli = [sys.executable, "-c", "from cluster.cli import main; main()"]
    cmd = [*cli, "conformance", "--target", "http://127.0.0.1:9/mcp", "--tool", "t"]
    cmd += ["--arguments", "[1]"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    assert "--arguments: not a JSON object" in out.stderr
    remote = [*cli, "conformance", "--target", "http://192.0.2.1/mcp"]
    out = subprocess.run(remote, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert out.returncode == 2
    assert "beyond loopback" in out.stderr


async def test_the_command_exits_0_when_no_check_fails_and_1_on_a_failure(
    embedded_url: str, nursery: trio.Nursery, tmp_path: Path
) -> None:
    settings = demo_settings()
    prefix = "nct" + secrets.token_hex(5)
    urls = await start_http_nodes(
        nursery, settings, embedded_url, count=2, embedded=True, prefix=prefix
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    cli = [sys.executable, "-c", "from cluster.cli import main; main()", "conformance"]
    base = [*cli, "--target", ",".join(urls)]
    ok = await trio.run_process(
        [*base, "--out", str(tmp_path)],
        capture_stdout=True,
        capture_stderr=True,
        env=env,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    records = json.loads(await trio.Path(tmp_path / "checks.json").read_text(encoding="utf-8"))
    skipped = {r["id"] for r in records if r["status"] == "SKIPPED"}
    assert skipped == {"mrtr-before-expiry", "mrtr-after-expiry"}  # no --state-ttl given
    assert {r["status"] for r in records} == {"SUCCESS", "SKIPPED"}
    # A tool that never asks is no confirm-before-act tool: every check fails its setup.
    wrong = [
        *base,
        "--tool",
        "notes_list",
        "--arguments",
        json.dumps({"workspaceUri": ALICE_NOTES}),
    ]
    bad = await trio.run_process(
        [*wrong, "--token", "alice-demo-token"],
        capture_stdout=True,
        capture_stderr=True,
        env=env,
        check=False,
    )
    assert bad.returncode == 1, bad.stderr
    assert b"did not ask for a form" in bad.stdout
