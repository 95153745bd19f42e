"""The option groups several commands share, written once: load size and pace, what counts as
exercised, logging, metrics, and the benchmark commands' options.

Layer: cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    pass

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


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
