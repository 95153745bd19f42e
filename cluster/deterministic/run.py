"""A deterministic simulation: nodes, load, in-process store and check in one virtual-time run.

Layer: cluster (an experiment). Composes ``cluster.experiments.simulate``'s pieces (the nodes'
configuration, the local cluster, the load with its faults, the judge, ``results.json``) over
``store.memory_transport``'s in-process store, with no socket and no thread, inside one
``trio.run`` under ``cluster.deterministic.world``. The check reads the store in the trio thread
(the virtual clock stands still while it does). ``results.json`` gains a ``deterministic`` block:
the seed, ``history_sha256`` (of ``history.jsonl``'s bytes) and the wall-clock figures (with
``MACHINE_FIELDS``, the only fields two runs of one seed may differ in).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import trio

from cluster.deterministic.clocks import NodeClocks, open_skewed_cluster
from cluster.deterministic.world import EPOCH_S, deterministic_world, mock_clock
from cluster.experiments.simulate import (
    KEEP_OPS_MAX,
    SIM_REPLAY_GRACE_MS,
    STORE_SEAM_KINDS,
    SimulateOptions,
    Simulation,
    StoreNemeses,
    _load,
    _read_store,
    _row,
    finish,
    races,
    scripts_loaded,
    sim_limits,
    simulation_config,
    store_options,
    stream_timeout,
    wait_for_expiry,
)
from cluster.faults import FaultRecord, write_faults
from cluster.store_faults import StoreFaults
from loadgen.check.exercise import ExerciseRule, judge
from loadgen.check.invariants import check
from loadgen.check.limits import FaultWindow
from loadgen.check.partition import check_folders
from loadgen.check.verdict import CheckResult
from loadgen.history import History, Op, close_history, open_history
from loadgen.runfolder import dump_store_facts, history_files
from loadgen.runner import FlowSample, RunSettings
from loadgen.tenants import tenants as tenant_names
from store.api import NoteStoreAPI
from store.buggify import Buggify, buggify_on
from store.memory_transport import serve_memory_store

SETTINGS_FILE = "deterministic.json"
"""In a deterministic run folder: what replays it (``--replay``)."""

MACHINE_FIELDS = (
    ("deterministic", "wall_s"),
    ("deterministic", "flows_per_wall_s"),
    ("check", "peak_rss_mb"),
    ("check", "child_peak_rss_mb"),
)
"""The only fields of a deterministic ``results.json`` that measure the machine (wall clock,
memory), not the run: two runs of one seed may differ in them alone (``comparable``)."""


def comparable(results: dict[str, Any]) -> dict[str, Any]:
    """``results`` without its ``MACHINE_FIELDS``."""
    out: dict[str, Any] = json.loads(json.dumps(results))
    for block, name in MACHINE_FIELDS:
        if isinstance(out.get(block), dict):
            out[block].pop(name, None)
    return out


PREFIX = "nc"
"""Key prefix of a deterministic run: its store is its own."""


_planted: list[Callable[[NoteStoreAPI], NoteStoreAPI]] = []


@contextmanager
def planted_store(wrap: Callable[[NoteStoreAPI], NoteStoreAPI]) -> Iterator[None]:
    """Test-only: every deterministic run inside this block gives its nodes ``wrap(store)``
    instead of their store (``StoreOptions.wrap``), so a test plants a misbehaving store under
    ``simulate --deterministic``, ``--replay`` and ``shrink`` alike. Never used by the CLI."""
    _planted.append(wrap)
    try:
        yield
    finally:
        _planted.remove(wrap)


class DeterministicUsageError(ValueError):
    """A combination ``--deterministic`` cannot make deterministic (the CLI exits 2)."""


def refuse_nondeterministic(options: SimulateOptions) -> None:
    """Raise ``DeterministicUsageError`` for what a deterministic run cannot control."""
    if options.redis_url is not None:
        raise DeterministicUsageError(
            "--deterministic runs on its in-process store: a real Redis (--redis) has its own "
            "clock and sockets"
        )
    if options.workers > 1:
        raise DeterministicUsageError(
            "--deterministic runs in one process: --workers is not supported with it"
        )
    if options.settings.legacy_share > 0:
        raise DeterministicUsageError(
            "--deterministic has no sockets: --legacy-share needs HTTP nodes on loopback"
        )
    if "redis" in options.faults:
        raise DeterministicUsageError(
            "--deterministic: --faults redis needs a real Redis; nodes, client, lost-reply and "
            "stall are supported"
        )
    if options.wait_replicas:
        raise DeterministicUsageError("--deterministic: --wait-replicas needs a real Redis")


@dataclass
class DeterministicSimulation(Simulation):
    """A ``Simulation`` that ran deterministically: ``results.json`` says how to check it."""

    history_sha256: str = ""
    wall_s: float = 0.0
    virtual_s: float = 0.0
    node_clocks: list[dict[str, Any]] = field(default_factory=list)
    buggify: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        completed = self.stats.tally.completed
        out["deterministic"] = {
            "seed": self.options.settings.seed,
            "history_sha256": self.history_sha256,
            "virtual_s": round(self.virtual_s, 6),
            "python_hash_seed": os.environ.get("PYTHONHASHSEED"),
            "node_clocks": self.node_clocks,
            "buggify": self.buggify,
            "wall_s": round(self.wall_s, 3),
            "flows_per_wall_s": round(completed / max(self.wall_s, 1e-9), 1),
        }
        return out


def history_sha256(history: History, run_dir: Path | None) -> str:
    """sha256 of the history's JSONL bytes (the file's, or as the file would hold them)."""
    digest = hashlib.sha256()
    if run_dir is not None and (run_dir / "history.jsonl").exists():
        with (run_dir / "history.jsonl").open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    else:
        for op in history.ops:
            digest.update((op.to_json() + "\n").encode("utf-8"))
    return digest.hexdigest()


def settings_json(
    options: SimulateOptions, *, buggify: bool = False, skew: bool = True
) -> dict[str, Any]:
    """What ``--replay`` needs to run ``options`` again (``options_from_json``; ``buggify``
    and ``skew`` are ``run_deterministic``'s)."""
    s = options.settings
    return {
        "buggify": buggify,
        "skew": skew,
        "nodes": options.nodes,
        "state_ttl_s": options.state_ttl_s,
        "faults": sorted(options.faults),
        "injected": None if options.injected is None else sorted(options.injected),
        "fault_seed": options.fault_seed,
        "replay_grace_ms": options.replay_grace_ms,
        "exercise": asdict(options.exercise),
        "settings": {
            "flows": s.flows,
            "duration_s": s.duration_s,
            "concurrency": s.concurrency,
            "rate": s.rate,
            "seed": s.seed,
            "weights": s.weights,
            "tenants": s.tenants,
            "tag": s.tag,
            "only_flows": None if s.only_flows is None else list(s.only_flows),
        },
    }


async def simulate_deterministic(
    options: SimulateOptions,
    on_flow: Callable[[FlowSample], None] | None = None,
    clocks: NodeClocks | None = None,
    points: Buggify | None = None,
) -> DeterministicSimulation:
    """The run (see the module docstring); call it inside ``run_deterministic``. ``clocks``:
    the nodes' own clocks (``cluster.deterministic.clocks``); None: the Redis clock."""
    refuse_nondeterministic(options)
    settings = options.settings
    if settings.tag == "run":  # simulate's default draws a fresh tag; this one is the seed's
        settings = replace(settings, tag=f"d{settings.seed}")
    # The load's Redis-clock estimate is exact here: expiry races aim at the millisecond.
    options = replace(options, settings=replace(settings, exact_expiry=True))
    settings = options.settings
    started = time.perf_counter()
    config = simulation_config(options.state_ttl_s, settings.tenants)  # key ring: seeded bytes
    tenants = tenant_names(settings.tenants)
    keep = options.run_dir is None or settings.flows <= KEEP_OPS_MAX  # as simulate keeps it
    history = open_history(options.run_dir, keep=keep)
    kinds = options.faults if options.injected is None else options.injected
    seed = settings.seed if options.fault_seed is None else options.fault_seed
    seam = StoreFaults(seed, stream_timeout(options)) if kinds & STORE_SEAM_KINDS else None
    nemeses = StoreNemeses(seam=seam)
    if options.run_dir is not None:
        (options.run_dir / SETTINGS_FILE).write_text(
            json.dumps(
                settings_json(options, buggify=points is not None, skew=clocks is not None),
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
    try:
        with serve_memory_store() as url:
            async with open_skewed_cluster(
                config,
                options.nodes,
                url,
                clocks=clocks,
                prefix=PREFIX,
                replay_grace_ms=SIM_REPLAY_GRACE_MS,
                store_options=replace(
                    store_options(options, PREFIX, nemeses),
                    wrap=_planted[-1] if _planted else None,
                ),
            ) as cluster:
                await scripts_loaded(cluster)
                stats, faults = await _load(
                    options, cluster, config, history, 0, on_flow, None, nemeses
                )
                close_history(history)
                result = await _check(options, history, url, tenants, faults)
    finally:
        close_history(history)
    result = judge(result, stats.tally, settings.legacy_share, options.exercise, settings.weights)
    sim = DeterministicSimulation(
        result,
        stats,
        history,
        races(stats.tally),
        options.run_dir,
        options,
        "embedded",
        None,
        faults,
        history_sha256=history_sha256(history, options.run_dir),
        node_clocks=[] if clocks is None else clocks.to_json(),
        buggify=None if points is None else {"active": points.active(), "fired": points.fired},
        wall_s=time.perf_counter() - started,
        virtual_s=trio.current_time(),
    )
    finish(sim)
    return sim


async def _check(
    options: SimulateOptions,
    history: History,
    url: str,
    tenants: list[str],
    faults: list[FaultRecord],
) -> CheckResult:
    """``simulate.check_run`` without threads: wait out the expiries (virtual time: free), read
    the in-process store and check, in this thread."""
    await wait_for_expiry(history.max_exp_ms, 0, SIM_REPLAY_GRACE_MS)
    limits = sim_limits(options)
    if options.run_dir is not None:
        write_faults(options.run_dir, faults)
        dump_store_facts(
            options.run_dir, url, PREFIX, tenants, SIM_REPLAY_GRACE_MS, limits=limits.to_json()
        )
        return check_folders(history_files(options.run_dir), options.run_dir)
    journal, final, replay, redis_end_ms = _read_store(url, PREFIX, tenants)
    return check(
        history.ops,
        journal,
        final,
        replay,
        redis_end_ms=redis_end_ms,
        grace_ms=SIM_REPLAY_GRACE_MS,
        limits=limits,
        faults=[FaultWindow.from_record(_row(r)) for r in faults],
    )


def run_deterministic(
    options: SimulateOptions,
    on_flow: Callable[[FlowSample], None] | None = None,
    *,
    skew: bool = True,
    node_offsets_ms: tuple[int, ...] | None = None,
    buggify: bool = False,
) -> DeterministicSimulation:
    """One deterministic run in its own ``trio.run`` (this thread). The nodes' clocks are
    skewed from the seed (``skew``), or by ``node_offsets_ms`` when given; ``buggify`` turns
    the fault points of node and store code on (``store.buggify``), seeded by the seed."""
    refuse_nondeterministic(options)
    clock = mock_clock()
    seed = options.settings.seed
    clocks = NodeClocks(seed, offsets_ms=node_offsets_ms) if skew or node_offsets_ms else None
    faults = Buggify(seed) if buggify else None
    with deterministic_world(seed, clock), buggify_on(faults) if faults else nullcontext():
        return trio.run(simulate_deterministic, options, on_flow, clocks, faults, clock=clock)


def virtual_s_of(op: Op) -> float:
    """An entry's virtual time (seconds since the run's start)."""
    return op.time_ms / 1000 - EPOCH_S


def options_from_json(saved: dict[str, Any], run_dir: Path | None) -> SimulateOptions:
    """The options ``settings_json`` recorded, to run into ``run_dir``."""
    s = saved["settings"]
    return SimulateOptions(
        nodes=int(saved["nodes"]),
        state_ttl_s=float(saved["state_ttl_s"]),
        faults=frozenset(saved["faults"]),
        injected=None if saved.get("injected") is None else frozenset(saved["injected"]),
        fault_seed=saved["fault_seed"],
        replay_grace_ms=int(saved["replay_grace_ms"]),
        exercise=ExerciseRule(**saved["exercise"]),
        run_dir=run_dir,
        settings=RunSettings(
            flows=int(s["flows"]),
            duration_s=float(s["duration_s"]),
            concurrency=int(s["concurrency"]),
            rate=s["rate"],
            seed=int(s["seed"]),
            weights={str(k): float(v) for k, v in s["weights"].items()},
            tenants=int(s["tenants"]),
            tag=str(s["tag"]),
            only_flows=None if s.get("only_flows") is None else tuple(map(int, s["only_flows"])),
        ),
    )


def read_settings(run_dir: Path) -> dict[str, Any]:
    """A deterministic run folder's ``deterministic.json``; ValueError saying what is wrong."""
    path = run_dir / SETTINGS_FILE
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{run_dir} is no deterministic run folder (no {SETTINGS_FILE})") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read it ({exc})") from None
    if not isinstance(saved, dict) or "settings" not in saved:
        raise ValueError(f"{path}: not the settings of a deterministic run")
    return saved
