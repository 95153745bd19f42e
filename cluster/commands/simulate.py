"""``notes-cluster simulate``: the race workload on an in-process cluster, then the verdict.

Layer: cluster. The work is ``cluster.targets.simulate`` (``cluster.targets.workers`` with
``--workers``; ``cluster.deterministic.command`` with ``--deterministic``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cluster.commands.base import (
    REDIS_URL,
    mark_stopped,
    require_extra,
    require_store,
    run_until_stopped,
    showing_phases,
    signal_name,
    with_progress,
)
from cluster.commands.options import (
    load_options,
)
from cluster.exit_codes import (
    EXIT_NOT_CARRIED_OUT,
    exit_code_for_signal,
)
from cluster.run_commands import (
    claim_run_dir,
    exercise_rule,
    parse_fault_kinds,
    report_run,
)

if TYPE_CHECKING:
    pass

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


SIMULATE_EXAMPLES = """
\b
Examples:
  notes-cluster simulate                        3 in-process nodes, embedded store
  notes-cluster simulate --redis redis://127.0.0.1:6379/0 --flows 2000   keys of its own only
  notes-cluster simulate --faults nodes,client   faults on the embedded store
  redis-server --port 6390 --save '' --daemonize yes   Redis faults: a Redis of the run's own
  notes-cluster simulate --redis redis://127.0.0.1:6390/0 --faults nodes,redis,client
"""


class _SimulateCommand(click.Command):
    """``simulate``: its help ends with the catalogue of planted defects, read only when the
    help is shown (the plant machinery stays out of every other process)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from store.simulation.plants import PLANTS

        super().format_epilog(ctx, formatter)
        with formatter.section("Planted defects (--plant NAME, with --deterministic)"):
            formatter.write_dl([(p.name, p.breaks) for p in PLANTS.values()])


