"""What the run commands share: the run folder they claim, the options they parse alike, the
report and exit code that end them.

Layer: cluster, below ``cluster.cli`` and ``cluster.deterministic.command`` (both use it; neither
is imported here). Load-generator modules are imported inside the functions, as ``cluster.cli``
does, so a command that runs no load (``serve``) loads none of them.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from cluster.exit_codes import (
    EXIT_INVALID,
    EXIT_UNKNOWN,
    EXIT_VALID,
    ConfigurationError,
    NotCarriedOut,
)

if TYPE_CHECKING:
    from cluster.faults import FaultKind
    from loadgen.check.exercise import ExerciseRule
    from loadgen.run.folder import RunFolder
    from loadgen.run.pipeline import Run

RUN_DIR_META = "notes_cluster.run_dir"
"""``ctx.meta`` key: the run folder of the running command (its marker says why it stopped)."""


def claim_run_dir(out_dir: Path | None, replace: bool, stem: str) -> Path:
    """The run folder: ``--out`` (refused when not empty, unless ``--replace``), else a new
    uniquely named folder under ``runs/``; it gets an ``INCOMPLETE`` marker until the run ends,
    and the root context learns it (a failure or stop signal is written into the marker)."""
    import shlex

    from loadgen.run.folder import RunFolderError, claim_out_dir, mark_incomplete, new_run_dir

    try:
        if out_dir is not None:
            run_dir = claim_out_dir(out_dir, replace=replace)
        else:
            run_dir = new_run_dir(Path("runs"), time.strftime(stem))
    except RunFolderError as exc:
        raise ConfigurationError(str(exc)) from None
    except OSError as exc:
        raise NotCarriedOut(f"cannot make the run folder: {exc}") from None
    command = shlex.join(["notes-cluster", *sys.argv[1:]])
    mark_incomplete(
        run_dir,
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} started (pid {os.getpid()}): {command}; "
        "this file goes when the run has written everything",
    )
    click.get_current_context().find_root().meta[RUN_DIR_META] = run_dir
    return run_dir


def _pid() -> int:
    import os

    return os.getpid()


def parse_fault_kinds(text: str, *, embedded: bool) -> frozenset[FaultKind]:
    """``--faults``: the kinds, or a usage error for unknown ones or ones this store cannot run."""
    from cluster.faults import FaultUsageError, check_kinds, parse_kinds

    try:
        kinds = parse_kinds(text)
        check_kinds(kinds, embedded=embedded)
    except FaultUsageError as exc:
        raise click.UsageError(str(exc)) from None
    return kinds


def report_run(run: Run, folder: RunFolder, as_json: bool) -> NoReturn:
    """Pictures, summary (or JSON) and the exit code of a run."""
    import json

    from rich.console import Console

    from loadgen.pictures import write_pictures
    from loadgen.report import print_summary

    results = run.results
    windows = [(f["start_s"], f["end_s"], f"{f['kind']} {f['action']}") for f in results.faults]
    write_pictures(folder, results, run.stats, faults=windows)
    folder.mark_complete()
    if as_json:
        click.echo(json.dumps(results.to_json(), indent=2))
    else:
        print_summary(results, Console())
        click.echo(f"run folder: {folder}")
    exit_for(results.verdict)


def exit_for(verdict: str) -> NoReturn:
    sys.exit({"valid": EXIT_VALID, "invalid": EXIT_INVALID}.get(verdict, EXIT_UNKNOWN))


def exercise_rule(min_completed: float | None, min_per_kind: int | None) -> ExerciseRule:
    """The exercise rule from the options given (the defaults for the others)."""
    from loadgen.check.exercise import MIN_COMPLETED_SHARE, MIN_RUNS_PER_KIND, ExerciseRule

    return ExerciseRule(
        MIN_COMPLETED_SHARE if min_completed is None else float(min_completed),
        MIN_RUNS_PER_KIND if min_per_kind is None else int(min_per_kind),
    )
