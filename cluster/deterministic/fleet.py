"""Seeds run as jobs on a ``concurrent.futures.Executor``: a local process pool, or Dask.

Layer: cluster. A job is a plain function of picklable values (``SeedJob`` -> ``SeedOutcome``,
``ShrinkJob`` -> ``ShrinkOutcome``), so any executor runs it: ``local_executor`` (a pool of
spawned processes that it keeps, so imports are paid once per process, not per seed) or
``dask_executor`` (``distributed.Client(address).get_executor()``: every worker of a Dask
cluster the user runs). A passing seed runs in memory and leaves nothing behind; a failing one
runs again into a folder (the same bytes: it is deterministic), which comes back packed
(``SeedOutcome.folder``) with its ``results.json``; a shrink comes back the same way.

What a job needs of its process: unrandomized ``str`` hashing (``PYTHONHASHSEED=0``), or a
seed's bytes would differ from a local run's; a job in a process without it (a Dask worker,
whose nanny sets its own hash seed) runs in a kept child process that has it
(``fleet_child``). And the whole process for the length of a run (the deterministic world
patches process-wide clocks and trio's scheduler), so a job holds ``_ONE_RUN_AT_A_TIME``: a
Dask worker with several threads runs its seeds one after another.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from importlib import import_module
from pathlib import Path
from typing import IO, Any

from cluster.deterministic import HASH_SEED
from cluster.targets.simulate import SimulateOptions
from loadgen.run.folder import HISTORY_FILE, SHRUNK_DIR

_ONE_RUN_AT_A_TIME = threading.Lock()


class FleetError(RuntimeError):
    """A job cannot run where it was sent (its process is not fit for a deterministic run)."""


@dataclass(frozen=True)
class SeedJob:
    """One seed to run: the options (its seed in them), fault points, swarm shape."""

    options: SimulateOptions
    buggify: bool
    swarmed: bool
    planted: str | None = None
    """Test-only: ``module:name`` of a store wrapper planted under the nodes
    (``cluster.deterministic.run.planted_store``), imported in the job's process."""


@dataclass(frozen=True)
class SeedOutcome:
    """What a seed's job reports back."""

    seed: int
    verdict: str
    invalid: tuple[str, ...]
    history_sha256: str
    flows: int
    cpu_s: float
    wall_s: float
    results: dict[str, Any]
    """The seed's ``Results`` (``results.json``'s content)."""
    folder: bytes | None = None
    """A failing seed's run folder, packed (``unpack``); None for any other."""
    where: str = ""
    """The host and process that ran it."""


@dataclass(frozen=True)
class ShrinkJob:
    """A failing seed's folder (packed) to shrink within a budget."""

    seed: int
    folder: bytes
    invariant: str
    budget_s: float
    budget_runs: int
    planted: str | None = None


@dataclass(frozen=True)
class ShrinkOutcome:
    """A shrink's result: the minimal case's folder (packed) and its shape."""

    seed: int
    invariant: str
    reproduced: bool
    flows: int
    kinds: tuple[str, ...]
    faults: tuple[str, ...]
    nodes: int
    summary: str
    folder: bytes


def pack(folder: Path) -> bytes:
    """``folder``'s files as a gzipped tar (names relative to it)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def unpack(data: bytes, folder: Path) -> Path:
    """Write a ``pack``ed folder into ``folder``; ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(folder, filter="data")
    return folder


def _fit_for_a_run() -> None:
    if sys.flags.hash_randomization:
        raise FleetError(
            f"a deterministic run needs PYTHONHASHSEED={HASH_SEED} in its process (here "
            f"{os.environ.get('PYTHONHASHSEED')!r})"
        )


@contextmanager
def _planted(name: str | None) -> Iterator[None]:
    if name is None:
        with nullcontext():
            yield
        return
    from cluster.deterministic.run import planted_store

    module, _, attr = name.partition(":")
    with planted_store(getattr(import_module(module), attr)):
        yield


def _where() -> str:
    return f"{os.uname().nodename}:{os.getpid()}"


def _where_job(_: object) -> str:
    """The process a job runs in (a test's job for the kept child)."""
    return _where()


def run_seed(job: SeedJob) -> SeedOutcome:
    """Run one seed in memory; a failing one again into a folder that comes back packed."""
    if not fit_for_a_run():
        outcome: SeedOutcome = in_child("run_seed", job)
        return outcome
    from cluster.deterministic.run import run_deterministic
    from cluster.deterministic.swarm import swarm

    _fit_for_a_run()
    options = swarm(job.options) if job.swarmed else job.options
    options = replace(options, run_dir=None)
    with _ONE_RUN_AT_A_TIME, _planted(job.planted):
        wall, cpu = time.perf_counter(), time.process_time()
        sim = run_deterministic(options, buggify=job.buggify)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        invalid = tuple(sorted(v.name for v in sim.result.verdicts if v.status == "invalid"))
        folder = None
        if sim.result.status == "invalid":
            with tempfile.TemporaryDirectory(prefix="notes-seed-") as tmp:
                run_dir = Path(tmp) / "run"
                again = run_deterministic(replace(options, run_dir=run_dir), buggify=job.buggify)
                _say_same(sim.history_sha256, again.history_sha256)
                folder = pack(run_dir)
    return SeedOutcome(
        options.settings.seed,
        sim.result.status,
        invalid,
        sim.history_sha256,
        sim.stats.tally.completed,
        round(cpu, 3),
        round(wall, 3),
        sim.results.to_json(),
        folder,
        _where(),
    )


