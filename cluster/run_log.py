"""Where a run's node log goes: a file in the run folder, not the console.

Layer: cluster. Under faults every node logs a warning per "store unavailable"; thousands of
them on the console would bury the summary. ``simulate``, ``failover-experiment`` and each
``--workers`` load process send the ``nodes`` logger to ``nodes.log`` in their folder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def nodes_log_to(path: Path | None) -> Iterator[None]:
    """While the context lasts, send the nodes' log to ``path`` instead of the console;
    None: change nothing."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    nodes_log = logging.getLogger("nodes")
    nodes_log.addHandler(handler)
    propagate, nodes_log.propagate = nodes_log.propagate, False
    try:
        yield
    finally:
        nodes_log.propagate = propagate
        nodes_log.removeHandler(handler)
        handler.close()
