"""The official conformance suite's 2026-07-28 requirements against a demo node in fixture mode.

Layer: tests. ``@modelcontextprotocol/conformance@0.2.0-alpha.12`` (pinned exactly in
``tests/conformance_2026/package.json``: a pre-release changes between versions) runs
``server --requirements 2026-07-28``: the 37 scored server scenarios the revision requires,
frozen at its release, plus the extension and pending ones it runs for visibility. The node is
``notes-cluster serve --demo --demo-anonymous alice --conformance-fixtures`` (in-process on the
embedded store, then a node process on the real Redis). A scenario fails when one of its checks
is a FAILURE or a WARNING (the suite's rule). The run must fail exactly the scenarios of
``tests/conformance_2026/expected-failures.yaml``, each with its reason: any other failure fails
this test, and so does a listed scenario that passes (the list stays true). Every scored
scenario must pass.

The 0.1.16 run (``tests/test_conformance_suite.py``) stays: it is the only official test of the
legacy 2025-11-25 wire our nodes also serve, on a released version of the suite.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from cluster.serve import seed_demo_notes, start_http_nodes, start_process_nodes
from nodes.serving.settings import demo_settings, with_conformance_fixtures, with_demo_anonymous
from store.client_factory import sync_client
from store.journal import scan_keys
from tests.conftest import require_real_redis
from tests.js_clients import ROOT, JsEnv, require_js, run_node
from tests.test_conformance_suite import failed, scenario_checks

SUITE_DIR = ROOT / "tests" / "conformance_2026"
EXPECTED = SUITE_DIR / "expected-failures.yaml"
SUITE = "@modelcontextprotocol/conformance"
REVISION = "2026-07-28"
SCORED_AT_LEAST = 34
"""The issue's bar; every scored scenario passes today, and the test asserts that too."""
SUITE_TIMEOUT_S = 600.0
"""Bound on the whole suite (about 30 s on a quiet machine)."""


def expected_failures() -> dict[str, str]:
    """Scenario -> reason; the suite's list and the reasons name the same scenarios."""
    raw = yaml.safe_load(EXPECTED.read_text())
    listed: list[str] = raw["server"]
    reasons: dict[str, str] = raw["reasons"]
    assert len(set(listed)) == len(listed), "a scenario is listed twice"
    assert set(listed) == set(reasons), "every expected failure needs a reason, and only those"
    assert all(reason.strip() for reason in reasons.values())
    return reasons


def scored(js: JsEnv) -> list[str]:
    """The server scenarios the revision scores, from the installed package's frozen list."""
    path = js.package_dir(SUITE) / "requirements" / f"{REVISION}.yaml"
    out: list[str] = yaml.safe_load(path.read_text())["server"]
    return out


@pytest.fixture(params=["in-process", "processes"])
async def fixture_node(
    request: pytest.FixtureRequest, embedded_url: str, nursery: trio.Nursery
) -> AsyncIterator[str]:
    """One node as ``serve --demo --demo-anonymous alice --conformance-fixtures`` runs it."""
    settings = with_demo_anonymous(demo_settings(), "alice", "127.0.0.1")
    settings = with_conformance_fixtures(settings, True, demo=True)
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


async def test_the_2026_07_28_requirements_pass_but_for_the_listed_unscored_scenarios(
    fixture_node: str, tmp_path: Path
) -> None:
    js = require_js(SUITE_DIR)
    reasons = expected_failures()
    out_dir = tmp_path / "results"
    done = await run_node(
        js,
        [
            js.bin(SUITE, "conformance"),
            "server",
            "--url",
            fixture_node,
            "--requirements",
            REVISION,
            "--expected-failures",
            EXPECTED,
            "-o",
            out_dir,
        ],
        home=tmp_path,
        cwd=SUITE_DIR,
        timeout_s=SUITE_TIMEOUT_S,
    )
    results: dict[str, list[dict[str, Any]]] = scenario_checks(out_dir)
    failing = {name for name, checks in results.items() if failed(checks)}
    unexpected = {
        name: [c.get("errorMessage") for c in results[name] if c["status"] != "SUCCESS"]
        for name in sorted(failing - set(reasons))
    }
    stale = sorted(set(reasons) - failing)
    assert not unexpected, f"failures not in {EXPECTED.name}: {json.dumps(unexpected)[:3000]}"
    assert not stale, f"expected failures that pass now (remove them from {EXPECTED.name}): {stale}"
    assert set(reasons) <= set(results), "every expected failure ran"
    required = scored(js)
    assert len(required) == 37
    passing = [name for name in required if name in results and not failed(results[name])]
    assert len(passing) >= SCORED_AT_LEAST
    assert passing == required, sorted(set(required) - set(passing))
    assert done.returncode == 0, done.stdout[-3000:]
