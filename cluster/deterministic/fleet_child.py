"""A kept child process for seed jobs whose own process cannot run them deterministically.

Layer: cluster. A Dask worker's nanny starts its worker process with ``PYTHONHASHSEED=6640``
(whatever the user set, when that is 0: dask/distributed#8400), and ``str`` hashing must be
unrandomized (``PYTHONHASHSEED=0``) for a seed to give the bytes a local run gives. So a job
that finds itself in such a process hands itself to a child (``python -m
cluster.deterministic.fleet_child``, started once per worker process with the hash seed set,
kept for every later job: imports are paid once) over its stdin and stdout: length-prefixed
pickles of ``(function name, job)`` in, of the outcome (or the exception) out. A plain
``subprocess``: a Dask worker is a daemonic process, which ``multiprocessing`` would refuse.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
from typing import IO, Any

from cluster.deterministic.command import HASH_SEED

_LOCK = threading.Lock()
_child: subprocess.Popen[bytes] | None = None
_HEADER = struct.Struct("<Q")


def fit_for_a_run() -> bool:
    """Whether this process hashes ``str`` as a deterministic run needs (unrandomized)."""
    return sys.flags.hash_randomization == 0


def _read(stream: IO[bytes], n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EOFError("the seed runner's pipe closed")
        data += chunk
    return data


def _send(stream: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    (size,) = _HEADER.unpack(_read(stream, _HEADER.size))
    return pickle.loads(_read(stream, size))  # noqa: S301 - our own child's replies


def in_child(name: str, job: Any) -> Any:
    """``fleet.<name>(job)`` run in the kept child (started on first use)."""
    global _child
    with _LOCK:
        if _child is None or _child.poll() is not None:
            path = os.pathsep.join(p for p in sys.path if p)
            env = dict(os.environ, PYTHONHASHSEED=HASH_SEED, PYTHONPATH=path)
            _child = subprocess.Popen(
                [sys.executable, "-m", "cluster.deterministic.fleet_child"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
        assert _child.stdin is not None
        assert _child.stdout is not None
        _send(_child.stdin, (name, job))
        result = _receive(_child.stdout)
    if isinstance(result, BaseException):
        raise result
    return result


def main() -> None:
    """The child's loop: jobs in on stdin, outcomes out on stdout (prints go to stderr)."""
    from cluster.deterministic import fleet

    jobs, results = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    while True:
        try:
            name, job = _receive(jobs)
        except EOFError:
            return
        try:
            result: Any = getattr(fleet, name)(job)
        except Exception as exc:  # handed back to the job's caller
            result = exc
        _send(results, result)


if __name__ == "__main__":
    main()
