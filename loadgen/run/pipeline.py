"""The one way a run happens: ``run(target, plan, folder)`` and ``recheck(folders)``.

Layer: loadgen. ``run`` drives the load at a ``Target`` (its faults alongside), records the
history into the ``RunFolder``, and then, unless the plan only records (a ``--workers`` load
process), checks it: ``settle`` (the one wait for every state to expire plus grace, on the Redis
clock), the store facts written into the folder, the check, ``judge`` (the one place the
exercise verdict is applied), ``Results``. ``recheck`` does the same for finished folders (the
``--workers`` parent, ``notes-cluster check``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import trio

from loadgen.check.exercise import ExerciseRule, exercise_verdict, expected_kinds
from loadgen.check.invariants import check
from loadgen.check.legacy import LegacyFacts
from loadgen.check.limits import MAX_OFFERED, FaultWindow
from loadgen.check.partition import check_folders
from loadgen.check.records import StoreRecords
from loadgen.check.verdict import CheckResult, Verdict
from loadgen.history import History, recording
from loadgen.run.folder import RunFolder, WorkerRecord
from loadgen.run.phases import announce
from loadgen.run.results import RecordedSettings, Results
from loadgen.run.target import StoreAccess, Target
from loadgen.runner import FlowSample, RunSettings, RunStats, run_load
from loadgen.tally import Tally, merge
from loadgen.tenants import principals_of
from store.api import OP_RECORD_TTL_MS
from store.client_factory import sync_client
from store.journal import (
    list_replay_entries,
    read_final_notes,
    read_journal,
    read_store_records,
)
from store.session_facts import read_session_facts

T = TypeVar("T")

KEEP_OPS_MAX = 50_000
"""Runs of up to this many flows also keep their history in memory (tests read it); longer
ones only stream it to the run folder."""

INDEX_STRIDE = 10**12
"""History indices of load process k start at k * INDEX_STRIDE: one run's never collide."""

FLOW_STRIDE = 10**9
"""Load process k's flow ids start at k * FLOW_STRIDE."""

EXPIRY_SETTLE_S = 0.5
"""Extra wait past the last expiry plus grace before looking for leftover replay entries."""

NOT_CHECKED = Verdict(
    "checked",
    "unknown",
    "No --redis given: the history was recorded but not checked against the store.",
)

RECORDED_ONLY = Verdict("checked", "unknown", "A worker records; its parent checks.")


@dataclass(frozen=True)
class Plan:
    """What load to run, and how its verdict is judged."""

    settings: RunSettings = field(default_factory=RunSettings)
    exercise: ExerciseRule = field(default_factory=ExerciseRule)
    process: int = 0
    """This load process's number: its flow ids and history indices start at k times the
    strides (processes of one run never collide)."""
    workers: int = 1
    """Load processes of the run (recorded in the settings)."""
    record_only: bool = False
    """A load process of several: record the history, tally, latency and faults; check nothing
    (its parent does, ``recheck``)."""
    keep_history: bool | None = None
    """Keep the history in memory too; None: for runs of at most ``KEEP_OPS_MAX`` flows or
    without a run folder."""

    def fresh(self) -> Plan:
        """The plan with a tag of its own in every flow's title (a store outlives runs)."""
        if self.settings.tag != "run":
            return self
        return replace(self, settings=replace(self.settings, tag=secrets.token_hex(3)))


@dataclass
class Run:
    """A finished run: its results, the judged check, what the load measured."""

    results: Results
    result: CheckResult
    stats: RunStats
    history: History
    folder: RunFolder | None

    @property
    def run_dir(self) -> Path | None:
        return None if self.folder is None else self.folder.path

    @property
    def races(self) -> dict[str, int]:
        """Flows of each race kind that got past round 1."""
        return self.results.races or {}

    def to_json(self) -> dict[str, Any]:
        """``results.json``'s content."""
        return self.results.to_json()

    def faults_json(self) -> list[dict[str, Any]]:
        """The fault windows, by start, in seconds from the run's start, with availability."""
        return list(self.results.faults)


