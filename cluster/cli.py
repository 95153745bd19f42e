"""The ``notes-cluster`` command line.

Layer: cluster. Parses options (click), starts clusters and runs, prints; the work itself lives in
``cluster.serve``, the targets (``cluster.targets``), the bench and the lab. Each command imports
what it needs when it runs, so ``serve`` loads nothing of the load generator, and a command whose
libraries are an extra that is not installed says which extra (exit code 2) instead of failing on an
import.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from cluster.exit_codes import (
    EXIT_CTRL_C,
    EXIT_INVALID,
    EXIT_NOT_CARRIED_OUT,
    EXIT_UNKNOWN,
    EXIT_USAGE,
    EXIT_VALID,
    ConfigurationError,
    NotCarriedOut,
    describe_failure,
    exit_code_for_signal,
    leaves,
)
from cluster.run_commands import (
    RUN_DIR_META,
    claim_run_dir,
    exercise_rule,
    exit_for,
    parse_fault_kinds,
    report_run,
)

if TYPE_CHECKING:
    from loadgen.run.folder import RunFolder
    from loadgen.run.results import Settings
    from loadgen.runner import FlowSample
    from nodes.serving.durability import WaitReplicas

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


__all__ = [
    "EXIT_CTRL_C",
    "EXIT_INVALID",
    "EXIT_NOT_CARRIED_OUT",
    "EXIT_UNKNOWN",
    "EXIT_USAGE",
    "EXIT_VALID",
    "main",
]

DEBUG_ENV = "NOTES_CLUSTER_DEBUG"
"""Set to 1: as ``--debug`` (a failure prints its traceback, then its one line)."""

SERVING_META = "notes_cluster.serving"
"""``ctx.meta`` key set by the commands whose normal end is a stop signal (serve, node,
redis-cluster): SIGTERM or SIGHUP then exits 0 (Ctrl-C 130)."""

EXTRAS: dict[str, tuple[str, ...]] = {
    "sim": ("fakeredis", "lupa", "httpx", "rich", "hdrh", "matplotlib"),
    "bench": ("mcp", "mcp_types"),
}
"""Optional dependency groups (pyproject.toml) -> the modules they provide."""


class MissingExtra(click.ClickException):
    """A command needs libraries of an extra that is not installed."""

    exit_code = EXIT_USAGE


class BenchStoreRefused(click.ClickException):
    """A benchmark's Redis cannot be used: a ``--redis`` database holding keys the bench did not
    write, or no ``redis-server`` to start one of its own (exit 2, one line)."""

    exit_code = EXIT_USAGE


@contextmanager
def _bench_store_errors() -> Iterator[None]:
    """Turn the bench's refusal of its Redis into one line and exit code 2."""
    from cluster.bench.database import ForeignKeys
    from cluster.redis_server import RedisServerError

    try:
        yield
    except (ForeignKeys, RedisServerError) as exc:
        raise BenchStoreRefused(str(exc)) from None


class DamagedFolder(click.ClickException):
    """A run folder's file does not hold what a run writes: no verdict, exit 2."""

    exit_code = EXIT_USAGE


def require_extra(extra: str, *, only: tuple[str, ...] | None = None) -> None:
    """Refuse to go on unless the modules of ``extra`` (or ``only`` these of them) are
    installed, naming the extra and how to install it."""
    missing = [m for m in only or EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(
            f"this command needs the '{extra}' extra (missing: {', '.join(missing)}); "
            f"install it with: pip install 'notes-cluster[{extra}]'"
        )


EXAMPLES = """
\b
Examples:
  notes-cluster simulate                        race workload on 3 in-process nodes, embedded store
  notes-cluster simulate --redis redis://127.0.0.1:6379/0 --flows 2000
  notes-cluster simulate --redis redis://127.0.0.1:6379/0 --faults nodes,redis,client
  notes-cluster failover-experiment              WAIT vs no WAIT across Redis Cluster failovers
  notes-cluster serve --demo --nodes 3 --port 8700
  export NOTES_CLUSTER_STATE_KEY=$(head -c 32 /dev/urandom | base64)   # shared by both:
  notes-cluster serve --demo --nodes 2 --port 8700 --redis redis://127.0.0.1:6379/0 \\
      --state-ttl 5 --replay-grace 2 &
  notes-cluster loadgen --demo --redis redis://127.0.0.1:6379/0 --replay-grace 2 \\
      --target http://127.0.0.1:8700/mcp --target http://127.0.0.1:8701/mcp
  notes-cluster loadgen --foreign --state-ttl 300 --target http://127.0.0.1:8800/mcp \\
      --target http://127.0.0.1:8801/mcp        the race workload against an SDK reference
  notes-cluster conformance --target http://127.0.0.1:8700/mcp --target http://127.0.0.1:8701/mcp
  notes-cluster bench --quick
  notes-cluster bench-servers --quick
"""


EXIT_CODES_HELP = """
\b
Exit codes: 0 valid, 1 a violation, 2 usage or configuration, 3 unknown,
4 the run could not be carried out (store unreachable, interrupted by SIGTERM/SIGHUP,
I/O error), 130 Ctrl-C. Serving commands (serve, node, serve-reference, redis-cluster)
exit 0 when SIGTERM or SIGHUP stopped them cleanly.
"""


class _Commands(click.Group):
    """The group: every command's unhandled failure becomes one line and an exit code that means
    one thing (``cluster.exit_codes``); stop signals end every command cleanly."""

    def invoke(self, ctx: click.Context) -> Any:
        from cluster.stopping import Stopped, forwarding_stop_signals, received_signal

        meta = ctx.meta

        def stopped(signum: int) -> click.exceptions.Exit:
            _mark_stopped(ctx, f"stopped by {_signal_name(signum)}")
            _say_left_behind()
            click.echo(f"stopped by {_signal_name(signum)}", err=True)
            return click.exceptions.Exit(
                exit_code_for_signal(signum, serving=bool(meta.get(SERVING_META)))
            )

        try:
            with forwarding_stop_signals():
                return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Stopped as exc:
            raise stopped(exc.signum) from None
        except BaseException as exc:
            # Ctrl-C (or a forwarded SIGTERM/SIGHUP) may arrive alone or inside a trio
            # nursery's exception group: either way the command was stopped, not failed.
            if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves(exc)):
                raise stopped(received_signal()) from None
            if not isinstance(exc, Exception):
                raise  # SystemExit and the like: already an exit
            _show_traceback(ctx)  # a failure nobody handled: one line, never a traceback
            failure = describe_failure(exc)
            _mark_stopped(ctx, f"failed: {failure.message}")
            _say_left_behind()
            raise failure from None


