"""Per-principal quotas held to their configured bound and the run's usage.

Layer: loadgen.check. Pure module: no I/O, no node code. One verdict for
``loadgen.check.invariants.check``:

- ``quotas_held``. In every tenant whose quotas the run's ``Limits`` record (a simulation's
  small-quota tenants), the journal, walked in the store's order, says how many notes and bytes
  each principal owned and how many writes it made before each write: a create the journal
  holds must have found its creator under every bound (fewer notes than ``notes``, its bytes
  fitting in ``bytes``, fewer writes than ``writes``); a create refused for a quota must have
  met that quota at its bound at some moment it may have been decided (its Redis-clock send
  estimate, within ``QUOTA_SLACK_MS``, to its answer). A create's size is the invoke's
  ``bytes`` (title plus body, UTF-8).

Each quota counts as *reached* when a run saw its exact boundary: a create that took a
principal to the bound, and a create refused for that quota (``reached``, which
``loadgen.check.invariants.check`` reports).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loadgen.check.verdict import Finding, Verdict, verdict

if TYPE_CHECKING:
    from loadgen.check.context import Call, Context

QUOTAS = ("notes", "bytes", "writes")
QUOTA_SLACK_MS = 500
"""Tolerance of a refusal's moment against the load's Redis-clock estimate (measured once)."""
UNCHARGED = frozenset({"delete", "setup"})
"""Journal entries that are not writes charged to the principal (a delete frees, a setup
link is not a note write)."""


@dataclass
class _Usage:
    """One principal's usage after each journal entry that changed it: (Redis ms, notes,
    bytes, writes, notes of unknown size). ``bytes`` counts the notes whose size the history
    knows (a create answered ok); a create of unknown outcome that landed has a size nobody
    saw, so while such a note lives the bytes held are only known from below."""

    notes: int = 0
    bytes: int = 0
    writes: int = 0
    unsized: int = 0
    window_ends: int = 0
    """When the writes' window ends (Redis ms): as ``charge_write`` keeps it, a window opens at
    the first write after the last one ended."""
    steps: list[tuple[int, int, int, int, int]] = field(default_factory=list)

    def at(self, at_ms: int, window_ms: int) -> None:
        """Move to ``at_ms``: the writes count starts again once the window has ended."""
        if window_ms and at_ms >= self.window_ends:
            self.writes, self.window_ends = 0, at_ms + window_ms

    def step(self, at_ms: int) -> None:
        self.steps.append((at_ms, self.notes, self.bytes, self.writes, self.unsized))


def _over(quota: str, bound: int, notes: int, held: int, writes: int, size: int) -> bool:
    """The principal at ``notes``/``held`` bytes/``writes`` cannot make a create of ``size``."""
    if quota == "notes":
        return notes >= bound
    if quota == "bytes":
        return held + size > bound
    return writes >= bound


def reached_counts(seen: Mapping[str, int]) -> dict[str, int]:
    """``quota_reached_<quota>``: the tenants where the run saw that quota's exact boundary
    (a create that took a principal to the bound, and one refused for it), from what
    ``judge_quotas`` counted; only quotas some tenant reached are named."""
    out: dict[str, int] = {}
    tenants = {key.split(":")[0] for key in seen}
    for quota in QUOTAS:
        n = sum(
            1 for t in tenants if f"{t}:{quota}:last" in seen and f"{t}:{quota}:refused" in seen
        )
        if n:
            out[f"quota_reached_{quota}"] = n
    return out


def judge_quotas(
    ctx: Context,
    quotas: Mapping[str, Mapping[str, int]] | None,
    reached: dict[str, int],
    window_ms: int = 0,
) -> Verdict:
    """``quotas_held`` (see the module), counting into ``reached`` what the run saw of each
    quota's boundary (``<tenant>:<quota>:last`` and ``:refused`` -> 1; ``reached_counts``).
    ``window_ms``: the writes quota's window (the nodes' idempotency window; 0: one window for
    the whole run)."""
    name = "quotas_held"
    if not quotas:
        return Verdict(name, "valid", "Not checked: no quotas recorded.")
    sizes: dict[tuple[str, str], int] = {}
    creates: dict[tuple[str, str], Call] = {}
    refused: list[Call] = []
    for c in ctx.calls:
        tenant = str(c.v.get("tenant", ""))
        if c.invoke.f != "create" or tenant not in quotas or c.outcome != "ok":
            continue
        if c.result.get("isError"):
            if c.result.get("quota") in QUOTAS:
                refused.append(c)
            continue
        note = c.result.get("noteId")
        if isinstance(note, str) and isinstance(c.v.get("bytes"), int):
            sizes[(tenant, note)] = int(c.v["bytes"])
            creates[(tenant, note)] = c
    bad: list[Finding] = []
    usage: dict[tuple[str, str], _Usage] = defaultdict(_Usage)
    owner: dict[tuple[str, str], str] = {}
    held_ok = 0
    for e in sorted((e for e in ctx.journal if e.tenant in quotas), key=lambda e: e.sort_key):
        bound = quotas[e.tenant]
        key = (e.tenant, e.note)
        if e.op == "create":
            u = usage[(e.tenant, e.principal)]
            u.at(e.at_ms, window_ms)
            size = sizes.get(key, 0)
            made = creates.get(key)
            for quota in QUOTAS:
                if _over(quota, bound[quota], u.notes, u.bytes, u.writes, size):
                    text = (
                        f"create of {e.note} by {e.principal} in {e.tenant} went past the "
                        f"{quota} quota {bound[quota]} (held {u.notes} notes, {u.bytes} "
                        f"bytes, {u.writes} writes; the create {size} bytes)"
                    )
                    bad.append(Finding(text, made.indices if made else (), (e.id,)))
            held_ok += 1
            owner[key] = e.principal
            u.notes, u.bytes, u.writes = u.notes + 1, u.bytes + size, u.writes + 1
            u.unsized += key not in sizes
            u.step(e.at_ms)
            for quota, now in (("notes", u.notes), ("bytes", u.bytes), ("writes", u.writes)):
                if now == bound[quota]:
                    reached[f"{e.tenant}:{quota}:last"] = 1
        elif e.op == "delete" and key in owner:
            u = usage[(e.tenant, owner.pop(key))]
            u.notes, u.bytes = u.notes - 1, u.bytes - sizes.get(key, 0)
            u.unsized -= key not in sizes
            u.step(e.at_ms)
        elif e.op not in UNCHARGED and e.principal:
            u = usage[(e.tenant, e.principal)]
            u.at(e.at_ms, window_ms)
            u.writes += 1
            u.step(e.at_ms)
    for c in refused:
        tenant, who = str(c.v.get("tenant", "")), str(c.v.get("principal", ""))
        quota = str(c.result["quota"])
        most_allowed = quotas[tenant][quota]
        sent = c.v.get("redis_ms")
        if not isinstance(sent, int) or c.done is None:
            continue
        lo = sent - QUOTA_SLACK_MS
        hi = sent + (c.done.time_ms - c.invoke.time_ms) + QUOTA_SLACK_MS
        steps = usage[(tenant, who)].steps if (tenant, who) in usage else []
        before = [s for s in steps if s[0] < lo]
        during = [s for s in steps if lo <= s[0] <= hi]
        seen = ([before[-1]] if before else [(lo, 0, 0, 0, 0)]) + during
        size = int(c.v.get("bytes", 0))
        unknown = quota == "bytes" and any(s[4] for s in seen)  # bytes held not known
        if unknown or any(_over(quota, most_allowed, n, b, w, size) for _, n, b, w, _ in seen):
            reached[f"{tenant}:{quota}:refused"] = 1
            continue
        most = [max(s[i] for s in seen) for i in (1, 2, 3)]
        text = (
            f"create at {c.invoke.index} by {who} in {tenant} was refused for the {quota} quota "
            f"{most_allowed}, though the journal shows it under the bound while it was decided "
            f"(at most {most[0]} notes, {most[1]} bytes, {most[2]} writes; the create {size} "
            "bytes)"
        )
        bad.append(Finding(text, c.indices))
    ok = (
        f"All {held_ok} creates in small-quota tenants were under their quotas and all "
        f"{len(refused)} quota refusals met their bound."
    )
    return verdict(name, ok, bad)
