"""Where two runs of one seed part ways: the first history entry that differs, named.

Layer: cluster. Compares two ``history.jsonl`` files line by line (as madsim reports the first
divergent step of a seed run twice) and names the step: the history index, the flow, the
client, the node the client sent to (an answer names its request's node) and the virtual time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from itertools import zip_longest
from pathlib import Path
from typing import Any

from cluster.deterministic.run import DeterministicRun, run_deterministic
from cluster.deterministic.world import EPOCH_S
from cluster.targets.simulate import SimulateOptions
from loadgen.history import Op
from loadgen.run.folder import RunFolder
from loadgen.transport import Transport


@dataclass(frozen=True)
class HistoryStep:
    """One history entry, as the divergence report names it."""

    index: int
    flow: int
    process: int
    node: int | None
    virtual_s: float
    type: str
    f: str

    def describe(self) -> str:
        node = "?" if self.node is None else str(self.node)
        return (
            f"entry {self.index}: flow {self.flow}, client {self.process}, node {node}, "
            f"virtual time {self.virtual_s:.3f} s, {self.type} {self.f}"
        )


@dataclass(frozen=True)
class Divergence:
    """The first entry where two histories differ (None on a side that ended before it)."""

    line: int
    first: HistoryStep | None
    second: HistoryStep | None

    def describe(self) -> str:
        a = "(ended)" if self.first is None else self.first.describe()
        b = "(ended)" if self.second is None else self.second.describe()
        return f"first divergent step at history line {self.line}: run 1 {a}; run 2 {b}"

    def to_json(self) -> dict[str, Any]:
        def side(s: HistoryStep | None) -> dict[str, Any] | None:
            return None if s is None else s.__dict__

        return {"line": self.line, "run1": side(self.first), "run2": side(self.second)}


def _step(line: str, nodes: dict[int, int]) -> HistoryStep:
    """``line`` as a step. ``nodes`` learns each invoke's node by its index: an answer names
    the invoke it completes (``completes``) and is on that node; an answer of an older history
    without the field is taken to be on its client's last node."""
    d = json.loads(line)
    value = d.get("value") or {}
    node = value.get("node")
    process = -1 - int(d["process"])  # a client's last node, beside the invokes' indices
    if d["type"] == "invoke" and isinstance(node, int):
        nodes[int(d["index"])] = nodes[process] = node
    elif not isinstance(node, int):
        completes = d.get("completes")
        node = nodes.get(completes) if isinstance(completes, int) else nodes.get(process)
    return HistoryStep(
        index=int(d["index"]),
        flow=int(d["flow"]),
        process=int(d["process"]),
        node=node,
        virtual_s=round(int(d["time_ms"]) / 1000 - EPOCH_S, 3),
        type=str(d["type"]),
        f=str(d["f"]),
    )


def first_divergence(first: Iterable[str], second: Iterable[str]) -> Divergence | None:
    """The first line where two histories (their JSONL lines) differ; None when identical."""
    nodes_a: dict[int, int] = {}
    nodes_b: dict[int, int] = {}
    for number, (a, b) in enumerate(zip_longest(first, second), start=1):
        if a == b:
            _step(a, nodes_a)  # keep each client's last node on both sides
            _step(b, nodes_b)
            continue
        return Divergence(
            number,
            None if a is None else _step(a, nodes_a),
            None if b is None else _step(b, nodes_b),
        )
    return None


def file_lines(path: Path) -> Iterator[str]:
    """A history file's lines, without their line ends."""
    with path.open(encoding="utf-8") as f:
        for line in f:
            yield line.rstrip("\n")


def op_lines(ops: Iterable[Op]) -> Iterator[str]:
    """The lines a history file of ``ops`` holds, without their line ends."""
    return (op.to_json() for op in ops)


"""In a ``--check-determinism`` run folder: both runs' digests and the first divergent step."""


@dataclass
class DeterminismCheck:
    """A seed run twice: the first run (with its folder) and the second (in memory)."""

    first: DeterministicRun
    second: DeterministicRun
    divergence: Divergence | None

    def to_json(self) -> dict[str, Any]:
        return {
            "deterministic": self.divergence is None,
            "history_sha256": [self.first.history_sha256, self.second.history_sha256],
            "divergence": None if self.divergence is None else self.divergence.to_json(),
        }


def check_determinism(
    options: SimulateOptions,
    *,
    buggify: bool = False,
    skew: bool = True,
    transport_hook: Callable[[Transport], Transport] | None = None,
) -> DeterminismCheck:
    """Run ``options`` twice (the first into its run folder, if any; the second in memory) and
    compare the histories (``buggify``, ``skew``, ``transport_hook``: ``run_deterministic``'s)."""
    again = partial(run_deterministic, buggify=buggify, skew=skew, transport_hook=transport_hook)
    first = again(options)
    second = again(replace(options, run_dir=None))
    if options.run_dir is not None:
        lines: Iterable[str] = file_lines(RunFolder(options.run_dir).history_file)
    else:
        lines = op_lines(first.history.ops)
    found = first_divergence(lines, op_lines(second.history.ops))
    outcome = DeterminismCheck(first, second, found)
    if options.run_dir is not None:
        RunFolder(options.run_dir).determinism_file.write_text(
            json.dumps(outcome.to_json(), indent=2) + "\n", encoding="utf-8"
        )
    return outcome
