"""No import cycle inside our packages: cluster, loadgen, nodes, store and their subpackages.

Layer: tests. The graph is the one ``tests/test_import_direction.py`` walks: every import
statement counts, also those inside functions and under ``if TYPE_CHECKING`` (a cycle that only
type checking closes still ties the modules into one layer), and ``importlib.import_module`` /
``__import__`` with a literal name. ``from a import b`` counts as an import of the module ``a.b``
when there is one, else of ``a``. The cycles are found by the standard library
(``graphlib.TopologicalSorter`` names one per ``CycleError``; its closing edge is set aside and
the search runs again until none is left, so every tangle is named, each cycle with the file and
line of its imports; a second cycle through an edge set aside shows once the first is broken).

Two throwaway packages show the detector works: one with a planted cycle (closed by an import
inside a function, through one under ``TYPE_CHECKING``) that it must name, and the same package
without the back edge, in which it must find none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from tests.test_import_direction import ROOT, imported_modules

PACKAGES = ("cluster", "loadgen", "nodes", "store")
"""Our packages; a cycle between two of them is the direction test's business."""

KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset({})
"""Cycles other branches remove; the lead empties this at their merge. Each must
still be found here: an entry whose cycle is gone fails, so the list cannot outlive it."""

Graph = dict[str, dict[str, tuple[str, int]]]
"""module -> imported module -> (file, line) of the first import statement of it."""


@dataclass(frozen=True)
class Cycle:
    """Modules that import each other round, in import order (each imports the next, the last
    the first), with where each import stands."""

    modules: tuple[str, ...]
    where: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        hops = [
            f"{m} ({path}:{line})" for m, (path, line) in zip(self.modules, self.where, strict=True)
        ]
        return " -> ".join([*hops, self.modules[0]])


