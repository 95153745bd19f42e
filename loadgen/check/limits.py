"""Configured bounds and unknown outcomes, held to what the run saw.

Layer: loadgen.check. Pure module: no I/O, no node code. Two verdicts for
``loadgen.check.invariants.check``:

- ``bounds_respected`` against the run's ``Limits`` (the nodes' configuration, recorded in the
  run folder): no ``notes_list`` page holds more than ``list_page_size`` notes; no pick list
  offers more than ``max_offered``; every sealed state (a round 1 of ``notes_delete``,
  ``notes_archive`` or ``notes_setup``) expires ``state_ttl_ms`` after the Redis clock read
  while it was asked (within ``CLOCK_SLACK_MS`` of the load generator's estimate). The replay
  grace is held by ``replay_entries_expire``.
- ``unknown_outcomes_explained``: an answer of unknown outcome (info: a timeout, a lost reply,
  a node down, ``-32603`` "outcome unknown") is legal only where something could explain it:
  the workload's own deliberate losses and cut-short requests, the client's timeout, a legacy
  answer POST taken on 202, or a fault window of the run (``FaultWindow``: any kind, from its
  start until ``AFTERMATH_MS`` after its end, ``PAUSE_AFTERMATH_MS`` for pauses; a failover
  until the run ends) that the request overlapped. The windows of a run on in-process
  nodes that injects no faults are the store replies a node really lost
  (``cluster.faults.LostReplies``: observed where the store declared the loss, not
  injected). Elsewhere it is a finding: a node that cannot tell what happened where nothing
  went wrong.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loadgen.check.context import Call
from loadgen.check.verdict import Finding, Verdict, verdict

if TYPE_CHECKING:
    from loadgen.check.context import Context

CLOCK_SLACK_MS = 500
"""Tolerance of a state's expiry against the load generator's Redis-clock estimate (an offset
measured once at the start of the run, on the same host or a LAN)."""

AFTERMATH_MS = 1_000
"""How long after a fault window ends an unknown outcome may still be its doing (a request
queued behind a pause, a retry policy's last attempt)."""

PAUSE_AFTERMATH_MS = 3_000
"""The same after a window of a kind that pauses Redis past the nodes' shortened timeout
(``redis``, ``stall``): the writes held during it run at once when it ends, and the nodes'
connections that timed out reconnect; on a loaded two-core machine unknown outcomes were seen
up to 2.6 s after a ``CLIENT PAUSE WRITE`` ended."""

BOUNDED_KINDS = frozenset({"nodes", "redis", "client", "lost-reply", "stall", "reshard"})
"""Fault kinds whose effect ends with their window (plus ``AFTERMATH_MS``). Any other kind (a
Redis Cluster failover, ``cluster.lab.failover``) changes the store for the rest of the
run (a promoted master without a replica answers every ``WAIT`` late), so it explains unknown
outcomes from its start to the end of the run."""

EXPLAINED_REASONS = frozenset({"response lost", "cut short", "timeout"})
"""Unknown outcomes the client causes or declares itself (``loadgen.clients``)."""

MAX_OFFERED = 50
"""The pick list's documented limit (``notes_delete`` and ``notes_archive``)."""


@dataclass(frozen=True)
class Limits:
    """The bounds the nodes of a run were configured with."""

    list_page_size: int
    state_ttl_ms: int
    max_offered: int = MAX_OFFERED
    idempotency_window_ms: int = 0
    """How long a write's record under an idempotency key lives (0: not recorded)."""
    legacy_session_ttl_ms: int = 0
    """The longest a legacy session record or inbox lives unused (0: not recorded)."""
    legacy_marker_ttl_ms: int = 0
    """The longest a legacy request's marker lives: the state TTL plus the adapter's grace for
    late answers (0: not recorded)."""
    sessions_per_principal: int = 0
    """Legacy sessions a principal may hold (0: not recorded)."""
    quotas: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Tenant -> its per-principal quotas held to the run (``notes``, ``bytes``, ``writes``;
    ``loadgen.check.quotas``): the small-quota tenants of a simulation (empty: none recorded)."""

    def to_json(self) -> dict[str, Any]:
        """As written into the run folder's ``store/meta.json``."""
        out: dict[str, Any] = {
            "list_page_size": self.list_page_size,
            "state_ttl_ms": self.state_ttl_ms,
            "max_offered": self.max_offered,
            "idempotency_window_ms": self.idempotency_window_ms,
            "legacy_session_ttl_ms": self.legacy_session_ttl_ms,
            "legacy_marker_ttl_ms": self.legacy_marker_ttl_ms,
            "sessions_per_principal": self.sessions_per_principal,
        }
        if self.quotas:
            out["quotas"] = {t: dict(q) for t, q in sorted(self.quotas.items())}
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Limits:
        """What ``to_json`` wrote."""
        return cls(
            int(d["list_page_size"]),
            int(d["state_ttl_ms"]),
            int(d["max_offered"]),
            int(d.get("idempotency_window_ms", 0)),
            int(d.get("legacy_session_ttl_ms", 0)),
            int(d.get("legacy_marker_ttl_ms", 0)),
            int(d.get("sessions_per_principal", 0)),
            {
                str(t): {str(k): int(v) for k, v in q.items()}
                for t, q in (d.get("quotas") or {}).items()
            },
        )


@dataclass(frozen=True)
class FaultWindow:
    """One fault injected during the run, on the wall clock (ms)."""

    kind: str
    action: str
    start_ms: int
    end_ms: int

    @classmethod
    def from_record(cls, row: Mapping[str, Any]) -> FaultWindow:
        """From a ``faults.json`` row (wall clock in seconds)."""
        return cls(
            str(row["kind"]),
            str(row["action"]),
            int(float(row["start_wall"]) * 1000),
            int(float(row["end_wall"]) * 1000),
        )


def _sealed(ctx: Context) -> Iterable[Call]:
    for c in ctx.calls:
        # A setup retry offers the link again under the state it came with: only round 1 seals.
        fresh = c.invoke.f == "ask" or (c.invoke.f == "setup" and c.v.get("action") == "round1")
        asked = fresh and c.outcome == "ok" and c.done is not None
        if (
            asked
            and isinstance(c.result.get("exp_ms"), int)
            and isinstance(c.v.get("redis_ms"), int)
        ):
            yield c


def check_bounds(ctx: Context, limits: Limits | None) -> Verdict:
    """``bounds_respected``; see the module. Without limits (an older run folder, a run against
    remote nodes): not checked, and said so."""
    if limits is None:
        return Verdict("bounds_respected", "valid", "Not checked: no configured bounds recorded.")
    bad: list[Finding] = []
    pages = 0
    for c in ctx.calls:
        if c.outcome != "ok":
            continue
        if c.invoke.f == "list" and not c.result.get("isError"):
            pages += 1
            n = len(c.result.get("notes") or [])
            if n > limits.list_page_size:
                size = limits.list_page_size
                text = f"list page at {c.invoke.index} held {n} notes, page size {size}"
                bad.append(Finding(text, c.indices))
        offered = c.result.get("candidates")
        if isinstance(offered, list) and len(offered) > limits.max_offered:
            text = f"pick list at {c.invoke.index} offered {len(offered)} notes"
            bad.append(Finding(text, c.indices))
    states = 0
    for c in _sealed(ctx):
        assert c.done is not None
        states += 1
        lo = int(c.v["redis_ms"])
        hi = lo + (c.done.time_ms - c.invoke.time_ms)
        exp = int(c.result["exp_ms"])
        ttl = limits.state_ttl_ms
        if not lo + ttl - CLOCK_SLACK_MS <= exp <= hi + ttl + CLOCK_SLACK_MS:
            text = (
                f"state asked at {c.invoke.index} expires {exp - lo} ms after it was asked, "
                f"state TTL {ttl} ms"
            )
            bad.append(Finding(text, c.indices))
    ok = (
        f"All {pages} list pages within the page size, every pick list within its limit, all "
        f"{states} states expire one state TTL after they were asked."
    )
    return verdict("bounds_respected", ok, bad)


@dataclass(frozen=True)
class FaultIndex:
    """Fault windows by start, with the latest reach (end plus aftermath) of any window that
    started at or before each: one bisection answers "did a window overlap this span"."""

    starts: tuple[int, ...]
    reach: tuple[float, ...]

    @classmethod
    def build(cls, windows: Sequence[FaultWindow]) -> FaultIndex:
        ordered = sorted(windows, key=lambda w: w.start_ms)
        reach: list[float] = []
        for w in ordered:
            after = PAUSE_AFTERMATH_MS if w.kind in ("redis", "stall") else AFTERMATH_MS
            last = w.end_ms + after if w.kind in BOUNDED_KINDS else float("inf")
            reach.append(max(last, reach[-1]) if reach else last)
        return cls(tuple(w.start_ms for w in ordered), tuple(reach))

    def overlap(self, start: int, end: float) -> bool:
        i = bisect.bisect_right(self.starts, end)
        return i > 0 and self.reach[i - 1] >= start


def _explained(c: Call, windows: FaultIndex) -> bool:
    r = c.result
    if r.get("reason") in EXPLAINED_REASONS or r.get("status") == 202:
        return True
    end = float(c.done.time_ms) if c.done is not None else float("inf")
    return windows.overlap(c.invoke.time_ms, end)


def check_unknown_outcomes(ctx: Context, faults: Sequence[FaultWindow] | None) -> Verdict:
    """``unknown_outcomes_explained``; see the module. Without a fault record (a run of a
    loadgen against remote nodes, an older run folder): not checked, and said so."""
    name = "unknown_outcomes_explained"
    infos = [c for c in ctx.calls if c.outcome == "info"]
    if faults is None:
        return Verdict(name, "valid", f"Not checked: no fault record ({len(infos)} unknown).")
    bad = []
    windows = FaultIndex.build(faults)
    for c in infos:
        if not _explained(c, windows):
            reason = c.result.get("reason", "no answer")
            text = (
                f"{c.invoke.f} at {c.invoke.index} ({c.invoke.kind}) had an unknown outcome "
                f"({reason}) outside every fault window"
            )
            bad.append(Finding(text, c.indices))
    ok = f"All {len(infos)} unknown outcomes fall in fault windows or were the client's doing."
    return verdict(name, ok, bad)
