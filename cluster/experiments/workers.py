"""``simulate --workers N``: N load processes, one store, one merged history and verdict.

Layer: cluster (an experiment). Each worker is a process of its own (multiprocessing, spawn) running
``simulate`` with its own in-process nodes against the same real Redis (or Redis Cluster) under
one key prefix, with disjoint flow ids and history indices; it writes ``worker-<k>/`` (its
``history.jsonl``, ``tally.json``, ``latency.hdr``) and checks nothing. The parent then waits for
every state to expire, writes the store facts into the run folder and checks all the workers'
histories together (``loadgen.partition``): the same merge ``notes-cluster check`` does for
several ``loadgen`` processes. The embedded store is refused: it lives inside one process.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import trio
from hdrh.histogram import HdrHistogram

from cluster.experiments.simulate import (
    EXPIRY_SETTLE_S,
    LATENCY_FILE,
    SIM_REPLAY_GRACE_MS,
    SimulateOptions,
    Simulation,
    drop_keys,
    finish,
    key_distribution,
    new_prefix,
    races,
    simulate,
)
from loadgen.history import History
from loadgen.partition import check_folders
from loadgen.runfolder import dump_store_facts, history_files
from loadgen.runner import RunStats
from loadgen.tally import judge, merge, read_tally
from loadgen.tenants import tenants as tenant_names

FLOW_STRIDE = 10**9
"""Worker k's flow ids start at k * FLOW_STRIDE."""

WORKER_GRACE_S = 120.0
"""How long past the run's duration the parent waits for a worker before giving up on it."""


class WorkersError(RuntimeError):
    """A worker process failed: the run has no verdict."""


def worker_options(options: SimulateOptions, k: int, prefix: str) -> SimulateOptions:
    """Worker ``k``'s options: its share of the flows, its ids, its folder."""
    assert options.run_dir is not None
    n = options.workers
    s = options.settings
    share = s.flows // n + (1 if k < s.flows % n else 0)
    seed = options.fault_seed if options.fault_seed is not None else s.seed
    return replace(
        options,
        worker=k,
        prefix=prefix,
        run_dir=options.run_dir / f"worker-{k}",
        keep_keys=True,
        fault_seed=seed + k,
        transport_hook=None,
        settings=replace(s, flows=share, first_flow=k * FLOW_STRIDE),
    )


def _worker_main(options: SimulateOptions) -> None:
    trio.run(simulate, options)


async def simulate_workers(options: SimulateOptions) -> Simulation:
    """Run ``options.workers`` load processes and check their merged history."""
    if options.redis_url is None:
        raise ValueError("--workers needs a real Redis (--redis): the embedded store is private")
    if options.run_dir is None:
        raise ValueError("--workers needs a run folder: the workers' histories are files")
    if options.settings.tag == "run":
        import secrets

        options = replace(options, settings=replace(options.settings, tag=secrets.token_hex(3)))
    prefix = options.prefix or new_prefix()
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_worker_main, args=(worker_options(options, k, prefix),))
        for k in range(options.workers)
    ]
    started = time.monotonic()
    started_wall_ms = int(time.time() * 1000)
    for p in procs:
        p.start()
    limit = options.settings.duration_s + WORKER_GRACE_S + options.state_ttl_s
    await trio.to_thread.run_sync(_join, procs, started + limit)
    ended = time.monotonic()
    url = options.redis_url
    assert url is not None
    try:
        return await _check_merged(options, prefix, started, ended, started_wall_ms)
    finally:
        if not options.keep_keys:
            await trio.to_thread.run_sync(drop_keys, url, prefix)


def _join(procs: Sequence[multiprocessing.process.BaseProcess], deadline: float) -> None:
    failed = []
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
        if p.exitcode != 0:
            failed.append(f"{p.name} exit {p.exitcode}")
    if failed:
        raise WorkersError("worker processes failed: " + ", ".join(failed))


async def _check_merged(
    options: SimulateOptions, prefix: str, started: float, ended: float, started_wall_ms: int
) -> Simulation:
    assert options.run_dir is not None
    assert options.redis_url is not None
    run_dir, url = options.run_dir, options.redis_url
    folders = sorted(run_dir.glob("worker-*"))
    stats = _merged_stats(folders, started, ended, started_wall_ms)
    await trio.sleep(options.state_ttl_s + SIM_REPLAY_GRACE_MS / 1000 + EXPIRY_SETTLE_S)
    tenants = tenant_names(options.settings.tenants)
    grace = SIM_REPLAY_GRACE_MS
    await trio.to_thread.run_sync(dump_store_facts, run_dir, url, prefix, tenants, grace)
    result = await trio.to_thread.run_sync(check_folders, history_files(run_dir), run_dir)
    s = options.settings
    result = judge(result, stats.tally, s.legacy_share, options.exercise, s.weights)
    dist = await trio.to_thread.run_sync(key_distribution, url, prefix)
    store = "redis" if dist is None else "redis-cluster"
    history = History(keep=False)  # the merged history is the workers' files
    sim = Simulation(result, stats, history, races(stats.tally), run_dir, options, store, dist)
    return finish(sim)


def _merged_stats(
    folders: list[Path], started: float, ended: float, started_wall_ms: int
) -> RunStats:
    """The workers' tallies and latency histograms added up (no per-flow samples)."""
    tally = merge(read_tally(f) for f in folders)
    # The load's span is the longest worker's, not the parent's (which adds process start-up).
    end = min(ended, started + tally.elapsed_s) if tally.elapsed_s else ended
    stats = RunStats(
        started_s=started, ended_s=end, keep_samples=False, started_wall_ms=started_wall_ms
    )
    stats.tally = tally
    for f in folders:
        stats.histogram.add(HdrHistogram.decode((f / LATENCY_FILE).read_bytes()))
    return stats