@click.command(
    "simulate",
    cls=_SimulateCommand,
    help="Throw the race workload at an in-process cluster and check the history.\n"
    + SIMULATE_EXAMPLES,
)
@click.option(
    "--nodes",
    default=3,
    show_default=True,
    type=click.IntRange(1, 64),
    help="In-process nodes the flows spread over (each answer goes to a random one).",
)
@click.option(
    "--redis",
    "redis_url",
    default=None,
    type=REDIS_URL,
    help="redis:// URL (default: embedded store). The run's keys are its own and dropped.",
)
@load_options
@click.option(
    "--state-ttl",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.5, 3600),
    help="Seconds a sealed confirmation stays valid (short, to exercise expiry).",
)
@click.option(
    "--faults",
    "fault_kinds",
    default="",
    metavar="KINDS",
    help="Inject faults during the run, comma-separated: nodes (stop and restart nodes), "
    "redis (CLIENT KILL, CLIENT PAUSE, latency: a real Redis only), client (replies lost), "
    "lost-reply (Redis runs a command, its reply is lost: the store seam, or a proxy before a "
    "single Redis), stall (scripts held past the nodes' Redis timeout: CLIENT PAUSE WRITE, or "
    "the store seam), reshard (a busy tenant's slot moved to another master and back with "
    "CLUSTER SETSLOT and MIGRATE: a Redis Cluster only).",
)
@click.option(
    "--fault-seed", default=None, type=int, help="Seed of the fault schedule (default: --seed)."
)
@click.option(
    "--wait-replicas",
    default=0,
    show_default=True,
    type=click.IntRange(0, 16),
    help="Writes wait for this many replicas (WAIT) before a node answers; fewer in time is "
    "'outcome unknown'. A real Redis only.",
)
@click.option(
    "--legacy-share",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="Share of the flows run by legacy 2025-11-25 clients, over HTTP nodes on loopback "
    "that share the store (sessions, SSE elicitation, answers POSTed to other nodes); with "
    "--deterministic, the same nodes' apps reached with no socket.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Load processes, each with its own in-process nodes and --concurrency flows at once, "
    "against one real Redis (--redis); their histories are checked together. With "
    "--deterministic: the processes its seeds run on (--seeds, --for).",
)
@click.option(
    "--deterministic",
    is_flag=True,
    help="Run the whole simulation in one trio run under virtual time on an in-process store, "
    "every choice drawn from --seed: the seed replays bit for bit "
    "(docs/how-to/deterministic.md).",
)
@click.option(
    "--check-determinism",
    is_flag=True,
    help="With --deterministic: run the seed twice and name the first divergent step.",
)
@click.option(
    "--buggify",
    is_flag=True,
    help="With --deterministic: turn on the seeded fault points inside node and store code.",
)
@click.option(
    "--swarm",
    is_flag=True,
    help="With --deterministic: the seed also picks nodes, race-kind weights, faults and TTL "
    "(fault points on).",
)
@click.option(
    "--replay",
    "replay_dir",
    default=None,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Run a deterministic run folder again (its seed and settings) into --out.",
)
@click.option(
    "--seeds",
    "seed_count",
    default=None,
    type=click.IntRange(1),
    help="With --deterministic: run this many seeds (--seed, --seed + 1, ...) on --workers "
    "processes (or --dask); a passing seed leaves a line in seeds.json, a failing one its "
    "folder and a shrunk case with its replay command. Default: --workers seeds.",
)
@click.option(
    "--dask",
    "dask_address",
    default=None,
    metavar="tcp://HOST:8786",
    help="With --deterministic: run the seeds on the Dask cluster whose scheduler is there "
    "(pip install 'notes-cluster[swarm]'; docs/how-to/swarms.md).",
)
@click.option(
    "--for",
    "search_for",
    default=None,
    metavar="DURATION",
    help="With --deterministic: search: keep drawing seeds until DURATION (90s, 10m, 2h) is "
    "up; the fastest failing seeds of each invariant shrunk, distinct failures in failures.md.",
)
@click.option(
    "--plant",
    default=None,
    metavar="NAME",
    help="With --deterministic: switch on one planted defect in the nodes' store (listed "
    "below) and watch the checker catch it; the run folder records it, so --replay and shrink "
    "keep it. Without --seed, the plant's own seed.",
)
def simulate_cmd(
    nodes: int,
    redis_url: str | None,
    flows: int,
    duration: float,
    concurrency: int,
    rate: float | None,
    seed: int | None,
    state_ttl: float,
    out_dir: Path | None,
    replace: bool,
    as_json: bool,
    fault_kinds: str,
    fault_seed: int | None,
    wait_replicas: int,
    legacy_share: float,
    min_completed: float,
    min_per_kind: int,
    workers: int,
    deterministic: bool,
    check_determinism: bool,
    buggify: bool,
    swarm: bool,
    replay_dir: Path | None,
    seed_count: int | None,
    dask_address: str | None,
    search_for: str | None,
    plant: str | None,
) -> None:
    """``notes-cluster simulate``."""
    import secrets

    many = seed_count is not None or dask_address is not None or search_for is not None
    if deterministic or check_determinism or buggify or swarm or replay_dir or many or plant:
        from cluster.deterministic.command import simulate_deterministic_cmd

        require_extra("sim")
        simulate_deterministic_cmd(click.get_current_context().params)
        return

    require_extra("sim")
    from rich.console import Console

    from cluster.run_log import nodes_log_to
    from cluster.stores import needs_real_redis
    from cluster.targets.simulate import SimulateOptions, simulate
    from cluster.targets.workers import simulate_workers
    from loadgen.run.folder import RunFolder
    from loadgen.runner import RunSettings
    from loadgen.workload import tenants_for

    kinds = parse_fault_kinds(fault_kinds, embedded=redis_url is None)
    why = needs_real_redis(wait_replicas=wait_replicas, workers=workers)
    if why and redis_url is None:
        raise click.UsageError(why)
    if redis_url is not None:
        require_store(redis_url)
    err = Console(stderr=True)
    seed = secrets.randbelow(2**31) if seed is None else seed
    run_dir = claim_run_dir(out_dir, replace, "%Y%m%d-%H%M%S")
    err.print(f"seed {seed}; run folder {run_dir}")
    if kinds:
        err.print(
            f"faults {', '.join(sorted(kinds))}; seed {seed if fault_seed is None else fault_seed}"
        )
    options = SimulateOptions(
        nodes=nodes,
        redis_url=redis_url,
        state_ttl_s=state_ttl,
        run_dir=run_dir,
        settings=RunSettings(
            flows=flows,
            duration_s=duration,
            concurrency=concurrency,
            rate=rate,
            seed=seed,
            legacy_share=legacy_share,
            tenants=tenants_for(flows),
        ),
        faults=kinds,
        fault_seed=fault_seed,
        wait_replicas=wait_replicas,
        exercise=exercise_rule(min_completed, min_per_kind),
        workers=workers,
    )
    folder = RunFolder(run_dir)
    with nodes_log_to(folder.nodes_log if kinds else None), _no_verdict_on_workers_error():
        if workers > 1:
            with showing_phases():
                sim = run_until_stopped(lambda: simulate_workers(options))
        else:
            sim = with_progress(
                flows, lambda advance: run_until_stopped(lambda: simulate(options, advance))
            )
    report_run(sim, folder, as_json)


@contextmanager
def _no_verdict_on_workers_error() -> Iterator[None]:
    """``--workers``: a failed worker is a clear error (exit 4, no verdict), not a traceback;
    a stop signal exits as any stopped run does (130 for Ctrl-C, 4 for SIGTERM or SIGHUP)."""
    from cluster.targets.workers import WorkersError, WorkersStopped

    try:
        yield
    except WorkersStopped as exc:
        mark_stopped(click.get_current_context(), f"stopped by {signal_name(exc.signum)}")
        click.echo(f"Error: {exc}", err=True)
        sys.exit(exit_code_for_signal(exc.signum))
    except WorkersError as exc:
        mark_stopped(click.get_current_context(), f"failed: {exc}")
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_NOT_CARRIED_OUT)
