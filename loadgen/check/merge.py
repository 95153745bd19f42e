"""One verdict from many: the results of a check over partitions (tenants) folded verdict by
verdict, with their evidence capped.

Layer: loadgen.check, above ``verdict`` and ``model_search`` (whose tables of replies it merges).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from loadgen.check.model_search import merge_tables
from loadgen.check.verdict import CheckResult, Status, Verdict

MAX_EVIDENCE = 200
"""Most history indices (and journal ids) a merged verdict lists; the summary counts them all."""


def merge_results(results: Sequence[CheckResult]) -> CheckResult:
    """Fold per-partition results: per verdict name the worst status, the findings' evidence
    joined (capped), counts summed, the model's tables of replies seen merged."""
    by_name: dict[str, list[Verdict]] = {}
    counts: dict[str, int] = {}
    for r in results:
        for v in r.verdicts:
            by_name.setdefault(v.name, []).append(v)
        for k, n in r.counts.items():
            counts[k] = counts.get(k, 0) + n
    verdicts = tuple(merge_verdicts(vs) for vs in by_name.values())
    return CheckResult(verdicts, counts, merge_tables(r.model for r in results))


STATUS_RANK: dict[Status, int] = {"valid": 0, "unknown": 1, "invalid": 2}


def merge_verdicts(vs: Sequence[Verdict]) -> Verdict:
    """One verdict from the same invariant's verdicts over several partitions."""
    worst = max(vs, key=lambda v: STATUS_RANK[v.status]).status
    same = [v for v in vs if v.status == worst]
    if len(vs) == 1:
        return vs[0]
    if worst == "valid":
        summary = _summed(v.summary for v in same)
    else:
        summary = f"In {len(same)} of {len(vs)} partitions. " + " ".join(
            v.summary for v in same[:3]
        )
    ops = tuple(sorted({i for v in same for i in v.ops}))[:MAX_EVIDENCE]
    journal = tuple(dict.fromkeys(j for v in same for j in v.journal))[:MAX_EVIDENCE]
    return Verdict(vs[0].name, worst, summary, ops, journal)


def _summed(summaries: Iterable[str]) -> str:
    """Texts equal but for their numbers become one text with the numbers summed."""
    texts = list(summaries)
    shapes = {re.sub(r"\d+", "#", t) for t in texts}
    if len(shapes) != 1:
        return texts[0]
    numbers = [[int(n) for n in re.findall(r"\d+", t)] for t in texts]
    totals = iter([sum(col) for col in zip(*numbers, strict=True)])
    return re.sub(r"\d+", lambda _: str(next(totals)), texts[0])
