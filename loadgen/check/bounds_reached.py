"""Which configured bounds a run reached: a bound the run never took a request to cannot be
said to hold, so every run reports each one it reached, and how often.

Layer: loadgen.check. Pure module: no I/O, no node code. ``reached`` counts, per partition, the
requests that met each bound of ``BOUNDS`` exactly (``bound_<name>`` counts, summed over the
partitions as every count is); ``bounds_seen`` reads them back for the results
(``loadgen.run.results.Results``, ``bounds``) and the line under the verdict
(``loadgen.report.bounds_line``), which names every bound a run never reached. The
invariants that hold each bound to what the run saw are ``bounds_respected`` (page size, pick
list, state TTL), ``replay_entries_expire`` and ``before_expiry_honoured`` (replay grace),
``quotas_held`` (quotas) and ``op_records_expire`` (idempotency window).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadgen.check.context import Context
    from loadgen.check.limits import Limits

BOUNDS: dict[str, str] = {
    "list_page_size": "a notes_list page held exactly the page size, with more to follow",
    "max_offered": "a pick list offered exactly its limit of notes",
    "state_ttl_ms": "an expired flow's answer, sent past its state's expiry, was refused",
    "replay_grace_ms": "a decided answer sent again past the expiry, inside the replay grace, "
    "was answered as a replay",
    "max_notes_per_principal": "a create took a principal to its notes quota, and one was "
    "refused for it",
    "max_bytes_per_principal": "a create filled a principal's bytes quota exactly, and one "
    "was refused for it",
    "max_writes_per_principal": "a create made a principal's last allowed write, and one was "
    "refused for it",
    "idempotency_window_ms": "a write retried with its key after the key's window",
}
"""Every configured bound a run is held to, and what reaching it means."""

QUOTA_BOUNDS = {
    "notes": "max_notes_per_principal",
    "bytes": "max_bytes_per_principal",
    "writes": "max_writes_per_principal",
}
"""``loadgen.check.quotas``' names of the quotas -> their configured bound."""


def reached(
    ctx: Context,
    limits: Limits | None,
    counts: Mapping[str, int],
    invalid_state: Any,
) -> dict[str, int]:
    """``bound_<name>`` counts of this partition (see the module); ``counts`` are the
    checker's own (``quota_reached_*``), ``invalid_state`` tells the fixed refusal of a
    state."""
    if limits is None:
        return {}
    out = dict.fromkeys(BOUNDS, 0)
    for c in ctx.calls:
        f, kind, r = c.invoke.f, c.invoke.kind, c.result
        if f == "list" and c.outcome == "ok" and not r.get("isError") and r.get("more"):
            out["list_page_size"] += len(r.get("notes") or []) == limits.list_page_size
        elif f == "ask" and c.outcome == "ok":
            out["max_offered"] += len(r.get("candidates") or []) == limits.max_offered
        elif f == "confirm" and kind == "expired" and c.outcome == "fail":
            out["state_ttl_ms"] += bool(invalid_state(r))
        elif f == "confirm" and kind == "replay_after_expiry" and "redis_send_ms" in c.v:
            out["replay_grace_ms"] += c.outcome == "ok" and r.get("replay") is True
    for quota, bound in QUOTA_BOUNDS.items():
        out[bound] = counts.get(f"quota_reached_{quota}", 0)
    return {f"bound_{name}": n for name, n in out.items()}


def bounds_seen(counts: Mapping[str, int]) -> dict[str, int] | None:
    """Each bound of ``BOUNDS`` -> how often the run reached it (None: the run recorded no
    bounds: an older folder, a run without configured limits)."""
    if not any(k.startswith("bound_") for k in counts):
        return None
    return {name: int(counts.get(f"bound_{name}", 0)) for name in BOUNDS}


def never_reached(counts: Mapping[str, int]) -> list[str]:
    """The bounds a run recorded and never reached."""
    seen = bounds_seen(counts) or {}
    return [name for name, n in seen.items() if n == 0]