def _say_left_behind() -> None:
    """One line when flows cut short could not delete their notes (``workload.LEFT_BEHIND``)."""
    import sys

    workload = sys.modules.get("loadgen.workload")
    left: list[str] = getattr(workload, "LEFT_BEHIND", [])
    if left:
        click.echo(
            f"{len(left)} unfinished flows' notes could not be deleted (no node answered "
            f"in time); they stay in the store, titled with the run's tag (e.g. {left[0]!r})",
            err=True,
        )


def _signal_name(signum: int) -> str:
    from cluster.stopping import signal_name

    return signal_name(signum)


def _debug(ctx: click.Context) -> bool:
    import os

    root = ctx.find_root()
    return bool(root.params.get("debug")) or os.environ.get(DEBUG_ENV) == "1"


def _show_traceback(ctx: click.Context) -> None:
    import traceback

    if _debug(ctx):
        traceback.print_exc()


def _mark_stopped(ctx: click.Context, why: str) -> None:
    """Say in the run folder's ``INCOMPLETE`` marker why its run ended early (a command without
    a run folder, such as ``serve``, loads nothing of the load generator here)."""
    run_dir = ctx.find_root().meta.get(RUN_DIR_META)
    if isinstance(run_dir, Path) and run_dir.is_dir():
        from loadgen.run.folder import mark_incomplete

        with suppress(OSError):
            mark_incomplete(run_dir, f"{time.strftime('%Y-%m-%d %H:%M:%S')} {why}")


@click.group(
    cls=_Commands,
    help="Stateless MCP notes nodes, and proof that notes_delete runs exactly once.\n"
    + EXAMPLES
    + EXIT_CODES_HELP,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--debug",
    is_flag=True,
    help=f"On a failure, print the traceback before its one-line error (or set {DEBUG_ENV}=1).",
)
def main(debug: bool) -> None:
    """The CLI entry point."""


class RedisUrl(click.ParamType):  # type: ignore[type-arg]
    """A ``--redis`` value: checked (scheme, host, port, database) before anything connects."""

    name = "URL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from store.client_factory import check_redis_url

        try:
            return check_redis_url(str(value))
        except ValueError as exc:  # one line, exit 2: a configuration error, not a usage hint
            name = param.opts[0] if param is not None and param.opts else "--redis"
            raise ConfigurationError(f"{name}: {exc}") from None


REDIS_URL = RedisUrl()


def require_store(url: str) -> None:
    """Refuse to start (exit 4, one line) unless the Redis at ``url`` answers: nothing is
    written to a store before it is known to answer."""
    import redis

    from store.client_factory import ping

    try:
        ping(url)
    except redis.RedisError as exc:
        text = " ".join(str(exc).split())
        raise NotCarriedOut(
            f"cannot reach Redis at {url} ({text}); start it, or give the right --redis URL. "
            "Nothing was run."
        ) from None


def serving(ctx: click.Context | None = None) -> None:
    """Mark the running command as a server: SIGTERM or SIGHUP is its normal end (exit 0)."""
    (ctx or click.get_current_context()).find_root().meta[SERVING_META] = True


def with_options(*options: Callable[[F], F]) -> Callable[[F], F]:
    """A decorator applying ``options`` (click options), the first listed first in ``--help``."""

    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def load_options(command: F) -> F:
    """The options every load-running command shares: size, pace, seed and output."""
    options = [
        click.option(
            "--flows",
            default=300,
            show_default=True,
            type=click.IntRange(1, 10_000_000),
            help="Flows to run (each a whole race: create, round 1, answers, clean-up).",
        ),
        click.option(
            "--duration",
            default=45.0,
            show_default=True,
            type=click.FloatRange(0.1, 86_400),
            help="Stop starting flows after this many seconds.",
        ),
        click.option(
            "--concurrency",
            default=16,
            show_default=True,
            type=click.IntRange(1, 4096),
            help="Flows in flight at once (closed loop; with --rate, the most in flight).",
        ),
        click.option(
            "--rate",
            default=None,
            type=click.FloatRange(0.1, 100_000),
            help="Open loop: start this many flows per second (latency from intended start).",
        ),
        click.option("--seed", default=None, type=int, help="Seed (printed; random if not given)."),
        click.option(
            "--out",
            "out_dir",
            default=None,
            type=click.Path(file_okay=False, path_type=Path),
            help="Run folder (default: a new folder under runs/). Must be empty or new, "
            "unless --replace.",
        ),
        click.option(
            "--replace",
            is_flag=True,
            help="Let --out name a folder holding an earlier run: it is deleted first.",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print results.json to stdout."),
        *exercise_options(),
    ]
    return with_options(*options)(command)


def exercise_options() -> list[Callable[[F], F]]:
    """When a run counts as exercised: under it the verdict is UNKNOWN (exit 3)."""
    return [
        click.option(
            "--min-completed",
            default=None,
            type=click.FloatRange(0.0, 1.0),
            help="Share of flows that must get past round 1, else the verdict is UNKNOWN "
            "[default: 0.95].",
        ),
        click.option(
            "--min-per-kind",
            default=None,
            type=click.IntRange(0, 1_000_000),
            help="Runs every race kind needs (fewer for small runs), else UNKNOWN [default: 3].",
        ),
    ]


def log_options() -> list[Callable[[F], F]]:
    """How a serving command logs: the level, and JSON lines or text."""
    from nodes.logging_setup import DEFAULT_LEVEL, LEVELS

    return [
        click.option(
            "--log-level",
            default=DEFAULT_LEVEL,
            show_default=True,
            type=click.Choice(LEVELS, case_sensitive=False),
            help="Log records at this level and above go to standard error.",
        ),
        click.option(
            "--log-json",
            is_flag=True,
            help="Log JSON lines (time, level, logger, message and structured extras).",
        ),
    ]


def ops_options(command: F) -> F:
    """The options of a serving command: logging and metrics."""
    from nodes.serving.operator import DEFAULT_METRICS_HOST

    options = [
        *log_options(),
        click.option(
            "--metrics-port",
            default=None,
            type=click.IntRange(0, 65535),
            help="Serve Prometheus metrics of node i on this port + i (0: free ports). "
            "Default: no metrics.",
        ),
        click.option(
            "--metrics-host",
            default=DEFAULT_METRICS_HOST,
            show_default=True,
            help="Address the metrics listen on.",
        ),
    ]
    return with_options(*options)(command)


def bench_options(quick_help: str, redis_help: str) -> list[Callable[[F], F]]:
    """The options of the benchmark commands: shorter runs, the real Redis, the output folder."""
    return [
        click.option("--quick", is_flag=True, help=quick_help),
        click.option("--redis", "redis_url", default=None, help=redis_help),
        click.option(
            "--out",
            "out_dir",
            default=Path("runs/bench"),
            show_default=True,
            type=click.Path(file_okay=False, path_type=Path),
        ),
    ]


SIMULATE_EXAMPLES = """
\b
Examples:
  notes-cluster simulate                        3 in-process nodes, embedded store
  notes-cluster simulate --redis redis://127.0.0.1:6379/0 --flows 2000
  notes-cluster simulate --redis redis://127.0.0.1:6379/0 --faults nodes,redis,client
"""


@main.command(
    help="Throw the race workload at an in-process cluster and check the history.\n"
    + SIMULATE_EXAMPLES
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
    "that share the store (sessions, SSE elicitation, answers POSTed to other nodes).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Load processes, each with its own in-process nodes and --concurrency flows at once, "
    "against one real Redis (--redis); their histories are checked together.",
)
@click.option(
    "--deterministic",
    is_flag=True,
    help="Run the whole simulation in one trio run under virtual time on an in-process store, "
    "every choice drawn from --seed: the seed replays bit for bit (README: Deterministic "
    "simulation).",
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
) -> None:
    """``notes-cluster simulate``."""
    import secrets

    if deterministic or check_determinism or buggify or swarm or replay_dir:  # issue 19's hook
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
            sim = _run_stoppable(lambda: simulate_workers(options))
        else:
            sim = _with_progress(
                flows, lambda advance: _run_stoppable(lambda: simulate(options, advance))
            )
    report_run(sim, folder, as_json)


def _run_stoppable(fn: Callable[[], Any]) -> Any:
    """``fn`` under trio, stopped cleanly by SIGTERM, SIGINT or SIGHUP (``cluster.stopping``)."""
    from cluster.stopping import run_stoppable

    return run_stoppable(fn)


@contextmanager
def _no_verdict_on_workers_error() -> Iterator[None]:
    """``--workers``: a failed worker is a clear error (exit 4, no verdict), not a traceback;
    a stop signal exits as any stopped run does (130 for Ctrl-C, 4 for SIGTERM or SIGHUP)."""
    from cluster.targets.workers import WorkersError, WorkersStopped

    try:
        yield
    except WorkersStopped as exc:
        _mark_stopped(click.get_current_context(), f"stopped by {_signal_name(exc.signum)}")
        click.echo(f"Error: {exc}", err=True)
        sys.exit(exit_code_for_signal(exc.signum))
    except WorkersError as exc:
        _mark_stopped(click.get_current_context(), f"failed: {exc}")
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_NOT_CARRIED_OUT)


