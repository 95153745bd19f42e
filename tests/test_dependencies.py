"""Dependencies by role: every library the code imports is declared in pyproject.toml, a node and
``serve`` need only the base install, and a command whose extra is missing says which.

Layer: tests. Imports are read with the same walker as the import-direction test (every statement,
also inside functions); an import name is mapped to its distribution by the installed metadata.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from cluster.cli import EXIT_USAGE, EXTRAS, main
from tests.test_import_direction import ROOT, imported_modules

OURS = {"cluster", "loadgen", "nodes", "store", "tests"}

SERVE_FILES = (
    "nodes/serving/app.py",
    "nodes/serving/settings.py",
    "nodes/serving/demo.py",
    "nodes/serving/durability.py",
    "nodes/serving/load_fixture.py",
    "nodes/serving/process.py",
    "nodes/serving/http_server.py",
    "nodes/serving/operator.py",
    "cluster/serve.py",
    "cluster/stores.py",
)
"""What ``notes-cluster serve`` runs, besides nodes/ and store/. The CLI is left out: its
commands import their libraries when they run, each behind ``require_extra``; that serve loads
none of them is checked on a real process (tests/test_import_direction.py)."""

EMBEDDED_STORES = (
    "store/embedded.py",
    "store/simulation/memory_transport.py",
    "store/simulation/lean_redis.py",
    "store/simulation/lean_server.py",
)
"""The embedded stores (fakeredis: on a port, or in-process; the lean store's Lua VM) are the
``sim`` extra's: ``serve`` without ``--redis`` asks for it by name."""


def _name(requirement: str) -> str:
    """``"fakeredis[lua]>=2.28"`` -> ``"fakeredis"`` (normalized as the metadata spells it)."""
    name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """The base dependencies, and each extra's (``notes-cluster[x]`` in an extra brings x's)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = {_name(r) for r in project["dependencies"]}
    raw = project["optional-dependencies"]

    def closure(extra: str) -> set[str]:
        out: set[str] = set()
        for req in raw[extra]:
            if _name(req) == "notes-cluster":
                inner = re.search(r"\[(.*)\]", req)
                assert inner is not None, req
                for part in inner.group(1).split(","):
                    out |= closure(part.strip())
            else:
                out.add(_name(req))
        return out

    return base, {extra: closure(extra) for extra in raw}


def third_party(files: list[Path]) -> dict[str, list[str]]:
    """Distribution -> ``file:line`` of each import of it in ``files`` (stdlib and ours left
    out)."""
    dists = importlib.metadata.packages_distributions()
    out: dict[str, list[str]] = {}
    for file in files:
        rel = file.relative_to(ROOT)
        source = file.read_text(encoding="utf-8")
        for line, module in imported_modules(source, ".".join(rel.parent.parts)):
            top = module.split(".")[0]
            if top in OURS or top in sys.stdlib_module_names or top == "__future__":
                continue
            for dist in dists.get(top, [f"<no distribution provides {top}>"]):
                out.setdefault(_name(dist), []).append(f"{rel}:{line}")
    return out


def _files(*patterns: str) -> list[Path]:
    return sorted(f for p in patterns for f in ROOT.glob(p))


def test_every_library_the_code_imports_is_declared() -> None:
    base, extras = declared()
    everything = base.union(*extras.values())
    used = third_party(_files(*(f"{package}/**/*.py" for package in OURS - {"tests"})))
    undeclared = {dist: at for dist, at in used.items() if dist not in everything}
    assert not undeclared, undeclared


def test_the_tests_import_only_what_the_test_extra_installs() -> None:
    base, extras = declared()
    used = third_party(_files("tests/*.py"))
    undeclared = {dist: at for dist, at in used.items() if dist not in base | extras["test"]}
    assert not undeclared, undeclared


def test_a_node_and_serve_need_only_the_base_install() -> None:
    base, _ = declared()
    files = _files("nodes/**/*.py", "store/**/*.py", *SERVE_FILES)
    used = third_party([f for f in files if f not in {ROOT / e for e in EMBEDDED_STORES}])
    beyond = {dist: at for dist, at in used.items() if dist not in base}
    assert not beyond, beyond
    assert {"matplotlib", "fakeredis", "hdrhistogram", "rich", "mcp", "httpx"}.isdisjoint(base)


@pytest.mark.parametrize(
    ("argv", "extra", "hidden"),
    [
        (["simulate", "--flows", "1"], "sim", "matplotlib"),
        (["loadgen", "--demo", "--target", "http://127.0.0.1:1/mcp"], "sim", "rich"),
        (["bench", "--quick"], "bench", "mcp"),
        (["serve", "--demo", "--nodes", "1"], "sim", "fakeredis"),
        (["failover-experiment"], "sim", "hdrh"),
    ],
)
def test_a_command_whose_extra_is_missing_names_the_extra_instead_of_a_traceback(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], extra: str, hidden: str
) -> None:
    monkeypatch.setitem(sys.modules, hidden, None)  # as if not installed: find_spec says None
    out = CliRunner().invoke(main, argv)
    assert out.exit_code == EXIT_USAGE, out.output
    assert f"pip install 'notes-cluster[{extra}]'" in out.output
    assert hidden in out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)


def test_the_cli_knows_the_modules_of_each_extra_it_names() -> None:
    _, extras = declared()
    dists = importlib.metadata.packages_distributions()
    for extra, modules in EXTRAS.items():
        provided = {_name(d) for m in modules for d in dists.get(m, [])}
        # lupa comes with fakeredis[lua]; every other module's distribution is listed in the extra
        assert provided - {"lupa"} <= extras[extra], (extra, provided)
