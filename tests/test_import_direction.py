"""Imports run one way (design.md §2): cluster -> loadgen, nodes, store; loadgen -> store and
nodes.sealing only; nodes -> store only; store -> nothing of ours. Inside them, the lab and the
simulation seams stand apart from what a user runs.

The layers, and what each may import (an arrow: "may import"; each may import itself)::

    cluster.lab            the lab: what the project ran on itself to choose its parts
        |                  (only the lab's commands in cluster.cli reach it, lazily)
        v
    cluster                commands, bench, targets, deterministic, running clusters (the
        |                  bench, cluster.bench, names nothing of the lab, not even as a
        |                  ``python -m`` module it starts)
        |        \
        v         v
    loadgen -----> nodes.sealing       the harness: workload, run pipeline, checker
        |         |
        |         v
        |       nodes (nodes.serving)  a node and its production edge (ASGI app, HTTP
        |         |                    server, node process, operator endpoints)
        v         v
    store                              the store, its client and the seams' production sides
                                       (store.randomness, store.fault_points)
    store.simulation                   the seams' simulation sides (seeded entropy, buggify,
                                       the in-memory transport): only cluster, loadgen and
                                       store.simulation import it, never nodes or the rest
                                       of store

Layer: tests. Every import statement counts, also those inside functions and under
``if TYPE_CHECKING``, and ``importlib.import_module`` / ``__import__`` with a literal name. A
second test starts ``notes-cluster serve --processes`` for real and checks, from
``-X importtime``, that neither the serving process nor its node process imported a module of
the load generator, the simulation seams or the lab; a third imports every module a user's
command can reach (all but the lab and its commands) in a fresh interpreter and finds no module
of the lab loaded.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio

from loadgen import tenants
from loadgen.clients import request
from loadgen.transport import ACCEPT, HttpTransport
from nodes.serving import load_fixture
from nodes.serving.demo import ALICE_NOTES, DEMO_TOKENS

ROOT = Path(__file__).resolve().parent.parent
OURS = ("cluster", "loadgen", "nodes", "store", "tests")
"""Top-level packages of this project: an import of anything else is a library's."""

ALLOWED: dict[str, tuple[str, ...]] = {
    "cluster": ("cluster", "loadgen", "nodes", "store"),
    "loadgen": ("loadgen", "store", "nodes.sealing"),
    "nodes": ("nodes", "store"),
    "store": ("store",),
}
"""Package -> the modules of ours it may import (each with everything below it)."""

FORBIDDEN_IN_NODE_PROCESS = ("loadgen", "cluster.lab", "store.simulation")
"""What a node (and ``serve``) must never load."""

APART: dict[str, tuple[str, ...]] = {
    "cluster.lab": ("cluster.lab", "cluster.cli", "cluster.commands.lab"),
    "store.simulation": ("store.simulation", "store.client_factory", "cluster", "loadgen"),
}
"""A package kept apart -> the only modules that may import it. The lab's commands import it
lazily; the store's client factory opens ``memory://`` URLs through the in-memory transport, in
a function only a simulation's URL reaches."""

EXTRA_LIBRARIES = ("matplotlib", "rich", "hdrh", "httpx", "mcp", "mcp_types")
"""Libraries of the ``sim`` and ``bench`` extras that neither ``serve`` nor a node may load."""


@dataclass(frozen=True)
class Violation:
    """One import statement against the direction."""

    path: str
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: imports {self.target}"


def _covered(target: str, allowed: tuple[str, ...]) -> bool:
    return any(target == a or target.startswith(a + ".") for a in allowed)


def _resolve(node: ast.ImportFrom, package: str) -> str:
    """The absolute module an ``ImportFrom`` names, relative imports resolved against
    ``package`` (the package that holds the file)."""
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imported_modules(source: str, package: str) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every import in ``source``, wherever it stands. ``from a import b``
    yields ``a.b`` (b may be a submodule); a call of ``importlib.import_module`` or
    ``__import__`` with a literal name yields that name."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, package)
            for alias in node.names:
                yield node.lineno, base if alias.name == "*" else f"{base}.{alias.name}"
        elif isinstance(node, ast.Call) and _dynamic_import(node):
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


