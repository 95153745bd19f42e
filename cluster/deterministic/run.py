"""A deterministic simulation: nodes, load, in-process store and check in one virtual-time run.

Layer: cluster. A composition of the run pipeline (``loadgen.run``) with a
target of its own (``open_deterministic_target``): the in-process nodes of ``simulate``, each on
its own skewed clock, over ``store.simulation.memory_transport``'s in-process store, with no socket
and no thread, inside one ``trio.run`` under ``cluster.deterministic.world``. The pipeline reads the
store and checks in the trio thread (``StoreAccess.inline``: the virtual clock stands still
meanwhile). ``results.json`` gains a ``deterministic`` block: the seed, ``history_sha256`` (of
``history.jsonl``'s bytes) and the wall-clock figures (with ``MACHINE_FIELDS``, the only fields
two runs of one seed may differ in).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from importlib import import_module
from pathlib import Path
from typing import Any

import trio

from cluster.deterministic.clocks import NodeClocks, open_skewed_cluster
from cluster.deterministic.legacy import open_memory_legacy_nodes
from cluster.deterministic.world import deterministic_world, mock_clock
from cluster.faults import open_injector
from cluster.local import InProcessTransport
from cluster.stopping import run_stoppable
from cluster.store_faults import StoreFaults
from cluster.targets.in_process import (
    SIM_REPLAY_GRACE_MS,
    STORE_SEAM_KINDS,
    InProcessTarget,
    NodesSpec,
    StoreNemeses,
    scripts_loaded,
    sim_limits,
    simulation_config,
    store_options,
    stream_timeout,
)
from cluster.targets.simulate import SimulateOptions
from loadgen.check.exercise import ExerciseRule
from loadgen.history import History
from loadgen.run.folder import RunFolder
from loadgen.run.pipeline import Plan, Run, run
from loadgen.run.target import StoreAccess
from loadgen.runner import FlowSample, RunSettings
from loadgen.tenants import tenants as tenant_names
from loadgen.transport import Transport
from nodes.config import NodeConfig
from nodes.serving.load_fixture import load_tokens
from store.api import NoteStoreAPI
from store.sessions import SessionStore
from store.simulation.buggify import Buggify, buggify_on
from store.simulation.lean_server import LeanServer
from store.simulation.memory_transport import MemoryServer, serve_memory_store

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


STORES = ("lean", "fakeredis")
"""The in-process stores a deterministic run can use: the lean store (the production scripts
over plain data, ``store.simulation.lean_redis``; the default) or fakeredis (the reference it is
held to). Both give a seed the same history bytes (``tests/test_lean_store.py``)."""

DEFAULT_STORE = "lean"


def store_server(store: str | Any, legacy: bool = False) -> Any:
    """The server a run uses: a new one of the kind ``store`` names, or ``store`` itself (a
    test's server, recording its commands). ``legacy``: the run has a legacy share, whose
    blocking inbox reads only the lean store serves on the virtual clock."""
    if not isinstance(store, str):
        return store
    if legacy and store != "lean":
        raise DeterministicUsageError(
            f"--store {store}: a legacy share's blocking inbox reads (XREAD BLOCK) run on the "
            "lean store only (fakeredis blocks on the wall clock)"
        )
    if store == "lean":
        return LeanServer()
    if store == "fakeredis":
        return MemoryServer()
    raise DeterministicUsageError(f"--store {store!r}: one of {', '.join(STORES)}")


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


def planted_wrap(name: str | None) -> Callable[[NoteStoreAPI], NoteStoreAPI] | None:
    """The wrap that plants defect ``name`` in a node's store (None: no plant). Imported here
    only: the plant machinery never reaches a node process."""
    if name is None:
        return None
    from store.simulation.plants import plant

    return plant(name).wrap


@contextmanager
def planted_node(name: str | None) -> Iterator[None]:
    """Plant defect ``name``'s node code for the block, when it has any
    (``cluster.deterministic.node_plants``); nothing otherwise."""
    node = "" if name is None else _plant_node(name)
    if not node:
        yield
        return
    module, _, attr = node.partition(":")
    with getattr(import_module(module), attr)():
        yield


def _plant_node(name: str) -> str:
    from store.simulation.plants import plant

    return plant(name).node


def planted_sessions(name: str | None) -> Callable[[SessionStore], SessionStore] | None:
    """The wrap that plants defect ``name`` in a legacy node's session store (None: no plant,
    or a plant of the note store only)."""
    if name is None:
        return None
    from store.simulation.plants import plant

    return plant(name).wrap_sessions


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
    if "redis" in options.faults:
        raise DeterministicUsageError(
            "--deterministic: --faults redis needs a real Redis; nodes, client, lost-reply and "
            "stall are supported"
        )
    if options.wait_replicas:
        raise DeterministicUsageError("--deterministic: --wait-replicas needs a real Redis")


@dataclass
class DeterministicRun(Run):
    """A pipeline ``Run`` that ran deterministically, with what made it so."""

    options: SimulateOptions = field(default_factory=SimulateOptions)
    history_sha256: str = ""
    wall_s: float = 0.0
    virtual_s: float = 0.0
    node_clocks: list[dict[str, Any]] = field(default_factory=list)
    buggify: dict[str, Any] | None = None


def history_sha256(history: History, run_dir: Path | None) -> str:
    """sha256 of the history's JSONL bytes (the file's, or as the file would hold them)."""
    digest = hashlib.sha256()
    history_file = None if run_dir is None else RunFolder(run_dir).history_file
    if history_file is not None and history_file.exists():
        with history_file.open("rb") as f:
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
        "plant": options.plant,
        "nodes": options.nodes,
        "state_ttl_s": options.state_ttl_s,
        "faults": sorted(options.faults),
        "legacy_share": s.legacy_share,
        "injected": None if options.injected is None else sorted(options.injected),
        "fault_seed": options.fault_seed,
        "replay_grace_ms": SIM_REPLAY_GRACE_MS,
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


@asynccontextmanager
async def open_deterministic_target(
    spec: NodesSpec,
    plan: RunSettings,
    url: str,
    clocks: NodeClocks | None,
    transport_hook: Callable[[Transport], Transport] | None = None,
    plant: str | None = None,
) -> AsyncIterator[InProcessTarget]:
    """``simulate``'s in-process nodes as a ``Target`` over the in-process store at ``url``,
    each node on its own clock (``clocks``; None: the Redis clock), the faults' schedule and the
    store seam drawn from the seed, the store read inline; ``transport_hook`` wraps the
    transport (tests plant nondeterminism with it)."""
    config = simulation_config(spec.state_ttl_s, plan.tenants)  # key ring: seeded bytes
    with planted_node(plant):
        async with _open_target(spec, plan, url, clocks, transport_hook, plant, config) as target:
            yield target


@asynccontextmanager
async def _open_target(
    spec: NodesSpec,
    plan: RunSettings,
    url: str,
    clocks: NodeClocks | None,
    transport_hook: Callable[[Transport], Transport] | None,
    plant: str | None,
    config: NodeConfig,
) -> AsyncIterator[InProcessTarget]:
    seed = plan.seed if spec.fault_seed is None else spec.fault_seed
    kinds = spec.injected_kinds()
    seam = StoreFaults(seed, stream_timeout(spec)) if kinds & STORE_SEAM_KINDS else None
    async with open_skewed_cluster(
        config,
        spec.nodes,
        url,
        clocks=clocks,
        prefix=PREFIX,
        replay_grace_ms=SIM_REPLAY_GRACE_MS,
        store_options=replace(
            store_options(spec, PREFIX, StoreNemeses(seam=seam)),
            wrap=_planted[-1] if _planted else planted_wrap(plant),
        ),
    ) as cluster:
        await scripts_loaded(cluster)
        transport: Transport = InProcessTransport(cluster)
        if transport_hook is not None:
            transport = transport_hook(transport)
        injector = None
        if kinds:
            injector = await open_injector(
                cluster,
                transport,
                kinds,
                seed=seed,
                horizon_s=plan.duration_s,
                client_name_prefix=f"{cluster.prefix}-node-",
                store_faults=seam,
            )
            transport = injector.transport
        store = StoreAccess(
            url,
            PREFIX,
            tuple(tenant_names(plan.tenants)),
            SIM_REPLAY_GRACE_MS,
            limits=sim_limits(spec.state_ttl_s),
            inline=True,
        )
        async with AsyncExitStack() as stack:
            legacy = None
            if plan.legacy_share > 0:
                legacy = await stack.enter_async_context(
                    open_memory_legacy_nodes(
                        config,
                        url,
                        prefix=PREFIX,
                        nodes=spec.nodes,
                        tokens=load_tokens(plan.tenants),
                        replay_grace_ms=SIM_REPLAY_GRACE_MS,
                        clocks=clocks,
                        store_wrap=_planted[-1] if _planted else planted_wrap(plant),
                        sessions_wrap=planted_sessions(plant),
                    )
                )
            yield InProcessTarget(spec, cluster, transport, legacy, store, False, seed, injector)


async def simulate_deterministic(
    options: SimulateOptions,
    on_flow: Callable[[FlowSample], None] | None = None,
    clocks: NodeClocks | None = None,
    points: Buggify | None = None,
    transport_hook: Callable[[Transport], Transport] | None = None,
    store: str | Any = DEFAULT_STORE,
) -> DeterministicRun:
    """The run (see the module docstring); call it inside ``run_deterministic``. ``clocks``:
    the nodes' own clocks (``cluster.deterministic.clocks``); None: the Redis clock. ``store``:
    see ``store_server``."""
    refuse_nondeterministic(options)
    settings = options.settings
    if settings.tag == "run":  # simulate's default draws a fresh tag; this one is the seed's
        settings = replace(settings, tag=f"d{settings.seed}")
    # The load's Redis-clock estimate is exact here: expiry races aim at the millisecond.
    options = replace(options, settings=replace(settings, exact_expiry=True))
    started = time.perf_counter()
    folder = None if options.run_dir is None else RunFolder(options.run_dir)
    if options.run_dir is not None:
        options.run_dir.mkdir(parents=True, exist_ok=True)
        RunFolder(options.run_dir).deterministic_file.write_text(
            json.dumps(
                settings_json(options, buggify=points is not None, skew=clocks is not None),
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
    plan = Plan(options.settings, options.exercise, keep_history=options.keep_history)
    server = store_server(store, legacy=options.settings.legacy_share > 0)
    with serve_memory_store(server=server) as url:
        async with open_deterministic_target(
            options.nodes_spec(), options.settings, url, clocks, transport_hook, options.plant
        ) as target:
            ran = await run(target, plan, folder, on_flow)
    sha = history_sha256(ran.history, options.run_dir)
    node_clocks = [] if clocks is None else clocks.to_json()
    fired = None if points is None else {"active": points.active(), "fired": points.fired}
    wall_s = time.perf_counter() - started
    block = {
        "seed": options.settings.seed,
        "history_sha256": sha,
        "virtual_s": round(trio.current_time(), 6),
        "python_hash_seed": os.environ.get("PYTHONHASHSEED"),
        "node_clocks": node_clocks,
        "buggify": fired,
        "wall_s": round(wall_s, 3),
        "flows_per_wall_s": round(ran.stats.tally.completed / max(wall_s, 1e-9), 1),
    }
    results = replace(ran.results, deterministic=block)
    if folder is not None:
        results.write(folder)
    return DeterministicRun(
        results,
        ran.result,
        ran.stats,
        ran.history,
        ran.folder,
        options=options,
        history_sha256=sha,
        wall_s=wall_s,
        virtual_s=trio.current_time(),
        node_clocks=node_clocks,
        buggify=fired,
    )


def run_deterministic(
    options: SimulateOptions,
    on_flow: Callable[[FlowSample], None] | None = None,
    *,
    skew: bool = True,
    node_offsets_ms: tuple[int, ...] | None = None,
    buggify: bool = False,
    transport_hook: Callable[[Transport], Transport] | None = None,
    store: str | Any = DEFAULT_STORE,
) -> DeterministicRun:
    """One deterministic run in its own ``trio.run`` (this thread). The nodes' clocks are
    skewed from the seed (``skew``), or by ``node_offsets_ms`` when given; ``buggify`` turns
    the fault points of node and store code on (``store.simulation.buggify``), seeded by the seed;
    ``transport_hook`` wraps the load's transport (a test's planted nondeterminism); ``store``
    picks the in-process store (``store_server``)."""
    refuse_nondeterministic(options)
    clock = mock_clock()
    seed = options.settings.seed
    clocks = NodeClocks(seed, offsets_ms=node_offsets_ms) if skew or node_offsets_ms else None
    faults = Buggify(seed) if buggify else None
    with (
        deterministic_world(seed, clock),
        buggify_on(faults) if faults else nullcontext(),
        _frozen_heap(),
    ):
        return run_stoppable(
            partial(
                simulate_deterministic, options, on_flow, clocks, faults, transport_hook, store
            ),
            clock=clock,
        )


@contextmanager
def _frozen_heap() -> Iterator[None]:
    """Every object alive before the run out of the collector's way for its length
    (``gc.freeze``: a full collection then scans only what the run made; about a tenth of a
    run's CPU); back in the oldest generation after it."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def options_from_json(saved: dict[str, Any], run_dir: Path | None) -> SimulateOptions:
    """The options ``settings_json`` recorded, to run into ``run_dir``."""
    s = saved["settings"]
    return SimulateOptions(
        nodes=int(saved["nodes"]),
        state_ttl_s=float(saved["state_ttl_s"]),
        faults=frozenset(saved["faults"]),
        injected=None if saved.get("injected") is None else frozenset(saved["injected"]),
        fault_seed=saved["fault_seed"],
        exercise=ExerciseRule(**saved["exercise"]),
        plant=saved.get("plant"),
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
            legacy_share=float(saved.get("legacy_share", 0.0)),
        ),
    )


def read_settings(run_dir: Path) -> dict[str, Any]:
    """A deterministic run folder's ``deterministic.json``; ValueError saying what is wrong."""
    path = RunFolder(run_dir).deterministic_file
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{run_dir} is no deterministic run folder (no {path.name})") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read it ({exc})") from None
    if not isinstance(saved, dict) or "settings" not in saved:
        raise ValueError(f"{path}: not the settings of a deterministic run")
    return saved