def _with_progress(total: int, work: Callable[[Callable[[FlowSample], None]], T]) -> T:
    """Run ``work`` with a progress bar on stderr (only when stderr is a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    err = Console(stderr=True)
    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=not err.is_terminal,
        transient=True,
    )
    with progress:
        task = progress.add_task("flows", total=total)
        return work(lambda _: progress.advance(task))


simulate_cmd.name = "simulate"


LOADGEN_EXAMPLES = """
\b
Example (the nodes and loadgen share the state key):
  export NOTES_CLUSTER_STATE_KEY=$(head -c 32 /dev/urandom | base64)
  notes-cluster serve --demo --nodes 2 --port 8700 --redis redis://127.0.0.1:6379/0 \\
      --state-ttl 5 --replay-grace 2 &
  notes-cluster loadgen --demo --redis redis://127.0.0.1:6379/0 --replay-grace 2 \\
      --target http://127.0.0.1:8700/mcp --target http://127.0.0.1:8701/mcp --flows 200
"""


@main.command(
    help="Throw the race workload at running HTTP nodes (e.g. from `serve --demo`).\n"
    + LOADGEN_EXAMPLES
)
@click.option(
    "--target",
    "targets",
    multiple=True,
    required=True,
    help="Node endpoint URL (repeat, or comma-separate, for several nodes).",
)
@click.option(
    "--redis",
    "redis_url",
    default=None,
    type=REDIS_URL,
    help="The cluster's store, to check the history afterwards (else: unchecked).",
)
@click.option(
    "--wait-ready",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0, 3600),
    help="Seconds to wait for every target's /readyz to answer 200 before the load starts "
    "(0: do not wait); past it, exit 4.",
)
@click.option(
    "--replay-grace",
    default=None,
    type=click.FloatRange(0.1, 3600),
    help="Seconds the nodes keep a replay entry past its state's expiry, when they were "
    "started with `serve --demo --replay-grace` (default: the config's, 60 for the demo). "
    "The check waits it out.",
)
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="The cluster's TOML config (for its key ring and audience).",
)
@click.option(
    "--demo",
    is_flag=True,
    help="The cluster runs the demo fixture; its state key "
    "comes from NOTES_CLUSTER_STATE_KEY, which `serve --demo` must share.",
)
@click.option(
    "--token",
    "tokens",
    multiple=True,
    metavar="PRINCIPAL=TOKEN",
    help="Bearer token of a load principal (default: the demo load tokens).",
)
@click.option(
    "--foreign",
    is_flag=True,
    help="The target is not our cluster (e.g. an SDK reference serving the notes contract): "
    "states are opaque, no journal is read; the final state is listed through notes_list and "
    "the check says which invariants it could not decide without a journal. Needs --state-ttl.",
)
@click.option(
    "--state-ttl",
    default=None,
    type=click.FloatRange(0.5, 3600),
    help="With --foreign: the target's requestState lifetime in seconds.",
)
@load_options
@click.option(
    "--process-id",
    default=0,
    show_default=True,
    type=click.IntRange(0, 9999),
    help="This process's number when several loadgen processes (on one or several machines) "
    "share the store: own flow ids and history indices; check them together with "
    "`notes-cluster check --redis URL DIR1 DIR2 ...`.",
)
def loadgen(
    targets: tuple[str, ...],
    redis_url: str | None,
    config_path: Path | None,
    demo: bool,
    tokens: tuple[str, ...],
    foreign: bool,
    state_ttl: float | None,
    flows: int,
    duration: float,
    concurrency: int,
    rate: float | None,
    seed: int | None,
    out_dir: Path | None,
    replace: bool,
    as_json: bool,
    min_completed: float,
    min_per_kind: int,
    process_id: int,
    wait_ready: float,
    replay_grace: float | None,
) -> None:
    """``notes-cluster loadgen``."""
    import os
    import secrets

    require_extra("sim")
    from rich.console import Console

    from cluster.targets.remote import TargetsNotReady, run_remote, wait_until_ready
    from loadgen.run.folder import RunFolder
    from loadgen.runner import RunSettings
    from nodes.serving.load_fixture import load_tokens
    from nodes.serving.settings import STATE_KEY_ENV, ConfigError, settings_for

    urls = _loopback_targets(targets)
    if foreign:
        _loadgen_foreign(urls, tokens, state_ttl, redis_url, config_path, demo)
    if config_path is None and not (demo and os.environ.get(STATE_KEY_ENV)):
        raise click.UsageError(
            f"give --config FILE, or --demo with {STATE_KEY_ENV} set to the cluster's state key"
        )
    try:
        settings = settings_for(config_path, demo, None, replay_grace)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    principal_tokens = {p: t for t, p in load_tokens().items()} | _token_options(tokens)
    if redis_url is not None:
        require_store(redis_url)
    if wait_ready > 0:
        try:
            _run_stoppable(lambda: wait_until_ready(urls, wait_ready))
        except TargetsNotReady as exc:
            raise NotCarriedOut(f"{exc} Nothing was run.") from None
    seed = secrets.randbelow(2**31) if seed is None else seed
    run_dir = claim_run_dir(out_dir, replace, "loadgen-%Y%m%d-%H%M%S")
    Console(stderr=True).print(f"seed {seed}; run folder {run_dir}")
    run = RunSettings(
        flows=flows,
        duration_s=duration,
        concurrency=concurrency,
        rate=rate,
        seed=seed,
    )
    sim = _with_progress(
        flows,
        lambda advance: _run_stoppable(
            lambda: run_remote(
                urls,
                settings,
                principal_tokens,
                run,
                redis_url=redis_url,
                run_dir=run_dir,
                on_flow=advance,
                exercise=exercise_rule(min_completed, min_per_kind),
                process=process_id,
            )
        ),
    )
    report_run(sim, RunFolder(run_dir), as_json)


def _loadgen_foreign(
    urls: list[str],
    tokens: tuple[str, ...],
    state_ttl: float | None,
    redis_url: str | None,
    config_path: Path | None,
    demo: bool,
) -> NoReturn:
    """``loadgen --foreign``: the workload against a server without our journal."""
    import secrets

    from rich.console import Console

    from cluster.targets.foreign import run_foreign
    from loadgen.run.folder import RunFolder
    from loadgen.runner import RunSettings
    from nodes.serving.load_fixture import load_tokens

    if state_ttl is None:
        raise click.UsageError("--foreign needs --state-ttl (the target's state lifetime)")
    if redis_url is not None or config_path is not None or demo:
        raise click.UsageError("--foreign reads nothing of the target: no --redis/--config/--demo")
    p = click.get_current_context().params
    principal_tokens = {pr: t for t, pr in load_tokens().items()} | _token_options(tokens)
    seed = secrets.randbelow(2**31) if p["seed"] is None else p["seed"]
    run_dir = p["out_dir"] or Path("runs") / time.strftime("foreign-%Y%m%d-%H%M%S")
    Console(stderr=True).print(f"seed {seed}; run folder {run_dir}")
    run = RunSettings(
        flows=p["flows"],
        duration_s=p["duration"],
        concurrency=p["concurrency"],
        rate=p["rate"],
        seed=seed,
    )
    sim = _with_progress(
        p["flows"],
        lambda advance: _run_stoppable(
            lambda: run_foreign(
                urls,
                principal_tokens,
                run,
                state_ttl_s=state_ttl,
                run_dir=run_dir,
                on_flow=advance,
                exercise=exercise_rule(p["min_completed"], p["min_per_kind"]),
            )
        ),
    )
    report_run(sim, RunFolder(run_dir), p["as_json"])


@main.command(
    "check",
    help="Check run folders offline: their histories against the store facts they hold "
    "(exit 0 valid, 1 invalid, 3 unknown). Several folders (one per load process: "
    "`loadgen --process-id K`, on any machine sharing the store) are checked as one run; with "
    "--redis the store facts are read now, after every process ended, into the first folder.",
)
@click.argument(
    "run_dirs",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option(
    "--redis", "redis_url", default=None, type=REDIS_URL, help="Read the store facts from here now."
)
@click.option("--prefix", default="nc", show_default=True, help="The store's key prefix.")
@click.option(
    "--tenants",
    default=4,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="With --redis: how many load tenants the runs used (loadgen uses 4; simulate one per "
    "5,000 flows, recorded in its results.json), i.e. whose store facts to read.",
)
@click.option(
    "--min-completed",
    default=None,
    type=click.FloatRange(0.0, 1.0),
    help="As for the run (default: what the run recorded, else 0.95).",
)
@click.option(
    "--min-per-kind",
    default=None,
    type=click.IntRange(0, 1_000_000),
    help="As for the run (default: what the run recorded, else 3).",
)
@click.option(
    "--jobs",
    default=None,
    type=click.IntRange(1, 256),
    help="Processes checking tenants side by side (default: one per CPU for runs of more "
    "than about 8k flows, else 1). Memory grows with it: one tenant's history per process.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def check_cmd(
    run_dirs: tuple[Path, ...],
    redis_url: str | None,
    prefix: str,
    tenants: int,
    min_completed: float | None,
    min_per_kind: int | None,
    jobs: int | None,
    as_json: bool,
) -> None:
    """``notes-cluster check``."""
    import json

    from rich.console import Console

    from loadgen.history import DamagedRunFile
    from loadgen.report import print_check
    from loadgen.run.folder import RunFolder
    from loadgen.run.pipeline import MissingFacts, folders_store, recheck
    from loadgen.run.results import Results
    from loadgen.tenants import tenants as tenant_names

    folders = [RunFolder(d) for d in run_dirs]
    _refuse_incomplete(folders)
    try:
        saved = Results.saved_settings(folders[0])
    except DamagedRunFile as exc:
        raise DamagedFolder(f"{exc}. Nothing was checked.") from None
    if folders[0].is_foreign():  # a `loadgen --foreign` folder: no journal
        _check_foreign(folders, redis_url, saved, min_completed, min_per_kind, as_json)
    store = None
    if redis_url is not None:
        require_store(redis_url)
        store = folders_store(redis_url, prefix, tenant_names(tenants), saved)
    rule = saved.exercise(min_completed, min_per_kind)
    try:
        checked = _run_stoppable(lambda: recheck(folders, store, exercise=rule, jobs=jobs))
    except DamagedRunFile as exc:
        raise DamagedFolder(f"{exc}. Nothing was checked.") from None
    except MissingFacts:
        raise click.UsageError(f"no store facts in {folders[0]}: give --redis URL") from None
    results = checked.results()
    if as_json:
        click.echo(json.dumps(results.to_json(), indent=2))
    else:
        print_check(results, Console())
    exit_for(results.verdict)


def _check_foreign(
    folders: list[RunFolder],
    redis_url: str | None,
    saved: Settings,
    min_completed: float | None,
    min_per_kind: int | None,
    as_json: bool,
) -> NoReturn:
    """``check`` of a ``loadgen --foreign`` folder: its history against its final state."""
    import json

    from rich.console import Console

    from cluster.targets.foreign import recheck_foreign
    from loadgen.history import DamagedRunFile
    from loadgen.report import print_check

    if len(folders) != 1 or redis_url is not None:
        raise click.UsageError("a --foreign run folder is checked alone, without --redis")
    rule = saved.exercise(min_completed, min_per_kind)
    try:
        results = recheck_foreign(folders[0].path, rule)
    except DamagedRunFile as exc:
        raise DamagedFolder(f"{exc}. Nothing was checked.") from None
    if as_json:
        click.echo(json.dumps(results.to_json(), indent=2))
    else:
        print_check(results, Console())
    exit_for(results.verdict)


def _refuse_incomplete(folders: list[RunFolder]) -> None:
    """A folder whose run never finished cannot be checked: say why (exit 4, no verdict)."""
    from loadgen.run.folder import INCOMPLETE_FILE

    for folder in folders:
        reason = folder.incomplete_reason()
        if reason is not None:
            raise NotCarriedOut(
                f"{folder}: its run did not finish, so it holds no complete history or store "
                f"facts ({INCOMPLETE_FILE}: {reason}). Nothing was checked; run it again."
            )


def _loopback_targets(targets: tuple[str, ...]) -> list[str]:
    """``--target`` values (repeated or comma-separated) as URLs; loopback ones only."""
    from urllib.parse import urlsplit

    urls = [u.strip() for t in targets for u in t.split(",") if u.strip()]
    for url in urls:
        if not _loopback(urlsplit(url).hostname or ""):
            raise click.UsageError(f"--target {url}: only loopback addresses may be loaded")
    return urls


def _token_options(tokens: tuple[str, ...]) -> dict[str, str]:
    """``--token PRINCIPAL=TOKEN`` values as principal -> token."""
    out: dict[str, str] = {}
    for item in tokens:
        principal, sep, token = item.partition("=")
        if not sep or not principal or not token:
            raise click.UsageError(f"--token {principal or item!r}: expected PRINCIPAL=TOKEN")
        out[principal] = token
    return out


@main.command(
    help="Run the named benchmark scenarios; write bench.json and bench.md.\n"
    "\n\b\nExamples:\n  notes-cluster bench --quick\n  notes-cluster bench-servers --quick\n"
)
@with_options(
    *bench_options(
        quick_help="Short points (under three minutes in all).",
        redis_help="A Redis database of yours for the store scenarios instead of the "
        "redis-server the bench starts of its own. Refused unless it holds no keys but the "
        "bench's; the bench deletes only its own keys (prefix ncbench).",
    )
)
def bench(quick: bool, redis_url: str | None, out_dir: Path) -> None:
    """``notes-cluster bench``."""
    require_extra("sim")
    require_extra("bench")
    from rich.console import Console

    from cluster.bench.context import BenchOptions
    from cluster.bench.run import run_bench

    err = Console(stderr=True)
    with _bench_store_errors():
        run_bench(BenchOptions(quick=quick, redis_url=redis_url, out_dir=out_dir), err.print)
    click.echo((out_dir / "bench.md").read_text(encoding="utf-8"))


@main.command(
    "bench-servers",
    help="The HTTP servers side by side: the fixed-replies app on uvicorn (httptools, uvloop), "
    "granian, uvicorn (h11) and hypercorn's trio worker, then one node on uvicorn and granian, "
    "in alternated rounds under the bench's wrk client; write servers.json and servers.md.",
)
@with_options(
    *bench_options(
        quick_help="Shorter rounds (about a minute in all).",
        redis_help="A Redis database of yours for the node rows instead of the redis-server "
        "the bench starts of its own. Refused unless it holds no keys but the bench's; the "
        "bench deletes only its own keys (prefix ncbench).",
    )
)
def bench_servers(quick: bool, redis_url: str | None, out_dir: Path) -> None:
    """``notes-cluster bench-servers``."""
    require_extra("sim")
    from rich.console import Console

    from cluster.lab.servers import ServersOptions, run_bench_servers

    err = Console(stderr=True)
    with _bench_store_errors():
        options = ServersOptions(quick=quick, redis_url=redis_url, out_dir=out_dir)
        run_bench_servers(options, err.print)
    click.echo((out_dir / "servers.md").read_text(encoding="utf-8"))


@main.command(
    help="Serve one node from a configuration file, in production: uvicorn (httptools, uvloop) "
    "with WORKERS processes on one port, each its own node over the same Redis. SIGTERM "
    "(SIGHUP, Ctrl-C) drains "
    "(stop accepting, finish in-flight requests within [timeouts] drain, end legacy streams, "
    "close Redis). The same app for any ASGI server: nodes.serving.app:create_app (a factory)."
)
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="TOML configuration (principals, token hashes, workspaces, state keys, [timeouts]).",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8700, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Worker processes on the one port, each a node of its own; a worker whose "
    "supervisor is gone drains and exits by itself.",
)
@click.option(
    "--redis",
    "redis_url",
    default="redis://127.0.0.1:6379/0",
    show_default=True,
    type=REDIS_URL,
    help="redis:// URL of the store (a Redis Cluster node is detected).",
)
@with_options(*log_options())
def node(
    config_path: Path,
    host: str,
    port: int,
    workers: int,
    redis_url: str,
    log_level: str,
    log_json: bool,
) -> None:
    """``notes-cluster node``."""
    import os

    from nodes.logging_setup import configure_logging
    from nodes.serving import app as node_app
    from nodes.serving.http_server import run_server, server_config
    from nodes.serving.settings import ConfigError, load_settings

    configure_logging(log_level.upper(), json_lines=log_json)

    try:
        settings = load_settings(config_path)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    require_store(redis_url)
    serving()
    # The factory runs in each worker and reads these (a worker is a fresh interpreter).
    os.environ[node_app.CONFIG_ENV] = str(config_path.resolve())
    os.environ[node_app.REDIS_ENV] = redis_url
    os.environ.setdefault(node_app.PUBLIC_URL_ENV, f"http://{host}:{port}")
    os.environ[node_app.SERVER_TIMES_BODIES_ENV] = "1"
    os.environ[node_app.LOG_LEVEL_ENV] = log_level.upper()
    os.environ[node_app.LOG_JSON_ENV] = "1" if log_json else "0"
    config = server_config(
        "nodes.serving.app:create_app",
        host=host,
        port=port,
        timeouts=settings.timeouts,
        workers=workers,
        factory=True,
        max_header_bytes=settings.max_header_bytes,
    )
    run_server(config)


SERVE_EXAMPLES = """
\b
Examples:
  notes-cluster serve --demo --nodes 3 --port 8700
  notes-cluster serve --demo --redis redis://127.0.0.1:6379/0 --processes
