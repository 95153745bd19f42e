"""The lab's commands: ``bench-servers``, ``bench-parts``, ``failover-experiment``,
``conformance-table`` and ``serve-reference``, what the project ran on itself to choose its parts.

Layer: cluster. The only commands that import ``cluster.lab``, each when it runs, so that no other
command loads any of it (tests/test_import_direction.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cluster.commands.base import (
    bench_store_errors,
    print_ready,
    require_extra,
    run_until_stopped,
    serving,
    sleep_forever,
)
from cluster.commands.options import (
    bench_options,
    with_options,
)
from cluster.exit_codes import (
    NotCarriedOut,
)
from cluster.run_commands import (
    claim_run_dir,
)

if TYPE_CHECKING:
    pass

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


@click.command(
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
    with bench_store_errors():
        options = ServersOptions(quick=quick, redis_url=redis_url, out_dir=out_dir)
        run_bench_servers(options, err.print)
    click.echo((out_dir / "servers.md").read_text(encoding="utf-8"))


@click.command(
    "bench-parts",
    help="What one node's CPU per flow is made of: the node, the same node on coredis and the "
    "HTTP server alone (the fixed-replies app) in alternated slots; metrics on ÷ off in one node "
    "process switching between the two; each Redis client's CPU per EVALSHA alone; write "
    "parts.json and parts.md.",
)
@with_options(
    *bench_options(
        quick_help="Short points (about two minutes in all).",
        redis_help="A Redis database of yours instead of the redis-server the command starts of "
        "its own. Refused unless it holds no keys but the bench's; only the bench's own keys "
        "(prefix ncbench) are deleted.",
    )
)
def bench_parts(quick: bool, redis_url: str | None, out_dir: Path) -> None:
    """``notes-cluster bench-parts``."""
    require_extra("sim")
    from rich.console import Console

    from cluster.lab.parts import PartsOptions, run_bench_parts

    err = Console(stderr=True)
    with bench_store_errors():
        options = PartsOptions(quick=quick, redis_url=redis_url, out_dir=out_dir)
        run_bench_parts(options, err.print)
    click.echo((out_dir / "parts.md").read_text(encoding="utf-8"))


@click.command(
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


@click.command(
    "conformance-table",
    help="The conformance pack against our 3-node demo cluster and the Python and TypeScript "
    "SDK references (as their docs show, and with what their authors must add), check by "
    "check: the table of docs/explanation/sdk-references.md. Needs a real Redis (keys under a "
    "prefix of the run's own, "
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
    from cluster.lab.sdk_references.table import conformance_table, left_out

    folder = out_dir or Path("runs") / time.strftime("conformance-%Y%m%d-%H%M%S")
    note = left_out()
    if note is not None:  # said first: the run takes minutes
        click.echo(note, err=True)
    table = run_until_stopped(lambda: conformance_table(redis_url, folder))
    click.echo(table)
    click.echo(f"written to {folder}", err=True)


@click.command(
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
    from cluster.lab.sdk_references.references import ADDITIONS, Sdk, open_reference

    chosen: Sdk = "python" if sdk == "python" else "typescript"
    additions = [
        a for a, on in (("used-state-store", used_state_store), ("bind-call", bind_call)) if on
    ]
    unknown = [a for a in additions if a not in ADDITIONS[chosen]]
    if unknown:
        raise click.UsageError(f"the {sdk} reference has no --{unknown[0]}")

    async def serve_until_stopped() -> None:
        async with open_reference(
            chosen,
            redis_url,
            instances=instances,
            prefix=prefix,
            state_ttl_s=state_ttl,
            additions=additions,
        ) as urls:
            print_ready(urls)
            await sleep_forever()  # until a stop signal: the instances stop by pid on the way out

    serving()  # SIGTERM or SIGHUP from a supervisor is the normal end (exit 0)
    try:
        run_until_stopped(serve_until_stopped)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
