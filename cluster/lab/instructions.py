"""Instructions per delete flow of the node's request path, per copy of the code: an A/B that
shows a cut of 1%.

Layer: cluster (the lab). Each side is a tree of this project given as ``PYTHONPATH``
(``NAME=PYTHONPATH[|KEY=VALUE,...]``, as ``ab_nodes`` takes it). For each side in turn, a child
process (``instructions_child``) builds the node's production ASGI app and its uvicorn protocol on
an in-memory transport (``--asgi-only``: the ASGI app alone; ``--store-only``: no node, the store's
part of each flow, ``NoteStore.find`` then ``confirm``, and its Redis client), runs warm-up delete
flows, then the measured ones under ``valgrind --tool=callgrind`` with the instrumentation on only
around them. Printed per side: the user-space instructions per flow of that process (the node's
request path and the harness driving it, which is the same for every side; no kernel time, no
waiting, nothing of Redis), the flows run and failed, and the ratio to the first side. Counts do
not depend on the machine's load: two runs of one tree agree within about 0.1%, where
``ab_nodes``'s CPU over HTTP spreads ±15% per round on a shared machine.

The notes live in a Redis of the run's own, or ``--redis URL`` (refused when it holds keys the
bench did not write; only keys under ``BENCH_PREFIX`` are written and deleted there, never
FLUSHDB). Needs ``valgrind`` (exit 2 without it).

    python -m cluster.lab.instructions --flows 300 \\
        before=/work/wt/main after=/work/wt/mine
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import trio

from cluster.bench.context import _tokens, bench_store
from cluster.bench.database import BENCH_PREFIX, BenchRedis, ForeignKeys, clear
from cluster.bench.flows import SeededNote
from cluster.bench.seeding import seed_targets
from cluster.exit_codes import EXIT_NOT_CARRIED_OUT, EXIT_USAGE, exit_code_for_signal
from cluster.lab.ab_nodes import Side, parse_side
from cluster.redis_server import RedisServerError
from cluster.stopping import (
    Stopped,
    forwarding_stop_signals,
    received_signal,
    run_stoppable,
    signal_name,
)
from nodes.serving.lifeline import stop_with_parent
from store.client_factory import redis_client

DEFAULT_FLOWS = 300
"""Measured flows per side: about ten seconds under callgrind; more only averages the same
count (each flow costs the same instructions within a few hundred)."""

WARMUP_FLOWS = 200
"""Flows before the instrumentation goes on: imports, caches, the store's scripts loaded, the
connections open. Fewer leaves first-call work in the count (it moves it by tenths of a
per cent)."""

CHILD = Path(__file__).with_name("instructions_child.py")
"""Run as a file: the harness is this tree's whatever the side's tree holds."""

TAG = "instr"
"""The seeded titles' tag: the same for every side, so every side's requests have the same
lengths (the store is cleared between sides)."""

CHILD_START_S = 120.0
CHILD_S_PER_FLOW = 0.5
"""The child's time bound: start-up under valgrind, then each flow (about 25 ms under callgrind
on an idle core; the bound leaves room for a busy machine)."""

STORE_TIMEOUT_S = 60.0
"""Bound of clearing and seeding the store for one side (a few hundred notes: milliseconds)."""

TOOLS = ("valgrind", "callgrind_control")


class ToolError(Exception):
    """The run could not be carried out; the message says what and what to do."""


@dataclass(frozen=True)
class Count:
    """One side's measurement."""

    name: str
    flows: int
    failed: int
    instructions: int

    @property
    def per_flow(self) -> float:
        """Instructions per flow."""
        return self.instructions / self.flows


def missing_tools() -> list[str]:
    """Which of valgrind's programs this machine lacks."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def checked_side(side: Side) -> Side:
    """``side`` with its ``PYTHONPATH`` made absolute (the child runs elsewhere), or
    ``ValueError`` when none of its folders holds this project's ``cluster`` package."""
    paths = [os.path.abspath(p) for p in side.pythonpath.split(os.pathsep) if p]
    if not any((Path(p) / "nodes" / "serving" / "app.py").is_file() for p in paths):
        raise ValueError(f"{side.name}={side.pythonpath}: no nodes/serving/app.py there")
    path = os.pathsep.join(paths)
    return replace(side, pythonpath=path, env={**side.env, "PYTHONPATH": path})


async def seed(where: BenchRedis, count: int) -> list[SeededNote]:
    """Empty the bench's keys, then seed ``count`` notes (titles ``bench instr 0`` ...)."""
    with trio.fail_after(STORE_TIMEOUT_S):
        async with redis_client(where.url) as client:
            await clear(client, where)
            return await seed_targets(client, BENCH_PREFIX, count, TAG)


async def clear_all(where: BenchRedis) -> None:
    """Remove what the run stored (``database.clear``)."""
    with trio.fail_after(STORE_TIMEOUT_S):
        async with redis_client(where.url) as client:
            await clear(client, where)


def write_job(
    path: Path, where: BenchRedis, targets: list[SeededNote], flows: int, layer: str, metrics: bool
) -> None:
    """The child's job file (``instructions_child.Job``)."""
    tokens = _tokens()
    job = {
        "redis_url": where.url,
        "prefix": BENCH_PREFIX,
        "warmup": WARMUP_FLOWS,
        "flows": flows,
        "layer": layer,
        "metrics": metrics,
        "instrument": True,
        "targets": [
            [tokens[t.principal], t.workspace, t.title, t.note_id, t.tenant, t.principal]
            for t in targets
        ],
    }
    path.write_text(json.dumps(job), encoding="utf-8")


