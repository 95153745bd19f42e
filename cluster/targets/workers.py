"""``simulate --workers N``: N load processes, one store, one merged history and verdict.

Layer: cluster (a target). Each worker is a process of its own (multiprocessing, spawn) that
runs the pipeline (``loadgen.run.pipeline.run``, recording only) with its own in-process nodes
against the same real Redis (or Redis Cluster) under one key prefix, with disjoint flow ids and
history indices, into ``worker-<k>/`` of the run folder. The parent supervises them, then checks
all their histories together (``pipeline.recheck``: the same merge ``notes-cluster check`` does
for several ``loadgen`` processes). The embedded store is refused: it lives inside one process.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import trio

from cluster.faults import FaultRecord, records_from_rows
from cluster.run_log import nodes_log_to
from cluster.stores import needs_real_redis
from cluster.targets.in_process import (
    SIM_REPLAY_GRACE_MS,
    describe,
    drop_keys,
    key_distribution,
    new_prefix,
    open_in_process_target,
    sim_limits,
)
from cluster.targets.simulate import SimulateOptions
from loadgen.history import History
from loadgen.run.folder import RunFolder
from loadgen.run.pipeline import Plan, Run, availability, recheck, recorded_settings, run
from loadgen.run.results import Results
from loadgen.run.target import StoreAccess
from loadgen.runner import RunStats
from loadgen.tally import merge
from loadgen.tenants import tenants as tenant_names

WORKER_GRACE_S = 120.0
"""How long past the run's duration the parent waits for a worker before giving up on it."""

STOP_GRACE_S = 5.0
"""How long a worker gets to end on SIGTERM before SIGKILL."""

ORPHAN_STOP_S = 10.0
"""How long an orphaned worker's cancelled run may take to end before the worker exits hard."""

ORPHAN_EXIT = 70
"""A worker's exit code when it stopped because its parent went away."""


class WorkersError(RuntimeError):
    """A worker process failed (or ran too long): the run has no verdict."""


class WorkersStopped(WorkersError):
    """SIGTERM, SIGINT or SIGHUP stopped the run: the workers are stopped, the keys dropped."""

    def __init__(self, signum: int, run_dir: Path | None) -> None:
        self.signum = signum
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {name}: workers stopped, no verdict (run folder {run_dir})")


def worker_plan(options: SimulateOptions, k: int) -> Plan:
    """Worker ``k``'s plan: its share of the flows, recorded, not checked."""
    n, s = options.workers, options.settings
    share = s.flows // n + (1 if k < s.flows % n else 0)
    plan = options.plan()
    return replace(plan, settings=replace(plan.settings, flows=share), process=k, record_only=True)


async def record(options: SimulateOptions, k: int, prefix: str) -> None:
    """Worker ``k``'s part of the run: its own nodes, its share of the load, its folder."""
    assert options.run_dir is not None
    plan = worker_plan(options, k)
    spec = replace(options.nodes_spec(), keep_keys=True)  # the parent drops them
    folder = RunFolder(options.run_dir).worker(k)
    async with open_in_process_target(spec, plan.settings, prefix=prefix, process=k) as target:
        await run(target, plan, folder)


def _worker_main(
    options: SimulateOptions, k: int, prefix: str, parent: Connection, parent_pid: int
) -> None:
    """A worker process: its share of the load, unless its parent goes away first."""
    # Ctrl-C (and a terminal's hangup) reaches the whole process group: the parent alone
    # decides, and stops its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    message = _orphaned(k, parent_pid)
    assert options.run_dir is not None
    log = RunFolder(options.run_dir).worker(k).nodes_log if options.faults else None
    with nodes_log_to(log):
        ran = trio.run(_run_unless_orphaned, options, k, prefix, parent, message)
    if not ran:
        sys.stderr.write(message)
        sys.exit(ORPHAN_EXIT)


def _orphaned(worker: int | None, parent_pid: int) -> str:
    return f"worker {worker}: its parent process {parent_pid} is gone: run stopped, no verdict\n"


async def _run_unless_orphaned(
    options: SimulateOptions, k: int, prefix: str, parent: Connection, message: str
) -> bool:
    """Run worker ``k``'s part; False when the parent went away first (the run is then cancelled).

    The parent holds the only write end of ``parent``'s pipe and never writes: the read end
    turns readable (EOF) exactly when the parent is gone, however it ended (SIGKILL included).
    """
    orphaned = False
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            nonlocal orphaned
            await trio.lowlevel.wait_readable(parent.fileno())
            orphaned = True
            _exit_hard_after(ORPHAN_STOP_S, message)
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        await record(options, k, prefix)
        nursery.cancel_scope.cancel()
    return not orphaned


def _exit_hard_after(seconds: float, message: str) -> None:
    """If the cancelled run has not ended within ``seconds`` (a thread stuck on Redis), exit."""

    def exit_now() -> None:
        sys.stderr.write(message)
        os._exit(ORPHAN_EXIT)

    timer = threading.Timer(seconds, exit_now)
    timer.daemon = True
    timer.start()


