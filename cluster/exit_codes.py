"""What a ``notes-cluster`` exit code means, and the one line a failure prints.

Layer: cluster. Each code means one thing, so a CI job can tell a correctness bug from a crash:

====  ==========================================================================================
0     valid (or, for a serving command, stopped cleanly by SIGTERM or SIGHUP)
1     a violation: the checker found an invariant broken
2     usage or configuration: a bad option, URL or config file, a missing extra, a damaged run
      folder, a folder given to ``check`` that is not one run's, an unsafe Redis
      (``maxmemory-policy``), a non-empty ``--out``
3     unknown: the run finished but cannot decide (under-exercised, unchecked)
4     the run could not be carried out: the store unreachable, interrupted by SIGTERM or SIGHUP,
      an I/O error, a ``--workers`` load process that failed, an incomplete run folder given
      to ``check``, a ``conformance --target`` that takes no connection, any other runtime error
130   Ctrl-C (SIGINT)
====  ==========================================================================================

A runtime error prints one line (what failed, what to do); ``--debug`` adds the traceback. A
closed output pipe (``check RUN | head -1``) is none of these: the output stops, the exit code
stays the command's own (``cluster.commands.closed_pipe``).
"""

from __future__ import annotations

import errno
import signal
from collections.abc import Iterator

import click

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
EXIT_NOT_CARRIED_OUT = 4
EXIT_CTRL_C = 130


def exit_code_for_signal(signum: int, *, serving: bool = False) -> int:
    """130 for Ctrl-C; for SIGTERM or SIGHUP, 0 when a server was asked to stop (its normal
    end), 4 when a run was cut short (it could not be carried out)."""
    if signum == signal.SIGINT:
        return EXIT_CTRL_C
    return EXIT_VALID if serving else EXIT_NOT_CARRIED_OUT


class NotCarriedOut(click.ClickException):
    """The run could not be carried out (exit 4); the message says what failed and what to do."""

    exit_code = EXIT_NOT_CARRIED_OUT


class ConfigurationError(click.ClickException):
    """A configuration the command cannot run with (exit 2), found after parsing the options."""

    exit_code = EXIT_USAGE


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside ``exc`` (itself when it is not a group), depth first."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


def root_cause(exc: BaseException) -> BaseException:
    """The most telling leaf of ``exc``: a store or I/O error before anything else."""
    found = list(leaves(exc))
    for leaf in found:
        if _store_error(leaf) or isinstance(leaf, OSError):
            return leaf
    return found[0] if found else exc


def _store_error(exc: BaseException) -> bool:
    import coredis.exceptions
    import redis.exceptions

    from store.redis_errors import RedisClientError

    return isinstance(
        exc,
        redis.exceptions.ConnectionError
        | redis.exceptions.TimeoutError
        | coredis.exceptions.ConnectionError
        | RedisClientError
        | TimeoutError,
    )


def describe_failure(exc: BaseException) -> click.ClickException:
    """The one-line error for an exception a command did not handle itself."""
    from store.client_factory import UnsafeStore

    cause = root_cause(exc)
    text = " ".join(str(cause).split()) or type(cause).__name__
    if isinstance(cause, UnsafeStore):
        return ConfigurationError(f"{text}.")
    if _store_error(cause):
        return NotCarriedOut(
            f"the store did not answer ({text}); is Redis running at the --redis URL? "
            "Nothing was checked."
        )
    if isinstance(cause, OSError):
        if cause.errno == errno.EADDRINUSE:
            return NotCarriedOut(
                f"cannot listen: {text} (another server holds the port); stop it or choose "
                "another --port."
            )
        where = f" ({cause.filename})" if cause.filename else ""
        return NotCarriedOut(f"I/O error{where}: {text}.")
    return NotCarriedOut(
        f"the run failed: {type(cause).__name__}: {text} (rerun with --debug for the traceback)."
    )
