"""``notes-cluster loadgen``: the race workload against running HTTP nodes, or a foreign server.

Layer: cluster. The work is ``cluster.targets.remote`` and ``cluster.targets.foreign``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from cluster.commands.base import (
    ALLOW_REMOTE_HELP,
    REDIS_URL,
    checked_targets,
    require_extra,
    require_store,
    run_until_stopped,
    token_options,
    with_progress,
)
from cluster.commands.options import (
    load_options,
)
from cluster.exit_codes import (
    NotCarriedOut,
)
from cluster.run_commands import (
    claim_run_dir,
    exercise_rule,
    report_run,
)

if TYPE_CHECKING:
    pass

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


LOADGEN_EXAMPLES = """
\b
Example (the nodes and loadgen share the state key):
  export NOTES_CLUSTER_STATE_KEY=$(head -c 32 /dev/urandom | base64)
  notes-cluster serve --demo --nodes 2 --port 8700 --redis redis://127.0.0.1:6379/0 \\
      --state-ttl 5 --replay-grace 2 &
  notes-cluster loadgen --demo --redis redis://127.0.0.1:6379/0 --replay-grace 2 \\
      --target http://127.0.0.1:8700/mcp --target http://127.0.0.1:8701/mcp --flows 200
"""


@click.command(
    "loadgen",
    help="Throw the race workload at running HTTP nodes (e.g. from `serve --demo`).\n"
    + LOADGEN_EXAMPLES,
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
@click.option("--allow-remote", is_flag=True, help=ALLOW_REMOTE_HELP)
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
    allow_remote: bool,
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

    urls, remote = checked_targets("loadgen", targets, allow_remote)
    if remote:
        from nodes.loopback import remote_load_bounds

        rate, concurrency = remote_load_bounds(rate, concurrency)
        # --foreign reads its load options from the context: it gets the bounds too.
        click.get_current_context().params.update(rate=rate, concurrency=concurrency)
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
    principal_tokens = {p: t for t, p in load_tokens().items()} | token_options(tokens)
    if redis_url is not None:
        require_store(redis_url)
    if wait_ready > 0:
        try:
            run_until_stopped(lambda: wait_until_ready(urls, wait_ready))
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
    sim = with_progress(
        flows,
        lambda advance: run_until_stopped(
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
    principal_tokens = {pr: t for t, pr in load_tokens().items()} | token_options(tokens)
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
    sim = with_progress(
        p["flows"],
        lambda advance: run_until_stopped(
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