\b
SIGTERM, SIGHUP or Ctrl-C stops every node (node processes drain first) and exits 0
(130 for Ctrl-C); a node process whose parent is gone drains and exits by itself.
"""


@main.command(
    help="Serve N nodes over Streamable HTTP on consecutive loopback ports.\n" + SERVE_EXAMPLES
)
@click.option(
    "--nodes",
    default=3,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Nodes to serve, on PORT, PORT+1, ...",
)
@click.option(
    "--port",
    "base_port",
    default=8700,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port of node 0; node i listens on PORT+i.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--redis",
    "redis_url",
    default=None,
    type=REDIS_URL,
    help="redis:// URL (default: embedded store).",
)
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="TOML configuration (principals, token hashes, workspaces, state keys).",
)
@click.option("--demo", is_flag=True, help="Use the demo fixture and seed its notes.")
@click.option(
    "--state-ttl",
    default=None,
    type=click.FloatRange(0.5, 86_400),
    help="Seconds a sealed confirmation stays valid (default 300, or the config's).",
)
@click.option(
    "--replay-grace",
    default=None,
    type=click.FloatRange(0.1, 3600),
    help="Seconds a replay entry outlives its state (default 60, or the config's). A load "
    "against these nodes waits it out before checking: give loadgen the same value.",
)
@click.option("--processes", is_flag=True, help="Run each node as its own OS process.")
@click.option(
    "--wait-replicas",
    default=None,
    metavar="auto|N",
    help="Writes wait for this many replicas (WAIT) before a node answers; fewer in time is "
    "'outcome unknown' (-32603). Default (and config wait_replicas): auto, 1 where every "
    "master has a replica, else 0. 0 turns waiting off.",
)
@click.option(
    "--demo-anonymous",
    default=None,
    metavar="PRINCIPAL",
    help="With --demo, on loopback only: an MCP request without an Authorization header acts "
    "as PRINCIPAL (e.g. alice), for tools that send no token, such as the MCP conformance "
    "suite. A wrong token is still refused.",
)
@ops_options
def serve(
    nodes: int,
    base_port: int,
    host: str,
    redis_url: str | None,
    config_path: Path | None,
    demo: bool,
    state_ttl: float | None,
    replay_grace: float | None,
    processes: bool,
    wait_replicas: str | None,
    demo_anonymous: str | None,
    log_level: str,
    log_json: bool,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """``notes-cluster serve``."""
    from dataclasses import replace

    from cluster.serve import serve_cluster
    from nodes.logging_setup import configure_logging
    from nodes.serving.operator import OpsOptions
    from nodes.serving.settings import ConfigError, settings_for, with_demo_anonymous

    if not _loopback(host):
        raise click.UsageError("--host must be a loopback address (127.0.0.0/8 or ::1)")
    if config_path is None and not demo:
        raise click.UsageError("give --config FILE, or --demo for the demo fixture")
    if demo_anonymous is not None and not demo:
        raise click.UsageError("--demo-anonymous needs --demo")
    waits = _wait_replicas(wait_replicas, redis_url)
    if redis_url is None:
        require_extra("sim", only=("fakeredis", "lupa"))  # the embedded store
    try:
        settings = settings_for(config_path, demo, state_ttl, replay_grace)
        settings = with_demo_anonymous(settings, demo_anonymous, host)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if waits is not None:
        settings = replace(settings, wait_replicas=waits)
    if redis_url is not None:
        require_store(redis_url)
    serving()
    configure_logging(log_level, json_lines=log_json)
    ops = OpsOptions(metrics_host=metrics_host, metrics_port=metrics_port)
    log_args = ["--log-level", log_level, *(["--log-json"] if log_json else [])]
    _run_stoppable(
        lambda: serve_cluster(
            settings,
            nodes=nodes,
            host=host,
            base_port=base_port,
            redis_url=redis_url,
            demo=demo,
            processes=processes,
            config_path=config_path,
            on_ready=_print_ready,
            ops=ops,
            log_args=log_args,
        )
    )


@main.command(
    "failover-experiment",
    help="Fail a Redis Cluster master over during load (CLUSTER FAILOVER; SIGKILL behind a "
    "lagging replica), each without and with --wait-replicas, and tabulate what the checker "
    "finds: acknowledged confirmations forgotten, and the cost in flows/s and latency.",
)
@click.option(
    "--scenarios",
    default="baseline,manual,kill",
    show_default=True,
    help="Comma-separated: baseline (no fault), manual (CLUSTER FAILOVER), kill (SIGKILL).",
)
@click.option(
    "--wait-replicas",
    default="1",
    show_default=True,
    type=click.Choice(["1"]),
    metavar="1",
    help="Replicas the WAIT rows wait for: 1 (each master of the experiment's clusters has one "
    "replica). Every scenario also runs without waiting.",
)
@click.option("--duration", default=8.0, show_default=True, type=click.FloatRange(4, 600))
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(1, 1024))
@click.option("--seed", default=1, show_default=True, type=int)
@click.option(
    "--lag-ms",
    default=400,
    show_default=True,
    type=click.IntRange(0, 900),
    help="kill: how long the replica is frozen and cut off before its master dies (0: none).",
)
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder (default: runs/failover-<timestamp>). Must be empty or new, unless "
    "--replace.",
)
@click.option(
    "--replace",
    is_flag=True,
    help="Let --out name a folder holding an earlier experiment: it is deleted first.",
)
def failover_experiment(
    scenarios: str,
    wait_replicas: str,
    duration: float,
    concurrency: int,
    seed: int,
    lag_ms: int,
    out_dir: Path | None,
    replace: bool,
) -> None:
    """``notes-cluster failover-experiment``."""
    require_extra("sim")
    from cluster.lab.failover import (
        HEADER,
        SCENARIOS,
        FailoverOptions,
        run_experiment,
        table,
    )
    from cluster.redis_cluster import RedisClusterError
    from cluster.run_log import nodes_log_to
    from loadgen.run.folder import RunFolder, mark_complete

    chosen = tuple(s.strip() for s in scenarios.split(",") if s.strip())
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown or not chosen:
        raise click.BadParameter(
            f"unknown scenario(s) {', '.join(unknown) or '(none given)'}; choose from "
            f"{', '.join(SCENARIOS)}",
            param_hint="--scenarios",
        )
    out = claim_run_dir(out_dir, replace, "failover-%Y%m%d-%H%M%S")
    options = FailoverOptions(
        scenarios=chosen,
        wait_replicas=int(wait_replicas),
        duration_s=duration,
        concurrency=concurrency,
        seed=seed,
        lag_ms=lag_ms,
        out_dir=out,
    )
    click.echo(HEADER, err=True)
    try:
        with nodes_log_to(RunFolder(out).nodes_log):
            runs = run_experiment(options, lambda line: click.echo(line, err=True))
    except RedisClusterError as exc:
        raise NotCarriedOut(f"{exc}; is redis-server installed and free to start?") from None
    mark_complete(out)
    click.echo(table(runs))
    folder = RunFolder(out)
    click.echo(f"results: {folder.failover_file}, {folder.failover_table_file}")


@main.command(
    "redis-cluster",
    help="Run a local Redis Cluster (redis-server on free loopback ports) until Ctrl-C; print "
    "its URL, which simulate, serve and loadgen take as --redis (a cluster is detected).",
)
@click.option("--masters", default=3, show_default=True, type=click.IntRange(3, 16))
@click.option("--replicas", default=0, show_default=True, type=click.IntRange(0, 2))
def redis_cluster(masters: int, replicas: int) -> None:
    """``notes-cluster redis-cluster``."""
    from cluster.redis_cluster import RedisClusterError
    from cluster.redis_cluster import main as run_redis_cluster

    serving()
    click.echo("starting; Ctrl-C, SIGTERM or SIGHUP stops it", err=True)
    try:
        run_redis_cluster(masters, replicas, click.echo)
    except RedisClusterError as exc:
        raise NotCarriedOut(str(exc)) from None


CONFORMANCE_EXAMPLES = """
\b
Examples (our demo nodes; any server: name its tool with --tool and --arguments):
  notes-cluster serve --demo --nodes 3 --port 8700 --state-ttl 10 &
  notes-cluster conformance --state-ttl 10 --out runs/pack-ours \\
      --target http://127.0.0.1:8700/mcp,http://127.0.0.1:8701/mcp,http://127.0.0.1:8702/mcp
  notes-cluster conformance --tool transfer --arguments '{"account": "acc-{fresh}"}' \\
      --read-tool balance --target http://127.0.0.1:9000/mcp
