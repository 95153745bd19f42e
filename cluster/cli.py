"""The ``notes-cluster`` command line.

Layer: cluster. Parses options (click), starts clusters and runs, prints; the work itself lives in
``cluster.local``, ``cluster.serve`` and ``loadgen``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
import trio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from loadgen.runner import FlowSample, RunSettings

EXIT_VALID, EXIT_INVALID, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 3

EXAMPLES = """
\b
Examples:
  notes-cluster simulate                        race workload on 3 in-process nodes, embedded store
  notes-cluster simulate --redis redis://127.0.0.1:6379/0 --flows 2000
  notes-cluster serve --demo --nodes 3 --port 8700
"""


@click.group(
    help="Stateless MCP notes nodes, and proof that notes_delete runs exactly once.\n" + EXAMPLES,
    context_settings={"help_option_names": ["-h", "--help"]},
)
def main() -> None:
    """The CLI entry point."""


@main.command(
    help="Throw the race workload at an in-process cluster and check the history.\n" + EXAMPLES
)
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(1, 64))
@click.option("--redis", "redis_url", default=None, help="redis:// URL (default: embedded store).")
@click.option("--flows", default=300, show_default=True, type=click.IntRange(1, 10_000_000))
@click.option(
    "--duration",
    default=45.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    help="Stop starting flows after this many seconds.",
)
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(1, 4096))
@click.option(
    "--rate",
    default=None,
    type=click.FloatRange(0.1, 100_000),
    help="Open loop: start this many flows per second (latency from intended start).",
)
@click.option("--seed", default=None, type=int, help="Seed (printed; random if not given).")
@click.option(
    "--state-ttl",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.5, 3600),
    help="Seconds a sealed confirmation stays valid (short, to exercise expiry).",
)
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="Run folder (default: runs/<timestamp>).",
)
@click.option("--json", "as_json", is_flag=True, help="Print results.json to stdout.")
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
    as_json: bool,
) -> None:
    """``notes-cluster simulate``."""
    import json
    import secrets

    from loadgen.report import print_summary
    from loadgen.simulate import SimulateOptions, simulate

    err = Console(stderr=True)
    seed = secrets.randbelow(2**31) if seed is None else seed
    run_dir = out_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    err.print(f"seed {seed}; run folder {run_dir}")
    options = SimulateOptions(
        nodes=nodes,
        redis_url=redis_url,
        state_ttl_s=state_ttl,
        run_dir=run_dir,
        settings=RunSettings(
            flows=flows, duration_s=duration, concurrency=concurrency, rate=rate, seed=seed
        ),
    )
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
        task = progress.add_task("flows", total=flows)

        def advance(_: FlowSample) -> None:
            progress.advance(task)

        sim = trio.run(simulate, options, advance)
    results = sim.to_json()
    try:
        from loadgen.pictures import write_pictures

        write_pictures(run_dir, sim)
    except ImportError:  # pragma: no cover - pictures are optional during development
        pass
    if as_json:
        click.echo(json.dumps(results, indent=2))
    else:
        print_summary(results, Console())
        click.echo(f"run folder: {run_dir}")
    sys.exit({"valid": EXIT_VALID, "invalid": EXIT_INVALID}.get(sim.result.status, EXIT_UNKNOWN))


simulate_cmd.name = "simulate"


@main.command(help="Serve N nodes over Streamable HTTP on consecutive loopback ports.\n" + EXAMPLES)
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--port",
    "base_port",
    default=8700,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port of node 0; node i listens on PORT+i.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--redis", "redis_url", default=None, help="redis:// URL (default: embedded store).")
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
    help="Seconds a sealed confirmation stays valid (default 300).",
)
@click.option("--processes", is_flag=True, help="Run each node as its own OS process.")
def serve(
    nodes: int,
    base_port: int,
    host: str,
    redis_url: str | None,
    config_path: Path | None,
    demo: bool,
    state_ttl: float | None,
    processes: bool,
) -> None:
    """``notes-cluster serve``."""
    from cluster.config import ConfigError
    from cluster.serve import serve_cluster, settings_for

    if not _loopback(host):
        raise click.UsageError("--host must be a loopback address (127.0.0.0/8 or ::1)")
    if config_path is None and not demo:
        raise click.UsageError("give --config FILE, or --demo for the demo fixture")
    try:
        settings = settings_for(config_path, demo, state_ttl)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None

    def ready(urls: list[str]) -> None:
        for url in urls:
            click.echo(url)
        click.echo("serving; Ctrl-C stops", err=True)

    try:
        trio.run(
            lambda: serve_cluster(
                settings,
                nodes=nodes,
                host=host,
                base_port=base_port,
                redis_url=redis_url,
                demo=demo,
                processes=processes,
                config_path=config_path,
                on_ready=ready,
            )
        )
    except KeyboardInterrupt:
        click.echo("stopped", err=True)


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
