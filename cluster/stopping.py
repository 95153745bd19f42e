"""Stopping cleanly: SIGTERM, SIGINT and SIGHUP, and children that never outlive their parent.

Layer: cluster. Every long-running command stops the same way on any of the three signals: the
work is cancelled, whatever it started is stopped and whatever it wrote to a store is dropped,
and the command exits with the code the signal means (``cluster.exit_codes``). Two tools:

- ``run_stoppable(fn)``: ``trio.run`` with a watcher that turns the first stop signal into a
  cancellation of ``fn`` (so its ``finally`` blocks and shielded clean-ups run in order), then
  raises ``Stopped``; a second signal exits at once.
- ``forward_stop_signals()``: outside a trio run, SIGTERM and SIGHUP are re-raised as SIGINT,
  which Python turns into ``KeyboardInterrupt`` (SIGINT is made to, even when the process
  inherited it ignored, as a script's background job does); ``received_signal()`` says which
  one really came. That is for plain code between runs only: inside a trio run a
  ``KeyboardInterrupt`` is raised at whatever bytecode the run's task is at, and one that lands
  between a ``with`` block's ``__enter__`` and the block itself leaves a cancel scope entered
  for good ("Cancel scope stack corrupted", seen in a failover run stopped by SIGTERM). So every
  ``trio.run`` of a command is a ``run_stoppable`` (``tests/test_stop_signals.py`` checks the
  source for a bare one).

A child never outlives its parent: ``nodes.serving.lifeline`` (the lifeline pipe, the kernel's
parent-death signal).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import trio

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals every long-running command stops on."""

log = logging.getLogger("cluster.stopping")

_received: list[int] = []


class Stopped(Exception):
    """A stop signal ended the work (after its clean-up ran)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal_name(signum)}")

    def __reduce__(self) -> tuple[type[Stopped], tuple[int]]:
        return (Stopped, (self.signum,))  # crosses a process pool as itself


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15."""
    return signal.Signals(signum).name


def received_signal() -> int:
    """The stop signal that came first (SIGINT when none was recorded: a plain Ctrl-C)."""
    return _received[0] if _received else signal.SIGINT


def _forward(signum: int, _frame: object) -> None:
    _received.append(signum)
    signal.raise_signal(signal.SIGINT)


def forward_stop_signals() -> None:
    """SIGTERM and SIGHUP from now on act as Ctrl-C (recorded, then SIGINT raised again), so
    code that stops cleanly on ``KeyboardInterrupt`` stops cleanly on them too. Main thread only.

    SIGINT itself is made Python's ``KeyboardInterrupt`` if the process was started with it
    ignored or at the system default: a shell starts a script's background job (``cmd &``) with
    SIGINT ignored, and the SIGINT raised again would then vanish, leaving a SIGTERM with no
    effect at all. (``run_stoppable`` stops on SIGINT whatever its inherited disposition, too.)"""
    if threading.current_thread() is not threading.main_thread():
        return
    if not callable(signal.getsignal(signal.SIGINT)):  # SIG_IGN or SIG_DFL (or None: not Python's)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _forward)


@contextlib.contextmanager
def forwarding_stop_signals() -> Iterator[None]:
    """``forward_stop_signals`` for the block; the previous handlers (and record) come back
    after it (a command invoked inside a test process leaves that process as it was)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    _received.clear()
    forward_stop_signals()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: installed outside Python, cannot be put back
                signal.signal(signum, handler)


def say_stopping(signum: int) -> None:
    """What a command says on stderr when the first stop signal arrives."""
    sys.stderr.write(
        f"{signal_name(signum)}: stopping, cleaning up (send it again to exit at once)\n"
    )
    sys.stderr.flush()


def run_stoppable(
    fn: Callable[[], Awaitable[T]],
    *,
    on_stop: Callable[[int], None] | None = say_stopping,
    clock: trio.abc.Clock | None = None,
) -> T:
    """``trio.run(fn, clock=clock)``, cancelled by the first stop signal; then raise
    ``Stopped``. The signal reaches ``fn`` as a cancellation at its next checkpoint, never as a
    ``KeyboardInterrupt`` in the middle of its code.

    ``on_stop`` is told the signal as it arrives (by default it says "stopping ..." on stderr);
    a second stop signal while ``fn`` cleans up exits at once with that signal's code."""
    from cluster.exit_codes import exit_code_for_signal

    if threading.current_thread() is not threading.main_thread():
        return trio.run(fn, clock=clock)  # signals reach the main thread only

    async def main() -> tuple[list[T], list[int]]:
        result: list[T] = []
        seen: list[int] = []
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals, _unwrapped():
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for signum in signals:
                        if seen:
                            sys.stderr.write(f"{signal_name(signum)} again: exiting now\n")
                            sys.stderr.flush()
                            os._exit(exit_code_for_signal(seen[0]))
                        seen.append(signum)
                        _received.append(signum)
                        if on_stop is not None:
                            on_stop(signum)
                        nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
                result.append(await fn())
                nursery.cancel_scope.cancel()
        return result, seen

    result, seen = trio.run(main, clock=clock)
    if seen:
        raise Stopped(seen[0])
    return result[0]


@contextlib.contextmanager
def _unwrapped() -> Iterator[None]:
    """The watcher's nursery wraps ``fn``'s exception in a group: hand on ``fn``'s own, so that
    callers catch what ``fn`` raises (as under a plain ``trio.run``)."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
