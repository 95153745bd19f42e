"""``notes-cluster shrink``: a failing deterministic run searched for a smaller one.

Layer: cluster. The work is ``cluster.deterministic.command``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cluster.commands.base import (
    require_extra,
)

if TYPE_CHECKING:
    pass

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


@click.command(
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
    """``notes-cluster shrink`` (``cluster.deterministic.command``)."""
    require_extra("sim")
    from cluster.deterministic.command import shrink_command
    from loadgen.run.folder import RunFolder

    shrunk = out_dir or RunFolder(run_dir).shrunk_dir
    shrink_command(run_dir, shrunk, budget, budget_runs, invariant)