def _say_same(first: str, second: str) -> None:
    if first != second:
        raise FleetError(
            f"a seed's run into its folder differs from its run in memory: {first} vs {second}"
        )


def shrink_seed(job: ShrinkJob) -> ShrinkOutcome:
    """Shrink a failing seed's folder (``cluster.deterministic.shrink``)."""
    import json

    if not fit_for_a_run():
        outcome: ShrinkOutcome = in_child("shrink_seed", job)
        return outcome

    from cluster.deterministic.shrink import read_failing, shrink_folder
    from loadgen.run.folder import mark_complete
    from loadgen.shrinking import Budget

    _fit_for_a_run()
    with (
        _ONE_RUN_AT_A_TIME,
        _planted(job.planted),
        tempfile.TemporaryDirectory(prefix="notes-shrink-") as tmp,
    ):
        run_dir = unpack(job.folder, Path(tmp) / "run")
        out = Path(tmp) / SHRUNK_DIR
        out.mkdir()
        failing = read_failing(run_dir, job.invariant)
        done = shrink_folder(failing, out, Budget(job.budget_s, job.budget_runs))
        mark_complete(out)
        rows = [json.loads(line) for line in (out / HISTORY_FILE).open(encoding="utf-8")]
        minimal = done.found.minimal
        kinds = sorted(failing.options.faults)
        return ShrinkOutcome(
            job.seed,
            job.invariant,
            done.reproduced,
            len({r["flow"] for r in rows}),
            tuple(sorted({str(r.get("kind", "")) for r in rows})),
            tuple(kinds[i] for i in minimal.faults),
            minimal.nodes,
            done.found.summary(),
            pack(out),
        )


# -- the kept child process (``fleet_child``) --------------------------------------------------

_CHILD_LOCK = threading.Lock()
_child: subprocess.Popen[bytes] | None = None
_child_jobs = 0

JOBS_PER_PROCESS = 40
"""Seeds one worker process runs before it is replaced by a fresh one (the local pool's
``max_tasks_per_child``, and the kept child of a Dask worker). A process's memory grows with
every seed it runs (about 18 MB per 1000-flow seed, measured in a 1000-seed swarm: 1.7 GB per
worker after 87 seeds), so a long swarm would otherwise exhaust the machine; a fresh process
costs its imports, about 2 CPU seconds per 40,000 flows."""
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


def send(stream: IO[bytes], value: Any) -> None:
    """One length-prefixed pickle down ``stream``."""
    data = pickle.dumps(value)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def receive(stream: IO[bytes]) -> Any:
    """The next length-prefixed pickle from ``stream`` (EOFError when it closed)."""
    (size,) = _HEADER.unpack(_read(stream, _HEADER.size))
    return pickle.loads(_read(stream, size))  # noqa: S301 - our own process's pipe


def in_child(name: str, job: Any) -> Any:
    """``<name>(job)`` of this module run in the kept child (``fleet_child``, started on first
    use with the hash seed set)."""
    global _child, _child_jobs
    with _CHILD_LOCK:
        if _child is not None and _child_jobs >= JOBS_PER_PROCESS:
            _stop_child(_child)
            _child = None
        if _child is None or _child.poll() is not None:
            _child_jobs = 0
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
        send(_child.stdin, (name, job))
        result = receive(_child.stdout)
        _child_jobs += 1
    if isinstance(result, BaseException):
        raise result
    return result


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    """End a kept child: close its input (it exits at end of input), then wait for it."""
    assert child.stdin is not None
    child.stdin.close()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    if child.stdout is not None:
        child.stdout.close()


def local_executor(workers: int) -> Executor:
    """A pool of ``workers`` spawned processes (the parent's environment: its hash seed),
    each kept for ``JOBS_PER_PROCESS`` jobs, then replaced."""
    import multiprocessing

    return ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        max_tasks_per_child=JOBS_PER_PROCESS,
    )


def dask_executor(address: str) -> tuple[Executor, Callable[[], None]]:
    """An executor on the Dask scheduler at ``address`` and the call that closes its client.
    ImportError names the extra when Dask is not installed."""
    try:
        from distributed import Client
    except ImportError:
        raise ImportError("--dask needs Dask: pip install 'notes-cluster[swarm]'") from None
    client = Client(address)  # type: ignore[no-untyped-call]
    executor: Executor = client.get_executor(pure=False)  # type: ignore[no-untyped-call]
    return executor, client.close
