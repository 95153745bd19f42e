"""Fault windows in a long run: every window in ``results.json``, a summary for people.

Layer: loadgen. A soak with ``--faults`` plays thousands of windows; the console table, the HTML
page and the picture list them one by one only up to ``LISTED_MAX``, and beyond that show one
row per kind and action: how many windows, how long in all, and the share of answers of known
outcome during them (median and worst).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median
from typing import Any

LISTED_MAX = 24
"""Most fault windows shown one by one (and labelled in the picture)."""


def summarize(windows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per kind and action (in order of first appearance): ``count``, ``seconds`` in all, and
    ``answered_median`` / ``answered_min`` over the windows that saw an answer (None: none)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for w in windows:
        groups.setdefault((w["kind"], w["action"]), []).append(w)
    rows = []
    for (kind, action), ws in groups.items():
        seen = [w["availability"] for w in ws if w.get("availability") is not None]
        rows.append(
            {
                "kind": kind,
                "action": action,
                "count": len(ws),
                "seconds": sum(w["end_s"] - w["start_s"] for w in ws),
                "answered_median": median(seen) if seen else None,
                "answered_min": min(seen) if seen else None,
            }
        )
    return rows


def share(value: float | None) -> str:
    """A share as a percentage, ``-`` for none."""
    return "-" if value is None else f"{value:.0%}"
