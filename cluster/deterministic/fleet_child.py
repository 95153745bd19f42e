"""The kept child process of ``cluster.deterministic.fleet``: seed jobs whose own process cannot
run them deterministically.

Layer: cluster. A Dask worker's nanny starts its worker process with ``PYTHONHASHSEED=6640``
(whatever the user set, when that is 0: dask/distributed#8400), and ``str`` hashing must be
unrandomized (``PYTHONHASHSEED=0``) for a seed to give the bytes a local run gives. So a job
that finds itself in such a process hands itself (``fleet.in_child``) to this module, run as
``python -m cluster.deterministic.fleet_child`` once per worker process with the hash seed set
and kept for every later job (imports are paid once), over its stdin and stdout:
length-prefixed pickles of ``(function name, job)`` in, of the outcome (or the exception) out.
A plain ``subprocess``: a Dask worker is a daemonic process, which ``multiprocessing`` refuses.
"""

from __future__ import annotations

import sys
from typing import Any

from cluster.deterministic import fleet


def main() -> None:
    """The child's loop: jobs in on stdin, outcomes out on stdout (prints go to stderr)."""
    jobs, results = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    while True:
        try:
            name, job = fleet.receive(jobs)
        except EOFError:
            return
        try:
            result: Any = getattr(fleet, name)(job)
        except Exception as exc:  # handed back to the job's caller
            result = exc
        fleet.send(results, result)


if __name__ == "__main__":
    main()
