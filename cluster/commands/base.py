"""What every ``notes-cluster`` command shares: the group's failure handling, the extras, the
``--redis`` URL type, the store check, stopping, progress and the loopback targets.

Layer: cluster. Imports only what every command needs at start; the rest is imported where used.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cluster.exit_codes import (
    EXIT_USAGE,
    ConfigurationError,
    NotCarriedOut,
    describe_failure,
    exit_code_for_signal,
    leaves,
)
from cluster.run_commands import (
    RUN_DIR_META,
)

if TYPE_CHECKING:
    from loadgen.runner import FlowSample

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


DEBUG_ENV = "NOTES_CLUSTER_DEBUG"
"""Set to 1: as ``--debug`` (a failure prints its traceback, then its one line)."""

SERVING_META = "notes_cluster.serving"
"""``ctx.meta`` key set by the commands whose normal end is a stop signal (serve, node,
redis-cluster): SIGTERM or SIGHUP then exits 0 (Ctrl-C 130)."""

EXTRAS: dict[str, tuple[str, ...]] = {
    "sim": ("fakeredis", "lupa", "httpx", "rich", "hdrh", "matplotlib", "yaml"),
    "bench": ("mcp", "mcp_types"),
    "swarm": ("distributed",),
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
def bench_store_errors() -> Iterator[None]:
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


class NotARunFolder(click.ClickException):
    """A folder given to ``check`` that is not one run's (a parent of several runs, or none):
    exit 2, one line, nothing read or written."""

    exit_code = EXIT_USAGE


def require_extra(extra: str, *, only: tuple[str, ...] | None = None) -> None:
    """Refuse to go on unless the modules of ``extra`` (or ``only`` these of them) are
    installed, naming the extra and how to install it."""
    missing = [m for m in only or EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(_missing_text(extra, missing))


def missing_extra(exc: BaseException) -> MissingExtra | None:
    """The one line naming the extra when ``exc`` is the import of a module an extra provides
    (a command that did not call ``require_extra`` first still names it)."""
    for leaf in leaves(exc):
        name = (getattr(leaf, "name", None) or "").partition(".")[0]
        if not isinstance(leaf, ModuleNotFoundError) or not name:
            continue
        for extra, modules in EXTRAS.items():
            if name in modules:
                return MissingExtra(_missing_text(extra, [name]))
    return None


def _missing_text(extra: str, missing: list[str]) -> str:
    return (
        f"this command needs the '{extra}' extra (missing: {', '.join(missing)}); "
        f"install it with: pip install 'notes-cluster[{extra}]'"
    )


class Commands(click.Group):
    """The group: every command's unhandled failure becomes one line and an exit code that means
    one thing (``cluster.exit_codes``); stop signals end every command cleanly; a reader that
    closes the output pipe stops the output, not the command (``closed_pipe``)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from cluster.commands.closed_pipe import tolerating_closed_pipes

        with tolerating_closed_pipes():
            return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        from cluster.stopping import Stopped, forwarding_stop_signals, received_signal

        meta = ctx.meta

        def stopped(signum: int) -> click.exceptions.Exit:
            mark_stopped(ctx, f"stopped by {signal_name(signum)}")
            say_left_behind()
            click.echo(f"stopped by {signal_name(signum)}", err=True)
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
            missing = missing_extra(exc)
            if missing is not None:
                _show_traceback(ctx)
                raise missing from None
            _show_traceback(ctx)  # a failure nobody handled: one line, never a traceback
            failure = describe_failure(exc)
            mark_stopped(ctx, f"failed: {failure.message}")
            say_left_behind()
            raise failure from None


def say_left_behind() -> None:
    """One line when flows cut short could not delete their notes (``workload.LEFT_BEHIND``)."""

    workload = sys.modules.get("loadgen.workload")
    left: list[str] = getattr(workload, "LEFT_BEHIND", [])
    if left:
        click.echo(
            f"{len(left)} unfinished flows' notes could not be deleted (no node answered "
            f"in time); they stay in the store, titled with the run's tag (e.g. {left[0]!r})",
            err=True,
        )


