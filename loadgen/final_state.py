"""The observed final state of a target without a journal: which notes are still listed where.

Layer: loadgen (a client). After a run against a foreign server, for every title the run
created, lists the notes under that title in the inbox it was created in and in its tenant's
archive, through the target's own read tool (``notes_list`` of the tool contract), as the
principal who created them. The result is what ``loadgen.check.blackbox_check`` holds the
history to.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen import tenants as names
from loadgen.clients import classify, request
from loadgen.history import Op
from loadgen.transport import NodeDown, Transport

READ_TOOL = "notes_list"
READ_ATTEMPTS = 3
"""Tries of each listing, each on the next node: a listing that never answers fails the run's
check rather than passing for an empty workspace."""


class FinalStateUnknown(Exception):
    """A listing the check needs could not be read."""


def _places(history: Sequence[Op]) -> set[tuple[str, str, str]]:
    """(principal, workspace, title) to list: each create's inbox and its tenant's archive."""
    out: set[tuple[str, str, str]] = set()
    for op in history:
        if op.f != "create" or op.type != "invoke":
            continue
        v = op.value
        principal, workspace, title = str(v["principal"]), str(v["workspace"]), str(v["title"])
        out.add((principal, workspace, title))
        tenant = str(v.get("tenant", ""))
        if tenant.startswith("load") and tenant[4:].isdigit():
            out.add((principal, names.archive(int(tenant[4:])), title))
    return out


async def _listing(transport: Transport, principal: str, workspace: str, title: str) -> list[str]:
    args = {"workspaceUri": workspace, "title": title}
    for attempt in range(READ_ATTEMPTS):
        msg = request("tools/call", {"name": READ_TOOL, "arguments": args})
        try:
            reply = await transport.send(attempt % transport.node_count, principal, msg)
        except (NodeDown, OSError):
            continue
        out = classify(reply)
        notes = ((out.result or {}).get("structuredContent") or {}).get("notes")
        if out.type == "ok" and isinstance(notes, list):
            return [str(n["noteId"]) for n in notes if isinstance(n, dict) and "noteId" in n]
    raise FinalStateUnknown(f"{READ_TOOL} {workspace} {title!r} did not answer")


async def observe_final(transport: Transport, history: Sequence[Op]) -> dict[str, str]:
    """Note id -> the workspace it is listed in, for every title the run created."""
    final: dict[str, str] = {}
    for principal, workspace, title in sorted(_places(history)):
        for note in await _listing(transport, principal, workspace, title):
            final[note] = workspace
    return final
