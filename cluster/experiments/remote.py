"""``notes-cluster loadgen``: the race workload against remote HTTP nodes.

Layer: cluster (an experiment). Drives nodes it did not start, over Streamable HTTP; reads the
store (when given its URL) only after the run, to check invariants. It needs the cluster's key ring
to learn each state's nonce and expiry for the history (a trusted harness), and a bearer token per
principal.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import trio

from cluster.config import ClusterSettings
from cluster.experiments.simulate import (
    SimulateOptions,
    Simulation,
    check_run,
    finish,
    races,
    redis_offset_ms,
)
from loadgen.check.exercise import ExerciseRule, judge
from loadgen.check.verdict import CheckResult, Verdict
from loadgen.history import close_history, open_history
from loadgen.runner import FlowSample, RunSettings, run_load
from loadgen.tenants import tenants as tenant_names
from loadgen.transport import HttpTransport
from store.notes import DEFAULT_PREFIX

HTTP_POOL = 256
"""Connections the load generator keeps open to the nodes (keep-alive)."""

JOURNAL_SINCE_MARGIN_MS = 100
"""The run's journal is read from its start less this (the clock offset is read over a round
trip); an earlier run checked its own journal only after every state expired plus grace, so
nothing of it falls in the margin."""

NOT_CHECKED = CheckResult(
    (
        Verdict(
            "checked",
            "unknown",
            "No --redis given: the history was recorded but not checked against the store.",
        ),
    )
)


READY_POLL_S = 0.2
"""How often ``wait_until_ready`` asks a target that is not ready yet."""


class TargetsNotReady(RuntimeError):
    """A target did not answer ``/readyz`` with 200 in time."""


def readyz_url(target: str) -> str:
    """A node endpoint's readiness probe: ``http://h:p/mcp`` -> ``http://h:p/readyz``."""
    parts = urlsplit(target)
    return urlunsplit((parts.scheme, parts.netloc, "/readyz", "", ""))


async def wait_until_ready(urls: Sequence[str], timeout_s: float) -> None:
    """Return once every target's ``/readyz`` answers 200 (so a load started right after
    ``serve ... &`` does not race the nodes' start); ``TargetsNotReady`` after ``timeout_s``."""
    pending = {readyz_url(u): u for u in urls}
    last: dict[str, str] = {}
    async with httpx.AsyncClient(timeout=2.0) as client:
        with trio.move_on_after(timeout_s):
            while pending:
                for probe in list(pending):
                    try:
                        status = (await client.get(probe)).status_code
                    except httpx.HTTPError as exc:
                        last[probe] = type(exc).__name__
                        continue
                    if status == 200:
                        del pending[probe]
                    else:
                        last[probe] = f"HTTP {status}"
                if pending:
                    await trio.sleep(READY_POLL_S)
    if pending:
        probe = next(iter(pending))
        raise TargetsNotReady(
            f"{pending[probe]} not ready after {timeout_s:g} s ({probe}: "
            f"{last.get(probe, 'no answer')}); is the node running?"
        )


async def run_remote(
    urls: Sequence[str],
    settings: ClusterSettings,
    tokens: Mapping[str, str],
    run: RunSettings,
    *,
    redis_url: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    run_dir: Path | None = None,
    on_flow: Callable[[FlowSample], None] | None = None,
    exercise: ExerciseRule | None = None,
    first_index: int = 0,
) -> Simulation:
    """Run the workload against ``urls`` and, given ``redis_url``, check the history."""
    if run.tag == "run":  # a store outlives runs: each run's titles are its own
        run = replace(run, tag=secrets.token_hex(3))
    # The nodes outlive the run: a flow cut short deletes its notes through them.
    run = replace(run, clean_up_cut_short=True)
    options = SimulateOptions(
        nodes=len(urls),
        redis_url=redis_url,
        state_ttl_s=settings.node.state_ttl_ms / 1000,
        settings=run,
        run_dir=run_dir,
        exercise=exercise or ExerciseRule(),
        replay_grace_ms=settings.replay_grace_ms,
    )
    history = open_history(run_dir, keep=run_dir is None, first_index=first_index)
    limits = httpx.Limits(max_connections=HTTP_POOL, max_keepalive_connections=HTTP_POOL)
    try:
        offset = (
            0 if redis_url is None else await trio.to_thread.run_sync(redis_offset_ms, redis_url)
        )
        # The store outlives runs: its journal holds earlier loads' entries, which this run's
        # history cannot explain. Only entries from now on (Redis clock) are this run's.
        since_ms = 0
        if redis_url is not None:  # without it the Redis clock is unknown: check reads all
            since_ms = int(time.time() * 1000) + offset - JOURNAL_SINCE_MARGIN_MS
            options = replace(options, journal_since_ms=since_ms)
        async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
            transport = HttpTransport(urls, dict(tokens), client)
            stats = await run_load(
                transport,
                settings.node.key_ring,
                settings.node.server_name,
                run,
                history,
                redis_offset_ms=offset,
                on_flow=on_flow,
            )
        if redis_url is None:
            result = NOT_CHECKED
        else:
            tenants = tenant_names(run.tenants)
            close_history(history)
            result = await check_run(
                history,
                redis_url,
                prefix,
                tenants,
                offset,
                settings.replay_grace_ms,
                run_dir,
                since_ms=since_ms,
            )
    finally:
        close_history(history)
    result = judge(result, stats.tally, run.legacy_share, options.exercise, run.weights)
    return finish(
        Simulation(result, stats, history, races(stats.tally), run_dir, options, "remote")
    )
