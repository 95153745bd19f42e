"""The check record, shaped like the official conformance suite's, and the Markdown table.

Layer: loadgen (the pack). Pure module: no I/O. A record is what
``@modelcontextprotocol/conformance`` writes for a check (``id``, ``name``, ``description``,
``status``, ``timestamp``, ``specReferences``, ``details``, ``errorMessage``), so tools that read
that suite's ``checks.json`` read ours.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from loadgen.mrtr_pack.traceability import requirement_of

CheckStatus = Literal["SUCCESS", "FAILURE", "WARNING", "SKIPPED"]

SPEC_MRTR = {
    "id": "MCP-2026-07-28-MRTR",
    "url": "https://modelcontextprotocol.io/specification/2026-07-28/basic/patterns/mrtr",
}
"""The spec's multi-round-trip rules: ``requestState`` is attacker input, bind it, enforce
one-shot server-side, re-ask on silence."""
SPEC_ELICITATION = {
    "id": "MCP-2026-07-28-Elicitation",
    "url": "https://modelcontextprotocol.io/specification/2026-07-28/client/elicitation",
}
"""Form-mode answers: accept, decline, cancel."""
EXACTLY_ONCE = {"id": "notes-cluster-exactly-once"}
"""This project's invariants (its design, section 1): exactly-once mutation, no lost answer,
correct expiry (no URL: docs/explanation/model.md states them)."""


@dataclass
class Check:
    """One check's record."""

    id: str
    name: str
    description: str
    status: CheckStatus = "SKIPPED"
    spec_references: Sequence[dict[str, str]] = (SPEC_MRTR, EXACTLY_ONCE)
    details: dict[str, Any] = field(default_factory=dict)
    error_message: str = ""
    timestamp: str = field(
        default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    )

    def judge(self, status: CheckStatus, message: str = "") -> Check:
        """Set the status and, for anything but SUCCESS, the reason; returns self."""
        self.status = status
        self.error_message = message
        return self

    def to_json(self) -> dict[str, Any]:
        """The record as the official suite spells it."""
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "status": self.status,
            "timestamp": self.timestamp,
            "specReferences": list(self.spec_references),
            "details": self.details,
        }
        if self.error_message:
            out["errorMessage"] = self.error_message
        return out


def failed(checks: Sequence[Check]) -> bool:
    """Whether any check is a FAILURE (WARNING and SKIPPED are not)."""
    return any(c.status == "FAILURE" for c in checks)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(checks: Sequence[Check], targets: Sequence[str], *, requirements: bool = True) -> str:
    """A table of the run: one row per check, the spec requirement it tests (``checks.md``;
    the console leaves that long column out and names where to read it), status and what was
    seen."""
    counts = {s: sum(c.status == s for c in checks) for s in ("SUCCESS", "FAILURE", "WARNING")}
    lines = [
        "# MRTR exactly-once conformance",
        "",
        f"Targets: {', '.join(targets)}",
        "",
        f"{counts['SUCCESS']} SUCCESS, {counts['FAILURE']} FAILURE, {counts['WARNING']} WARNING, "
        f"{len(checks) - sum(counts.values())} SKIPPED",
        "",
    ]
    if requirements:
        lines += ["| Check | Requirement | Status | Seen |", "|---|---|---|---|"]
    else:
        lines += [
            "The requirement each check tests: `notes-cluster conformance --traceability`.",
            "",
            "| Check | Status | Seen |",
            "|---|---|---|",
        ]
    for c in checks:
        seen = c.error_message or str(c.details.get("summary", ""))
        need = f" {_cell(requirement_of(c.id))} |" if requirements else ""
        lines.append(f"| `{c.id}` {_cell(c.name)} |{need} {c.status} | {_cell(seen)} |")
    return "\n".join(lines) + "\n"


def comparison(columns: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> str:
    """Several runs' ``checks.json`` side by side: one row per check id, one column per run."""
    ids: list[str] = []
    names: dict[str, str] = {}
    for _, records in columns:
        for r in records:
            if r["id"] not in names:
                ids.append(r["id"])
                names[r["id"]] = r["name"]
    head = "| Check | " + " | ".join(label for label, _ in columns) + " |"
    lines = [head, "|---|" + "---|" * len(columns)]
    for cid in ids:
        cells = []
        for _, records in columns:
            status = next((r["status"] for r in records if r["id"] == cid), "-")
            cells.append(status)
        lines.append(f"| `{cid}` {_cell(names[cid])} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
