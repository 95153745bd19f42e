"""The checker over run folders, one tenant at a time: memory stays bounded as runs grow.

Layer: loadgen. Every invariant of ``loadgen.checker`` is local to a tenant: a flow works in one
tenant, every journal stream, note, nonce and replay entry belongs to one. So one streaming pass
splits the histories (``history.jsonl`` of each load process) into one file per tenant (an
answer goes where its invoke went: they pair on process, flow and operation), then ``check``
runs on each tenant's history and store facts in turn, and ``merge_results`` folds the verdicts.
A run's memory is its biggest tenant's (``simulate`` adds tenants as runs grow:
``workload.tenants_for``), never the whole history.

How a per-partition check plugs in: anything that ``checker.check`` returns for one tenant's
history and facts is merged here verdict by verdict (by name), so a new invariant added to
``check`` (the sequential model's conformance, say) runs per tenant with no change to this module.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from loadgen.checker import CheckResult, Status, Verdict, check
from loadgen.conformance import merge_tables
from loadgen.history import read_history
from loadgen.runfolder import history_files, read_tenant_facts, store_meta
from loadgen.tally import ExerciseRule, judge, merge, read_tallies

MAX_EVIDENCE = 200
"""Most history indices (and journal ids) a merged verdict lists; the summary counts them all."""

UNROUTED = "_unrouted"
"""Partition of answers whose invoke no history holds (the checker ignores them)."""


def split_by_tenant(histories: Iterable[Path], work: Path) -> dict[str, Path]:
    """Stream ``histories`` into ``work/<tenant>.jsonl``, each line unchanged. Memory: the
    operations in flight (invokes waiting for their answer), not the history."""
    files: dict[str, TextIO] = {}
    paths: dict[str, Path] = {}
    pending: dict[tuple[int, int, str], deque[str]] = defaultdict(deque)
    try:
        for path in histories:
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    if not line.strip():
                        continue
                    d = json.loads(line)
                    key = (int(d["process"]), int(d["flow"]), str(d["f"]))
                    if d["type"] == "invoke":
                        tenant = str(d["value"].get("tenant") or UNROUTED)
                        pending[key].append(tenant)
                    else:
                        waiting = pending.get(key)
                        tenant = waiting.popleft() if waiting else UNROUTED
                        if waiting is not None and not waiting:
                            del pending[key]
                    if tenant not in files:
                        paths[tenant] = work / f"{re.sub(r'[^A-Za-z0-9_-]', '_', tenant)}.jsonl"
                        files[tenant] = paths[tenant].open("w", encoding="utf-8")
                    files[tenant].write(line if line.endswith("\n") else line + "\n")
    finally:
        for out in files.values():
            out.close()
    return paths


def check_folders(histories: Sequence[Path], facts_dir: Path) -> CheckResult:
    """Check ``histories`` against the store facts in ``facts_dir`` (``runfolder``), tenant by
    tenant, and merge the verdicts."""
    grace = int(store_meta(facts_dir)["grace_ms"])
    tenants = sorted(store_meta(facts_dir)["redis_end_ms"])
    results: list[CheckResult] = []
    with tempfile.TemporaryDirectory(prefix="nc-check-", dir=facts_dir) as tmp:
        parts = split_by_tenant(histories, Path(tmp))
        for tenant in tenants:
            facts = read_tenant_facts(facts_dir, tenant)
            path = parts.pop(tenant, None)
            ops = read_history(path) if path is not None else []
            results.append(
                check(
                    ops,
                    facts.journal,
                    facts.final_notes,
                    facts.replay_left,
                    redis_end_ms=facts.redis_end_ms,
                    grace_ms=grace,
                )
            )
            del ops, facts
        strays = sorted(t for t in parts if t != UNROUTED)
    merged = merge_results(results)
    if strays:
        stray = Verdict(
            "tenants_read",
            "unknown",
            f"The history names tenants the store facts lack: {', '.join(strays[:8])}.",
        )
        merged = CheckResult((*merged.verdicts, stray), merged.counts, merged.model)
    return merged


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


def recheck(
    run_dirs: Sequence[Path],
    facts_dir: Path,
    rule: ExerciseRule,
    legacy_share: float,
    weights: dict[str, float] | None = None,
) -> dict[str, Any]:
    """``notes-cluster check``: the verdict of run folders from their files alone (histories,
    tallies, and the store facts in ``facts_dir``), as the ``results.json`` fields it decides."""
    histories = [p for d in run_dirs for p in history_files(d)]
    tally = merge(read_tallies(d) for d in run_dirs)
    result = judge(check_folders(histories, facts_dir), tally, legacy_share, rule, weights)
    return {
        "verdict": result.status,
        "invariants": [v.to_json() for v in result.verdicts],
        "counts": dict(result.counts),
        "model": result.model,
        "kinds": tally.per_kind(),
        "flows": {"total": tally.total, "completed": tally.completed},
        "flows_per_s_by_tenth": tally.tenth_rates(),
        "histories": [str(p) for p in histories],
    }
