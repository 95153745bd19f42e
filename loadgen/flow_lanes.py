"""A timeline of a few flows: one lane per client, one bar per operation, fault windows shaded.

Layer: loadgen. For a shrunk run (a handful of flows), where the throughput picture of
``loadgen.pictures`` says nothing: each operation is a bar from its invocation to its completion,
coloured by how it ended (ok, fail, info: outcome unknown), labelled with what was asked and on
which node; fault windows are shaded behind. Times are milliseconds from the first history row.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # Files only: never pick an interactive backend, even with a display.

import matplotlib.pyplot as plt

from loadgen.anomaly_text import completions

OUTCOME_COLOR = {"ok": "#1a7f37", "fail": "#cf222e", "info": "#bf8700", None: "#8c959f"}
FAULT_COLOR = "#d1242f"
LANE_HEIGHT_IN = 0.55
WIDTH_IN = 12.0
DPI = 100

FaultSpan = tuple[float, float, str]
"""A fault window as the lanes draw it, in milliseconds from the first history row: start,
end, label (the checker's is ``loadgen.check.limits.FaultWindow``)."""


def render_lanes(
    rows: Sequence[Mapping[str, Any]],
    faults: Sequence[FaultSpan],
    path: Path,
    title: str = "",
    *,
    axis: str = "auto",
) -> None:
    """Draw ``rows`` (history rows of a few flows) as lanes into ``path`` (PNG).

    ``axis``: ``"ms"`` places each operation by its time; ``"step"`` by its place in the
    history (a virtual-time run does many operations in one millisecond, which the time axis
    draws on top of each other); ``"auto"``: steps when two rows share a millisecond."""
    at, windows, x_label = layout(rows, faults, axis)
    done = completions(rows)
    lanes = sorted({r.get("process") for r in rows}, key=lambda p: (p is None, p))
    lane_of = {p: i for i, p in enumerate(lanes)}
    end_x = max(at.values(), default=0.0)
    height = max(2.0, 1.2 + LANE_HEIGHT_IN * len(lanes))
    fig, ax = plt.subplots(figsize=(WIDTH_IN, height), dpi=DPI)
    try:
        for start, end, label in windows:
            ax.axvspan(start, end, color=FAULT_COLOR, alpha=0.12, linewidth=0, zorder=0)
            ax.text(start, len(lanes) - 0.4, f" {label}", fontsize=8, color=FAULT_COLOR)
        for row in rows:
            if row.get("type") != "invoke":
                continue
            finish = done.get(int(row["index"]))
            begin = at[int(row["index"])]
            stop = at[int(finish["index"])] if finish else end_x
            outcome = finish.get("type") if finish else None
            lane = lane_of[row.get("process")]
            width = max(stop - begin, end_x / 400 or 1)
            ax.barh(lane, width, left=begin, height=0.6, color=OUTCOME_COLOR.get(outcome))
            node = (row.get("value") or {}).get("node")
            label = f"{row.get('f')}" + (f"@n{node}" if node is not None else "")
            ax.text(begin, lane + 0.36, label, fontsize=7, va="bottom")
        ax.set_yticks(range(len(lanes)))
        ax.set_yticklabels([_lane_label(p, rows) for p in lanes], fontsize=8)
        ax.set_ylim(-0.6, len(lanes) - 0.1)
        ax.set_xlabel(x_label)
        ax.invert_yaxis()
        ax.set_title(title or "flows", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def layout(
    rows: Sequence[Mapping[str, Any]], faults: Sequence[FaultSpan], axis: str = "auto"
) -> tuple[dict[int, float], list[FaultSpan], str]:
    """Where ``render_lanes`` puts each row (by history index) and each fault window on the x
    axis, and the axis' label (``axis`` as ``render_lanes`` takes it)."""
    times = [int(r["time_ms"]) for r in rows]
    t0 = min(times, default=0)
    if axis == "auto":
        axis = "step" if len(set(times)) < len(times) else "ms"
    if axis == "ms":
        at = {int(r["index"]): float(int(r["time_ms"]) - t0) for r in rows}
        return at, list(faults), "ms since the first operation"
    ordered = sorted(times)
    at = {int(r["index"]): float(i) for i, r in enumerate(rows)}
    windows = [
        (float(bisect_left(ordered, t0 + a)), float(bisect_right(ordered, t0 + b)), label)
        for a, b, label in faults
    ]
    return at, windows, "history step (operations in the order the history records them)"


def fault_windows(faults: Sequence[Mapping[str, Any]], t0_ms: int) -> list[FaultSpan]:
    """``faults.json`` rows (wall-clock seconds) as windows in ms from ``t0_ms``."""
    return [
        (
            float(f["start_wall"]) * 1000 - t0_ms,
            float(f["end_wall"]) * 1000 - t0_ms,
            f"{f.get('kind', '')} {f.get('action', '')}".strip(),
        )
        for f in faults
    ]


def _lane_label(process: object, rows: Sequence[Mapping[str, Any]]) -> str:
    flows = sorted({r.get("flow") for r in rows if r.get("process") == process}, key=str)
    return f"client {process} (flow {', '.join(str(f) for f in flows)})"
