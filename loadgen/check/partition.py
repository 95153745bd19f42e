"""The checker over run folders, one tenant at a time: memory stays bounded as runs grow.

Layer: loadgen.check, the top: it reads run folders (``loadgen.run.folder``) and runs
``invariants.check`` per tenant. Every invariant of ``loadgen.check.invariants`` is local to a
tenant: a flow works in one tenant, every journal stream, note, nonce and replay entry belongs
to one. So one streaming pass splits the histories (``history.jsonl`` of each load process) into
one file per tenant (an answer goes where its invoke went: ``loadgen.check.pairing``), then
``check`` runs on each tenant's history and store facts in turn, and
``merge.merge_results`` folds the verdicts. A run's memory is its biggest tenant's (``simulate``
adds tenants as runs grow: ``workload.tenants_for``), never the whole history.

How a per-partition check plugs in: anything that ``invariants.check`` returns for one tenant's
history and facts is merged verdict by verdict (by name), so a new invariant added to ``check``
(the sequential model's search, say) runs per tenant with no change to this module.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from loadgen.check.invariants import check
from loadgen.check.limits import FaultWindow, Limits
from loadgen.check.merge import merge_results
from loadgen.check.pairing import InFlight
from loadgen.check.verdict import CheckResult, Verdict
from loadgen.history import (
    SHAPE_ERRORS,
    DamagedRunFile,
    Op,
    iter_history,
    json_lines,
    wrong_shape,
)
from loadgen.run.folder import (
    FAULTS_FILE,
    META_FILE,
    STORE_DIR,
    read_fault_rows,
    read_tenant_facts,
    store_meta,
)

UNROUTED = "_unrouted"
"""Partition of answers whose invoke no history holds, and of invokes naming no tenant (with
their answers): not checked, and counted (a run writes none, so any makes the verdict UNKNOWN:
the history was cut or edited)."""


def split_by_tenant(history: Path, work: Path) -> dict[str, Path]:
    """Stream one load process's ``history`` into ``work/<tenant>.jsonl``, each line unchanged
    (``DamagedRunFile`` at a line that is not a history entry). Memory: the operations in
    flight (invokes waiting for their answer), not the history."""
    work.mkdir(parents=True, exist_ok=True)
    files: dict[str, BinaryIO] = {}
    paths: dict[str, Path] = {}
    in_flight: InFlight[str] = InFlight()
    what = "the history's entries"
    try:
        for number, line, d in json_lines(history, what):
            try:
                op = Op.from_dict(d)
            except SHAPE_ERRORS as exc:
                raise wrong_shape(history, number, what, exc) from None
            key = (op.process, op.flow, op.f)
            if op.type == "invoke":
                tenant = str(op.value.get("tenant") or UNROUTED)
                in_flight.invoke(op.index, key, tenant)
            else:
                tenant = in_flight.complete(key, op.completes) or UNROUTED
            if tenant not in files:
                paths[tenant] = work / f"{re.sub(r'[^A-Za-z0-9_-]', '_', tenant)}.jsonl"
                files[tenant] = paths[tenant].open("wb")
            files[tenant].write(line if line.endswith(b"\n") else line + b"\n")
    finally:
        for out in files.values():
            out.close()
    return paths


POOL_MIN_BYTES = 32 * 2**20
"""Histories smaller than this (about 8k flows) are checked in this process unless told
otherwise: starting pool processes would cost more than they save."""


def default_jobs(histories: Sequence[Path]) -> int:
    """Processes a check of ``histories`` uses unless told: one per CPU this process may run
    on, or just this one for a small run."""
    if sum(p.stat().st_size for p in histories) < POOL_MIN_BYTES:
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


T = TypeVar("T")
R = TypeVar("R")


def _map(work: Callable[[T], R], tasks: Sequence[T], jobs: int) -> tuple[list[R], float]:
    """``work`` over ``tasks``, in order: in this process, or in a pool of ``jobs`` fresh
    processes (spawned: the caller may be a threaded trio program). Also the largest peak
    resident memory of a pool process, in MB (0 when no pool ran)."""
    if jobs <= 1 or len(tasks) <= 1:
        return [work(t) for t in tasks], 0.0
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx) as pool:
        done = list(pool.map(partial(_with_peak, work), tasks))
    return [r for r, _ in done], max(peak for _, peak in done)


def _with_peak(work: Callable[[T], R], task: T) -> tuple[R, float]:
    return work(task), own_peak_mb()


def own_peak_mb() -> float:
    """This process's peak resident memory in MB since its program started. Linux's ``VmHWM``,
    not ``ru_maxrss``: a spawned process inherits, across fork and exec, its parent's
    ``ru_maxrss`` at the fork (a pool started by a 400 MB load process would report 400 MB),
    and ``RUSAGE_CHILDREN`` also counts ``--workers`` load processes."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)  # kB
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def _count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for line in fh if line.strip())


