"""The benchmark's load loop: complete ``notes_delete`` flows at a fixed concurrency.

Layer: cluster (the bench). Drives any ``loadgen.transport.Transport`` (in-process, HTTP to our
nodes, HTTP to the SDK peer) with the same code: round 1 on a random node, pick the note from the
form, round 2 on another node, check ``deleted: true``. Every loop is bounded in count (the seeded
targets) and in time (the point's duration, then a hard cancel). Latency goes into an HDR
histogram.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import trio
from hdrh.histogram import HdrHistogram

from loadgen.clients import request
from loadgen.transport import NodeDown, Transport

TOOL = "notes_delete"
FORM_KEY = "confirm_delete"

FLOW_TIMEOUT_S = 10.0
"""A flow still unfinished after this counts as failed; a healthy flow takes milliseconds."""
OVERRUN_S = 15.0
"""How long past its duration a point may run before its workers are cancelled."""
LATENCY_MAX_US = 60_000_000
"""Highest latency the histogram holds (a minute); larger values are clamped."""


@dataclass(frozen=True)
class SeededNote:
    """One seeded note that one flow deletes (its title is unique)."""

    principal: str
    tenant: str
    workspace: str
    title: str
    note_id: str


@dataclass
class PointStats:
    """What one measured point produced."""

    completed: int = 0
    failed: int = 0
    elapsed_s: float = 0.0
    first_error: str | None = None
    histogram: HdrHistogram = field(default_factory=lambda: HdrHistogram(1, LATENCY_MAX_US, 3))

    @property
    def flows_per_s(self) -> float:
        """Completed flows per second of wall time."""
        return self.completed / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """Counts, rate and latency percentiles (ms) as JSON-ready numbers."""
        h = self.histogram
        empty = h.get_total_count() == 0
        return {
            "flows": self.completed,
            "failed": self.failed,
            "elapsed_s": round(self.elapsed_s, 3),
            "flows_per_s": round(self.flows_per_s, 1),
            "p50_ms": 0.0 if empty else round(h.get_value_at_percentile(50) / 1000, 3),
            "p99_ms": 0.0 if empty else round(h.get_value_at_percentile(99) / 1000, 3),
            "max_ms": 0.0 if empty else round(h.get_max_value() / 1000, 3),
            "first_error": self.first_error,
        }


def _short(body: object) -> str:
    return repr(body)[:300]


def _picked(result: dict[str, Any]) -> str | None:
    """The first note the form offers (each flow's title is unique, so it is the one)."""
    try:
        form = result["inputRequests"][FORM_KEY]["params"]["requestedSchema"]
        return str(form["properties"]["noteId"]["oneOf"][0]["const"])
    except (KeyError, IndexError, TypeError):
        return None


async def delete_flow(
    transport: Transport, target: SeededNote, first: int, second: int
) -> str | None:
    """One two-round flow; None when the note was deleted, else what went wrong."""
    args = {"workspaceUri": target.workspace, "title": target.title}
    r1 = await transport.send(
        first, target.principal, request("tools/call", {"name": TOOL, "arguments": args})
    )
    res = (r1.body or {}).get("result") or {}
    if res.get("resultType") != "input_required" or not res.get("requestState"):
        return f"round 1: HTTP {r1.status} {_short(r1.body)}"
    note_id = _picked(res)
    if note_id != target.note_id:
        return f"round 1 offered {note_id!r}, not {target.note_id!r}"
    answer = {"action": "accept", "content": {"noteId": note_id, "confirm": True}}
    params = {
        "name": TOOL,
        "arguments": args,
        "inputResponses": {FORM_KEY: answer},
        "requestState": res["requestState"],
    }
    r2 = await transport.send(second, target.principal, request("tools/call", params))
    res2 = (r2.body or {}).get("result") or {}
    if not (res2.get("structuredContent") or {}).get("deleted"):
        return f"round 2: HTTP {r2.status} {_short(r2.body)}"
    return None


def _nodes(rng: random.Random, n: int) -> tuple[int, int]:
    """A random node for round 1 and a different one (when there is one) for round 2."""
    first = rng.randrange(n)
    if n == 1:
        return first, first
    return first, (first + 1 + rng.randrange(n - 1)) % n


FlowFn = Callable[[SeededNote, int, int], Awaitable[str | None]]
"""One flow on (target, first node, second node): None when it completed, else the error."""


def transport_flow(transport: Transport) -> FlowFn:
    """The MCP delete flow over ``transport``."""
    return partial(delete_flow, transport)


async def run_flows(
    flows: Sequence[FlowFn],
    node_count: int,
    targets: Iterator[SeededNote],
    *,
    concurrency: int,
    duration_s: float,
    max_flows: int,
    seed: int = 1,
) -> PointStats:
    """Run flows on ``concurrency`` workers until ``duration_s`` passed, ``max_flows`` started
    or the targets ran out; in-flight flows finish (bounded by FLOW_TIMEOUT_S). Worker ``i``
    runs ``flows[i % len(flows)]``: one flow function per worker is one client per worker."""
    stats = PointStats()
    rng = random.Random(seed)
    started = 0
    t0 = time.perf_counter()
    deadline = t0 + duration_s

    async def worker(flow: FlowFn) -> None:
        nonlocal started
        # Each worker starts one flow even if it was scheduled late, so a point is never empty.
        fresh = True
        while started < max_flows and (fresh or time.perf_counter() < deadline):
            fresh = False
            target = next(targets, None)
            if target is None:
                return
            started += 1
            first, second = _nodes(rng, node_count)
            begin = time.perf_counter()
            error: str | None
            try:
                with trio.fail_after(FLOW_TIMEOUT_S):
                    error = await flow(target, first, second)
            except (trio.TooSlowError, NodeDown, OSError, httpx.HTTPError, ValueError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            if error is None:
                stats.completed += 1
                micros = int((time.perf_counter() - begin) * 1_000_000)
                stats.histogram.record_value(min(LATENCY_MAX_US, max(1, micros)))
            else:
                stats.failed += 1
                stats.first_error = stats.first_error or error

    with trio.move_on_after(duration_s + OVERRUN_S):
        async with trio.open_nursery() as nursery:
            for i in range(concurrency):
                nursery.start_soon(worker, flows[i % len(flows)])
    stats.elapsed_s = time.perf_counter() - t0
    return stats


def split(
    targets: Sequence[SeededNote], warmup: int
) -> tuple[Iterator[SeededNote], Iterator[SeededNote]]:
    """Warm-up targets and measured targets, disjoint."""
    return iter(targets[:warmup]), iter(targets[warmup:])
