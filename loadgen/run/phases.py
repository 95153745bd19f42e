"""What a run is doing once its flows are done: the phase the command line shows.

Layer: loadgen. The pipeline announces each phase after the flows (the wait for the last states
to expire, reading the store, the check), which take seconds to minutes with nothing else to
show; ``cluster.commands.base.with_progress`` listens and puts the phase on its status line.
One listener per process (the command line's), none by default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Listener = Callable[[str], None]

_listener: list[Listener] = []


def announce(phase: str) -> None:
    """Tell the listener, if any, that the run entered ``phase`` (a few words)."""
    for listener in _listener:
        listener(phase)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """``listener`` hears every ``announce`` made while the block runs."""
    _listener.append(listener)
    try:
        yield
    finally:
        _listener.remove(listener)