def _split_one(task: tuple[Path, Path]) -> dict[str, Path]:
    return split_by_tenant(*task)


@dataclass(frozen=True)
class TenantCheck:
    """One partition of the check: a tenant's history parts (one per load process, in order)
    against its store facts."""

    facts_dir: Path
    tenant: str
    grace_ms: int
    parts: tuple[Path, ...]
    limits: Limits | None = None
    faults: tuple[FaultWindow, ...] | None = None


def check_tenant(task: TenantCheck) -> CheckResult:
    """Check one tenant: its history against its store facts (a pool task)."""
    facts = read_tenant_facts(task.facts_dir, task.tenant)
    ops = [op for part in task.parts for op in iter_history(part)]
    return check(
        ops,
        facts.journal,
        facts.final_notes,
        facts.replay_left,
        redis_end_ms=facts.redis_end_ms,
        grace_ms=task.grace_ms,
        limits=task.limits,
        faults=task.faults,
        records=facts.records,
    )


def check_folders(
    histories: Sequence[Path], facts_dir: Path, jobs: int | None = None
) -> CheckResult:
    """Check ``histories`` (one file per load process) against the store facts in ``facts_dir``
    (``loadgen.run.folder``), tenant by tenant, and merge the verdicts. ``jobs`` processes
    (default: one per CPU for a big run) split the histories and check tenants side by side;
    memory is then up to ``jobs`` tenants' at once, time about 1/``jobs``."""
    jobs = default_jobs(histories) if jobs is None else max(1, jobs)
    started = time.monotonic()
    meta = store_meta(facts_dir)
    grace = int(meta["grace_ms"])
    tenants = sorted(meta["redis_end_ms"])
    limits, faults = _limits_and_faults(meta, facts_dir, histories)
    with tempfile.TemporaryDirectory(prefix="nc-check-", dir=facts_dir) as tmp:
        splits = [(h, Path(tmp) / str(i)) for i, h in enumerate(histories)]
        parts: dict[str, list[Path]] = {}
        split_all, split_peak = _map(_split_one, splits, jobs)
        for split in split_all:  # in history order: a tenant's parts too
            for tenant, path in split.items():
                parts.setdefault(tenant, []).append(path)
        tasks = [
            TenantCheck(facts_dir, t, grace, tuple(parts.pop(t, ())), limits, faults)
            for t in tenants
        ]
        results, check_peak = _map(check_tenant, tasks, jobs)
        strays = sorted(t for t in parts if t != UNROUTED)
        unpaired = sum(_count_lines(p) for p in parts.get(UNROUTED, ()))
    merged = merge_results(results)
    unread = []
    if strays:
        unread.append(f"The history names tenants the store facts lack: {', '.join(strays[:8])}.")
    if unpaired:
        unread.append(
            f"{unpaired} answers in the history have no invoke before them, or belong to an "
            "invoke naming no tenant (a history cut or edited), so they were not checked."
        )
    if unread:
        stray = Verdict("tenants_read", "unknown", " ".join(unread))
        merged = CheckResult((*merged.verdicts, stray), merged.counts, merged.model)
    seconds = round(time.monotonic() - started, 2)
    cost = {
        "jobs": jobs,
        "seconds": seconds,
        "peak_rss_mb": own_peak_mb(),
        "child_peak_rss_mb": max(split_peak, check_peak),
    }
    return replace(merged, cost=cost)


def _limits_and_faults(
    meta: dict[str, Any], facts_dir: Path, histories: Sequence[Path]
) -> tuple[Limits | None, tuple[FaultWindow, ...] | None]:
    """The configured bounds in ``store/meta.json`` and the fault windows every load process
    recorded beside its history (None: not recorded, an older folder)."""
    path = facts_dir / STORE_DIR / META_FILE
    try:
        limits = Limits.from_json(meta["limits"]) if "limits" in meta else None
    except SHAPE_ERRORS as exc:
        raise DamagedRunFile(f"{path}: limits are not the configured bounds ({exc!r})") from None
    rows: list[dict[str, Any]] | None = None
    for folder in dict.fromkeys([facts_dir, *(h.parent for h in histories)]):
        found = read_fault_rows(folder)
        if found is not None:
            rows = (rows or []) + found
    try:
        faults = None if rows is None else tuple(FaultWindow.from_record(r) for r in rows)
    except SHAPE_ERRORS as exc:
        raise DamagedRunFile(f"{facts_dir}: a {FAULTS_FILE} row is not a fault ({exc!r})") from None
    return limits, faults