def _dynamic_import(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in ("import_module", "__import__") and bool(call.args)


def violations(source: str, path: str, package: str, module: str | None = None) -> list[Violation]:
    """The imports in ``source`` (file ``path`` of package ``package``, module ``module``)
    against the direction, and against the packages kept apart (``APART``)."""
    allowed = ALLOWED[package.split(".")[0]]
    importer = module or package
    out = []
    for line, target in imported_modules(source, package):
        if target.split(".")[0] in OURS and not _covered(target, allowed):
            out.append(Violation(path, line, target))
            continue
        for apart, may in APART.items():
            if _covered(target, (apart,)) and not _covered(importer, may):
                out.append(Violation(path, line, target))
    return sorted(out, key=lambda v: v.line)


def project_violations() -> list[Violation]:
    """Every violation in cluster/, loadgen/, nodes/ and store/."""
    out: list[Violation] = []
    for package in ALLOWED:
        for file in sorted((ROOT / package).rglob("*.py")):
            rel = file.relative_to(ROOT)
            source = file.read_text(encoding="utf-8")
            module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
            out += violations(source, str(rel), ".".join(rel.parent.parts), module)
    return out


def test_every_import_in_the_project_runs_the_way_design_section_2_draws() -> None:
    found = project_violations()
    assert not found, "imports against the direction:\n" + "\n".join(map(str, found))


SYNTHETIC = """\
from __future__ import annotations
import json
from typing import TYPE_CHECKING
from store.notes import NoteStore
from nodes.sealing import KeyRing
from nodes import sealing
if TYPE_CHECKING:
    from nodes.protocol import Reply
def late():
    import cluster.local
    from nodes import scope
    from . import history
    from .. import nodes
    importlib.import_module("cluster.targets.simulate")
"""


def test_the_walker_reports_each_planted_violation_with_its_line() -> None:
    found = violations(SYNTHETIC, "loadgen/sub/planted.py", "loadgen.sub")
    assert [(v.line, v.target) for v in found] == [
        (8, "nodes.protocol.Reply"),
        (10, "cluster.local"),
        (11, "nodes.scope"),
        (14, "cluster.targets.simulate"),
    ]
    resolved = dict(imported_modules(SYNTHETIC, "loadgen.sub"))
    assert (resolved[12], resolved[13]) == ("loadgen.sub.history", "loadgen.nodes")
    assert str(found[0]) == "loadgen/sub/planted.py:8: imports nodes.protocol.Reply"


def test_the_walker_holds_the_node_and_the_store_to_their_own_rules() -> None:
    node = "from store.api import Note\nfrom nodes.errors import x\nimport loadgen.history\n"
    assert [v.target for v in violations(node, "nodes/x.py", "nodes")] == ["loadgen.history"]
    store = "import redis\nfrom nodes.sealing import KeyRing\nfrom store import keys\n"
    assert [v.target for v in violations(store, "store/x.py", "store")] == ["nodes.sealing.KeyRing"]
    top = "from loadgen.runner import run_load\nfrom tests.harness import rpc\n"
    assert [v.target for v in violations(top, "cluster/x.py", "cluster")] == ["tests.harness.rpc"]


def lab_names(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every string constant in ``source`` naming a module of the lab: a
    ``python -m`` module a scenario starts is the lab too, though nothing imports it."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _covered(node.value.split()[0] if node.value.split() else "", ("cluster.lab",))
    ]


def test_the_bench_names_nothing_of_the_lab_not_even_a_process_it_starts() -> None:
    planted = 'import os\nSERVER = ["cluster.lab.fixed_replies"]\nOTHER = "cluster.labels"\n'
    assert lab_names(planted) == [(2, "cluster.lab.fixed_replies")]
    found = [
        f"{file.relative_to(ROOT)}:{line}: {text}"
        for file in sorted((ROOT / "cluster" / "bench").rglob("*.py"))
        for line, text in lab_names(file.read_text(encoding="utf-8"))
    ]
    assert not found, found


USER_REACHABLE = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(sorted(m for m in sys.modules if m == "cluster.lab" or m.startswith("cluster.lab.")))
print(sum(1 for m in sys.modules if m.startswith("cluster.bench.")))
"""


def user_reachable_modules() -> list[str]:
    """Every module of the four packages but the lab's and the lab's commands, by their files
    (``pkgutil.walk_packages`` would import the lab's packages to walk into them)."""
    out = []
    for package in ALLOWED:
        for file in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(file.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            if not _covered(name, ("cluster.lab", "cluster.commands.lab")):
                out.append(name)
    return out


@pytest.mark.slow
def test_nothing_a_user_runs_loads_the_lab_the_bench_included() -> None:
    """Every module of the four packages but the lab and the lab's commands, imported in a fresh
    interpreter (the bench's scenarios and the processes it starts among them): no module of
    the lab comes with them. The static walk above forbids the imports; this catches one made
    through a path it does not read."""
    modules = user_reachable_modules()
    assert "cluster.bench.run" in modules
    assert "cluster.commands.bench" in modules
    assert not any(m.startswith("cluster.lab") for m in modules)
    done = subprocess.run(
        [sys.executable, "-c", USER_REACHABLE, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lab, bench_modules = done.stdout.strip().splitlines()[-2:]
    assert lab == "[]", lab
    assert int(bench_modules) >= 10  # the bench itself was imported, every module of it


def test_the_walker_keeps_the_lab_and_the_simulation_seams_apart() -> None:
    lab = "from cluster.lab.servers import run_bench_servers\n"
    assert [v.target for v in violations(lab, "cluster/bench/run.py", "cluster.bench")] == [
        "cluster.lab.servers.run_bench_servers"
    ]
    assert not violations(lab, "cluster/cli.py", "cluster", "cluster.cli")
    seam = "from store.simulation.entropy import entropy_source\n"
    assert [v.line for v in violations(seam, "nodes/sealing.py", "nodes")] == [1]
    assert [v.line for v in violations(seam, "store/notes.py", "store", "store.notes")] == [1]
    assert not violations(seam, "loadgen/x.py", "loadgen", "loadgen.x")


def test_the_load_fixture_configures_exactly_the_names_the_load_addresses() -> None:
    # nodes.serving.load_fixture spells the names itself, so that serve imports no loadgen module.
    n = 3
    small = {q: tenants.quota_root(q) for q in tenants.SMALL_QUOTAS}
    assert load_fixture.load_workspaces(n) == {
        ws: tenants.tenant(t) for t in range(n) for ws in (tenants.inbox(t), tenants.archive(t))
    } | {f"{r}/{ws}": q for q, r in small.items() for ws in ("inbox", "archive")}
    assert load_fixture.load_archives(n) == {
        tenants.inbox(t): tenants.archive(t) for t in range(n)
    } | {f"{r}/inbox": f"{r}/archive" for r in small.values()}
    assert load_fixture.load_grants(n) == {
        tenants.principal(t, side): (tenants.root(t),) for t in range(n) for side in tenants.SIDES
    } | {tenants.quota_principal(q, s): (r,) for q, r in small.items() for s in tenants.SIDES}
    assert {
        q: (own.notes, own.bytes, own.writes) for q, own in load_fixture.load_quotas().items()
    } == tenants.SMALL_QUOTAS
    assert sorted(set(load_fixture.load_workspaces(n).values())) == tenants.tenants(n)
    assert load_fixture.LOAD_TENANTS == tenants.LOAD_TENANTS


def _modules_imported(importtime_log: str) -> Counter[str]:
    """Module -> how many processes imported it, from ``-X importtime`` lines
    (``import time: <self> | <cumulative> | <indent><module>``)."""
    out: Counter[str] = Counter()
    for line in importtime_log.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name and name != "imported package":
                out[name] += 1
    return out


@pytest.mark.slow
async def test_serve_and_its_node_process_import_nothing_of_the_load_generator(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}  # the child inherits it: both log
    log = tmp_path / "importtime.log"
    argv = [sys.executable, "-c", "from cluster.cli import main; main()"]
    serve = ["serve", "--demo", "--nodes", "1", "--port", "0", "--processes"]
    with log.open("w") as err:
        proc = await trio.lowlevel.open_process(
            [*argv, *serve], stdout=subprocess.PIPE, stderr=err, env=env, cwd=ROOT
        )
        try:
            assert proc.stdout is not None
            url = await _first_line(proc.stdout)
            assert url.startswith("http://127.0.0.1:"), url
            await _exercise(url)
        finally:
            proc.send_signal(signal.SIGINT)
            with trio.move_on_after(30) as waited:
                await proc.wait()
            if waited.cancelled_caught:
                proc.kill()
                await proc.wait()
    modules = _modules_imported(log.read_text())
    # Both processes logged (the parent and one node process each import the node's core) ...
    assert modules["nodes.protocol"] == 2, modules["nodes.protocol"]
    assert modules["nodes.http"] == 2
    # ... and neither loaded the load generator or an experiment.
    loaded = sorted(m for m in modules if _covered(m, FORBIDDEN_IN_NODE_PROCESS))
    assert not loaded, loaded
    # Nor a library of the simulation, report or benchmark extras: a base install serves. The
    # embedded store (fakeredis) runs in the serving parent only; the node reaches it by URL.
    extras = {m: modules[m] for m in EXTRA_LIBRARIES if modules[m]}
    assert not extras, extras
    assert modules["fakeredis"] == 1


async def _first_line(stream: trio.abc.ReceiveStream) -> str:
    """The first line the process prints (bounded in time: a node that never starts fails)."""
    line = b""
    with trio.fail_after(60):
        while not line.endswith(b"\n"):
            chunk = await stream.receive_some(1)
            if not chunk:
                break
            line += chunk
    return line.decode().strip()


async def _exercise(url: str) -> None:
    """Make the node run a real round 1 and a legacy handshake, so that anything it imports
    lazily while serving is imported too."""
    async with httpx.AsyncClient(timeout=30) as client:
        tokens = {principal: token for token, principal in DEMO_TOKENS.items()}
        transport = HttpTransport([url], tokens, client)
        args = {"workspaceUri": ALICE_NOTES, "title": "TPS report"}
        msg = request("tools/call", {"name": "notes_delete", "arguments": args})
        reply = await transport.send(0, "alice", msg)
        assert reply.body is not None
        assert reply.body["result"]["resultType"] == "input_required", reply.body
        legacy = await client.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "0"},
                },
            },
            headers={"authorization": f"Bearer {tokens['alice']}", "accept": ACCEPT},
        )
        assert legacy.status_code == 200, legacy.text
