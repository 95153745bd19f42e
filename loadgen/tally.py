"""What a run exercised: flows per race kind (started, completed, how the others ended), flows
completed and answers per second (the rule that calls an under-exercised run UNKNOWN is
``loadgen.check.exercise``).

Layer: loadgen. Pure data, mergeable: every load process (``simulate --workers``, several
``loadgen`` processes) keeps its own Tally and writes it into its run folder (``tally.json``);
``merge`` adds them up, and ``loadgen.check.exercise`` judges the sum.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Tally:
    """Counters of one run (or the sum of several)."""

    kinds: dict[str, Counter[str]] = field(default_factory=dict)
    """kind -> outcome -> flows (``completed`` or where the setup stopped)."""
    completed_per_s: Counter[int] = field(default_factory=Counter)
    """Second since the run's start -> flows completed in it."""
    answers_per_s: dict[int, list[int]] = field(default_factory=dict)
    """Wall-clock second -> [definite answers, answers of unknown outcome]."""
    elapsed_s: float = 0.0
    loaded_s: float = 0.0
    """Seconds from the run's start to its last flow's start: the span the load was on (after
    it, the flows in flight drain)."""

    def add_flow(self, kind: str, outcome: str, end_s: float) -> None:
        """Count one finished flow; ``end_s`` in seconds since the run's start."""
        self.kinds.setdefault(kind, Counter())[outcome] += 1
        if outcome == "completed":
            self.completed_per_s[max(0, int(end_s))] += 1

    def add_answer(self, wall_ms: int, unknown: bool) -> None:
        """Count one answer (ok, fail: definite; info: unknown) at wall time ``wall_ms``."""
        slot = self.answers_per_s.setdefault(wall_ms // 1000, [0, 0])
        slot[1 if unknown else 0] += 1

    @property
    def total(self) -> int:
        """Flows run."""
        return sum(sum(c.values()) for c in self.kinds.values())

    @property
    def completed(self) -> int:
        """Flows past round 1 that ran their race."""
        return sum(c["completed"] for c in self.kinds.values())

    def per_kind(self) -> dict[str, dict[str, Any]]:
        """kind -> {started, completed, outcomes}, for results.json and the summary."""
        return {
            kind: {
                "started": sum(c.values()),
                "completed": c["completed"],
                "outcomes": dict(sorted(c.items())),
            }
            for kind, c in sorted(self.kinds.items())
        }

    def tenth_rates(self) -> dict[str, float]:
        """Flows completed per second in the first and in the last tenth of the span the load
        was on (``loaded_s``; the drain after the last start is left out), in whole seconds. A
        run too short to cut (under two seconds a tenth) gets its whole-run rate in both, with
        ``whole_run`` true, so that reports do not show it as a trend."""
        span = int(self.loaded_s or self.elapsed_s)
        k = max(1, round(span / 10))
        if span < 2 * k:  # too short to cut: one rate for the whole run, and said so
            rate = self.completed / max(self.elapsed_s, 1e-9)
            return {"first_tenth": rate, "last_tenth": rate, "whole_run": True}
        first = sum(n for s, n in self.completed_per_s.items() if s < k)
        last = sum(n for s, n in self.completed_per_s.items() if span - k <= s < span)
        return {"first_tenth": first / k, "last_tenth": last / k}

    def availability(self, start_wall_ms: int, end_wall_ms: int) -> float | None:
        """Share of answers of known outcome between two wall times (None: no answer)."""
        ok = unknown = 0
        for second in range(start_wall_ms // 1000, end_wall_ms // 1000 + 1):
            a, u = self.answers_per_s.get(second, (0, 0))
            ok, unknown = ok + a, unknown + u
        return None if ok + unknown == 0 else ok / (ok + unknown)

    def to_json(self) -> dict[str, Any]:
        """The ``tally.json`` content."""
        return {
            "kinds": {k: dict(c) for k, c in sorted(self.kinds.items())},
            "completed_per_s": {str(s): n for s, n in sorted(self.completed_per_s.items())},
            "answers_per_s": {str(s): v for s, v in sorted(self.answers_per_s.items())},
            "elapsed_s": self.elapsed_s,
            "loaded_s": self.loaded_s,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Tally:
        """Read what ``to_json`` wrote."""
        return cls(
            {k: Counter({o: int(n) for o, n in c.items()}) for k, c in d["kinds"].items()},
            Counter({int(s): int(n) for s, n in d["completed_per_s"].items()}),
            {int(s): [int(v[0]), int(v[1])] for s, v in d["answers_per_s"].items()},
            float(d["elapsed_s"]),
            float(d.get("loaded_s", 0.0)),
        )


def merge(tallies: Iterable[Tally]) -> Tally:
    """The sum of several processes' tallies (elapsed: the longest)."""
    out = Tally()
    for t in tallies:
        for kind, c in t.kinds.items():
            out.kinds.setdefault(kind, Counter()).update(c)
        out.completed_per_s.update(t.completed_per_s)
        for s, (a, u) in t.answers_per_s.items():
            slot = out.answers_per_s.setdefault(s, [0, 0])
            slot[0], slot[1] = slot[0] + a, slot[1] + u
        out.elapsed_s = max(out.elapsed_s, t.elapsed_s)
        out.loaded_s = max(out.loaded_s, t.loaded_s)
    return out


def tenths_row(tenths: dict[str, Any]) -> tuple[str, str]:
    """A report's row for ``flows_per_s_by_tenth``: first and last tenth, or, for a run too
    short to cut in tenths, its one whole-run rate labelled as such."""
    if tenths.get("whole_run"):
        return "flows/s (too short for tenths)", f"{tenths['first_tenth']:.1f} whole run"
    return "flows/s first / last tenth", f"{tenths['first_tenth']:.1f} / {tenths['last_tenth']:.1f}"
