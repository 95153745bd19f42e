"""The official MCP conformance suite (``@modelcontextprotocol/conformance``) against a node.

Layer: tests. One HTTP node, as ``notes-cluster serve --demo --demo-anonymous alice`` serves it
(in-process on the embedded store, then a node process on the real Redis; the suite sends no
bearer token: requests without one act as alice, on loopback only), gets every server scenario
of the pinned suite (``--suite all``: the 2025-11-25 ones; the suite has no 2026-07-28 server
scenarios yet). A scenario fails when one of its checks is a FAILURE or a WARNING (the suite's
own rule). The run must fail exactly the scenarios of
``tests/js/conformance-expected-failures.json``, each of which needs a test tool, prompt,
resource or method of the suite's reference server that a notes server does not serve: any
other failure fails this test, and so does an expected failure that starts passing (the list
stays true).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from cluster.serve import seed_demo_notes, start_http_nodes, start_process_nodes
from nodes.serving.settings import demo_settings, with_demo_anonymous
from store.client_factory import sync_client
from store.journal import scan_keys
from tests.conftest import require_real_redis
from tests.js_clients import JS_DIR, JsEnv, require_js, run_node

EXPECTED = JS_DIR / "conformance-expected-failures.json"
SUITE = "@modelcontextprotocol/conformance"
SUITE_TIMEOUT_S = 600.0
"""Bound on the whole suite (about 20 s on a quiet machine)."""
RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def expected_failures() -> dict[str, str]:
    """Scenario -> reason, checked for agreement between the suite's list and the reasons."""
    raw = json.loads(EXPECTED.read_text())
    listed: list[str] = raw["server"]
    reasons: dict[str, str] = raw["reasons"]
    assert len(set(listed)) == len(listed), "a scenario is listed twice"
    assert set(listed) == set(reasons), "every expected failure needs a reason, and only those"
    assert all(reason.strip() for reason in reasons.values())
    return reasons


def scenario_checks(out_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Each scenario's checks, from the suite's ``-o`` folder."""
    found: dict[str, list[dict[str, Any]]] = {}
    for folder in sorted(out_dir.iterdir()):
        match = RESULT_DIR.match(folder.name)
        assert match is not None, f"unexpected result folder {folder.name}"
        scenario = match["scenario"]
        assert scenario not in found, f"{scenario} ran twice"
        found[scenario] = json.loads((folder / "checks.json").read_text())
    return found


def failed(checks: list[dict[str, Any]]) -> bool:
    return any(c["status"] in ("FAILURE", "WARNING") for c in checks)


@pytest.fixture(params=["in-process", "processes"])
async def anonymous_node(
    request: pytest.FixtureRequest, embedded_url: str, nursery: trio.Nursery
) -> AsyncIterator[str]:
    """One node as ``serve --demo --demo-anonymous alice`` runs it: a trio task on the embedded
    store, then a node process (uvicorn, the production path) on the real Redis."""
    settings = with_demo_anonymous(demo_settings(), "alice", "127.0.0.1")
    prefix = "nct" + secrets.token_hex(5)
    processes = request.param == "processes"
    url = require_real_redis() if processes else embedded_url
    await seed_demo_notes(url, not processes, prefix=prefix)
    start = start_process_nodes if processes else start_http_nodes
    (node,) = await start(nursery, settings, url, count=1, embedded=not processes, prefix=prefix)
    yield node
    if processes:
        sync = sync_client(url)
        keys = list(scan_keys(sync, f"{prefix}:*"))
        if keys:
            sync.delete(*keys)
        sync.close()


@pytest.fixture
def js() -> JsEnv:
    return require_js()


async def test_the_official_conformance_suite_fails_only_the_expected_scenarios(
    js: JsEnv, anonymous_node: str, tmp_path: Path
) -> None:
    reasons = expected_failures()
    out_dir = tmp_path / "results"
    done = await run_node(
        js,
        [
            js.bin(SUITE, "conformance"),
            "server",
            "--url",
            anonymous_node,
            "--suite",
            "all",
            "--expected-failures",
            EXPECTED,
            "-o",
            out_dir,
        ],
        home=tmp_path,
        timeout_s=SUITE_TIMEOUT_S,
    )
    results = scenario_checks(out_dir)
    failing = {name for name, checks in results.items() if failed(checks)}
    unexpected = {
        name: [c.get("errorMessage") for c in results[name] if c["status"] != "SUCCESS"]
        for name in sorted(failing - set(reasons))
    }
    stale = sorted(set(reasons) - failing)
    assert not unexpected, f"failures not in {EXPECTED.name}: {unexpected}"
    assert not stale, f"expected failures that pass now (remove them from {EXPECTED.name}): {stale}"
    assert set(reasons) <= set(results), "every expected failure ran"
    # The suite agrees (its own baseline check), and the scenarios this node can pass ran.
    assert done.returncode == 0, done.stdout[-3000:]
    for scenario in ("server-initialize", "ping", "tools-list", "server-sse-multiple-streams"):
        assert not failed(results[scenario]), results[scenario]
    rebinding = {c["id"]: c["status"] for c in results["dns-rebinding-protection"]}
    assert rebinding == {
        "localhost-host-rebinding-rejected": "SUCCESS",
        "localhost-host-valid-accepted": "SUCCESS",
    }