def signal_name(signum: int) -> str:
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


def mark_stopped(ctx: click.Context, why: str) -> None:
    """Say in the run folder's ``INCOMPLETE`` marker why its run ended early (a command without
    a run folder, such as ``serve``, loads nothing of the load generator here)."""
    run_dir = ctx.find_root().meta.get(RUN_DIR_META)
    if isinstance(run_dir, Path) and run_dir.is_dir():
        from loadgen.run.folder import mark_incomplete

        with suppress(OSError):
            mark_incomplete(run_dir, f"{time.strftime('%Y-%m-%d %H:%M:%S')} {why}")


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


def run_until_stopped(fn: Callable[[], Any]) -> Any:
    """``fn`` under trio, stopped cleanly by SIGTERM, SIGINT or SIGHUP (``cluster.stopping``)."""
    from cluster.stopping import run_stoppable

    return run_stoppable(fn)


def with_progress(
    total: int, work: Callable[[Callable[[FlowSample], None]], T], console: Any = None
) -> T:
    """Run ``work`` with a progress bar on stderr (only when stderr is a terminal; ``console``:
    another rich console); once the flows are done, the bar's label names the phase the run is
    in (``loadgen.run.phases``): the wait for expiry, reading the store, the check."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from loadgen.run.phases import listening

    err = console or Console(stderr=True)
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

        def phase(text: str) -> None:
            progress.update(task, description=text, refresh=True)

        with listening(phase):
            return work(lambda _: progress.advance(task))


@contextmanager
def showing_phases(console: Any = None) -> Iterator[None]:
    """A status line on stderr (a terminal only) naming the phase a command without a progress
    bar is in (``loadgen.run.phases``: ``check --redis`` waits for the last states to expire)."""
    from rich.console import Console

    from loadgen.run.phases import listening

    err = console or Console(stderr=True)
    if not err.is_terminal:
        yield
        return
    with err.status("checking") as status, listening(lambda text: status.update(text)):
        yield


ALLOW_REMOTE_HELP = (
    "Let --target name a host beyond loopback (a staging server): without it such a URL is "
    "refused before anything is sent. With it a line says where the traffic goes, and the "
    "rate is capped (nodes.loopback.REMOTE_MAX_RATE)."
)


class TargetRefusedError(click.ClickException):
    """A ``--target`` that may not be sent to (``nodes.loopback.remote_hosts``): one line, exit 2,
    nothing sent."""

    exit_code = EXIT_USAGE


def checked_targets(
    command: str, targets: tuple[str, ...], allow_remote: bool
) -> tuple[list[str], list[str]]:
    """``--target`` values as URLs and the hosts among them beyond loopback (refused unless
    ``--allow-remote``; when allowed, the line saying where the traffic goes is printed)."""
    from nodes.loopback import TargetRefused, remote_hosts, remote_traffic_line, target_urls

    urls = target_urls(targets)
    try:
        remote = remote_hosts(urls, allow_remote=allow_remote)
    except TargetRefused as exc:
        raise TargetRefusedError(str(exc)) from None
    if remote:
        click.echo(remote_traffic_line(command, urls, remote), err=True)
    return urls, remote


def token_options(tokens: tuple[str, ...]) -> dict[str, str]:
    """``--token PRINCIPAL=TOKEN`` values as principal -> token."""
    out: dict[str, str] = {}
    for item in tokens:
        principal, sep, token = item.partition("=")
        if not sep or not principal or not token:
            raise click.UsageError(f"--token {principal or item!r}: expected PRINCIPAL=TOKEN")
        out[principal] = token
    return out


async def sleep_forever() -> None:
    import trio

    await trio.sleep_forever()


def print_ready(urls: list[str]) -> None:
    for url in urls:
        click.echo(url)
    click.echo("serving; Ctrl-C stops", err=True)
