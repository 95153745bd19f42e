"""The MRTR conformance pack against the official SDKs' reference servers, two instances each.

Layer: tests. The Python SDK reference (``cluster.lab.sdk_references.reference_sdk``,
``mcp`` from PyPI) runs as two processes sharing a sealing key and the real Redis (a key prefix
of the test's own). As measured, it fails exactly the checks that need a record of used states (the
SDK seals and binds ``requestState`` but its handlers run again on every retry), each FAILURE
quoting the requests that show it; the same server with ``--used-state-store`` passes every
check. The TypeScript SDK reference (``reference_ts/server.ts``, ``@modelcontextprotocol/server``
2.4.0) also fails the state-binding checks its guide's ``bind`` leaves open, and passes every
check with ``--bind-call --used-state-store``; it runs when Node 22 and its packages are there
(skipped otherwise, a failure under CI).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.lab.sdk_references.references import ADDITIONS, Sdk, node_binary, open_reference
from cluster.mrtr_conformance import demo_contract, run_conformance
from loadgen.mrtr_pack.checks import Check
from store.client_factory import sync_client
from store.journal import scan_keys
from tests.conftest import require_real_redis

STATE_TTL_S = 8.0
"""Long enough that every round of a slow target lands well inside it."""
EXPIRY_MARGIN_S = 2.0
"""How far before and after the expiry the expiry checks answer: room for a loaded machine."""

NEEDS_USED_STATE_STORE = {
    "mrtr-replay-same-instance",
    "mrtr-replay-other-instance",
    "mrtr-concurrent-duplicates",
    "mrtr-lost-response-retry",
    "mrtr-different-answer-used-state",
    "mrtr-decline-then-accept",
}
"""The checks an SDK server fails when it keeps no record of used states."""

FAILS_AS_DOCUMENTED: dict[Sdk, set[str]] = {
    "python": NEEDS_USED_STATE_STORE,
    # The TypeScript codec binds what its `bind` callback returns: by the SDK's guide, the
    # method and the client, not the tool or its arguments.
    "typescript": NEEDS_USED_STATE_STORE
    | {"mrtr-changed-arguments", "mrtr-state-for-another-tool"},
}


@pytest.fixture
def redis_prefix() -> Iterator[tuple[str, str]]:
    """The real Redis and a key prefix of this test's own (its keys deleted afterwards)."""
    url = require_real_redis()
    prefix = "nct" + secrets.token_hex(5)
    yield url, prefix
    sync = sync_client(url)
    keys = list(scan_keys(sync, f"{prefix}:*"))
    if keys:
        sync.delete(*keys)
    sync.close()


def _require(sdk: Sdk) -> None:
    if sdk == "typescript" and node_binary() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs Node 22 and the TypeScript reference's packages")
        pytest.skip("Node 22 or the TypeScript reference's packages are not installed")


async def _pack(
    sdk: Sdk, redis_prefix: tuple[str, str], out: Path, additions: tuple[str, ...]
) -> dict[str, Check]:
    url, prefix = redis_prefix
    async with open_reference(
        sdk, url, prefix=prefix, state_ttl_s=STATE_TTL_S, additions=additions
    ) as urls:
        assert len(urls) == 2
        checks = await run_conformance(
            urls, demo_contract(STATE_TTL_S, expiry_margin_s=EXPIRY_MARGIN_S), out
        )
    return {c.id: c for c in checks}


def _answers_under_one_state(check: Check) -> list[dict[str, object]]:
    """The requests of a check that answered under its first state."""
    requests = check.details["requests"]
    states = [r["request"]["params"].get("requestState") for r in requests]
    first = next(s for s in states if s)
    return [r for r, s in zip(requests, states, strict=True) if s == first]


@pytest.mark.parametrize("sdk", ["python", "typescript"])
async def test_an_sdk_reference_as_its_docs_show_fails_exactly_the_measured_checks(
    sdk: Sdk, redis_prefix: tuple[str, str], tmp_path: Path
) -> None:
    _require(sdk)
    checks = await _pack(sdk, redis_prefix, tmp_path, ())
    statuses = {k: c.status for k, c in checks.items()}
    failed = {k for k, s in statuses.items() if s == "FAILURE"}
    assert failed == FAILS_AS_DOCUMENTED[sdk], statuses
    assert {s for k, s in statuses.items() if k not in failed} == {"SUCCESS"}, statuses
    for cid in failed & NEEDS_USED_STATE_STORE:
        # The evidence: at least two answers under one state (the first, then the retry, copy
        # or second answer), and the reads of the effect around them.
        assert len(_answers_under_one_state(checks[cid])) >= 2, cid
    for cid in failed:
        assert checks[cid].error_message
        assert checks[cid].details["effects"] or cid != "mrtr-changed-arguments"
    assert (tmp_path / "checks.json").is_file()


@pytest.mark.parametrize("sdk", ["python", "typescript"])
async def test_the_same_sdk_reference_with_what_its_author_must_add_passes_every_check(
    sdk: Sdk, redis_prefix: tuple[str, str], tmp_path: Path
) -> None:
    _require(sdk)
    checks = await _pack(sdk, redis_prefix, tmp_path, ADDITIONS[sdk])
    assert {k: c.status for k, c in checks.items()} == dict.fromkeys(checks, "SUCCESS"), [
        (k, c.error_message) for k, c in checks.items() if c.status != "SUCCESS"
    ]
