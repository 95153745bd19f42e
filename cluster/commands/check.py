"""``notes-cluster check``: run folders checked offline.

Layer: cluster. The work is ``loadgen.run.pipeline.recheck`` (``cluster.targets.foreign`` for a
``loadgen --foreign`` folder).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from cluster.commands.base import (
    REDIS_URL,
    DamagedFolder,
    NotARunFolder,
    require_extra,
    require_store,
    run_until_stopped,
    showing_phases,
)
from cluster.exit_codes import (
    NotCarriedOut,
)
from cluster.run_commands import (
    exit_for,
)

if TYPE_CHECKING:
    from loadgen.run.folder import RunFolder
    from loadgen.run.results import RecordedSettings

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


@click.command(
    "check",
    help="Check run folders offline: their histories against the store facts they hold "
    "(exit 0 valid, 1 invalid, 3 unknown). Several folders (one per load process: "
    "`loadgen --process-id K`, on any machine sharing the store) are checked as one run; with "
    "--redis the store facts are read now, after every process ended, into the first folder "
    "(never over facts a folder holds). A folder that is not one run's (the parent of several "
    "runs) is refused (exit 2).",
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
    require_extra("sim", only=("rich", "hdrh"))
    import json

    from rich.console import Console

    from loadgen.history import DamagedRunFile
    from loadgen.report import print_check
    from loadgen.run.folder import RunFolder
    from loadgen.run.pipeline import MissingFacts, folders_store, recheck
    from loadgen.run.results import Results
    from loadgen.tenants import tenants as tenant_names

    _refuse_not_a_run(run_dirs)
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
        _refuse_to_replace_facts(folders)
        require_store(redis_url)
        store = folders_store(redis_url, prefix, tenant_names(tenants), saved)
    rule = saved.exercise(min_completed, min_per_kind)
    try:
        with showing_phases():
            checked = run_until_stopped(lambda: recheck(folders, store, exercise=rule, jobs=jobs))
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
    saved: RecordedSettings,
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


def _refuse_not_a_run(run_dirs: tuple[Path, ...]) -> None:
    """Each folder must be one run's (or one load process's): a parent of several runs, or a
    folder holding none, is refused in one line (exit 2) before anything reads or writes it."""
    from loadgen.run.folder import HISTORY_FILE, RESULTS_FILE, is_run_folder

    for path in run_dirs:
        if is_run_folder(path):
            continue
        runs = sorted(p.name for p in path.iterdir() if p.is_dir() and is_run_folder(p))
        if runs:
            shown = ", ".join(runs[:3]) + (", ..." if len(runs) > 3 else "")
            raise NotARunFolder(
                f"{path} is not a run folder but holds {len(runs)} "
                f"run{'s' if len(runs) > 1 else ''} ({shown}); check each on its own, e.g. "
                f"notes-cluster check {path / runs[0]}. Nothing was checked."
            )
        raise NotARunFolder(
            f"{path} is not a run folder (no {HISTORY_FILE} or {RESULTS_FILE} in it). "
            "Nothing was checked."
        )


def _refuse_to_replace_facts(folders: list[RunFolder]) -> None:
    """``--redis`` writes the store facts it reads into the first folder: never over facts a
    folder already holds (the run's own, read when its states had just expired), which a
    later read of a store that moved on would replace with a false verdict."""
    from loadgen.run.folder import META_FILE, STORE_DIR

    for folder in folders:
        if folder.has_store_facts():
            raise NotARunFolder(
                f"{folder} already holds its store facts ({STORE_DIR}/{META_FILE}); check it "
                "without --redis (reading the store again would replace them). Nothing was "
                "checked."
            )
