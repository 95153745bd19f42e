"""What the checker concludes: a Verdict per invariant, a run's CheckResult, and the fold of
Findings into a Verdict.

Layer: loadgen.check, the bottom (imports nothing of ours). Every invariant module builds on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["valid", "invalid", "unknown"]


@dataclass(frozen=True)
class Verdict:
    """One invariant's outcome with the history indices and journal ids that prove it."""

    name: str
    status: Status
    summary: str
    ops: tuple[int, ...] = ()
    journal: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The verdict as one entry of ``results.json``'s ``invariants``."""
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "ops": list(self.ops),
            "journal": list(self.journal),
        }


@dataclass(frozen=True)
class CheckResult:
    """Every verdict of one run plus counters."""

    verdicts: tuple[Verdict, ...]
    counts: dict[str, int] = field(default_factory=dict)
    model: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Per race kind: each answer's legal replies under the model and the replies seen."""
    cost: dict[str, Any] = field(default_factory=dict)
    """What a check over run folders cost: ``jobs``, ``seconds``, peak resident memory."""

    @property
    def status(self) -> Status:
        """invalid if any verdict is, else unknown if any is, else valid."""
        seen = {v.status for v in self.verdicts}
        return "invalid" if "invalid" in seen else "unknown" if "unknown" in seen else "valid"


@dataclass(frozen=True)
class Finding:
    """One violation (or undecidable case) of an invariant."""

    text: str
    ops: Iterable[int] = ()
    journal: Iterable[str] = ()


def verdict(
    name: str, ok_text: str, invalid: list[Finding], unknown: Sequence[Finding] = ()
) -> Verdict:
    """Fold findings into one Verdict; the summary quotes the first finding."""
    chosen: Sequence[Finding] = invalid or unknown
    if not chosen:
        return Verdict(name, "valid", ok_text)
    status: Status = "invalid" if invalid else "unknown"
    word = "violation" if invalid else "undecided case"
    n = len(chosen)
    summary = f"{n} {word}{'s' if n > 1 else ''}, first: {chosen[0].text}."
    ops = sorted({i for f in chosen for i in f.ops})
    journal = list(dict.fromkeys(j for f in chosen for j in f.journal))
    return Verdict(name, status, summary, tuple(ops), tuple(journal))
