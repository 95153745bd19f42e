"""A closed pipe ends a command's output, not its verdict (``notes-cluster check RUN | head -1``).

Layer: cluster. While a command runs, ``sys.stdout`` and ``sys.stderr`` are wrapped so that a
write or flush into a pipe whose reader has gone (``EPIPE``) points the stream's descriptor at
``/dev/null``, as Python's documentation on SIGPIPE recommends, and carries on: later output,
the flush at interpreter exit included, goes nowhere, and the exit code stays the one the command
decided (a closed pipe is never a violation, exit 1).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO


class ClosedPipeTolerant:
    """A text stream that turns ``BrokenPipeError`` into silence (see the module's text)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if self.reader_gone:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._silence()
            return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._silence()

    def _silence(self) -> None:
        self.reader_gone = True
        # What the stream still buffers is flushed at exit: into /dev/null, not the dead pipe.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def tolerating_closed_pipes() -> Iterator[None]:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in ``ClosedPipeTolerant`` while the block runs."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, ClosedPipeTolerant):
        sys.stdout = ClosedPipeTolerant(sys.stdout)
    if not isinstance(sys.stderr, ClosedPipeTolerant):
        sys.stderr = ClosedPipeTolerant(sys.stderr)
    try:
        yield
    finally:
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.flush()
        sys.stdout, sys.stderr = saved