def total_instructions(out_file: Path) -> int:
    """The ``totals:`` line of a callgrind output file (only the instrumented part counts)."""
    for line in out_file.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise ToolError(f"{out_file}: no totals line; callgrind did not finish")


def child_errors(stderr: str) -> str:
    """The child's own last words (valgrind's ``==pid==`` lines left out)."""
    lines = [line for line in stderr.splitlines() if line and not line.startswith("==")]
    return "\n".join(lines[-15:]) or stderr[-2000:]


def measure(side: Side, where: BenchRedis, flows: int, layer: str, work: Path) -> Count:
    """One side: seed, run the child under callgrind, read its count."""
    targets = run_stoppable(partial(seed, where, WARMUP_FLOWS + flows))
    job, out = work / f"{side.name}.json", work / f"{side.name}.callgrind"
    write_job(job, where, targets, flows, layer, side.metrics)
    argv = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-P",  # not the child's folder on sys.path: its neighbours would shadow packages
        str(CHILD),
        str(job),
    ]
    # A fixed hash seed: set and dict layouts, hence instructions, the same in every run.
    env = {**os.environ, **side.env, "PYTHONHASHSEED": "0"}
    try:
        done = subprocess.run(  # noqa: S603 - fixed argv, no shell
            argv,
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=CHILD_START_S + CHILD_S_PER_FLOW * (WARMUP_FLOWS + flows),
            preexec_fn=stop_with_parent(),
        )
    except subprocess.TimeoutExpired as exc:
        raise ToolError(f"{side.name}: the child ran past {exc.timeout:.0f} s; killed") from None
    if done.returncode != 0:
        raise ToolError(
            f"{side.name}: the child exited {done.returncode}:\n{child_errors(done.stderr)}"
        )
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ToolError(f"{side.name}: no result line in {done.stdout[-500:]!r}") from None
    return Count(side.name, int(result["flows"]), int(result["failed"]), total_instructions(out))


def report(counts: list[Count]) -> list[str]:
    """Per side: instructions per flow, flows and failures, ratio to the first side."""
    base = counts[0]
    return [
        f"{c.name:12} {c.per_flow:12,.0f} instructions/flow  {c.flows} flows, {c.failed} "
        f"failed  ÷ {base.name}: {c.per_flow / base.per_flow:.4f}"
        for c in counts
    ]


def run(sides: list[Side], redis_url: str | None, flows: int, layer: str) -> list[Count]:
    """Every side in turn on the run's Redis; the store cleared after."""

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    counts = []
    with bench_store(redis_url, log) as where, tempfile.TemporaryDirectory() as tmp:
        try:
            for side in sides:
                log(f"{side.name}: {flows} flows under callgrind ({side.pythonpath})")
                counts.append(measure(side, where, flows, layer, Path(tmp)))
        finally:
            run_stoppable(partial(clear_all, where), on_stop=None)
    return counts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m cluster.lab.instructions",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument("sides", nargs="+", metavar="NAME=PYTHONPATH[|K=V,...]")
    parser.add_argument("--flows", type=int, default=DEFAULT_FLOWS, help="measured, per side")
    parser.add_argument("--redis", default=None, help="default: a redis-server of its own")
    layer = parser.add_mutually_exclusive_group()
    layer.add_argument(
        "--asgi-only",
        dest="layer",
        action="store_const",
        const="asgi",
        help="straight into the ASGI app, no uvicorn protocol",
    )
    layer.add_argument(
        "--store-only",
        dest="layer",
        action="store_const",
        const="store",
        help="no node: the store's find and confirm of each flow, and its Redis client",
    )
    parser.set_defaults(layer="protocol")
    a = parser.parse_args(argv)
    if a.flows < 1:
        parser.error("--flows must be at least 1")
    try:
        a.sides = [checked_side(parse_side(text)) for text in a.sides]
    except ValueError as exc:
        parser.error(str(exc))
    names = [s.name for s in a.sides]
    if len(set(names)) != len(names):
        parser.error(f"side names must differ: {' '.join(names)}")
    return a


def main(argv: list[str] | None = None) -> None:
    """Parse, check valgrind is there, measure every side, print the report."""
    a = parse_args(argv)
    missing = missing_tools()
    if missing:
        print(
            f"instructions: {' and '.join(missing)} not found; it counts the instructions "
            "(apt-get install valgrind)",
            file=sys.stderr,
        )
        sys.exit(EXIT_USAGE)
    try:
        with forwarding_stop_signals():
            counts = run(a.sides, a.redis, a.flows, a.layer)
    except (KeyboardInterrupt, Stopped):  # a signal while the child ran, or inside a trio run
        print(f"instructions: stopped by {signal_name(received_signal())}", file=sys.stderr)
        sys.exit(exit_code_for_signal(received_signal()))
    except (ForeignKeys, RedisServerError) as exc:  # what to give it instead
        print(f"instructions: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except Exception as exc:  # one line (or the child's last words), no traceback
        print(f"instructions: {exc}", file=sys.stderr)
        sys.exit(EXIT_NOT_CARRIED_OUT)
    for line in report(counts):
        print(line)


if __name__ == "__main__":
    main()