"""


@main.command(
    help="Check a confirm-before-act tool of any MCP server for exactly-once under retries, "
    "duplicates, lost responses, expiry and forged states (the MRTR conformance pack). Without "
    "--tool the defaults fit our demo nodes (`serve --demo`). Writes checks.json and checks.md "
    "with --out; exit 0 when no check fails, 1 on a failure, 2 on bad usage.\n"
    + CONFORMANCE_EXAMPLES
)
@click.option(
    "--target",
    "targets",
    multiple=True,
    required=True,
    help="An instance's endpoint URL (repeat, or comma-separate, for several instances).",
)
@click.option("--tool", default=None, help="The confirm-before-act tool (default: notes_delete).")
@click.option("--arguments", default=None, help="Its arguments, JSON; {fresh} is replaced.")
@click.option("--create-tool", default=None, help="A tool that makes the target first.")
@click.option("--create-arguments", default=None, help="Its arguments (default: --arguments).")
@click.option("--read-tool", default=None, help="A tool that observes the effect.")
@click.option("--read-arguments", default=None, help="Its arguments (default: --arguments).")
@click.option("--other-tool", default=None, help="A second confirm-before-act tool.")
@click.option("--other-arguments", default=None, help="Its arguments (default: --arguments).")
@click.option("--token", default=None, help="Bearer token (default: none; demo: alice's).")
@click.option("--other-token", default=None, help="Another principal's bearer token.")
@click.option("--copies", default=4, show_default=True, type=click.IntRange(2, 64))
@click.option(
    "--state-ttl",
    default=None,
    type=click.FloatRange(0.5, 3600),
    help="The target's requestState lifetime in seconds (the expiry checks need it).",
)
@click.option("--expiry-margin", default=1.0, show_default=True, type=click.FloatRange(0.1, 60))
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print checks.json instead of the table.")
def conformance(
    targets: tuple[str, ...],
    tool: str | None,
    arguments: str | None,
    create_tool: str | None,
    create_arguments: str | None,
    read_tool: str | None,
    read_arguments: str | None,
    other_tool: str | None,
    other_arguments: str | None,
    token: str | None,
    other_token: str | None,
    copies: int,
    state_ttl: float | None,
    expiry_margin: float,
    out_dir: Path | None,
    as_json: bool,
) -> None:
    """``notes-cluster conformance``."""
    import json
    from dataclasses import replace

    require_extra("sim", only=("httpx",))
    from cluster.mrtr_conformance import demo_contract, run_conformance
    from loadgen.mrtr_pack.case import Contract, fill
    from loadgen.mrtr_pack.checks import failed, markdown

    urls = _loopback_targets(targets)
    if tool is None:
        if arguments is not None:
            raise click.UsageError("--arguments needs --tool")
        base = demo_contract(state_ttl, copies)
    else:
        base = Contract(tool=tool, arguments=arguments or "{}", copies=copies)
        base = replace(base, state_ttl_s=state_ttl)
    given: dict[str, Any] = {
        "create_tool": create_tool,
        "create_arguments": create_arguments,
        "read_tool": read_tool,
        "read_arguments": read_arguments,
        "other_tool": other_tool,
        "other_arguments": other_arguments,
        "token": token,
        "other_token": other_token,
    }
    contract = replace(
        base, expiry_margin_s=expiry_margin, **{k: v for k, v in given.items() if v is not None}
    )
    for name in ("arguments", "create_arguments", "read_arguments", "other_arguments"):
        template = getattr(contract, name)
        try:
            if template is not None:
                fill(template, 1)
        except ValueError as exc:
            option = "--" + name.replace("_", "-")
            raise click.UsageError(f"{option}: not a JSON object ({exc})") from None
    checks = _run_stoppable(lambda: run_conformance(urls, contract, out_dir))
    if as_json:
        click.echo(json.dumps([c.to_json() for c in checks], indent=2))
    else:
        click.echo(markdown(checks, urls))
    sys.exit(EXIT_INVALID if failed(checks) else EXIT_VALID)


@main.command(
    "shrink",
    help="Search a failing deterministic run folder (simulate --deterministic) for a smaller "
    "run of the same seed that fails the same invariant: first the flows of the invariant's "
    "operations, then of their tenant, then fewer flows, fault kinds and nodes, fault points "
    "off, clocks unskewed, within --budget seconds and --budget-runs runs. The smallest is run "
    "into --out (default RUN_DIR/shrunk) with replay.sh (simulate --replay of it), anomaly.txt "
    "and lanes.png. Exit 1: the shrunk run fails the same invariant.",
)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--budget", default=300.0, show_default=True, type=click.FloatRange(1, 86_400))
@click.option("--budget-runs", default=500, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--invariant", default=None, help="The broken invariant to keep (default: the first)."
)
def shrink_cmd(
    run_dir: Path, budget: float, budget_runs: int, out_dir: Path | None, invariant: str | None
) -> None:
    """``notes-cluster shrink`` (issue 19: ``cluster.deterministic.command``)."""
    require_extra("sim")
    from cluster.deterministic.command import shrink_command
    from loadgen.run.folder import RunFolder

    shrunk = out_dir or RunFolder(run_dir).shrunk_dir
    shrink_command(run_dir, shrunk, budget, budget_runs, invariant)


@main.command(
    "conformance-table",
    help="The conformance pack against our 3-node demo cluster and the Python and TypeScript "
    "SDK references (as their docs show, and with what their authors must add), check by "
    "check: the README's table. Needs a real Redis (keys under a prefix of the run's own, "
    "deleted afterwards); the TypeScript columns need Node 22 (NOTES_CLUSTER_NODE).",
)
@click.option("--redis", "redis_url", required=True, help="redis:// URL the targets share.")
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for table.md, table.json and each target's checks (default: under runs/).",
)
def conformance_table_cmd(redis_url: str, out_dir: Path | None) -> None:
    """``notes-cluster conformance-table``."""
    require_extra("sim")
    require_extra("bench")
    from cluster.lab.conformance.table import conformance_table

    folder = out_dir or Path("runs") / time.strftime("conformance-%Y%m%d-%H%M%S")
    table = _run_stoppable(lambda: conformance_table(redis_url, folder))
    click.echo(table)
    click.echo(f"written to {folder}", err=True)


@main.command(
    "serve-reference",
    help="Serve an official SDK's reference server for the conformance pack: N instances "
    "sharing a fresh sealing key and the given Redis; prints their URLs, serves until Ctrl-C.",
)
@click.option("--sdk", type=click.Choice(["python", "typescript"]), default="python")
@click.option("--instances", default=2, show_default=True, type=click.IntRange(1, 16))
@click.option("--redis", "redis_url", required=True, help="redis:// URL the instances share.")
@click.option("--prefix", default="ncref", show_default=True, help="Key prefix of the notes.")
@click.option("--state-ttl", default=300.0, show_default=True, type=click.FloatRange(0.5, 86_400))
@click.option(
    "--used-state-store", is_flag=True, help="Record each state's outcome (one-shot states)."
)
@click.option(
    "--bind-call",
    is_flag=True,
    help="TypeScript: bind the state to the tool and its arguments too.",
)
def serve_reference(
    sdk: str,
    instances: int,
    redis_url: str,
    prefix: str,
    state_ttl: float,
    used_state_store: bool,
    bind_call: bool,
) -> None:
    """``notes-cluster serve-reference``."""

    require_extra("bench")
    from cluster.lab.conformance.references import ADDITIONS, Sdk, open_reference

    chosen: Sdk = "python" if sdk == "python" else "typescript"
    additions = [
        a for a, on in (("used-state-store", used_state_store), ("bind-call", bind_call)) if on
    ]
    unknown = [a for a in additions if a not in ADDITIONS[chosen]]
    if unknown:
        raise click.UsageError(f"the {sdk} reference has no --{unknown[0]}")

    async def serve() -> None:
        async with open_reference(
            chosen,
            redis_url,
            instances=instances,
            prefix=prefix,
            state_ttl_s=state_ttl,
            additions=additions,
        ) as urls:
            _print_ready(urls)
            await _sleep_forever()  # until a stop signal: the instances stop by pid on the way out

    serving()  # SIGTERM or SIGHUP from a supervisor is the normal end (exit 0)
    try:
        _run_stoppable(serve)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None


async def _sleep_forever() -> None:
    import trio

    await trio.sleep_forever()


def _print_ready(urls: list[str]) -> None:
    for url in urls:
        click.echo(url)
    click.echo("serving; Ctrl-C stops", err=True)


def _wait_replicas(text: str | None, redis_url: str | None) -> WaitReplicas | None:
    """``--wait-replicas`` parsed (None: not given, the config decides)."""
    from nodes.serving.durability import parse_wait_replicas

    try:
        waits = None if text is None else parse_wait_replicas(text)
    except ValueError:
        raise click.UsageError("--wait-replicas: 'auto' or a number from 0 to 16") from None
    from cluster.stores import needs_real_redis

    why = needs_real_redis(wait_replicas=0 if waits in (None, "auto") else int(waits))
    if why and redis_url is None:
        raise click.UsageError(why)
    return waits


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