async def run(
    target: Target,
    plan: Plan,
    folder: RunFolder | None,
    on_flow: Callable[[FlowSample], None] | None = None,
) -> Run:
    """Run ``plan``'s load at ``target``, check it and write its results into ``folder``."""
    s = plan.settings
    if plan.process and not s.first_flow:
        s = replace(s, first_flow=plan.process * FLOW_STRIDE)
    keep = folder is None or s.flows <= KEEP_OPS_MAX
    if plan.keep_history is not None and folder is not None:
        keep = plan.keep_history
    store = target.store
    offset = 0 if store is None else await off_loop(store, redis_offset_ms, store.url)
    history_file = None if folder is None else folder.history_file
    with recording(history_file, keep=keep, first_index=plan.process * INDEX_STRIDE) as history:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(target.nemesis)
            stats = await run_load(
                target.transport,
                target.key_ring,
                target.audience,
                s,
                history,
                redis_offset_ms=offset,
                on_flow=on_flow,
                legacy=target.legacy,
                pick_limit=MAX_OFFERED
                if store is None or store.limits is None
                else store.limits.max_offered,
            )
            nursery.cancel_scope.cancel()
    rows = target.fault_rows()
    if plan.record_only:
        assert folder is not None, "a load process that only records needs its folder"
        folder.write_tally(stats.tally)
        folder.write_latency(stats.histogram)
        folder.write_worker_record(WorkerRecord(history.max_exp_ms, stats.started_wall_ms))
        folder.write_faults(rows or [])
        result = CheckResult((RECORDED_ONLY,))
        results = _results(target, plan, stats, history, result, [])
        return Run(results, result, stats, history, folder)
    if store is None:
        result = CheckResult((NOT_CHECKED,))
    else:
        result = await check_history(history, store, folder, rows)
    result = judged(result, stats.tally, plan.exercise, s)
    windows = availability(target.fault_windows(stats.started_s), stats)
    results = _results(target, plan, stats, history, result, windows)
    results = replace(results, key_distribution=await target.key_distribution())
    if folder is not None:
        folder.write_tally(stats.tally)
        results.write(folder)
    return Run(results, result, stats, history, folder)


def _results(
    target: Target,
    plan: Plan,
    stats: RunStats,
    history: History,
    result: CheckResult,
    windows: list[dict[str, Any]],
) -> Results:
    store = target.store
    since = 0 if store is None else store.journal_since_ms
    settings = recorded_settings(
        target.describe(), plan, history.max_exp_ms, stats.started_wall_ms, since
    )
    return Results.of_run(result, stats, settings, faults=windows)


def recorded_settings(
    d: dict[str, Any], plan: Plan, max_exp_ms: int, started_wall_ms: int, since_ms: int = 0
) -> RecordedSettings:
    """``results.json``'s settings: the plan's, the target's (``d``: ``Target.describe``) and
    the instants of the run."""
    return RecordedSettings.of(
        plan.settings,
        nodes=int(d["nodes"]),
        store=str(d["store"]),
        state_ttl_s=float(d["state_ttl_s"]),
        replay_grace_ms=int(d["replay_grace_ms"]),
        workers=plan.workers,
        exercise=plan.exercise,
        faults=tuple(d.get("faults", ())),
        fault_seed=d.get("fault_seed"),
        wait_replicas=int(d.get("wait_replicas", 0)),
        journal_since_ms=since_ms,
        max_exp_ms=max_exp_ms,
        started_wall_ms=started_wall_ms,
    )


def availability(windows: list[dict[str, Any]], stats: RunStats) -> list[dict[str, Any]]:
    """Each fault window with the share of answers of known outcome during it."""
    wall0 = stats.started_wall_ms
    out = []
    for d in windows:
        start, end = wall0 + int(d["start_s"] * 1000), wall0 + int(d["end_s"] * 1000)
        out.append(d | {"availability": stats.tally.availability(start, end)})
    return out


def judged(
    result: CheckResult,
    tally: Tally,
    rule: ExerciseRule,
    run: RunSettings | RecordedSettings,
    families: Sequence[Sequence[str]] | None = None,
) -> CheckResult:
    """The one place the exercise verdict is applied: an under-exercised run is UNKNOWN.
    ``families``: the race kinds the run must exercise (default: every modern kind, and every
    legacy kind under a legacy share)."""
    kinds = expected_kinds(run.legacy_share) if families is None else families
    verdict = exercise_verdict(tally, kinds, rule, run.weights)
    return replace(result, verdicts=(*result.verdicts, verdict))


# --- settle: the one wait for expiry --------------------------------------------------------


