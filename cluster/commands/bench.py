"""``notes-cluster bench``: the benchmark a user runs.

Layer: cluster. The work is ``cluster.bench.run``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cluster.commands.base import (
    bench_store_errors,
    require_extra,
)
from cluster.commands.options import (
    bench_options,
    with_options,
)

if TYPE_CHECKING:
    pass

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


@click.command(
    "bench",
    help="Run the named benchmark scenarios; write bench.json and bench.md.\n"
    "\n\b\nExamples:\n  notes-cluster bench --quick\n  notes-cluster bench-servers --quick\n",
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
    with bench_store_errors():
        run_bench(BenchOptions(quick=quick, redis_url=redis_url, out_dir=out_dir), err.print)
    click.echo((out_dir / "bench.md").read_text(encoding="utf-8"))