def module_name(root: Path, file: Path) -> str:
    """``a/b/c.py`` -> ``a.b.c``; ``a/b/__init__.py`` -> ``a.b``."""
    parts = file.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolved(target: str, modules: Mapping[str, Path]) -> str | None:
    """The module of ours an imported name belongs to: the name itself, or its longest prefix
    that is a module (``from a.b import Name`` imports ``a.b``). None: not ours."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in modules:
            return name
    return None


def import_graph(root: Path, packages: Sequence[str]) -> Graph:
    """Every import between the modules of ``packages`` under ``root``."""
    modules = {module_name(root, f): f for p in packages for f in sorted((root / p).rglob("*.py"))}
    graph: Graph = {}
    for name, file in modules.items():
        package = name if file.name == "__init__.py" else name.rpartition(".")[0]
        rel = str(file.relative_to(root))
        edges = graph.setdefault(name, {})
        for line, target in imported_modules(file.read_text(encoding="utf-8"), package):
            found = _resolved(target, modules)
            if found is not None and found != name:
                edges.setdefault(found, (rel, line))
    return graph


def find_cycles(graph: Graph) -> list[Cycle]:
    """The cycles of ``graph`` until none is left (a cycle found is broken at its closing edge
    and the graph searched again)."""
    left = {m: dict(edges) for m, edges in graph.items()}
    found: list[Cycle] = []
    while True:
        try:
            TopologicalSorter(left).prepare()  # edges read as "needs": the cycle comes reversed
            return found
        except CycleError as exc:
            ring = list(reversed(exc.args[1][:-1]))  # each imports the next
        where = tuple(left[a][b] for a, b in zip(ring, [*ring[1:], ring[0]], strict=True))
        found.append(Cycle(tuple(ring), where))
        del left[ring[-1]][ring[0]]


def unknown_cycles(found: Iterable[Cycle], known: frozenset[frozenset[str]]) -> list[Cycle]:
    return [c for c in found if frozenset(c.modules) not in known]


def status(found: Sequence[Cycle]) -> str:
    """``valid`` when there is no cycle, else ``invalid``."""
    return "invalid" if found else "valid"


def test_no_package_of_ours_has_an_import_cycle_but_the_known_ones() -> None:
    found = find_cycles(import_graph(ROOT, PACKAGES))
    unknown = unknown_cycles(found, KNOWN_CYCLES)
    assert status(unknown) == "valid", "import cycles:\n" + "\n".join(map(str, unknown))
    stale = KNOWN_CYCLES - {frozenset(c.modules) for c in found}
    assert not stale, f"known cycles that are gone (drop them from KNOWN_CYCLES): {stale}"


def test_the_checker_package_has_no_cycle_and_its_types_sit_at_the_bottom() -> None:
    graph = import_graph(ROOT, ("loadgen",))
    assert not [c for c in find_cycles(graph) if any("loadgen.check" in m for m in c.modules)]
    ours = {t for t in graph["loadgen.check.verdict"] if t.startswith("loadgen")}
    assert ours == set(), ours
    assert {t for t in graph["loadgen.check.context"] if t.startswith("loadgen")} == {
        "loadgen.history",
        "loadgen.check.pairing",
    }
    # pairing (which answer completes which send) sits below context and imports nothing of ours
    assert {t for t in graph["loadgen.check.pairing"] if t.startswith("loadgen")} == set()


PLANTED = {
    "a.py": "from planted.b import helper\n",
    "b.py": (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from planted.sub.c import Thing\n"
        "def helper() -> None: ...\n"
    ),
    "sub/__init__.py": "",
    "sub/c.py": "class Thing:\n    def later(self) -> None:\n        from .. import a\n",
    "__init__.py": "",
    "d.py": "import json\nimport planted.a\n",
}
"""a -> b -> sub.c -> a: the last edge inside a function (a relative import), the middle one
under TYPE_CHECKING; d hangs off the cycle and is not part of it."""


def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / "planted" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.mark.planted(control="test_the_same_package_without_the_back_edge_has_no_cycle")
def test_a_planted_cycle_is_named_with_the_lines_that_close_it(tmp_path: Path) -> None:
    _write(tmp_path, PLANTED)
    found = find_cycles(import_graph(tmp_path, ("planted",)))
    assert status(found) == "invalid"
    assert len(found) == 1
    (cycle,) = found
    start = cycle.modules.index("planted.a")
    ring = cycle.modules[start:] + cycle.modules[:start]
    where = cycle.where[start:] + cycle.where[:start]
    assert ring == ("planted.a", "planted.b", "planted.sub.c")
    assert where == (("planted/a.py", 1), ("planted/b.py", 4), ("planted/sub/c.py", 3))
    assert str(cycle).count(" -> ") == 3
    # The allow-list hides exactly the cycle it names, not one that merely shares a module.
    assert unknown_cycles(found, frozenset({frozenset(cycle.modules)})) == []
    assert unknown_cycles(found, frozenset({frozenset({"planted.a", "planted.b"})})) == found


def test_the_same_package_without_the_back_edge_has_no_cycle(tmp_path: Path) -> None:
    _write(tmp_path, {**PLANTED, "sub/c.py": "class Thing:\n    pass\n"})
    graph = import_graph(tmp_path, ("planted",))
    assert graph["planted.a"] == {"planted.b": ("planted/a.py", 1)}  # the rest of it is there
    assert "planted.sub.c" in graph["planted.b"]
    assert status(find_cycles(graph)) == "valid"


def test_two_cycles_through_one_module_are_both_named(tmp_path: Path) -> None:
    files = {
        "__init__.py": "",
        "hub.py": "import planted.x\nimport planted.y\n",
        "x.py": "import planted.hub\n",
        "y.py": "from planted import hub\n",
    }
    _write(tmp_path, files)
    found = find_cycles(import_graph(tmp_path, ("planted",)))
    assert sorted(sorted(c.modules) for c in found) == [
        ["planted.hub", "planted.x"],
        ["planted.hub", "planted.y"],
    ]
