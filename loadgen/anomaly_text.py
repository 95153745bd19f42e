"""A violation in words: "Let ... Then ...", as Elle writes its anomalies.

Layer: loadgen. Reads a failing invariant (its ``results.json`` entry: name, summary, the history
indices it names) and the history rows, and writes a short text that names each operation once
(A, B, ...: flow, client, kind, what was asked, on which node, when, and what came back) and then
says what those operations together break. No I/O: the caller reads and writes the files.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any

MAX_NAMED = 12
"""Operations named one by one; a larger anomaly is cut, and the cut is said."""


def completions(rows: Sequence[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """For each invocation's history index, the row that completed it (same process, next row)."""
    open_by_process: dict[object, int] = {}
    done: dict[int, Mapping[str, Any]] = {}
    for row in rows:
        process = row.get("process")
        if row.get("type") == "invoke":
            open_by_process[process] = int(row["index"])
        elif process in open_by_process:
            done[open_by_process.pop(process)] = row
    return done


def let_then(invariant: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """The "Let / Then" text of one failing invariant over the history ``rows``."""
    by_index = {int(r["index"]): r for r in rows}
    done = completions(rows)
    invoked_for = {int(c["index"]): i for i, c in done.items()}
    t0 = min((int(r["time_ms"]) for r in rows), default=0)
    named: list[int] = []
    for op in invariant.get("ops", []):
        index = invoked_for.get(int(op), int(op))  # a completion names its invocation
        if index in by_index and index not in named:
            named.append(index)
    lines = ["Let:"]
    for letter, index in zip(_letters(), named[:MAX_NAMED], strict=False):
        lines.append(f"  {letter} = {_describe(by_index[index], done.get(index), t0)}")
    if len(named) > MAX_NAMED:
        lines.append(f"  ... and {len(named) - MAX_NAMED} more operations")
    if not named:
        lines.append("  (the invariant names no operation of the history; see its journal rows)")
    for entry in invariant.get("journal", [])[:MAX_NAMED]:
        lines.append(f"  journal: {_compact(entry)}")
    lines.append("Then:")
    lines.append(f"  {invariant.get('summary', '').strip()}")
    lines.append(f"  so `{invariant.get('name', '?')}` does not hold.")
    return "\n".join(lines) + "\n"


def _describe(invoke: Mapping[str, Any], completion: Mapping[str, Any] | None, t0: int) -> str:
    value = invoke.get("value") or {}
    asked = invoke.get("f", "?")
    details = [f"{k}={value[k]}" for k in ("action", "noteId", "title") if value.get(k)]
    node = value.get("node")
    head = (
        f"flow {invoke.get('flow')} (client {invoke.get('process')}, {invoke.get('kind')}): "
        f"{asked}{' ' + ' '.join(details) if details else ''}"
        f"{f' on node {node}' if node is not None else ''}"
        f" at +{int(invoke['time_ms']) - t0:,} ms [history {invoke['index']}]"
    )
    if completion is None:
        return head + " → no answer recorded"
    return head + f" → {completion.get('type')} {_outcome(completion.get('value') or {})}".rstrip()


def _outcome(value: Mapping[str, Any]) -> str:
    flags = [
        k for k in ("executed", "deleted", "archived", "replay", "reask", "isError") if value.get(k)
    ]
    extra = [f"{k}={value[k]}" for k in ("op", "noteId", "reason", "error") if value.get(k)]
    return " ".join(flags + extra)


def _compact(entry: object) -> str:
    if isinstance(entry, Mapping):
        return ", ".join(f"{k}={v}" for k, v in entry.items())
    return str(entry)


def _letters() -> list[str]:
    single = list(string.ascii_uppercase)
    return single + [a + b for a in single for b in single]