async def simulate_workers(options: SimulateOptions) -> Run:
    """Run ``options.workers`` load processes and check their merged history.

    SIGTERM, SIGINT (Ctrl-C) or SIGHUP stops the workers and drops the run's keys, then raises
    ``WorkersStopped``; a worker that fails stops the others and raises ``WorkersError``.
    """
    if options.redis_url is None:
        raise ValueError(needs_real_redis(workers=options.workers))
    if options.run_dir is None:
        raise ValueError("--workers needs a run folder: the workers' histories are files")
    options = replace(options, settings=options.plan().settings)  # one tag for every worker
    signals_seen: list[int] = []
    sims: list[Run] = []
    failed: list[WorkersError] = []
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    signals_seen.append(signum)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            try:
                sims.append(await _run_and_check(options, options.prefix or new_prefix()))
            except WorkersError as exc:
                failed.append(exc)  # raised below, not wrapped in the nursery's exception group
            nursery.cancel_scope.cancel()
    if signals_seen:
        raise WorkersStopped(signals_seen[0], options.run_dir)
    if failed:
        raise failed[0]
    return sims[0]


async def _run_and_check(options: SimulateOptions, prefix: str) -> Run:
    """Start the workers, wait for them all, check; whatever happens, no worker outlives it."""
    assert options.run_dir is not None
    assert options.redis_url is not None
    url = options.redis_url
    ctx = multiprocessing.get_context("spawn")
    reader, parent_alive = ctx.Pipe(duplex=False)  # this process holds the only write end
    procs = [
        ctx.Process(
            target=_worker_main,
            args=(options, k, prefix, reader, os.getpid()),
            name=RunFolder(options.run_dir).worker(k).path.name,
        )
        for k in range(options.workers)
    ]
    started = time.monotonic()
    started_wall_ms = int(time.time() * 1000)
    try:
        for p in procs:
            p.start()
        reader.close()
        RunFolder(options.run_dir).write_pids(os.getpid(), [p.pid for p in procs], prefix)
        limit = options.settings.duration_s + WORKER_GRACE_S + options.state_ttl_s
        await _supervise(procs, limit)
        ended = time.monotonic()
        return await _check_merged(options, prefix, started, ended, started_wall_ms)
    finally:
        _stop(procs)
        parent_alive.close()
        if not options.keep_keys:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(drop_keys, url, prefix)


async def _supervise(procs: Sequence[BaseProcess], limit_s: float) -> None:
    """Wait for every worker; the first that fails, or the time limit, fails the run at once."""
    failures: list[str] = []
    with trio.move_on_after(limit_s) as timer:
        async with trio.open_nursery() as nursery:
            for p in procs:
                nursery.start_soon(_wait_exit, p, failures, nursery.cancel_scope)
    if failures:
        raise WorkersError(f"{failures[0]}: the other workers were stopped; no verdict")
    if timer.cancelled_caught:
        raise WorkersError(f"workers still running {limit_s:.0f} s after the start: stopped")


async def _wait_exit(p: BaseProcess, failures: list[str], scope: trio.CancelScope) -> None:
    await trio.lowlevel.wait_readable(p.sentinel)  # readable once the process has ended
    p.join()
    code = p.exitcode
    if code != 0:
        how = f"killed by {signal.Signals(-code).name}" if code and code < 0 else f"exit {code}"
        failures.append(f"{p.name} (pid {p.pid}) failed: {how}")
        scope.cancel()


def _stop(procs: Sequence[BaseProcess]) -> None:
    """End every worker still running: SIGTERM, then SIGKILL after ``STOP_GRACE_S``."""
    for p in procs:
        if p.pid is not None and p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        if p.pid is None:
            continue
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


async def _check_merged(
    options: SimulateOptions, prefix: str, started: float, ended: float, started_wall_ms: int
) -> Run:
    """The workers' histories checked as one run, their tallies and latencies added up."""
    assert options.run_dir is not None
    assert options.redis_url is not None
    folder, url = RunFolder(options.run_dir), options.redis_url
    workers = folder.workers()
    stats = _merged_stats(workers, started, ended, started_wall_ms)
    wall = started_wall_ms / 1000
    records = [
        r
        for w in workers
        for r in records_from_rows(w.own_fault_rows(), started, wall, f"{w.path.name}: ")
    ]
    tenants = tuple(tenant_names(options.settings.tenants))
    limits = sim_limits(options.state_ttl_s)
    store = StoreAccess(url, prefix, tenants, SIM_REPLAY_GRACE_MS, limits)
    dist = await trio.to_thread.run_sync(key_distribution, url, prefix)
    seed = options.settings.seed if options.fault_seed is None else options.fault_seed
    target = describe(options.nodes_spec(), dist is not None, seed)
    last_exp = max((w.worker_record().max_exp_ms for w in workers), default=0)
    settings = recorded_settings(target, options.plan(), last_exp, started_wall_ms)
    checked = await recheck([folder], store, settings=settings, exercise=options.exercise)
    windows = availability([r.to_json(started) for r in sorted(records, key=_start)], stats)
    results = Results.of_run(checked.result, stats, settings, key_distribution=dist, faults=windows)
    folder.write_tally(stats.tally)
    results.write(folder)
    history = History(keep=False)  # the merged history is the workers' files
    return Run(results, checked.result, stats, history, folder)


def _start(record: FaultRecord) -> float:
    return record.start_mono


def _merged_stats(
    folders: list[RunFolder], started: float, ended: float, started_wall_ms: int
) -> RunStats:
    """The workers' tallies and latency histograms added up (no per-flow samples)."""
    tally = merge(f.tally() for f in folders)
    # The load's span is the longest worker's, not the parent's (which adds process start-up).
    end = min(ended, started + tally.elapsed_s) if tally.elapsed_s else ended
    stats = RunStats(
        started_s=started, ended_s=end, keep_samples=False, started_wall_ms=started_wall_ms
    )
    stats.tally = tally
    for f in folders:
        stats.histogram.add(f.latency())
    return stats