async def off_loop(store: StoreAccess, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` (a blocking store read or the check) in a worker thread, or in this one
    for an inline store (``StoreAccess.inline``: virtual time stands still meanwhile)."""
    if store.inline:
        return fn(*args)
    return await trio.to_thread.run_sync(fn, *args)


def redis_offset_ms(url: str) -> int:
    """The Redis clock minus this machine's wall clock, in ms."""
    client = sync_client(url)
    try:
        sec, usec = client.time()
        return int(sec) * 1000 + int(usec) // 1000 - int(time.time() * 1000)
    finally:
        client.close()


async def settle(store: StoreAccess, last_exp_ms: int, fallback_s: float = 0.0) -> None:
    """Wait until the last state (``last_exp_ms``, Redis clock) expired plus the replay grace,
    and a settling margin: only then do the store facts say what the run left behind. Without
    a known last expiry (0: an older folder), ``fallback_s`` plus grace from now."""
    grace_s = store.replay_grace_ms / 1000
    if last_exp_ms > 0:
        offset = await off_loop(store, redis_offset_ms, store.url)
        now_ms = int(time.time() * 1000) + offset
        wait_s = max(0.0, (last_exp_ms - now_ms) / 1000 + grace_s)
    else:
        wait_s = fallback_s + grace_s
    total_s = wait_s + EXPIRY_SETTLE_S
    announce(f"waiting {total_s:.0f} s for the last states to expire (then the check)")
    await trio.sleep(total_s)


# --- check ------------------------------------------------------------------------------------


async def check_history(
    history: History,
    store: StoreAccess,
    folder: RunFolder | None = None,
    fault_rows: list[dict[str, Any]] | None = None,
) -> CheckResult:
    """Settle, read the store, check ``history`` against it (not judged). With a run folder,
    the store facts are written into it first (with the limits and the fault windows) and the
    check streams the folder tenant by tenant (``loadgen.check.partition``); without one, it runs in
    memory. ``fault_rows`` None: unknown outcomes not held to any."""
    await settle(store, history.max_exp_ms)
    announce("reading the store")
    if folder is not None:
        if fault_rows is not None:
            folder.write_faults(fault_rows)
        await _dump_facts(folder, store)
        announce("checking the history")
        return await off_loop(store, check_folders, folder.histories(), folder.path)
    facts = await off_loop(store, _read_store, store)
    announce("checking the history")
    windows = None if fault_rows is None else [FaultWindow.from_record(r) for r in fault_rows]
    journal, final, replay, redis_end_ms, records, legacy = facts
    return check(
        history.ops,
        journal,
        final,
        replay,
        redis_end_ms=redis_end_ms,
        grace_ms=store.replay_grace_ms,
        limits=store.limits,
        faults=windows,
        records=records,
        legacy=legacy,
    )


async def _dump_facts(folder: RunFolder, store: StoreAccess) -> None:
    limits = None if store.limits is None else store.limits.to_json()
    dump = partial(folder.dump_store_facts, limits=limits, since_ms=store.journal_since_ms)
    await off_loop(store, dump, store.url, store.prefix, list(store.tenants), store.replay_grace_ms)


def _read_store(store: StoreAccess) -> tuple[Any, Any, Any, int, StoreRecords, LegacyFacts]:
    client = sync_client(store.url, decode_responses=True)
    try:
        tenants = list(store.tenants)
        journal = read_journal(client, store.prefix, tenants, store.journal_since_ms)
        final = read_final_notes(client, store.prefix, tenants)
        replay = list_replay_entries(client, store.prefix, tenants)
        records = _records(client, store.prefix, tenants)
        principals = [p for t in tenants for p in principals_of(t)]
        legacy = LegacyFacts.from_json(read_session_facts(client, store.prefix, principals))
        sec, usec = client.time()
        return journal, final, replay, int(sec) * 1000 + int(usec) // 1000, records, legacy
    finally:
        client.close()


def _records(client: Any, prefix: str, tenants: Sequence[str]) -> StoreRecords:
    """Every tenant's operation records and usage counters, as one (tenants never share one:
    each counter and record name is within its tenant, prefixed by it here)."""
    ops: dict[str, int] = {}
    usage: dict[str, int] = {}
    recount: dict[str, int] = {}
    for tenant in tenants:
        found = read_store_records(client, prefix, tenant)
        ops |= {f"{tenant}/{k}": v for k, v in found["ops"].items()}
        usage |= {f"{tenant}/{k}": v for k, v in found["usage"].items()}
        recount |= {f"{tenant}/{k}": v for k, v in found["recount"].items()}
    return StoreRecords(ops, usage, recount, OP_RECORD_TTL_MS)


# --- recheck: finished folders ----------------------------------------------------------------

JOURNAL_SINCE_WALL_MARGIN_MS = 1_000
"""Folders that recorded no journal start (``loadgen`` without ``--redis``) are known by their
own wall clock only: the journal is read from a second before it (a run that ended earlier
waited out its states' expiry and grace before its check: nothing of it falls in the margin)."""


@dataclass(frozen=True)
class Rechecked:
    """The judged check of finished folders and their load processes' tally."""

    result: CheckResult
    tally: Tally
    histories: tuple[str, ...]

    def results(self) -> Results:
        """``notes-cluster check``'s results: what the check decides, the histories read."""
        return Results.of_check(self.result, self.tally, histories=self.histories)


async def recheck(
    folders: Sequence[RunFolder],
    store: StoreAccess | None = None,
    *,
    settings: RecordedSettings | None = None,
    exercise: ExerciseRule | None = None,
    jobs: int | None = None,
) -> Rechecked:
    """Check finished run folders (one per load process, or one holding ``worker-*``
    subfolders) as one run. With ``store``, first settle (from the last expiry the folders
    recorded) and write its facts into the first folder; else the facts already in a folder
    are read. ``settings``: the run's (else what the first folder's ``results.json`` says);
    ``exercise``: the rule (else the settings'). ``DamagedRunFile`` at a damaged folder;
    ``MissingFacts`` when no folder holds store facts."""
    first = folders[0]
    saved = [Results.saved_settings(f) for f in folders]
    run = settings or saved[0]
    if store is not None:
        await settle(store, _last_expiry(folders, saved), run.state_ttl_s or 0.0)
        if not store.journal_since_ms:
            since = await off_loop(store, _journal_since, saved, store.url)
            store = replace(store, journal_since_ms=since)
        announce("reading the store")
        await _dump_facts(first, store)
    facts = next((f for f in folders if f.has_store_facts()), None)
    if facts is None:
        raise MissingFacts(f"no store facts in {first}: give the store to read them from")
    histories = [p for f in folders for p in f.histories()]
    tally = merge(f.tally() for f in folders)
    announce("checking the history")
    found = await trio.to_thread.run_sync(check_folders, histories, facts.path, jobs)
    rule = exercise or run.exercise(None, None)
    return Rechecked(judged(found, tally, rule, run), tally, tuple(str(p) for p in histories))


FALLBACK_GRACE_MS = 1_000
"""The replay grace of folders whose ``results.json`` records none (a simulation's)."""


def folders_store(
    url: str, prefix: str, tenants: Sequence[str], run: RecordedSettings
) -> StoreAccess:
    """Where ``notes-cluster check --redis`` reads the facts of folders whose run recorded
    ``run``: the grace they recorded (else ``FALLBACK_GRACE_MS``), the journal from where they
    started (found by ``recheck``)."""
    grace = FALLBACK_GRACE_MS if run.replay_grace_ms is None else run.replay_grace_ms
    return StoreAccess(url, prefix, tuple(tenants), grace)


class MissingFacts(RuntimeError):
    """No folder of a check holds store facts, and no store was given to read them from."""


def _last_expiry(folders: Sequence[RunFolder], saved: Sequence[RecordedSettings]) -> int:
    """The last state expiry the folders' runs recorded (Redis clock; 0: some did not)."""
    ends = []
    for f, s in zip(folders, saved, strict=True):
        workers = f.workers()
        if s.max_exp_ms:
            ends.append(s.max_exp_ms)
        elif workers:
            ends.extend(w.worker_record().max_exp_ms for w in workers)
        else:
            return 0
    return max(ends, default=0)


def _journal_since(saved: Sequence[RecordedSettings], url: str) -> int:
    """Where the runs' journal starts (Redis clock): what every folder recorded (loadgen with
    --redis), else the earliest start by the load processes' wall clocks converted to the Redis
    clock (their machines' clocks must agree within a second), else 0: the whole journal."""
    starts = [s.journal_since_ms for s in saved]
    if starts and all(s > 0 for s in starts):
        return min(starts)
    walls = [s.started_wall_ms for s in saved]
    if walls and all(w > 0 for w in walls):
        return min(walls) + redis_offset_ms(url) - JOURNAL_SINCE_WALL_MARGIN_MS
    return 0
