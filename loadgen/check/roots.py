"""Searches by roots held to the roots the client gave and the workspaces its principal is
granted.

Layer: loadgen.check. Pure module: no I/O, no node code. One verdict for
``loadgen.check.invariants.check``:

- ``roots_respected``. Roots are hints, never grants: a ``notes_search`` without a workspace,
  answered with the roots ``given`` (recorded in the invoke with the workspaces the principal is
  ``granted``), may offer in its pick form, search, and show notes from only the granted
  workspaces inside one of those roots. A pick form that offers another workspace, an answer
  that searched a picked workspace outside them, or a note shown from one is a finding: a node
  that widens what the client asked for, or honours a root its principal is not granted.

A search recorded without ``given`` (a run folder written before the workload recorded it, the
first round that only asks for the roots) is not judged here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadgen.check.verdict import Finding, Verdict, verdict

if TYPE_CHECKING:
    from loadgen.check.context import Context


def within(root: str, uri: str) -> bool:
    """``uri`` is ``root`` or below it (canonical ``file://`` URIs, as the load spells them)."""
    return uri == root or uri.startswith(root.rstrip("/") + "/")


def check_roots(ctx: Context) -> Verdict:
    """``roots_respected``; see the module."""
    bad: list[Finding] = []
    judged = 0
    for c in ctx.calls:
        given, granted = c.v.get("given"), c.v.get("granted")
        if c.invoke.f != "search" or not isinstance(given, list) or not isinstance(granted, list):
            continue
        if c.outcome != "ok" or c.result.get("isError"):
            continue
        judged += 1
        allowed = {str(ws) for ws in granted if any(within(str(r), str(ws)) for r in given)}
        where = f"search at {c.invoke.index} with roots {given}"
        offered = c.result.get("offered") or []
        wrong = sorted({str(ws) for ws in offered} - allowed)
        if wrong:
            bad.append(Finding(f"{where} offered {wrong}, outside the granted roots", c.indices))
        if c.result.get("reask"):
            continue
        picked = c.v.get("picked")
        if isinstance(picked, str) and picked not in allowed:
            text = f"{where} searched {picked!r}, picked from its form, outside the granted roots"
            bad.append(Finding(text, c.indices))
        shown = sorted(
            {str(n[2]) for n in c.result.get("notes") or [] if len(n) > 2 and n[2] is not None}
            - allowed
        )
        if shown:
            bad.append(Finding(f"{where} showed notes from {shown}", c.indices))
    ok = (
        f"All {judged} searches by roots offered and searched only granted workspaces inside "
        "the roots given."
    )
    return verdict("roots_respected", ok, bad)
